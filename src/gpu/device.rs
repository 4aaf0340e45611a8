//! A device ready to run plans: context, compiled kernels and cuBLAS.

use super::blas::Blas;
use super::library::KernelLibrary;
use super::{GpuContext, GpuError};

/// Everything a plan needs from one GPU, made once per process and shared.
#[derive(Debug)]
pub struct GpuDevice {
    pub ctx: GpuContext,
    pub lib: KernelLibrary,
    pub blas: Blas,
}

impl GpuDevice {
    /// Opens device `ordinal`, compiles every kernel module and sets up cuBLAS;
    /// a typed error (never a panic) when any of it is missing.
    pub fn open(ordinal: usize) -> Result<GpuDevice, GpuError> {
        let ctx = GpuContext::new(ordinal)?;
        if !super::nvrtc_available() {
            return Err(GpuError::NoNvrtc);
        }
        let lib = KernelLibrary::load(&ctx)?;
        let blas = Blas::new(&ctx)?;
        Ok(GpuDevice { ctx, lib, blas })
    }
}
