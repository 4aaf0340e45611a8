//! `Linear`'s checks, facts and eval: one row-major product against the
//! PyTorch-layout weight, through `gemm_rows`.

use super::{
    common_float_dtype, common_float_fact_dtype, f32s, gemm_rows, load_f32, rows_work_len,
    store_f32, Linear,
};
use crate::op_common;
use crate::ops::broadcast::MAX_RANK;
use crate::ops::checks::{self, input_count_range, rank};
use crate::ops::{contig, outputs_len, DType, Op, OpError, OpResult, Scratch, Tensor, TypedFact};

/// Rows, fan-in and fan-out of a Linear on concrete tensors, checked.
fn linear_dims(inputs: &[&Tensor]) -> OpResult<(usize, usize, usize)> {
    let (x, w) = (inputs[0], inputs[1]);
    if x.rank() < 1 || x.rank() > MAX_RANK {
        return Err(OpError::Rank {
            input: 0,
            expected: format!("1..={MAX_RANK}"),
            got: x.rank(),
        });
    }
    if w.rank() != 2 {
        return Err(OpError::Rank {
            input: 1,
            expected: "2".into(),
            got: w.rank(),
        });
    }
    let fan_in = x.shape()[x.rank() - 1];
    let (fan_out, w_in) = (w.shape()[0], w.shape()[1]);
    if w_in != fan_in {
        return Err(OpError::Shape(format!(
            "weight {:?} ([out, in]) does not take {fan_in} input features of x {:?}",
            w.shape(),
            x.shape()
        )));
    }
    checks::bias_tensor(inputs, fan_out)?;
    Ok((x.shape()[..x.rank() - 1].iter().product(), fan_in, fan_out))
}

/// `out[r, :] = bias + x[r, :] · wᵀ` on row-major f32 slices.
fn linear_f32(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    (rows, k, n): (usize, usize, usize),
    tmp: &mut [f32],
) -> OpResult<()> {
    // wᵀ as a k×n matrix: element (i, o) sits at w[o*k + i]
    gemm_rows((rows, n, k), out, n, x, (k, 1), w, (1, k), bias, tmp)
}

impl Op for Linear {
    op_common!("Linear");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count_range(inputs, 2, 3)?;
        let dt = common_float_fact_dtype(inputs)?;
        let (x, w) = (inputs[0], inputs[1]);
        if x.rank() < 1 || x.rank() > MAX_RANK {
            return Err(OpError::Rank {
                input: 0,
                expected: format!("1..={MAX_RANK}"),
                got: x.rank(),
            });
        }
        rank(w, 1, 2)?;
        let fan_in = x.shape[x.rank() - 1];
        if w.shape[1] != fan_in {
            return Err(OpError::Shape(format!(
                "weight {w} ([out, in]) does not take the features of x {x}"
            )));
        }
        if let Some(b) = inputs.get(2) {
            rank(b, 2, 1)?;
            if b.shape[0] != w.shape[0] {
                return Err(OpError::Shape(format!(
                    "bias {b} does not match weight {w}"
                )));
            }
        }
        let mut shape = x.shape.clone();
        shape[x.rank() - 1] = w.shape[0];
        Ok(vec![TypedFact::dt_shape(dt, &shape)])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        input_count_range(inputs, 2, 3)?;
        let dt = common_float_dtype(inputs)?;
        let (rows, k, n) = linear_dims(inputs)?;
        let x = inputs[0];
        let mut shape = [0usize; MAX_RANK];
        shape[..x.rank()].copy_from_slice(x.shape());
        shape[x.rank() - 1] = n;
        outputs_len(outputs, 1);
        outputs[0].ensure(dt, &shape[..x.rank()]);
        if outputs[0].is_empty() {
            return Ok(());
        }
        if dt == DType::F32 {
            let (x, w) = (contig(x), contig(inputs[1]));
            let b = inputs.get(2).map(|b| contig(b));
            let b = match &b {
                Some(b) => Some(f32s(b)?),
                None => None,
            };
            let out = outputs[0].as_slice_mut::<f32>()?;
            let tmp = scratch.one(rows_work_len(rows, n, k));
            return linear_f32(f32s(&x)?, f32s(&w)?, b, out, (rows, k, n), tmp);
        }
        let (w_len, b_len) = (inputs[1].len(), if inputs.len() == 3 { n } else { 0 });
        let work = rows_work_len(rows, n, k);
        let (xb, wb, ob, tmp) = scratch.four(x.len(), w_len + b_len, rows * n, work);
        load_f32(x, xb, 0)?;
        let (wb, bb) = wb.split_at_mut(w_len);
        load_f32(inputs[1], wb, 1)?;
        let bias = match inputs.get(2) {
            Some(b) => {
                load_f32(b, bb, 2)?;
                Some(&*bb)
            }
            None => None,
        };
        linear_f32(xb, wb, bias, ob, (rows, k, n), tmp)?;
        store_f32(ob, &mut outputs[0])
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        super::rows_axis(inputs, axes)
    }
}
