//! Where: element-wise choice between two tensors by a bool condition.

use super::broadcast::{broadcast_dims, broadcast_shapes, broadcast_strides, MAX_RANK};
use super::checks::input_count;
use super::shape::{elems, elems_mut, exact_dtype, max_rank, with_dtype, Shaped};
use super::{
    broadcast_stream_axis, contig, outputs_len, DType, Op, OpError, OpResult, Scratch,
    StorageElement, Tensor, TypedFact,
};
use crate::op_common;

/// Inputs `cond` (bool), `a`, `b` (one dtype); output `cond ? a : b`, all
/// three broadcast together (numpy rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Where;

fn check<S: Shaped>(inputs: &[&S]) -> OpResult<()> {
    input_count(inputs, 3)?;
    for (i, x) in inputs.iter().enumerate() {
        max_rank(*x, i)?;
    }
    exact_dtype(inputs[0], 0, DType::Bool)?;
    if inputs[2].elem() != inputs[1].elem() {
        return Err(OpError::DType {
            input: 2,
            expected: inputs[1].elem().to_string(),
            got: inputs[2].elem(),
        });
    }
    Ok(())
}

type Strides = [usize; MAX_RANK];

fn select<T: StorageElement>(
    c: &[bool],
    a: &[T],
    b: &[T],
    out: &mut [T],
    shape: &[usize],
    st: [&Strides; 3],
) {
    let r = shape.len();
    if shape.contains(&0) {
        return;
    }
    if r == 0 {
        out[0] = if c[0] { a[0] } else { b[0] };
        return;
    }
    let n = shape[r - 1];
    let [sc, sa, sb] = st;
    let (ic, ia, ib) = (sc[r - 1], sa[r - 1], sb[r - 1]);
    let rows: usize = shape[..r - 1].iter().product();
    let mut idx = [0usize; MAX_RANK];
    let (mut pc, mut pa, mut pb) = (0, 0, 0);
    for row in 0..rows {
        for (k, y) in out[row * n..(row + 1) * n].iter_mut().enumerate() {
            *y = if c[pc + k * ic] {
                a[pa + k * ia]
            } else {
                b[pb + k * ib]
            };
        }
        for ax in (0..r - 1).rev() {
            idx[ax] += 1;
            (pc, pa, pb) = (pc + sc[ax], pa + sa[ax], pb + sb[ax]);
            if idx[ax] < shape[ax] {
                break;
            }
            let m = shape[ax];
            (pc, pa, pb) = (pc - sc[ax] * m, pa - sa[ax] * m, pb - sb[ax] * m);
            idx[ax] = 0;
        }
    }
}

impl Op for Where {
    op_common!("Where");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        check(inputs)?;
        let shape = broadcast_dims(
            &broadcast_dims(&inputs[0].shape, &inputs[1].shape)?,
            &inputs[2].shape,
        )?;
        Ok(vec![TypedFact {
            dtype: inputs[1].dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        check(inputs)?;
        let (c, a, b) = (contig(inputs[0]), contig(inputs[1]), contig(inputs[2]));
        let (mut ca, mut shape) = ([0usize; MAX_RANK], [0usize; MAX_RANK]);
        let r = broadcast_shapes(c.shape(), a.shape(), &mut ca)?;
        let r = broadcast_shapes(&ca[..r], b.shape(), &mut shape)?;
        let shape = &shape[..r];
        let st = [c.shape(), a.shape(), b.shape()].map(|s| broadcast_strides(s, shape));
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        out.ensure(a.dtype(), shape);
        let cv = elems::<bool>(&c)?;
        with_dtype!(a.dtype(), T => {
            select::<T>(cv, elems(&a)?, elems(&b)?, elems_mut(out)?, shape, [&st[0], &st[1], &st[2]])
        });
        Ok(())
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        broadcast_stream_axis(inputs, axes)
    }

    fn info(&self) -> String {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::shape::test_util::*;
    use crate::ops::{eval_op, Dim};
    use proptest::prelude::*;

    /// A shape that broadcasts to `out`: a suffix of it with some sizes set to 1.
    fn broadcastable(out: &[usize], drop: usize, ones: u8) -> Vec<usize> {
        let keep = &out[drop.min(out.len())..];
        keep.iter()
            .enumerate()
            .map(|(i, &d)| if ones >> i & 1 == 1 { 1 } else { d })
            .collect()
    }

    proptest! {
        #[test]
        fn where_matches_per_element_choice(out in prop::collection::vec(1usize..4, 0..4), drops in (0usize..3, 0usize..3, 0usize..3),
                                            ones in (any::<u8>(), any::<u8>(), any::<u8>()), dt in any_dt(), seed in any::<u64>()) {
            let (cs, as_, bs) = (broadcastable(&out, drops.0, ones.0), broadcastable(&out, drops.1, ones.1), broadcastable(&out, drops.2, ones.2));
            let c = rand_tensor(DType::Bool, &cs, seed);
            let a = rand_tensor(dt, &as_, seed + 1);
            let b = rand_tensor(dt, &bs, seed + 2);
            let y = eval_checked(&Where, &[&c, &a, &b]);
            let oshape = y[0].shape().to_vec();
            let (cv, av, bv, yv) = (c.to_vec::<bool>().unwrap(), a.to_f32_vec(), b.to_f32_vec(), y[0].to_f32_vec());
            let at = |idx: &[usize], shape: &[usize]| {
                let lead = idx.len() - shape.len();
                let j: Vec<usize> = shape.iter().enumerate().map(|(k, &n)| if n == 1 { 0 } else { idx[lead + k] }).collect();
                ravel(&j, shape)
            };
            for (i, &got) in yv.iter().enumerate() {
                let idx = unravel(i, &oshape);
                let want = if cv[at(&idx, &cs)] { av[at(&idx, &as_)] } else { bv[at(&idx, &bs)] };
                prop_assert_eq!(got.to_bits(), want.to_bits());
            }
        }

        #[test]
        fn where_symbolic(c in 1usize..4, s in 1i64..6, dt in any_dt(), seed in any::<u64>()) {
            let fc = TypedFact::new(DType::Bool, [Dim::s(), Dim::n(1)]);
            let fa = TypedFact::new(dt, [Dim::s(), Dim::n(c as i64)]);
            let fb = TypedFact::new(dt, [c]);
            let cond = rand_tensor(DType::Bool, &[s as usize, 1], seed);
            let a = rand_tensor(dt, &[s as usize, c], seed + 1);
            let b = rand_tensor(dt, &[c], seed + 2);
            check_symbolic(&Where, &[fc, fa, fb], s, &[&cond, &a, &b]);
        }
    }

    #[test]
    fn errors_and_reuse() {
        let c = Tensor::from_slice(&[true, false]);
        let a = Tensor::from_slice(&[1.0f32, 2.0]);
        let b = Tensor::from_slice(&[3.0f32, 4.0]);
        assert_eq!(
            eval_op(&Where, &[&c, &a, &b]).unwrap()[0]
                .to_vec::<f32>()
                .unwrap(),
            vec![1.0, 4.0]
        );
        assert!(matches!(
            eval_op(&Where, &[&a, &a, &b]),
            Err(OpError::DType { input: 0, .. })
        ));
        assert!(matches!(
            eval_op(&Where, &[&c, &a, &b.cast(DType::F16)]),
            Err(OpError::DType { input: 2, .. })
        ));
        assert!(matches!(
            eval_op(&Where, &[&c, &a, &Tensor::zeros(DType::F32, &[3])]),
            Err(OpError::Shape(_))
        ));
        assert!(eval_op(&Where, &[&c, &a]).is_err());
        assert!(eval_op(&Where, &[&Tensor::zeros(DType::Bool, &[1; 9]), &a, &b]).is_err());
        let f = |t: &Tensor| TypedFact::of(t);
        assert!(Where
            .output_facts(&[&f(&c), &f(&a), &f(&Tensor::zeros(DType::F32, &[3]))])
            .is_err());
        assert_reuses_buffer(&Where, &[&c, &a, &b]);
    }

    #[test]
    fn frame_local_axes() {
        let c = TypedFact::new(DType::Bool, [4, 1]);
        let a = TypedFact::new(DType::F32, [4, 3]);
        let b = TypedFact::new(DType::F32, [3]);
        assert_eq!(
            Where.frame_local_axis(&[&c, &a, &b], &[Some(0), Some(0), None]),
            Some(0)
        );
        assert_eq!(
            Where.frame_local_axis(&[&c, &a, &a], &[Some(0), Some(0), None]),
            None
        );
    }
}
