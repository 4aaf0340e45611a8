//! ReflectPulsePad: reflect padding of the streaming axis. The start
//! mirrors frames that arrive later, so the output is delayed by the leading
//! pad; the end mirrors frames already seen, kept in a history ring.

use crate::op_common;
use crate::ops::{
    checks, outputs_len, DType, Dim, Op, OpError, OpResult, OpState, Scratch, Tensor, TypedFact,
};

use super::frames::FrameLayout;

/// Padded frame `q` is input frame `before - q` (start), `q - before`
/// (body) or `2(S-1) - (q - before)` (end), as numpy's `reflect`. Input
/// frame `i` of step `n` sits at `n*pulse - in_delay + k`; output frame `q`
/// at `n*pulse - in_delay - before + k`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReflectPulsePad {
    pub axis: usize,
    pub pulse: usize,
    pub in_delay: usize,
    pub before: usize,
    pub after: usize,
    /// Input stream length.
    pub len: Dim,
}

impl ReflectPulsePad {
    fn history(&self) -> usize {
        self.pulse + 2 * (self.before + self.after) + 1
    }
}

impl Op for ReflectPulsePad {
    op_common!("ReflectPulsePad");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        super::frames::one_pulse_input("ReflectPulsePad", inputs, self.axis, self.pulse)?;
        checks::dtype(inputs[0], 0, DType::F32)?;
        Ok(vec![inputs[0].clone()])
    }

    fn eval(&self, _: &[&Tensor], _: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        Err(OpError::Other(
            "ReflectPulsePad keeps state: run it through its state".into(),
        ))
    }

    fn state(&self) -> Option<Box<dyn OpState>> {
        Some(Box::new(ReflectState {
            op: self.clone(),
            step: 0,
            s: None,
            ring: Vec::new(),
        }))
    }

    fn info(&self) -> String {
        format!(
            "axis {} reflect ({}, {}) delay {}",
            self.axis, self.before, self.after, self.in_delay
        )
    }
}

/// History of the last input frames, step counter and known length.
#[derive(Debug)]
pub struct ReflectState {
    op: ReflectPulsePad,
    step: u64,
    s: Option<i64>,
    /// `[outer][history][inner]`, frame `i` at slot `i mod history`.
    ring: Vec<f32>,
}

impl OpState for ReflectState {
    fn eval(
        &mut self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        _: &mut Scratch,
    ) -> OpResult<()> {
        checks::input_count(inputs, 1)?;
        let x = inputs[0];
        let lay = FrameLayout::of(x.shape(), self.op.axis)?;
        let h = self.op.history();
        if self.ring.len() != lay.outer * h * lay.inner {
            self.ring = vec![0.0; lay.outer * h * lay.inner];
        }
        let xs = crate::ops::contig(x);
        let xv = xs.as_slice::<f32>()?;
        let first_in = self.step as i64 * lay.frames as i64 - self.op.in_delay as i64;
        let slot = |i: i64| i.rem_euclid(h as i64) as usize;
        for blk in 0..lay.outer {
            for k in 0..lay.frames {
                let at = ((blk * h) + slot(first_in + k as i64)) * lay.inner;
                let src = lay.at(blk, k);
                self.ring[at..at + lay.inner].copy_from_slice(&xv[src..src + lay.inner]);
            }
        }
        let before = self.op.before as i64;
        let s = self.s.map(|s| self.op.len.eval(s));
        let first_out = first_in - before;
        self.step += 1;
        outputs_len(outputs, 1);
        outputs[0].ensure(DType::F32, x.shape());
        let o = outputs[0].as_slice_mut::<f32>()?;
        for k in 0..lay.frames {
            let q = first_out + k as i64;
            let src = if q < 0 {
                None // warm-up: never emitted
            } else if q < before {
                Some(before - q)
            } else {
                let i = q - before;
                match s {
                    Some(s) if i >= s => Some(2 * (s - 1) - i),
                    _ => Some(i),
                }
            };
            for blk in 0..lay.outer {
                let dst = lay.at(blk, k);
                match src {
                    Some(i) if i >= 0 && i > first_in + lay.frames as i64 - 1 - h as i64 => {
                        let at = ((blk * h) + slot(i)) * lay.inner;
                        o[dst..dst + lay.inner].copy_from_slice(&self.ring[at..at + lay.inner]);
                    }
                    _ => o[dst..dst + lay.inner].fill(0.0),
                }
            }
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.step = 0;
        self.ring.iter_mut().for_each(|v| *v = 0.0);
    }

    fn set_stream_len(&mut self, s: Option<i64>) {
        self.s = s;
    }
}
