//! Normalisations: LayerNorm over one axis, inference BatchNorm over a
//! channel axis, and folding a BatchNorm into the conv or linear before it.
//!
//! Statistics are computed in f32 whatever the input float type; parameters
//! may be of any float type (they are read into f32 scratch).

use super::checks::input_count;
use super::shape::{
    elems, elems_mut, exact_rank, float_dtype, rank_in, resolve_axis, with_dtype, Shaped,
};
use super::{contig, outputs_len, OpError, OpResult, Scratch, StorageElement, Tensor, TypedFact};
use super::{Element, Op};
use crate::op_common;

/// `(outer, n, inner)`: the sizes before, at and after `axis`.
pub(crate) fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

/// Reads a float tensor's elements into `dst` (of its length) as f32.
fn read_f32(t: &Tensor, dst: &mut [f32]) -> OpResult<()> {
    let t = contig(t);
    with_dtype!(t.dtype(), T => {
        for (d, s) in dst.iter_mut().zip(elems::<T>(&t)?) {
            *d = s.to_f32();
        }
    });
    Ok(())
}

/// Checks that input `i` is a float vector as long as axis `axis` of `x`.
fn check_param<S: Shaped>(p: &S, i: usize, x: &S, axis: usize) -> OpResult<()> {
    exact_rank(p, i, 1)?;
    float_dtype(p, i)?;
    if p.dim(0) != x.dim(axis) {
        return Err(OpError::Shape(format!(
            "input {i}: expected {} values (size of axis {axis}), got {}",
            x.dim(axis),
            p.dim(0)
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------- LayerNorm

/// Normalises over one axis: `(x - mean) / sqrt(var + eps) * gamma + beta`,
/// with the biased variance (PyTorch). Inputs `x`, and optionally `gamma`
/// and `beta` (`[size of axis]`, both or neither); output like `x`.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerNorm {
    pub eps: f32,
    pub axis: isize,
}

impl LayerNorm {
    fn check<S: Shaped>(&self, inputs: &[&S]) -> OpResult<usize> {
        if inputs.len() != 1 && inputs.len() != 3 {
            return Err(OpError::InputCount {
                expected: "1 or 3".into(),
                got: inputs.len(),
            });
        }
        let x = inputs[0];
        rank_in(x, 0, 1)?;
        float_dtype(x, 0)?;
        let axis = resolve_axis(self.axis, x.ndim())?;
        for (i, p) in inputs.iter().enumerate().skip(1) {
            check_param(*p, i, x, axis)?;
        }
        Ok(axis)
    }
}

fn layer_norm<T: StorageElement>(
    x: &[T],
    out: &mut [T],
    (outer, n, inner): (usize, usize, usize),
    affine: Option<(&[f32], &[f32])>,
    eps: f32,
) {
    let inv_n = 1.0 / n as f32;
    for o in 0..outer {
        for k in 0..inner {
            let base = o * n * inner + k;
            let at = |i: usize| base + i * inner;
            let mean = (0..n).map(|i| x[at(i)].to_f32()).sum::<f32>() * inv_n;
            let var = (0..n)
                .map(|i| (x[at(i)].to_f32() - mean).powi(2))
                .sum::<f32>()
                * inv_n;
            let rstd = 1.0 / (var + eps).sqrt();
            for i in 0..n {
                let y = (x[at(i)].to_f32() - mean) * rstd;
                let y = match affine {
                    Some((g, b)) => y * g[i] + b[i],
                    None => y,
                };
                out[at(i)] = T::from_f32(y);
            }
        }
    }
}

impl Op for LayerNorm {
    op_common!("LayerNorm");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        self.check(inputs)?;
        Ok(vec![inputs[0].clone()])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        let axis = self.check(inputs)?;
        let x = contig(inputs[0]);
        let dims = split_at_axis(x.shape(), axis);
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        out.ensure(x.dtype(), x.shape());
        let (g, b) = scratch.two(dims.1, dims.1);
        let affine = if inputs.len() == 3 {
            read_f32(inputs[1], g)?;
            read_f32(inputs[2], b)?;
            Some((&*g, &*b))
        } else {
            None
        };
        with_dtype!(x.dtype(), T => layer_norm::<T>(elems(&x)?, elems_mut(out)?, dims, affine, self.eps));
        Ok(())
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        let axis = resolve_axis(self.axis, inputs.first()?.rank()).ok()?;
        (a != axis && axes[1..].iter().all(Option::is_none)).then_some(a)
    }

    fn info(&self) -> String {
        format!("axis {} eps {}", self.axis, self.eps)
    }
}

// ---------------------------------------------------------------- BatchNorm

/// Inference batch norm over the channel axis `axis`: inputs `x`, `gamma`,
/// `beta`, `mean`, `var` (each `[C]`); `y = (x - mean) / sqrt(var + eps) * gamma + beta`.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchNorm {
    pub eps: f32,
    pub axis: isize,
}

impl BatchNorm {
    fn check<S: Shaped>(&self, inputs: &[&S]) -> OpResult<usize> {
        input_count(inputs, 5)?;
        let x = inputs[0];
        rank_in(x, 0, 1)?;
        float_dtype(x, 0)?;
        let axis = resolve_axis(self.axis, x.ndim())?;
        for (i, p) in inputs.iter().enumerate().skip(1) {
            check_param(*p, i, x, axis)?;
        }
        Ok(axis)
    }
}

/// Per-channel `(scale, shift)` of a batch norm, in place of `(gamma, beta)`.
fn bn_scale_shift(g: &mut [f32], b: &mut [f32], mean: &[f32], var: &[f32], eps: f32) {
    for c in 0..g.len() {
        g[c] /= (var[c] + eps).sqrt();
        b[c] -= mean[c] * g[c];
    }
}

fn scale_shift<T: StorageElement>(
    x: &[T],
    out: &mut [T],
    (outer, n, inner): (usize, usize, usize),
    s: &[f32],
    t: &[f32],
) {
    for o in 0..outer {
        for c in 0..n {
            let base = (o * n + c) * inner;
            for (y, v) in out[base..base + inner]
                .iter_mut()
                .zip(&x[base..base + inner])
            {
                *y = T::from_f32(v.to_f32() * s[c] + t[c]);
            }
        }
    }
}

impl Op for BatchNorm {
    op_common!("BatchNorm");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        self.check(inputs)?;
        Ok(vec![inputs[0].clone()])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        let axis = self.check(inputs)?;
        let x = contig(inputs[0]);
        let dims = split_at_axis(x.shape(), axis);
        let c = dims.1;
        let (g, b, m, v) = scratch.four(c, c, c, c);
        for (t, buf) in inputs[1..].iter().zip([&mut *g, &mut *b, &mut *m, &mut *v]) {
            read_f32(t, buf)?;
        }
        bn_scale_shift(g, b, m, v, self.eps);
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        out.ensure(x.dtype(), x.shape());
        with_dtype!(x.dtype(), T => scale_shift::<T>(elems(&x)?, elems_mut(out)?, dims, g, b));
        Ok(())
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        let axis = resolve_axis(self.axis, inputs.first()?.rank()).ok()?;
        (a != axis && axes[1..].iter().all(Option::is_none)).then_some(a)
    }

    fn info(&self) -> String {
        format!("axis {} eps {}", self.axis, self.eps)
    }
}

/// Folds an inference batch norm into the conv or linear before it (weight
/// with output channels on axis 0, optional bias `[C]`): returns the new
/// weight and bias, in the weight's dtype.
pub fn fold_batch_norm(
    conv_w: &Tensor,
    conv_b: Option<&Tensor>,
    gamma: &Tensor,
    beta: &Tensor,
    mean: &Tensor,
    var: &Tensor,
    eps: f32,
) -> OpResult<(Tensor, Tensor)> {
    if conv_w.rank() == 0 {
        return Err(OpError::Rank {
            input: 0,
            expected: ">= 1".into(),
            got: 0,
        });
    }
    float_dtype(conv_w, 0)?;
    let params = [conv_b, Some(gamma), Some(beta), Some(mean), Some(var)];
    for (i, p) in params.iter().enumerate() {
        if let Some(p) = p {
            check_param(*p, i + 1, conv_w, 0)?;
        }
    }
    let c = conv_w.shape()[0];
    let mut g = gamma.to_f32_vec();
    let mut b = beta.to_f32_vec();
    bn_scale_shift(&mut g, &mut b, &mean.to_f32_vec(), &var.to_f32_vec(), eps);
    let per = conv_w.len() / c.max(1);
    let w: Vec<f32> = conv_w
        .to_f32_vec()
        .iter()
        .enumerate()
        .map(|(k, &w)| w * g[k / per.max(1)])
        .collect();
    let bias: Vec<f32> = match conv_b {
        Some(cb) => cb
            .to_f32_vec()
            .iter()
            .zip(g.iter().zip(&b))
            .map(|(&v, (&s, &t))| v * s + t)
            .collect(),
        None => b,
    };
    let dt = conv_w.dtype();
    let w = Tensor::from_vec(conv_w.shape().to_vec(), w)?.cast(dt);
    let bias = Tensor::from_vec(vec![c], bias)?.cast(dt);
    Ok((w, bias))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::shape::test_util::*;
    use crate::ops::{eval_op, DType, Dim};
    use proptest::prelude::*;

    /// (atol, rtol) for comparing with an f64 reference.
    fn tol(dt: DType) -> (f32, f32) {
        match dt {
            DType::F32 => (2e-5, 1e-5),
            _ => (2e-2, 1e-2),
        }
    }

    /// The lane through element `i` along `axis` (f64), its mean and its
    /// biased variance.
    fn lane(v: &[f32], shape: &[usize], axis: usize, i: usize) -> (Vec<f64>, f64, f64) {
        let idx = unravel(i, shape);
        let lane: Vec<f64> = (0..shape[axis])
            .map(|k| {
                let mut j = idx.clone();
                j[axis] = k;
                v[ravel(&j, shape)] as f64
            })
            .collect();
        let n = lane.len() as f64;
        let mean = lane.iter().sum::<f64>() / n;
        let var = lane.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / n;
        (lane, mean, var)
    }

    /// How far f32 rounding can move the output: the largest |x| / sd
    /// over the lanes times the largest gain (in a lane of nearly equal
    /// values, x - mean cancels and its rounding is divided by the spread).
    fn sensitivity(x: &Tensor, axis: usize, gb: Option<(&Tensor, &Tensor)>, eps: f32) -> f32 {
        let shape = x.shape().to_vec();
        let v = x.to_f32_vec();
        let g_max = gb.map_or(1.0, |(g, _)| {
            g.to_f32_vec().iter().fold(0f32, |m, v| m.max(v.abs()))
        });
        let worst = (0..v.len())
            .map(|i| {
                let (values, _, var) = lane(&v, &shape, axis, i);
                let big = values.iter().fold(0f64, |m, a| m.max(a.abs()));
                big / (var + eps as f64).sqrt()
            })
            .fold(1f64, f64::max);
        worst as f32 * g_max.max(1.0)
    }

    /// Layer norm from the definition, in f64, on the (already rounded) inputs.
    fn reference(x: &Tensor, axis: usize, gb: Option<(&Tensor, &Tensor)>, eps: f32) -> Tensor {
        let shape = x.shape().to_vec();
        let v = x.to_f32_vec();
        let (g, b) = gb.map_or(
            (vec![1.0; shape[axis]], vec![0.0; shape[axis]]),
            |(g, b)| (g.to_f32_vec(), b.to_f32_vec()),
        );
        let mut out = vec![0f32; v.len()];
        for i in 0..v.len() {
            let (_, mean, var) = lane(&v, &shape, axis, i);
            let y = (v[i] as f64 - mean) / (var + eps as f64).sqrt();
            let c = unravel(i, &shape)[axis];
            out[i] = (y * g[c] as f64 + b[c] as f64) as f32;
        }
        Tensor::from_vec(shape, out).unwrap()
    }

    #[test]
    fn layer_norm_of_nearly_equal_values_is_within_f32_rounding() {
        // a lane of two close values (CI's proptest found it): f32's
        // x - mean cancels, and the tolerance follows the spread
        let (shape, a) = (vec![2usize, 2], 0);
        let seed = 11306880586637274254u64;
        let x = rand_tensor(DType::F32, &shape, seed);
        let g = rand_tensor(DType::F32, &[2], seed ^ 1);
        let b = rand_tensor(DType::F32, &[2], seed ^ 2);
        let op = LayerNorm { eps: 1e-5, axis: 0 };
        let out = eval_checked(&op, &[&x, &g, &b]);
        let want = reference(&x, a, Some((&g, &b)), 1e-5);
        let atol = 2e-5f32.max(4e-7 * sensitivity(&x, a, Some((&g, &b)), 1e-5));
        assert!(
            out[0].close_to(&want, atol, 1e-5),
            "{:?} vs {:?}",
            out[0],
            want
        );
        assert!(atol < 1e-3, "the tolerance stays tight: {atol}");
    }

    proptest! {
        #[test]
        fn layer_norm_matches_definition(shape in prop::collection::vec(1usize..5, 1..4), ax in -3isize..3,
                                         affine in any::<bool>(), dt in float_dt(), seed in any::<u64>()) {
            let axis = ax.rem_euclid(shape.len() as isize) - if ax < 0 { shape.len() as isize } else { 0 };
            let x = rand_tensor(dt, &shape, seed);
            let a = resolve_axis(axis, shape.len()).unwrap();
            let g = rand_tensor(DType::F32, &[shape[a]], seed ^ 1);
            let b = rand_tensor(dt, &[shape[a]], seed ^ 2);
            let op = LayerNorm { eps: 1e-5, axis };
            let inputs: Vec<&Tensor> = if affine { vec![&x, &g, &b] } else { vec![&x] };
            let out = eval_checked(&op, &inputs);
            let want = reference(&x, a, affine.then_some((&g, &b)), 1e-5);
            let (atol, rtol) = tol(dt);
            // f32's rounding of x - mean, divided by a lane's spread
            let atol = atol.max(4e-7 * sensitivity(&x, a, affine.then_some((&g, &b)), 1e-5));
            prop_assert!(out[0].close_to(&want, atol, rtol), "{:?} vs {:?}", out[0], want);
        }

        #[test]
        fn layer_norm_symbolic(c in 1usize..6, s in 1i64..9, dt in float_dt(), seed in any::<u64>()) {
            let f = TypedFact::new(dt, [Dim::s(), Dim::n(c as i64)]);
            let p = TypedFact::new(dt, [c]);
            let x = rand_tensor(dt, &[s as usize, c], seed);
            let g = rand_tensor(dt, &[c], seed + 1);
            check_symbolic(&LayerNorm { eps: 1e-5, axis: -1 }, &[f.clone(), p.clone(), p], s, &[&x, &g, &g]);
        }

        #[test]
        fn batch_norm_matches_definition(shape in prop::collection::vec(1usize..5, 1..4), ax in 0usize..3,
                                         dt in float_dt(), seed in any::<u64>(), sym in any::<bool>()) {
            let axis = ax % shape.len();
            let c = shape[axis];
            let x = rand_tensor(dt, &shape, seed);
            let g = rand_tensor(DType::F32, &[c], seed + 1);
            let b = rand_tensor(DType::F32, &[c], seed + 2);
            let m = rand_tensor(DType::F32, &[c], seed + 3);
            let v = Tensor::from_vec(vec![c], rand_tensor(DType::F32, &[c], seed + 4).to_f32_vec().iter().map(|a| a.abs() + 0.1).collect()).unwrap();
            let op = BatchNorm { eps: 1e-3, axis: axis as isize };
            let out = eval_checked(&op, &[&x, &g, &b, &m, &v]);
            let (gv, bv, mv, vv) = (g.to_f32_vec(), b.to_f32_vec(), m.to_f32_vec(), v.to_f32_vec());
            let want: Vec<f32> = x.to_f32_vec().iter().enumerate().map(|(i, &a)| {
                let k = unravel(i, &shape)[axis];
                ((a as f64 - mv[k] as f64) / (vv[k] as f64 + 1e-3).sqrt() * gv[k] as f64 + bv[k] as f64) as f32
            }).collect();
            let (atol, rtol) = tol(dt);
            prop_assert!(out[0].close_to(&Tensor::from_vec(shape.clone(), want).unwrap(), atol, rtol));
            if sym && axis != 0 {
                let mut f: Vec<Dim> = shape.iter().map(|&d| Dim::n(d as i64)).collect();
                f[0] = Dim::affine(1, 2);
                let pf = TypedFact::new(DType::F32, [c]);
                let facts = [TypedFact::dt_shape(dt, &f), pf.clone(), pf.clone(), pf.clone(), pf];
                let xs = rand_tensor(dt, &[&[6], &shape[1..]].concat(), seed);
                check_symbolic(&op, &facts, 4, &[&xs, &g, &b, &m, &v]);
            }
        }
    }

    #[test]
    fn layer_norm_known_values_and_reuse() {
        let x = Tensor::from_vec(vec![2, 2], vec![1.0f32, 3.0, -2.0, -2.0]).unwrap();
        let out = eval_op(&LayerNorm { eps: 0.0, axis: 1 }, &[&x]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap()[..2], [-1.0, 1.0]);
        // constant lanes normalise to 0 (var 0 + eps)
        let out = eval_op(
            &LayerNorm {
                eps: 1e-5,
                axis: -1,
            },
            &[&x],
        )
        .unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap()[2..], [0.0, 0.0]);
        let g = Tensor::from_slice(&[2.0f32, 1.0]);
        let b = Tensor::from_slice(&[0.5f32, 0.0]);
        assert_reuses_buffer(
            &LayerNorm {
                eps: 1e-5,
                axis: -1,
            },
            &[&x, &g, &b],
        );
        let v = Tensor::from_slice(&[1.0f32, 1.0]);
        assert_reuses_buffer(&BatchNorm { eps: 1e-5, axis: 1 }, &[&x, &g, &b, &b, &v]);
    }

    /// Naive conv1d: `x [I, T]`, `w [O, I, K]`, `b [O]`, valid padding.
    fn conv1d(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
        let (i_n, t) = (x.shape()[0], x.shape()[1]);
        let (o_n, k_n) = (w.shape()[0], w.shape()[2]);
        let (xv, wv, bv) = (x.to_f32_vec(), w.to_f32_vec(), b.to_f32_vec());
        let to = t - k_n + 1;
        let mut out = vec![0f32; o_n * to];
        for o in 0..o_n {
            for p in 0..to {
                let mut acc = bv[o] as f64;
                for i in 0..i_n {
                    for k in 0..k_n {
                        acc += wv[(o * i_n + i) * k_n + k] as f64 * xv[i * t + p + k] as f64;
                    }
                }
                out[o * to + p] = acc as f32;
            }
        }
        Tensor::from_vec(vec![o_n, to], out).unwrap()
    }

    #[test]
    fn folded_conv_equals_conv_then_batch_norm() {
        let (i, o, k, t) = (3, 4, 3, 9);
        let x = rand_tensor(DType::F32, &[i, t], 1);
        let w = rand_tensor(DType::F32, &[o, i, k], 2);
        let cb = rand_tensor(DType::F32, &[o], 3);
        let g = rand_tensor(DType::F32, &[o], 4);
        let beta = rand_tensor(DType::F32, &[o], 5);
        let m = rand_tensor(DType::F32, &[o], 6);
        let v = Tensor::from_vec(vec![o], vec![0.5f32, 1.0, 2.0, 0.1]).unwrap();
        for bias in [Some(&cb), None] {
            let zero = Tensor::zeros(DType::F32, &[o]);
            let y = conv1d(&x, &w, bias.unwrap_or(&zero));
            let want =
                eval_op(&BatchNorm { eps: 1e-5, axis: 0 }, &[&y, &g, &beta, &m, &v]).unwrap();
            let (fw, fb) = fold_batch_norm(&w, bias, &g, &beta, &m, &v, 1e-5).unwrap();
            assert_eq!(fw.shape(), w.shape());
            let got = conv1d(&x, &fw, &fb);
            assert!(
                got.close_to(&want[0], 1e-5, 1e-5),
                "{got:?} vs {:?}",
                want[0]
            );
        }
        let wh = w.cast(DType::F16);
        let (fw, fb) = fold_batch_norm(&wh, None, &g, &beta, &m, &v, 1e-5).unwrap();
        assert_eq!((fw.dtype(), fb.dtype()), (DType::F16, DType::F16));
        let short = Tensor::zeros(DType::F32, &[o - 1]);
        assert!(fold_batch_norm(&w, Some(&short), &g, &beta, &m, &v, 1e-5).is_err());
        assert!(fold_batch_norm(&w, None, &g, &beta, &short, &v, 1e-5).is_err());
        assert!(fold_batch_norm(&Tensor::scalar(1.0f32), None, &g, &beta, &m, &v, 1e-5).is_err());
        assert!(fold_batch_norm(&w.cast(DType::I64), None, &g, &beta, &m, &v, 1e-5).is_err());
    }

    #[test]
    fn frame_local_axes() {
        let x = TypedFact::new(DType::F32, [4, 8]);
        let p = TypedFact::new(DType::F32, [8]);
        let ln = LayerNorm {
            eps: 1e-5,
            axis: -1,
        };
        assert_eq!(
            ln.frame_local_axis(&[&x, &p, &p], &[Some(0), None, None]),
            Some(0)
        );
        assert_eq!(ln.frame_local_axis(&[&x], &[Some(1)]), None);
        assert_eq!(
            ln.frame_local_axis(&[&x, &p, &p], &[Some(0), Some(0), None]),
            None
        );
        let bn = BatchNorm { eps: 1e-5, axis: 1 };
        assert_eq!(
            bn.frame_local_axis(&[&x, &p, &p, &p, &p], &[Some(0), None, None, None, None]),
            Some(0)
        );
        assert_eq!(
            bn.frame_local_axis(&[&x, &p, &p, &p, &p], &[Some(1), None, None, None, None]),
            None
        );
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::zeros(DType::F32, &[2, 3]);
        let p3 = Tensor::zeros(DType::F32, &[3]);
        let p2 = Tensor::zeros(DType::F32, &[2]);
        let ln = |axis, ins: &[&Tensor]| eval_op(&LayerNorm { eps: 1e-5, axis }, ins).unwrap_err();
        assert!(matches!(ln(-1, &[&x, &p3]), OpError::InputCount { .. }));
        assert!(matches!(ln(-1, &[&x, &p2, &p2]), OpError::Shape(_)));
        assert!(matches!(ln(0, &[&x, &p3, &p3]), OpError::Shape(_)));
        assert!(matches!(ln(2, &[&x]), OpError::Param(_)));
        assert!(matches!(ln(-3, &[&x]), OpError::Param(_)));
        assert!(matches!(
            ln(0, &[&Tensor::scalar(1.0f32)]),
            OpError::Rank { .. }
        ));
        assert!(matches!(
            ln(0, &[&x.cast(DType::I64)]),
            OpError::DType { .. }
        ));
        assert!(matches!(
            ln(-1, &[&x, &p3.cast(DType::Bool), &p3]),
            OpError::DType { input: 1, .. }
        ));
        assert!(matches!(
            ln(-1, &[&x, &x, &x]),
            OpError::Rank { input: 1, .. }
        ));
        let bn = |axis, ins: &[&Tensor]| eval_op(&BatchNorm { eps: 1e-5, axis }, ins).unwrap_err();
        assert!(matches!(
            bn(1, &[&x, &p3, &p3, &p3]),
            OpError::InputCount { .. }
        ));
        assert!(matches!(
            bn(0, &[&x, &p3, &p3, &p3, &p3]),
            OpError::Shape(_)
        ));
        assert!(matches!(
            bn(1, &[&x, &p3, &p3, &p3, &p2]),
            OpError::Shape(_)
        ));
        let f = TypedFact::of(&x);
        let pf = TypedFact::of(&p2);
        assert!(LayerNorm {
            eps: 1e-5,
            axis: -1
        }
        .output_facts(&[&f, &pf, &pf])
        .is_err());
    }
}
