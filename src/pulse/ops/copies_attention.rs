//! The pulsed form of [`CopiesAttention`]: as [`super::PulsedChunkedAttention`]
//! without look-ahead (a chunk's copies already sit in its own rows), over
//! rows of a frame and its copy slot.

use super::PulsedChunkedAttention;
use crate::op_common;
use crate::ops::copies_attention::{attend_copies, CopiesAttention};
use crate::ops::{Dim, Op, OpError, OpResult, OpState, Scratch, Tensor, TypedFact};

/// Inputs: q `[P, 2, d]` delayed by `lag` frames more than the keys, and
/// k, v `[P + overlap, 2, d]` whose first `overlap` rows come before the
/// pulse (each with a leading batch axis when batched). `delay` is the
/// keys' stream delay; `len` the stream's length.
#[derive(Debug, Clone, PartialEq)]
pub struct PulsedCopiesAttention {
    pub attn: CopiesAttention,
    pub pulse: usize,
    pub delay: usize,
    pub lag: usize,
    pub len: Dim,
}

impl PulsedCopiesAttention {
    /// The fewest frames queries wait: a chunk's own rows, no look-ahead.
    pub fn lag_for(attn: &CopiesAttention, pulse: usize, delay: usize) -> usize {
        PulsedChunkedAttention::lag_for(&attn.frames(), pulse, delay)
    }

    /// Rows of past keys each pulse carries.
    pub fn overlap(&self) -> usize {
        self.lag + self.attn.frames().look_back()
    }
}

impl Op for PulsedCopiesAttention {
    op_common!("PulsedCopiesAttention");

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
            "PulsedCopiesAttention keeps state: run it through its state".into(),
        ))
    }

    fn state(&self) -> Option<Box<dyn OpState>> {
        Some(Box::new(CopiesAttentionState {
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

/// Step counter and known stream end of a [`PulsedCopiesAttention`].
#[derive(Debug)]
struct CopiesAttentionState {
    op: PulsedCopiesAttention,
    step: u64,
    end: Option<i64>,
}

impl OpState for CopiesAttentionState {
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
        let r = inputs[0].rank();
        let rows = |x: &Tensor| (r >= 3).then(|| x.shape()[r - 3]);
        if !(3..=4).contains(&r) || rows(inputs[0]) != Some(p) || rows(inputs[1]) != Some(p + o) {
            return Err(OpError::Shape(format!(
                "expected q of {p} rows and k of {} rows (a slot axis of 2), got {:?} {:?}",
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
        attend_copies(attn.heads, inputs, outputs, scratch, |r| {
            let pos = qfirst + r as i64;
            if pos < 0 || pos >= end {
                return ((1, 0), (1, 0)); // warm-up or past the end: zeros
            }
            let ((lo, hi), (clo, chi)) = attn.keys(pos, end);
            ((lo - kfirst, hi - kfirst), (clo - kfirst, chi - kfirst))
        })
    }

    fn reset(&mut self) {
        self.step = 0;
        self.end = None;
    }

    fn set_stream_len(&mut self, s: Option<i64>) {
        self.end = s.map(|s| self.op.len.eval(s).max(0));
    }
}
