//! Weight-only int8: a PyTorch-layout weight `[out, in]` stored as int8
//! with an f32 scale per group of inputs of each output row (the whole row,
//! or fewer where a few large inputs would leave the rest coarse), and
//! `Int8Linear`, the `Linear` that runs on it.
//!
//! A decoder step multiplies one row (or a beam's few) by every weight, so
//! its speed is the bytes it reads: int8 reads a quarter of f32's. Few rows
//! are multiplied straight from the int8 bytes, widened in registers; many
//! rows (an encoder window, a prompt) widen the weight once into scratch and
//! take the f32 kernel, where the products, not the bytes, cost.

use std::sync::Arc;

use super::{f32s, gemm_rows, rows_work_len};
use crate::op_common;
use crate::ops::broadcast::MAX_RANK;
use crate::ops::checks::input_count_range;
use crate::ops::{
    contig, outputs_len, DType, Dim, Op, OpError, OpResult, Scratch, Tensor, TypedFact,
};

/// Up to this many rows are multiplied from the int8 bytes; more widen the
/// weight into scratch first (a beam of 5 reads int8).
const DIRECT_ROWS: usize = 8;

/// A `[rows, cols]` matrix as int8 with a scale per `group` columns of a
/// row: `w[r][c] ≈ scale[r][c / group] * q[r][c]`, `|q| <= 127`.
#[derive(Clone, PartialEq)]
pub struct Int8Matrix {
    rows: usize,
    cols: usize,
    group: usize,
    q: Vec<i8>,
    /// `[rows, cols / group]`
    scale: Vec<f32>,
}

impl std::fmt::Debug for Int8Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "Int8Matrix[{}, {}]", self.rows, self.cols)
    }
}

impl Int8Matrix {
    /// Row-major `w` of `rows x cols`, each row scaled by its largest
    /// magnitude (symmetric, round to nearest).
    pub fn quantize(w: &[f32], rows: usize, cols: usize) -> Int8Matrix {
        Int8Matrix::quantize_groups(w, rows, cols, cols)
    }

    /// As [`Int8Matrix::quantize`], a scale per `group` columns (`group`
    /// divides `cols`; `cols` itself is a scale per row).
    pub fn quantize_groups(w: &[f32], rows: usize, cols: usize, group: usize) -> Int8Matrix {
        assert_eq!(w.len(), rows * cols, "quantize: {rows} x {cols} weight");
        let group = group.max(1);
        assert!(
            cols.is_multiple_of(group),
            "quantize: group {group} of {cols}"
        );
        let mut q = vec![0i8; rows * cols];
        let mut scale = vec![0f32; rows * cols / group];
        for ((src, dst), s) in w.chunks(group).zip(q.chunks_mut(group)).zip(&mut scale) {
            let max = src.iter().fold(0f32, |m, x| m.max(x.abs()));
            if max == 0.0 || !max.is_finite() {
                continue;
            }
            *s = max / 127.0;
            for (d, x) in dst.iter_mut().zip(src) {
                *d = (x / *s).round().clamp(-127.0, 127.0) as i8;
            }
        }
        Int8Matrix {
            rows,
            cols,
            group,
            q,
            scale,
        }
    }

    /// A float tensor `[rows, cols]`, quantized in groups of `group` columns.
    pub fn from_tensor_groups(t: &Tensor, group: usize) -> OpResult<Int8Matrix> {
        if t.rank() != 2 || group == 0 || !t.shape()[1].is_multiple_of(group) {
            return Err(OpError::Shape(format!(
                "int8 weight must be [out, in] in groups of {group} inputs, got {:?}",
                t.shape()
            )));
        }
        let w = t.cast(DType::F32).contiguous();
        Ok(Int8Matrix::quantize_groups(
            w.as_slice::<f32>()?,
            t.shape()[0],
            t.shape()[1],
            group,
        ))
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes held (the int8 values and the scales).
    pub fn bytes(&self) -> usize {
        self.q.len() + 4 * self.scale.len()
    }

    /// The f32 weight it stands for, row-major, into `out`.
    pub fn widen_into(&self, out: &mut [f32]) {
        for ((dst, src), s) in out
            .chunks_mut(self.group)
            .zip(self.q.chunks(self.group))
            .zip(&self.scale)
        {
            for (d, &q) in dst.iter_mut().zip(src) {
                *d = s * q as f32;
            }
        }
    }

    /// `out[i * rows + r] = x[i] · w[r] (+ bias[r])` for the `x.len() / cols`
    /// rows of `x`, straight from the int8 bytes (any number of rows; meant
    /// for a few: each row of `w` is read once per eight rows of `x`).
    pub fn product(&self, x: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
        let (k, n) = (self.cols, self.rows);
        let m = x.len().checked_div(k).unwrap_or(0);
        assert!(out.len() >= m * n && bias.is_none_or(|b| b.len() == n));
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && self.group.is_multiple_of(16)
            {
                let w = (&self.q[..], &self.scale[..], self.group);
                // eight rows a pass, one sum each; four or fewer take two
                // sums each (one sum alone waits on its own additions)
                for (g, rows) in x[..m * k].chunks(8 * k).enumerate() {
                    // SAFETY: the features were just detected; the group
                    // (and so k) is a multiple of 16.
                    unsafe {
                        match rows.len() / k {
                            ..=4 => avx2::group::<4, true>(rows, w, k, n, g * 8, out),
                            _ => avx2::group::<8, false>(rows, w, k, n, g * 8, out),
                        }
                    }
                }
                self.add_bias(bias, m, out);
                return;
            }
        }
        for (g, rows) in x[..m * k].chunks(4 * k).enumerate() {
            self.group(rows, g * 4, out);
        }
        self.add_bias(bias, m, out);
    }

    fn add_bias(&self, bias: Option<&[f32]>, m: usize, out: &mut [f32]) {
        let n = self.rows;
        if let Some(b) = bias {
            for row in out[..m * n].chunks_mut(n) {
                for (y, b) in row.iter_mut().zip(b) {
                    *y += b;
                }
            }
        }
    }

    /// Up to four rows of `x` against every row of `w`, in plain Rust.
    fn group(&self, rows: &[f32], r0: usize, out: &mut [f32]) {
        let (k, n, g) = (self.cols, self.rows, self.group);
        let per_row = k / g;
        for (t, q) in self.q.chunks(k).enumerate() {
            let scales = &self.scale[t * per_row..(t + 1) * per_row];
            for (r, row) in rows.chunks(k).enumerate() {
                let dot: f32 = row
                    .chunks(g)
                    .zip(q.chunks(g))
                    .zip(scales)
                    .map(|((x, q), s)| s * x.iter().zip(q).map(|(x, &q)| x * q as f32).sum::<f32>())
                    .sum();
                out[(r0 + r) * n + t] = dot;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let p = _mm_add_ps(q, _mm_movehl_ps(q, q));
        let s = _mm_add_ss(p, _mm_shuffle_ps(p, p, 1));
        _mm_cvtss_f32(s)
    }

    /// Up to `M` rows of `k` against every row of the int8 weight
    /// `q [n, k]` with a scale per `g` (a multiple of 16) of a row, sixteen
    /// weights widened per load; each row summed in two halves when `SPLIT`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn group<const M: usize, const SPLIT: bool>(
        rows: &[f32],
        (q, scale, g): (&[i8], &[f32], usize),
        k: usize,
        n: usize,
        r0: usize,
        out: &mut [f32],
    ) {
        let m = rows.len() / k;
        assert!(m <= M && g.is_multiple_of(16) && k.is_multiple_of(g));
        assert!(q.len() >= n * k && scale.len() >= n * (k / g));
        assert!(out.len() >= (r0 + m) * n);
        let (rp, qp) = (rows.as_ptr(), q.as_ptr());
        for t in 0..n {
            let mut lo = [_mm256_setzero_ps(); M];
            let mut hi = [_mm256_setzero_ps(); M];
            for (gi, c0) in (0..k).step_by(g).enumerate() {
                // the weights scaled as they are widened, shared by every row
                let s = _mm256_set1_ps(scale[t * (k / g) + gi]);
                for c in (c0..c0 + g).step_by(16) {
                    // SAFETY: t * k + c + 16 <= n * k <= q.len().
                    let b = unsafe { _mm_loadu_si128(qp.add(t * k + c) as *const __m128i) };
                    let w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), s);
                    let w1 = _mm256_mul_ps(
                        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8))),
                        s,
                    );
                    for r in 0..m {
                        // SAFETY: r * k + c + 16 <= m * k = rows.len().
                        let (x0, x1) = unsafe {
                            let p = rp.add(r * k + c);
                            (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
                        };
                        lo[r] = _mm256_fmadd_ps(x0, w0, lo[r]);
                        if SPLIT {
                            hi[r] = _mm256_fmadd_ps(x1, w1, hi[r]);
                        } else {
                            lo[r] = _mm256_fmadd_ps(x1, w1, lo[r]);
                        }
                    }
                }
            }
            for r in 0..m {
                let sum = if SPLIT {
                    _mm256_add_ps(lo[r], hi[r])
                } else {
                    lo[r]
                };
                out[(r0 + r) * n + t] = hsum(sum);
            }
        }
    }
}

/// `y = x · wᵀ + bias` with `w` held as [`Int8Matrix`] (the op's own, not an
/// input): inputs `x [..., in]` f32 and optionally `bias [out]` f32; output
/// `[..., out]` f32. Every axis of `x` but the last is frame-local.
///
/// ```
/// use std::sync::Arc;
/// use pulsed::ops::{eval_op, matmul::{Int8Linear, Int8Matrix}, Tensor};
/// let w = Int8Matrix::quantize(&[1.0, 1.0, 0.0, 1.0], 2, 2);
/// let x = Tensor::from_vec(vec![1, 2], vec![1f32, 2.]).unwrap();
/// let b = Tensor::from_slice(&[0.5f32, 0.]);
/// let y = eval_op(&Int8Linear { w: Arc::new(w) }, &[&x, &b]).unwrap();
/// assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![3.5, 2.]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Int8Linear {
    pub w: Arc<Int8Matrix>,
}

impl Int8Linear {
    fn check_x(&self, rank: usize, fan_in: Option<usize>) -> OpResult<()> {
        if !(1..=MAX_RANK).contains(&rank) {
            return Err(OpError::Rank {
                input: 0,
                expected: format!("1..={MAX_RANK}"),
                got: rank,
            });
        }
        if fan_in != Some(self.w.cols) {
            return Err(OpError::Shape(format!(
                "int8 weight [{}, {}] ([out, in]) does not take {fan_in:?} input features",
                self.w.rows, self.w.cols
            )));
        }
        Ok(())
    }
}

impl Op for Int8Linear {
    op_common!("Int8Linear");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count_range(inputs, 1, 2)?;
        let x = inputs[0];
        for (i, f) in inputs.iter().enumerate() {
            if f.dtype != DType::F32 {
                return Err(OpError::DType {
                    input: i,
                    expected: "f32".into(),
                    got: f.dtype,
                });
            }
        }
        let fan_in = x.shape.last().and_then(Dim::as_const);
        self.check_x(x.rank(), fan_in.map(|d| d as usize))?;
        if let Some(b) = inputs.get(1) {
            if b.rank() != 1 || b.shape[0] != Dim::from(self.w.rows) {
                return Err(OpError::Shape(format!(
                    "bias {b} does not match {} outputs",
                    self.w.rows
                )));
            }
        }
        let mut shape = x.shape.clone();
        shape[x.rank() - 1] = self.w.rows.into();
        Ok(vec![TypedFact::dt_shape(DType::F32, &shape)])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        input_count_range(inputs, 1, 2)?;
        let x = inputs[0];
        self.check_x(x.rank(), x.shape().last().copied())?;
        if let Some(b) = inputs.get(1) {
            if b.shape() != [self.w.rows] {
                return Err(OpError::Shape(format!(
                    "bias {:?} does not match {} outputs",
                    b.shape(),
                    self.w.rows
                )));
            }
        }
        let (k, n) = (self.w.cols, self.w.rows);
        let rows: usize = x.shape()[..x.rank() - 1].iter().product();
        let mut shape = [0usize; MAX_RANK];
        shape[..x.rank()].copy_from_slice(x.shape());
        shape[x.rank() - 1] = n;
        outputs_len(outputs, 1);
        outputs[0].ensure(DType::F32, &shape[..x.rank()]);
        if outputs[0].is_empty() {
            return Ok(());
        }
        let x = contig(x);
        let b = inputs.get(1).map(|b| contig(b));
        let bias = match &b {
            Some(b) => Some(f32s(b)?),
            None => None,
        };
        let xs = f32s(&x)?;
        let out = outputs[0].as_slice_mut::<f32>()?;
        if rows <= DIRECT_ROWS {
            self.w.product(xs, bias, out);
            return Ok(());
        }
        let (w, tmp) = scratch.two(n * k, rows_work_len(rows, n, k));
        self.w.widen_into(w);
        gemm_rows((rows, n, k), out, n, xs, (k, 1), w, (1, k), bias, tmp)
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        super::rows_axis(inputs, axes)
    }

    fn info(&self) -> String {
        format!("int8 [{}, {}]", self.w.rows, self.w.cols)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::eval_op;

    fn values(n: usize, seed: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 + seed) * 0.61).sin()).collect()
    }

    /// `x · wᵀ` in f64 over the widened weight.
    fn reference(x: &[f32], w: &Int8Matrix) -> Vec<f64> {
        let (k, n) = (w.cols(), w.rows());
        let mut wide = vec![0f32; n * k];
        w.widen_into(&mut wide);
        x.chunks(k)
            .flat_map(|row| {
                wide.chunks(k)
                    .map(|wr| row.iter().zip(wr).map(|(a, b)| *a as f64 * *b as f64).sum())
                    .collect::<Vec<f64>>()
            })
            .collect()
    }

    #[test]
    fn quantized_weights_lie_within_half_a_step_of_the_originals() {
        let (n, k) = (7, 40);
        let mut w = values(n * k, 1.0);
        w[3 * k..4 * k].fill(0.0); // an all-zero row keeps scale 0
        let q = Int8Matrix::quantize(&w, n, k);
        let mut back = vec![0f32; n * k];
        q.widen_into(&mut back);
        for r in 0..n {
            let step = q.scale[r];
            for c in 0..k {
                let (a, b) = (w[r * k + c], back[r * k + c]);
                assert!(
                    (a - b).abs() <= step / 2.0 + 1e-7,
                    "row {r} col {c}: {a} vs {b}"
                );
            }
        }
        assert_eq!(q.scale[3], 0.0);
        assert_eq!(q.bytes(), n * k + 4 * n);
    }

    #[test]
    fn a_scale_per_group_keeps_small_weights_beside_a_large_one() {
        let (n, k) = (2, 32);
        let mut w = values(n * k, 1.0);
        w[16] = 50.0; // one large input of row 0, in its second group
        let (row, grouped) = (
            Int8Matrix::quantize(&w, n, k),
            Int8Matrix::quantize_groups(&w, n, k, 16),
        );
        let err = |q: &Int8Matrix| {
            let mut back = vec![0f32; n * k];
            q.widen_into(&mut back);
            w[..16]
                .iter()
                .zip(&back[..16])
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max)
        };
        assert!(err(&grouped) <= 1.0 / 254.0 + 1e-6, "{}", err(&grouped));
        assert!(err(&row) > 10.0 * err(&grouped));
        assert_eq!(grouped.bytes(), n * k + 4 * n * 2);
    }

    #[test]
    fn products_from_the_int8_bytes_equal_the_widened_weights_product() {
        // groups of 16 and 48 take the AVX2 kernel where there is one,
        // rows of 20 and groups of 8 plain Rust
        for (k, g) in [(48, 48), (48, 16), (20, 20), (32, 8)] {
            let n = 11;
            let w = Int8Matrix::quantize_groups(&values(n * k, 2.0), n, k, g);
            for m in 1..=9 {
                let x = values(m * k, 3.0 + m as f32);
                let mut out = vec![0f32; m * n];
                w.product(&x, None, &mut out);
                for (i, (a, b)) in out.iter().zip(reference(&x, &w)).enumerate() {
                    assert!(
                        (*a as f64 - b).abs() < 1e-4,
                        "k {k} m {m} [{i}]: {a} vs {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_op_gives_the_same_rows_whether_it_reads_int8_or_widens() {
        let (n, k) = (24, 64);
        let op = Int8Linear {
            w: Arc::new(Int8Matrix::quantize(&values(n * k, 4.0), n, k)),
        };
        let bias = Tensor::from_slice(&values(n, 5.0));
        // 12 rows widen the weight into scratch; each row alone reads int8
        let rows = 12;
        let xv = values(rows * k, 6.0);
        let x = Tensor::from_vec(vec![3, 4, k], xv.clone()).unwrap();
        let all = eval_op(&op, &[&x, &bias]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(all.len(), rows * n);
        for r in 0..rows {
            let one = Tensor::from_vec(vec![1, k], xv[r * k..(r + 1) * k].to_vec()).unwrap();
            let y = eval_op(&op, &[&one, &bias]).unwrap()[0]
                .to_vec::<f32>()
                .unwrap();
            for (a, b) in y.iter().zip(&all[r * n..(r + 1) * n]) {
                assert!((a - b).abs() < 1e-4, "row {r}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn facts_keep_the_leading_axes_and_refuse_a_wrong_fan_in() {
        let op = Int8Linear {
            w: Arc::new(Int8Matrix::quantize(&values(6, 0.0), 2, 3)),
        };
        let x = TypedFact::dt_shape(DType::F32, &[Dim::s(), 3.into()]);
        let f = op.output_facts(&[&x]).unwrap();
        assert_eq!(f[0].shape, vec![Dim::s(), 2.into()]);
        let wrong = TypedFact::dt_shape(DType::F32, &[Dim::s(), 4.into()]);
        assert!(op.output_facts(&[&wrong]).is_err());
        let x16 = TypedFact::dt_shape(DType::F16, &[Dim::s(), 3.into()]);
        assert!(op.output_facts(&[&x16]).is_err());
        let t = Tensor::from_vec(vec![1, 4], vec![0f32; 4]).unwrap();
        assert!(eval_op(&op, &[&t]).is_err());
    }
}
