//! The launch floor of a chunk step: `n` dependent kernels that do nothing
//! but wait for their predecessor (the runner's one-thread step-counter
//! kernel), launched one by one from the host and replayed as one CUDA
//! graph, with the device's current launch settings (PDL on or off). Their
//! ratio is the most any captured step of `n` kernels can gain over eager
//! launches: each kernel's own work adds the same time to both sides.

use std::time::Instant;

use super::capture::{capture, node_count};
use super::memory::{copy_to_host, DeviceBuffer};
use super::op::{launch, Arg, Grid, LaunchCx};
use super::{GpuDevice, GpuError};

/// Median wall time, host to host, of `kernels` empty kernels.
#[derive(Debug, Clone, Copy)]
pub struct LaunchFloor {
    pub kernels: usize,
    /// Launched one by one, then one wait.
    pub eager_s: f64,
    /// One replayed graph, then one wait.
    pub graph_s: f64,
    /// Nodes of the captured graph (one per kernel).
    pub graph_nodes: usize,
    /// Kernels that ran, eager and replayed, warm-up included, as counted
    /// on the device.
    pub ran: u64,
}

/// Measures the floor of `kernels` launches, the median of `reps` runs of each.
pub fn launch_floor(dev: &GpuDevice, kernels: usize, reps: usize) -> Result<LaunchFloor, GpuError> {
    let gpu = &dev.ctx;
    let counter = DeviceBuffer::alloc(gpu, 8)?;
    let empty = dev.lib.function("copy", "advance_step")?;
    let cx = LaunchCx {
        gpu,
        blas: &dev.blas,
        step: counter.ptr(),
        stream_len: 0,
    };
    let step = || -> Result<(), GpuError> {
        for _ in 0..kernels {
            launch(&cx, &empty, Grid::blocks(1, 32), &[Arg::Ptr(counter.ptr())])?;
        }
        Ok(())
    };
    let time = |run: &dyn Fn() -> Result<(), GpuError>| -> Result<f64, GpuError> {
        for _ in 0..WARM_UP {
            run()?;
        }
        gpu.synchronize()?;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps.max(1) {
            let t = Instant::now();
            run()?;
            gpu.synchronize()?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    };
    let eager_s = time(&step)?;
    let graph = capture(gpu, step)?;
    let graph_nodes = node_count(&graph)?;
    let graph_s = time(&|| {
        graph
            .launch()
            .map_err(|e| GpuError::Driver(format!("graph launch: {e}")))
    })?;
    let mut ran = [0u8; 8];
    copy_to_host(gpu, counter.ptr(), &mut ran)?;
    Ok(LaunchFloor {
        kernels,
        eager_s,
        graph_s,
        graph_nodes,
        ran: u64::from_le_bytes(ran),
    })
}

/// Runs of each kind before the timed ones.
pub const WARM_UP: usize = 20;
