//! A decoder step's choice of next tokens on the device (`kernels/
//! top_tokens.cu`, [`TopTokens`]): a block per row reads the row's logits
//! where the step left them and writes its `k` candidates, so a step hands
//! the host rows × k pairs instead of rows × vocabulary floats.
//!
//! f32 only: bf16 scores and candidates could not rank beams. A bf16
//! decoder keeps its logits, scores and choice in f32
//! (`whisper::gpu::F32_HEAD`); given bf16 ones, the node runs on the CPU.

use cudarc::driver::CudaFunction;

use crate::gpu::op::{expect_io, int, launch, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::top_tokens::{TopTokens, ROW_PARAMS};
use crate::ops::DType;

/// Threads per row: about 50 logits each for Whisper's vocabulary.
const THREADS: u32 = 1024;

#[derive(Debug)]
struct TopTokensGpu {
    f: CudaFunction,
    rows: usize,
    vocab: i32,
    k: i32,
}

impl GpuOp for TopTokensGpu {
    fn describe(&self) -> String {
        format!(
            "top_tokens {} rows of {} logits, {} each",
            self.rows, self.vocab, self.k
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("top tokens", io, 4, 3)?;
        if self.rows == 0 {
            return Ok(());
        }
        let grid = Grid {
            grid: (self.rows as u32, 1, 1),
            block: (THREADS, 1, 1),
            shared_bytes: 0,
        };
        let (i, o) = (io.ins, io.outs);
        let args = [
            Arg::Ptr(i[0].ptr),
            Arg::Ptr(i[1].ptr),
            Arg::Ptr(i[2].ptr),
            Arg::Ptr(i[3].ptr),
            Arg::Ptr(o[0].ptr),
            Arg::Ptr(o[1].ptr),
            Arg::Ptr(o[2].ptr),
            Arg::I32(self.vocab),
            Arg::I32(self.k),
        ];
        launch(cx, &self.f, grid, &args)
    }
}

pub(super) fn register(r: &mut Builders) {
    r.add::<TopTokens>(build);
}

fn build(op: &TopTokens, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let what = "top tokens";
    if cx.inputs.len() != 4 || cx.outputs.len() != 3 {
        return Err(GpuError::arity(
            what,
            "4 and 3",
            cx.inputs.len(),
            cx.outputs.len(),
        ));
    }
    let dtypes: Vec<DType> = cx
        .inputs
        .iter()
        .chain(cx.outputs)
        .map(|f| f.dtype)
        .collect();
    let want = [
        DType::F32,
        DType::I64,
        DType::F32,
        DType::Bool,
        DType::I64,
        DType::F32,
        DType::F32,
    ];
    if dtypes != want {
        return Err(GpuError::refused(
            what,
            format!("element types {dtypes:?} on the device (f32 logits and scores only)"),
        ));
    }
    let (logits, rules, cum, masks) = (cx.shape(0)?, cx.shape(1)?, cx.shape(2)?, cx.shape(3)?);
    let ok = logits.len() == 2
        && rules == [logits[0], ROW_PARAMS]
        && cum == [logits[0]]
        && masks == [2, logits[1]];
    if !ok {
        return Err(GpuError::refused(
            what,
            format!("logits {logits:?}, rules {rules:?}, scores {cum:?}, masks {masks:?}"),
        ));
    }
    if logits[0] > i32::MAX as usize {
        return Err(GpuError::too_large("rows", logits[0], "a grid"));
    }
    Ok(Box::new(TopTokensGpu {
        f: cx.lib.function("top_tokens", "top_tokens")?,
        rows: logits[0],
        vocab: int("vocabulary", logits[1])?,
        k: int("k", op.k)?,
    }))
}
