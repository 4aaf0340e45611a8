//! A chunked checkpoint's encoder run as the audio arrives, for decoding
//! before the recording ends (the live path): the features are computed
//! as samples come, each frame clamped at the running maximum less 8 (the
//! recording's maximum is not known yet), the pulsed encoder steps one
//! chunk at a time, and the decoder reads its frames so far followed by a
//! fixed tail, the encoder's output for a window of padding alone,
//! computed once. docs/notes/streaming-whisper.md measures what the clamp and the
//! tail cost against the whole window.
//!
//! [`FirstWindowFrames`] hands those frames to decoding: it stands in for
//! a backend and answers the first window's `encode` with them.

use std::sync::Arc;

use super::backend::{forward_backend, AlignmentSource, Chosen, WhisperBackend};
use super::decode::{AlignedBackend, WindowPadding};
use super::graphs::{self, HOP};
use super::{streaming, WhisperModel};
use crate::engine::Engine;
use crate::graph::Runner;
use crate::ops::top_tokens::RowRules;
use crate::ops::Tensor;
use crate::pulse::{pulsify, Chunk, StreamingSession};
use crate::{Error, Result};

/// Samples a feature pulse takes: one encoder frame, so that a chunk's
/// features are known as soon as its audio and the STFT's half window are.
const FEATURES_PULSE: usize = 2 * HOP;

/// The streamed encoder of one chunked checkpoint, over one stream that
/// starts at [`EncoderStream::reset`] (positions count from there, so a
/// stream holds at most one window: 30 s).
pub struct EncoderStream {
    features: StreamingSession,
    encoder: StreamingSession,
    n_mels: usize,
    d: usize,
    /// Encoder frames in a window (1500).
    window: usize,
    /// The samples a stream takes (a little under a window: see
    /// [`EncoderStream::capacity`]).
    capacity: usize,
    /// The largest floored log10 mel value so far.
    max: f32,
    /// Encoder frames so far, `[n, d]` row-major.
    frames: Vec<f32>,
    /// The encoder's output for a window of padding alone, `[window, d]`
    /// (shared by every stream of the model in this process).
    tail: Arc<Vec<f32>>,
    samples: usize,
    clamped: Vec<f32>,
    /// The feature padding value (what the tail was computed over).
    pad: f32,
    /// The recording ended ([`EncoderStream::finish`]): reset before more.
    finished: bool,
}

impl EncoderStream {
    /// The streamed encoder of `model` (whose `config.json` names its
    /// chunked context), its tail computed for `padding`; the chunk step
    /// runs on `engine` (on a GPU, captured), the features on the CPU.
    pub fn new(
        model: &WhisperModel,
        padding: WindowPadding,
        engine: &Engine,
    ) -> Result<EncoderStream> {
        let tail = tail_of(model, padding)?;
        EncoderStream::with_tail(model, padding, engine, tail)
    }

    /// The same stream for readers of its frames alone (a CTC head): no
    /// tail, whose whole-window encoder run costs more than a short
    /// recording's stream; [`EncoderStream::window`] gives the frames.
    pub fn frames_only(
        model: &WhisperModel,
        padding: WindowPadding,
        engine: &Engine,
    ) -> Result<EncoderStream> {
        EncoderStream::with_tail(model, padding, engine, Arc::default())
    }

    fn with_tail(
        model: &WhisperModel,
        padding: WindowPadding,
        engine: &Engine,
        tail: Arc<Vec<f32>>,
    ) -> Result<EncoderStream> {
        let (cfg, w) = (&model.config, model.weights_for(engine));
        let ctx = streaming::context(cfg)?;
        let (m, d) = (cfg.num_mel_bins, cfg.d_model);
        // in pulses of a chunk, the STFT's look-ahead (half a window) held
        // each chunk's last features back a whole pulse, and so its frames
        // (320 ms for the 640 ms checkpoint)
        let features = pulsify(&graphs::log_mel_frames(m)?, FEATURES_PULSE)?;
        let window = cfg.window_frames() / 2;
        // finishing computes the last chunk's look-ahead (every further
        // layer's too with `right_all_layers`) from padding, in whole
        // pulses: those frames must still have positions in the window
        let more = if ctx.right_all_layers {
            (cfg.encoder_layers - 1) * ctx.chunk
        } else {
            0
        };
        let last = window.saturating_sub(2 * ctx.chunk + ctx.right + more);
        let capacity = (2 * last).saturating_sub(1) * HOP;
        Ok(EncoderStream {
            features: StreamingSession::new(features)?,
            // a stream of its own: streams on other threads (eval --live's
            // workers) would otherwise share one and break each other's capture
            encoder: engine
                .lane()?
                .session(streaming::pulsed_encoder(cfg, w)?.into())?,
            n_mels: m,
            d,
            window,
            capacity,
            max: f32::NEG_INFINITY,
            frames: Vec::new(),
            tail,
            samples: 0,
            clamped: Vec::new(),
            pad: padding.value(&[]),
            finished: false,
        })
    }

    /// Starts a new stream (a new window: positions from 0 again).
    pub fn reset(&mut self) {
        self.features.reset();
        self.encoder.reset();
        self.max = f32::NEG_INFINITY;
        self.frames.clear();
        self.samples = 0;
        self.finished = false;
    }

    /// Samples taken since the stream started.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// Whether [`EncoderStream::finish`] ended the stream.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Encoder frames known so far.
    pub fn frames(&self) -> usize {
        self.frames.len() / self.d
    }

    /// Encoder frames `from..to` of this stream, `[to - from, d]` row-major.
    pub fn frame_rows(&self, from: usize, to: usize) -> &[f32] {
        &self.frames[from * self.d..to * self.d]
    }

    /// What the decoder reads at encoder frames `from..to` before they
    /// are heard: the tail's rows (none for a
    /// [`EncoderStream::frames_only`] stream).
    pub fn tail_rows(&self, from: usize, to: usize) -> &[f32] {
        self.tail.get(from * self.d..to * self.d).unwrap_or(&[])
    }

    /// The samples a stream takes before it must be finished: a window
    /// (30 s) less the padding its last chunk's look-ahead reads (0.3-0.6 s
    /// for chunks of 8-16 frames).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Takes more samples (16 kHz), at most [`EncoderStream::capacity`]
    /// in a stream.
    pub fn push(&mut self, samples: &[f32]) -> Result<()> {
        if self.finished {
            return Err(Error::Other(
                "streamed encoder: push after finish; reset it first".into(),
            ));
        }
        if self.samples + samples.len() > self.capacity {
            return Err(Error::Input {
                name: "audio".into(),
                reason: format!(
                    "a streamed encoder holds {:.2} s at most (one window less its last \
                     look-ahead); reset it first",
                    self.capacity as f64 / 16_000.0
                ),
            });
        }
        let mel = self.features.push(samples)?;
        self.samples += samples.len();
        self.encode(&mel, usize::MAX)
    }

    /// Clamps and encodes feature frames (the first `keep` of them).
    fn encode(&mut self, mel: &[Chunk], keep: usize) -> Result<()> {
        let (m, max) = (self.n_mels, &mut self.max);
        self.clamped.clear();
        for c in mel.iter().filter(|c| (c.start as usize) < keep) {
            let data = c.data.as_slice::<f32>()?;
            let rows = (keep - c.start as usize).min(data.len() / m);
            for row in data[..rows * m].chunks_exact(m) {
                *max = row.iter().copied().fold(*max, f32::max);
                let low = *max - 8.0;
                self.clamped
                    .extend(row.iter().map(|&x| (x.max(low) + 4.0) * 0.25));
            }
        }
        let out = self.encoder.push(&self.clamped)?;
        self.keep(&out)
    }

    fn keep(&mut self, chunks: &[Chunk]) -> Result<()> {
        for c in chunks.iter().filter(|c| c.output == 0) {
            if c.start as usize != self.frames() {
                return Err(Error::Other(format!(
                    "streamed encoder: frames from {} after {}",
                    c.start,
                    self.frames()
                )));
            }
            let room = (self.window - self.frames()) * self.d;
            let data = c.data.as_slice::<f32>()?;
            self.frames.extend_from_slice(&data[..data.len().min(room)]);
        }
        Ok(())
    }

    /// The recording ended: its last encoder frames computed as the window
    /// encoder computes them at a recording's end (the features' last
    /// frames as the whole recording's, 160 zero samples appended; the
    /// look-ahead past them reads padding). [`EncoderStream::reset`]
    /// before the next stream.
    pub fn finish(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        let content = self.samples / HOP + 1;
        let mut mel = self.features.push(&[0.0; HOP])?;
        mel.extend(self.features.finish()?);
        self.encode(&mel, content)?;
        let last = content.div_ceil(2).min(self.window);
        let pulse = self.encoder.pulse() * self.n_mels;
        let pad = vec![self.pad; pulse];
        // each pulse brings a chunk, so a window's worth always does
        for _ in 0..=self.window {
            if self.frames() >= last {
                break;
            }
            let out = self.encoder.push(&pad)?;
            self.keep(&out)?;
        }
        self.frames.truncate(last * self.d);
        Ok(())
    }

    /// What the decoder reads: the frames so far, then the tail from there
    /// on, `[1500, d]` row-major (the frames alone for a
    /// [`EncoderStream::frames_only`] stream).
    pub fn window(&self) -> Vec<f32> {
        let mut w = self.frames.clone();
        if let Some(rest) = self.tail.get(self.frames.len()..) {
            w.extend_from_slice(rest);
        }
        w
    }
}

/// The encoder's output for a window of padding alone, computed once per
/// process for each model, encoder context and padding: a whole-window
/// run costs seconds on a CPU, and every stream of one model reads the
/// same tail (`eval --live` opens one stream a file).
fn tail_of(model: &WhisperModel, padding: WindowPadding) -> Result<Arc<Vec<f32>>> {
    type Tails = Vec<(String, Arc<Vec<f32>>)>;
    static TAILS: std::sync::Mutex<Tails> = std::sync::Mutex::new(Vec::new());
    let cfg = &model.config;
    let key = format!(
        "{} {:?} {} {} {}",
        model.dir.display(),
        cfg.encoder_context,
        padding.value(&[]).to_bits(),
        cfg.d_model,
        cfg.encoder_layers
    );
    let known = |tails: &Tails| {
        tails
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, t)| t.clone())
    };
    if let Some(t) = known(&TAILS.lock().unwrap_or_else(|p| p.into_inner())) {
        return Ok(t);
    }
    let (frames, m) = (cfg.window_frames(), cfg.num_mel_bins);
    let pad = vec![padding.value(&[]); frames * m];
    let mut whole = Runner::new(streaming::encoder(cfg, &model.f32_weights)?)?;
    whole.step(&[&Tensor::from_vec(vec![frames, m], pad)?])?;
    let tail = Arc::new(whole.output(0).to_f32_vec());
    let mut tails = TAILS.lock().unwrap_or_else(|p| p.into_inner());
    if known(&tails).is_none() {
        tails.push((key, tail.clone()));
    }
    Ok(tail)
}

/// A backend whose first `encode` call takes `frames` (a streamed
/// encoder's [`EncoderStream::window`]) instead of encoding the window it
/// is given; every other call goes to `inner`. Decoding's first window
/// starts at the recording's first frame, where the stream starts; a
/// later window (a recording longer than the first window's segments)
/// runs the window encoder as before.
pub struct FirstWindowFrames<'a> {
    inner: &'a mut dyn AlignedBackend,
    frames: Option<Vec<f32>>,
}

impl<'a> FirstWindowFrames<'a> {
    pub fn new(inner: &'a mut dyn AlignedBackend, frames: Vec<f32>) -> FirstWindowFrames<'a> {
        FirstWindowFrames {
            inner,
            frames: Some(frames),
        }
    }
}

impl WhisperBackend for FirstWindowFrames<'_> {
    forward_backend!(inner);

    fn encode(&mut self, windows: &[&[f32]]) -> Result<()> {
        match self.frames.take() {
            Some(f) if windows.len() == 1 => self.inner.encode_frames(&[&f]),
            _ => self.inner.encode(windows),
        }
    }
    fn encode_frames(&mut self, frames: &[&[f32]]) -> Result<()> {
        self.inner.encode_frames(frames)
    }
    fn start(&mut self, windows: &[usize]) -> Result<()> {
        self.inner.start(windows)
    }
    fn feed_choose(
        &mut self,
        tokens: &[u32],
        rules: &[RowRules],
        cum: &[f32],
        masks: &Tensor,
        k: usize,
    ) -> Result<Option<Chosen>> {
        self.inner.feed_choose(tokens, rules, cum, masks, k)
    }
}

impl AlignmentSource for FirstWindowFrames<'_> {
    fn cross_attention(
        &mut self,
        window: usize,
        tokens: &[u32],
        heads: &[(usize, usize)],
    ) -> Result<Vec<f32>> {
        self.inner.cross_attention(window, tokens, heads)
    }
}
