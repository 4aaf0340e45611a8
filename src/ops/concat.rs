//! Concatenation of tensors along one axis.

use super::shape::{
    copy_strided, elems, elems_mut, rank_in, resolve_axis, with_dtype, Shape8, Shaped,
};
use super::{
    contig, outputs_len, Dim, Op, OpError, OpResult, Scratch, StorageElement, Tensor, TypedFact,
};
use crate::op_common;

/// Joins one or more tensors of one dtype and rank along `axis`; the other
/// sizes must match. The output size on `axis` is the sum of the inputs'
/// (`OpError::Dim` when that sum is not a [`Dim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concat {
    pub axis: isize,
}

impl Concat {
    fn check<S: Shaped>(&self, inputs: &[&S]) -> OpResult<usize> {
        if inputs.is_empty() {
            return Err(OpError::InputCount {
                expected: ">= 1".into(),
                got: 0,
            });
        }
        let x = inputs[0];
        rank_in(x, 0, 1)?;
        let axis = resolve_axis(self.axis, x.ndim())?;
        for (i, y) in inputs.iter().enumerate().skip(1) {
            if y.elem() != x.elem() {
                return Err(OpError::DType {
                    input: i,
                    expected: x.elem().to_string(),
                    got: y.elem(),
                });
            }
            if y.ndim() != x.ndim() {
                return Err(OpError::Rank {
                    input: i,
                    expected: x.ndim().to_string(),
                    got: y.ndim(),
                });
            }
            if let Some(a) = (0..x.ndim()).find(|&a| a != axis && y.dim(a) != x.dim(a)) {
                return Err(OpError::Shape(format!(
                    "concat on axis {axis}: input {i} has size {} on axis {a}, input 0 has {}",
                    y.dim(a),
                    x.dim(a)
                )));
            }
        }
        Ok(axis)
    }
}

fn concat_into<T: StorageElement>(
    inputs: &[&Tensor],
    axis: usize,
    out: &mut Tensor,
    shape: &Shape8,
) -> OpResult<()> {
    let dst = elems_mut::<T>(out)?;
    let dst_st = shape.strides();
    let mut at = 0;
    for x in inputs {
        let x = contig(x);
        let src_shape = Shape8::from_slice(x.shape())?;
        let src_st = src_shape.strides();
        let r = src_shape.as_slice().len();
        copy_strided(
            elems::<T>(&x)?,
            0,
            &src_st[..r],
            dst,
            at * dst_st[axis],
            &dst_st[..r],
            src_shape.as_slice(),
        );
        at += x.shape()[axis];
    }
    Ok(())
}

impl Op for Concat {
    op_common!("Concat");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        let axis = self.check(inputs)?;
        let mut total = Dim::n(0);
        for x in inputs {
            total = total.add(&x.shape[axis]).ok_or_else(|| {
                OpError::Dim(format!(
                    "concat on axis {axis}: {total} + {} is not an affine size",
                    x.shape[axis]
                ))
            })?;
        }
        let mut out = inputs[0].clone();
        out.shape[axis] = total;
        Ok(vec![out])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        let axis = self.check(inputs)?;
        let mut shape = Shape8::from_slice(inputs[0].shape())?;
        shape.as_mut_slice()[axis] = inputs.iter().map(|x| x.shape()[axis]).sum();
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        out.ensure(inputs[0].dtype(), shape.as_slice());
        with_dtype!(inputs[0].dtype(), T => concat_into::<T>(inputs, axis, out, &shape))
    }

    /// Frame-local when every input streams on the same axis and the
    /// concatenation is along another one.
    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        let axis = resolve_axis(self.axis, inputs.first()?.rank()).ok()?;
        (a != axis && axes.iter().all(|&b| b == Some(a))).then_some(a)
    }

    fn info(&self) -> String {
        format!("axis {}", self.axis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::shape::test_util::*;
    use crate::ops::{eval_op, DType};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn concat_places_each_input(base in prop::collection::vec(0usize..4, 1..4), sizes in prop::collection::vec(0usize..4, 1..4),
                                    ax in 0usize..3, neg in any::<bool>(), dt in any_dt(), seed in any::<u64>()) {
            let r = base.len();
            let a = ax % r;
            let ins: Vec<Tensor> = sizes.iter().enumerate().map(|(k, &n)| {
                let mut s = base.clone();
                s[a] = n;
                rand_tensor(dt, &s, seed + k as u64)
            }).collect();
            let refs: Vec<&Tensor> = ins.iter().collect();
            let axis = if neg { a as isize - r as isize } else { a as isize };
            let out = eval_checked(&Concat { axis }, &refs);
            let mut at = 0;
            for t in &ins {
                let n = t.shape()[a];
                prop_assert_eq!(&out[0].narrow(a, at, n).unwrap().contiguous(), t);
                at += n;
            }
            prop_assert_eq!(at, out[0].shape()[a]);
        }

        #[test]
        fn concat_symbolic(c1 in 1usize..4, c2 in 1usize..4, k in 0usize..4, s in 1i64..7, dt in any_dt()) {
            // along the channels of two streams
            let fa = TypedFact::new(dt, [Dim::s(), Dim::n(c1 as i64)]);
            let fb = TypedFact::new(dt, [Dim::s(), Dim::n(c2 as i64)]);
            let a = rand_tensor(dt, &[s as usize, c1], 1);
            let b = rand_tensor(dt, &[s as usize, c2], 2);
            check_symbolic(&Concat { axis: 1 }, &[fa.clone(), fb], s, &[&a, &b]);
            // a constant prefix on the stream, then the stream twice
            let fp = TypedFact::new(dt, [k, c1]);
            let p = rand_tensor(dt, &[k, c1], 3);
            let out = check_symbolic(&Concat { axis: 0 }, &[fp, fa.clone(), fa], s, &[&p, &a, &a]);
            prop_assert_eq!(out[0].shape()[0], k + 2 * s as usize);
        }
    }

    #[test]
    fn facts_and_errors() {
        let half = Dim::s().div_floor(2).unwrap();
        let f = TypedFact::new(DType::F32, [half, Dim::n(2)]);
        assert!(matches!(
            Concat { axis: 0 }.output_facts(&[&f, &f]),
            Err(OpError::Dim(_))
        ));
        assert_eq!(
            Concat { axis: 1 }.output_facts(&[&f, &f]).unwrap()[0].shape,
            vec![half, Dim::n(4)]
        );
        let a = Tensor::zeros(DType::F32, &[2, 3]);
        let b = Tensor::zeros(DType::F32, &[3, 3]);
        assert!(matches!(
            eval_op(&Concat { axis: 1 }, &[&a, &b]),
            Err(OpError::Shape(_))
        ));
        assert!(matches!(
            eval_op(&Concat { axis: 0 }, &[&a, &b.cast(DType::F16)]),
            Err(OpError::DType { input: 1, .. })
        ));
        assert!(matches!(
            eval_op(&Concat { axis: 0 }, &[&a, &Tensor::zeros(DType::F32, &[3])]),
            Err(OpError::Rank { input: 1, .. })
        ));
        assert!(matches!(
            eval_op(&Concat { axis: 2 }, &[&a, &b]),
            Err(OpError::Param(_))
        ));
        assert!(matches!(
            eval_op(&Concat { axis: 0 }, &[]),
            Err(OpError::InputCount { .. })
        ));
        assert!(eval_op(&Concat { axis: 0 }, &[&Tensor::scalar(1.0f32)]).is_err());
        assert_eq!(
            eval_checked(&Concat { axis: -2 }, &[&a, &b])[0].shape(),
            &[5, 3]
        );
        assert_reuses_buffer(&Concat { axis: 0 }, &[&a, &b]);
    }

    #[test]
    fn frame_local_axes() {
        let f = TypedFact::new(DType::F32, [4, 3]);
        assert_eq!(
            Concat { axis: 1 }.frame_local_axis(&[&f, &f], &[Some(0), Some(0)]),
            Some(0)
        );
        assert_eq!(
            Concat { axis: -1 }.frame_local_axis(&[&f, &f], &[Some(0), None]),
            None
        );
        assert_eq!(
            Concat { axis: 0 }.frame_local_axis(&[&f, &f], &[Some(0), Some(0)]),
            None
        );
    }
}
