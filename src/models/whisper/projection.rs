//! The output projection, `logits = hidden · Eᵀ` over the token embedding
//! `E [vocab, d]`, for the few rows decoding asks for.
//!
//! One decoding step reads all of `E` (51,864 x 384 for tiny.en: 80 MB in
//! f32) for a handful of rows, so its speed is memory bandwidth. The
//! checkpoints store `E` in f16, and widening f16 to f32 is exact, so `E`
//! stays in f16 and is widened in registers: half the bytes per step,
//! the same products. Each logit is a dot product summed in 8 lanes.
//! With int8 weights (`--precision int8`) every logit is first read from
//! an int8 copy of `E` (a scale per 32 values: about a quarter of f32's
//! bytes), then the [`RESCORED`] largest of each row are computed again from
//! `E` as stored: the tokens decoding can choose get their exact logits.

use half::f16;

use crate::ops::matmul::Int8Matrix;
use crate::ops::{DType, Tensor};
use crate::Result;

/// Values of an embedding row per int8 scale: a scale per row lets the
/// few large values of a row coarsen the rest.
const INT8_GROUP: usize = 32;

/// Logits of a row recomputed exactly after the int8 pass: more than a
/// beam's choices. int8 logits alone swapped close tokens (test_voice, live,
/// the 640 ms student: 11.41 % with a scale per row, 11.02 % per 32
/// values, against f32's 10.80 %).
const RESCORED: usize = 16;

/// `E` as the checkpoint stores it (bf16 is widened once: it has no
/// register-level conversion on x86): the model's own tensor, shared, not a
/// copy (40 MB for tiny.en).
enum Table {
    F16(Tensor),
    F32(Tensor),
}

/// The table's values.
enum Values<'a> {
    F16(&'a [f16]),
    F32(&'a [f32]),
}

impl Table {
    fn values(&self) -> Values<'_> {
        // both made contiguous of their type in `Projection::new`
        match self {
            Table::F16(e) => Values::F16(e.as_slice().expect("a contiguous f16 table")),
            Table::F32(e) => Values::F32(e.as_slice().expect("a contiguous f32 table")),
        }
    }
}

/// The token embedding, ready to project decoder outputs to logits (one
/// per model, shared by its networks).
pub struct Projection {
    table: Table,
    vocab: usize,
    d: usize,
    /// `E` in int8, read first when there is one.
    int8: Option<Int8Matrix>,
}

impl std::fmt::Debug for Projection {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let kind = match (&self.int8, &self.table) {
            (Some(_), _) => "int8",
            (None, Table::F16(_)) => "f16",
            (None, Table::F32(_)) => "f32",
        };
        write!(f, "Projection[{}, {}] {kind}", self.vocab, self.d)
    }
}

impl Projection {
    /// From the embedding tensor `[vocab, d]` (f16, bf16 or f32).
    pub fn new(e: &Tensor) -> Result<Projection> {
        let (vocab, d) = (e.shape()[0], e.shape()[1]);
        let table = match e.dtype() {
            DType::F16 => Table::F16(e.contiguous()),
            _ => Table::F32(e.cast(DType::F32).contiguous()),
        };
        Ok(Projection {
            table,
            vocab,
            d,
            int8: None,
        })
    }

    /// Whether the table is `e`'s storage (the model's tensor, not a copy).
    #[cfg(test)]
    pub(super) fn shares(&self, e: &Tensor) -> bool {
        match &self.table {
            Table::F16(t) | Table::F32(t) => t.shares_storage(e),
        }
    }

    /// From the embedding tensor, read first in int8 (a scale per
    /// [`INT8_GROUP`] values of a token's row), the largest logits of each
    /// row then recomputed from `e`.
    pub fn int8(e: &Tensor) -> Result<Projection> {
        let d = e.shape()[1];
        let group = if d.is_multiple_of(INT8_GROUP) {
            INT8_GROUP
        } else {
            d
        };
        let mut p = Projection::new(e)?;
        p.int8 = Some(Int8Matrix::from_tensor_groups(e, group)?);
        Ok(p)
    }

    /// `out[r * vocab + t] = rows[r] · E[t]` for the `rows.len() / d` rows.
    pub fn logits(&self, rows: &[f32], out: &mut Vec<f32>) {
        let d = self.d;
        let m = rows.len() / d;
        out.resize(m * self.vocab, 0.0);
        if let Some(q) = &self.int8 {
            q.product(rows, None, out);
            for (row, logits) in rows.chunks(d).zip(out.chunks_mut(self.vocab)) {
                self.rescore(row, logits);
            }
            return;
        }
        match self.table.values() {
            Values::F16(e) => {
                for (g, chunk) in rows.chunks(4 * d).enumerate() {
                    self.group_f16(chunk, e, g * 4, out);
                }
            }
            Values::F32(e) => {
                for (g, chunk) in rows.chunks(4 * d).enumerate() {
                    self.group_f32(chunk, e, g * 4, out);
                }
            }
        }
    }

    /// The [`RESCORED`] largest of one row's `logits` recomputed from the
    /// table (in the order the f16 and f32 paths sum).
    fn rescore(&self, row: &[f32], logits: &mut [f32]) {
        let mut top = [(f32::NEG_INFINITY, usize::MAX); RESCORED];
        let mut low = 0; // the index of top's smallest
        for (t, &v) in logits.iter().enumerate() {
            if v > top[low].0 {
                top[low] = (v, t);
                low = (0..RESCORED)
                    .min_by(|&a, &b| top[a].0.total_cmp(&top[b].0))
                    .unwrap_or(0);
            }
        }
        let d = self.d;
        let mut wide = [0f32; 2048];
        for &(_, t) in top.iter().filter(|x| x.1 != usize::MAX) {
            let exact = match self.table.values() {
                Values::F16(e) if d <= wide.len() => {
                    for (w, x) in wide.iter_mut().zip(&e[t * d..(t + 1) * d]) {
                        *w = x.to_f32();
                    }
                    dot8(row, &wide[..d])
                }
                Values::F16(e) => {
                    let w: Vec<f32> = e[t * d..(t + 1) * d].iter().map(|x| x.to_f32()).collect();
                    dot8(row, &w)
                }
                Values::F32(e) => dot8(row, &e[t * d..(t + 1) * d]),
            };
            logits[t] = exact;
        }
    }

    fn group_f16(&self, rows: &[f32], e: &[f16], r0: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
                && self.d.is_multiple_of(8)
            {
                // SAFETY: the features were just detected; d is a multiple of 8.
                unsafe { avx2::group_f16(rows, e, self.d, self.vocab, r0, out) };
                return;
            }
        }
        self.group(rows, e, r0, out, |x: &f16| x.to_f32());
    }

    fn group_f32(&self, rows: &[f32], e: &[f32], r0: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
                && self.d.is_multiple_of(8)
            {
                // SAFETY: the features were just detected; d is a multiple of 8.
                unsafe { avx2::group_f32(rows, e, self.d, self.vocab, r0, out) };
                return;
            }
        }
        self.group(rows, e, r0, out, |x: &f32| *x);
    }

    /// Up to four rows against every embedding row, any element type.
    fn group<T>(
        &self,
        rows: &[f32],
        e: &[T],
        r0: usize,
        out: &mut [f32],
        widen: impl Fn(&T) -> f32,
    ) {
        let d = self.d;
        let mut buf = vec![0f32; d];
        for t in 0..self.vocab {
            for (b, x) in buf.iter_mut().zip(&e[t * d..(t + 1) * d]) {
                *b = widen(x);
            }
            for (r, row) in rows.chunks(d).enumerate() {
                out[(r0 + r) * self.vocab + t] = dot8(row, &buf);
            }
        }
    }
}

/// A dot product in 8 lanes (the order the AVX2 path sums in).
fn dot8(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let mut s = hsum(acc);
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// Lanes summed pairwise, as the AVX2 path does.
fn hsum(a: [f32; 8]) -> f32 {
    let q = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    let p = [q[0] + q[2], q[1] + q[3]];
    p[0] + p[1]
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use half::f16;

    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum(v: __m256) -> f32 {
        let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let p = _mm_add_ps(q, _mm_movehl_ps(q, q));
        let s = _mm_add_ss(p, _mm_shuffle_ps(p, p, 1));
        _mm_cvtss_f32(s)
    }

    /// Up to four rows of `d` (a multiple of 8) against every table row,
    /// `$load(at)` giving eight widened values from element offset `at`.
    macro_rules! group {
        ($rows:expr, $d:expr, $vocab:expr, $r0:expr, $out:expr, $load:expr) => {{
            let (rows, d, vocab, r0, out) = ($rows, $d, $vocab, $r0, $out);
            let m = rows.len() / d;
            assert!(m <= 4 && d.is_multiple_of(8) && out.len() >= (r0 + m) * vocab);
            let rp = rows.as_ptr();
            for t in 0..vocab {
                let mut acc = [_mm256_setzero_ps(); 4];
                for k in (0..d).step_by(8) {
                    let w = $load(t * d + k);
                    for (r, a) in acc.iter_mut().enumerate().take(m) {
                        // SAFETY: r * d + k + 8 <= m * d = rows.len().
                        let x = unsafe { _mm256_loadu_ps(rp.add(r * d + k)) };
                        *a = _mm256_fmadd_ps(x, w, *a);
                    }
                }
                for (r, a) in acc.iter().enumerate().take(m) {
                    out[(r0 + r) * vocab + t] = hsum(*a);
                }
            }
        }};
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn group_f16(
        rows: &[f32],
        e: &[f16],
        d: usize,
        vocab: usize,
        r0: usize,
        out: &mut [f32],
    ) {
        assert!(e.len() >= vocab * d);
        let ep = e.as_ptr() as *const u16;
        // SAFETY: at + 8 <= vocab * d <= e.len() for every `at` the loop asks for.
        group!(rows, d, vocab, r0, out, |at: usize| unsafe {
            _mm256_cvtph_ps(_mm_loadu_si128(ep.add(at) as *const __m128i))
        })
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn group_f32(
        rows: &[f32],
        e: &[f32],
        d: usize,
        vocab: usize,
        r0: usize,
        out: &mut [f32],
    ) {
        assert!(e.len() >= vocab * d);
        let ep = e.as_ptr();
        // SAFETY: at + 8 <= vocab * d <= e.len() for every `at` the loop asks for.
        group!(rows, d, vocab, r0, out, |at: usize| unsafe {
            _mm256_loadu_ps(ep.add(at))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(vocab: usize, d: usize) -> Tensor {
        let v: Vec<f16> = (0..vocab * d)
            .map(|i| f16::from_f32(((i * 7919) % 1000) as f32 / 500.0 - 1.0))
            .collect();
        Tensor::from_vec(vec![vocab, d], v).unwrap()
    }

    #[test]
    fn f16_table_equals_the_widened_f32_one() {
        let (vocab, d) = (37, 24);
        let e = table(vocab, d);
        let rows: Vec<f32> = (0..6 * d).map(|i| (i as f32 * 0.37).sin()).collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        Projection::new(&e).unwrap().logits(&rows, &mut a);
        Projection::new(&e.cast(DType::F32))
            .unwrap()
            .logits(&rows, &mut b);
        assert_eq!(a.len(), 6 * vocab);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "{x} vs {y}");
        }
        // against a plain f64 product
        let ef = e.cast(DType::F32).to_vec::<f32>().unwrap();
        for r in 0..6 {
            for t in 0..vocab {
                let want: f64 = (0..d)
                    .map(|k| rows[r * d + k] as f64 * ef[t * d + k] as f64)
                    .sum();
                assert!(
                    (a[r * vocab + t] as f64 - want).abs() < 1e-4,
                    "row {r} token {t}"
                );
            }
        }
    }

    #[test]
    fn int8_logits_are_exact_where_a_decoder_chooses() {
        let (vocab, d) = (300, 64);
        let e = table(vocab, d);
        let rows: Vec<f32> = (0..5 * d).map(|i| (i as f32 * 0.13).cos()).collect();
        let (mut exact, mut int8) = (Vec::new(), Vec::new());
        Projection::new(&e).unwrap().logits(&rows, &mut exact);
        Projection::int8(&e).unwrap().logits(&rows, &mut int8);
        for r in 0..5 {
            let (a, b) = (
                &exact[r * vocab..(r + 1) * vocab],
                &int8[r * vocab..(r + 1) * vocab],
            );
            let mut order: Vec<usize> = (0..vocab).collect();
            order.sort_by(|&x, &y| a[y].total_cmp(&a[x]));
            // the largest logits are the f16 path's, bit for bit
            for &t in &order[..RESCORED / 2] {
                assert_eq!(a[t], b[t], "row {r} token {t}");
            }
            // the rest are close
            for t in 0..vocab {
                assert!(
                    (a[t] - b[t]).abs() < 0.05 * (1.0 + a[t].abs()),
                    "row {r} token {t}"
                );
            }
        }
    }
}
