//! Copies attention as matrix products. Every query row of a chunk, frame
//! or copy, sees the same keys (the chunk's frames, its left context and
//! its own copies), so a chunk's rows of one head form a block: its scores
//! against each key range in one product, a softmax per row, the weights
//! against the values in one more. One dot product at a time, a 30 s
//! window of whisper-base (the tail a live stream computes when it starts)
//! took 24 s on two cores; see `docs/notes/streaming-whisper.md`.

use std::ops::Range;

use crate::ops::matmul::{gemm_f32, gemm_rows, kernel, pack_len, rows_work_len, Kernel};
use crate::ops::vmath::{self, exp_shifted_sum};
use crate::ops::OpResult;

/// Query rows (both slots) and keys from which a block runs as products;
/// below them, or without a SIMD product, the row-by-row path is as fast.
const MIN_ROWS: usize = 8;
const MIN_KEYS: usize = 32;

/// The key rows of one query frame: frames (slot 0) and copies (slot 1).
pub(super) type Ranges = [Range<usize>; 2];

/// Runs of consecutive query frames `start..end` that see the same keys.
pub(super) fn runs(
    tq: usize,
    keys: &impl Fn(usize) -> Ranges,
) -> impl Iterator<Item = (Range<usize>, Ranges)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        if i >= tq {
            return None;
        }
        let (start, ranges) = (i, keys(i));
        i += 1;
        while i < tq && keys(i) == ranges {
            i += 1;
        }
        Some((start..i, ranges))
    })
}

/// Whether a run of `frames` query frames over `ranges` is worth a block.
pub(super) fn blocked(frames: usize, ranges: &Ranges) -> bool {
    let keys: usize = ranges.iter().map(|r| r.len()).sum();
    kernel() != Kernel::Crate && 2 * frames >= MIN_ROWS && keys >= MIN_KEYS
}

/// Scratch lengths for any block among `runs` over `tk` key rows (two
/// slots each): scores, result, the products' work area, each row's
/// `1 / sum`. Sized by what could be seen, not what is, so that a stream
/// whose left context fills up step by step allocates only once.
pub(super) fn scratch_len(
    runs: impl Iterator<Item = (Range<usize>, Ranges)>,
    tk: usize,
    dh: usize,
) -> [usize; 4] {
    let m = runs.map(|(r, _)| 2 * r.len()).max().unwrap_or(0);
    let n = 2 * tk;
    let work = rows_work_len(m, n, dh).max(pack_len(dh, n));
    [m * n, m * dh, work, m]
}

/// The block's buffers, at least [`scratch_len`] long.
pub(super) struct Buffers<'s> {
    pub scores: &'s mut [f32],
    pub acc: &'s mut [f32],
    pub work: &'s mut [f32],
    pub inv: &'s mut [f32],
}

/// One head (columns `off..off + dh` of rows `d` wide) of the query frames
/// `frames` over the key `ranges`; `q` and `out` `[tq, 2, d]`, `k` and `v`
/// `[tk, 2, d]`, row-major. Writes the block's rows of `out`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend_block(
    (q, k, v): (&[f32], &[f32], &[f32]),
    out: &mut [f32],
    frames: &Range<usize>,
    ranges: &Ranges,
    (d, off, dh, scale): (usize, usize, usize, f32),
    b: &mut Buffers<'_>,
) -> OpResult<()> {
    let m = 2 * frames.len();
    let n: usize = ranges.iter().map(|r| r.len()).sum();
    let qb = &q[2 * frames.start * d + off..];
    // scores = q · kᵀ, one key range after the other: kᵀ's element (i, j)
    // is k[(2 * j + slot) * d + off + i]
    let mut col = 0;
    for (slot, r) in ranges.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
        let kb = &k[(2 * r.start + slot) * d + off..];
        let dst = &mut b.scores[col..];
        gemm_rows(
            (m, r.len(), dh),
            dst,
            n,
            qb,
            (d, 1),
            kb,
            (1, 2 * d),
            None,
            b.work,
        )?;
        col += r.len();
    }
    for (row, inv) in b.scores[..m * n].chunks_exact_mut(n).zip(b.inv.iter_mut()) {
        // scale > 0: the largest scaled score is the largest score scaled
        let max = vmath::max(row) * scale;
        *inv = 1.0 / exp_shifted_sum(row, scale, max);
    }
    // accᵀ = vᵀ · scoresᵀ, column-major, as `attention::blocked` does
    let mut col = 0;
    for (slot, r) in ranges.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
        let vb = &v[(2 * r.start + slot) * d + off..];
        let st = &b.scores[col..];
        gemm_f32(
            dh,
            m,
            r.len(),
            b.acc,
            (1, dh),
            vb,
            (1, 2 * d),
            st,
            (1, n),
            col > 0,
            b.work,
        )?;
        col += r.len();
    }
    for (r, (acc, inv)) in b.acc[..m * dh]
        .chunks_exact(dh)
        .zip(b.inv.iter())
        .enumerate()
    {
        let row = (2 * frames.start + r) * d + off;
        for (o, a) in out[row..row + dh].iter_mut().zip(acc) {
            *o = a * inv;
        }
    }
    Ok(())
}
