//! The fused CTC head (`kernels/ctc.cu`): linear + online log-softmax per
//! frame, never writing the `[T, V]` logits.
//!
//! Scoring mode reads target ids on the device without checking them, so it
//! is built only when the targets are a constant, checked here; runtime
//! targets fall back to the CPU op, which checks every id.

use cudarc::driver::CudaFunction;

use crate::gpu::op::{
    expect_io, launch, max_threads_per_block, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx, MAX_SHARED,
};
use crate::gpu::ops::Builders;
use crate::gpu::tensor::float_suffix;
use crate::gpu::GpuError;
use crate::ops::ctc_head::{CtcHead, CtcHeadMode};
use crate::ops::DType;

/// Frames per block (`CTC_FRAMES` in the kernel).
const FRAMES: usize = 4;
/// Warps per block at most: they share out the vocabulary, two tokens each
/// for the shipped model's 29, so a chunk step's head is a short chain. 16
/// warps of the kernel's 71 registers fit a block's register file (32 would
/// not; `CTC_MAX_WARPS` is 32).
const MAX_WARPS: usize = 16;
/// Static shared memory a block may take besides the staged frames.
const SHARED_LIMIT: usize = MAX_SHARED - 4096;

#[derive(Debug)]
struct CtcHeadGpu {
    mode: CtcHeadMode,
    f: CudaFunction,
    t: usize,
    d: usize,
    v: usize,
    /// Threads per block: a warp per token up to [`MAX_WARPS`], and as many
    /// as the kernel's registers allow.
    threads: u32,
}

impl GpuOp for CtcHeadGpu {
    fn describe(&self) -> String {
        format!(
            "ctc_head {:?} (T {}, d {}, V {}; {FRAMES} frames per block)",
            self.mode, self.t, self.d, self.v
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        let (ins, outs) = match self.mode {
            CtcHeadMode::Greedy => (3, 2),
            CtcHeadMode::Score => (4, 1),
        };
        expect_io("ctc_head", io, ins, outs)?;
        if self.t == 0 {
            return Ok(());
        }
        let (targets, best_id, logp) = match self.mode {
            CtcHeadMode::Greedy => (0, io.outs[0].ptr, io.outs[1].ptr),
            CtcHeadMode::Score => (io.ins[3].ptr, 0, io.outs[0].ptr),
        };
        let blocks = self.t.div_ceil(FRAMES) as u32;
        let shared = (FRAMES * self.d * 4) as u32;
        launch(
            cx,
            &self.f,
            Grid::blocks(blocks, self.threads).with_shared(shared),
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(io.ins[1].ptr),
                Arg::Ptr(io.ins[2].ptr),
                Arg::Ptr(targets),
                Arg::Ptr(best_id),
                Arg::Ptr(logp),
                Arg::U64(self.t as u64),
                Arg::U64(self.d as u64),
                Arg::U64(self.v as u64),
            ],
        )
    }
}

fn err(why: impl std::fmt::Display) -> GpuError {
    GpuError::refused("ctc_head", why)
}

fn build_ctc_head(op: &CtcHead, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let (ins, outs) = match op.mode {
        CtcHeadMode::Greedy => (3, 2),
        CtcHeadMode::Score => (4, 1),
    };
    if cx.inputs.len() != ins || cx.outputs.len() != outs {
        return Err(err(format!(
            "{} inputs and {} outputs (expected {ins} and {outs})",
            cx.inputs.len(),
            cx.outputs.len()
        )));
    }
    let dt = cx.inputs[0].dtype;
    let suffix = float_suffix(dt).map_err(|_| err(format!("no float kernel for {dt}")))?;
    if cx.inputs[1].dtype != dt || cx.inputs[2].dtype != dt {
        return Err(err(format!(
            "features {}, weight {} and bias {} differ in dtype",
            cx.inputs[0], cx.inputs[1], cx.inputs[2]
        )));
    }
    let want: &[DType] = match op.mode {
        CtcHeadMode::Greedy => &[DType::I64, dt],
        CtcHeadMode::Score => &[dt],
    };
    let got: Vec<DType> = cx.outputs.iter().map(|f| f.dtype).collect();
    if got != want {
        return Err(err(format!("outputs are {got:?}, expected {want:?}")));
    }
    let (x, w, b) = (cx.shape(0)?, cx.shape(1)?, cx.shape(2)?);
    let (&[t, d], &[v, wd], &[bv]) = (&x[..], &w[..], &b[..]) else {
        return Err(err(format!(
            "features {x:?}, weight {w:?}, bias {b:?} do not fit a [T, d] x [V, d] head"
        )));
    };
    if wd != d || bv != v {
        return Err(err(format!(
            "features {x:?}, weight {w:?}, bias {b:?} do not fit a [T, d] x [V, d] head"
        )));
    }
    if v == 0 {
        return Err(err("a vocabulary of 0 tokens"));
    }
    if FRAMES * d * 4 > SHARED_LIMIT {
        return Err(err(format!(
            "{d} features per frame do not fit in shared memory (at most {})",
            SHARED_LIMIT / (FRAMES * 4)
        )));
    }
    if t.div_ceil(FRAMES) > i32::MAX as usize {
        return Err(err(format!("{t} frames")));
    }
    if op.mode == CtcHeadMode::Score {
        check_targets(cx, t, v)?;
    }
    let f = cx.lib.function("ctc", &format!("ctc_head_{suffix}"))?;
    let room = max_threads_per_block(&f).map_err(|e| err(format!("kernel attributes: {e}")))?;
    let warps = v.clamp(1, MAX_WARPS).min((room as usize / 32).max(1));
    Ok(Box::new(CtcHeadGpu {
        mode: op.mode,
        f,
        t,
        d,
        v,
        threads: 32 * warps as u32,
    }))
}

/// Scoring needs constant targets `[T]` i64 inside `0..v`: the kernel reads
/// them unchecked.
fn check_targets(cx: &BuildCx, t: usize, v: usize) -> Result<(), GpuError> {
    let tg = cx.consts.get(3).copied().flatten().ok_or_else(|| {
        err("runtime target ids are checked by the CPU op only (scoring runs on the GPU with constant targets)")
    })?;
    if tg.shape() != [t] {
        return Err(err(format!("targets {:?} for {t} frames", tg.shape())));
    }
    let ids = tg
        .to_vec::<i64>()
        .map_err(|e| err(format!("targets: {e}")))?;
    if let Some((i, bad)) = ids
        .iter()
        .enumerate()
        .find(|(_, &id)| id < 0 || id as u64 >= v as u64)
    {
        return Err(err(format!(
            "target id {bad} at frame {i} is outside 0..{v}"
        )));
    }
    Ok(())
}

pub(super) fn register(r: &mut Builders) {
    r.add::<CtcHead>(build_ctc_head);
}
