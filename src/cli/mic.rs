//! `pulsed mic`: live transcription from the default microphone, or from a
//! WAV fed at real-time pace through the same path (`--input F --realtime`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use pulsed::asr::{Decoding, Mode, Recognizer, RecognizerOptions};
use pulsed::live::{feed_wav_realtime, LiveEvent, LiveOptions, LiveTranscriber};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Feed this WAV instead of the microphone.
    #[arg(long)]
    input: Option<PathBuf>,
    /// With --input: deliver the audio at real-time pace, as a sound card would.
    #[arg(long, requires = "input")]
    realtime: bool,
    #[arg(long)]
    model: Option<PathBuf>,
    /// Input samples per pulse (a multiple of 640).
    #[arg(long, default_value_t = 2560)]
    pulse: usize,
    /// CTC prefix beam search of this width, with the model's word language
    /// model (greedy when absent); partial text may then revise itself, and
    /// each final line is the best hypothesis of its utterance.
    #[arg(long)]
    beam: Option<usize>,
    #[command(flatten)]
    lm: super::lm::LmArgs,
    /// Output format: text or jsonl.
    #[arg(long, default_value = "text")]
    format: pulsed::output::Format,
    /// Seconds of trailing silence (CTC blanks) that end an utterance.
    #[arg(long, default_value_t = 0.6)]
    end_silence: f64,
    /// End utterances on CTC blanks alone, without Silero VAD.
    #[arg(long)]
    no_vad: bool,
    /// Where the encoder runs: a GPU when one is usable (auto), or the one named.
    #[arg(long, value_enum, default_value = "auto")]
    device: super::device::Device,
    /// How the GPU stores weights and activations.
    #[arg(long, value_enum, default_value = "f32")]
    precision: super::device::Precision,
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    use pulsed::output::Format;
    if !matches!(a.format, Format::Text | Format::Jsonl) {
        return Err(format!("pulsed mic writes text or jsonl, not {}", a.format));
    }
    let opts = RecognizerOptions {
        mode: Mode::Streamed { pulse: a.pulse },
        decoding: a
            .beam
            .map_or(Decoding::Greedy, |width| Decoding::Beam { width }),
    };
    let engine = a.device.engine(a.precision)?;
    let rec = Recognizer::open(super::model_dir(a.model.clone()), opts)
        .map_err(|e| e.to_string())?
        .with_engine(engine);
    let rec = Arc::new(a.lm.apply(rec)?);
    let rate = rec.sample_rate();
    let live = LiveOptions {
        end_silence_s: a.end_silence,
        ..LiveOptions::default()
    };
    let (mut lt, mut input) = LiveTranscriber::start(rec, live).map_err(|e| e.to_string())?;
    let feeder = match a.input {
        Some(path) => {
            let realtime = a.realtime;
            std::thread::spawn(move || {
                feed_wav_realtime(&path, rate, &mut input, 20, realtime)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        }
        None => return microphone(lt, input, rate, a.format == Format::Jsonl),
    };
    let mut printer = Printer::new(a.format == Format::Jsonl);
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
    printer.summary();
    fed?;
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
    _: bool,
) -> Result<ExitCode, String> {
    Err("this build has no microphone support: rebuild with `--features mic` (needs `apt-get install libasound2-dev pkg-config`), or use --input FILE.wav --realtime".into())
}

#[cfg(feature = "mic")]
fn microphone(
    lt: LiveTranscriber,
    input: pulsed::live::AudioInput,
    rate: u32,
    jsonl: bool,
) -> Result<ExitCode, String> {
    let _stream = pulsed::live::capture_default_input(input, rate).map_err(|e| e.to_string())?;
    eprintln!("listening on the default input device; Ctrl-C to stop");
    let mut printer = Printer::new(jsonl);
    for ev in lt.events().iter() {
        printer.show(&ev, lt.started());
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints events and measures, for each final word, the time from its end
/// in the audio (its last CTC frame) to the moment its complete text first
/// appeared (in a partial or the final line).
struct Printer {
    jsonl: bool,
    tty: bool,
    latencies_ms: Vec<f64>,
    /// Words of the current utterance: text as last shown, and when that text first appeared.
    shown: Vec<(String, Instant)>,
    last_text: String,
    overruns: u64,
    failed: bool,
}

impl Printer {
    fn new(jsonl: bool) -> Printer {
        Printer {
            jsonl,
            tty: std::io::stderr().is_terminal(),
            latencies_ms: Vec::new(),
            shown: Vec::new(),
            last_text: String::new(),
            overruns: 0,
            failed: false,
        }
    }

    fn show(&mut self, ev: &LiveEvent, started: Option<Instant>) {
        match ev {
            LiveEvent::Partial { text, words, at } | LiveEvent::Final { text, words, at } => {
                let fin = matches!(ev, LiveEvent::Final { .. });
                if !fin && *text == self.last_text {
                    return;
                }
                self.last_text.clone_from(text);
                for (i, w) in words.iter().enumerate() {
                    match self.shown.get_mut(i) {
                        Some(s) if s.0 == w.text => {}
                        Some(s) => *s = (w.text.clone(), *at),
                        None => self.shown.push((w.text.clone(), *at)),
                    }
                }
                let mut lat = Vec::new();
                if let (true, Some(t0)) = (fin, started) {
                    for (w, (_, seen)) in words.iter().zip(&self.shown) {
                        lat.push((seen.duration_since(t0).as_secs_f64() - w.end_s) * 1000.0);
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
                    if fin {
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
                    self.shown.clear();
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
        let mut l = self.latencies_ms.clone();
        if l.is_empty() {
            eprintln!("latency: no words recognised");
            return;
        }
        l.sort_by(f64::total_cmp);
        let q = |p: f64| l[((l.len() - 1) as f64 * p).round() as usize];
        eprintln!(
            "latency from a word's end in the audio to its text: median {:.0} ms, p90 {:.0} ms, max {:.0} ms over {} words; overruns: {} samples dropped",
            q(0.5),
            q(0.9),
            l[l.len() - 1],
            l.len(),
            self.overruns
        );
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}
