//! A device ready to run plans: context, compiled kernels and cuBLAS.

use std::sync::{Arc, Mutex};

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

static SHARED: Mutex<Option<Arc<GpuDevice>>> = Mutex::new(None);

impl GpuDevice {
    /// Device 0, opened once per process and shared by every runner (its
    /// kernels are compiled once). A failed open is retried on the next call.
    pub fn shared() -> Result<Arc<GpuDevice>, GpuError> {
        let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = slot.as_ref() {
            return Ok(d.clone());
        }
        let d = Arc::new(GpuDevice::open(0)?);
        *slot = Some(d.clone());
        Ok(d)
    }
}
