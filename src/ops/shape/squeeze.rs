//! `Unsqueeze` and `Squeeze`: a size-1 axis added or removed.

use super::{max_rank, write_reshaped, Shape8, Shaped};
use crate::op_common;
use crate::ops::broadcast::MAX_RANK;
use crate::ops::checks::input_count;
use crate::ops::{outputs_len, Dim, Op, OpError, OpResult, Scratch, Tensor, TypedFact};

/// Inserts a size-1 axis at `axis` (`0..=rank`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsqueeze {
    pub axis: usize,
}

impl Unsqueeze {
    fn check<S: Shaped>(&self, x: &S) -> OpResult<()> {
        if self.axis > x.ndim() {
            return Err(OpError::Param(format!(
                "unsqueeze axis {} out of range for rank {}",
                self.axis,
                x.ndim()
            )));
        }
        if x.ndim() >= MAX_RANK {
            return Err(OpError::Rank {
                input: 0,
                expected: format!("< {MAX_RANK}"),
                got: x.ndim(),
            });
        }
        Ok(())
    }
}

impl Op for Unsqueeze {
    op_common!("Unsqueeze");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        self.check(inputs[0])?;
        let mut out = inputs[0].clone();
        out.shape.insert(self.axis, Dim::n(1));
        Ok(vec![out])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        self.check(x)?;
        let mut shape = Shape8::new();
        for (i, &d) in x.shape().iter().enumerate() {
            if i == self.axis {
                shape.push(1)?;
            }
            shape.push(d)?;
        }
        if self.axis == x.rank() {
            shape.push(1)?;
        }
        outputs_len(outputs, 1);
        write_reshaped(x, &mut outputs[0], &shape)
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        Some(if a >= self.axis { a + 1 } else { a })
    }

    fn info(&self) -> String {
        format!("axis {}", self.axis)
    }
}

/// Removes axis `axis`, which must have size 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Squeeze {
    pub axis: usize,
}

impl Squeeze {
    fn check<S: Shaped>(&self, x: &S) -> OpResult<()> {
        max_rank(x, 0)?;
        if self.axis >= x.ndim() {
            return Err(OpError::Param(format!(
                "squeeze axis {} out of range for rank {}",
                self.axis,
                x.ndim()
            )));
        }
        if x.dim(self.axis) != Dim::n(1) {
            return Err(OpError::Shape(format!(
                "squeeze axis {} has size {}, not 1",
                self.axis,
                x.dim(self.axis)
            )));
        }
        Ok(())
    }
}

impl Op for Squeeze {
    op_common!("Squeeze");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        self.check(inputs[0])?;
        let mut out = inputs[0].clone();
        out.shape.remove(self.axis);
        Ok(vec![out])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        self.check(x)?;
        let mut shape = Shape8::new();
        for (i, &d) in x.shape().iter().enumerate() {
            if i != self.axis {
                shape.push(d)?;
            }
        }
        outputs_len(outputs, 1);
        write_reshaped(x, &mut outputs[0], &shape)
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        match a.cmp(&self.axis) {
            std::cmp::Ordering::Less => Some(a),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => Some(a - 1),
        }
    }

    fn info(&self) -> String {
        format!("axis {}", self.axis)
    }
}
