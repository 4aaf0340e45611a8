//! The depthwise 1-D kernels of `Conv1d`: a direct loop over channels,
//! register-blocked AVX2 + FMA on time-major input where the CPU has them,
//! and a portable loop otherwise.

use super::{valid_range, Conv1d, Geo1};

impl Conv1d {
    /// Time-major depthwise: each output row is a sum of `k` input rows
    /// scaled channel-wise, so the inner loop runs along contiguous channels.
    pub(super) fn depthwise_last(
        &self,
        g: &Geo1,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        out: &mut [f32],
        work: &mut [f32],
    ) {
        let (c, k, cp) = (g.c, g.k, dw_stride(g.c));
        let (wt, xp) = work.split_at_mut(k * cp);
        for (j, row) in wt.chunks_exact_mut(cp).enumerate() {
            for (ch, v) in row[..c].iter_mut().enumerate() {
                *v = w[ch * k + j];
            }
            row[c..].fill(0.0);
        }
        // x with its zero padding made real, and zero rows up to the last
        // row a block of DW_ROWS output rows reads: the kernel never tests
        // whether a tap falls inside x
        let xp = &mut xp[..self.padded_rows(g) * cp];
        let (before, rest) = xp.split_at_mut(self.pad.0 * cp);
        let (body, after) = rest.split_at_mut(g.t * cp);
        before.fill(0.0);
        for (dst, src) in body.chunks_exact_mut(cp).zip(x.chunks_exact(c)) {
            dst[..c].copy_from_slice(src);
            dst[c..].fill(0.0);
        }
        after.fill(0.0);
        let (wt, xp) = (&*wt, &*xp);
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the features the function is compiled for were just detected.
            return unsafe { depthwise_last_fma(self, g, xp, wt, b, out) };
        }
        depthwise_last_rows::<Unfused>(self, g, xp, wt, b, out);
    }

    /// Rows of the padded time-major input that the depthwise kernel reads.
    pub(super) fn padded_rows(&self, g: &Geo1) -> usize {
        let blocks = g.t_out.div_ceil(DW_ROWS);
        let last = (blocks * DW_ROWS - 1) * self.stride + (g.k - 1) * self.dilation + 1;
        last.max(g.t + self.pad.0)
    }

    /// Channels-first depthwise: one 1-D filter per contiguous channel row.
    pub(super) fn depthwise_first(
        &self,
        g: &Geo1,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        out: &mut [f32],
    ) {
        let (t, k, s) = (g.t, g.k, self.stride);
        for (ch, row) in out.chunks_exact_mut(g.t_out).enumerate() {
            row.fill(b.map_or(0.0, |b| b[ch]));
            let xr = &x[ch * t..(ch + 1) * t];
            for j in 0..k {
                let off = (j * self.dilation) as isize - self.pad.0 as isize;
                let (lo, hi) = valid_range(off, s, t, g.t_out);
                let wv = w[ch * k + j];
                if lo == hi {
                    continue;
                }
                if s == 1 {
                    let start = (lo as isize + off) as usize;
                    for (o, &xv) in row[lo..hi].iter_mut().zip(&xr[start..]) {
                        *o += wv * xv;
                    }
                } else {
                    for (i, o) in row[lo..hi].iter_mut().enumerate() {
                        *o += wv * xr[(((lo + i) * s) as isize + off) as usize];
                    }
                }
            }
        }
    }
}

/// A multiply-add: fused where the caller is compiled for FMA, plain
/// elsewhere (a software `fma` call would be far slower than two ops).
pub(super) trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

struct Fused;
pub(super) struct Unfused;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

impl MulAdd for Unfused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// Output rows and channels per register block: 4 rows x 2 AVX vectors of
/// accumulators, so each weight vector loaded serves 4 rows.
const DW_ROWS: usize = 4;
const DW_CHANNELS: usize = 16;

/// Row stride of the depthwise scratch copies (`xp`, `wt`): whole blocks of
/// 16 channels, an odd number of cache lines, so that successive rows fall
/// in different L1 sets. A power-of-two stride (C = 512, 1024) put every
/// row of a channel block in one set and ran 5-10x slower.
pub(super) fn dw_stride(c: usize) -> usize {
    (c.div_ceil(DW_CHANNELS) | 1) * DW_CHANNELS
}

/// The bias of channels `ch..ch+16`, zero past the last channel.
fn dw_bias(b: Option<&[f32]>, ch: usize, lanes: usize) -> [f32; DW_CHANNELS] {
    let mut out = [0f32; DW_CHANNELS];
    if let Some(b) = b {
        out[..lanes].copy_from_slice(&b[ch..ch + lanes]);
    }
    out
}

/// The time-major depthwise loop with AVX2 + FMA: blocks of 4 output rows
/// x 16 channels live in 8 registers through all taps, each weight vector
/// loaded serving 4 rows (1.25 loads per FMA). One channel block at a time
/// sweeps all rows, so its input column stays in L1.
///
/// # Safety
/// The CPU must support AVX2 and FMA. Buffer lengths are checked on entry
/// (the portable loop runs if they do not fit).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn depthwise_last_fma(
    op: &Conv1d,
    g: &Geo1,
    xp: &[f32],
    wt: &[f32],
    b: Option<&[f32]>,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (c, k, t_out, cp) = (g.c, g.k, g.t_out, dw_stride(g.c));
    if xp.len() < op.padded_rows(g) * cp
        || wt.len() < k * cp
        || out.len() < t_out * c
        || b.is_some_and(|b| b.len() < c)
    {
        return depthwise_last_rows::<Fused>(op, g, xp, wt, b, out);
    }
    let (row_step, tap_step) = (op.stride * cp, op.dilation * cp);
    let (xs, ws, o) = (xp.as_ptr(), wt.as_ptr(), out.as_mut_ptr());
    for ch in (0..c).step_by(DW_CHANNELS) {
        let lanes = DW_CHANNELS.min(c - ch);
        let bias = dw_bias(b, ch, lanes);
        let (b0, b1) = (
            _mm256_loadu_ps(bias.as_ptr()),
            _mm256_loadu_ps(bias.as_ptr().add(8)),
        );
        for t0 in (0..t_out).step_by(DW_ROWS) {
            // SAFETY (pointer arithmetic below): rows t0..t0+4 of the padded
            // input exist (`padded_rows` rounds t_out up to whole blocks),
            // ch + 16 <= cp, and only rows < t_out and channels < c are stored.
            let mut acc = [b0, b1, b0, b1, b0, b1, b0, b1];
            let mut x = xs.add(t0 * row_step + ch);
            let mut w = ws.add(ch);
            for _ in 0..k {
                let (w0, w1) = (_mm256_loadu_ps(w), _mm256_loadu_ps(w.add(8)));
                let x1 = x.add(row_step);
                let (x2, x3) = (x1.add(row_step), x1.add(2 * row_step));
                acc[0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), acc[0]);
                acc[1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x.add(8)), acc[1]);
                acc[2] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x1), acc[2]);
                acc[3] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x1.add(8)), acc[3]);
                acc[4] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x2), acc[4]);
                acc[5] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x2.add(8)), acc[5]);
                acc[6] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x3), acc[6]);
                acc[7] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x3.add(8)), acc[7]);
                x = x.add(tap_step);
                w = w.add(cp);
            }
            for q in 0..DW_ROWS.min(t_out - t0) {
                let dst = o.add((t0 + q) * c + ch);
                if lanes == DW_CHANNELS {
                    _mm256_storeu_ps(dst, acc[2 * q]);
                    _mm256_storeu_ps(dst.add(8), acc[2 * q + 1]);
                } else {
                    let mut tmp = [0f32; DW_CHANNELS];
                    _mm256_storeu_ps(tmp.as_mut_ptr(), acc[2 * q]);
                    _mm256_storeu_ps(tmp.as_mut_ptr().add(8), acc[2 * q + 1]);
                    std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, lanes);
                }
            }
        }
    }
}

/// `out[t, ch] = bias[ch] + sum_j wt[j, ch] * xp[t*stride + j*dilation, ch]`
/// over the zero-padded copies made by `Conv1d::depthwise_last`.
#[inline(always)]
pub(super) fn depthwise_last_rows<M: MulAdd>(
    op: &Conv1d,
    g: &Geo1,
    xp: &[f32],
    wt: &[f32],
    b: Option<&[f32]>,
    out: &mut [f32],
) {
    let (c, k, s, d, cp) = (g.c, g.k, op.stride, op.dilation, dw_stride(g.c));
    for ch in (0..c).step_by(DW_CHANNELS) {
        let lanes = DW_CHANNELS.min(c - ch);
        let bias = dw_bias(b, ch, lanes);
        for t0 in (0..g.t_out).step_by(DW_ROWS) {
            let mut acc = [bias; DW_ROWS];
            for j in 0..k {
                let Some(wr) = wt
                    .get(j * cp + ch..)
                    .and_then(<[f32]>::first_chunk::<DW_CHANNELS>)
                else {
                    continue;
                };
                for (q, aq) in acc.iter_mut().enumerate() {
                    let at = ((t0 + q) * s + j * d) * cp + ch;
                    let Some(xr) = xp.get(at..).and_then(<[f32]>::first_chunk::<DW_CHANNELS>)
                    else {
                        continue;
                    };
                    for i in 0..DW_CHANNELS {
                        aq[i] = M::mul_add(wr[i], xr[i], aq[i]);
                    }
                }
            }
            for (q, aq) in acc.iter().enumerate().take(g.t_out - t0) {
                out[(t0 + q) * c + ch..][..lanes].copy_from_slice(&aq[..lanes]);
            }
        }
    }
}
