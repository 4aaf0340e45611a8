//! Steps for looking inside the GPU runner: a per-node profile (`pulsed
//! bench`) and a reseeded step that feeds every GPU node the CPU's values
//! (`pulsed compare`). Both launch kernels one by one.

use super::{GpuRunner, Segment};
use crate::gpu::memory::copy_to_device;
use crate::gpu::tensor::host_bytes;
use crate::gpu::GpuError;
use crate::graph::{OutletId, StepRunner};
use crate::ops::Tensor;
use crate::{Error, Result};

impl GpuRunner {
    /// Runs one step with kernels launched one by one, and returns every
    /// non-constant node with its time in seconds: GPU time between CUDA
    /// events around its launches, wall time for CPU nodes (a profile).
    /// Nodes are the source graph's: a fused node's time is given to the
    /// node it replaced in place (a Linear's, with its fused epilogue).
    /// The flag says whether the node ran on the GPU.
    pub fn profile_step(&mut self, inputs: &[&Tensor]) -> Result<Vec<(usize, f64, bool)>> {
        use cudarc::driver::sys::CUevent_flags;
        self.copy_inputs(inputs)?;
        let segments = std::mem::take(&mut self.segments);
        let stream = self.dev.ctx.stream().clone();
        let mut events = Vec::new();
        let mut times = Vec::new();
        let mut r: Result<()> = Ok(());
        'all: for seg in &segments {
            match seg {
                Segment::Gpu { nodes, .. } => {
                    for &id in nodes {
                        let ev = |s: &cudarc::driver::CudaStream| {
                            s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                                .map_err(|e| Error::Gpu(GpuError::from(e)))
                        };
                        r = ev(&stream)
                            .and_then(|a| {
                                self.launch_nodes(&[id], false)?;
                                Ok((a, ev(&stream)?))
                            })
                            .map(|(a, b)| events.push((id, a, b)));
                        if r.is_err() {
                            break 'all;
                        }
                    }
                }
                Segment::Host(nodes) => {
                    for &id in nodes {
                        let t = std::time::Instant::now();
                        r = self.run_host(&[id]);
                        if r.is_err() {
                            break 'all;
                        }
                        times.push((id, t.elapsed().as_secs_f64(), false));
                    }
                }
            }
        }
        self.segments = segments;
        r?;
        self.launch_nodes(&[], true)?;
        self.dev.ctx.synchronize()?;
        for (id, a, b) in events {
            let ms = a.elapsed_ms(&b).map_err(GpuError::from)?;
            times.push((id, ms as f64 / 1e3, true));
        }
        self.finish_step()?;
        for t in &mut times {
            t.0 = self.tr.origins[t.0];
        }
        Ok(times)
    }

    /// One eager step in which every GPU node is fed the CPU's values: after
    /// each GPU node its outputs are read back (returned with the source
    /// outlets they compute, in execution order) and replaced by `cpu`'s
    /// values of those outlets, so an error stays in the node that made it.
    /// A fused node is compared, and reseeded, as the last node it absorbed
    /// on each output. `cpu` must have run this step already (on the source
    /// graph); the runner must have been made with `keep_values`.
    pub fn step_reseeded(
        &mut self,
        inputs: &[&Tensor],
        cpu: &dyn StepRunner,
    ) -> Result<Vec<(OutletId, Tensor)>> {
        self.copy_inputs(inputs)?;
        let segments = std::mem::take(&mut self.segments);
        let mut got = Vec::new();
        let r = (|| -> Result<()> {
            for seg in &segments {
                match seg {
                    Segment::Host(nodes) => self.run_host(nodes)?,
                    Segment::Gpu { nodes, .. } => {
                        for &id in nodes {
                            self.launch_nodes(&[id], false)?;
                            self.dev.ctx.synchronize()?;
                            for slot in 0..self.graph.nodes[id].facts.len() {
                                let o = self.tr.sources[id][slot];
                                let Some(v) = self.device_value(OutletId::new(id, slot)) else {
                                    continue;
                                };
                                got.push((o, v));
                                let (Some(c), Some(t)) =
                                    (cpu.value(o), self.dev_values[id][slot].clone())
                                else {
                                    continue;
                                };
                                copy_to_device(&self.dev.ctx, &host_bytes(&c, t.dtype), t.ptr)?;
                                self.dev.ctx.synchronize()?;
                            }
                        }
                    }
                }
            }
            Ok(())
        })();
        self.segments = segments;
        r?;
        self.launch_nodes(&[], true)?;
        self.finish_step()?;
        Ok(got)
    }
}
