//! Voice activity detection with Silero VAD v6 for endpointing: a loaded
//! model ([`Vad`]), a streaming session that takes samples of any length
//! and gives one speech probability per 512-sample chunk ([`VadSession`]),
//! and a segmenter that turns probabilities into speech segments as the
//! official `get_speech_timestamps` does, incrementally ([`Segmenter`]).
//!
//! ```no_run
//! # fn demo(samples: &[f32]) -> pulsed::Result<()> {
//! use pulsed::vad::{Segmenter, SegmentOptions, Vad};
//! let vad = Vad::load_default()?;
//! let mut session = vad.session()?;
//! let mut seg = Segmenter::new(SegmentOptions::default());
//! for block in samples.chunks(1600) {
//!     for p in session.push(block)? {
//!         for s in seg.push(p) { println!("speech {} .. {} samples", s.start, s.end); }
//!     }
//! }
//! for p in session.flush()? { seg.push(p); }
//! for s in seg.finish(session.samples()) { println!("speech {} .. {}", s.start, s.end); }
//! # Ok(()) }
//! ```

mod segment;

use std::path::Path;
use std::sync::Arc;

use crate::graph::{Graph, Runner};
use crate::models::silero;
use crate::ops::Tensor;
use crate::pulse::{pulsify, PulsedModel, StreamingSession};
use crate::weights::Weights;
use crate::{Error, Result};

pub use segment::{Segment, SegmentOptions, Segmenter};

/// Samples per chunk (one probability each) at [`SAMPLE_RATE`].
pub const CHUNK: usize = silero::CHUNK;
/// The rate the model runs at; resample other audio first.
pub const SAMPLE_RATE: u32 = silero::SAMPLE_RATE;

/// A loaded Silero VAD: the whole-utterance graph and its pulsed form (one
/// chunk per step).
#[derive(Clone)]
pub struct Vad {
    whole: Arc<Graph>,
    pulsed: Arc<PulsedModel>,
}

impl Vad {
    /// Builds both forms from weights.
    pub fn new(w: &Weights) -> Result<Vad> {
        let whole = silero::build(w)?;
        let pulsed = pulsify(&whole, CHUNK)?;
        Ok(Vad {
            whole: Arc::new(whole),
            pulsed: Arc::new(pulsed),
        })
    }

    /// Loads the weights file (`pulsed fetch silero-vad` puts it in the model cache).
    pub fn load(path: &Path) -> Result<Vad> {
        Vad::new(&silero::load_weights(path)?)
    }

    /// Loads [`silero::default_weights_path`].
    pub fn load_default() -> Result<Vad> {
        Vad::load(&silero::default_weights_path())
    }

    /// The whole-utterance graph (`audio [S]` -> `probs`, `h`, `c`).
    pub fn graph(&self) -> &Graph {
        &self.whole
    }

    /// The pulsed graph (512 samples per step).
    pub fn pulsed_model(&self) -> &PulsedModel {
        &self.pulsed
    }

    /// A fresh streaming session.
    pub fn session(&self) -> Result<VadSession> {
        Ok(VadSession {
            stream: StreamingSession::new(self.pulsed.clone())?,
            samples: 0,
        })
    }

    /// Probabilities of a whole utterance at once (a trailing partial chunk
    /// is zero-padded): the same numbers a session gives.
    pub fn probs(&self, samples: &[f32]) -> Result<Vec<f32>> {
        let mut runner = Runner::new(self.whole.clone())?;
        self.probs_with(&mut runner, samples)
    }

    /// As [`Vad::probs`], reusing a runner made from [`Vad::graph`].
    pub fn probs_with(&self, runner: &mut Runner, samples: &[f32]) -> Result<Vec<f32>> {
        if let Some((index, value)) = samples.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(Error::Other(format!(
                "sample {index} is not finite ({value})"
            )));
        }
        let n = samples.len().div_ceil(CHUNK);
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut padded = samples.to_vec();
        padded.resize(n * CHUNK, 0.0);
        let out = runner.run(&[Tensor::from_vec(vec![n * CHUNK], padded)?])?;
        Ok(out[0].to_f32_vec())
    }
}

/// A stream of audio through the VAD: push samples of any length, get one
/// probability per completed 512-sample chunk.
pub struct VadSession {
    stream: StreamingSession,
    samples: u64,
}

impl VadSession {
    /// Feeds samples (16 kHz mono); returns the probabilities of the chunks
    /// they completed, in order. A non-finite sample rejects the whole push.
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<f32>> {
        let chunks = self.stream.push(samples)?;
        self.samples += samples.len() as u64;
        let mut out = Vec::new();
        for c in chunks.iter().filter(|c| c.output == 0) {
            out.extend(c.data.as_slice::<f32>()?);
        }
        Ok(out)
    }

    /// Ends the current chunk with zeros (the official wrapper's last chunk)
    /// and returns its probability; nothing when the chunk is empty.
    pub fn flush(&mut self) -> Result<Vec<f32>> {
        let part = (self.samples % CHUNK as u64) as usize;
        if part == 0 {
            return Ok(Vec::new());
        }
        let zeros = [0f32; CHUNK];
        let out = self.push(&zeros[..CHUNK - part])?;
        self.samples -= (CHUNK - part) as u64; // padding is not audio
        Ok(out)
    }

    /// Back to a fresh stream: zero context and LSTM state.
    pub fn reset(&mut self) {
        self.stream.reset();
        self.samples = 0;
    }

    /// Audio samples pushed since the last reset.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Chunks completed (probabilities given) since the last reset.
    pub fn chunks(&self) -> u64 {
        self.stream.steps()
    }
}
