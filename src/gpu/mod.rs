//! The CUDA backend (issue 6), so far its foundation: opening a device without
//! panicking, NVRTC compilation of the shipped `.cu` kernels, and the
//! element-wise kernels. The graph translator is not built yet.

pub mod compile;
pub mod context;
pub mod elementwise;

pub use compile::{compile, compile_for_device, nvrtc_available, Compiled, Image, KERNEL_SOURCES};
pub use context::{device_count, driver_available, probe, GpuContext, GpuError};
pub use elementwise::{Elementwise, GpuFloat};
