//! A device ready to run plans: context, compiled kernels and cuBLAS.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::blas::Blas;
use super::library::KernelLibrary;
use super::memory::DeviceBuffer;
use super::tensor::{host_bytes, Precision};
use super::{GpuContext, GpuError};
use crate::ops::Tensor;

/// Everything a plan needs from one GPU, made once per process and shared.
#[derive(Debug)]
pub struct GpuDevice {
    pub ctx: GpuContext,
    pub lib: Arc<KernelLibrary>,
    pub blas: Blas,
    /// Uploaded constants by the values they hold and the precision: every
    /// runner of a model (one per file or stream, on any lane, whichever
    /// graph holds the weight) shares its weights.
    consts: Arc<Mutex<HashMap<ConstKey, ConstEntry>>>,
}

/// A constant's storage, offset, shape, strides and precision.
type ConstKey = ((usize, usize), Vec<usize>, Vec<usize>, Precision);

type ConstEntry = (Tensor, Arc<DeviceBuffer>);

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
        Ok(GpuDevice {
            ctx,
            lib: Arc::new(lib),
            blas,
            consts: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    /// A lane: this device with a CUDA stream (and cuBLAS handle) of its
    /// own, sharing the compiled kernels and uploaded weights. Runners on
    /// different lanes run concurrently, so one thread per lane can stream
    /// one file each; runners on one lane must stay on one thread.
    pub fn lane(&self) -> Result<Arc<GpuDevice>, GpuError> {
        self.lane_tf32(self.blas.tf32)
    }

    /// A lane ([`GpuDevice::lane`]) whose f32 GEMMs use TF32 tensor cores,
    /// and whose own lanes do too.
    pub fn lane_with_tf32(&self) -> Result<Arc<GpuDevice>, GpuError> {
        self.lane_tf32(true)
    }

    fn lane_tf32(&self, tf32: bool) -> Result<Arc<GpuDevice>, GpuError> {
        let ctx = self.ctx.with_new_stream()?;
        let mut blas = Blas::new(&ctx)?;
        blas.tf32 = tf32;
        Ok(Arc::new(GpuDevice {
            ctx,
            lib: self.lib.clone(),
            blas,
            consts: self.consts.clone(),
        }))
    }

    /// The device copy of constant `value`, uploaded on first use in
    /// `precision`'s storage dtype.
    pub fn constant(
        &self,
        value: &Tensor,
        precision: Precision,
    ) -> Result<Arc<DeviceBuffer>, GpuError> {
        let key = (
            value.storage_key(),
            value.shape().to_vec(),
            value.strides().to_vec(),
            precision,
        );
        let mut map = self.consts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, b)) = map.get(&key) {
            return Ok(b.clone());
        }
        let dt = precision.storage(value.dtype());
        let b = Arc::new(DeviceBuffer::from_bytes(&self.ctx, &host_bytes(value, dt))?);
        // the tensor is kept alive so its storage's address is never
        // reused by other values
        map.insert(key, (value.clone(), b.clone()));
        Ok(b)
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
