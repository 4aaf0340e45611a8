//! The AVX2 + FMA product: `a` packed in blocks of 16 rows, `b` read in
//! place through broadcasts (weights are never copied), `dst` column-major.

use super::{KC, MC, MR, NR};
use std::arch::x86_64::*;

/// # Safety
/// AVX2 and FMA available; `dst` (row stride 1, column stride `ldd`),
/// `a` and `b` valid over `m×n`, `m×k`, `k×n` with their strides;
/// `pack` valid for `pack_len(m, k)` writes and aliasing none of them.
#[target_feature(enable = "avx2,fma")]
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
                    let ap = pack.add(blk * MR * kc);
                    let d = dst.add(n0 * ldd + m0 + blk * MR);
                    let rows = MR.min(mc - blk * MR);
                    let t = Tile {
                        kc,
                        ap,
                        bp,
                        brs,
                        bcs,
                        d,
                        ldd,
                        rows,
                        load,
                    };
                    match NR.min(n - n0) {
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

/// Copies an `mc×kc` block of `a` as `[block][k][16 rows]`, zero rows
/// past `mc`; a column-major `a` a run of rows at a time.
#[inline(always)]
unsafe fn pack_a(a: *const f32, (ars, acs): (usize, usize), mc: usize, kc: usize, pack: *mut f32) {
    for blk in 0..mc.div_ceil(MR) {
        let p = pack.add(blk * MR * kc);
        let rows = MR.min(mc - blk * MR);
        if ars == 1 {
            let src = a.add(blk * MR);
            for kk in 0..kc {
                let (s, d) = (src.add(kk * acs), p.add(kk * MR));
                std::ptr::copy_nonoverlapping(s, d, rows);
                std::ptr::write_bytes(d.add(rows), 0, MR - rows);
            }
            continue;
        }
        for r in 0..MR {
            if r >= rows {
                for kk in 0..kc {
                    *p.add(kk * MR + r) = 0.0;
                }
                continue;
            }
            let src = a.add((blk * MR + r) * ars);
            for kk in 0..kc {
                *p.add(kk * MR + r) = *src.add(kk * acs);
            }
        }
    }
}

/// One 16 x `N` tile of `dst` over a depth chunk.
struct Tile {
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    brs: usize,
    bcs: usize,
    d: *mut f32,
    ldd: usize,
    rows: usize,
    load: bool,
}

impl Tile {
    #[inline(always)]
    unsafe fn run<const N: usize>(&self) {
        let mut acc = [[_mm256_setzero_ps(); 2]; N];
        let (mut ap, mut bp) = (self.ap, self.bp);
        for _ in 0..self.kc {
            let (a0, a1) = (_mm256_loadu_ps(ap), _mm256_loadu_ps(ap.add(8)));
            for (j, acc) in acc.iter_mut().enumerate() {
                let bj = _mm256_broadcast_ss(&*bp.add(j * self.bcs));
                acc[0] = _mm256_fmadd_ps(a0, bj, acc[0]);
                acc[1] = _mm256_fmadd_ps(a1, bj, acc[1]);
            }
            ap = ap.add(MR);
            bp = bp.add(self.brs);
        }
        for (j, acc) in acc.iter().enumerate() {
            let col = self.d.add(j * self.ldd);
            if self.rows == MR {
                let (mut c0, mut c1) = (acc[0], acc[1]);
                if self.load {
                    c0 = _mm256_add_ps(_mm256_loadu_ps(col), c0);
                    c1 = _mm256_add_ps(_mm256_loadu_ps(col.add(8)), c1);
                }
                _mm256_storeu_ps(col, c0);
                _mm256_storeu_ps(col.add(8), c1);
            } else {
                let mut t = [0f32; MR];
                _mm256_storeu_ps(t.as_mut_ptr(), acc[0]);
                _mm256_storeu_ps(t.as_mut_ptr().add(8), acc[1]);
                for (r, &v) in t.iter().enumerate().take(self.rows) {
                    let o = col.add(r);
                    *o = if self.load { *o + v } else { v };
                }
            }
        }
    }
}
