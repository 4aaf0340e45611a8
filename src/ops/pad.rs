//! Padding with a constant or by reflection, on every axis and dtype.

use super::broadcast::MAX_RANK;
use super::checks::input_count;
use super::shape::{
    copy_strided, elems, elems_mut, max_rank, param_in_range, with_dtype, Shape8, Shaped,
};
use super::{
    contig, outputs_len, Op, OpError, OpResult, Scratch, StorageElement, Tensor, TypedFact,
};
use crate::op_common;

/// What fills the padded frames.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PadMode {
    /// A value, cast to the tensor's dtype (bool: `value != 0`).
    Constant(f32),
    /// Mirror image without repeating the edge (numpy/PyTorch `reflect`);
    /// each pad must be smaller than its axis.
    Reflect,
}

/// Pads each axis `i` with `pads[i] = (before, after)` elements; `pads`
/// has one pair per input axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Pad {
    pub pads: Vec<(usize, usize)>,
    pub mode: PadMode,
}

impl Pad {
    fn check<S: Shaped>(&self, inputs: &[&S]) -> OpResult<()> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        max_rank(x, 0)?;
        if self.pads.len() != x.ndim() {
            return Err(OpError::Param(format!(
                "{} pad pairs for a rank-{} input",
                self.pads.len(),
                x.ndim()
            )));
        }
        for &(b, a) in &self.pads {
            param_in_range(i64::try_from(b).unwrap_or(i64::MAX), "pad")?;
            param_in_range(i64::try_from(a).unwrap_or(i64::MAX), "pad")?;
        }
        if self.mode == PadMode::Reflect {
            for (i, &(b, a)) in self.pads.iter().enumerate() {
                // symbolic sizes are taken to be large enough
                if let Some(n) = x.dim(i).as_const() {
                    if b.max(a) > 0 && b.max(a) as i64 >= n {
                        return Err(OpError::Param(format!(
                            "reflect pad ({b}, {a}) on axis {i} needs pads smaller than its size {n}"
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Source index of output index `i` on an axis of size `n` padded by `before`.
#[inline]
fn reflect(i: usize, before: usize, n: usize) -> usize {
    let j = i as isize - before as isize;
    let n = n as isize;
    (if j < 0 {
        -j
    } else if j >= n {
        2 * (n - 1) - j
    } else {
        j
    }) as usize
}

fn pad_constant<T: StorageElement>(
    x: &[T],
    xs: &Shape8,
    out: &mut [T],
    os: &Shape8,
    pads: &[(usize, usize)],
    v: f32,
) {
    out.fill(T::from_f32(v));
    let (src_st, dst_st) = (xs.strides(), os.strides());
    let r = xs.as_slice().len();
    let off: usize = (0..r).map(|i| pads[i].0 * dst_st[i]).sum();
    copy_strided(x, 0, &src_st[..r], out, off, &dst_st[..r], xs.as_slice());
}

fn pad_reflect<T: StorageElement>(
    x: &[T],
    xs: &Shape8,
    out: &mut [T],
    os: &Shape8,
    pads: &[(usize, usize)],
) {
    let (xd, od) = (xs.as_slice(), os.as_slice());
    let r = od.len();
    if od.contains(&0) {
        return;
    }
    if r == 0 {
        out[0] = x[0];
        return;
    }
    let src_st = xs.strides();
    let (last_n, last_b) = (xd[r - 1], pads[r - 1].0);
    let n = od[r - 1];
    let rows: usize = od[..r - 1].iter().product();
    let mut idx = [0usize; MAX_RANK];
    for row in 0..rows {
        let base: usize = (0..r - 1)
            .map(|ax| reflect(idx[ax], pads[ax].0, xd[ax]) * src_st[ax])
            .sum();
        for (k, y) in out[row * n..(row + 1) * n].iter_mut().enumerate() {
            *y = x[base + reflect(k, last_b, last_n)];
        }
        for ax in (0..r - 1).rev() {
            idx[ax] += 1;
            if idx[ax] < od[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
}

impl Op for Pad {
    op_common!("Pad");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        self.check(inputs)?;
        let mut out = inputs[0].clone();
        for (d, &(b, a)) in out.shape.iter_mut().zip(&self.pads) {
            *d = d.add_const((b + a) as i64);
        }
        Ok(vec![out])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        self.check(inputs)?;
        let x = contig(inputs[0]);
        let xs = Shape8::from_slice(x.shape())?;
        let mut os = xs;
        for (d, &(b, a)) in os.as_mut_slice().iter_mut().zip(&self.pads) {
            *d += b + a;
        }
        os.checked_len()?;
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        out.ensure(x.dtype(), os.as_slice());
        with_dtype!(x.dtype(), T => {
            let (src, dst) = (elems::<T>(&x)?, elems_mut::<T>(out)?);
            match self.mode {
                PadMode::Constant(v) => pad_constant(src, &xs, dst, &os, &self.pads, v),
                PadMode::Reflect => pad_reflect(src, &xs, dst, &os, &self.pads),
            }
        });
        Ok(())
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        (self.pads.get(a) == Some(&(0, 0))).then_some(a)
    }

    fn info(&self) -> String {
        format!("{:?} {:?}", self.pads, self.mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::shape::test_util::*;
    use crate::ops::{eval_op, DType, Dim};
    use proptest::prelude::*;

    /// Reflect index rule written out: mirror about the first and last element.
    fn mirror(j: i64, n: i64) -> i64 {
        let mut j = j;
        if j < 0 {
            j = -j;
        }
        if j > n - 1 {
            j = (n - 1) - (j - (n - 1));
        }
        j
    }

    proptest! {
        #[test]
        fn pad_matches_index_rule(shape in prop::collection::vec(1usize..5, 0..4), pads_raw in prop::collection::vec((0usize..5, 0usize..5), 4),
                                  reflect in any::<bool>(), value in -3f32..3.0, dt in any_dt(), seed in any::<u64>()) {
            let r = shape.len();
            let pads: Vec<(usize, usize)> = pads_raw[..r].iter().zip(&shape)
                .map(|(&(b, a), &n)| if reflect { (b % n, a % n) } else { (b, a) }).collect();
            let mode = if reflect { PadMode::Reflect } else { PadMode::Constant(value) };
            let x = rand_tensor(dt, &shape, seed);
            let out = eval_checked(&Pad { pads: pads.clone(), mode }, &[&x]);
            let oshape = out[0].shape().to_vec();
            let (xv, ov) = (x.to_f32_vec(), out[0].to_f32_vec());
            let fill = Tensor::from_slice(&[value]).cast(dt).to_f32_vec()[0];
            for (i, &got) in ov.iter().enumerate() {
                let idx = unravel(i, &oshape);
                let src: Vec<i64> = idx.iter().zip(&pads).map(|(&k, &(b, _))| k as i64 - b as i64).collect();
                let inside = src.iter().zip(&shape).all(|(&j, &n)| j >= 0 && j < n as i64);
                let want = if inside {
                    xv[ravel(&src.iter().map(|&j| j as usize).collect::<Vec<_>>(), &shape)]
                } else if reflect {
                    let m: Vec<usize> = src.iter().zip(&shape).map(|(&j, &n)| mirror(j, n as i64) as usize).collect();
                    xv[ravel(&m, &shape)]
                } else {
                    fill
                };
                prop_assert!(got == want || (got.is_nan() && want.is_nan()), "at {:?}: {} vs {}", idx, got, want);
            }
        }

        #[test]
        fn pad_symbolic(b in 0usize..4, a in 0usize..4, c in 1usize..4, s in 4i64..9, reflect in any::<bool>(), dt in any_dt()) {
            let f = TypedFact::new(dt, [Dim::affine(1, 0), Dim::n(c as i64)]);
            let x = rand_tensor(dt, &[s as usize, c], 9);
            let mode = if reflect { PadMode::Reflect } else { PadMode::Constant(1.0) };
            let out = check_symbolic(&Pad { pads: vec![(b, a), (0, 0)], mode }, &[f], s, &[&x]);
            prop_assert_eq!(out[0].shape(), &[s as usize + a + b, c]);
        }
    }

    #[test]
    fn known_values_every_dtype() {
        let x = Tensor::from_slice(&[1i64, 2, 3, 4]);
        let r = eval_op(
            &Pad {
                pads: vec![(2, 3)],
                mode: PadMode::Reflect,
            },
            &[&x],
        )
        .unwrap();
        assert_eq!(
            r[0].to_vec::<i64>().unwrap(),
            vec![3, 2, 1, 2, 3, 4, 3, 2, 1]
        );
        let c = eval_op(
            &Pad {
                pads: vec![(1, 1)],
                mode: PadMode::Constant(-2.7),
            },
            &[&x],
        )
        .unwrap();
        assert_eq!(c[0].to_vec::<i64>().unwrap(), vec![-2, 1, 2, 3, 4, -2]);
        let bools = Tensor::from_slice(&[false, false]);
        let c = eval_op(
            &Pad {
                pads: vec![(1, 0)],
                mode: PadMode::Constant(0.5),
            },
            &[&bools],
        )
        .unwrap();
        assert_eq!(c[0].to_vec::<bool>().unwrap(), vec![true, false, false]);
        for dt in ALL_DTYPES {
            let x = rand_tensor(dt, &[3, 4], 5);
            let p = eval_checked(
                &Pad {
                    pads: vec![(0, 0), (1, 2)],
                    mode: PadMode::Reflect,
                },
                &[&x],
            );
            assert_eq!(p[0].narrow(1, 1, 4).unwrap().contiguous(), x, "{dt}");
            assert_reuses_buffer(
                &Pad {
                    pads: vec![(1, 0), (0, 2)],
                    mode: PadMode::Constant(1.0),
                },
                &[&x],
            );
            assert_reuses_buffer(
                &Pad {
                    pads: vec![(1, 0), (0, 2)],
                    mode: PadMode::Reflect,
                },
                &[&x],
            );
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::zeros(DType::F32, &[2, 3]);
        let e = |pads: Vec<(usize, usize)>, mode| {
            let op = Pad { pads, mode };
            assert!(op.output_facts(&[&TypedFact::of(&x)]).is_err());
            eval_op(&op, &[&x]).unwrap_err()
        };
        assert!(matches!(
            e(vec![(1, 1)], PadMode::Constant(0.0)),
            OpError::Param(_)
        ));
        assert!(matches!(
            e(vec![(0, 0); 3], PadMode::Constant(0.0)),
            OpError::Param(_)
        ));
        assert!(matches!(
            e(vec![(2, 0), (0, 0)], PadMode::Reflect),
            OpError::Param(_)
        ));
        assert!(matches!(
            e(vec![(0, 0), (0, 3)], PadMode::Reflect),
            OpError::Param(_)
        ));
        let empty = Tensor::zeros(DType::F32, &[0]);
        assert!(eval_op(
            &Pad {
                pads: vec![(1, 0)],
                mode: PadMode::Reflect
            },
            &[&empty]
        )
        .is_err());
        assert!(eval_op(
            &Pad {
                pads: vec![(usize::MAX, 1)],
                mode: PadMode::Constant(0.0)
            },
            &[&empty]
        )
        .is_err());
        assert!(eval_op(
            &Pad {
                pads: vec![],
                mode: PadMode::Reflect
            },
            &[&x, &x]
        )
        .is_err());
    }

    #[test]
    fn frame_local_axes() {
        let f = TypedFact::new(DType::F32, [4, 3]);
        let p = Pad {
            pads: vec![(0, 0), (1, 1)],
            mode: PadMode::Reflect,
        };
        assert_eq!(p.frame_local_axis(&[&f], &[Some(0)]), Some(0));
        assert_eq!(p.frame_local_axis(&[&f], &[Some(1)]), None);
    }
}
