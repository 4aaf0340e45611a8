//! `Permute` and `MoveAxis`: axis reorders, both written through one strided
//! copy.

use super::{shape_of, write_view, Shape8};
use crate::op_common;
use crate::ops::broadcast::MAX_RANK;
use crate::ops::checks::input_count;
use crate::ops::{outputs_len, Op, OpError, OpResult, Scratch, Tensor, TypedFact};

/// Reorders axes: output axis `i` is input axis `axes[i]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permute {
    pub axes: Vec<usize>,
}

fn check_permutation(axes: &[usize], rank: usize) -> OpResult<()> {
    let mut seen = [false; MAX_RANK];
    let bad = axes.len() != rank
        || rank > MAX_RANK
        || axes
            .iter()
            .any(|&a| a >= rank || std::mem::replace(&mut seen[a], true));
    if bad {
        return Err(OpError::Param(format!(
            "{axes:?} is not a permutation of {rank} axes"
        )));
    }
    Ok(())
}

/// Writes `x` permuted by `perm` (output axis `i` = input axis `perm[i]`).
fn write_permuted(x: &Tensor, perm: &[usize], out: &mut Tensor) -> OpResult<()> {
    let ins = shape_of(x, 0)?;
    let in_st = ins.strides();
    let (mut shape, mut st) = (Shape8::new(), [0usize; MAX_RANK]);
    for (i, &p) in perm.iter().enumerate() {
        shape.push(ins.as_slice()[p])?;
        st[i] = in_st[p];
    }
    write_view(x, out, 0, &st[..shape.rank], &shape)
}

impl Op for Permute {
    op_common!("Permute");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        check_permutation(&self.axes, x.rank())?;
        Ok(vec![TypedFact {
            dtype: x.dtype,
            shape: self.axes.iter().map(|&a| x.shape[a]).collect(),
        }])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        check_permutation(&self.axes, inputs[0].rank())?;
        outputs_len(outputs, 1);
        write_permuted(inputs[0], &self.axes, &mut outputs[0])
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        self.axes.iter().position(|&p| p == a)
    }

    fn info(&self) -> String {
        format!("{:?}", self.axes)
    }
}

/// Moves axis `from` to position `to`, keeping the others in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveAxis {
    pub from: usize,
    pub to: usize,
}

impl MoveAxis {
    fn perm(&self, rank: usize) -> OpResult<([usize; MAX_RANK], usize)> {
        if self.from >= rank || self.to >= rank || rank > MAX_RANK {
            return Err(OpError::Param(format!(
                "move axis {} -> {} out of range for rank {rank}",
                self.from, self.to
            )));
        }
        let mut perm = [0usize; MAX_RANK];
        let mut k = 0;
        for i in 0..rank {
            if k == self.to {
                perm[k] = self.from;
                k += 1;
            }
            if i != self.from {
                perm[k] = i;
                k += 1;
            }
        }
        if k == self.to {
            perm[k] = self.from;
        }
        Ok((perm, rank))
    }
}

impl Op for MoveAxis {
    op_common!("MoveAxis");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        let (perm, r) = self.perm(x.rank())?;
        Ok(vec![TypedFact {
            dtype: x.dtype,
            shape: perm[..r].iter().map(|&a| x.shape[a]).collect(),
        }])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        let (perm, r) = self.perm(inputs[0].rank())?;
        outputs_len(outputs, 1);
        write_permuted(inputs[0], &perm[..r], &mut outputs[0])
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        let (perm, r) = self.perm(inputs.first()?.rank()).ok()?;
        perm[..r].iter().position(|&p| p == a)
    }

    fn info(&self) -> String {
        format!("{} -> {}", self.from, self.to)
    }
}
