//! The AVX-512 product: the AVX2 kernel's scheme (`a` packed in blocks of
//! rows, `b` read in place through broadcasts, `dst` column-major) on 32
//! registers of 16 floats, with masked loads and stores at the row edge.
//!
//! The tile is 32 rows (two vectors) by 12 columns: 24 accumulators, two
//! `a` vectors and a broadcast take 27 of the 32 registers, and each step
//! of depth does 24 FMAs for 2 loads and 12 broadcasts. Measured on Zen 5
//! (one thread, Whisper tiny's products): 32 x 10, 12 or 14 all reach
//! about 255 GFLOP/s, twice the AVX2 kernel; 16 x 24 or 28 stall on one
//! broadcast per FMA (140), and 48 x 8 reaches 205-225 and wastes a third
//! of its rows on 64-row blocks of attention. 12 divides Whisper's 1500
//! frames, so its products have no column tail.

use super::{KC, MC};
use std::arch::x86_64::*;

/// 16-float vectors per block of rows.
const V: usize = 2;
/// Rows of `a` per packed block.
pub(super) const MR: usize = 16 * V;
/// Columns of `b` per tile.
const NR: usize = 12;

/// # Safety
/// AVX-512F available; `dst` (row stride 1, column stride `ldd`),
/// `a` and `b` valid over `m×n`, `m×k`, `k×n` with their strides;
/// `pack` valid for `pack_len(m, k)` writes and aliasing none of them.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    ldd: usize,
    a: *const f32,
    (ars, acs): (usize, usize),
    b: *const f32,
    (brs, bcs): (usize, usize),
    accumulate: bool,
    pack: *mut f32,
) {
    for m0 in (0..m).step_by(MC) {
        let mc = MC.min(m - m0);
        let blocks = mc.div_ceil(MR);
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            pack_a(a.add(m0 * ars + k0 * acs), (ars, acs), mc, kc, pack);
            // later depth chunks add to what the first one stored
            let load = accumulate || k0 > 0;
            for n0 in (0..n).step_by(NR) {
                let bp = b.add(k0 * brs + n0 * bcs);
                for blk in 0..blocks {
                    let rows = MR.min(mc - blk * MR);
                    let t = Tile {
                        kc,
                        ap: pack.add(blk * MR * kc),
                        bp,
                        brs,
                        bcs,
                        d: dst.add(n0 * ldd + m0 + blk * MR),
                        ldd,
                        masks: masks(rows),
                        load,
                    };
                    match NR.min(n - n0) {
                        12 => t.run::<12>(),
                        11 => t.run::<11>(),
                        10 => t.run::<10>(),
                        9 => t.run::<9>(),
                        8 => t.run::<8>(),
                        7 => t.run::<7>(),
                        6 => t.run::<6>(),
                        5 => t.run::<5>(),
                        4 => t.run::<4>(),
                        3 => t.run::<3>(),
                        2 => t.run::<2>(),
                        _ => t.run::<1>(),
                    }
                }
            }
        }
    }
}

/// The store mask of each 16-row vector of a block with `rows` rows.
#[inline(always)]
fn masks(rows: usize) -> [__mmask16; V] {
    std::array::from_fn(|v| {
        let r = rows.saturating_sub(16 * v).min(16);
        ((1u32 << r) - 1) as __mmask16
    })
}

/// Copies an `mc×kc` block of `a` as `[block][k][MR rows]`, zero rows
/// past `mc`: runs of rows copied as vectors when `a` is column-major,
/// gathered when row-major (a weight, or attention's scores: a 64 x 1500
/// by 1500 x 64 product takes 67 us instead of 83 with one float at a
/// time), else one at a time.
#[inline(always)]
unsafe fn pack_a(a: *const f32, (ars, acs): (usize, usize), mc: usize, kc: usize, pack: *mut f32) {
    for blk in 0..mc.div_ceil(MR) {
        let p = pack.add(blk * MR * kc);
        let src = a.add(blk * MR * ars);
        let masks = masks(MR.min(mc - blk * MR));
        if ars == 1 {
            // columns contiguous: each k is a run of rows
            for kk in 0..kc {
                for (v, &mask) in masks.iter().enumerate() {
                    let x = _mm512_maskz_loadu_ps(mask, src.add(kk * acs + 16 * v));
                    _mm512_storeu_ps(p.add(kk * MR + 16 * v), x);
                }
            }
        } else if acs == 1 && ars * 15 <= i32::MAX as usize {
            // rows contiguous: gather one k across 16 rows
            let idx = _mm512_mullo_epi32(
                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                _mm512_set1_epi32(ars as i32),
            );
            for kk in 0..kc {
                for (v, &mask) in masks.iter().enumerate() {
                    let base = src.add(16 * v * ars + kk);
                    let x = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), mask, idx, base);
                    _mm512_storeu_ps(p.add(kk * MR + 16 * v), x);
                }
            }
        } else {
            let rows = MR.min(mc - blk * MR);
            for r in 0..MR {
                for kk in 0..kc {
                    *p.add(kk * MR + r) = if r < rows {
                        *src.add(r * ars + kk * acs)
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

/// One `MR x N` tile of `dst` over a depth chunk.
struct Tile {
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    brs: usize,
    bcs: usize,
    d: *mut f32,
    ldd: usize,
    masks: [__mmask16; V],
    load: bool,
}

impl Tile {
    #[inline(always)]
    unsafe fn run<const N: usize>(&self) {
        let mut acc = [[_mm512_setzero_ps(); V]; N];
        let (mut ap, mut bp) = (self.ap, self.bp);
        for _ in 0..self.kc {
            let av: [__m512; V] = std::array::from_fn(|v| _mm512_loadu_ps(ap.add(16 * v)));
            for (j, acc) in acc.iter_mut().enumerate() {
                let bj = _mm512_set1_ps(*bp.add(j * self.bcs));
                for (c, &a) in acc.iter_mut().zip(&av) {
                    *c = _mm512_fmadd_ps(a, bj, *c);
                }
            }
            ap = ap.add(MR);
            bp = bp.add(self.brs);
        }
        for (j, acc) in acc.iter().enumerate() {
            let col = self.d.add(j * self.ldd);
            for (v, (&c, &mask)) in acc.iter().zip(&self.masks).enumerate() {
                let p = col.add(16 * v);
                let c = if self.load {
                    _mm512_add_ps(_mm512_maskz_loadu_ps(mask, p), c)
                } else {
                    c
                };
                _mm512_mask_storeu_ps(p, mask, c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{assert_close, tensor};
    use super::super::{gemm_f32_on, gemm_rows_on, pack_len, rows_work_len, Kernel, Strides};
    use crate::ops::{DType, Tensor};

    fn data(len: usize, seed: u64) -> Vec<f32> {
        tensor(DType::F32, &[len], seed).to_f32_vec()
    }

    /// The extent a strided `rows x cols` matrix needs.
    fn extent(rows: usize, cols: usize, (rs, cs): Strides) -> usize {
        (rows - 1) * rs + (cols - 1) * cs + 1
    }

    /// `a · b` in f64 (plus `base`) and the sum of absolute terms.
    fn naive(
        (m, n, k): (usize, usize, usize),
        (a, as_): (&[f32], Strides),
        (b, bs): (&[f32], Strides),
        base: impl Fn(usize, usize) -> f64,
    ) -> (Vec<f64>, Vec<f64>) {
        let (mut want, mut mag) = (vec![], vec![]);
        for j in 0..n {
            for i in 0..m {
                let terms =
                    (0..k).map(|p| a[i * as_.0 + p * as_.1] as f64 * b[p * bs.0 + j * bs.1] as f64);
                want.push(base(i, j) + terms.clone().sum::<f64>());
                mag.push(base(i, j).abs() + terms.map(f64::abs).sum::<f64>());
            }
        }
        (want, mag)
    }

    fn close(got: Vec<f32>, want: &[f64], mag: &[f64]) {
        assert_close(&Tensor::from_vec(vec![got.len()], got).unwrap(), want, mag);
    }

    /// Tile edges in every direction (rows not a multiple of 32 or 16,
    /// columns not of 12 or 6, depth past a 512 chunk), `a` and `b` in
    /// either order or strided in both axes, accumulation, and a `dst`
    /// with gaps between columns: the AVX-512 kernel gives the AVX2
    /// kernel's numbers bit for bit (the same FMA chain per output, the
    /// same chunk sums), both within f32 rounding of f64.
    #[test]
    fn avx512_equals_avx2_and_naive() {
        if !is_x86_feature_detected!("avx512f") || !is_x86_feature_detected!("fma") {
            return;
        }
        for (m, n, k) in [
            (1, 1, 1),
            (31, 13, 7),
            (33, 25, 513),
            (129, 12, 1),
            (17, 1, 64),
            (64, 50, 64),
            (300, 37, 1100),
        ] {
            let a_layouts = [(k, 1), (1, m), (2 * k + 1, 2), (3, 3 * m + 1)];
            let b_layouts = [(1, k), (n, 1), (2, 2 * k + 3)];
            for (case, (as_, bs)) in a_layouts
                .iter()
                .flat_map(|&a| b_layouts.iter().map(move |&b| (a, b)))
                .enumerate()
            {
                let accumulate = case % 2 == 1;
                let a = data(extent(m, k, as_), 1);
                let b = data(extent(k, n, bs), 2);
                let ld = m + 3;
                let before = data(ld * n, 3);
                let mut got = vec![];
                for kernel in [Kernel::Avx512, Kernel::Avx2] {
                    let mut dst = before.clone();
                    let mut pack = vec![f32::NAN; pack_len(m, k)];
                    let operands = (&mut dst[..], (1, ld), &a[..], as_, &b[..], bs);
                    gemm_f32_on(kernel, (m, n, k), operands, accumulate, &mut pack).unwrap();
                    for j in 0..n {
                        let gap = j * ld + m..(j + 1) * ld;
                        assert_eq!(&dst[gap.clone()], &before[gap], "{kernel:?} wrote a gap");
                    }
                    got.push(
                        (0..n)
                            .flat_map(|j| dst[j * ld..j * ld + m].to_vec())
                            .collect::<Vec<_>>(),
                    );
                }
                let what = format!("{m}x{n}x{k} a {as_:?} b {bs:?} accumulate {accumulate}");
                assert!(got[0] == got[1], "AVX-512 and AVX2 differ: {what}");
                let base = |i, j| {
                    if accumulate {
                        before[j * ld + i] as f64
                    } else {
                        0.0
                    }
                };
                let (want, mag) = naive((m, n, k), (&a, as_), (&b, bs), base);
                close(got.remove(0), &want, &mag);
            }
        }
    }

    /// `gemm_rows` on both kernels, below and above `SWAP_ROWS` (the
    /// transposed and the in-place product), with and without a bias, and
    /// an output row stride wider than `n`.
    #[test]
    fn rows_on_both_kernels() {
        if !is_x86_feature_detected!("avx512f") || !is_x86_feature_detected!("fma") {
            return;
        }
        for (m, n, k) in [(5, 7, 3), (64, 1500, 64), (255, 13, 100), (300, 37, 515)] {
            for (tb, with_bias) in [(false, false), (true, true), (true, false)] {
                let (a, as_) = (data(m * k, 1), (k, 1));
                let bs = if tb { (1, k) } else { (n, 1) };
                let b = data(k * n, 2);
                let bias = data(n, 3);
                let bias = with_bias.then_some(&bias[..]);
                let ld = n + 2;
                let mut got = vec![];
                for kernel in [Kernel::Avx512, Kernel::Avx2] {
                    let mut out = vec![7f32; ld * m];
                    let mut work = vec![f32::NAN; rows_work_len(m, n, k)];
                    let (ins_a, ins_b) = ((&a[..], as_), (&b[..], bs));
                    gemm_rows_on(
                        kernel,
                        (m, n, k),
                        (&mut out, ld),
                        ins_a,
                        ins_b,
                        bias,
                        &mut work,
                    )
                    .unwrap();
                    assert!(
                        out.chunks(ld).all(|r| r[n..] == [7.0; 2]),
                        "{kernel:?} wrote a gap"
                    );
                    got.push(out);
                }
                assert!(got[0] == got[1], "AVX-512 and AVX2 differ: {m}x{n}x{k}");
                let base = |_, j: usize| bias.map_or(0.0, |b| b[j] as f64);
                // naive gives column-major order; read `got` the same way
                let (want, mag) = naive((m, n, k), (&a, as_), (&b, bs), base);
                let g = (0..n).flat_map(|j| (0..m).map(move |i| (i, j)));
                let g: Vec<f32> = g.map(|(i, j)| got[0][i * ld + j]).collect();
                close(g, &want, &mag);
            }
        }
    }
}
