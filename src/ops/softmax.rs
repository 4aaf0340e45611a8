//! Softmax and log-softmax over one axis, stabilised by subtracting the
//! maximum; computed in f32 for every float type.

use super::checks::input_count;
use super::norm::split_at_axis;
use super::shape::{elems, elems_mut, float_dtype, rank_in, resolve_axis, with_dtype, Shaped};
use super::{contig, outputs_len, Op, OpResult, Scratch, StorageElement, Tensor, TypedFact};
use crate::op_common;

/// `exp(x - max) / sum(exp(x - max))` along `axis`; output like the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Softmax {
    pub axis: isize,
}

/// `x - max - ln(sum(exp(x - max)))` along `axis`; output like the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSoftmax {
    pub axis: isize,
}

fn check<S: Shaped>(axis: isize, inputs: &[&S]) -> OpResult<usize> {
    input_count(inputs, 1)?;
    rank_in(inputs[0], 0, 1)?;
    float_dtype(inputs[0], 0)?;
    resolve_axis(axis, inputs[0].ndim())
}

fn softmax_rows<T: StorageElement>(
    x: &[T],
    out: &mut [T],
    (outer, n, inner): (usize, usize, usize),
    log: bool,
) {
    for o in 0..outer {
        for k in 0..inner {
            let base = o * n * inner + k;
            let at = |i: usize| base + i * inner;
            let max = (0..n)
                .map(|i| x[at(i)].to_f32())
                .fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = (0..n).map(|i| (x[at(i)].to_f32() - max).exp()).sum();
            if log {
                let lse = max + sum.ln();
                for i in 0..n {
                    out[at(i)] = T::from_f32(x[at(i)].to_f32() - lse);
                }
            } else {
                let inv = 1.0 / sum;
                for i in 0..n {
                    out[at(i)] = T::from_f32((x[at(i)].to_f32() - max).exp() * inv);
                }
            }
        }
    }
}

fn eval_softmax(
    axis: isize,
    log: bool,
    inputs: &[&Tensor],
    outputs: &mut Vec<Tensor>,
) -> OpResult<()> {
    let axis = check(axis, inputs)?;
    let x = contig(inputs[0]);
    let dims = split_at_axis(x.shape(), axis);
    outputs_len(outputs, 1);
    let out = &mut outputs[0];
    out.ensure(x.dtype(), x.shape());
    with_dtype!(x.dtype(), T => softmax_rows::<T>(elems(&x)?, elems_mut(out)?, dims, log));
    Ok(())
}

fn frame_local(axis: isize, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
    let a = axes.first().copied().flatten()?;
    (a != resolve_axis(axis, inputs.first()?.rank()).ok()?).then_some(a)
}

impl Op for Softmax {
    op_common!("Softmax");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        check(self.axis, inputs)?;
        Ok(vec![inputs[0].clone()])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        eval_softmax(self.axis, false, inputs, outputs)
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        frame_local(self.axis, inputs, axes)
    }

    fn info(&self) -> String {
        format!("axis {}", self.axis)
    }
}

impl Op for LogSoftmax {
    op_common!("LogSoftmax");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        check(self.axis, inputs)?;
        Ok(vec![inputs[0].clone()])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        eval_softmax(self.axis, true, inputs, outputs)
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        frame_local(self.axis, inputs, axes)
    }

    fn info(&self) -> String {
        format!("axis {}", self.axis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::shape::test_util::*;
    use crate::ops::{eval_op, DType, Dim, OpError};
    use proptest::prelude::*;

    /// Softmax from the definition in f64 (no max subtraction).
    fn reference(x: &Tensor, axis: usize) -> Vec<f64> {
        let shape = x.shape().to_vec();
        let v = x.to_f32_vec();
        (0..v.len())
            .map(|i| {
                let idx = unravel(i, &shape);
                let z: f64 = (0..shape[axis])
                    .map(|k| {
                        let mut j = idx.clone();
                        j[axis] = k;
                        (v[ravel(&j, &shape)] as f64).exp()
                    })
                    .sum();
                (v[i] as f64).exp() / z
            })
            .collect()
    }

    proptest! {
        #[test]
        fn softmax_matches_exp_over_sum(shape in prop::collection::vec(1usize..5, 1..4), ax in -3isize..3,
                                        dt in float_dt(), seed in any::<u64>(), shift in -1000f32..1000.0) {
            let axis = ax.rem_euclid(shape.len() as isize);
            let x = rand_tensor(dt, &shape, seed);
            let sm = eval_checked(&Softmax { axis }, &[&x]);
            let lsm = eval_checked(&LogSoftmax { axis }, &[&x]);
            let want = reference(&x, axis as usize);
            let (atol, rtol) = if dt == DType::F32 { (1e-6, 1e-5) } else { (1e-2, 1e-2) };
            for ((&p, &lp), &w) in sm[0].to_f32_vec().iter().zip(&lsm[0].to_f32_vec()).zip(&want) {
                prop_assert!((p as f64 - w).abs() <= atol + rtol * w, "{} vs {}", p, w);
                prop_assert!((lp as f64 - w.ln()).abs() <= (atol + rtol * w.ln().abs()) * 10.0, "{} vs {}", lp, w.ln());
            }
            // rows sum to 1
            let sums = eval_op(&crate::ops::reduce::Reduce { op: crate::ops::reduce::ReduceOp::Sum, axes: vec![axis], keep_dims: false }, &[&sm[0].cast(DType::F32)]).unwrap();
            let sum_tol = if dt == DType::F32 { 1e-5 } else { 2e-2 };
            for s in sums[0].to_f32_vec() {
                prop_assert!((s - 1.0).abs() < sum_tol, "row sum {}", s);
            }
            // shifting every value leaves softmax unchanged and does not overflow
            if dt == DType::F32 {
                let xs = Tensor::from_vec(shape.clone(), x.to_f32_vec().iter().map(|v| v + shift).collect()).unwrap();
                let sm2 = eval_op(&Softmax { axis }, &[&xs]).unwrap();
                prop_assert!(sm2[0].close_to(&sm[0], 1e-3, 1e-3), "{:?} vs {:?}", sm2[0], sm[0]);
            }
        }

        #[test]
        fn symbolic_rows(c in 1usize..7, s in 1i64..9, dt in float_dt(), seed in any::<u64>()) {
            let f = TypedFact::new(dt, [Dim::affine(2, 1), Dim::n(c as i64)]);
            let x = rand_tensor(dt, &[(2 * s + 1) as usize, c], seed);
            check_symbolic(&Softmax { axis: -1 }, std::slice::from_ref(&f), s, &[&x]);
            check_symbolic(&LogSoftmax { axis: 1 }, std::slice::from_ref(&f), s, &[&x]);
            check_symbolic(&LogSoftmax { axis: 0 }, &[f], s, &[&x]);
        }
    }

    #[test]
    fn large_logits_stay_finite() {
        let x = Tensor::from_slice(&[1000.0f32, 999.0, -1000.0]);
        let p = eval_op(&Softmax { axis: 0 }, &[&x]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap();
        let e = 1.0 / (1.0 + (-1.0f32).exp());
        assert!((p[0] - e).abs() < 1e-6 && p[2] == 0.0, "{p:?}");
        let lp = eval_op(&LogSoftmax { axis: -1 }, &[&x]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap();
        // f32 spacing near 1000 is 6e-5
        assert!(
            (lp[0] - e.ln()).abs() < 1e-4 && (lp[2] + 2000.0 + (-e.ln())).abs() < 1e-2,
            "{lp:?}"
        );
        assert_reuses_buffer(&Softmax { axis: 0 }, &[&x]);
        assert_reuses_buffer(&LogSoftmax { axis: 0 }, &[&x.cast(DType::BF16)]);
    }

    #[test]
    fn frame_local_axes() {
        let f = TypedFact::new(DType::F32, [5, 3]);
        assert_eq!(
            Softmax { axis: -1 }.frame_local_axis(&[&f], &[Some(0)]),
            Some(0)
        );
        assert_eq!(
            LogSoftmax { axis: 0 }.frame_local_axis(&[&f], &[Some(0)]),
            None
        );
        assert_eq!(
            LogSoftmax { axis: 1 }.frame_local_axis(&[&f], &[None]),
            None
        );
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::zeros(DType::F32, &[2, 3]);
        assert!(matches!(
            eval_op(&Softmax { axis: 2 }, &[&x]),
            Err(OpError::Param(_))
        ));
        assert!(matches!(
            eval_op(&Softmax { axis: -3 }, &[&x]),
            Err(OpError::Param(_))
        ));
        assert!(matches!(
            eval_op(&Softmax { axis: 0 }, &[&Tensor::scalar(1.0f32)]),
            Err(OpError::Rank { .. })
        ));
        assert!(matches!(
            eval_op(&LogSoftmax { axis: 0 }, &[&x.cast(DType::I64)]),
            Err(OpError::DType { .. })
        ));
        assert!(matches!(
            eval_op(&LogSoftmax { axis: 0 }, &[&x, &x]),
            Err(OpError::InputCount { .. })
        ));
        let f = TypedFact::new(DType::Bool, [3]);
        assert!(Softmax { axis: 0 }.output_facts(&[&f]).is_err());
        // an empty axis is no error: there is nothing to normalise
        assert_eq!(
            eval_checked(&Softmax { axis: 1 }, &[&Tensor::zeros(DType::F32, &[2, 0])])[0].shape(),
            &[2, 0]
        );
    }
}
