//! PulsePad: constant padding at a stream's start and end, applied to the
//! frames of each pulse by their logical position.

use crate::op_common;
use crate::ops::{
    checks, outputs_len, DType, Dim, Op, OpError, OpResult, OpState, Scratch, Tensor, TypedFact,
};

use super::frames::FrameLayout;

/// Overwrites, with `value`, the frames whose logical index (in padded
/// coordinates, `step*pulse - delay + k`) lies before `begin` or at/after
/// `end(S)`. The data itself is already shifted into place by a [`super::Delay`].
#[derive(Debug, Clone, PartialEq)]
pub struct PulsePad {
    pub axis: usize,
    pub pulse: usize,
    pub delay: usize,
    pub begin: usize,
    pub end: Option<Dim>,
    pub value: f32,
}

impl Op for PulsePad {
    op_common!("PulsePad");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        super::frames::one_pulse_input("PulsePad", inputs, self.axis, self.pulse)?;
        Ok(vec![inputs[0].clone()])
    }

    fn eval(&self, _: &[&Tensor], _: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        Err(OpError::Other(
            "PulsePad keeps state: run it through its state".into(),
        ))
    }

    fn state(&self) -> Option<Box<dyn OpState>> {
        Some(Box::new(PulsePadState {
            op: self.clone(),
            step: 0,
            s: None,
        }))
    }

    fn info(&self) -> String {
        let end = self
            .end
            .map(|e| e.to_string())
            .unwrap_or_else(|| "-".into());
        format!(
            "axis {} begin {} end {end} value {} delay {}",
            self.axis, self.begin, self.value, self.delay
        )
    }
}

/// Step counter and known stream length of a [`PulsePad`].
#[derive(Debug)]
pub struct PulsePadState {
    op: PulsePad,
    step: u64,
    s: Option<i64>,
}

impl OpState for PulsePadState {
    fn eval(
        &mut self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        _: &mut Scratch,
    ) -> OpResult<()> {
        checks::input_count(inputs, 1)?;
        let x = inputs[0];
        let lay = FrameLayout::of(x.shape(), self.op.axis)?;
        outputs_len(outputs, 1);
        outputs[0].copy_from(x);
        let first = self.step as i64 * lay.frames as i64 - self.op.delay as i64;
        self.step += 1;
        let end = match (self.op.end, self.s) {
            (Some(e), Some(s)) => Some(e.eval(s)),
            _ => None,
        };
        let is_pad = |k: usize| {
            let i = first + k as i64;
            i < self.op.begin as i64 || end.is_some_and(|e| i >= e)
        };
        let v = self.op.value;
        let out = &mut outputs[0];
        macro_rules! fill {
            ($t:ty) => {{
                let o: &mut [$t] = out.as_slice_mut()?;
                let pv = <$t as crate::ops::Element>::from_f32(v);
                for blk in 0..lay.outer {
                    for k in (0..lay.frames).filter(|&k| is_pad(k)) {
                        let at = lay.at(blk, k);
                        o[at..at + lay.inner].fill(pv);
                    }
                }
            }};
        }
        match out.dtype() {
            DType::F32 => fill!(f32),
            DType::F16 => fill!(half::f16),
            DType::BF16 => fill!(half::bf16),
            DType::I64 => fill!(i64),
            DType::Bool => fill!(bool),
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.step = 0;
    }

    fn set_stream_len(&mut self, s: Option<i64>) {
        self.s = s;
    }
}
