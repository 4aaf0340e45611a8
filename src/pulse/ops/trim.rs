//! AffineChunkTrim: drops the leading frames a windowed op carried but must
//! not emit, and only when its input really carries them.

use crate::op_common;
use crate::ops::{checks, outputs_len, Dim, Op, OpError, OpResult, Scratch, Tensor, TypedFact};

/// Keeps the last `keep` frames of an input of `drop + keep` frames on
/// `axis`. An input that already has exactly `keep` frames (the upstream
/// absorbed the context) passes through untouched, so a trim can never cut twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffineChunkTrim {
    pub axis: usize,
    pub drop: usize,
    pub keep: usize,
}

impl Op for AffineChunkTrim {
    op_common!("AffineChunkTrim");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        checks::input_count(inputs, 1)?;
        checks::rank_at_least(inputs[0], 0, self.axis + 1)?;
        let n = inputs[0].shape[self.axis];
        if n != Dim::n(self.keep as i64) && n != Dim::n((self.drop + self.keep) as i64) {
            return Err(OpError::Shape(format!(
                "AffineChunkTrim keeps {} of {} frames, input has {n}",
                self.keep,
                self.drop + self.keep
            )));
        }
        let mut f = inputs[0].clone();
        f.shape[self.axis] = Dim::n(self.keep as i64);
        Ok(vec![f])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        checks::input_count(inputs, 1)?;
        let x = inputs[0];
        if self.axis >= x.rank() {
            return Err(OpError::Rank {
                input: 0,
                expected: format!("> {}", self.axis),
                got: x.rank(),
            });
        }
        let n = x.shape()[self.axis];
        let start = if n == self.keep {
            0
        } else if n == self.drop + self.keep {
            self.drop
        } else {
            return Err(OpError::Shape(format!(
                "AffineChunkTrim keeps {} of {} frames, input has {n}",
                self.keep,
                self.drop + self.keep
            )));
        };
        outputs_len(outputs, 1);
        let view = x.narrow(self.axis, start, self.keep)?;
        outputs[0].copy_from(&view);
        Ok(())
    }

    fn info(&self) -> String {
        format!("axis {} drop {} keep {}", self.axis, self.drop, self.keep)
    }
}
