//! `transcribe --model whisper-*`: a Whisper checkpoint on the batch path.
//! Each worker builds its own network (graphs and decoder cache) and
//! transcribes whole recordings with faster-whisper's decoding; the output
//! goes through the same writers as the shipped model's.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pulsed::audio::WavStream;
use pulsed::batch::{one_by_one, Control, FileWorker, Group, Outcome};
use pulsed::decode::{Transcript, Word};
use pulsed::engine::Engine;
use pulsed::vad::Vad;
use pulsed::whisper::decode::{
    transcribe_batched, transcribe_batched_many, transcribe_features, transcribe_many,
    AlignedBackend, BatchedOptions, DecodeOptions, InitialPrompt, Network, Recording, Segment,
    TranscriptionInfo, WindowPadding,
};
use pulsed::whisper::features::FeatureStream;
use pulsed::whisper::{GenerationConfig, Task, WhisperModel, WhisperTokenizer};
use serde_json::{json, Map, Value};

use pulsed::output::Format;

/// Whisper's own knobs on `transcribe` (ignored by the shipped model).
#[derive(clap::Args, Debug, Clone)]
pub struct WhisperArgs {
    #[command(flatten)]
    pub decode: DecodeArgs,
    /// Whisper: text the first window is conditioned on (names, spellings).
    #[arg(long)]
    pub initial_prompt: Option<String>,
    /// Whisper: do not condition a window on the text before it.
    #[arg(long)]
    pub no_condition: bool,
    /// Whisper: decode without timestamp tokens (segments are whole windows).
    #[arg(long)]
    pub without_timestamps: bool,
    /// Whisper: word times from the alignment heads (on by default for
    /// jsonl, srt and vtt; `--word-timestamps false` turns them off).
    #[arg(long)]
    pub word_timestamps: Option<bool>,
    /// Whisper: faster-whisper's batched pipeline: cut the recording on
    /// Silero VAD speech into chunks of at most 30 s, encode `--batch-size`
    /// chunks per encoder call and decode them together (no timestamps,
    /// no previous-text conditioning, unless asked for).
    #[arg(long)]
    pub vad: bool,
    /// Whisper: windows per encoder call, decoded together. With `--vad`,
    /// the chunks of a recording (default 8); without, the first windows
    /// of this many recordings (default 1: on the H100, more workers gain
    /// more than larger batches, and on the CPU batches are slower). A
    /// recording's text does not depend on it.
    #[arg(long)]
    pub batch_size: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PaddingArg {
    Silence,
    Zeros,
}

impl From<PaddingArg> for WindowPadding {
    fn from(p: PaddingArg) -> WindowPadding {
        match p {
            PaddingArg::Silence => WindowPadding::Silence,
            PaddingArg::Zeros => WindowPadding::Zeros,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TaskArg {
    Transcribe,
    Translate,
}

impl From<TaskArg> for Task {
    fn from(t: TaskArg) -> Task {
        match t {
            TaskArg::Transcribe => Task::Transcribe,
            TaskArg::Translate => Task::Translate,
        }
    }
}

/// The decoding flags `transcribe`, `eval` and `mic` share.
#[derive(clap::Args, Debug, Clone)]
pub struct DecodeArgs {
    /// Whisper: spoken language code (e.g. `en`, `de`); detected when absent
    /// (multilingual checkpoints).
    #[arg(long)]
    pub language: Option<String>,
    /// Whisper: transcribe, or translate into English.
    #[arg(long, value_enum, default_value = "transcribe")]
    pub task: TaskArg,
    /// Whisper: decode at temperature 0 only (no fallback to sampling when a
    /// window's text is too repetitive or unlikely): each decoding's time is
    /// bounded, for slow machines.
    #[arg(long)]
    pub no_fallback: bool,
    /// Whisper: what fills a window after the audio's end: `silence`
    /// (what Whisper was trained on, and transformers' way) or `zeros`
    /// (faster-whisper's, to reproduce its output). Default: what the
    /// checkpoint asks for (`pulsed_window_padding` in its config.json),
    /// else silence.
    #[arg(long, value_enum)]
    pub padding: Option<PaddingArg>,
}

impl DecodeArgs {
    /// The flags applied to `opts`, with `beam` (`None` keeps its width; 0
    /// is refused).
    pub fn apply(&self, beam: Option<usize>, opts: &mut DecodeOptions) -> Result<(), String> {
        match beam {
            Some(0) => return Err("--beam must be at least 1".into()),
            Some(b) => opts.beam_size = b,
            None => {}
        }
        opts.language = self.language.clone();
        opts.task = self.task.into();
        if self.no_fallback {
            opts.temperatures = vec![0.0];
        }
        opts.padding = self.padding.map(WindowPadding::from);
        Ok(())
    }
}

/// Whether `--model` names a Whisper checkpoint.
pub fn is_whisper(model: Option<&Path>) -> bool {
    model
        .and_then(|m| m.to_str())
        .is_some_and(pulsed::whisper::folder::is_whisper)
}

/// Everything the workers share: the loaded checkpoint and how to decode.
pub struct WhisperJob {
    model: Arc<WhisperModel>,
    tokenizer: Arc<WhisperTokenizer>,
    gen: Arc<GenerationConfig>,
    opts: DecodeOptions,
    /// `--vad`: the batched pipeline's settings and its voice detector.
    batched: Option<(BatchedOptions, Arc<Vad>)>,
    /// Windows per encoder call.
    batch_size: usize,
    /// Files a worker takes at once.
    group_files: usize,
    /// Where the networks run.
    engine: Engine,
    /// Networks ready for workers: the one built while checking the
    /// folder, and those [`WhisperJob::warm_up`] made.
    spare: Mutex<Vec<Net>>,
}

/// One worker's network, on whichever engine.
type Net = Box<dyn AlignedBackend + Send>;

impl WhisperJob {
    /// Loads the checkpoint `--model` names and turns the arguments into
    /// decoding options (`beam`: `None` is faster-whisper's default of 5);
    /// its networks run on `engine`.
    pub fn open(
        model: &Path,
        beam: Option<usize>,
        format: Format,
        a: &WhisperArgs,
        engine: Engine,
    ) -> Result<WhisperJob, String> {
        let spec = model.to_str().ok_or("--model: not a UTF-8 path")?;
        let model = WhisperModel::open(spec).map_err(|e| e.to_string())?;
        let tokenizer = WhisperTokenizer::from_file(&model.dir.join("tokenizer.json"))
            .map_err(|e| e.to_string())?;
        let gen = GenerationConfig::load(&model.dir).map_err(|e| e.to_string())?;
        let mut opts = if a.vad {
            BatchedOptions::decode_defaults()
        } else {
            DecodeOptions::default()
        };
        a.decode.apply(beam, &mut opts)?;
        opts.initial_prompt = a.initial_prompt.clone().map(InitialPrompt::Text);
        if !a.vad {
            opts.condition_on_previous_text = !a.no_condition;
        }
        opts.without_timestamps |= a.without_timestamps;
        let on_cpu = matches!(engine, Engine::Cpu);
        let batch_size = match a.batch_size {
            Some(0) => return Err("--batch-size must be at least 1".into()),
            Some(n) => n,
            None if a.vad => BatchedOptions::default().batch_size,
            // measured (gpu-notes §14): -j 8 one file at a time gave 357-424
            // audio s/s at beam 5 on the H100, 8 files at a time 189-263
            None => 1,
        };
        let batched = match a.vad {
            true => {
                let vad = Vad::load_default().map_err(|e| {
                    format!("--vad needs Silero VAD (bash scripts/fetch_silero.sh): {e}")
                })?;
                let b = BatchedOptions {
                    batch_size,
                    ..BatchedOptions::default()
                };
                Some((b, Arc::new(vad)))
            }
            false => None,
        };
        opts.word_timestamps = a.word_timestamps.unwrap_or(format != Format::Text);
        // building the graphs checks every weight's shape: a bad folder is
        // refused here, once, rather than by every file
        let first = pulsed::whisper::network(&model, &engine).map_err(|e| e.to_string())?;
        Ok(WhisperJob {
            model: Arc::new(model),
            tokenizer: Arc::new(tokenizer),
            gen: Arc::new(gen),
            opts,
            batched,
            batch_size,
            // the CPU decodes no faster in larger batches (realdev, -j 2:
            // 20.2 s against 12.7 s with --vad when workers took 8 files)
            group_files: if a.vad && on_cpu { 1 } else { batch_size },
            engine,
            spare: Mutex::new(vec![first]),
        })
    }

    /// One worker's network.
    pub fn worker(&self) -> pulsed::Result<WhisperWorker> {
        let spare = self.spare.lock().ok().and_then(|mut f| f.pop());
        let net = match spare {
            Some(net) => net,
            None => pulsed::whisper::network(&self.model, &self.engine)?,
        };
        Ok(WhisperWorker {
            batched: self.batched.clone(),
            batch_size: self.batch_size,
            group_files: self.group_files,
            net,
            tokenizer: self.tokenizer.clone(),
            gen: self.gen.clone(),
            opts: self.opts.clone(),
        })
    }

    /// Makes `workers` networks at once and runs each over `files`
    /// (untimed; each worker as it would take them), so that the workers of
    /// a run that follows find their runners planned and their graphs
    /// captured: a throughput figure taken after a warm-up pass, as peers
    /// report theirs. A file that fails fails the warm-up.
    pub fn warm_up(&self, workers: usize, files: &[PathBuf]) -> Result<(), String> {
        let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        let warmed = std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    let paths = &paths;
                    s.spawn(move || -> Result<Net, String> {
                        let mut w = self.worker().map_err(|e| e.to_string())?;
                        let control = Control::new();
                        for o in w.transcribe_group(paths, &control, &mut |_, _| {}) {
                            if let Outcome::Failed(e) = o {
                                return Err(format!("warm-up: {e}"));
                            }
                        }
                        Ok(w.net)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("warm-up: a worker panicked".into()))
                })
                .collect::<Result<Vec<Net>, String>>()
        })?;
        self.spare
            .lock()
            .map_err(|_| "warm-up: a worker panicked".to_string())?
            .extend(warmed);
        Ok(())
    }

    /// Files a worker takes at once.
    pub fn group_files(&self) -> usize {
        self.group_files
    }

    /// What runs where, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} ({} layers, d {}), beam {}, windows padded with {}, on {}",
            self.model.dir.display(),
            self.model.config.encoder_layers,
            self.model.config.d_model,
            self.opts.beam_size,
            match self.opts.padding.unwrap_or(self.model.config.padding()) {
                WindowPadding::Zeros => "zeros",
                WindowPadding::Silence => "silence",
            },
            super::device::describe(&self.engine)
        )
    }
}

/// One worker: its network plus the shared text side.
pub struct WhisperWorker {
    batched: Option<(BatchedOptions, Arc<Vad>)>,
    /// Windows per encoder call.
    batch_size: usize,
    /// Recordings taken at once (their first windows, or with `--vad`
    /// their chunks, decoded together).
    group_files: usize,
    net: Net,
    tokenizer: Arc<WhisperTokenizer>,
    gen: Arc<GenerationConfig>,
    opts: DecodeOptions,
}

/// Stops a transcription from inside its segment callback.
const STOPPED: &str = "stopped";
/// The most bytes of WAV a worker holds for one group (as features, or
/// samples with `--vad`): about 35 minutes of 16 kHz 16-bit audio.
const GROUP_BYTES: u64 = 64 << 20;

impl FileWorker for WhisperWorker {
    fn group(&self) -> Group {
        Group {
            files: self.group_files,
            bytes: GROUP_BYTES,
        }
    }

    fn transcribe_group(
        &mut self,
        paths: &[&Path],
        control: &Control,
        progress: &mut dyn FnMut(usize, f64),
    ) -> Vec<Outcome> {
        if paths.len() == 1 {
            return one_by_one(self, paths, control, progress);
        }
        self.transcribe_together(paths, control, progress)
    }

    fn transcribe(
        &mut self,
        path: &Path,
        control: &Control,
        progress: &mut dyn FnMut(f64),
    ) -> Outcome {
        let (input, duration_s) = match self.read(path, control) {
            Ok(Some(got)) => got,
            Ok(None) => return Outcome::Cancelled,
            Err(e) => return Outcome::Failed(e),
        };
        let mut segments = Vec::new();
        let mut on_segment = |s: Segment| {
            if control.is_stopped() {
                return Err(pulsed::Error::Other(STOPPED.into()));
            }
            progress(s.end);
            segments.push(s);
            Ok(())
        };
        let net = if self.opts.word_timestamps {
            Network::Aligned(&mut *self.net)
        } else {
            Network::Plain(&mut *self.net)
        };
        let (tok, gen, opts) = (&self.tokenizer, &self.gen, &self.opts);
        let r = match &self.batched {
            Some((b, vad)) => {
                transcribe_batched(net, tok, gen, &input, opts, b, vad, &mut on_segment)
            }
            None => transcribe_features(net, tok, gen, &input, duration_s, opts, &mut on_segment),
        };
        match r {
            Ok(info) => {
                progress(duration_s);
                done(&segments, duration_s, &info)
            }
            Err(_) if control.is_stopped() => Outcome::Cancelled,
            Err(e) => Outcome::Failed(format!("{}: {e}", path.display())),
        }
    }
}

impl WhisperWorker {
    /// Several recordings at once: without `--vad` their first windows
    /// decoded together (`transcribe_many`), with it their chunks
    /// (`transcribe_batched_many`); a file that cannot be read fails alone.
    fn transcribe_together(
        &mut self,
        paths: &[&Path],
        control: &Control,
        progress: &mut dyn FnMut(usize, f64),
    ) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(paths.len());
        // (index in paths, features or samples, duration)
        let mut read: Vec<(usize, Vec<f32>, f64)> = Vec::new();
        for (k, path) in paths.iter().enumerate() {
            if control.is_stopped() {
                outcomes.push(Some(Outcome::Cancelled));
                continue;
            }
            match self.read(path, control) {
                Ok(Some((x, d))) => {
                    read.push((k, x, d));
                    outcomes.push(None);
                }
                Ok(None) => outcomes.push(Some(Outcome::Cancelled)),
                Err(e) => outcomes.push(Some(Outcome::Failed(e))),
            }
        }
        let mut segments: Vec<Vec<Segment>> = vec![Vec::new(); read.len()];
        let mut on_segment = |j: usize, s: Segment| {
            if control.is_stopped() {
                return Err(pulsed::Error::Other(STOPPED.into()));
            }
            progress(read[j].0, s.end);
            segments[j].push(s);
            Ok(())
        };
        let net = if self.opts.word_timestamps {
            Network::Aligned(&mut *self.net)
        } else {
            Network::Plain(&mut *self.net)
        };
        let (tok, gen, opts) = (&self.tokenizer, &self.gen, &self.opts);
        let r = match &self.batched {
            Some((b, vad)) => {
                let audio: Vec<&[f32]> = read.iter().map(|r| r.1.as_slice()).collect();
                transcribe_batched_many(net, tok, gen, &audio, opts, b, vad, &mut on_segment)
            }
            None => {
                let recordings: Vec<Recording> = read
                    .iter()
                    .map(|(_, f, d)| Recording {
                        features: f,
                        duration: *d,
                    })
                    .collect();
                transcribe_many(
                    net,
                    tok,
                    gen,
                    &recordings,
                    opts,
                    self.batch_size,
                    &mut on_segment,
                )
            }
        };
        match r {
            Ok(infos) => {
                for (((k, _, duration_s), segments), info) in read.iter().zip(&segments).zip(infos)
                {
                    progress(*k, *duration_s);
                    outcomes[*k] = Some(done(segments, *duration_s, &info));
                }
            }
            Err(_) if control.is_stopped() => {
                for (k, _, _) in &read {
                    outcomes[*k] = Some(Outcome::Cancelled);
                }
            }
            Err(e) => {
                let with = match read.len() {
                    1 => String::new(),
                    n => format!(" (decoded with {} other files)", n - 1),
                };
                for (k, _, _) in &read {
                    let why = format!("{}: {e}{with}", paths[*k].display());
                    outcomes[*k] = Some(Outcome::Failed(why));
                }
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or(Outcome::Cancelled))
            .collect()
    }

    /// The recording as this worker decodes it, with its length in
    /// seconds: with `--vad` its samples (the VAD needs all of them), else
    /// its features; `None` when stopped.
    fn read(&self, path: &Path, control: &Control) -> Result<Option<(Vec<f32>, f64)>, String> {
        match &self.batched {
            Some(_) => pulsed::audio::load_wav(path, 16_000)
                .map(|a| Some((a.samples, a.duration_s)))
                .map_err(|e| e.to_string()),
            None => Self::features(path, control, self.net.n_mels()),
        }
    }

    /// The recording's features, its WAV streamed through the front end
    /// (the audio is never held whole); `None` when stopped.
    fn features(
        path: &Path,
        control: &Control,
        n_mels: usize,
    ) -> Result<Option<(Vec<f32>, f64)>, String> {
        let mut wav = WavStream::open(path, 16_000).map_err(|e| e.to_string())?;
        let duration_s = wav.source_duration_s();
        let in_file = |e: pulsed::Error| format!("{}: {e}", path.display());
        let mut fs = FeatureStream::new(n_mels).map_err(in_file)?;
        let mut samples = 0usize;
        while let Some(chunk) = wav.next_chunk(1 << 16).map_err(|e| e.to_string())? {
            if control.is_stopped() {
                return Ok(None);
            }
            samples += chunk.len();
            fs.push(&chunk).map_err(in_file)?;
        }
        if samples == 0 {
            return Err(format!("{}: no audio (0 samples)", path.display()));
        }
        Ok(Some((fs.finish().map_err(in_file)?, duration_s)))
    }
}

/// A transcribed recording's outcome.
fn done(segments: &[Segment], duration_s: f64, info: &TranscriptionInfo) -> Outcome {
    let (transcript, extra) = to_transcript(segments, duration_s, &info.language);
    Outcome::Done {
        transcript,
        duration_s,
        extra,
    }
}

/// The text (segments joined, as faster-whisper's), the words when they
/// have times, and the segments and language as JSON-lines extras.
fn to_transcript(
    segments: &[Segment],
    duration_s: f64,
    language: &str,
) -> (Transcript, Map<String, Value>) {
    let text: String = segments.iter().map(|s| s.text.as_str()).collect();
    let words = segments
        .iter()
        .flat_map(|s| s.words.iter().flatten())
        .map(|w| Word {
            text: w.word.trim().to_string(),
            start_s: w.start,
            end_s: w.end,
            confidence: w.probability as f32,
        })
        .collect();
    let segs: Vec<Value> = segments
        .iter()
        .map(|s| {
            json!({
                "start": round3(s.start),
                "end": round3(s.end),
                "text": s.text.trim(),
                "avg_logprob": round3(s.avg_logprob),
                "no_speech_prob": round3(s.no_speech_prob),
                "compression_ratio": round3(s.compression_ratio),
                "temperature": s.temperature,
            })
        })
        .collect();
    let mut extra = Map::new();
    extra.insert("language".into(), json!(language));
    extra.insert("segments".into(), Value::Array(segs));
    let t = Transcript {
        text: text.trim().to_string(),
        words,
        duration_s,
    };
    (t, extra)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
