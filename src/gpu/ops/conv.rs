//! Conv1d in both layouts (with or without a batch axis) and channels-first
//! Conv2d (`kernels/conv.cu`). Zero padding is applied while reading, so
//! padded and pulsed (unpadded) convolutions take the same kernels.
//!
//! A depthwise Conv1d (one channel per group) runs one thread per output; any
//! other Conv1d runs the implicit-GEMM kernel, whose tile (4 output channels
//! x `tq` frames) and warp count are chosen here from the node's sizes: small
//! tiles when there are few outputs (a streaming chunk), so that the GPU has
//! blocks enough, and larger ones to reuse each weight row otherwise. With
//! many frames (batched streams) an ungrouped time-major one is im2col and
//! a cuBLAS GEMM instead.

use cudarc::driver::CudaFunction;

use crate::gpu::blas::{k_splits, Gemm};
use crate::gpu::memory::align;
use crate::gpu::op::{expect_io, launch, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::conv::{Conv1d, Conv2d, ConvLayout};
use crate::ops::Op;

/// Output channels of one dense tile (`DENSE_OW` in conv.cu).
const DENSE_OW: usize = 4;
/// Most frames of one dense tile (`DENSE_TQ` in conv.cu).
const DENSE_TQ: usize = 8;
/// Most warps of one dense block (`DENSE_MAX_WARPS` in conv.cu).
const DENSE_MAX_WARPS: usize = 8;
/// Blocks below which a dense conv takes smaller frame tiles.
const DENSE_MIN_BLOCKS: usize = 256;
/// Taps per warp above which a dense block takes another warp.
const DENSE_TAPS_PER_WARP: usize = 96;
/// Output frames (all streams') from which a dense, ungrouped, time-major
/// Conv1d runs as im2col and cuBLAS: measured on the H100, 128 streams'
/// conv1 and conv2 took 90 and 132 us in the implicit-GEMM kernel (ncu).
const DENSE_GEMM_ROWS: usize = 256;
/// Output frames up to which it does (its columns, in scratch, stay near
/// 100 MiB for the shipped model's conv2).
const DENSE_GEMM_MAX_ROWS: usize = 1 << 15;
/// Channels up to which a depthwise conv can take the layer norm after it
/// (a thread per channel in one block).
const NORM_MAX_CHANNELS: usize = 1024;
/// Sizes above this are refused, so that the kernels' `int` arithmetic
/// (`t * stride + j * dilation`, `ci * k`) cannot overflow.
const INT_LIMIT: usize = 1 << 28;

/// Checks `v` fits the kernels' `int` arithmetic.
fn small(what: &str, v: usize) -> Result<i32, GpuError> {
    if v > INT_LIMIT {
        return Err(GpuError::too_large(format!("conv: {what}"), v, INT_LIMIT));
    }
    Ok(v as i32)
}

/// One kernel launch of fixed geometry: the tensors' addresses (x, w, bias,
/// y) go first, then scalars fixed at build.
///
/// The rewrites (`gpu::rewrite`) fuse into a time-major depthwise conv the
/// Delay before it (input 0 is then the undelayed frames, the ring is
/// state), the layer norm after it (its gamma and beta are the inputs after
/// the conv's own) and an activation; `with_*` gives that fused form.
#[derive(Debug, Clone)]
pub(crate) struct ConvGpu {
    what: String,
    f: CudaFunction,
    grid: Grid,
    scalars: Vec<Arg>,
    has_bias: bool,
    empty: bool,
    /// A fused activation's unary code (-1: none), passed after the
    /// scalars; `None` for kernels that take none.
    act: Option<i32>,
    /// The depthwise kernel's window (it takes a ring, a ring length and the
    /// step after the activation), with the fused Delay's ring if any.
    window: Option<Window>,
    /// For a time-major depthwise conv: the kernel that also takes the layer
    /// norm after it, and once fused the norm's eps and the activation
    /// after it.
    norm_f: Option<CudaFunction>,
    norm: Option<(f32, i32)>,
    /// Many frames: `f` is `conv1d_im2col` (into scratch), then this GEMM,
    /// then the Linear's epilogue for bias and activation.
    gemm: Option<Im2colGemm>,
}

/// The GEMM over im2col's columns and the Linear's epilogue after it.
#[derive(Debug, Clone)]
struct Im2colGemm {
    gemm: Gemm,
    /// Slices of k computed apart (after the columns in scratch) and summed
    /// by the epilogue, as a Linear's ([`k_splits`]).
    splits: usize,
    epilogue: CudaFunction,
}

impl Im2colGemm {
    /// Scratch bytes of the columns; the slices, if any, come after them.
    fn columns_bytes(&self) -> usize {
        align(self.gemm.m * self.gemm.k * self.gemm.dtype.size_of())
    }
}

/// A depthwise convolution's input window ([n, t_in, c] when time-major),
/// its output frames, and the ring of frames of the Delay fused into it, if
/// any (time-major only).
#[derive(Debug, Clone, Copy)]
struct Window {
    n: usize,
    t_in: usize,
    c: usize,
    elem: usize,
    last: bool,
    t_out: usize,
    ring: Option<usize>,
}

impl ConvGpu {
    /// With an activation after it, for kernels that take one.
    pub(crate) fn with_activation(&self, code: i32) -> Option<ConvGpu> {
        if self.act != Some(-1) {
            return None;
        }
        let mut c = self.clone();
        c.act = Some(code);
        Some(c)
    }

    /// With the layer norm over the channels after it (eps), then the
    /// activation `act` (-1 for none): a time-major depthwise conv only.
    pub(crate) fn with_norm_after(&self, eps: f32, act: i32) -> Option<ConvGpu> {
        if self.norm_f.is_none() || self.norm.is_some() || self.act != Some(-1) {
            return None;
        }
        let mut c = self.clone();
        c.norm = Some((eps, act));
        Some(c)
    }

    /// With the Delay before it (no delay, `ring` frames of overlap) kept
    /// in its state: input 0 becomes that Delay's input.
    pub(crate) fn with_delay(&self, ring: usize) -> Option<ConvGpu> {
        let mut c = self.clone();
        match &mut c.window {
            Some(w)
                if w.last
                    && w.ring.is_none()
                    && ring < w.t_in
                    && w.n
                        .checked_mul(ring)
                        .and_then(|v| v.checked_mul(w.c))
                        .is_some_and(|v| v <= i32::MAX as usize) =>
            {
                w.ring = Some(ring);
                Some(c)
            }
            _ => None,
        }
    }
}

impl GpuOp for ConvGpu {
    fn describe(&self) -> String {
        let mut d = self.what.clone();
        if let Some(ring) = self.window.and_then(|w| w.ring) {
            d += &format!(" + input Delay fused (ring of {ring} frames)");
        }
        if self.norm.is_some() {
            d += " + fused layer norm after";
        }
        if self.act.is_some_and(|a| a >= 0) || self.norm.is_some_and(|n| n.1 >= 0) {
            d += " + fused activation";
        }
        d
    }

    fn state_bytes(&self) -> usize {
        // two rings: this step's and the next's
        match self.window {
            Some(Window {
                n,
                c,
                elem,
                ring: Some(ring),
                ..
            }) => 2 * n * ring * c * elem,
            _ => 0,
        }
    }

    fn scratch_bytes(&self) -> usize {
        self.gemm.as_ref().map_or(0, |ig| {
            let g = &ig.gemm;
            let slices = if ig.splits > 1 {
                ig.splits * g.m * g.n
            } else {
                0
            };
            ig.columns_bytes() + slices * g.dtype.size_of()
        })
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("conv", io, 2 + self.has_bias as usize, 1)?;
        if self.empty {
            return Ok(());
        }
        let own = 2 + self.has_bias as usize;
        let bias = if self.has_bias { io.ins[2].ptr } else { 0 };
        // with the Delay fused, x is the new frames and the rings are state
        let x = io.ins[0].ptr;
        let ring = self.window.and_then(|w| w.ring).unwrap_or(0);
        if let Some(ig) = &self.gemm {
            let (g, y) = (&ig.gemm, io.outs[0].ptr);
            let mut args = [Arg::U64(0); 10];
            args[0] = Arg::Ptr(x);
            args[1] = Arg::Ptr(io.scratch);
            let n = 2 + self.scalars.len();
            if n > args.len() {
                return Err(GpuError::TooManyArgs {
                    got: n,
                    max: args.len(),
                });
            }
            args[2..n].copy_from_slice(&self.scalars);
            launch(cx, &self.f, self.grid, &args[..n])?;
            let gemm = g.split_k(ig.splits);
            let acc = match ig.splits {
                1 => y,
                _ => io.scratch + ig.columns_bytes() as u64,
            };
            cx.blas.gemm(&gemm, io.scratch, io.ins[1].ptr, acc)?;
            let act = self.act.unwrap_or(-1);
            if !self.has_bias && act < 0 && ig.splits == 1 {
                return Ok(());
            }
            return launch(
                cx,
                &ig.epilogue,
                Grid::linear(g.m * g.n),
                &[
                    Arg::Ptr(acc),
                    Arg::Ptr(bias),
                    Arg::Ptr(y),
                    Arg::U64(g.m as u64),
                    Arg::U64(g.n as u64),
                    Arg::I32(self.has_bias as i32),
                    Arg::I32(act),
                    Arg::F32(1.0),
                    Arg::Ptr(y),
                    Arg::I32(0),
                    Arg::I32(0),
                    Arg::I32(ig.splits as i32),
                    Arg::U64(gemm.stride_c as u64),
                ],
            );
        }
        // the pointers, the scalars fixed at build, then what each kernel
        // takes besides: the activation (a fused norm's comes after the
        // norm, in the conv's slot), the rings, the norm
        let act = match self.norm {
            Some((_, act)) => Some(Arg::I32(act)),
            None => self.act.map(Arg::I32),
        };
        let ring_args = [Arg::Ptr(io.state), Arg::I32(ring as i32), Arg::Ptr(cx.step)];
        let (f, grid, norm_args) = match (self.norm, &self.norm_f, self.window) {
            (Some((eps, _)), Some(f), Some(w)) => {
                // the norm's gamma and beta follow the conv's own inputs
                expect_io("conv", io, own + 2, 1)?;
                let norm = [
                    Arg::Ptr(io.ins[own].ptr),
                    Arg::Ptr(io.ins[own + 1].ptr),
                    Arg::F32(eps),
                ];
                // a block per frame, a thread per channel
                let threads = w.c.next_multiple_of(32) as u32;
                (f, Grid::blocks((w.n * w.t_out) as u32, threads), Some(norm))
            }
            _ => (&self.f, self.grid, None),
        };
        let ptrs = [x, io.ins[1].ptr, bias, io.outs[0].ptr].map(Arg::Ptr);
        let parts: [&[Arg]; 5] = [
            &ptrs,
            &self.scalars,
            act.as_slice(),
            if self.window.is_some() {
                &ring_args
            } else {
                &[]
            },
            norm_args.as_ref().map_or(&[], |a| a.as_slice()),
        ];
        let mut args = [Arg::U64(0); 24];
        let mut n = 0;
        for part in parts {
            if n + part.len() > args.len() {
                return Err(GpuError::TooManyArgs {
                    got: n + part.len(),
                    max: args.len(),
                });
            }
            args[n..n + part.len()].copy_from_slice(part);
            n += part.len();
        }
        launch(cx, f, grid, &args[..n])
    }
}

pub(super) fn register(r: &mut Builders) {
    r.add::<Conv1d>(|c, cx| Ok(Box::new(build_conv1d(c, cx)?)));
    r.add::<Conv2d>(|c, cx| Ok(Box::new(build_conv2d(c, cx)?)));
}

/// The kernel suffix when every input and the output share one float dtype.
fn common_suffix(cx: &BuildCx, what: &str) -> Result<&'static str, GpuError> {
    let n = cx.inputs.len();
    if !(2..=3).contains(&n) || cx.outputs.len() != 1 {
        return Err(GpuError::arity(what, "2 or 3 and 1", n, cx.outputs.len()));
    }
    let suffix = cx.suffix(0)?;
    let dt = cx.inputs[0].dtype;
    if cx.inputs.iter().any(|f| f.dtype != dt) || cx.outputs[0].dtype != dt {
        return Err(GpuError::mixed_dtypes(what));
    }
    Ok(suffix)
}

/// Output length of one axis, as the CPU op computes it.
fn out_len(len: usize, pad: (usize, usize), k: usize, dil: usize, stride: usize) -> Option<usize> {
    let extent = dil.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
    let padded = len.checked_add(pad.0)?.checked_add(pad.1)?;
    (padded >= extent && stride > 0).then(|| (padded - extent) / stride + 1)
}

/// `(c / groups, o / groups)` when the weight matches.
fn groups_of(groups: usize, c: usize, o: usize, w_in: usize) -> Result<(usize, usize), GpuError> {
    if groups == 0 || !c.is_multiple_of(groups) || !o.is_multiple_of(groups) || w_in != c / groups {
        return Err(GpuError::refused("conv", format!(
            "{groups} groups do not fit {c} input channels, {o} output channels and a weight of {w_in} channels per group"
        )));
    }
    Ok((c / groups, o / groups))
}

fn check_bias(cx: &BuildCx, o: usize) -> Result<(), GpuError> {
    if cx.inputs.len() > 2 && cx.shape(2)? != [o] {
        return Err(GpuError::refused(
            "conv",
            format!("bias {} is not [{o}]", cx.inputs[2]),
        ));
    }
    Ok(())
}

fn build_conv1d(op: &Conv1d, cx: &BuildCx) -> Result<ConvGpu, GpuError> {
    let suffix = common_suffix(cx, "conv1d")?;
    let (x, w) = (cx.shape(0)?, cx.shape(1)?);
    if !(2..=3).contains(&x.len()) || w.len() != 3 {
        return Err(GpuError::refused(
            "conv1d",
            format!(
                "input {} and weight {} (ranks 2-3 and 3)",
                cx.inputs[0], cx.inputs[1]
            ),
        ));
    }
    let r = x.len();
    let last = op.layout == ConvLayout::ChannelsLast;
    let (c, t_in) = if last {
        (x[r - 1], x[r - 2])
    } else {
        (x[r - 2], x[r - 1])
    };
    let n = if r == 3 { x[0] } else { 1 };
    let (o, w_in, k) = (w[0], w[1], w[2]);
    let (cg, og) = groups_of(op.groups, c, o, w_in)?;
    check_bias(cx, o)?;
    let t_out = out_len(t_in, op.pad, k, op.dilation, op.stride).ok_or_else(|| {
        GpuError::refused(
            "conv1d",
            format!("{t_in} frames, kernel {k}, {}", crate::ops::Op::info(op)),
        )
    })?;
    let mut want = x.clone();
    if last {
        want[r - 1] = o;
        want[r - 2] = t_out;
    } else {
        want[r - 2] = o;
        want[r - 1] = t_out;
    }
    let out = cx.out_shape(0)?;
    if out != want {
        return Err(GpuError::refused(
            "conv1d",
            format!("output {out:?}, the convolution gives {want:?}"),
        ));
    }
    let ints = [
        ("channels", c),
        ("frames", t_in),
        ("output channels", o),
        ("output frames", t_out),
        ("groups", op.groups),
        ("kernel", k),
        ("stride", op.stride),
        ("dilation", op.dilation),
        ("padding", op.pad.0),
        ("padded frames", t_in + op.pad.0 + op.pad.1),
        ("taps", cg.saturating_mul(k)),
        (
            "frame reach",
            (t_out + DENSE_TQ)
                .saturating_mul(op.stride)
                .saturating_add(k.saturating_mul(op.dilation)),
        ),
    ];
    for (what, v) in ints {
        small(what, v)?;
    }
    let n_out = n * o * t_out;
    let layout = if last { "time-major" } else { "channels-first" };
    let i = |v: usize| Arg::I32(v as i32);
    // what the depthwise and im2col kernels take after their first size
    let window = [
        i(c),
        i(t_in),
        i(t_out),
        i(k),
        i(op.stride),
        i(op.dilation),
        i(op.pad.0),
    ];
    if cg == 1 && og == 1 {
        // the kernel indexes in 32 bits
        small("outputs", n_out)?;
        let threads = 128usize;
        let blocks = n_out.div_ceil(threads).clamp(1, 1 << 20) as u32;
        return Ok(ConvGpu {
            what: format!(
                "conv1d depthwise {layout} {c}ch k{k} s{} d{} ({n_out} outputs, {blocks} blocks)",
                op.stride, op.dilation
            ),
            f: cx
                .lib
                .function("conv", &format!("conv1d_depthwise_{suffix}"))?,
            grid: Grid::blocks(blocks, threads as u32),
            scalars: [&[Arg::U64(n_out as u64)], &window[..], &[i(last as usize)]].concat(),
            has_bias: cx.inputs.len() > 2,
            empty: n_out == 0,
            act: Some(-1),
            window: Some(Window {
                n,
                t_in,
                c,
                elem: cx.inputs[0].dtype.size_of(),
                last,
                t_out,
                ring: None,
            }),
            // a block per frame, a thread per channel
            norm_f: if last && o <= NORM_MAX_CHANNELS && n * t_out <= i32::MAX as usize {
                Some(
                    cx.lib
                        .function("conv", &format!("conv1d_depthwise_norm_{suffix}"))?,
                )
            } else {
                None
            },
            norm: None,
            gemm: None,
        });
    }
    let rows = n * t_out;
    if last && op.groups == 1 && (DENSE_GEMM_ROWS..=DENSE_GEMM_MAX_ROWS).contains(&rows) {
        let ck = c * k;
        let dtype = cx.inputs[0].dtype;
        let splits = k_splits(dtype, rows, o, ck);
        let sliced = match splits {
            1 => String::new(),
            s => format!(" in {s} slices of k"),
        };
        return Ok(ConvGpu {
            what: format!(
                "conv1d dense {layout} {c}->{o} k{k} s{} as im2col + cuBLAS GEMM {rows}x{o}x{ck}{sliced}",
                op.stride
            ),
            f: cx
                .lib
                .function("conv", &format!("conv1d_im2col_{suffix}"))?,
            grid: Grid::linear(rows * ck),
            scalars: [&[Arg::U64(rows as u64)], &window[..]].concat(),
            has_bias: cx.inputs.len() > 2,
            empty: n_out == 0,
            act: Some(-1),
            window: None,
            norm_f: None,
            norm: None,
            gemm: Some(Im2colGemm {
                gemm: Gemm::linear(dtype, rows, o, ck),
                splits,
                epilogue: cx
                    .lib
                    .function("linear", &format!("linear_epilogue_{suffix}"))?,
            }),
        });
    }
    let taps = cg * k;
    let warps = taps.div_ceil(DENSE_TAPS_PER_WARP).clamp(1, DENSE_MAX_WARPS);
    let blocks_for = |tq: usize| n * op.groups * og.div_ceil(DENSE_OW) * t_out.div_ceil(tq);
    let mut tq = DENSE_TQ;
    while tq > 1 && blocks_for(tq) < DENSE_MIN_BLOCKS {
        tq /= 2;
    }
    let blocks = blocks_for(tq);
    if blocks > i32::MAX as usize {
        return Err(GpuError::refused("conv1d", format!("{blocks} blocks")));
    }
    Ok(ConvGpu {
        what: format!(
            "conv1d dense {layout} {c}->{o} k{k} s{} groups {} ({DENSE_OW}x{tq} tiles, {blocks} blocks of {warps} warps)",
            op.stride, op.groups
        ),
        f: cx.lib.function("conv", &format!("conv1d_dense_{suffix}"))?,
        grid: Grid::blocks(blocks as u32, (warps * 32) as u32),
        scalars: vec![
            i(c),
            i(t_in),
            i(o),
            i(t_out),
            i(op.groups),
            i(k),
            i(op.stride),
            i(op.dilation),
            i(op.pad.0),
            i(last as usize),
            i(tq),
        ],
        has_bias: cx.inputs.len() > 2,
        empty: n_out == 0,
        act: Some(-1),
        window: None,
        norm_f: None,
        norm: None,
        gemm: None,
    })
}

fn build_conv2d(op: &Conv2d, cx: &BuildCx) -> Result<ConvGpu, GpuError> {
    let suffix = common_suffix(cx, "conv2d")?;
    let (x, w) = (cx.shape(0)?, cx.shape(1)?);
    if !(3..=4).contains(&x.len()) || w.len() != 4 {
        return Err(GpuError::refused(
            "conv2d",
            format!(
                "input {} and weight {} (ranks 3-4 and 4)",
                cx.inputs[0], cx.inputs[1]
            ),
        ));
    }
    let r = x.len();
    let n = if r == 4 { x[0] } else { 1 };
    let (c, h, wd) = (x[r - 3], x[r - 2], x[r - 1]);
    let (o, w_in, kh, kw) = (w[0], w[1], w[2], w[3]);
    groups_of(op.groups, c, o, w_in)?;
    check_bias(cx, o)?;
    let bad = || {
        GpuError::refused(
            "conv2d",
            format!("input {x:?}, weight {w:?}, {}", op.info()),
        )
    };
    let ho = out_len(h, op.pad[0], kh, op.dilation.0, op.stride.0).ok_or_else(bad)?;
    let wo = out_len(wd, op.pad[1], kw, op.dilation.1, op.stride.1).ok_or_else(bad)?;
    let mut want = x.clone();
    want[r - 3] = o;
    want[r - 2] = ho;
    want[r - 1] = wo;
    let out = cx.out_shape(0)?;
    if out != want {
        return Err(GpuError::refused(
            "conv2d",
            format!("output {out:?}, the convolution gives {want:?}"),
        ));
    }
    let ints = [
        ("channels", c),
        ("height", h + op.pad[0].0 + op.pad[0].1),
        ("width", wd + op.pad[1].0 + op.pad[1].1),
        ("output channels", o),
        ("kernel height", kh),
        ("kernel width", kw),
        (
            "row reach",
            ho.saturating_mul(op.stride.0)
                .saturating_add(kh.saturating_mul(op.dilation.0)),
        ),
        (
            "column reach",
            wo.saturating_mul(op.stride.1)
                .saturating_add(kw.saturating_mul(op.dilation.1)),
        ),
        ("taps", c.saturating_mul(kh).saturating_mul(kw)),
    ];
    for (what, v) in ints {
        small(what, v)?;
    }
    let n_out = n * o * ho * wo;
    let i = |v: usize| Arg::I32(v as i32);
    Ok(ConvGpu {
        what: format!("conv2d direct {c}->{o} k{kh}x{kw} ({n_out} outputs, one thread each)"),
        f: cx
            .lib
            .function("conv", &format!("conv2d_direct_{suffix}"))?,
        grid: Grid::linear(n_out),
        scalars: vec![
            Arg::U64(n_out as u64),
            i(c),
            i(h),
            i(wd),
            i(o),
            i(ho),
            i(wo),
            i(op.groups),
            i(kh),
            i(kw),
            i(op.stride.0),
            i(op.stride.1),
            i(op.dilation.0),
            i(op.dilation.1),
            i(op.pad[0].0),
            i(op.pad[1].0),
        ],
        has_bias: cx.inputs.len() > 2,
        empty: n_out == 0,
        act: None,
        window: None,
        norm_f: None,
        norm: None,
        gemm: None,
    })
}
