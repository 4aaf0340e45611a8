//! Attention over long sequences as matrix products: a block of query rows
//! against every key at once (`gemm_rows`), the softmax on that block, then
//! the block of weights against the values. A 30 s Whisper window (1500 x
//! 1500 scores per head) runs an order of magnitude faster this way than
//! one dot product at a time; short sequences keep the row-by-row path.

use super::{Geometry, Mask};
use crate::ops::broadcast::MAX_RANK;
use crate::ops::matmul::{gemm_f32, gemm_rows, pack_len, rows_work_len};
use crate::ops::vmath::{self, exp_shifted_sum};
use crate::ops::{OpResult, Scratch, StorageElement, Tensor};

/// Query rows per block. From `SWAP_ROWS` (256) rows on, `gemm_rows`
/// writes the scores in place instead of transposing them, and fewer
/// blocks pack `k` and `v` again: on Whisper tiny's 6 x 1500 x 64 (one
/// Zen 5 thread, AVX-512) a window's attention took 95 ms with 64 rows,
/// 85 with 256, 78 with 512, 80-84 with 768 or all 1500.
const QB: usize = 512;

/// The row-by-row path is kept below these sizes (its rounding is what the
/// streaming models' goldens were made with).
const MIN_QUERIES: usize = 32;
const MIN_KEYS: usize = 64;

/// Scratch of one block: scores `[QB, tk]`, result `[QB, dv]`, the
/// products' work area, and each row's `1 / sum`.
pub(super) struct BlockBuffers<'s> {
    scores: &'s mut [f32],
    acc: &'s mut [f32],
    work: &'s mut [f32],
    inv: &'s mut [f32],
}

/// The additive mask term of score `m` (`-inf` where masked out).
#[inline]
pub(super) fn mask_add(mask: Mask<'_>, m: usize) -> f32 {
    match mask {
        Mask::None => 0.0,
        Mask::Bool(mv) if mv[m] => 0.0,
        Mask::Bool(_) => f32::NEG_INFINITY,
        Mask::Float(mv) => mv[m],
    }
}

impl Geometry<'_> {
    /// Offsets (in matrices for q, k, v; in elements for the mask) of each
    /// batch index in order.
    pub(super) fn offsets(&self) -> impl Iterator<Item = (usize, usize, usize, usize)> + '_ {
        let nb = self.batch.len();
        let n_batch: usize = self.batch.iter().product();
        let mut idx = [0usize; MAX_RANK];
        let mut off = (0usize, 0usize, 0usize, 0usize);
        (0..n_batch).map(move |_| {
            let here = off;
            for ax in (0..nb).rev() {
                idx[ax] += 1;
                off.0 += self.sq[ax];
                off.1 += self.sk[ax];
                off.2 += self.sv[ax];
                off.3 += self.sm[ax];
                if idx[ax] < self.batch[ax] {
                    break;
                }
                off.0 -= self.sq[ax] * self.batch[ax];
                off.1 -= self.sk[ax] * self.batch[ax];
                off.2 -= self.sv[ax] * self.batch[ax];
                off.3 -= self.sm[ax] * self.batch[ax];
                idx[ax] = 0;
            }
            here
        })
    }

    /// Whether the sizes call for the blocked path.
    pub(super) fn blocked(&self) -> bool {
        self.tq >= MIN_QUERIES && self.tk >= MIN_KEYS
    }

    pub(super) fn block_buffers<'s>(&self, scratch: &'s mut Scratch) -> BlockBuffers<'s> {
        let m = QB.min(self.tq);
        // the last block may be shorter, and products of fewer rows need more room
        let last = match self.tq % QB {
            0 => m,
            r => r,
        };
        let work = [m, last]
            .iter()
            .map(|&r| rows_work_len(r, self.tk, self.d).max(pack_len(self.dv, self.tk)))
            .max()
            .unwrap_or(0);
        let (scores, acc, work, inv) = scratch.four(m * self.tk, m * self.dv, work, m);
        BlockBuffers {
            scores,
            acc,
            work,
            inv,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_blocked<T: StorageElement>(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        mask: Mask<'_>,
        out: &mut Tensor,
        bufs: BlockBuffers<'_>,
    ) -> OpResult<()> {
        let (tq, tk, d, dv, nb) = (self.tq, self.tk, self.d, self.dv, self.batch.len());
        let o = out.as_slice_mut::<T>()?;
        let BlockBuffers {
            scores,
            acc,
            work,
            inv,
        } = bufs;
        for (b, (bq, bk, bv, bm)) in self.offsets().enumerate() {
            let (kb, vb) = (&k[bk * tk * d..], &v[bv * tk * dv..]);
            for i0 in (0..tq).step_by(QB) {
                let m = QB.min(tq - i0);
                let qb = &q[(bq * tq + i0) * d..];
                // scores = q · kᵀ: kᵀ's element (i, j) is k[j * d + i]
                gemm_rows((m, tk, d), scores, tk, qb, (d, 1), kb, (1, d), None, work)?;
                for r in 0..m {
                    let row = &mut scores[r * tk..(r + 1) * tk];
                    let mrow = bm + (i0 + r) * self.sm[nb];
                    let mut max = f32::NEG_INFINITY;
                    if let (Mask::None, true) = (mask, self.scale > 0.0) {
                        // rounding is monotonic: the largest scaled score is
                        // the largest score scaled, and exp scales as it goes
                        max = vmath::max(row) * self.scale;
                        if max != f32::NEG_INFINITY {
                            inv[r] = 1.0 / exp_shifted_sum(row, self.scale, max);
                            continue;
                        }
                    } else if let Mask::None = mask {
                        for s in row.iter_mut() {
                            *s *= self.scale;
                            max = max.max(*s);
                        }
                    } else {
                        for (j, s) in row.iter_mut().enumerate() {
                            let add = mask_add(mask, mrow + j * self.sm[nb + 1]);
                            *s = if add == f32::NEG_INFINITY {
                                add
                            } else {
                                *s * self.scale + add
                            };
                            max = max.max(*s);
                        }
                    }
                    // no key left to attend to: zeros, not 0/0
                    if max == f32::NEG_INFINITY {
                        row.fill(0.0);
                        inv[r] = 0.0;
                        continue;
                    }
                    inv[r] = 1.0 / exp_shifted_sum(row, 1.0, max);
                }
                // acc = scores · v in place, as accᵀ = vᵀ · scoresᵀ in
                // columns: packing vᵀ copies runs, packing the scores
                // would transpose them (and the result after)
                let (vt, st) = ((1, dv), (1, tk));
                gemm_f32(dv, m, tk, acc, (1, dv), vb, vt, scores, st, false, work)?;
                for r in 0..m {
                    let orow = &mut o[(b * tq + i0 + r) * dv..(b * tq + i0 + r + 1) * dv];
                    for (x, &a) in orow.iter_mut().zip(&acc[r * dv..(r + 1) * dv]) {
                        *x = T::from_f32(a * inv[r]);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::attention::Attention;
    use crate::ops::{eval_op, Tensor};

    fn rand(n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2654435761).max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x as f32 / u32::MAX as f32) * 4.0 - 2.0
            })
            .collect()
    }

    /// The blocked path against the row-by-row path on the same inputs: a
    /// long sequence split into one-query slices takes the row path. 70
    /// queries make one block whose scores are transposed into place, 600
    /// a block computed in place and a short one; a negative scale takes
    /// the softmax that scales the row first.
    #[test]
    fn blocked_equals_rows() {
        let (h, tk, d) = (2, 100, 16);
        let k = Tensor::from_vec(vec![h, tk, d], rand(h * tk * d, 2)).unwrap();
        let v = Tensor::from_vec(vec![h, tk, d], rand(h * tk * d, 3)).unwrap();
        for (tq, rows) in [
            (70, &[0, 1, 33, 64, 69][..]),
            (600, &[0, 99, 300, 511, 512, 599]),
        ] {
            let q = Tensor::from_vec(vec![h, tq, d], rand(h * tq * d, 1)).unwrap();
            // a causal-ish mask that leaves the first row with no key at all
            let mask: Vec<bool> = (0..tq * tk).map(|x| (x % tk) < (x / tk)).collect();
            let mask = Tensor::from_vec(vec![tq, tk], mask).unwrap();
            for (with_mask, scale) in [(false, None), (true, None), (false, Some(-0.5))] {
                let op = Attention { scale };
                let mut ins = vec![&q, &k, &v];
                if with_mask {
                    ins.push(&mask);
                }
                let blocked = eval_op(&op, &ins).unwrap().remove(0);
                for &i in rows {
                    let qi = q.narrow(1, i, 1).unwrap().contiguous();
                    let mi = mask.narrow(0, i, 1).unwrap().contiguous();
                    let mut ins = vec![&qi, &k, &v];
                    if with_mask {
                        ins.push(&mi);
                    }
                    let row = eval_op(&op, &ins).unwrap().remove(0).to_f32_vec();
                    let got = blocked.narrow(1, i, 1).unwrap().to_f32_vec();
                    for (a, b) in got.iter().zip(&row) {
                        let what = format!("{tq} queries, row {i}, mask {with_mask}, {scale:?}");
                        assert!((a - b).abs() < 1e-5, "{what}: {a} vs {b}");
                    }
                }
            }
        }
    }
}
