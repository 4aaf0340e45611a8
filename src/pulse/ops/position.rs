//! Stream positions: absolute frame indices of each pulse, so masks and
//! position terms see the positions of the whole-utterance graph.

use crate::op_common;
use crate::ops::{
    checks, outputs_len, DType, Dim, Op, OpError, OpResult, OpState, Scratch, Tensor, TypedFact,
};

/// Outputs `[pulse]` i64 positions `step*pulse - delay + offset + k`; the
/// pulsed form of [`crate::ops::range::Range`] on a streaming axis. Its input
/// only clocks it (one step per input pulse).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPosition {
    pub pulse: usize,
    pub delay: usize,
    pub offset: i64,
}

impl Op for StreamPosition {
    op_common!("StreamPosition");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        checks::input_count(inputs, 1)?;
        Ok(vec![TypedFact::new(
            DType::I64,
            [Dim::n(self.pulse as i64)],
        )])
    }

    fn eval(&self, _: &[&Tensor], _: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        Err(OpError::Other(
            "StreamPosition keeps state: run it through its state".into(),
        ))
    }

    fn state(&self) -> Option<Box<dyn OpState>> {
        Some(Box::new(StreamPositionState {
            op: self.clone(),
            step: 0,
        }))
    }

    fn info(&self) -> String {
        format!(
            "pulse {} delay {} offset {}",
            self.pulse, self.delay, self.offset
        )
    }
}

/// Step counter of a [`StreamPosition`].
#[derive(Debug)]
pub struct StreamPositionState {
    op: StreamPosition,
    step: u64,
}

impl OpState for StreamPositionState {
    fn eval(
        &mut self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        _: &mut Scratch,
    ) -> OpResult<()> {
        checks::input_count(inputs, 1)?;
        outputs_len(outputs, 1);
        outputs[0].ensure(DType::I64, &[self.op.pulse]);
        let first = self.step as i64 * self.op.pulse as i64 - self.op.delay as i64 + self.op.offset;
        for (k, v) in outputs[0].as_slice_mut::<i64>()?.iter_mut().enumerate() {
            *v = first + k as i64;
        }
        self.step += 1;
        Ok(())
    }

    fn reset(&mut self) {
        self.step = 0;
    }
}
