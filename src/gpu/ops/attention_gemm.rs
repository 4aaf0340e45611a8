//! Scaled dot-product attention over long rows as two cuBLAS GEMMs around
//! a row softmax: scores = scale · Q·Kᵀ into scratch (f32), the weights in
//! place (or as bf16 beside them), then out = P·V. The row kernel
//! (`sdpa` in `attention.cu`) reads every key and value row once per query
//! row, which for Whisper's 1,500-frame encoder windows is 1,500 times
//! each; the GEMMs read them once per tile.
//!
//! Taken by the `Attention` builder when there is no mask, the batch axes
//! collapse to one stride per operand, and the rows are long enough for
//! the GEMMs to pay.

use cudarc::driver::CudaFunction;

use crate::gpu::blas::Gemm;
use crate::gpu::op::{expect_io, launch, Arg, GpuOp, Grid, Io, LaunchCx};
use crate::gpu::GpuError;
use crate::ops::DType;

/// Fewest keys and query rows for the GEMM form.
const MIN_KEYS: usize = 128;
const MIN_ROWS: usize = 32;
/// Most scratch the scores may take.
const MAX_SCRATCH: usize = 4 << 30;
/// Threads per softmax row.
const SOFTMAX_THREADS: u32 = 256;

/// One attention's geometry, as the `Attention` builder found it: `batch`
/// matrices, operand strides between them in elements (0: broadcast).
#[derive(Debug, Clone, Copy)]
pub(super) struct Geometry {
    pub dtype: DType,
    pub batch: usize,
    pub tq: usize,
    pub tk: usize,
    pub d: usize,
    pub dv: usize,
    pub stride_q: usize,
    pub stride_k: usize,
    pub stride_v: usize,
    pub scale: f32,
}

#[derive(Debug)]
pub(super) struct SdpaGemm {
    g: Geometry,
    softmax: CudaFunction,
}

impl SdpaGemm {
    /// The GEMM form of `g`, or `None` when the row kernel suits it better.
    pub(super) fn new(g: Geometry, softmax: CudaFunction) -> Option<SdpaGemm> {
        let fits = g.batch > 0
            && g.d > 0
            && g.dv > 0
            && g.tk >= MIN_KEYS
            && g.tq >= MIN_ROWS
            && matches!(g.dtype, DType::F32 | DType::BF16)
            && u32::try_from(g.batch * g.tq).is_ok()
            && scratch(&g).is_some_and(|b| b <= MAX_SCRATCH);
        fits.then_some(SdpaGemm { g, softmax })
    }
}

/// f32 scores of every row, then (bf16) the weights beside them.
fn scratch(g: &Geometry) -> Option<usize> {
    let n = g.batch.checked_mul(g.tq)?.checked_mul(g.tk)?;
    let weights = if g.dtype == DType::F32 { 0 } else { 2 * n };
    (4 * n).checked_add(weights)
}

impl GpuOp for SdpaGemm {
    fn describe(&self) -> String {
        let g = &self.g;
        format!(
            "sdpa as GEMMs {}x{} keys, width {}/{}, {} batches",
            g.tq, g.tk, g.d, g.dv, g.batch
        )
    }

    fn scratch_bytes(&self) -> usize {
        scratch(&self.g).unwrap_or(0)
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("sdpa", io, 3, 1)?;
        let g = &self.g;
        let scores = io.scratch;
        let weights = if g.dtype == DType::F32 {
            scores
        } else {
            scores + 4 * (g.batch * g.tq * g.tk) as u64
        };
        let qk = Gemm {
            dtype: g.dtype,
            m: g.tq,
            n: g.tk,
            k: g.d,
            trans_a: false,
            trans_b: true,
            lda: g.d,
            ldb: g.d,
            ldc: g.tk,
            batch: g.batch,
            stride_a: g.stride_q,
            stride_b: g.stride_k,
            stride_c: g.tq * g.tk,
            alpha: g.scale,
            beta: 0.0,
        };
        cx.blas
            .gemm_into(&qk, DType::F32, io.ins[0].ptr, io.ins[1].ptr, scores)?;
        launch(
            cx,
            &self.softmax,
            Grid {
                grid: ((g.batch * g.tq) as u32, 1, 1),
                block: (SOFTMAX_THREADS, 1, 1),
                shared_bytes: 0,
            },
            &[Arg::Ptr(scores), Arg::Ptr(weights), Arg::I64(g.tk as i64)],
        )?;
        let pv = Gemm {
            dtype: g.dtype,
            m: g.tq,
            n: g.dv,
            k: g.tk,
            trans_a: false,
            trans_b: false,
            lda: g.tk,
            ldb: g.dv,
            ldc: g.dv,
            batch: g.batch,
            stride_a: g.tq * g.tk,
            stride_b: g.stride_v,
            stride_c: g.tq * g.dv,
            alpha: 1.0,
            beta: 0.0,
        };
        cx.blas.gemm(&pv, weights, io.ins[2].ptr, io.outs[0].ptr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(tq: usize, tk: usize, dtype: DType) -> Geometry {
        Geometry {
            dtype,
            batch: 6,
            tq,
            tk,
            d: 64,
            dv: 64,
            stride_q: tq * 64,
            stride_k: tk * 64,
            stride_v: tk * 64,
            scale: 0.125,
        }
    }

    #[test]
    fn scratch_holds_f32_scores_and_bf16_weights_beside_them() {
        assert_eq!(
            scratch(&geometry(1500, 1500, DType::F32)),
            Some(6 * 1500 * 1500 * 4)
        );
        assert_eq!(
            scratch(&geometry(1500, 1500, DType::BF16)),
            Some(6 * 1500 * 1500 * 6)
        );
        let huge = Geometry {
            batch: usize::MAX / 2,
            ..geometry(1500, 1500, DType::F32)
        };
        assert_eq!(scratch(&huge), None);
    }
}
