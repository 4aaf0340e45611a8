//! One Whisper worker of the file pool: its own network (graphs and
//! decoder cache) with the job's shared text side; whole recordings with
//! faster-whisper's decoding, one at a time or a group decoded together.

use std::path::Path;
use std::sync::Arc;

use super::speech_gate::{Heard, SpeechGate};
use crate::asr::Transcription;
use crate::audio::WavStream;
use crate::batch::{Control, FileWorker, Group, Job, Outcome};
use crate::models::whisper::decode::{
    transcribe_batched, transcribe_batched_many, transcribe_features, transcribe_many,
    AlignedBackend, BatchedOptions, DecodeOptions, Network, Recording, Segment,
};
use crate::models::whisper::features::FeatureStream;
use crate::models::whisper::{GenerationConfig, WhisperTokenizer};
use crate::vad::Vad;

/// One worker's network, on whichever engine.
pub(super) type Net = Box<dyn AlignedBackend + Send>;

/// One worker: its network plus the shared text side.
pub struct WhisperWorker {
    pub(super) batched: Option<(BatchedOptions, Arc<Vad>)>,
    /// No text where the VAD hears no speech.
    pub(super) gate: Option<SpeechGate>,
    /// Windows per encoder call.
    pub(super) batch_size: usize,
    /// Recordings taken at once (their first windows, or with the VAD
    /// pipeline their chunks, decoded together).
    pub(super) group_files: usize,
    pub(super) net: Net,
    pub(super) tokenizer: Arc<WhisperTokenizer>,
    pub(super) gen: Arc<GenerationConfig>,
    pub(super) opts: DecodeOptions,
}

/// A recording as a worker decodes it: its features (with the VAD
/// pipeline its samples), its length in seconds, and with the speech gate
/// where it speaks.
pub(super) struct Read {
    input: Vec<f32>,
    duration_s: f64,
    heard: Option<Heard>,
}

impl Read {
    /// Whether the gate heard no speech at all (nothing to decode).
    fn is_silent(&self) -> bool {
        self.heard.as_ref().is_some_and(Heard::is_silent)
    }
}

/// Whether the gate, if any, lets `segment` through.
fn keeps(heard: Option<&Heard>, segment: &Segment) -> bool {
    heard.is_none_or(|h| h.keeps_segment(segment))
}

/// Stops a transcription from inside its segment callback.
const STOPPED: &str = "stopped";
/// The most bytes of WAV a worker holds for one group (as features, or
/// samples with the VAD pipeline): about 35 minutes of 16 kHz 16-bit audio.
const GROUP_BYTES: u64 = 64 << 20;

impl FileWorker for WhisperWorker {
    fn group(&self) -> Group {
        Group {
            files: self.group_files,
            bytes: GROUP_BYTES,
            fair_share: true,
        }
    }

    fn transcribe(&mut self, job: &mut Job<'_>) -> crate::Result<()> {
        let (paths, control) = (job.paths(), job.control());
        let outcomes = self.transcribe_group(&paths, control, &mut |k, s| job.progress(k, s));
        for (k, outcome) in outcomes.into_iter().enumerate() {
            job.finish(k, outcome);
        }
        Ok(())
    }
}

impl WhisperWorker {
    /// Transcribes `paths`, one outcome each in order; `progress` gets a
    /// file's index in `paths` with its seconds. One file alone is read
    /// and decoded as it is; several are decoded together.
    pub fn transcribe_group(
        &mut self,
        paths: &[&Path],
        control: &Control,
        progress: &mut dyn FnMut(usize, f64),
    ) -> Vec<Outcome> {
        match paths {
            [path] => vec![self.transcribe_file(path, control, &mut |s| progress(0, s))],
            _ => self.transcribe_together(paths, control, progress),
        }
    }

    fn transcribe_file(
        &mut self,
        path: &Path,
        control: &Control,
        progress: &mut dyn FnMut(f64),
    ) -> Outcome {
        match self.read(path, control) {
            Ok(Some(read)) => self.outcome(path, &read, control, progress),
            Ok(None) => Outcome::Cancelled,
            Err(e) => Outcome::Failed(e),
        }
    }

    /// A recording already in memory (16 kHz mono).
    pub fn transcribe_samples(&mut self, samples: &[f32]) -> crate::Result<Transcription> {
        let duration_s = samples.len() as f64 / 16_000.0;
        let control = Control::new();
        if self.batched.is_some() {
            return self.decode(samples, duration_s, None, &control, &mut |_| {});
        }
        if samples.is_empty() {
            return Err(crate::Error::Other("no audio (0 samples)".into()));
        }
        let heard = self.gate.as_ref().map(|g| g.hear(samples)).transpose()?;
        let mut fs = FeatureStream::new(self.net.n_mels())?;
        fs.push(samples)?;
        let features = fs.finish()?;
        self.decode(&features, duration_s, heard.as_ref(), &control, &mut |_| {})
    }

    /// A recording decoded, as the pool's outcome for `path`.
    fn outcome(
        &mut self,
        path: &Path,
        read: &Read,
        control: &Control,
        progress: &mut dyn FnMut(f64),
    ) -> Outcome {
        let heard = read.heard.as_ref();
        match self.decode(&read.input, read.duration_s, heard, control, progress) {
            Ok(t) => done(t),
            Err(_) if control.is_stopped() => Outcome::Cancelled,
            Err(e) => Outcome::Failed(format!("{}: {e}", path.display())),
        }
    }

    /// The recording as [`WhisperWorker::read`] gives it, decoded; with
    /// `heard`, behind the gate.
    fn decode(
        &mut self,
        input: &[f32],
        duration_s: f64,
        heard: Option<&Heard>,
        control: &Control,
        progress: &mut dyn FnMut(f64),
    ) -> crate::Result<Transcription> {
        let mut segments = Vec::new();
        let mut on_segment = |s: Segment| {
            if control.is_stopped() {
                return Err(crate::Error::Other(STOPPED.into()));
            }
            progress(s.end);
            if keeps(heard, &s) {
                segments.push(s);
            }
            Ok(())
        };
        let net = network(&mut self.net, self.opts.word_timestamps);
        let (tok, gen) = (&self.tokenizer, &self.gen);
        // nothing heard: no window decoded, only the language told (given,
        // or detected on the first window as usual)
        let silent = heard.is_some_and(Heard::is_silent).then(|| DecodeOptions {
            max_windows: Some(0),
            ..self.opts.clone()
        });
        let opts = silent.as_ref().unwrap_or(&self.opts);
        let info = match &self.batched {
            Some((b, vad)) => {
                transcribe_batched(net, tok, gen, input, opts, b, vad, &mut on_segment)?
            }
            None => transcribe_features(net, tok, gen, input, duration_s, opts, &mut on_segment)?,
        };
        progress(duration_s);
        Ok(Transcription::of_whisper(
            &segments,
            duration_s,
            &info.language,
        ))
    }

    /// Several recordings at once: without the VAD pipeline their first
    /// windows decoded together (`transcribe_many`), with it their chunks
    /// (`transcribe_batched_many`); a file that cannot be read fails alone.
    fn transcribe_together(
        &mut self,
        paths: &[&Path],
        control: &Control,
        progress: &mut dyn FnMut(usize, f64),
    ) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(paths.len());
        // (index in paths, the recording)
        let mut read: Vec<(usize, Read)> = Vec::new();
        for (k, path) in paths.iter().enumerate() {
            if control.is_stopped() {
                outcomes.push(Some(Outcome::Cancelled));
                continue;
            }
            match self.read(path, control) {
                // nothing to decode with the others
                Ok(Some(r)) if r.is_silent() => {
                    let o = self.outcome(path, &r, control, &mut |s| progress(k, s));
                    outcomes.push(Some(o));
                }
                Ok(Some(r)) => {
                    read.push((k, r));
                    outcomes.push(None);
                }
                Ok(None) => outcomes.push(Some(Outcome::Cancelled)),
                Err(e) => outcomes.push(Some(Outcome::Failed(e))),
            }
        }
        let mut segments: Vec<Vec<Segment>> = vec![Vec::new(); read.len()];
        let mut on_segment = |j: usize, s: Segment| {
            if control.is_stopped() {
                return Err(crate::Error::Other(STOPPED.into()));
            }
            progress(read[j].0, s.end);
            if keeps(read[j].1.heard.as_ref(), &s) {
                segments[j].push(s);
            }
            Ok(())
        };
        let net = network(&mut self.net, self.opts.word_timestamps);
        let (tok, gen, opts) = (&self.tokenizer, &self.gen, &self.opts);
        let r = match &self.batched {
            Some((b, vad)) => {
                let audio: Vec<&[f32]> = read.iter().map(|r| r.1.input.as_slice()).collect();
                transcribe_batched_many(net, tok, gen, &audio, opts, b, vad, &mut on_segment)
            }
            None => {
                let recordings: Vec<Recording> = read
                    .iter()
                    .map(|(_, r)| Recording {
                        features: &r.input,
                        duration: r.duration_s,
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
                for (((k, r), segments), info) in read.iter().zip(&segments).zip(infos) {
                    progress(*k, r.duration_s);
                    let t = Transcription::of_whisper(segments, r.duration_s, &info.language);
                    outcomes[*k] = Some(done(t));
                }
            }
            Err(_) if control.is_stopped() => {
                for (k, _) in &read {
                    outcomes[*k] = Some(Outcome::Cancelled);
                }
            }
            Err(e) => {
                let with = match read.len() {
                    1 => String::new(),
                    n => format!(" (decoded with {} other files)", n - 1),
                };
                for (k, _) in &read {
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

    /// The recording as this worker decodes it: with the VAD pipeline its
    /// samples (the VAD needs all of them), else its features and where the
    /// gate hears speech; `None` when stopped.
    pub(super) fn read(&self, path: &Path, control: &Control) -> Result<Option<Read>, String> {
        match &self.batched {
            Some(_) => crate::audio::load_wav(path, 16_000)
                .map(|a| {
                    Some(Read {
                        input: a.samples,
                        duration_s: a.duration_s,
                        heard: None,
                    })
                })
                .map_err(|e| e.to_string()),
            None => Self::features(path, control, self.net.n_mels(), self.gate.as_ref()),
        }
    }

    /// The recording's features, its WAV streamed through the front end
    /// and the gate's VAD (the audio is never held whole); `None` when
    /// stopped.
    fn features(
        path: &Path,
        control: &Control,
        n_mels: usize,
        gate: Option<&SpeechGate>,
    ) -> Result<Option<Read>, String> {
        let mut wav = WavStream::open(path, 16_000).map_err(|e| e.to_string())?;
        let in_file = |e: crate::Error| format!("{}: {e}", path.display());
        let mut fs = FeatureStream::new(n_mels).map_err(in_file)?;
        let mut listener = gate.map(SpeechGate::listen).transpose().map_err(in_file)?;
        let mut samples = 0usize;
        while let Some(chunk) = wav.next_chunk(1 << 16).map_err(|e| e.to_string())? {
            if control.is_stopped() {
                return Ok(None);
            }
            samples += chunk.len();
            fs.push(&chunk).map_err(in_file)?;
            if let Some(l) = &mut listener {
                l.push(&chunk).map_err(in_file)?;
            }
        }
        if samples == 0 {
            return Err(format!("{}: no audio (0 samples)", path.display()));
        }
        // read at the end: a pipe's WAV or a cut file knows its length only then
        let duration_s = wav.source_duration_s();
        Ok(Some(Read {
            input: fs.finish().map_err(in_file)?,
            duration_s,
            heard: listener.map(|l| l.finish()).transpose().map_err(in_file)?,
        }))
    }
}

/// A transcribed recording's outcome, the language and segments as
/// JSON-lines fields.
fn done(t: Transcription) -> Outcome {
    let extra = t.json_fields();
    Outcome::Done {
        duration_s: t.transcript.duration_s,
        transcript: t.transcript,
        extra,
    }
}

/// The network as decoding takes it: with word times, or plain.
fn network(net: &mut Net, word_timestamps: bool) -> Network<'_> {
    if word_timestamps {
        Network::Aligned(&mut **net)
    } else {
        Network::Plain(&mut **net)
    }
}
