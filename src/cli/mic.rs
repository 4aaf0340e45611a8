//! `pulsed mic`: live transcription from the default microphone, or from a
//! WAV fed at real-time pace through the same path (`--input F --realtime`),
//! with the default streaming Whisper student (its text streams with its
//! encoder), another Whisper checkpoint (`--model whisper-tiny.en`:
//! LocalAgreement over a rolling buffer) or the shipped conformer
//! (`--model pulsed-en-ctc`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use pulsed::asr::{Family, LiveSettings, Mode, Transcriber, TranscriberOptions, WhisperOptions};
use pulsed::live::{feed_wav_realtime, LiveEvent, LiveTranscriber, WhisperLiveOptions};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Feed this audio file instead of the microphone; `-` reads standard
    /// input as it arrives (`arecord -f S16_LE -r 16000 -t wav - | pulsed mic --input -`).
    #[arg(long)]
    input: Option<PathBuf>,
    /// With --input: refuse a file that ends before its header says (by
    /// default the audio that is there is used, with a warning).
    #[arg(long, requires = "input")]
    strict: bool,
    /// With --input: deliver the audio at real-time pace, as a sound card would.
    #[arg(long, requires = "input")]
    realtime: bool,
    /// A short name or a folder, as `transcribe --model` (`pulsed-en-ctc`:
    /// the shipped conformer). Default: whisper-base-streaming-640ms with
    /// `--language en`, fetched on first use with Silero VAD.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Input samples per pulse (a multiple of 640).
    #[arg(long, default_value_t = 2560)]
    pulse: usize,
    /// CTC prefix beam search of this width, with the model's word language
    /// model (greedy when absent); partial text may then revise itself, and
    /// each final line is the best hypothesis of its utterance. Whisper: the
    /// beam of each decoding (default 5; 1 is greedy).
    #[arg(long)]
    beam: Option<usize>,
    #[command(flatten)]
    lm: super::lm::LmArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: LiveFormat,
    /// Seconds of trailing silence that end an utterance (CTC blanks; with
    /// Whisper, Silero VAD's silence).
    #[arg(long, default_value_t = 0.6)]
    end_silence: f64,
    /// End utterances on CTC blanks alone, without Silero VAD (Whisper:
    /// decode all the audio, silence too, as one utterance).
    #[arg(long)]
    no_vad: bool,
    /// Whisper: seconds of new audio between two decodings of the buffer.
    #[arg(long, default_value_t = 1.0)]
    step: f64,
    /// Whisper: a buffer longer than this (seconds) is cut at the end of a
    /// committed segment.
    #[arg(long, conflicts_with = "ctc", default_value_t = 15.0)]
    trim: f64,
    #[command(flatten)]
    decode: super::whisper::DecodeArgs,
    /// Whisper with a chunked (streaming) checkpoint: re-encode the whole
    /// buffer at every decoding instead of streaming the encoder.
    #[arg(long)]
    window_encoder: bool,
    #[command(flatten)]
    policy: crate::cli::text_policy::PolicyArgs,
    /// Whisper: at each end of speech the buffer decoded once more, as a
    /// whole, replaces the words agreed on meanwhile as the final line
    /// (committed words of the partial lines may change). Default: on where
    /// the encoder streams (a chunked checkpoint); `--second-pass=false`
    /// keeps the agreed words.
    #[arg(long, conflicts_with = "ctc", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    second_pass: Option<bool>,
    /// Whisper: partial decodings greedy at temperature 0 (the final
    /// decoding keeps --beam; words agreed before a cut of the buffer, in an
    /// utterance longer than --trim, stay in the final line). Default: on
    /// where a second pass makes the final lines.
    #[arg(long, conflicts_with = "ctc", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    greedy_partials: Option<bool>,
    /// A chunked Whisper checkpoint's CTC head over its streamed encoder
    /// instead of the Whisper decoder: text after every chunk, a final line
    /// after `--end-silence` of blanks (greedy; `--beam N` with the
    /// language-model flags).
    #[arg(long)]
    ctc: bool,
    /// Where the encoder runs: a GPU when one is usable (auto), or the one named.
    #[arg(long, value_enum, default_value = "auto")]
    device: super::device::Device,
    /// How weights are stored: f32 or bf16 on the GPU; int8 (Whisper) on
    /// the CPU.
    #[arg(long, value_enum, default_value = "f32")]
    precision: super::device::Precision,
    /// GPU f32: let matrix products use TF32 tensor cores (faster; each
    /// product to about 1e-3 relative instead of f32's 1e-6).
    #[arg(long)]
    tf32: bool,
}

/// What `mic` writes: lines as speech comes (subtitles need a whole file's timing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LiveFormat {
    Text,
    Jsonl,
}

pub fn run(mut a: Args) -> Result<ExitCode, String> {
    pulsed::audio::set_truncation(if a.strict {
        pulsed::audio::Truncation::Refuse
    } else {
        pulsed::audio::Truncation::Warn
    });
    // a file that cannot be read is refused in one line, before the model
    // is fetched, opened or described (standard input is read once, later)
    if let Some(path) = a.input.as_ref().filter(|p| p.as_os_str() != "-") {
        pulsed::audio::WavStream::open(path, 16_000).map_err(|e| e.to_string())?;
    }
    a.model = super::chosen_model(a.model.take(), a.ctc, !a.no_vad, &mut a.decode.language)?;
    Family::of(a.model.as_deref(), a.ctc).map_err(|e| e.to_string())?;
    let opts = TranscriberOptions {
        mode: Mode::Streamed { pulse: a.pulse },
        beam: a.beam,
        lm: a.lm.choice(),
        ctc_head: a.ctc,
        whisper: WhisperOptions {
            decoding: a.decode.decoding(),
            // live sessions weigh the VAD's speech themselves (--no-vad)
            speech_gate: false,
            ..WhisperOptions::default()
        },
        int8: a.precision.int8(),
    };
    let engine = a.device.engine_tf32(a.precision, a.tf32)?;
    let t = Transcriber::open(a.model.as_deref(), &opts, engine).map_err(|e| e.to_string())?;
    let mut whisper = WhisperLiveOptions {
        step_s: a.step,
        // a file fed as fast as possible is decoded at every step, as if
        // compute were free; live audio is decoded where it stands
        paced: a.input.is_some() && !a.realtime,
        stream_encoder: !a.window_encoder,
        second_pass: a.second_pass,
        greedy_partials: a.greedy_partials,
        ..WhisperLiveOptions::default()
    }
    .with_trim(a.trim);
    a.decode.apply(a.beam, &mut whisper.decode)?;
    a.policy.apply(&mut whisper);
    let settings = LiveSettings {
        end_silence_s: a.end_silence,
        vad: !a.no_vad,
        whisper,
    };
    let live = t.live(settings).map_err(|e| e.to_string())?;
    if let Some(what) = live.describe() {
        eprintln!("pulsed: {what}");
    }
    let (lt, input) = live.start().map_err(|e| e.to_string())?;
    drive(lt, input, t.sample_rate(), &a, live.commits_words())
}

/// Feeds the input (a WAV, or the microphone) and prints the events.
fn drive(
    mut lt: LiveTranscriber,
    mut input: pulsed::live::AudioInput,
    rate: u32,
    a: &Args,
    committed_latency: bool,
) -> Result<ExitCode, String> {
    let jsonl = a.format == LiveFormat::Jsonl;
    let feeder = match a.input.clone() {
        Some(path) => {
            let realtime = a.realtime;
            std::thread::spawn(move || {
                feed_wav_realtime(&path, rate, &mut input, 20, realtime)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        }
        None => {
            let printer = Printer::new(jsonl, true, committed_latency);
            return microphone(lt, input, rate, printer);
        }
    };
    let mut printer = Printer::new(jsonl, a.realtime, committed_latency);
    while !feeder.is_finished() {
        if let Ok(ev) = lt
            .events()
            .recv_timeout(std::time::Duration::from_millis(20))
        {
            printer.show(&ev, lt.started());
        }
    }
    let fed = feeder
        .join()
        .unwrap_or_else(|_| Err("the audio feeder thread panicked".into()));
    lt.finish(); // drains the ring buffer and flushes the stream's tail
    while let Ok(ev) = lt.events().try_recv() {
        printer.show(&ev, lt.started());
    }
    fed?;
    printer.summary();
    Ok(if printer.failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(not(feature = "mic"))]
fn microphone(
    _: LiveTranscriber,
    _: pulsed::live::AudioInput,
    _: u32,
    _: Printer,
) -> Result<ExitCode, String> {
    Err("this build has no microphone support: rebuild with `--features mic` (needs `apt-get install libasound2-dev pkg-config`), or use --input FILE.wav --realtime".into())
}

#[cfg(feature = "mic")]
fn microphone(
    lt: LiveTranscriber,
    input: pulsed::live::AudioInput,
    rate: u32,
    mut printer: Printer,
) -> Result<ExitCode, String> {
    let _stream = pulsed::live::capture_default_input(input, rate).map_err(|e| e.to_string())?;
    eprintln!("listening on the default input device; Ctrl-C to stop");
    for ev in lt.events().iter() {
        printer.show(&ev, lt.started());
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints events and measures, for each final word, the time from its end
/// in the audio (its last CTC frame, or Whisper's word timestamp) to the
/// moment its complete text first appeared (in a partial or the final
/// line), or, with `committed_latency`, first appeared committed (a stable
/// word of a partial, or the final line).
struct Printer {
    jsonl: bool,
    tty: bool,
    /// Audio arrives at real-time pace (a microphone, `--realtime`):
    /// latencies mean something.
    timed: bool,
    committed_latency: bool,
    latencies_ms: Vec<f64>,
    /// From each final word's end to when its text was first shown where
    /// it stayed.
    shown_ms: Vec<f64>,
    /// Words of each utterance not yet final (an earlier one's line may
    /// wait for its second pass while the next is shown): text as last
    /// shown, when that text first appeared, and when it first appeared
    /// committed.
    shown: std::collections::BTreeMap<u64, Vec<(String, Instant, Option<Instant>)>>,
    last_text: String,
    overruns: u64,
    failed: bool,
}

impl Printer {
    fn new(jsonl: bool, timed: bool, committed_latency: bool) -> Printer {
        Printer {
            jsonl,
            tty: std::io::stderr().is_terminal(),
            timed,
            committed_latency,
            latencies_ms: Vec::new(),
            shown_ms: Vec::new(),
            shown: std::collections::BTreeMap::new(),
            last_text: String::new(),
            overruns: 0,
            failed: false,
        }
    }

    fn show(&mut self, ev: &LiveEvent, started: Option<Instant>) {
        match ev {
            LiveEvent::Partial {
                text,
                words,
                utterance,
                at,
                ..
            }
            | LiveEvent::Final {
                text,
                words,
                utterance,
                at,
            } => {
                let (fin, stable) = match ev {
                    LiveEvent::Partial { stable, .. } => (false, *stable),
                    _ => (true, words.len()),
                };
                if !fin && *text == self.last_text {
                    return;
                }
                self.last_text.clone_from(text);
                let shown = self.shown.entry(*utterance).or_default();
                for (i, w) in words.iter().enumerate() {
                    let s = match shown.get_mut(i) {
                        Some(s) if s.0 == w.text => s,
                        Some(s) => {
                            *s = (w.text.clone(), *at, None);
                            s
                        }
                        None => {
                            shown.push((w.text.clone(), *at, None));
                            shown.last_mut().expect("just pushed")
                        }
                    };
                    if i < stable && s.2.is_none() {
                        s.2 = Some(*at);
                    }
                }
                let mut lat = Vec::new();
                if let (true, true, Some(t0)) = (fin, self.timed, started) {
                    let ms = |t: &Instant, w: &pulsed::decode::Word| {
                        (t.duration_since(t0).as_secs_f64() - w.end_s) * 1000.0
                    };
                    for (w, (_, seen, committed)) in words.iter().zip(shown.iter()) {
                        let t = match committed {
                            Some(c) if self.committed_latency => c,
                            _ => seen,
                        };
                        lat.push(ms(t, w));
                        self.shown_ms.push(ms(seen, w));
                    }
                    self.latencies_ms.extend(&lat);
                }
                let (start, end) = (
                    words.first().map_or(0.0, |w| w.start_s),
                    words.last().map_or(0.0, |w| w.end_s),
                );
                if self.jsonl {
                    let kind = if fin { "final" } else { "partial" };
                    let mut line = serde_json::json!({"type": kind, "text": text, "start": round3(start), "end": round3(end)});
                    if !fin && self.committed_latency {
                        line["stable"] = stable.into();
                    }
                    if fin {
                        let w: Vec<_> = words
                            .iter()
                            .map(|w| serde_json::json!({"word": w.text, "start": round3(w.start_s), "end": round3(w.end_s)}))
                            .collect();
                        line["words"] = w.into();
                    }
                    if fin && self.timed {
                        line["word_latency_ms"] =
                            lat.iter().map(|v| v.round()).collect::<Vec<_>>().into();
                    }
                    println!("{line}");
                } else if fin {
                    if self.tty {
                        eprint!("\r\x1b[2K");
                    }
                    println!("[{start:7.2} -> {end:7.2}] {text}");
                } else if self.tty {
                    eprint!("\r\x1b[2K... {text}");
                    let _ = std::io::stderr().flush();
                }
                if fin {
                    self.shown.remove(utterance);
                    self.last_text.clear();
                }
            }
            LiveEvent::Overrun { dropped_total } => {
                self.overruns = *dropped_total;
                eprintln!("pulsed: overrun: inference fell behind, {dropped_total} samples dropped so far");
            }
            LiveEvent::Failed(e) => {
                self.failed = true;
                eprintln!("pulsed: {e}");
            }
        }
    }

    fn summary(&self) {
        if !self.timed {
            eprintln!("latency: not measured (the input was not fed at real-time pace; --realtime measures it)");
            return;
        }
        if self.latencies_ms.is_empty() {
            eprintln!("latency: no words recognised");
            return;
        }
        let what = if self.committed_latency {
            "committed text"
        } else {
            "text"
        };
        let (med, p90, max) = spread(&self.latencies_ms);
        eprintln!(
            "latency from a word's end in the audio to its {what}: median {med:.0} ms, p90 {p90:.0} ms, max {max:.0} ms over {} words; overruns: {} samples dropped",
            self.latencies_ms.len(),
            self.overruns
        );
        if self.committed_latency {
            let (med, p90, max) = spread(&self.shown_ms);
            eprintln!(
                "latency from a word's end in the audio to its text first shown where it stayed: median {med:.0} ms, p90 {p90:.0} ms, max {max:.0} ms"
            );
        }
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Median, 90th percentile and maximum of `values` (not empty).
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut l = values.to_vec();
    l.sort_by(f64::total_cmp);
    let q = |p: f64| l[((l.len() - 1) as f64 * p).round() as usize];
    (q(0.5), q(0.9), q(1.0))
}
