//! `Reshape` with ONNX semantics, on concrete and on symbolic sizes.

use super::{dim_product, param_in_range, with_stream_symbol, write_reshaped, Shape8, MAX_PARAM};
use crate::op_common;
use crate::ops::broadcast::MAX_RANK;
use crate::ops::checks::input_count;
use crate::ops::{outputs_len, Dim, Op, OpError, OpResult, Scratch, Tensor, TypedFact};

/// Reshape with ONNX semantics: `0` copies the input size at that index,
/// one `-1` is inferred from the element count. On symbolic sizes the
/// result must be an exact [`Dim`] (else `OpError::Dim`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reshape {
    pub shape: Vec<i64>,
}

/// `total / known` when it is an exact `Dim` for every `S`.
fn dim_quotient(total: Dim, known: Dim) -> Option<Dim> {
    if total == known {
        return Some(Dim::n(1));
    }
    match known.as_const() {
        Some(1) => Some(total),
        Some(k) => total.div_exact(k),
        None => {
            let (tk, kk) = (total.coef()?, known.coef()?);
            if tk % kk != 0 {
                return None;
            }
            let q = tk / kk;
            (known.mul(q) == Some(total)).then_some(Dim::n(q))
        }
    }
}

impl Reshape {
    fn check_params(&self, rank: usize) -> OpResult<Option<usize>> {
        if self.shape.len() > MAX_RANK {
            return Err(OpError::Param(format!(
                "reshape to rank {} above {MAX_RANK}",
                self.shape.len()
            )));
        }
        for &v in &self.shape {
            param_in_range(v, "reshape size")?;
        }
        let mut sizes = self.shape.iter().filter(|&&v| v > 0);
        if sizes
            .try_fold(1i64, |acc, &v| {
                acc.checked_mul(v).filter(|p| *p <= MAX_PARAM)
            })
            .is_none()
        {
            return Err(OpError::Param(format!(
                "reshape {:?} has too many elements",
                self.shape
            )));
        }
        let mut infer = None;
        for (i, &v) in self.shape.iter().enumerate() {
            match v {
                0 if i >= rank => {
                    return Err(OpError::Param(format!(
                        "reshape {:?}: 0 at index {i} of a rank-{rank} input",
                        self.shape
                    )))
                }
                -1 if infer.is_some() => {
                    return Err(OpError::Param(format!(
                        "reshape {:?} has more than one -1",
                        self.shape
                    )))
                }
                -1 => infer = Some(i),
                v if v < -1 => {
                    return Err(OpError::Param(format!(
                        "reshape {:?}: invalid size {v}",
                        self.shape
                    )))
                }
                _ => {}
            }
        }
        Ok(infer)
    }

    fn out_dims(&self, x: &TypedFact) -> OpResult<Vec<Dim>> {
        let infer = self.check_params(x.rank())?;
        let mut out: Vec<Dim> = self
            .shape
            .iter()
            .enumerate()
            .map(|(i, &v)| if v == 0 { x.shape[i] } else { Dim::n(v.max(1)) })
            .collect();
        let unrepresentable =
            |what: &str| OpError::Dim(format!("reshape {x} to {:?}: {what}", self.shape));
        let total =
            dim_product(x.shape.iter().copied()).ok_or_else(|| unrepresentable("element count"))?;
        let known =
            dim_product(out.iter().copied()).ok_or_else(|| unrepresentable("element count"))?;
        match infer {
            Some(i) => {
                if known == Dim::n(0) {
                    return Err(OpError::Shape(format!(
                        "reshape {x} to {:?}: cannot infer -1 next to a 0 size",
                        self.shape
                    )));
                }
                out[i] =
                    dim_quotient(total, known).ok_or_else(|| unrepresentable("the -1 size"))?;
            }
            None if known != total => {
                return Err(OpError::Shape(format!(
                    "cannot reshape {x} to {:?}",
                    self.shape
                )));
            }
            None => {}
        }
        Ok(out)
    }

    fn out_shape(&self, x: &Tensor) -> OpResult<Shape8> {
        let infer = self.check_params(x.rank())?;
        let mut out = Shape8::new();
        for (i, &v) in self.shape.iter().enumerate() {
            out.push(if v == 0 {
                x.shape()[i]
            } else {
                v.max(1) as usize
            })?;
        }
        let known = out.checked_len()?;
        match infer {
            Some(i) => {
                if known == 0 || !x.len().is_multiple_of(known) {
                    return Err(OpError::Shape(format!(
                        "cannot reshape {:?} to {:?}",
                        x.shape(),
                        self.shape
                    )));
                }
                out.as_mut_slice()[i] = x.len() / known;
            }
            None if known != x.len() => {
                return Err(OpError::Shape(format!(
                    "cannot reshape {:?} to {:?}",
                    x.shape(),
                    self.shape
                )));
            }
            None => {}
        }
        Ok(out)
    }
}

impl Op for Reshape {
    op_common!("Reshape");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        Ok(vec![TypedFact {
            dtype: x.dtype,
            shape: self.out_dims(x)?,
        }])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        let shape = self.out_shape(inputs[0])?;
        outputs_len(outputs, 1);
        write_reshaped(inputs[0], &mut outputs[0], &shape)
    }

    /// Frame-local when the frames keep their place in row-major order: the
    /// output has `S` on one axis with the same element counts before and
    /// after it as the input has around its streaming axis.
    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        let x = with_stream_symbol(inputs.first()?, a)?;
        let out = self.out_dims(&x).ok()?;
        let o = out.iter().position(|d| d.is_symbolic())?;
        let before = |dims: &[Dim]| dim_product(dims.iter().copied()).and_then(|d| d.as_const());
        (out[o] == Dim::s() && before(&out[..o])? == before(&x.shape[..a])?).then_some(o)
    }

    fn info(&self) -> String {
        format!("{:?}", self.shape)
    }
}
