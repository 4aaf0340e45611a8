//! The pulsed form of [`LimitedAttention`]: queries of one pulse against
//! keys/values kept by a Delay, with positions before the stream masked.

use crate::op_common;
use crate::ops::limited_attention::{attend, LimitedAttention};
use crate::ops::{Op, OpError, OpResult, OpState, Scratch, Tensor, TypedFact};

/// Inputs: q `[P, d]`, and k, v `[P + left_context, d]` whose first rows are
/// the `left_context` frames before the pulse (each with a leading batch axis
/// when batched: the streams advance together). `delay` is the stream's delay.
#[derive(Debug, Clone, PartialEq)]
pub struct PulsedLimitedAttention {
    pub attn: LimitedAttention,
    pub pulse: usize,
    pub delay: usize,
}

impl Op for PulsedLimitedAttention {
    op_common!("PulsedLimitedAttention");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        let (_, t) = self.attn.check(inputs)?;
        let ok = inputs[0].shape[t].as_const() == Some(self.pulse as i64)
            && inputs[1].shape[t].as_const() == Some((self.pulse + self.attn.left_context) as i64);
        if !ok {
            return Err(OpError::Shape(format!(
                "expected q of {} rows and k, v of {} rows, got {} {}",
                self.pulse,
                self.pulse + self.attn.left_context,
                inputs[0],
                inputs[1]
            )));
        }
        Ok(vec![inputs[0].clone()])
    }

    fn eval(&self, _: &[&Tensor], _: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        Err(OpError::Other(
            "PulsedLimitedAttention keeps state: run it through its state".into(),
        ))
    }

    fn state(&self) -> Option<Box<dyn OpState>> {
        Some(Box::new(AttnState {
            op: self.clone(),
            step: 0,
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

/// Step counter of a [`PulsedLimitedAttention`].
#[derive(Debug)]
pub struct AttnState {
    op: PulsedLimitedAttention,
    step: u64,
}

impl OpState for AttnState {
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
        let (p, lc) = (self.op.pulse, self.op.attn.left_context);
        let t = inputs[0].rank().saturating_sub(2);
        if inputs[0].shape().get(t) != Some(&p) || inputs[1].shape().get(t) != Some(&(p + lc)) {
            return Err(OpError::Shape(format!(
                "expected q of {p} rows and k of {} rows, got {:?} {:?}",
                p + lc,
                inputs[0].shape(),
                inputs[1].shape()
            )));
        }
        // query row r has logical position first+r; key row m has first-lc+m
        let first = self.step as i64 * p as i64 - self.op.delay as i64;
        self.step += 1;
        let lc_i = lc as i64;
        attend(
            self.op.attn.heads,
            self.op.attn.scale,
            inputs,
            outputs,
            scratch,
            |r| {
                let pos = first + r as i64;
                if pos < 0 {
                    return (1, 0); // warm-up query: zeros
                }
                // keys with position >= 0 start at row lc - first
                let lo = (r as i64).max(lc_i - first);
                (lo, r as i64 + lc_i)
            },
            p,
        )
    }

    fn reset(&mut self) {
        self.step = 0;
    }
}
