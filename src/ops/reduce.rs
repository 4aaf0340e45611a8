//! Reductions over axes (sum, mean, max) and arg-max over one axis.

use super::broadcast::MAX_RANK;
use super::checks::input_count;
use super::norm::split_at_axis;
use super::shape::{elems, elems_mut, max_rank, rank_in, resolve_axis, with_dtype, Shape8, Shaped};
use super::{
    contig, outputs_len, DType, Dim, Op, OpError, OpResult, Scratch, StorageElement, Tensor,
    TypedFact,
};
use crate::op_common;

/// How a [`Reduce`] combines values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Floats and i64; an empty reduction gives 0.
    Sum,
    /// Floats only; an empty reduction is an error.
    Mean,
    /// Floats and i64 (NaN wins, as in PyTorch); an empty reduction is an error.
    Max,
}

/// Reduces `axes` (negative counts from the end; duplicates are an error;
/// an empty list reduces every axis, as ONNX does). Output of the input's
/// dtype; reduced axes are kept as size 1 when `keep_dims`, else removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reduce {
    pub op: ReduceOp,
    pub axes: Vec<isize>,
    pub keep_dims: bool,
}

impl Reduce {
    /// Which axes are reduced, after checking the input.
    fn mask<S: Shaped>(&self, inputs: &[&S]) -> OpResult<[bool; MAX_RANK]> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        max_rank(x, 0)?;
        let ok = match (self.op, x.elem()) {
            (_, dt) if dt.is_float() => true,
            (ReduceOp::Sum | ReduceOp::Max, DType::I64) => true,
            _ => false,
        };
        if !ok {
            let expected = if self.op == ReduceOp::Mean {
                "a float type"
            } else {
                "a float type or i64"
            };
            return Err(OpError::DType {
                input: 0,
                expected: expected.into(),
                got: x.elem(),
            });
        }
        let mut mask = [false; MAX_RANK];
        if self.axes.is_empty() {
            mask[..x.ndim()].fill(true);
        }
        for &a in &self.axes {
            let r = resolve_axis(a, x.ndim())?;
            if std::mem::replace(&mut mask[r], true) {
                return Err(OpError::Param(format!(
                    "axis {a} appears twice in {:?}",
                    self.axes
                )));
            }
        }
        if self.op != ReduceOp::Sum {
            if let Some(i) = (0..x.ndim()).find(|&i| mask[i] && x.dim(i) == Dim::n(0)) {
                return Err(OpError::Empty(format!(
                    "{:?} over axis {i} of size 0",
                    self.op
                )));
            }
        }
        Ok(mask)
    }
}

/// Calls `f(input_index, output_index)` for every element of a contiguous
/// tensor of `shape`, where `ost` gives the output stride of each axis.
fn for_each_pair(shape: &[usize], ost: &[usize], mut f: impl FnMut(usize, usize)) {
    let r = shape.len();
    if shape.contains(&0) {
        return;
    }
    if r == 0 {
        f(0, 0);
        return;
    }
    let (n, si) = (shape[r - 1], ost[r - 1]);
    let rows: usize = shape[..r - 1].iter().product();
    let mut idx = [0usize; MAX_RANK];
    let mut o = 0;
    for row in 0..rows {
        for k in 0..n {
            f(row * n + k, o + k * si);
        }
        for ax in (0..r - 1).rev() {
            idx[ax] += 1;
            o += ost[ax];
            if idx[ax] < shape[ax] {
                break;
            }
            o -= ost[ax] * shape[ax];
            idx[ax] = 0;
        }
    }
}

fn reduce_float<T: StorageElement>(
    op: ReduceOp,
    x: &[T],
    shape: &[usize],
    ost: &[usize],
    acc: &mut [f32],
    out: &mut [T],
) {
    let init = if op == ReduceOp::Max {
        f32::NEG_INFINITY
    } else {
        0.0
    };
    acc.fill(init);
    match op {
        ReduceOp::Sum | ReduceOp::Mean => for_each_pair(shape, ost, |i, o| acc[o] += x[i].to_f32()),
        ReduceOp::Max => for_each_pair(shape, ost, |i, o| {
            let v = x[i].to_f32();
            if v > acc[o] || v.is_nan() {
                acc[o] = if acc[o].is_nan() { acc[o] } else { v };
            }
        }),
    }
    let count = (x.len() / out.len().max(1)).max(1) as f32;
    for (y, &a) in out.iter_mut().zip(acc.iter()) {
        *y = T::from_f32(if op == ReduceOp::Mean { a / count } else { a });
    }
}

fn reduce_i64(op: ReduceOp, x: &[i64], shape: &[usize], ost: &[usize], out: &mut [i64]) {
    match op {
        ReduceOp::Max => {
            out.fill(i64::MIN);
            for_each_pair(shape, ost, |i, o| out[o] = out[o].max(x[i]));
        }
        _ => {
            out.fill(0);
            for_each_pair(shape, ost, |i, o| out[o] = out[o].wrapping_add(x[i]));
        }
    }
}

impl Op for Reduce {
    op_common!("Reduce");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        let mask = self.mask(inputs)?;
        let x = inputs[0];
        let shape = (0..x.rank())
            .filter_map(|i| match (mask[i], self.keep_dims) {
                (false, _) => Some(x.shape[i]),
                (true, true) => Some(Dim::n(1)),
                (true, false) => None,
            })
            .collect();
        Ok(vec![TypedFact {
            dtype: x.dtype,
            shape,
        }])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        let mask = self.mask(inputs)?;
        let x = contig(inputs[0]);
        let (mut kept, mut out_shape) = (Shape8::new(), Shape8::new());
        for (i, &d) in x.shape().iter().enumerate() {
            kept.push(if mask[i] { 1 } else { d })?;
            if !mask[i] || self.keep_dims {
                out_shape.push(if mask[i] { 1 } else { d })?;
            }
        }
        let mut ost = kept.strides();
        for (i, s) in ost.iter_mut().enumerate().take(x.rank()) {
            if mask[i] {
                *s = 0;
            }
        }
        let ost = &ost[..x.rank()];
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        out.ensure(x.dtype(), out_shape.as_slice());
        let n = out_shape.len();
        match x.dtype() {
            DType::I64 => reduce_i64(self.op, elems(&x)?, x.shape(), ost, elems_mut(out)?),
            dt => with_dtype!(dt, T => {
                reduce_float::<T>(self.op, elems(&x)?, x.shape(), ost, scratch.one(n), elems_mut(out)?)
            }),
        }
        Ok(())
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        let mask = self.mask(inputs).ok()?;
        if a >= inputs[0].rank() || mask[a] {
            return None;
        }
        Some(if self.keep_dims {
            a
        } else {
            a - mask[..a].iter().filter(|&&m| m).count()
        })
    }

    fn info(&self) -> String {
        format!(
            "{:?} axes {:?} keep_dims {}",
            self.op, self.axes, self.keep_dims
        )
    }
}

// ---------------------------------------------------------------- ArgMax

/// Index (i64) of the largest value along `axis`, the first one on ties
/// (NaN counts as largest). The axis is kept as size 1 when `keep_dims`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgMax {
    pub axis: isize,
    pub keep_dims: bool,
}

impl ArgMax {
    fn check<S: Shaped>(&self, inputs: &[&S]) -> OpResult<usize> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        rank_in(x, 0, 1)?;
        if !(x.elem().is_float() || x.elem() == DType::I64) {
            return Err(OpError::DType {
                input: 0,
                expected: "a float type or i64".into(),
                got: x.elem(),
            });
        }
        let axis = resolve_axis(self.axis, x.ndim())?;
        if x.dim(axis) == Dim::n(0) {
            return Err(OpError::Empty(format!(
                "arg-max over axis {axis} of size 0"
            )));
        }
        Ok(axis)
    }
}

fn argmax<T: StorageElement + PartialOrd>(
    x: &[T],
    out: &mut [i64],
    (outer, n, inner): (usize, usize, usize),
) {
    for o in 0..outer {
        for k in 0..inner {
            let base = o * n * inner + k;
            let (mut best, mut at) = (x[base], 0);
            // `v != v` is NaN for floats and never true for integers
            #[allow(clippy::eq_op)]
            if best == best {
                for i in 1..n {
                    let v = x[base + i * inner];
                    if v != v || v > best {
                        best = v;
                        at = i;
                        if v != v {
                            break;
                        }
                    }
                }
            }
            out[o * inner + k] = at as i64;
        }
    }
}

impl Op for ArgMax {
    op_common!("ArgMax");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        let axis = self.check(inputs)?;
        let mut shape = inputs[0].shape.clone();
        if self.keep_dims {
            shape[axis] = Dim::n(1);
        } else {
            shape.remove(axis);
        }
        Ok(vec![TypedFact {
            dtype: DType::I64,
            shape,
        }])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        let axis = self.check(inputs)?;
        let x = contig(inputs[0]);
        let mut shape = Shape8::new();
        for (i, &d) in x.shape().iter().enumerate() {
            match (i == axis, self.keep_dims) {
                (false, _) => shape.push(d)?,
                (true, true) => shape.push(1)?,
                (true, false) => {}
            }
        }
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        out.ensure(DType::I64, shape.as_slice());
        let dims = split_at_axis(x.shape(), axis);
        with_dtype!(x.dtype(), T => argmax::<T>(elems(&x)?, elems_mut(out)?, dims));
        Ok(())
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        let axis = resolve_axis(self.axis, inputs.first()?.rank()).ok()?;
        match a.cmp(&axis) {
            std::cmp::Ordering::Less => Some(a),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => Some(if self.keep_dims { a } else { a - 1 }),
        }
    }

    fn info(&self) -> String {
        format!("axis {} keep_dims {}", self.axis, self.keep_dims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::eval_op;
    use crate::ops::shape::test_util::*;
    use proptest::prelude::*;

    /// Reduction from the definition: group input elements by their index
    /// with the reduced axes dropped.
    fn reference(x: &Tensor, mask: &[bool], op: ReduceOp) -> Vec<f64> {
        let shape = x.shape();
        let kept: Vec<usize> = (0..shape.len())
            .filter(|&i| !mask[i])
            .map(|i| shape[i])
            .collect();
        let n_out: usize = kept.iter().product();
        let mut groups: Vec<Vec<f64>> = vec![Vec::new(); n_out];
        let v: Vec<f64> = match x.dtype() {
            DType::I64 => x
                .to_vec::<i64>()
                .unwrap()
                .iter()
                .map(|&a| a as f64)
                .collect(),
            _ => x.to_f32_vec().iter().map(|&a| a as f64).collect(),
        };
        for (i, &a) in v.iter().enumerate() {
            let idx = unravel(i, shape);
            let o: Vec<usize> = (0..shape.len())
                .filter(|&k| !mask[k])
                .map(|k| idx[k])
                .collect();
            groups[ravel(&o, &kept)].push(a);
        }
        groups
            .iter()
            .map(|g| match op {
                ReduceOp::Sum => g.iter().sum(),
                ReduceOp::Mean => g.iter().sum::<f64>() / g.len() as f64,
                ReduceOp::Max => g.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            })
            .collect()
    }

    fn reduce_op() -> impl Strategy<Value = ReduceOp> {
        prop::sample::select(vec![ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max])
    }

    proptest! {
        #[test]
        fn reduce_matches_definition(shape in prop::collection::vec(1usize..5, 0..4), axes_bits in any::<u8>(),
                                     neg in any::<bool>(), keep_dims in any::<bool>(), op in reduce_op(),
                                     dt in prop::sample::select(vec![DType::F32, DType::F16, DType::BF16, DType::I64]),
                                     seed in any::<u64>()) {
            prop_assume!(!(op == ReduceOp::Mean && dt == DType::I64));
            let r = shape.len();
            let mut mask: Vec<bool> = (0..r).map(|i| axes_bits >> i & 1 == 1).collect();
            let axes: Vec<isize> = (0..r).filter(|&i| mask[i]).map(|i| if neg { i as isize - r as isize } else { i as isize }).collect();
            if axes.is_empty() {
                mask = vec![true; r];
            }
            let x = rand_tensor(dt, &shape, seed);
            let reduce = Reduce { op, axes, keep_dims };
            let out = eval_checked(&reduce, &[&x]);
            let want = reference(&x, &mask, op);
            let got: Vec<f64> = match dt {
                DType::I64 => out[0].to_vec::<i64>().unwrap().iter().map(|&a| a as f64).collect(),
                _ => out[0].to_f32_vec().iter().map(|&a| a as f64).collect(),
            };
            let (atol, rtol) = match dt { DType::F32 => (1e-5, 1e-5), DType::I64 => (0.0, 0.0), _ => (5e-2, 1e-2) };
            for (g, w) in got.iter().zip(&want) {
                prop_assert!((g - w).abs() <= atol + rtol * w.abs(), "{} vs {}", g, w);
            }
            let kept: Vec<usize> = (0..r).filter_map(|i| match (mask[i], keep_dims) {
                (false, _) => Some(shape[i]), (true, true) => Some(1), _ => None }).collect();
            prop_assert_eq!(out[0].shape(), &kept[..]);
        }

        #[test]
        fn reduce_symbolic(c in 1usize..5, s in 1i64..8, keep_dims in any::<bool>(), op in reduce_op(),
                           over_s in any::<bool>(), seed in any::<u64>()) {
            let f = TypedFact::new(DType::F32, [Dim::n(2), Dim::affine(1, 1), Dim::n(c as i64)]);
            let x = rand_tensor(DType::F32, &[2, s as usize + 1, c], seed);
            let axes = if over_s { vec![1, 0] } else { vec![-1, 0] };
            check_symbolic(&Reduce { op, axes, keep_dims }, std::slice::from_ref(&f), s, &[&x]);
            check_symbolic(&ArgMax { axis: if over_s { 1 } else { 2 }, keep_dims }, &[f], s, &[&x]);
        }

        #[test]
        fn argmax_first_of_ties(shape in prop::collection::vec(1usize..5, 1..4), ax in 0usize..3,
                                keep_dims in any::<bool>(), dt in prop::sample::select(vec![DType::F32, DType::BF16, DType::I64]),
                                seed in any::<u64>()) {
            let axis = ax % shape.len();
            // few distinct values, so ties are common
            let x = Tensor::from_vec(shape.clone(), rand_tensor(DType::I64, &shape, seed).to_vec::<i64>().unwrap()
                .iter().map(|&v| v % 3).collect::<Vec<i64>>()).unwrap().cast(dt);
            let out = eval_checked(&ArgMax { axis: axis as isize, keep_dims }, &[&x]);
            let v = x.to_f32_vec();
            let got = out[0].to_vec::<i64>().unwrap();
            let mut k = 0;
            for i in 0..v.len() {
                let idx = unravel(i, &shape);
                if idx[axis] != 0 { continue; }
                let lane: Vec<f32> = (0..shape[axis]).map(|j| { let mut t = idx.clone(); t[axis] = j; v[ravel(&t, &shape)] }).collect();
                let best = lane.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                prop_assert_eq!(got[k], lane.iter().position(|&a| a == best).unwrap() as i64);
                k += 1;
            }
        }
    }

    #[test]
    fn special_values() {
        let x =
            Tensor::from_vec(vec![2, 3], vec![1.0f32, f32::NAN, 3.0, -1.0, -5.0, -2.0]).unwrap();
        let m = eval_op(
            &Reduce {
                op: ReduceOp::Max,
                axes: vec![1],
                keep_dims: false,
            },
            &[&x],
        )
        .unwrap();
        let m = m[0].to_vec::<f32>().unwrap();
        assert!(m[0].is_nan() && m[1] == -1.0, "{m:?}");
        let a = eval_op(
            &ArgMax {
                axis: 1,
                keep_dims: true,
            },
            &[&x],
        )
        .unwrap();
        assert_eq!(a[0].shape(), &[2, 1]);
        assert_eq!(a[0].to_vec::<i64>().unwrap(), vec![1, 0]);
        let big = Tensor::from_slice(&[i64::MAX - 1, i64::MAX, 3]);
        let a = eval_op(
            &ArgMax {
                axis: 0,
                keep_dims: false,
            },
            &[&big],
        )
        .unwrap();
        assert_eq!(a[0].to_vec::<i64>().unwrap(), vec![1]);
        // empty reductions: Sum gives 0, the others refuse
        let e = Tensor::zeros(DType::F32, &[3, 0]);
        let s = eval_checked(
            &Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dims: false,
            },
            &[&e],
        );
        assert_eq!(s[0].to_vec::<f32>().unwrap(), vec![0.0; 3]);
        let s = eval_checked(
            &Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dims: true,
            },
            &[&e.cast(DType::I64)],
        );
        assert_eq!(s[0].to_vec::<i64>().unwrap(), vec![0; 3]);
        for op in [ReduceOp::Mean, ReduceOp::Max] {
            let r = Reduce {
                op,
                axes: vec![-1],
                keep_dims: false,
            };
            assert!(matches!(eval_op(&r, &[&e]), Err(OpError::Empty(_))));
            assert!(r.output_facts(&[&TypedFact::of(&e)]).is_err());
            // reducing the non-empty axis is fine: there is nothing to compute
            let r = Reduce {
                op,
                axes: vec![0],
                keep_dims: false,
            };
            assert_eq!(eval_checked(&r, &[&e])[0].shape(), &[0]);
        }
        assert!(matches!(
            eval_op(
                &ArgMax {
                    axis: 1,
                    keep_dims: false
                },
                &[&e]
            ),
            Err(OpError::Empty(_))
        ));
        // rank 0, all axes
        let s = eval_checked(
            &Reduce {
                op: ReduceOp::Mean,
                axes: vec![],
                keep_dims: false,
            },
            &[&Tensor::scalar(2.5f32)],
        );
        assert_eq!(s[0].to_vec::<f32>().unwrap(), vec![2.5]);
        assert_reuses_buffer(
            &Reduce {
                op: ReduceOp::Mean,
                axes: vec![0],
                keep_dims: false,
            },
            &[&x],
        );
        assert_reuses_buffer(
            &ArgMax {
                axis: 0,
                keep_dims: false,
            },
            &[&x],
        );
    }

    #[test]
    fn frame_local_axes() {
        let f = TypedFact::new(DType::F32, [2, 5, 3, 4]);
        let r = |axes: Vec<isize>, keep_dims, a| {
            Reduce {
                op: ReduceOp::Sum,
                axes,
                keep_dims,
            }
            .frame_local_axis(&[&f], &[Some(a)])
        };
        assert_eq!(r(vec![0, -1], false, 2), Some(1));
        assert_eq!(r(vec![0, -1], true, 2), Some(2));
        assert_eq!(r(vec![2], false, 1), Some(1));
        assert_eq!(r(vec![2], false, 2), None);
        assert_eq!(r(vec![], false, 2), None);
        let a = |axis, keep_dims, s| ArgMax { axis, keep_dims }.frame_local_axis(&[&f], &[Some(s)]);
        assert_eq!(a(1, false, 2), Some(1));
        assert_eq!(a(1, true, 2), Some(2));
        assert_eq!(a(3, false, 2), Some(2));
        assert_eq!(a(-2, false, 2), None);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::zeros(DType::F32, &[2, 3]);
        let r = |op, axes: Vec<isize>, t: &Tensor| {
            eval_op(
                &Reduce {
                    op,
                    axes,
                    keep_dims: false,
                },
                &[t],
            )
            .unwrap_err()
        };
        assert!(matches!(r(ReduceOp::Sum, vec![2], &x), OpError::Param(_)));
        assert!(matches!(
            r(ReduceOp::Sum, vec![1, -1], &x),
            OpError::Param(_)
        ));
        assert!(matches!(
            r(ReduceOp::Sum, vec![0], &Tensor::scalar(1.0f32)),
            OpError::Param(_)
        ));
        assert!(matches!(
            r(ReduceOp::Mean, vec![0], &x.cast(DType::I64)),
            OpError::DType { .. }
        ));
        assert!(matches!(
            r(ReduceOp::Max, vec![0], &x.cast(DType::Bool)),
            OpError::DType { .. }
        ));
        assert!(matches!(
            r(ReduceOp::Sum, vec![0], &Tensor::zeros(DType::F32, &[1; 9])),
            OpError::Rank { .. }
        ));
        assert!(eval_op(
            &Reduce {
                op: ReduceOp::Sum,
                axes: vec![],
                keep_dims: false
            },
            &[&x, &x]
        )
        .is_err());
        assert!(matches!(
            eval_op(
                &ArgMax {
                    axis: 0,
                    keep_dims: false
                },
                &[&x.cast(DType::Bool)]
            ),
            Err(OpError::DType { .. })
        ));
        assert!(matches!(
            eval_op(
                &ArgMax {
                    axis: 2,
                    keep_dims: false
                },
                &[&x]
            ),
            Err(OpError::Param(_))
        ));
        assert!(matches!(
            eval_op(
                &ArgMax {
                    axis: 0,
                    keep_dims: false
                },
                &[&Tensor::scalar(1i64)]
            ),
            Err(OpError::Rank { .. })
        ));
    }
}
