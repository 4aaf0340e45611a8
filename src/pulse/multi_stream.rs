//! The batched streaming session: `B` independent streams advance together
//! through one pulsed graph whose input is `[B, pulse]`, so each step (one
//! CUDA graph on a GPU) serves every stream and reads the weights once.
//!
//! Streams start together and each ends on its own: an ended stream is fed
//! silence until the others finish and its frames past its end are dropped.
//! That is exact for graphs whose output frames never depend on where the
//! stream ends (causal ones, like the shipped encoder); a graph with end
//! padding would need one stream length per entry and is refused.

use std::sync::Arc;

use super::{Chunk, PulsePad, PulsedModel, PulsedSameAxisConcat, ReflectPulsePad, StreamInfo};
use crate::graph::{Runner, StepRunner};
use crate::ops::{DType, Tensor};
use crate::{Error, Result};

/// Errors specific to feeding a batched session.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MultiStreamError {
    #[error("stream {stream} is out of range: the batch has {batch} streams")]
    NoSuchStream { stream: usize, batch: usize },
    #[error("stream {stream} has ended: nothing more can be fed to it")]
    Ended { stream: usize },
    #[error("stream {stream}: value {index} of this feed is not finite ({value}); nothing of it was used")]
    NotFinite {
        stream: usize,
        index: usize,
        value: f32,
    },
    #[error("stream {stream} has {filled} of {pulse} values of its pulse and has not ended: fill or end it before stepping")]
    NotReady {
        stream: usize,
        filled: usize,
        pulse: usize,
    },
    #[error("node `{node}` depends on where the stream ends, which differs between the streams of a batch")]
    EndDependent { node: String },
    #[error("the pulsed graph's input {fact} is not [batch, pulse]")]
    NotBatched { fact: String },
}

/// One stream's frames of one output, from a [`MultiStreamSession`] step.
#[derive(Debug, Clone)]
pub struct StreamChunk {
    /// Which stream (batch entry).
    pub stream: usize,
    /// Frames of that stream, shaped as an unbatched session gives them (no
    /// batch axis).
    pub chunk: Chunk,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    /// Values in the pending pulse.
    filled: usize,
    /// Input frames fed so far.
    pushed: u64,
    ended: bool,
    /// Frames handed out, per output.
    emitted: Vec<u64>,
}

/// Runs a pulsed graph over `[B, pulse]` inputs: `B` streams in lockstep.
///
/// ```no_run
/// # fn demo(model: pulsed::pulse::PulsedModel, a: &[f32], b: &[f32]) -> pulsed::Result<()> {
/// let mut s = pulsed::pulse::MultiStreamSession::new(model)?; // built for a batch of 2
/// let (mut a, mut b) = (a, b);
/// while !s.all_done() {
///     a = &a[s.fill(0, a)?..];
///     b = &b[s.fill(1, b)?..];
///     if a.is_empty() { s.end(0)?; }
///     if b.is_empty() { s.end(1)?; }
///     for c in s.step()? { println!("stream {} frames from {}", c.stream, c.chunk.start); }
/// }
/// # Ok(()) }
/// ```
pub struct MultiStreamSession {
    model: Arc<PulsedModel>,
    runner: Box<dyn StepRunner>,
    input: StreamInfo,
    pulse_in: Tensor,
    steps: u64,
    slots: Vec<Slot>,
}

impl MultiStreamSession {
    /// A session on the CPU.
    pub fn new(model: impl Into<Arc<PulsedModel>>) -> Result<MultiStreamSession> {
        let model: Arc<PulsedModel> = model.into();
        let runner = Runner::new(model.graph.clone())?;
        MultiStreamSession::with_runner(model, Box::new(runner))
    }

    /// A session whose steps run on `runner` (made for `model.graph`).
    pub fn with_runner(
        model: impl Into<Arc<PulsedModel>>,
        runner: Box<dyn StepRunner>,
    ) -> Result<MultiStreamSession> {
        let model: Arc<PulsedModel> = model.into();
        if model.graph.inputs.len() != 1 {
            return Err(Error::Graph(format!(
                "a batched session feeds one input; the graph has {}",
                model.graph.inputs.len()
            )));
        }
        let input = model.input_stream()?;
        let fact = &model.graph.nodes[model.graph.inputs[0]].facts[0];
        let shape = fact.concrete_shape().filter(|s| s.len() == 2);
        let (Some(shape), true, DType::F32) = (shape, input.axis == 1, fact.dtype) else {
            return Err(MultiStreamError::NotBatched {
                fact: fact.to_string(),
            }
            .into());
        };
        if let Some(node) = end_dependent_node(&model) {
            return Err(MultiStreamError::EndDependent { node }.into());
        }
        let n_out = model.graph.outputs.len();
        for i in 0..n_out {
            if model.output_stream(i).is_none_or(|s| s.axis == 0) {
                return Err(Error::Graph(format!(
                    "output {} of a batched graph must stream after its batch axis",
                    model.graph.outputs[i].0
                )));
            }
        }
        let slot = Slot {
            emitted: vec![0; n_out],
            ..Slot::default()
        };
        Ok(MultiStreamSession {
            pulse_in: Tensor::zeros(DType::F32, &shape),
            slots: vec![slot; shape[0]],
            model,
            runner,
            input,
            steps: 0,
        })
    }

    /// Streams in the batch.
    pub fn batch(&self) -> usize {
        self.slots.len()
    }

    /// Input values (samples) per step and stream.
    pub fn pulse(&self) -> usize {
        self.input.pulse
    }

    /// The runner, to read any node's output of the last step.
    pub fn runner(&self) -> &dyn StepRunner {
        self.runner.as_ref()
    }

    /// Steps run so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    pub fn model(&self) -> &PulsedModel {
        &self.model
    }

    fn slot(&self, stream: usize) -> Result<&Slot> {
        self.slots.get(stream).ok_or_else(|| {
            MultiStreamError::NoSuchStream {
                stream,
                batch: self.batch(),
            }
            .into()
        })
    }

    /// Values stream `stream` can still take before the next step.
    pub fn room(&self, stream: usize) -> Result<usize> {
        let s = self.slot(stream)?;
        Ok(if s.ended {
            0
        } else {
            self.input.pulse - s.filled
        })
    }

    /// Copies as many of `values` as fit into stream `stream`'s pending
    /// pulse; returns how many it took. A non-finite value rejects the feed.
    pub fn fill(&mut self, stream: usize, values: &[f32]) -> Result<usize> {
        let room = self.room(stream)?;
        if self.slots[stream].ended {
            return Err(MultiStreamError::Ended { stream }.into());
        }
        let take = room.min(values.len());
        // the whole-slice test vectorises; the position only when it fails
        let values = &values[..take];
        // the whole-slice test vectorises; the search only when it fails
        if !values.iter().fold(true, |ok, v| ok & v.is_finite()) {
            if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                return Err(MultiStreamError::NotFinite {
                    stream,
                    index,
                    value,
                }
                .into());
            }
        }
        let p = self.input.pulse;
        let slot = &mut self.slots[stream];
        let row = &mut self.pulse_in.as_slice_mut::<f32>()?[stream * p..(stream + 1) * p];
        row[slot.filled..slot.filled + take].copy_from_slice(values);
        slot.filled += take;
        slot.pushed += take as u64;
        Ok(take)
    }

    /// Stream `stream` has no more input; later steps feed it silence.
    pub fn end(&mut self, stream: usize) -> Result<()> {
        self.slot(stream)?;
        self.slots[stream].ended = true;
        Ok(())
    }

    /// Whether stream `stream` has ended and every frame of it came out.
    pub fn done(&self, stream: usize) -> bool {
        self.slots.get(stream).is_some_and(|s| {
            s.ended && (0..s.emitted.len()).all(|i| s.emitted[i] >= self.out_len(i, s))
        })
    }

    /// Whether every stream is done.
    pub fn all_done(&self) -> bool {
        (0..self.batch()).all(|b| self.done(b))
    }

    fn out_len(&self, i: usize, s: &Slot) -> u64 {
        self.model
            .output_stream(i)
            .map_or(0, |st| st.len.eval(s.pushed as i64).max(0) as u64)
    }

    /// Runs one step once every stream has a full pulse or has ended, and
    /// returns each stream's new output frames (none past a stream's end).
    pub fn step(&mut self) -> Result<Vec<StreamChunk>> {
        let p = self.input.pulse;
        if let Some((stream, s)) = self
            .slots
            .iter()
            .enumerate()
            .find(|(_, s)| !s.ended && s.filled < p)
        {
            return Err(MultiStreamError::NotReady {
                stream,
                filled: s.filled,
                pulse: p,
            }
            .into());
        }
        let buf = self.pulse_in.as_slice_mut::<f32>()?;
        for (b, s) in self.slots.iter_mut().enumerate() {
            buf[b * p + s.filled..(b + 1) * p].fill(0.0);
        }
        self.runner.step(&[&self.pulse_in])?;
        self.steps += 1;
        let mut out = Vec::new();
        for b in 0..self.batch() {
            self.slots[b].filled = 0;
            self.collect(b, &mut out)?;
        }
        Ok(out)
    }

    fn collect(&mut self, b: usize, out: &mut Vec<StreamChunk>) -> Result<()> {
        for i in 0..self.slots[b].emitted.len() {
            let Some(st) = self.model.output_stream(i) else {
                continue;
            };
            let slot = &self.slots[b];
            let first = st.first_frame(self.steps - 1);
            // frames up to what the input fed so far determines; all of
            // them once the stream has ended
            let end = self.out_len(i, slot) as i64;
            let lo = first.max(slot.emitted[i] as i64);
            let hi = (first + st.pulse as i64).min(end);
            if hi <= lo {
                continue;
            }
            let t = self.runner.output(i);
            let mut shape = t.shape().to_vec();
            let entry = t.narrow(0, b, 1)?;
            let data = entry
                .narrow(st.axis, (lo - first) as usize, (hi - lo) as usize)?
                .contiguous();
            shape.remove(0);
            shape[st.axis - 1] = (hi - lo) as usize;
            out.push(StreamChunk {
                stream: b,
                chunk: Chunk {
                    output: i,
                    start: lo as u64,
                    data: data.reshape(&shape)?,
                },
            });
            self.slots[b].emitted[i] = hi as u64;
        }
        Ok(())
    }

    /// Back to fresh streams: zeroed state, nothing buffered.
    pub fn reset(&mut self) {
        self.runner.reset();
        self.steps = 0;
        for s in &mut self.slots {
            s.filled = 0;
            s.pushed = 0;
            s.ended = false;
            s.emitted.iter_mut().for_each(|e| *e = 0);
        }
    }
}

/// The first node whose output depends on where its stream ends.
fn end_dependent_node(model: &PulsedModel) -> Option<String> {
    model.graph.nodes.iter().find_map(|n| {
        let any = n.op.as_any();
        let ends = any
            .downcast_ref::<PulsePad>()
            .is_some_and(|p| p.end.is_some())
            || any.is::<ReflectPulsePad>()
            || any
                .downcast_ref::<PulsedSameAxisConcat>()
                .is_some_and(|c| c.suffix.is_some());
        ends.then(|| n.name.clone())
    })
}
