//! The streaming session: takes any number of samples, runs the pulsed graph
//! one pulse at a time and hands out the outputs with their frame positions.

use std::sync::Arc;

use super::{PulsedModel, StreamInfo};
use crate::graph::{Runner, StepRunner};
use crate::ops::{DType, Tensor};
use crate::{Error, Result};

/// Frames of one output produced by a step: `data` holds frames
/// `start .. start + n` of output `output` along its streaming axis.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub output: usize,
    pub start: u64,
    pub data: Tensor,
}

/// Errors specific to feeding a session.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SessionError {
    #[error("push after finish: call reset() to start a new stream")]
    Finished,
    #[error("sample {index} of this push is not finite ({value}); nothing of this push was used")]
    NotFinite { index: usize, value: f32 },
    #[error("push of {got} values is not a whole number of frames of {frame} values")]
    PartialFrame { got: usize, frame: usize },
}

/// Runs a [`PulsedModel`] over a stream of f32 input frames.
///
/// ```no_run
/// # fn demo(model: pulsed::pulse::PulsedModel, audio: &[f32]) -> pulsed::Result<()> {
/// let mut s = pulsed::pulse::StreamingSession::new(model)?;
/// for chunk in audio.chunks(1000) {
///     for out in s.push(chunk)? { println!("frames from {}", out.start); }
/// }
/// s.finish()?;
/// # Ok(()) }
/// ```
pub struct StreamingSession {
    model: Arc<PulsedModel>,
    runner: Box<dyn StepRunner>,
    input: StreamInfo,
    frame: usize,
    pulse_in: Tensor,
    filled: usize,
    steps: u64,
    pushed: u64,
    emitted: Vec<u64>,
    finished: bool,
}

impl StreamingSession {
    /// A session on the CPU.
    pub fn new(model: impl Into<Arc<PulsedModel>>) -> Result<StreamingSession> {
        let model: Arc<PulsedModel> = model.into();
        let runner = Runner::new(model.graph.clone())?;
        StreamingSession::with_runner(model, Box::new(runner))
    }

    /// A session whose steps run on `runner` (made for `model.graph`, e.g. a
    /// [`crate::gpu::GpuRunner`]).
    pub fn with_runner(
        model: impl Into<Arc<PulsedModel>>,
        runner: Box<dyn StepRunner>,
    ) -> Result<StreamingSession> {
        let model: Arc<PulsedModel> = model.into();
        if model.graph.inputs.len() != 1 {
            return Err(Error::Graph(format!(
                "a streaming session feeds one input; the graph has {}",
                model.graph.inputs.len()
            )));
        }
        let input = model.input_stream()?;
        let fact = &model.graph.nodes[model.graph.inputs[0]].facts[0];
        if fact.dtype != DType::F32 {
            return Err(Error::Graph(format!(
                "streaming input must be f32, got {fact}"
            )));
        }
        let shape = fact
            .concrete_shape()
            .ok_or_else(|| Error::Graph(format!("input fact {fact} is not concrete")))?;
        if shape[..input.axis].iter().any(|&d| d != 1) {
            return Err(Error::Graph(format!(
                "the streaming axis of input {fact} must be its outermost non-1 axis"
            )));
        }
        let frame = shape[input.axis + 1..].iter().product();
        let n_out = model.graph.outputs.len();
        Ok(StreamingSession {
            model,
            runner,
            input,
            frame,
            pulse_in: Tensor::zeros(DType::F32, &shape),
            filled: 0,
            steps: 0,
            pushed: 0,
            emitted: vec![0; n_out],
            finished: false,
        })
    }

    pub fn model(&self) -> &PulsedModel {
        &self.model
    }

    /// Input frames (samples, for audio) per step.
    pub fn pulse(&self) -> usize {
        self.input.pulse
    }

    /// Warm-up frames of output `i` before its first real frame.
    pub fn delay_frames(&self, i: usize) -> usize {
        self.model.output_stream(i).map_or(0, |s| s.delay)
    }

    /// The delay of output `i` in input frames (samples): its warm-up frames
    /// times the input frames each output frame advances by.
    pub fn delay_input_frames(&self, i: usize) -> f64 {
        match self.model.output_stream(i) {
            Some(s) => s.delay as f64 * self.input.pulse as f64 / s.pulse as f64,
            None => 0.0,
        }
    }

    /// The same delay in milliseconds at `sample_rate` input frames per second.
    pub fn delay_ms(&self, i: usize, sample_rate: f64) -> f64 {
        self.delay_input_frames(i) * 1000.0 / sample_rate
    }

    /// The runner, to read any node's output of the last step.
    pub fn runner(&self) -> &dyn StepRunner {
        self.runner.as_ref()
    }

    /// Steps run so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Feeds input values (whole frames); returns the output frames that
    /// became available. A non-finite value rejects the whole push.
    pub fn push(&mut self, values: &[f32]) -> Result<Vec<Chunk>> {
        if self.finished {
            return Err(Error::Session(SessionError::Finished));
        }
        if !values.len().is_multiple_of(self.frame) {
            return Err(Error::Session(SessionError::PartialFrame {
                got: values.len(),
                frame: self.frame,
            }));
        }
        if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(Error::Session(SessionError::NotFinite { index, value }));
        }
        let mut out = Vec::new();
        let per_pulse = self.input.pulse * self.frame;
        let mut rest = values;
        while !rest.is_empty() {
            let take = (per_pulse - self.filled).min(rest.len());
            let buf = self.pulse_in.as_slice_mut::<f32>()?;
            buf[self.filled..self.filled + take].copy_from_slice(&rest[..take]);
            self.filled += take;
            self.pushed += (take / self.frame) as u64;
            rest = &rest[take..];
            if self.filled == per_pulse {
                self.run_step(&mut out)?;
            }
        }
        Ok(out)
    }

    /// Runs one step on the buffered pulse, without collecting outputs (for
    /// benchmarks and allocation tests of the bare step).
    pub fn step_only(&mut self) -> Result<()> {
        self.runner.step(&[&self.pulse_in])?;
        self.steps += 1;
        Ok(())
    }

    fn run_step(&mut self, out: &mut Vec<Chunk>) -> Result<()> {
        self.runner.step(&[&self.pulse_in])?;
        self.filled = 0;
        self.steps += 1;
        self.collect(out, self.pushed as i64)
    }

    fn collect(&mut self, out: &mut Vec<Chunk>, s_known: i64) -> Result<()> {
        for i in 0..self.emitted.len() {
            let Some(st) = self.model.output_stream(i) else {
                continue;
            };
            let first = st.first_frame(self.steps - 1);
            let end = st.len.eval(s_known).max(0);
            let lo = first.max(self.emitted[i] as i64);
            let hi = (first + st.pulse as i64).min(end);
            if hi <= lo {
                continue;
            }
            let t = self.runner.output(i);
            let data = t
                .narrow(st.axis, (lo - first) as usize, (hi - lo) as usize)?
                .contiguous();
            out.push(Chunk {
                output: i,
                start: lo as u64,
                data,
            });
            self.emitted[i] = hi as u64;
        }
        Ok(())
    }

    /// Ends the stream: pads the last pulse with zeros and runs until every
    /// output has all its frames. Outputs that do not stream (final states)
    /// come last, once.
    pub fn finish(&mut self) -> Result<Vec<Chunk>> {
        if self.finished {
            return Err(Error::Session(SessionError::Finished));
        }
        self.finished = true;
        let s = self.pushed as i64;
        self.runner.set_stream_len(Some(s));
        let mut out = Vec::new();
        let per_pulse = self.input.pulse * self.frame;
        loop {
            let done = (0..self.emitted.len()).all(|i| match self.model.output_stream(i) {
                Some(st) => self.emitted[i] as i64 >= st.len.eval(s).max(0),
                None => true,
            });
            if done && self.filled == 0 {
                break;
            }
            if self.steps > 1_000_000_000 {
                return Err(Error::Other("finish did not converge".into()));
            }
            let buf = self.pulse_in.as_slice_mut::<f32>()?;
            buf[self.filled..per_pulse].fill(0.0);
            self.runner.step(&[&self.pulse_in])?;
            self.filled = 0;
            self.steps += 1;
            self.collect(&mut out, s)?;
            if done {
                break;
            }
        }
        for i in 0..self.emitted.len() {
            if self.model.output_stream(i).is_none() {
                out.push(Chunk {
                    output: i,
                    start: 0,
                    data: self.runner.output(i).clone(),
                });
            }
        }
        Ok(out)
    }

    /// Back to a fresh stream: zeroed state, nothing buffered.
    pub fn reset(&mut self) {
        self.runner.reset();
        self.runner.set_stream_len(None);
        self.filled = 0;
        self.steps = 0;
        self.pushed = 0;
        self.emitted.iter_mut().for_each(|e| *e = 0);
        self.finished = false;
    }

    /// Runs a whole input through a fresh stream and concatenates each
    /// streaming output along its axis (the whole-utterance equivalent).
    pub fn run_all(&mut self, values: &[f32]) -> Result<Vec<Tensor>> {
        self.reset();
        let mut chunks = self.push(values)?;
        chunks.extend(self.finish()?);
        let mut outs = Vec::new();
        for i in 0..self.emitted.len() {
            let parts: Vec<&Tensor> = chunks
                .iter()
                .filter(|c| c.output == i)
                .map(|c| &c.data)
                .collect();
            outs.push(match self.model.output_stream(i) {
                Some(st) => concat_frames(&parts, st.axis, self.runner.output(i))?,
                None => parts
                    .last()
                    .map(|t| (*t).clone())
                    .unwrap_or_else(Tensor::empty),
            });
        }
        Ok(outs)
    }
}

/// Concatenates frame chunks along `axis`; `like` gives the shape when empty.
fn concat_frames(parts: &[&Tensor], axis: usize, like: &Tensor) -> Result<Tensor> {
    let mut shape = like.shape().to_vec();
    shape[axis] = parts.iter().map(|p| p.shape()[axis]).sum();
    let mut out = Tensor::zeros(like.dtype(), &shape);
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let total = shape[axis];
    if like.dtype() != DType::F32 {
        let v: Vec<Tensor> = parts.iter().map(|p| p.cast(DType::F32)).collect();
        let refs: Vec<&Tensor> = v.iter().collect();
        return Ok(concat_frames(&refs, axis, &like.cast(DType::F32))?.cast(like.dtype()));
    }
    let o = out.as_slice_mut::<f32>()?;
    let mut at = 0;
    for p in parts {
        let n = p.shape()[axis];
        let src = p.as_slice::<f32>()?;
        for b in 0..outer {
            let d = (b * total + at) * inner;
            o[d..d + n * inner].copy_from_slice(&src[b * n * inner..(b + 1) * n * inner]);
        }
        at += n;
    }
    Ok(out)
}
