//! Launching the element-wise kernels of `kernels/elementwise.cu`.

use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaModule, CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg,
};
use half::bf16;

use super::compile::Compiled;
use super::context::no_panic;
use super::{GpuContext, GpuError};
use crate::ops::{Binary, Unary};

/// An element type the kernels take; `SUFFIX` picks the kernel variant.
pub trait GpuFloat: DeviceRepr + Copy {
    /// `f32` or `bf16`, as in the kernel names.
    const SUFFIX: &'static str;
}

impl GpuFloat for f32 {
    const SUFFIX: &'static str = "f32";
}

impl GpuFloat for bf16 {
    const SUFFIX: &'static str = "bf16";
}

/// The kernel name of a binary op, if the module has one.
pub fn binary_kernel(op: Binary) -> Option<&'static str> {
    match op {
        Binary::Add => Some("add"),
        Binary::Mul => Some("mul"),
        _ => None,
    }
}

/// The kernel name of a unary op, if the module has one.
pub fn unary_kernel(op: Unary) -> Option<&'static str> {
    match op {
        Unary::Sigmoid => Some("sigmoid"),
        Unary::Silu => Some("silu"),
        _ => None,
    }
}

const BLOCK: u32 = 256;
// Enough blocks to fill an H100 many times over; the kernels grid-stride.
const MAX_BLOCKS: u64 = 65_535;

fn config(n: usize) -> LaunchConfig {
    let blocks = (n as u64).div_ceil(BLOCK as u64).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The element-wise module, compiled and loaded on one device.
#[derive(Debug)]
pub struct Elementwise {
    module: Arc<CudaModule>,
    /// How it was compiled (arch, CUBIN or PTX, compile time).
    pub compiled: Compiled,
}

impl Elementwise {
    /// Compiles (NVRTC) and loads the module.
    pub fn load(gpu: &GpuContext) -> Result<Elementwise, GpuError> {
        let (module, compiled) = gpu.load_module("elementwise")?;
        Ok(Elementwise { module, compiled })
    }

    fn function(&self, name: &str, suffix: &str) -> Result<CudaFunction, GpuError> {
        let full = format!("{name}_{suffix}");
        no_panic(|| Ok(self.module.load_function(&full)?))
    }

    /// `out = a op b`, where `b` is `a`-sized, a scalar, or a trailing vector
    /// (its length divides `a`'s and it repeats along the leading axes).
    pub fn binary<T: GpuFloat>(
        &self,
        gpu: &GpuContext,
        op: Binary,
        a: &CudaSlice<T>,
        b: &CudaSlice<T>,
        out: &mut CudaSlice<T>,
    ) -> Result<(), GpuError> {
        let name = binary_kernel(op)
            .ok_or_else(|| GpuError::Kernel(format!("no GPU kernel for binary {op:?}")))?;
        let (n, nb) = (a.len(), b.len());
        if out.len() != n {
            return Err(GpuError::Kernel(format!(
                "{name}: output has {} elements, input {n}",
                out.len()
            )));
        }
        if n == 0 {
            return Ok(());
        }
        if nb == 0 || n % nb != 0 {
            return Err(GpuError::Kernel(format!(
                "{name}: {nb} elements do not broadcast as a trailing vector over {n}"
            )));
        }
        let f = self.function(name, T::SUFFIX)?;
        let (n64, nb64) = (n as u64, nb as u64);
        no_panic(|| {
            let stream = gpu.stream();
            let mut l = stream.launch_builder(&f);
            l.arg(a).arg(b).arg(out).arg(&n64).arg(&nb64);
            unsafe { l.launch(config(n)) }?;
            Ok(())
        })
    }

    /// `out = op(x)`.
    pub fn unary<T: GpuFloat>(
        &self,
        gpu: &GpuContext,
        op: Unary,
        x: &CudaSlice<T>,
        out: &mut CudaSlice<T>,
    ) -> Result<(), GpuError> {
        let name = unary_kernel(op)
            .ok_or_else(|| GpuError::Kernel(format!("no GPU kernel for unary {op:?}")))?;
        let n = x.len();
        if out.len() != n {
            return Err(GpuError::Kernel(format!(
                "{name}: output has {} elements, input {n}",
                out.len()
            )));
        }
        if n == 0 {
            return Ok(());
        }
        let f = self.function(name, T::SUFFIX)?;
        let n64 = n as u64;
        no_panic(|| {
            let mut l = gpu.stream().launch_builder(&f);
            l.arg(x).arg(out).arg(&n64);
            unsafe { l.launch(config(n)) }?;
            Ok(())
        })
    }

    /// Host-to-host convenience for tests and probes: copies in, runs
    /// [`Self::binary`], copies out.
    pub fn binary_host<T: GpuFloat>(
        &self,
        gpu: &GpuContext,
        op: Binary,
        a: &[T],
        b: &[T],
    ) -> Result<Vec<T>, GpuError> {
        if a.is_empty() {
            return Ok(Vec::new());
        }
        let s = gpu.stream();
        let (da, db) = no_panic(|| Ok((s.clone_htod(a)?, s.clone_htod(b)?)))?;
        let mut out = no_panic(|| Ok(unsafe { s.alloc::<T>(a.len()) }?))?;
        self.binary(gpu, op, &da, &db, &mut out)?;
        no_panic(|| Ok(s.clone_dtoh(&out)?))
    }

    /// Host-to-host convenience for tests and probes, like [`Self::binary_host`].
    pub fn unary_host<T: GpuFloat>(
        &self,
        gpu: &GpuContext,
        op: Unary,
        x: &[T],
    ) -> Result<Vec<T>, GpuError> {
        if x.is_empty() {
            return Ok(Vec::new());
        }
        let s = gpu.stream();
        let dx = no_panic(|| Ok(s.clone_htod(x)?))?;
        let mut out = no_panic(|| Ok(unsafe { s.alloc::<T>(x.len()) }?))?;
        self.unary(gpu, op, &dx, &mut out)?;
        no_panic(|| Ok(s.clone_dtoh(&out)?))
    }
}
