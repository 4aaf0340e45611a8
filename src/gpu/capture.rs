//! Recording launches into a CUDA graph: the stream in thread-local capture
//! mode, other threads' memory changes held off (they would invalidate it)
//! and this thread's allocations refused and counted while it lasts.

use std::fmt::Display;

use cudarc::driver::sys::{self, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaGraph;

use super::memory::{capture_guard, set_capturing};
use super::{GpuContext, GpuError};

/// Runs `launches` under capture on `gpu`'s stream and instantiates the
/// graph they recorded; the capture is ended whatever happens.
pub(crate) fn capture<E: Display>(
    gpu: &GpuContext,
    launches: impl FnOnce() -> Result<(), E>,
) -> Result<CudaGraph, GpuError> {
    let stream = gpu.stream();
    let _guard = capture_guard();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(|e| GpuError::Driver(format!("begin capture: {e}")))?;
    set_capturing(true);
    let r = launches();
    set_capturing(false);
    let g = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .map_err(|e| GpuError::Driver(format!("end capture: {e}")));
    match (r, g) {
        (Ok(()), Ok(Some(g))) => Ok(g),
        (Err(e), _) => Err(GpuError::Driver(format!("while capturing: {e}"))),
        (_, Err(e)) => Err(e),
        (_, Ok(None)) => Err(GpuError::Driver("capture gave no graph".into())),
    }
}

/// How many nodes (kernels, copies, memsets) a captured graph holds.
pub fn node_count(g: &CudaGraph) -> Result<usize, GpuError> {
    let mut n = 0usize;
    // SAFETY: a null node array asks only for the count
    unsafe { sys::cuGraphGetNodes(g.cu_graph(), std::ptr::null_mut(), &mut n) }
        .result()
        .map_err(|e| GpuError::Driver(format!("graph nodes: {e}")))?;
    Ok(n)
}
