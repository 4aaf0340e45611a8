//! `Slice`: one axis cut to `start..end` with Python's bounds.

use super::{max_rank, param_in_range, shape_of, write_view, Shape8, Shaped};
use crate::op_common;
use crate::ops::checks::input_count;
use crate::ops::{outputs_len, Dim, Op, OpError, OpResult, Scratch, Tensor, TypedFact};

/// `x[start:end]` along one axis, Python semantics (negative bounds count
/// from the end, out-of-range bounds clamp, step 1; `end: None` runs to the
/// end). On a symbolic axis the facts assume the axis holds the bounds
/// (`S >= start` etc.), as a streaming graph does once `S` is large enough.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub axis: usize,
    pub start: i64,
    pub end: Option<i64>,
}

fn clamp_bound(v: i64, n: i64) -> i64 {
    if v < 0 {
        (v + n).max(0)
    } else {
        v.min(n)
    }
}

impl Slice {
    /// Concrete `(start, len)` on an axis of size `n`.
    fn bounds(&self, n: usize) -> (usize, usize) {
        let n = n as i64;
        let s = clamp_bound(self.start, n);
        let e = self.end.map_or(n, |e| clamp_bound(e, n));
        (s as usize, (e - s).max(0) as usize)
    }

    fn len_dim(&self, n: Dim) -> OpResult<Dim> {
        if let Some(v) = n.as_const() {
            let v = usize::try_from(v).map_err(|_| OpError::Shape(format!("negative size {v}")))?;
            return Ok(Dim::n(self.bounds(v).1 as i64));
        }
        let (s, e) = (self.start, self.end);
        match (s >= 0, e) {
            (true, None) => Ok(n.add_const(-s)),
            (true, Some(e)) if e < 0 => Ok(n.add_const(e - s)),
            (true, Some(e)) => Ok(Dim::n((e - s).max(0))),
            (false, None) => Ok(Dim::n(-s)),
            (false, Some(e)) if e < 0 => Ok(Dim::n((e - s).max(0))),
            (false, Some(e)) => Err(OpError::Dim(format!(
                "slice {s}..{e} of an axis of size {n}"
            ))),
        }
    }

    fn check<S: Shaped>(&self, x: &S) -> OpResult<()> {
        max_rank(x, 0)?;
        param_in_range(self.start, "slice start")?;
        if let Some(e) = self.end {
            param_in_range(e, "slice end")?;
        }
        if self.axis >= x.ndim() {
            return Err(OpError::Param(format!(
                "slice axis {} out of range for rank {}",
                self.axis,
                x.ndim()
            )));
        }
        Ok(())
    }
}

impl Op for Slice {
    op_common!("Slice");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        self.check(x)?;
        let mut out = x.clone();
        out.shape[self.axis] = self.len_dim(x.shape[self.axis])?;
        Ok(vec![out])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        self.check(x)?;
        let mut shape = shape_of(x, 0)?;
        let (start, len) = self.bounds(x.shape()[self.axis]);
        shape.as_mut_slice()[self.axis] = len;
        let st = Shape8::from_slice(x.shape())?.strides();
        outputs_len(outputs, 1);
        write_view(
            x,
            &mut outputs[0],
            start * st[self.axis],
            &st[..shape.rank],
            &shape,
        )
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        axes.first().copied().flatten().filter(|&a| a != self.axis)
    }

    fn info(&self) -> String {
        let e = self.end.map_or(String::new(), |e| e.to_string());
        format!("axis {} [{}:{e}]", self.axis, self.start)
    }
}
