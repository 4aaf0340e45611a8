//! A chunked Whisper checkpoint's CTC head over its streamed encoder
//! (`crate::models::whisper::ctc`) opened for transcription: each file fed as it
//! is read, greedy or prefix beam search with a word language model.

use std::path::Path;
use std::sync::Arc;

use crate::asr::{Lm, LmChoice, Transcription};
use crate::audio::WavStream;
use crate::batch::{Control, FileWorker, Job, Outcome};
use crate::engine::Engine;
use crate::models::whisper::ctc::{CtcDecoding, CtcHead, CtcStream};
use crate::models::whisper::{streaming, WhisperModel};
use crate::{Error, Result};

/// Samples read from a WAV at a time: 160 ms, a chunk of chunk-8 students.
const READ: usize = 2560;

/// What every worker shares.
pub struct CtcJob {
    model: Arc<WhisperModel>,
    head: CtcHead,
    decoding: CtcDecoding,
    engine: Engine,
    describe: String,
}

impl CtcJob {
    /// The checkpoint `spec` (a folder or short name) with its head;
    /// `beam` asks for prefix beam search, weighed by the language model
    /// `lm` resolves (by default the folder's `lm.arpa`, when it has one).
    pub fn open(spec: &Path, beam: Option<usize>, lm: &LmChoice, engine: Engine) -> Result<CtcJob> {
        let model = WhisperModel::open(&spec.to_string_lossy())?;
        if !CtcHead::present(&model.dir) {
            return Err(Error::Other(format!(
                "--ctc: {} has no CTC head ({}; training/streaming_whisper/folder.py ctc adds one)",
                model.dir.display(),
                crate::models::whisper::ctc::HEAD_FILE
            )));
        }
        let latency = streaming::latency_ms(&model.config)
            .map_err(|e| Error::Other(format!("--ctc: {e}")))?;
        let head = CtcHead::open(&model.dir, model.config.d_model)?;
        let (decoding, how) = match beam {
            None => (CtcDecoding::Greedy, "greedy".to_string()),
            Some(0) => return Err(Error::Other("--beam must be at least 1".into())),
            Some(width) => {
                let own = folder_lm(&model.dir)?;
                let lm = lm.resolve(own.as_ref())?;
                let how = match &lm {
                    Some(l) => format!(
                        "beam {width} + word LM (weight {}, bonus {})",
                        l.weights.weight, l.weights.word_bonus
                    ),
                    None => format!("beam {width}, no LM"),
                };
                let scorer = lm.map(|l| l.scorer(head.tokens())).transpose()?;
                (CtcDecoding::Beam { width, lm: scorer }, how)
            }
        };
        let describe = format!(
            "{}: CTC head over the streamed encoder ({latency} ms), {how}, on the {}",
            model.dir.display(),
            engine.name()
        );
        Ok(CtcJob {
            model: Arc::new(model),
            head,
            decoding,
            engine,
            describe,
        })
    }

    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// A fresh stream (the live path's).
    pub fn stream(&self) -> Result<CtcStream> {
        CtcStream::new(&self.model, &self.head, self.decoding.clone(), &self.engine)
    }

    pub fn worker(&self) -> Result<CtcWorker> {
        Ok(CtcWorker {
            model: self.model.clone(),
            head: self.head.clone(),
            decoding: self.decoding.clone(),
            engine: self.engine.clone(),
        })
    }

    /// A recording already in memory (16 kHz mono).
    pub fn transcribe_samples(&self, samples: &[f32]) -> Result<Transcription> {
        let mut stream = self.stream()?;
        for chunk in samples.chunks(READ) {
            stream.push(chunk)?;
        }
        let mut transcript = stream.finish()?;
        transcript.duration_s = samples.len() as f64 / 16_000.0;
        Ok(Transcription::of_transcript(transcript))
    }
}

/// The folder's `lm.arpa`, with the shipped model's weights.
fn folder_lm(dir: &Path) -> Result<Option<Lm>> {
    let p = dir.join("lm.arpa");
    if !p.is_file() {
        return Ok(None);
    }
    Lm::load(&p).map(Some)
}

/// One worker: a stream per file.
pub struct CtcWorker {
    model: Arc<WhisperModel>,
    head: CtcHead,
    decoding: CtcDecoding,
    engine: Engine,
}

impl CtcWorker {
    fn run(
        &self,
        path: &Path,
        control: &Control,
        progress: &mut dyn FnMut(f64),
    ) -> std::result::Result<Option<Outcome>, String> {
        let mut wav = WavStream::open(path, 16_000).map_err(|e| e.to_string())?;
        let in_file = |e: Error| format!("{}: {e}", path.display());
        let mut stream =
            CtcStream::new(&self.model, &self.head, self.decoding.clone(), &self.engine)
                .map_err(in_file)?;
        let mut samples = 0usize;
        while let Some(chunk) = wav.next_chunk(READ).map_err(|e| e.to_string())? {
            if control.is_stopped() {
                return Ok(None);
            }
            samples += chunk.len();
            stream.push(&chunk).map_err(in_file)?;
            progress(samples as f64 / 16_000.0);
        }
        let mut transcript = stream.finish().map_err(in_file)?;
        // read at the end: a pipe's WAV or a cut file knows its length only then
        let duration_s = wav.source_duration_s();
        transcript.duration_s = duration_s;
        Ok(Some(Outcome::Done {
            transcript,
            duration_s,
            extra: Default::default(),
        }))
    }
}

impl FileWorker for CtcWorker {
    fn transcribe(&mut self, job: &mut Job<'_>) -> Result<()> {
        for k in 0..job.len() {
            let outcome = match self.run(job.path(k), job.control(), &mut |s| job.progress(k, s)) {
                Ok(Some(o)) => o,
                Ok(None) => Outcome::Cancelled,
                Err(e) => Outcome::Failed(e),
            };
            job.finish(k, outcome);
        }
        Ok(())
    }
}
