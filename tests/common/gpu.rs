//! The GPU the GPU tests run on: `None`, said, when none is usable (CI),
//! unless PULSED_REQUIRE_GPU=1, where that is a failure.

use std::sync::Arc;

use pulsed::gpu::GpuDevice;

pub fn dev() -> Option<Arc<GpuDevice>> {
    match GpuDevice::shared() {
        Ok(d) => Some(d),
        Err(e) if std::env::var("PULSED_REQUIRE_GPU").as_deref() != Ok("1") => {
            eprintln!("no usable GPU ({e}); test skipped");
            None
        }
        Err(e) => panic!("PULSED_REQUIRE_GPU=1 but no usable GPU: {e}"),
    }
}
