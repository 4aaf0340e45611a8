//! Input checks shared by ops, each giving a typed error that names the input.

use super::{DType, Dim, OpError, OpResult, Tensor, TypedFact};

pub fn input_count<T>(inputs: &[T], n: usize) -> OpResult<()> {
    if inputs.len() != n {
        return Err(OpError::InputCount {
            expected: n.to_string(),
            got: inputs.len(),
        });
    }
    Ok(())
}

pub fn input_count_range<T>(inputs: &[T], lo: usize, hi: usize) -> OpResult<()> {
    if inputs.len() < lo || inputs.len() > hi {
        return Err(OpError::InputCount {
            expected: format!("{lo}..={hi}"),
            got: inputs.len(),
        });
    }
    Ok(())
}

pub fn rank(f: &TypedFact, input: usize, r: usize) -> OpResult<()> {
    if f.rank() != r {
        return Err(OpError::Rank {
            input,
            expected: r.to_string(),
            got: f.rank(),
        });
    }
    Ok(())
}

pub fn rank_at_least(f: &TypedFact, input: usize, r: usize) -> OpResult<()> {
    if f.rank() < r {
        return Err(OpError::Rank {
            input,
            expected: format!(">= {r}"),
            got: f.rank(),
        });
    }
    Ok(())
}

pub fn float(f: &TypedFact, input: usize) -> OpResult<()> {
    if !f.dtype.is_float() {
        return Err(OpError::DType {
            input,
            expected: "a float type".into(),
            got: f.dtype,
        });
    }
    Ok(())
}

pub fn dtype(f: &TypedFact, input: usize, dt: DType) -> OpResult<()> {
    if f.dtype != dt {
        return Err(OpError::DType {
            input,
            expected: dt.to_string(),
            got: f.dtype,
        });
    }
    Ok(())
}

pub fn same_dtype(a: &TypedFact, b: &TypedFact, input: usize) -> OpResult<()> {
    if a.dtype != b.dtype {
        return Err(OpError::DType {
            input,
            expected: a.dtype.to_string(),
            got: b.dtype,
        });
    }
    Ok(())
}

/// A size that must be a known number (weights, kernel sizes).
pub fn concrete(d: &Dim, what: &str) -> OpResult<usize> {
    d.as_const()
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| OpError::Shape(format!("{what} must be a fixed size, got {d}")))
}

/// Resolves a possibly negative axis against a rank.
pub fn axis(axis: isize, rank: usize) -> OpResult<usize> {
    let a = if axis < 0 { axis + rank as isize } else { axis };
    if a < 0 || a as usize >= rank.max(1) {
        return Err(OpError::Param(format!(
            "axis {axis} out of range for rank {rank}"
        )));
    }
    Ok(a as usize)
}

/// The facts of concrete tensors (for ops that check with `output_facts`).
pub fn facts_of(inputs: &[&Tensor]) -> Vec<TypedFact> {
    inputs.iter().map(|t| TypedFact::of(t)).collect()
}

/// An optional bias (input 2) must be `[n]`: the fact check.
pub fn bias_fact(inputs: &[&TypedFact], n: usize) -> OpResult<()> {
    if let Some(b) = inputs.get(2) {
        rank(b, 2, 1)?;
        if b.shape[0] != Dim::n(n as i64) {
            return Err(OpError::Shape(format!(
                "bias {b} does not match {n} outputs"
            )));
        }
    }
    Ok(())
}

/// The same check on a concrete bias, without allocating.
pub fn bias_tensor(inputs: &[&Tensor], n: usize) -> OpResult<()> {
    if let Some(b) = inputs.get(2) {
        if b.rank() != 1 {
            return Err(OpError::Rank {
                input: 2,
                expected: "1".into(),
                got: b.rank(),
            });
        }
        if b.shape()[0] != n {
            return Err(OpError::Shape(format!(
                "bias {:?} does not match {n} outputs",
                b.shape()
            )));
        }
    }
    Ok(())
}
