//! The pulsed form of [`ChunkedAttention`]: queries of one pulse, held back
//! by the op's look-ahead, against keys/values kept by a Delay; keys before
//! the stream start, and past its end once the end is known, are masked.

use crate::op_common;
use crate::ops::chunked_attention::ChunkedAttention;
use crate::ops::limited_attention::attend;
use crate::ops::{Dim, Op, OpError, OpResult, OpState, Scratch, Tensor, TypedFact};

/// Inputs: q `[P, d]` delayed by `lag` frames more than the keys, and k,
/// v `[P + overlap, d]` whose first `overlap` rows are the frames before the
/// pulse (each with a leading batch axis when batched). `delay` is the
/// keys' stream delay; `len` the stream's length (a function of the input
/// length `S`).
#[derive(Debug, Clone, PartialEq)]
pub struct PulsedChunkedAttention {
    pub attn: ChunkedAttention,
    pub pulse: usize,
    pub delay: usize,
    pub lag: usize,
    pub len: Dim,
}

impl PulsedChunkedAttention {
    /// The fewest frames the queries must wait for their windows' last keys
    /// to have arrived. When the pulse is a whole number of chunks, pulses
    /// fall on the same chunk phase every step, and a stream whose pulses
    /// already end on a chunk's end (the output of an earlier chunked layer)
    /// waits for no more than the look-ahead; otherwise the worst case.
    pub fn lag_for(attn: &ChunkedAttention, pulse: usize, delay: usize) -> usize {
        let c = attn.chunk.max(1);
        if !pulse.is_multiple_of(c) {
            return attn.look_ahead();
        }
        (0..=attn.look_ahead())
            .find(|&e| {
                // the pulse's last query sits at phase (-1 - delay - e) mod c
                let phase = (-1 - delay as i64 - e as i64).rem_euclid(c as i64) as usize;
                c - 1 - phase + attn.right <= e
            })
            .unwrap_or(attn.look_ahead())
    }

    /// Rows of past keys each pulse carries.
    pub fn overlap(&self) -> usize {
        self.lag + self.attn.look_back()
    }
}

impl Op for PulsedChunkedAttention {
    op_common!("PulsedChunkedAttention");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        let (_, t) = self.attn.check(inputs)?;
        let ok = inputs[0].shape[t].as_const() == Some(self.pulse as i64)
            && inputs[1].shape[t].as_const() == Some((self.pulse + self.overlap()) as i64);
        if !ok {
            return Err(OpError::Shape(format!(
                "expected q of {} rows and k, v of {} rows, got {} {}",
                self.pulse,
                self.pulse + self.overlap(),
                inputs[0],
                inputs[1]
            )));
        }
        Ok(vec![inputs[0].clone()])
    }

    fn eval(&self, _: &[&Tensor], _: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        Err(OpError::Other(
            "PulsedChunkedAttention keeps state: run it through its state".into(),
        ))
    }

    fn state(&self) -> Option<Box<dyn OpState>> {
        Some(Box::new(ChunkedState {
            op: self.clone(),
            step: 0,
            end: None,
        }))
    }

    fn info(&self) -> String {
        format!(
            "{} pulse {} delay {}",
            self.attn.info(),
            self.pulse,
            self.delay
        )
    }
}

/// Step counter and known stream end of a [`PulsedChunkedAttention`].
#[derive(Debug)]
pub struct ChunkedState {
    op: PulsedChunkedAttention,
    step: u64,
    end: Option<i64>,
}

impl OpState for ChunkedState {
    fn eval(
        &mut self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        if inputs.len() != 3 {
            return Err(OpError::InputCount {
                expected: "3".into(),
                got: inputs.len(),
            });
        }
        let (p, o) = (self.op.pulse, self.op.overlap());
        let t = inputs[0].rank().saturating_sub(2);
        if inputs[0].shape().get(t) != Some(&p) || inputs[1].shape().get(t) != Some(&(p + o)) {
            return Err(OpError::Shape(format!(
                "expected q of {p} rows and k of {} rows, got {:?} {:?}",
                p + o,
                inputs[0].shape(),
                inputs[1].shape()
            )));
        }
        // key row m has position kfirst + m; query row r has qfirst + r
        let kfirst = self.step as i64 * p as i64 - self.op.delay as i64 - o as i64;
        let qfirst = kfirst + o as i64 - self.op.lag as i64;
        self.step += 1;
        let end = self.end.unwrap_or(i64::MAX);
        let attn = &self.op.attn;
        attend(
            attn.heads,
            None,
            inputs,
            outputs,
            scratch,
            |r| {
                let pos = qfirst + r as i64;
                if pos < 0 || pos >= end {
                    return (1, 0); // warm-up or past the end: zeros
                }
                let (lo, hi) = attn.window(pos);
                ((lo.max(0) - kfirst), (hi.min(end - 1) - kfirst))
            },
            p,
        )
    }

    fn reset(&mut self) {
        self.step = 0;
        self.end = None;
    }

    fn set_stream_len(&mut self, s: Option<i64>) {
        self.end = s.map(|s| self.op.len.eval(s).max(0));
    }
}
