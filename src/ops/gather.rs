//! Gather: picks slices of `data` along one axis by i64 indices (ONNX).

use super::broadcast::MAX_RANK;
use super::checks::input_count;
use super::norm::split_at_axis;
use super::shape::{
    elems, elems_mut, exact_dtype, max_rank, rank_in, resolve_axis, with_dtype, Shape8, Shaped,
};
use super::{
    contig, outputs_len, DType, Op, OpError, OpResult, Scratch, StorageElement, Tensor, TypedFact,
};
use crate::op_common;

/// Inputs `data` (any dtype) and `indices` (i64, any shape; negative values
/// down to `-n` count from the end). Output shape
/// `data[..axis] ++ indices ++ data[axis+1..]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gather {
    pub axis: isize,
}

impl Gather {
    fn check<S: Shaped>(&self, inputs: &[&S]) -> OpResult<usize> {
        input_count(inputs, 2)?;
        let (data, idx) = (inputs[0], inputs[1]);
        rank_in(data, 0, 1)?;
        max_rank(idx, 1)?;
        exact_dtype(idx, 1, DType::I64)?;
        if data.ndim() - 1 + idx.ndim() > MAX_RANK {
            return Err(OpError::Shape(format!(
                "gather output rank above {MAX_RANK}"
            )));
        }
        resolve_axis(self.axis, data.ndim())
    }
}

fn gather_rows<T: StorageElement>(
    data: &[T],
    idx: &[i64],
    out: &mut [T],
    (outer, n, inner): (usize, usize, usize),
) {
    let m = idx.len();
    for o in 0..outer {
        for (j, &i) in idx.iter().enumerate() {
            let i = if i < 0 { i + n as i64 } else { i } as usize;
            let src = (o * n + i) * inner;
            let dst = (o * m + j) * inner;
            out[dst..dst + inner].copy_from_slice(&data[src..src + inner]);
        }
    }
}

impl Op for Gather {
    op_common!("Gather");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        let axis = self.check(inputs)?;
        let (data, idx) = (inputs[0], inputs[1]);
        let shape = data.shape[..axis]
            .iter()
            .chain(&idx.shape)
            .chain(&data.shape[axis + 1..])
            .copied()
            .collect();
        Ok(vec![TypedFact {
            dtype: data.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        let axis = self.check(inputs)?;
        let (data, idx) = (contig(inputs[0]), contig(inputs[1]));
        let n = data.shape()[axis];
        let iv = elems::<i64>(&idx)?;
        if let Some(&bad) = iv.iter().find(|&&i| i < -(n as i64) || i >= n as i64) {
            return Err(OpError::Index(format!(
                "gather index {bad} out of range for axis {axis} of size {n}"
            )));
        }
        let mut shape = Shape8::new();
        for &d in data.shape()[..axis]
            .iter()
            .chain(idx.shape())
            .chain(&data.shape()[axis + 1..])
        {
            shape.push(d)?;
        }
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        out.ensure(data.dtype(), shape.as_slice());
        let dims = split_at_axis(data.shape(), axis);
        with_dtype!(data.dtype(), T => gather_rows::<T>(elems(&data)?, iv, elems_mut(out)?, dims));
        Ok(())
    }

    /// Frame-local when only `data` streams, on an axis other than `axis`
    /// (axes after `axis` shift by the indices' rank minus one), or when
    /// only the indices stream (rows of a table looked up by stream
    /// position): the output streams where the indices' axis lands.
    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let axis = resolve_axis(self.axis, inputs.first()?.rank()).ok()?;
        let Some(a) = axes.first().copied().flatten() else {
            return axes.get(1).copied().flatten().map(|i| axis + i);
        };
        if axes.get(1).copied().flatten().is_some() {
            return None;
        }
        match a.cmp(&axis) {
            std::cmp::Ordering::Less => Some(a),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => Some(a + inputs.get(1)?.rank() - 1),
        }
    }

    fn info(&self) -> String {
        format!("axis {}", self.axis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::shape::test_util::*;
    use crate::ops::{eval_op, Dim};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn gather_matches_direct_indexing(shape in prop::collection::vec(1usize..5, 1..4), ax in -3isize..3,
                                          idx_shape in prop::collection::vec(0usize..4, 0..3), dt in any_dt(),
                                          seed in any::<u64>()) {
            let r = shape.len();
            let a = ax.rem_euclid(r as isize) as usize;
            let n = shape[a] as i64;
            let data = rand_tensor(dt, &shape, seed);
            let m: usize = idx_shape.iter().product();
            let iv: Vec<i64> = rand_tensor(DType::I64, &[m], seed + 1).to_vec::<i64>().unwrap()
                .iter().map(|v| v.rem_euclid(2 * n) - n).collect();
            let idx = Tensor::from_vec(idx_shape.clone(), iv.clone()).unwrap();
            let axis = if ax < 0 { a as isize - r as isize } else { a as isize };
            let out = eval_checked(&Gather { axis }, &[&data, &idx]);
            let oshape = out[0].shape().to_vec();
            let (dv, ov) = (data.to_f32_vec(), out[0].to_f32_vec());
            let q = idx_shape.len();
            for (i, &got) in ov.iter().enumerate() {
                let o = unravel(i, &oshape);
                let j = ravel(&o[a..a + q], &idx_shape);
                let mut src: Vec<usize> = o[..a].to_vec();
                src.push(iv[j].rem_euclid(n) as usize);
                src.extend_from_slice(&o[a + q..]);
                prop_assert_eq!(got.to_bits(), dv[ravel(&src, &shape)].to_bits());
            }
        }

        #[test]
        fn gather_symbolic(v in 1usize..6, d in 1usize..4, s in 0i64..7, seed in any::<u64>()) {
            // embedding lookup: symbolic indices
            let table = rand_tensor(DType::F32, &[v, d], seed);
            let ids = Tensor::from_vec(vec![s as usize], (0..s).map(|k| k % v as i64).collect()).unwrap();
            let ft = TypedFact::of(&table);
            let fi = TypedFact::new(DType::I64, [Dim::s()]);
            check_symbolic(&Gather { axis: 0 }, &[ft, fi], s, &[&table, &ids]);
            // channel pick on a stream
            let x = rand_tensor(DType::BF16, &[s as usize, d], seed);
            let pick = Tensor::from_slice(&[0i64, -1]);
            let fx = TypedFact::new(DType::BF16, [Dim::s(), Dim::n(d as i64)]);
            check_symbolic(&Gather { axis: 1 }, &[fx, TypedFact::of(&pick)], s, &[&x, &pick]);
        }
    }

    #[test]
    fn errors_name_the_index() {
        let data = Tensor::zeros(DType::F16, &[3, 2]);
        let e = eval_op(
            &Gather { axis: 0 },
            &[&data, &Tensor::from_slice(&[0i64, 3])],
        )
        .unwrap_err();
        assert!(
            matches!(&e, OpError::Index(m) if m.contains('3') && m.contains("size 3")),
            "{e}"
        );
        let e = eval_op(
            &Gather { axis: -1 },
            &[&data, &Tensor::from_slice(&[-3i64])],
        )
        .unwrap_err();
        assert!(matches!(&e, OpError::Index(m) if m.contains("-3")), "{e}");
        assert!(eval_op(
            &Gather { axis: 1 },
            &[&data, &Tensor::from_slice(&[-2i64, 1])]
        )
        .is_ok());
        assert!(matches!(
            eval_op(&Gather { axis: 2 }, &[&data, &Tensor::scalar(0i64)]),
            Err(OpError::Param(_))
        ));
        assert!(matches!(
            eval_op(
                &Gather { axis: 0 },
                &[&data, &Tensor::from_slice(&[0.0f32])]
            ),
            Err(OpError::DType { input: 1, .. })
        ));
        assert!(matches!(
            eval_op(
                &Gather { axis: 0 },
                &[&Tensor::scalar(1.0f32), &Tensor::scalar(0i64)]
            ),
            Err(OpError::Rank { .. })
        ));
        assert!(eval_op(&Gather { axis: 0 }, &[&data]).is_err());
        let empty = Tensor::zeros(DType::F32, &[0, 2]);
        assert!(matches!(
            eval_op(&Gather { axis: 0 }, &[&empty, &Tensor::scalar(0i64)]),
            Err(OpError::Index(_))
        ));
        assert_eq!(
            eval_checked(
                &Gather { axis: 0 },
                &[&empty, &Tensor::zeros(DType::I64, &[0])]
            )[0]
            .shape(),
            &[0, 2]
        );
        let deep = Tensor::zeros(DType::I64, &[1; 8]);
        assert!(eval_op(&Gather { axis: 0 }, &[&data, &deep]).is_err());
        assert_reuses_buffer(
            &Gather { axis: 1 },
            &[&data, &Tensor::from_slice(&[1i64, 0, 1])],
        );
    }

    #[test]
    fn frame_local_axes() {
        let d = TypedFact::new(DType::F32, [5, 4, 3]);
        let i = TypedFact::new(DType::I64, [2, 2]);
        let g = |axis, a, ia| Gather { axis }.frame_local_axis(&[&d, &i], &[Some(a), ia]);
        assert_eq!(g(1, 0, None), Some(0));
        assert_eq!(g(1, 2, None), Some(3));
        assert_eq!(g(-2, 1, None), None);
        assert_eq!(g(1, 0, Some(0)), None);
        let s = TypedFact::new(DType::I64, [0usize; 0]);
        assert_eq!(
            Gather { axis: 0 }.frame_local_axis(&[&d, &s], &[Some(1), None]),
            Some(0)
        );
        // rows of a table by streaming positions: the indices' axis, moved
        // past the data axes before `axis`
        let pos = |axis, ia| Gather { axis }.frame_local_axis(&[&d, &i], &[None, Some(ia)]);
        assert_eq!(pos(0, 0), Some(0));
        assert_eq!(pos(1, 1), Some(2));
        assert_eq!(
            Gather { axis: 0 }.frame_local_axis(&[&d, &i], &[None, None]),
            None
        );
    }
}
