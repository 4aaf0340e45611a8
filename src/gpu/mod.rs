//! The CUDA backend: a device with its compiled kernels and cuBLAS
//! ([`GpuDevice`]), device tensors and the memory plan, the GPU forms of the
//! ops ([`ops`]), the translator that places every node on the GPU or, with
//! explicit transfers, on the CPU, and the runner that captures each chunk
//! step as a CUDA graph and replays it.

pub mod blas;
pub mod capture;
pub mod compare;
pub mod compile;
pub mod context;
pub mod device;
pub mod floor;
pub mod kernel_cache;
pub mod library;
pub mod memory;
pub mod op;
pub mod ops;
pub mod plan;
pub mod rewrite;
pub mod runner;
pub mod tensor;
pub mod test_util;
pub mod timing;
pub mod translator;

pub use compile::{compile, compile_for_device, nvrtc_available, Compiled, Image, KERNEL_SOURCES};
pub use context::{device_count, driver_available, probe, GpuContext, GpuError};
pub use device::GpuDevice;
pub use kernel_cache::KernelCache;
pub use runner::{GpuRunner, GpuRunnerOptions, Launches};
pub use tensor::{DevTensor, ParsePrecisionError, Precision};
