//! Convolutions: `Conv1d` in both channel layouts (time-major is what the
//! encoders use) and a channels-first `Conv2d`.
//!
//! Depthwise 1-D kernels run as a direct loop over channels (time-major:
//! register-blocked AVX2 + FMA where the CPU has them); every other kernel is
//! im2col into `Scratch` followed by one matrix product per group
//! (`matmul::gemm_f32`). Pointwise kernels without padding skip im2col: the
//! product reads the input through strides. Nothing allocates once `Scratch`
//! and the output have their sizes.
//!
//! `conv1d` and `conv2d` hold each op's checks, geometry and dense path,
//! `depthwise` the depthwise 1-D kernels; the helpers here are what they
//! share.

use super::matmul::{f32s, load_f32, store_f32};
use super::{contig, DType, Dim, OpError, OpResult, Scratch, Tensor};

mod conv1d;
mod conv2d;
mod depthwise;

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

#[cfg(test)]
mod tests;
