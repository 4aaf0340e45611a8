//! Linear and MatMul. A Linear of few rows (a chunk step's) runs the skinny
//! kernel, bias included; otherwise cuBLAS, then one epilogue kernel for its
//! bias. What the rewrites fuse into a Linear (`gpu::rewrite`) is launched
//! by `linear_fused.rs`, which launches a plain Linear too.

use cudarc::driver::CudaFunction;

use super::linear_fused::{describe, scratch_bytes, Epilogue};
use super::linear_launch::launch_linear;
use crate::gpu::blas::{k_splits, Gemm};
use crate::gpu::op::{expect_io, BuildCx, GpuOp, Io, LaunchCx};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::matmul::{Linear, MatMul};
use crate::ops::DType;

/// Rows a skinny block holds (its largest compile-time row bound).
pub(crate) const SKINNY_GROUP: usize = 16;
/// Rows up to which the skinny kernel, in groups of [`SKINNY_GROUP`] rows
/// (a batch of streams' pulses), is used instead of cuBLAS. Measured on the
/// H100 (batched shipped model, captured f32 step): 2 groups beat cuBLAS
/// (4 streams: 0.85 vs 0.96 ms), 4 groups lose (8 streams: 1.39 vs 1.02 ms),
/// since every group reads the weights again.
const SKINNY_ROWS: usize = 2 * SKINNY_GROUP;

/// A Linear's GPU form on its own: the product and its bias. Fused with
/// its neighbours it becomes a [`FusedLinearGpu`] (`linear_fused.rs`),
/// which launches both.
#[derive(Debug, Clone)]
pub(crate) struct LinearGpu {
    pub(crate) gemm: Gemm,
    /// Whether input 2 is a bias.
    pub(crate) bias: bool,
    /// `linear_epilogue_*`, after cuBLAS, and `linear_epilogue_norm_*` in
    /// its place when the layer norm of the result is fused.
    pub(crate) epilogue: CudaFunction,
    pub(crate) epilogue_norm: CudaFunction,
    /// `skinny_linear_r*` for few rows (bias fused), and its warps per column.
    pub(crate) skinny: Option<CudaFunction>,
    pub(crate) warps_per_col: usize,
    /// Slices of k cuBLAS computes apart (in scratch), summed by the
    /// epilogue; 1: the product is written whole.
    pub(crate) splits: usize,
}

impl GpuOp for LinearGpu {
    fn describe(&self) -> String {
        describe(self, &Epilogue::NONE)
    }

    fn scratch_bytes(&self) -> usize {
        scratch_bytes(self, &Epilogue::NONE)
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        launch_linear(self, &Epilogue::NONE, cx, io)
    }
}

/// A MatMul, or a Linear with no bias whose product is stored wider than
/// its operands (a bf16 step's f32 logits): one cuBLAS GEMM.
#[derive(Debug)]
struct MatMulGpu {
    gemm: Gemm,
    /// The product's dtype.
    out: DType,
}

impl GpuOp for MatMulGpu {
    fn describe(&self) -> String {
        let g = &self.gemm;
        let into = match self.out == g.dtype {
            true => String::new(),
            false => format!(" into {}", self.out),
        };
        format!(
            "cuBLAS GEMM {}x{}x{} x{} {}{into}",
            g.m, g.n, g.k, g.batch, g.dtype
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("matmul", io, 2, 1)?;
        if io.outs[0].is_empty() {
            return Ok(());
        }
        cx.blas.gemm_into(
            &self.gemm,
            self.out,
            io.ins[0].ptr,
            io.ins[1].ptr,
            io.outs[0].ptr,
        )
    }

    fn widens(&self) -> bool {
        self.out != self.gemm.dtype
    }
}

pub(super) fn register(r: &mut Builders) {
    r.add::<Linear>(|_, cx| build_linear(cx));
    r.add::<MatMul>(build_matmul);
}

fn build_linear(cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let suffix = cx.suffix(0)?;
    let x = cx.shape(0)?;
    let w = cx.shape(1)?;
    let k = *x
        .last()
        .ok_or_else(|| GpuError::refused("linear", "scalar input"))?;
    let m = x[..x.len() - 1].iter().product();
    let n = w[0];
    let bias = cx.inputs.len() > 2;
    let (dtype, out) = (cx.inputs[0].dtype, cx.outputs[0].dtype);
    if out != dtype {
        // the skinny kernel and the epilogues store the operands' dtype
        if bias {
            return Err(GpuError::refused(
                "linear",
                format!("a {out} product of {dtype} operands with a bias"),
            ));
        }
        return Ok(Box::new(MatMulGpu {
            gemm: Gemm::linear(dtype, m, n, k),
            out,
        }));
    }
    let epilogue = cx
        .lib
        .function("linear", &format!("linear_epilogue_{suffix}"))?;
    let epilogue_norm = cx
        .lib
        .function("linear", &format!("linear_epilogue_norm_{suffix}"))?;
    let fits_i32 = [m, n, k].iter().all(|&v| v <= i32::MAX as usize);
    let skinny = if m <= SKINNY_ROWS && fits_i32 {
        let bound = m.clamp(1, SKINNY_GROUP).next_power_of_two();
        Some(
            cx.lib
                .function("linear", &format!("skinny_linear_r{bound}_{suffix}"))?,
        )
    } else {
        None
    };
    // long rows get more warps each, short rows share a block
    let warps_per_col = if k >= 512 { 8 } else { 4 };
    let splits = match skinny {
        None => k_splits(dtype, m, n, k),
        Some(_) => 1,
    };
    Ok(Box::new(LinearGpu {
        gemm: Gemm::linear(dtype, m, n, k),
        bias,
        epilogue,
        epilogue_norm,
        skinny,
        warps_per_col,
        splits,
    }))
}

fn build_matmul(op: &MatMul, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    cx.suffix(0)?;
    let (a, b) = (cx.shape(0)?, cx.shape(1)?);
    let (ra, rb) = (a.len(), b.len());
    let (m, ka) = if op.transpose_a {
        (a[ra - 1], a[ra - 2])
    } else {
        (a[ra - 2], a[ra - 1])
    };
    let n = if op.transpose_b { b[rb - 2] } else { b[rb - 1] };
    let batch_a: usize = a[..ra - 2].iter().product();
    let batch_b: usize = b[..rb - 2].iter().product();
    let out = cx.out_shape(0)?;
    let batch: usize = out[..out.len() - 2].iter().product();
    // Strided batches cover equal batch shapes and a shared (unbatched) B or A.
    let stride = |bat: usize, elems: usize, what: &str| -> Result<usize, GpuError> {
        if bat == batch {
            Ok(elems)
        } else if bat == 1 {
            Ok(0)
        } else {
            Err(GpuError::refused(
                "matmul",
                format!("{what} batch {bat} broadcasts in a way strided GEMM does not cover (output batch {batch})"),
            ))
        }
    };
    let gemm = Gemm {
        dtype: cx.inputs[0].dtype,
        m,
        n,
        k: ka,
        trans_a: op.transpose_a,
        trans_b: op.transpose_b,
        lda: a[ra - 1],
        ldb: b[rb - 1],
        ldc: n,
        batch,
        stride_a: stride(batch_a, m * ka, "A")?,
        stride_b: stride(batch_b, ka * n, "B")?,
        stride_c: m * n,
        alpha: 1.0,
        beta: 0.0,
    };
    Ok(Box::new(MatMulGpu {
        gemm,
        out: cx.outputs[0].dtype,
    }))
}
