//! Convolutions: `Conv1d` in both channel layouts (time-major is what the
//! encoders use) and a channels-first `Conv2d`.
//!
//! Depthwise 1-D kernels run as a direct loop over channels (time-major:
//! register-blocked AVX2 + FMA where the CPU has them); every other kernel is
//! im2col into `Scratch` followed by one matrix product per group
//! (`matmul::gemm_f32`). Pointwise kernels without padding skip im2col: the
//! product reads the input through strides. Nothing allocates once `Scratch`
//! and the output have their sizes.

use super::checks::{self, concrete, input_count_range, rank};
use super::matmul::{
    common_float_dtype, common_float_fact_dtype, f32s, gemm_f32, gemm_rows, load_f32, pack_len,
    rows_work_len, store_f32, Strides,
};
use super::{contig, outputs_len, DType, Dim, Op, OpError, OpResult, Scratch, Tensor, TypedFact};
use crate::op_common;

/// Where the channel axis sits relative to the time axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConvLayout {
    /// `x [C, T]` or `[N, C, T]` (PyTorch's layout).
    ChannelsFirst,
    /// `x [T, C]` or `[N, T, C]` (time-major, what the encoders use).
    ChannelsLast,
}

/// 1-D convolution with zero padding.
///
/// Inputs `x` (see [`ConvLayout`]), `w [out, in/groups, k]` and optionally
/// `bias [out]`, all of one float dtype. The output has the layout of `x`,
/// `out` channels and `floor((T + pad.0 + pad.1 - extent) / stride) + 1`
/// frames, with `extent = dilation * (k - 1) + 1`; an input whose padded
/// length is below the extent is an error.
///
/// ```
/// use pulsed::ops::{eval_op, conv::{Conv1d, ConvLayout}, Tensor};
/// let conv = Conv1d { stride: 1, dilation: 1, pad: (1, 0), groups: 1, layout: ConvLayout::ChannelsLast };
/// let x = Tensor::from_vec(vec![3, 1], vec![1f32, 2., 3.]).unwrap();   // [T, C]
/// let w = Tensor::from_vec(vec![1, 1, 2], vec![1f32, 10.]).unwrap();  // x[t-1] + 10 x[t]
/// let y = eval_op(&conv, &[&x, &w]).unwrap();
/// assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![10., 21., 32.]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conv1d {
    pub stride: usize,
    pub dilation: usize,
    /// Zero frames before and after the input.
    pub pad: (usize, usize),
    pub groups: usize,
    pub layout: ConvLayout,
}

/// Channels-first 2-D convolution with zero padding.
///
/// Inputs `x [C, H, W]` or `[N, C, H, W]`, `w [O, C/groups, kh, kw]` and
/// optionally `bias [O]`; output `[N?, O, H', W']` with the size rule of
/// [`Conv1d`] on each spatial axis (index 0 for H, 1 for W).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conv2d {
    pub stride: (usize, usize),
    pub dilation: (usize, usize),
    /// Zero rows (before, after) on H, then zero columns on W.
    pub pad: [(usize, usize); 2],
    pub groups: usize,
}

/// Parameters above this are refused, so that size arithmetic cannot overflow.
const PARAM_LIMIT: usize = 1 << 30;

fn check_param(name: &str, v: usize, min: usize) -> OpResult<()> {
    if v < min || v > PARAM_LIMIT {
        return Err(OpError::Param(format!(
            "{name} {v} is outside {min}..={PARAM_LIMIT}"
        )));
    }
    Ok(())
}

fn dilated_extent(dilation: usize, k: usize) -> usize {
    dilation
        .saturating_mul(k.saturating_sub(1))
        .saturating_add(1)
}

fn too_short(axis: &str, padded: i64, extent: usize) -> OpError {
    OpError::Shape(format!(
        "{axis} axis: padded length {padded} is shorter than the kernel extent {extent}"
    ))
}

/// Output length along one axis, on a symbolic size.
fn out_dim(
    len: &Dim,
    pad: (usize, usize),
    extent: usize,
    stride: usize,
    axis: &str,
) -> OpResult<Dim> {
    let padded = len.add_const((pad.0 + pad.1) as i64);
    if let Some(p) = padded.as_const() {
        if p < extent as i64 {
            return Err(too_short(axis, p, extent));
        }
    }
    padded
        .add_const(stride as i64 - extent as i64)
        .div_floor(stride as i64)
        .ok_or_else(|| OpError::Dim(format!("{axis} axis: ({padded} - {extent}) / {stride} + 1")))
}

/// Output length along one axis, on a concrete size.
fn out_len(
    len: usize,
    pad: (usize, usize),
    extent: usize,
    stride: usize,
    axis: &str,
) -> OpResult<usize> {
    let padded = len + pad.0 + pad.1;
    if padded < extent {
        return Err(too_short(axis, padded as i64, extent));
    }
    Ok((padded - extent) / stride + 1)
}

/// Channel bookkeeping shared by facts and eval: `(c/groups, o/groups)`.
fn group_sizes(
    groups: usize,
    c: usize,
    o: usize,
    w_in: usize,
    k: &[usize],
) -> OpResult<(usize, usize)> {
    if k.contains(&0) {
        return Err(OpError::Shape(format!(
            "kernel size {k:?} has an empty axis"
        )));
    }
    if !c.is_multiple_of(groups) || !o.is_multiple_of(groups) {
        return Err(OpError::Param(format!(
            "{groups} groups do not divide {c} input and {o} output channels"
        )));
    }
    if w_in != c / groups {
        return Err(OpError::Shape(format!(
            "weight takes {w_in} channels per group, input has {c} channels in {groups} groups"
        )));
    }
    Ok((c / groups, o / groups))
}

fn rank_in(got: usize, lo: usize, hi: usize, input: usize) -> OpResult<()> {
    if got < lo || got > hi {
        return Err(OpError::Rank {
            input,
            expected: format!("{lo} or {hi}"),
            got,
        });
    }
    Ok(())
}

/// Output positions `t` whose input index `t*stride + off` lies in `0..len`,
/// clipped to `0..n_out`.
fn valid_range(off: isize, stride: usize, len: usize, n_out: usize) -> (usize, usize) {
    let (s, len) = (stride as isize, len as isize);
    let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
    let hi = if len <= off {
        0
    } else {
        (len - off + s - 1) / s
    };
    let hi = (hi as usize).min(n_out);
    ((lo as usize).min(hi), hi)
}

/// Input slices of one eval in f32: borrowed when already f32, widened into
/// scratch otherwise; runs `f(x, w, bias, out, work)` and narrows the output.
fn with_f32_buffers(
    inputs: &[&Tensor],
    out: &mut Tensor,
    work_len: usize,
    scratch: &mut Scratch,
    f: impl FnOnce(&[f32], &[f32], Option<&[f32]>, &mut [f32], &mut [f32]) -> OpResult<()>,
) -> OpResult<()> {
    let (x, w) = (inputs[0], inputs[1]);
    if out.is_empty() {
        return Ok(());
    }
    if out.dtype() == DType::F32 {
        let (x, w) = (contig(x), contig(w));
        let b = inputs.get(2).map(|b| contig(b));
        let b = match &b {
            Some(b) => Some(f32s(b)?),
            None => None,
        };
        let work = scratch.one(work_len);
        return f(f32s(&x)?, f32s(&w)?, b, out.as_slice_mut()?, work);
    }
    let b_len = inputs.get(2).map_or(0, |b| b.len());
    let (xb, wb, ob, work) = scratch.four(x.len(), w.len() + b_len, out.len(), work_len);
    load_f32(x, xb, 0)?;
    let (wb, bb) = wb.split_at_mut(w.len());
    load_f32(w, wb, 1)?;
    let bias = match inputs.get(2) {
        Some(b) => {
            load_f32(b, bb, 2)?;
            Some(&*bb)
        }
        None => None,
    };
    f(xb, wb, bias, ob, work)?;
    store_f32(ob, out)
}

/// Concrete sizes of one Conv1d eval.
#[derive(Debug, Clone, Copy)]
struct Geo1 {
    n: usize,
    c: usize,
    t: usize,
    o: usize,
    cg: usize,
    og: usize,
    k: usize,
    t_out: usize,
}

impl Conv1d {
    /// Frames one output frame sees: `dilation * (k - 1) + 1` (for `k >= 1`).
    pub fn extent(&self, k: usize) -> usize {
        dilated_extent(self.dilation, k)
    }

    fn check_params(&self) -> OpResult<()> {
        check_param("stride", self.stride, 1)?;
        check_param("dilation", self.dilation, 1)?;
        check_param("groups", self.groups, 1)?;
        check_param("pad before", self.pad.0, 0)?;
        check_param("pad after", self.pad.1, 0)
    }

    /// (channel axis, time axis) of `x` of this rank.
    fn axes(&self, rank: usize) -> (usize, usize) {
        match self.layout {
            ConvLayout::ChannelsFirst => (rank - 2, rank - 1),
            ConvLayout::ChannelsLast => (rank - 1, rank - 2),
        }
    }

    fn is_depthwise(&self, g: &Geo1) -> bool {
        self.groups == g.c && g.o == g.c
    }

    fn geometry(&self, inputs: &[&Tensor]) -> OpResult<Geo1> {
        let (x, w) = (inputs[0], inputs[1]);
        rank_in(x.rank(), 2, 3, 0)?;
        if w.rank() != 3 {
            return Err(OpError::Rank {
                input: 1,
                expected: "3".into(),
                got: w.rank(),
            });
        }
        let (c_ax, t_ax) = self.axes(x.rank());
        let (c, t) = (x.shape()[c_ax], x.shape()[t_ax]);
        let n = if x.rank() == 3 { x.shape()[0] } else { 1 };
        let (o, w_in, k) = (w.shape()[0], w.shape()[1], w.shape()[2]);
        let (cg, og) = group_sizes(self.groups, c, o, w_in, &[k])?;
        checks::bias_tensor(inputs, o)?;
        let t_out = out_len(t, self.pad, self.extent(k), self.stride, "time")?;
        Ok(Geo1 {
            n,
            c,
            t,
            o,
            cg,
            og,
            k,
            t_out,
        })
    }

    fn work_len(&self, g: &Geo1) -> usize {
        if self.is_depthwise(g) {
            if self.layout == ConvLayout::ChannelsLast {
                (g.k + self.padded_rows(g)) * dw_stride(g.c)
            } else {
                0
            }
        } else {
            self.cols_len(g) + self.gemm_work_len(g)
        }
    }

    /// im2col buffer of the dense path (none for unpadded pointwise kernels).
    fn cols_len(&self, g: &Geo1) -> usize {
        if g.k == 1 && self.pad == (0, 0) {
            0
        } else {
            g.t_out * g.cg * g.k
        }
    }

    /// gemm scratch of one group: packing, plus the column-major product
    /// that `gemm_rows` transposes into a time-major output.
    fn gemm_work_len(&self, g: &Geo1) -> usize {
        match self.layout {
            ConvLayout::ChannelsLast => rows_work_len(g.t_out, g.og, g.cg * g.k),
            ConvLayout::ChannelsFirst => pack_len(g.t_out, g.cg * g.k),
        }
    }

    fn run(
        &self,
        g: &Geo1,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        out: &mut [f32],
        work: &mut [f32],
    ) -> OpResult<()> {
        let (xn, on) = (g.c * g.t, g.o * g.t_out);
        for i in 0..g.n {
            let (x, out) = (&x[i * xn..(i + 1) * xn], &mut out[i * on..(i + 1) * on]);
            if self.is_depthwise(g) {
                match self.layout {
                    ConvLayout::ChannelsLast => self.depthwise_last(g, x, w, b, out, work),
                    ConvLayout::ChannelsFirst => self.depthwise_first(g, x, w, b, out),
                }
            } else {
                self.dense(g, x, w, b, out, work)?;
            }
        }
        Ok(())
    }

    /// Time-major depthwise: each output row is a sum of `k` input rows
    /// scaled channel-wise, so the inner loop runs along contiguous channels.
    fn depthwise_last(
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
    fn padded_rows(&self, g: &Geo1) -> usize {
        let blocks = g.t_out.div_ceil(DW_ROWS);
        let last = (blocks * DW_ROWS - 1) * self.stride + (g.k - 1) * self.dilation + 1;
        last.max(g.t + self.pad.0)
    }

    /// Channels-first depthwise: one 1-D filter per contiguous channel row.
    fn depthwise_first(&self, g: &Geo1, x: &[f32], w: &[f32], b: Option<&[f32]>, out: &mut [f32]) {
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

    /// im2col (`cols[t, ci*k + j]`) then one gemm per group.
    fn dense(
        &self,
        g: &Geo1,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        out: &mut [f32],
        work: &mut [f32],
    ) -> OpResult<()> {
        let last = self.layout == ConvLayout::ChannelsLast;
        let (cg, og, kk, t_out) = (g.cg, g.og, g.cg * g.k, g.t_out);
        let (xt, xc): Strides = if last { (g.c, 1) } else { (1, g.t) };
        if let (Some(b), false) = (b, last) {
            for (row, &bv) in out.chunks_exact_mut(t_out).zip(b) {
                row.fill(bv);
            }
        }
        let (cols, tmp) = work.split_at_mut(self.cols_len(g));
        for gi in 0..self.groups {
            let (c0, wg) = (gi * cg, &w[gi * og * kk..]);
            let (a, a_s): (&[f32], Strides) = if cols.is_empty() {
                // unpadded pointwise: gemm reads x through strides
                (&x[c0 * xc..], (self.stride * xt, xc))
            } else if last {
                self.im2col_last(g, x, c0, cols);
                (cols, (kk, 1))
            } else {
                self.im2col_first(g, x, c0, cols);
                (cols, (1, t_out))
            };
            if last {
                let bias = b.map(|b| &b[gi * og..(gi + 1) * og]);
                gemm_rows(
                    (t_out, og, kk),
                    &mut out[gi * og..],
                    g.o,
                    a,
                    a_s,
                    wg,
                    (1, kk),
                    bias,
                    tmp,
                )?;
            } else {
                let dst = &mut out[gi * og * t_out..];
                gemm_f32(
                    t_out,
                    og,
                    kk,
                    dst,
                    (1, t_out),
                    a,
                    a_s,
                    wg,
                    (1, kk),
                    b.is_some(),
                    tmp,
                )?;
            }
        }
        Ok(())
    }

    /// Row-major `cols[t, ci*k + j] = x[t*stride + j*dilation - pad.0, c0 + ci]`.
    fn im2col_last(&self, g: &Geo1, x: &[f32], c0: usize, cols: &mut [f32]) {
        let (cg, k) = (g.cg, g.k);
        for (t, crow) in cols
            .chunks_exact_mut((cg * k).max(1))
            .enumerate()
            .take(g.t_out)
        {
            for j in 0..k {
                let src = (t * self.stride + j * self.dilation) as isize - self.pad.0 as isize;
                if src < 0 || src as usize >= g.t {
                    for ci in 0..cg {
                        crow[ci * k + j] = 0.0;
                    }
                    continue;
                }
                let xr = &x[src as usize * g.c + c0..][..cg];
                for (ci, &v) in xr.iter().enumerate() {
                    crow[ci * k + j] = v;
                }
            }
        }
    }

    /// Column-major `cols` (`cols[(ci*k + j) * t_out + t]`), filled one
    /// contiguous run per (channel, tap).
    fn im2col_first(&self, g: &Geo1, x: &[f32], c0: usize, cols: &mut [f32]) {
        let (k, t_out, s) = (g.k, g.t_out, self.stride);
        for ci in 0..g.cg {
            let xr = &x[(c0 + ci) * g.t..][..g.t];
            for j in 0..k {
                let dst = &mut cols[(ci * k + j) * t_out..][..t_out];
                let off = (j * self.dilation) as isize - self.pad.0 as isize;
                let (lo, hi) = valid_range(off, s, g.t, t_out);
                dst[..lo].fill(0.0);
                dst[hi..].fill(0.0);
                for (i, d) in dst[lo..hi].iter_mut().enumerate() {
                    *d = xr[(((lo + i) * s) as isize + off) as usize];
                }
            }
        }
    }
}

impl Op for Conv1d {
    op_common!("Conv1d");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count_range(inputs, 2, 3)?;
        self.check_params()?;
        let dt = common_float_fact_dtype(inputs)?;
        let (x, w) = (inputs[0], inputs[1]);
        rank_in(x.rank(), 2, 3, 0)?;
        rank(w, 1, 3)?;
        let (c_ax, t_ax) = self.axes(x.rank());
        let c = concrete(&x.shape[c_ax], "conv input channels")?;
        let o = concrete(&w.shape[0], "conv output channels")?;
        let w_in = concrete(&w.shape[1], "conv weight channels")?;
        let k = concrete(&w.shape[2], "conv kernel size")?;
        group_sizes(self.groups, c, o, w_in, &[k])?;
        checks::bias_fact(inputs, o)?;
        let t = out_dim(
            &x.shape[t_ax],
            self.pad,
            self.extent(k),
            self.stride,
            "time",
        )?;
        let mut shape = x.shape.clone();
        shape[c_ax] = Dim::from(o);
        shape[t_ax] = t;
        Ok(vec![TypedFact::dt_shape(dt, &shape)])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        input_count_range(inputs, 2, 3)?;
        self.check_params()?;
        let dt = common_float_dtype(inputs)?;
        let g = self.geometry(inputs)?;
        let mut shape = [g.n, g.o, g.t_out];
        let (c_ax, t_ax) = self.axes(3);
        shape[c_ax] = g.o;
        shape[t_ax] = g.t_out;
        let shape = &shape[3 - inputs[0].rank()..];
        outputs_len(outputs, 1);
        outputs[0].ensure(dt, shape);
        let work = self.work_len(&g);
        with_f32_buffers(
            inputs,
            &mut outputs[0],
            work,
            scratch,
            |x, w, b, out, work| self.run(&g, x, w, b, out, work),
        )
    }

    fn info(&self) -> String {
        format!(
            "stride {} dilation {} pad {:?} groups {} {:?}",
            self.stride, self.dilation, self.pad, self.groups, self.layout
        )
    }
}

/// A multiply-add: fused where the caller is compiled for FMA, plain
/// elsewhere (a software `fma` call would be far slower than two ops).
trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

struct Fused;
struct Unfused;

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
fn dw_stride(c: usize) -> usize {
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
fn depthwise_last_rows<M: MulAdd>(
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

/// Concrete sizes of one Conv2d eval.
#[derive(Debug, Clone, Copy)]
struct Geo2 {
    n: usize,
    c: usize,
    hw: (usize, usize),
    o: usize,
    cg: usize,
    og: usize,
    k: (usize, usize),
    out: (usize, usize),
}

impl Conv2d {
    fn check_params(&self) -> OpResult<()> {
        check_param("stride", self.stride.0, 1)?;
        check_param("stride", self.stride.1, 1)?;
        check_param("dilation", self.dilation.0, 1)?;
        check_param("dilation", self.dilation.1, 1)?;
        check_param("groups", self.groups, 1)?;
        for p in self.pad {
            check_param("pad", p.0, 0)?;
            check_param("pad", p.1, 0)?;
        }
        Ok(())
    }

    fn geometry(&self, inputs: &[&Tensor]) -> OpResult<Geo2> {
        let (x, w) = (inputs[0], inputs[1]);
        rank_in(x.rank(), 3, 4, 0)?;
        if w.rank() != 4 {
            return Err(OpError::Rank {
                input: 1,
                expected: "4".into(),
                got: w.rank(),
            });
        }
        let r = x.rank();
        let n = if r == 4 { x.shape()[0] } else { 1 };
        let (c, h, wd) = (x.shape()[r - 3], x.shape()[r - 2], x.shape()[r - 1]);
        let ws = w.shape();
        let (o, w_in, k) = (ws[0], ws[1], (ws[2], ws[3]));
        let (cg, og) = group_sizes(self.groups, c, o, w_in, &[k.0, k.1])?;
        checks::bias_tensor(inputs, o)?;
        let ho = out_len(
            h,
            self.pad[0],
            dilated_extent(self.dilation.0, k.0),
            self.stride.0,
            "H",
        )?;
        let wo = out_len(
            wd,
            self.pad[1],
            dilated_extent(self.dilation.1, k.1),
            self.stride.1,
            "W",
        )?;
        Ok(Geo2 {
            n,
            c,
            hw: (h, wd),
            o,
            cg,
            og,
            k,
            out: (ho, wo),
        })
    }

    fn run(
        &self,
        g: &Geo2,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        out: &mut [f32],
        work: &mut [f32],
    ) -> OpResult<()> {
        let p = g.out.0 * g.out.1;
        let kk = g.cg * g.k.0 * g.k.1;
        let (xn, on) = (g.c * g.hw.0 * g.hw.1, g.o * p);
        for i in 0..g.n {
            let (x, out) = (&x[i * xn..(i + 1) * xn], &mut out[i * on..(i + 1) * on]);
            match b {
                Some(b) => {
                    for (row, &bv) in out.chunks_exact_mut(p.max(1)).zip(b) {
                        row.fill(bv);
                    }
                }
                None => out.fill(0.0),
            }
            let (cols, pack) = work.split_at_mut(kk * p);
            for gi in 0..self.groups {
                self.im2col(g, x, gi * g.cg, cols);
                // cols is column-major [P, KK]; out is [O, P], i.e. (p, o) at o*P + p
                let dst = &mut out[gi * g.og * p..];
                gemm_f32(
                    p,
                    g.og,
                    kk,
                    dst,
                    (1, p),
                    cols,
                    (1, p),
                    &w[gi * g.og * kk..],
                    (1, kk),
                    true,
                    pack,
                )?;
            }
        }
        Ok(())
    }

    /// `cols[((ci*kh + i)*kw + j) * P + ho*W' + wo] = x[c0+ci, ho*sh + i*dh - ph, wo*sw + j*dw - pw]`.
    fn im2col(&self, g: &Geo2, x: &[f32], c0: usize, cols: &mut [f32]) {
        let ((h, wd), (ho_n, wo_n), (kh, kw)) = (g.hw, g.out, g.k);
        let p = ho_n * wo_n;
        let mut row = 0;
        for ci in 0..g.cg {
            let xc = &x[(c0 + ci) * h * wd..][..h * wd];
            for i in 0..kh {
                for j in 0..kw {
                    let dst = &mut cols[row * p..][..p];
                    row += 1;
                    let off_w = (j * self.dilation.1) as isize - self.pad[1].0 as isize;
                    let (lo, hi) = valid_range(off_w, self.stride.1, wd, wo_n);
                    for (ho, drow) in dst.chunks_exact_mut(wo_n.max(1)).enumerate().take(ho_n) {
                        let hi_in = (ho * self.stride.0 + i * self.dilation.0) as isize
                            - self.pad[0].0 as isize;
                        if hi_in < 0 || hi_in as usize >= h {
                            drow.fill(0.0);
                            continue;
                        }
                        let xr = &xc[hi_in as usize * wd..][..wd];
                        drow[..lo].fill(0.0);
                        drow[hi..].fill(0.0);
                        for (q, d) in drow[lo..hi].iter_mut().enumerate() {
                            *d = xr[(((lo + q) * self.stride.1) as isize + off_w) as usize];
                        }
                    }
                }
            }
        }
    }
}

impl Op for Conv2d {
    op_common!("Conv2d");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count_range(inputs, 2, 3)?;
        self.check_params()?;
        let dt = common_float_fact_dtype(inputs)?;
        let (x, w) = (inputs[0], inputs[1]);
        rank_in(x.rank(), 3, 4, 0)?;
        rank(w, 1, 4)?;
        let r = x.rank();
        let c = concrete(&x.shape[r - 3], "conv input channels")?;
        let o = concrete(&w.shape[0], "conv output channels")?;
        let w_in = concrete(&w.shape[1], "conv weight channels")?;
        let kh = concrete(&w.shape[2], "conv kernel height")?;
        let kw = concrete(&w.shape[3], "conv kernel width")?;
        group_sizes(self.groups, c, o, w_in, &[kh, kw])?;
        checks::bias_fact(inputs, o)?;
        let ho = out_dim(
            &x.shape[r - 2],
            self.pad[0],
            dilated_extent(self.dilation.0, kh),
            self.stride.0,
            "H",
        )?;
        let wo = out_dim(
            &x.shape[r - 1],
            self.pad[1],
            dilated_extent(self.dilation.1, kw),
            self.stride.1,
            "W",
        )?;
        let mut shape = x.shape.clone();
        shape[r - 3] = Dim::from(o);
        shape[r - 2] = ho;
        shape[r - 1] = wo;
        Ok(vec![TypedFact::dt_shape(dt, &shape)])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        input_count_range(inputs, 2, 3)?;
        self.check_params()?;
        let dt = common_float_dtype(inputs)?;
        let g = self.geometry(inputs)?;
        let shape = [g.n, g.o, g.out.0, g.out.1];
        let shape = &shape[4 - inputs[0].rank()..];
        outputs_len(outputs, 1);
        outputs[0].ensure(dt, shape);
        let (kk, p) = (g.cg * g.k.0 * g.k.1, g.out.0 * g.out.1);
        let work = kk * p + pack_len(p, kk);
        with_f32_buffers(
            inputs,
            &mut outputs[0],
            work,
            scratch,
            |x, w, b, out, work| self.run(&g, x, w, b, out, work),
        )
    }

    fn info(&self) -> String {
        format!(
            "stride {:?} dilation {:?} pad {:?} groups {}",
            self.stride, self.dilation, self.pad, self.groups
        )
    }
}

#[cfg(test)]
mod tests;
