//! The recogniser: a loaded model, its graph (pulsified once when streaming)
//! and the decoder settings, reused for every file.

use std::path::Path;
use std::sync::Arc;

use super::StreamTranscriber;
use crate::decode::{
    prefix_beam_search_lm, FrameTiming, GreedyDecoder, LmScorer, LmWeights, Tokens, Transcript,
    WordLm,
};
use crate::engine::Engine;
use crate::graph::Graph;
use crate::models::conformer::{Head, Taps};
use crate::models::ModelDir;
use crate::ops::Tensor;
use crate::pulse::{pulsify, PulsedModel};
use crate::{Error, Result};

/// How audio goes through the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// In pulses of this many samples (a multiple of the model's frame).
    Streamed { pulse: usize },
    /// The whole utterance at once.
    Whole,
}

/// How CTC outputs become text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoding {
    /// Best token per frame (fused head: no `[T, vocab]` logits).
    Greedy,
    /// CTC prefix beam search of this width.
    Beam { width: usize },
}

/// Settings of a [`Recognizer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecognizerOptions {
    pub mode: Mode,
    pub decoding: Decoding,
}

impl Default for RecognizerOptions {
    /// Streamed in 320 ms pulses, greedy decoding.
    fn default() -> Self {
        RecognizerOptions {
            mode: Mode::Streamed { pulse: 5120 },
            decoding: Decoding::Greedy,
        }
    }
}

/// A speech recogniser over a model directory.
///
/// ```no_run
/// use pulsed::asr::{Recognizer, RecognizerOptions};
/// let rec = Recognizer::open(pulsed::models::ModelDir::default_path(), RecognizerOptions::default())?;
/// let audio = pulsed::audio::load_wav("fixtures/asr/hello.wav".as_ref(), rec.sample_rate())?;
/// println!("{}", rec.transcribe(&audio.samples)?.text);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Recognizer {
    model: ModelDir,
    tokens: Tokens,
    options: RecognizerOptions,
    graph: Arc<Graph>,
    pulsed: Option<Arc<PulsedModel>>,
    engine: Engine,
    lm: Option<Lm>,
}

/// A word language model and how beam search weighs it.
#[derive(Debug, Clone)]
pub struct Lm {
    pub model: Arc<WordLm>,
    pub weights: LmWeights,
}

impl Lm {
    /// The ARPA model at `path` with the shipped model's weights.
    pub fn load(path: &Path) -> Result<Lm> {
        let model = WordLm::load(path).map_err(|e| Error::File {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Ok(Lm {
            model: Arc::new(model),
            weights: LmWeights::default(),
        })
    }

    /// The scorer beam search over `tokens` uses.
    pub fn scorer(&self, tokens: &Tokens) -> Result<Arc<LmScorer>> {
        Ok(Arc::new(LmScorer::new(
            self.model.clone(),
            tokens.clone(),
            self.weights,
        )?))
    }
}

impl Recognizer {
    /// Loads the model in `dir` and prepares its graph for `options`.
    pub fn open(dir: impl AsRef<Path>, options: RecognizerOptions) -> Result<Recognizer> {
        let model = ModelDir::open(dir)?;
        Recognizer::new(model, options)
    }

    /// Prepares an already loaded model.
    pub fn new(model: ModelDir, options: RecognizerOptions) -> Result<Recognizer> {
        let tokens = Tokens::load(&model.tokens_path()).map_err(|e| Error::File {
            path: model.tokens_path(),
            reason: e.to_string(),
        })?;
        if tokens.len() != model.config.vocab_size {
            return Err(Error::File {
                path: model.tokens_path(),
                reason: format!(
                    "{} tokens, but the model has a vocabulary of {}",
                    tokens.len(),
                    model.config.vocab_size
                ),
            });
        }
        let head = match options.decoding {
            Decoding::Greedy => Head::Greedy,
            Decoding::Beam { width: 0 } => {
                return Err(Error::Other("beam width must be at least 1".into()))
            }
            Decoding::Beam { .. } => Head::LogProbs,
        };
        let graph = Arc::new(model.graph(Taps {
            head,
            intermediates: false,
        })?);
        let pulsed = match options.mode {
            Mode::Streamed { pulse } => {
                let frame = model.config.samples_per_frame();
                if pulse == 0 || pulse % frame != 0 {
                    return Err(Error::Other(format!(
                        "pulse of {pulse} samples is not a positive multiple of the model's frame ({frame} samples, {} ms)",
                        frame as f64 * 1000.0 / model.config.sample_rate as f64
                    )));
                }
                Some(Arc::new(pulsify(&graph, pulse)?))
            }
            Mode::Whole => None,
        };
        // beam search uses the model's language model when it ships one
        let lm = match (options.decoding, model.lm_path()) {
            (Decoding::Beam { .. }, Some(p)) => Some(Lm::load(&p)?),
            _ => None,
        };
        Ok(Recognizer {
            model,
            tokens,
            options,
            graph,
            pulsed,
            engine: Engine::Cpu,
            lm,
        })
    }

    /// Beam search weighs prefixes with `lm` (`None`: acoustics alone).
    /// Greedy decoding ignores it.
    pub fn with_lm(mut self, lm: Option<Lm>) -> Recognizer {
        self.lm = lm;
        self
    }

    /// The language model beam search uses, if any.
    pub fn lm(&self) -> Option<&Lm> {
        self.lm.as_ref()
    }

    /// Runs the encoder on `engine` (the CPU by default).
    pub fn with_engine(mut self, engine: Engine) -> Recognizer {
        self.engine = engine;
        self
    }

    /// Where the encoder runs.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn options(&self) -> RecognizerOptions {
        self.options
    }

    pub fn model(&self) -> &ModelDir {
        &self.model
    }

    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// The sample rate the model expects.
    pub fn sample_rate(&self) -> u32 {
        self.model.config.sample_rate
    }

    /// Seconds per encoder output frame.
    pub fn frame_seconds(&self) -> f64 {
        self.model.config.samples_per_frame() as f64 / self.model.config.sample_rate as f64
    }

    fn timing(&self) -> FrameTiming {
        FrameTiming::new(self.frame_seconds())
    }

    /// The pulsed model, when streaming.
    pub fn pulsed_model(&self) -> Option<&Arc<PulsedModel>> {
        self.pulsed.as_ref()
    }

    /// Transcribes a whole signal (mono, at [`Recognizer::sample_rate`]).
    pub fn transcribe(&self, samples: &[f32]) -> Result<Transcript> {
        self.transcribe_on(&self.engine, samples)
    }

    /// [`Recognizer::transcribe`] with the encoder on `engine` (a lane of
    /// this recogniser's engine, for one of several concurrent streams).
    pub fn transcribe_on(&self, engine: &Engine, samples: &[f32]) -> Result<Transcript> {
        match self.options.mode {
            Mode::Streamed { .. } => {
                let mut s = self.stream_on(engine)?;
                s.push(samples)?;
                s.finish()
            }
            Mode::Whole => self.transcribe_whole(engine, samples),
        }
    }

    /// The encoder's log-probs for `samples` (`[frames, vocab]`, row-major,
    /// and the frame count), streamed or whole as the options say; for
    /// decoding them several ways (needs [`Decoding::Beam`]).
    pub fn log_probs(&self, samples: &[f32]) -> Result<(Vec<f32>, usize)> {
        match self.options.mode {
            Mode::Streamed { .. } => {
                let mut s = self.stream()?;
                s.keep_log_probs();
                s.push(samples)?;
                s.finish_log_probs()
            }
            Mode::Whole => {
                if self.options.decoding == Decoding::Greedy {
                    return Err(Error::Other(
                        "log-probs need a recogniser opened for beam search".into(),
                    ));
                }
                Ok(match self.run_whole(&self.engine, samples)? {
                    Some(outs) => (outs[0].to_vec::<f32>()?, outs[0].shape()[0]),
                    None => (Vec::new(), 0),
                })
            }
        }
    }

    /// A streaming transcriber (needs [`Mode::Streamed`]).
    pub fn stream(&self) -> Result<StreamTranscriber> {
        self.stream_on(&self.engine)
    }

    /// A streaming transcriber whose encoder runs on `engine` (a lane of
    /// this recogniser's engine, for one of several concurrent streams).
    pub fn stream_on(&self, engine: &Engine) -> Result<StreamTranscriber> {
        let Some(model) = &self.pulsed else {
            return Err(Error::Other(
                "stream() needs a recogniser opened in streamed mode".into(),
            ));
        };
        StreamTranscriber::new(
            engine.session(model.clone())?,
            self.tokens.clone(),
            self.options.decoding,
            self.lm.clone(),
            self.timing(),
        )
    }

    /// A transcriber of `batch` streams at once on `engine`: one chunk step
    /// (one CUDA graph on a GPU) advances them all, sharing each weight read.
    pub fn batch_on(&self, engine: &Engine, batch: usize) -> Result<super::MultiStreamTranscriber> {
        let Mode::Streamed { pulse } = self.options.mode else {
            return Err(Error::Other(
                "batched streams need a recogniser opened in streamed mode".into(),
            ));
        };
        let taps = Taps {
            head: Head::LogProbs,
            intermediates: false,
        };
        let model = Arc::new(pulsify(&self.model.batched_graph(taps, batch)?, pulse)?);
        let runner = engine.runner(Arc::new(model.graph.clone()), None)?;
        super::MultiStreamTranscriber::new(
            crate::pulse::MultiStreamSession::with_runner(model, runner)?,
            self.tokens.clone(),
            self.options.decoding,
            self.lm.clone(),
            self.timing(),
        )
    }

    /// The graph's outputs for a whole signal on `engine`; `None` when it is
    /// shorter than one feature hop (no output frame exists).
    fn run_whole(&self, engine: &Engine, samples: &[f32]) -> Result<Option<Vec<Tensor>>> {
        if let Some((index, v)) = samples.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(Error::Input {
                name: "audio".into(),
                reason: format!("sample {index} is not finite ({v})"),
            });
        }
        if samples.len() < self.model.config.hop {
            return Ok(None);
        }
        let mut runner = engine.runner(self.graph.clone(), Some(samples.len() as i64))?;
        runner.step(&[&Tensor::from_slice(samples)])?;
        Ok(Some(
            (0..self.graph.outputs.len())
                .map(|i| runner.output(i).clone())
                .collect(),
        ))
    }

    fn transcribe_whole(&self, engine: &Engine, samples: &[f32]) -> Result<Transcript> {
        let Some(outs) = self.run_whole(engine, samples)? else {
            return Ok(GreedyDecoder::new(self.tokens.clone(), self.timing())?.finish());
        };
        decode_outputs(
            &self.tokens,
            self.options.decoding,
            self.lm.as_ref(),
            self.timing(),
            &outs,
        )
    }
}

/// Decodes the head's outputs of a whole run.
pub(super) fn decode_outputs(
    tokens: &Tokens,
    decoding: Decoding,
    lm: Option<&Lm>,
    timing: FrameTiming,
    outs: &[Tensor],
) -> Result<Transcript> {
    match decoding {
        Decoding::Greedy => {
            let ids = outs[0].to_vec::<i64>()?;
            let logp = outs[1].to_vec::<f32>()?;
            let mut d = GreedyDecoder::new(tokens.clone(), timing)?;
            d.push_frames(0, &ids, &logp)?;
            Ok(d.finish())
        }
        Decoding::Beam { width } => {
            let lp = outs[0].to_vec::<f32>()?;
            let (frames, vocab) = (outs[0].shape()[0], outs[0].shape()[1]);
            beam(tokens, &lp, frames, vocab, width, lm, timing)
        }
    }
}

pub(super) fn beam(
    tokens: &Tokens,
    lp: &[f32],
    frames: usize,
    vocab: usize,
    width: usize,
    lm: Option<&Lm>,
    timing: FrameTiming,
) -> Result<Transcript> {
    let scorer = lm.map(|lm| lm.scorer(tokens)).transpose()?;
    let hyps = prefix_beam_search_lm(lp, frames, vocab, tokens.blank(), width, scorer)?;
    Ok(match hyps.into_iter().next() {
        Some(h) => h.transcript(tokens, timing, frames)?,
        None => GreedyDecoder::new(tokens.clone(), timing)?.finish(),
    })
}
