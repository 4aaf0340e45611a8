//! cuBLAS for every matmul: one handle on the plan's stream, its workspace
//! set up front (cuBLAS would otherwise allocate one inside a capture), and
//! plain f32 maths (no TF32) so f32 results match the CPU.

use std::ffi::c_void;

use cudarc::cublas::{result, sys, CudaBlas};

use super::context::no_panic;
use super::memory::DeviceBuffer;
use super::{GpuContext, GpuError};
use crate::ops::DType;

/// Environment variable: `1` lets f32 GEMMs use TF32 tensor cores (a
/// product's error grows from f32's to about 1e-3 relative; off unless asked).
pub const TF32_ENV: &str = "PULSED_TF32";

/// Workspace size recommended for Hopper.
const WORKSPACE_BYTES: usize = 32 << 20;

/// A cuBLAS handle bound to the context's stream, with its workspace.
#[derive(Debug)]
pub struct Blas {
    /// Dropped under [`super::memory::memory_change`] (cublasDestroy frees).
    blas: std::mem::ManuallyDrop<CudaBlas>,
    _workspace: DeviceBuffer,
    /// Whether f32 GEMMs may use TF32 tensor cores: off unless asked for
    /// ([`TF32_ENV`], or set here before the device is shared).
    pub tf32: bool,
}

/// One row-major GEMM: `C[b] = A[b] · B[b]` (each optionally transposed),
/// `batch` matrices `stride_*` elements apart; f32 accumulation.
#[derive(Debug, Clone, Copy)]
pub struct Gemm {
    pub dtype: DType,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// A is stored `[k, m]` (transposed) instead of `[m, k]`.
    pub trans_a: bool,
    /// B is stored `[n, k]` (transposed, a Linear weight) instead of `[k, n]`.
    pub trans_b: bool,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub batch: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
    pub alpha: f32,
    /// 0 overwrites C; 1 adds to it.
    pub beta: f32,
}

impl Gemm {
    /// `C[m,n] = A[m,k] · W[n,k]ᵀ`, the Linear layout, contiguous.
    pub fn linear(dtype: DType, m: usize, n: usize, k: usize) -> Gemm {
        Gemm {
            dtype,
            m,
            n,
            k,
            trans_a: false,
            trans_b: true,
            lda: k,
            ldb: k,
            ldc: n,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
            alpha: 1.0,
            beta: 0.0,
        }
    }
}

/// Slices of k a product is split into at most ([`k_splits`]).
pub const MAX_K_SPLITS: usize = 8;

/// How many slices of k an f32 Linear-layout product of `m` x `n` over `k`
/// should be computed in, as one batched GEMM whose partial products the
/// epilogue sums. Left to itself, cuBLAS splits a product with few output
/// tiles and a long k the same way, but sums the slices in a kernel of its
/// own before the epilogue's (two launches after the GEMM instead of one).
/// Slices double while the 32x32 output tiles of all slices fill at most two
/// waves of the H100's 132 SMs and each slice keeps 64 or more of k. Not
/// for bf16: its partial products would be rounded to bf16.
pub fn k_splits(dtype: DType, m: usize, n: usize, k: usize) -> usize {
    const MAX_CTAS: usize = 264;
    const MIN_SLICE: usize = 64;
    if dtype != DType::F32 {
        return 1;
    }
    let tiles = m.div_ceil(32) * n.div_ceil(32);
    let mut s = 1;
    while s < MAX_K_SPLITS
        && tiles * s * 2 <= MAX_CTAS
        && k.is_multiple_of(s * 2)
        && k / (s * 2) >= MIN_SLICE
    {
        s *= 2;
    }
    s
}

impl Gemm {
    /// This unbatched GEMM as `splits` GEMMs over equal slices of k, run as
    /// one strided batch: slice s reads A's and B's columns from s·k/splits
    /// and writes its partial product at C + s·m·n (row-major, contiguous).
    /// `split_k(1)` is the GEMM itself, into a contiguous C.
    pub fn split_k(&self, splits: usize) -> Gemm {
        let slice = self.k / splits;
        Gemm {
            k: slice,
            batch: splits,
            stride_a: if self.trans_a {
                slice * self.lda
            } else {
                slice
            },
            stride_b: if self.trans_b {
                slice
            } else {
                slice * self.ldb
            },
            ldc: self.n,
            stride_c: self.m * self.n,
            ..*self
        }
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: dropped once, here, and never used again
        super::memory::memory_change(|| unsafe { std::mem::ManuallyDrop::drop(&mut self.blas) });
    }
}

impl Blas {
    /// A handle on `gpu`'s stream with its workspace set.
    pub fn new(gpu: &GpuContext) -> Result<Blas, GpuError> {
        let workspace = DeviceBuffer::alloc(gpu, WORKSPACE_BYTES)?;
        no_panic(|| {
            // cublasCreate allocates: kept apart from other threads' captures
            let blas = super::memory::memory_change(|| CudaBlas::new(gpu.stream().clone()))
                .map_err(|e| GpuError::Driver(format!("cuBLAS: {e:?}")))?;
            let h = *blas.handle();
            unsafe {
                sys::cublasSetWorkspace_v2(h, workspace.ptr() as *mut c_void, WORKSPACE_BYTES)
                    .result()
                    .map_err(|e| GpuError::Driver(format!("cublasSetWorkspace: {e:?}")))?;
                sys::cublasSetMathMode(h, sys::cublasMath_t::CUBLAS_DEFAULT_MATH)
                    .result()
                    .map_err(|e| GpuError::Driver(format!("cublasSetMathMode: {e:?}")))?;
            }
            Ok(Blas {
                blas: std::mem::ManuallyDrop::new(blas),
                _workspace: workspace,
                tf32: std::env::var(TF32_ENV).is_ok_and(|v| v == "1"),
            })
        })
    }

    /// Runs `g` on device addresses `a`, `b`, `c`; row-major throughout.
    pub fn gemm(&self, g: &Gemm, a: u64, b: u64, c: u64) -> Result<(), GpuError> {
        self.gemm_into(g, g.dtype, a, b, c)
    }

    /// [`Blas::gemm`] with C stored as `c_dtype` (f32 products of bf16
    /// operands, for instance).
    pub fn gemm_into(
        &self,
        g: &Gemm,
        c_dtype: DType,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<(), GpuError> {
        let data_type = |d: DType| match d {
            DType::F32 => Ok(sys::cudaDataType::CUDA_R_32F),
            DType::BF16 => Ok(sys::cudaDataType::CUDA_R_16BF),
            DType::F16 => Ok(sys::cudaDataType::CUDA_R_16F),
            d => Err(GpuError::refused("GEMM", format!("no GEMM for {d}"))),
        };
        let (ty, c_ty) = (data_type(g.dtype)?, data_type(c_dtype)?);
        let compute = if g.dtype == DType::F32 && !self.tf32 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        } else if g.dtype == DType::F32 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let int = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| GpuError::too_large(format!("GEMM {what}"), v, "i32"))
        };
        let op = |t: bool| {
            if t {
                sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: swap the operands.
        let (m, n, k) = (int(g.n, "n")?, int(g.m, "m")?, int(g.k, "k")?);
        let (lda, ldb, ldc) = (int(g.ldb, "ldb")?, int(g.lda, "lda")?, int(g.ldc, "ldc")?);
        let alpha = g.alpha;
        let beta = g.beta;
        let h = *self.blas.handle();
        unsafe {
            result::gemm_strided_batched_ex(
                h,
                op(g.trans_b),
                op(g.trans_a),
                m,
                n,
                k,
                (&alpha as *const f32).cast(),
                b as *const c_void,
                ty,
                lda,
                g.stride_b as i64,
                a as *const c_void,
                ty,
                ldb,
                g.stride_a as i64,
                (&beta as *const f32).cast(),
                c as *mut c_void,
                c_ty,
                ldc,
                g.stride_c as i64,
                int(g.batch, "batch")?,
                compute,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| GpuError::Driver(format!("cuBLAS GEMM: {e:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_fill_two_waves_and_keep_64_of_k() {
        // the batched model's Linears at 32 streams (256 rows)
        assert_eq!(k_splits(DType::F32, 256, 256, 256), 4);
        assert_eq!(k_splits(DType::F32, 256, 256, 1024), 4);
        assert_eq!(k_splits(DType::F32, 256, 512, 256), 2);
        assert_eq!(k_splits(DType::F32, 256, 1024, 256), 1);
        // enough tiles already (128 streams), a short k, bf16
        assert_eq!(k_splits(DType::F32, 1024, 256, 1024), 1);
        assert_eq!(k_splits(DType::F32, 64, 64, 100), 1);
        assert_eq!(k_splits(DType::F32, 64, 32, 4096), MAX_K_SPLITS);
        assert_eq!(k_splits(DType::BF16, 256, 256, 1024), 1);
    }

    #[test]
    fn slices_address_the_columns_of_k() {
        // A [m, k] · W[n, k]ᵀ: slice s starts s·k/splits into each row
        let g = Gemm::linear(DType::F32, 6, 5, 12).split_k(3);
        assert_eq!((g.k, g.batch), (4, 3));
        assert_eq!((g.stride_a, g.stride_b, g.stride_c), (4, 4, 30));
        assert_eq!((g.lda, g.ldb, g.ldc), (12, 12, 5));
        // transposed A ([k, m]) and plain B ([k, n]): slices are row blocks
        let t = Gemm {
            trans_a: true,
            trans_b: false,
            lda: 6,
            ldb: 5,
            ..Gemm::linear(DType::F32, 6, 5, 12)
        }
        .split_k(3);
        assert_eq!((t.stride_a, t.stride_b), (24, 20));
        // one slice: the same single product
        let one = Gemm::linear(DType::F32, 6, 5, 12).split_k(1);
        assert_eq!((one.k, one.batch, one.ldc), (12, 1, 5));
    }
}
