//! The GPU runner: a translated graph with every buffer planned up front,
//! run step by step. The first step launches kernels one by one (warm-up);
//! the second captures each run of consecutive GPU nodes as a CUDA graph;
//! later steps replay the graphs. Nodes left on the CPU split the step into
//! segments, with explicit copies around them.

mod build;
mod inspect;

use std::sync::Arc;

use cudarc::driver::CudaFunction;

use super::device::GpuDevice;
use super::memory::{
    copy_to_device, copy_to_host, copy_to_host_async, zero, DeviceBuffer, PinnedBuffer,
};
use super::op::{launch, Arg, Grid, Io, LaunchCx};
use super::tensor::{host_bytes, tensor_from_bytes, DevTensor, Precision};
use super::translator::{Placement, TranslateOptions, Translation};
use super::GpuError;
use crate::graph::check_input;
use crate::graph::{Graph, OutletId, StepRunner};
use crate::ops::{DType, OpError, OpState, Scratch, Tensor};
use crate::{Error, Result};

/// How the runner launches its GPU segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launches {
    /// Kernel by kernel, every step.
    Eager,
    /// One eager warm-up step, then CUDA graphs captured and replayed.
    Captured,
}

/// Options of a [`GpuRunner`].
#[derive(Debug, Clone)]
pub struct GpuRunnerOptions {
    pub translate: TranslateOptions,
    pub launches: Launches,
    /// Give every value its own memory, so any node's output can be read
    /// after a step ([`StepRunner::value`]); per-node comparisons need it.
    pub keep_values: bool,
}

impl GpuRunnerOptions {
    /// Captured launches, `precision`, switches from the environment.
    pub fn new(precision: Precision) -> GpuRunnerOptions {
        GpuRunnerOptions {
            translate: TranslateOptions::from_env(precision),
            launches: Launches::Captured,
            keep_values: false,
        }
    }
}

/// A CUDA graph of one segment. cudarc's graph is not `Send`; a runner (and
/// its graphs) is used by one thread at a time, which CUDA allows.
struct Captured(cudarc::driver::CudaGraph);
unsafe impl Send for Captured {}

#[derive(Debug)]
enum Segment {
    /// Consecutive GPU nodes; the last segment also advances the step counter.
    Gpu { nodes: Vec<usize>, advance: bool },
    /// Consecutive CPU nodes.
    Host(Vec<usize>),
}

/// Runs a graph on the GPU (with CPU fallback per node).
pub struct GpuRunner {
    dev: Arc<GpuDevice>,
    graph: Arc<Graph>,
    tr: Translation,
    segments: Vec<Segment>,
    /// Device tensor of every outlet that lives on the device.
    dev_values: Vec<Vec<Option<DevTensor>>>,
    /// Host copy of every outlet the host needs (CPU inputs, graph outputs).
    host_values: Vec<Vec<Tensor>>,
    /// Which outlets a CPU node or the graph's outputs read from the device.
    needs_host: Vec<Vec<bool>>,
    /// Which outlets produced on the host a GPU node reads.
    needs_device: Vec<Vec<bool>>,
    /// Which graph inputs the host reads (a CPU node, an output, or an
    /// input with no device copy); the others are not kept on the host.
    host_inputs: Vec<bool>,
    state_offsets: Vec<usize>,
    cpu_states: Vec<Option<Box<dyn OpState>>>,
    cpu_scratch: Vec<Scratch>,
    graphs: Vec<Option<Captured>>,
    advance: CudaFunction,
    launches: Launches,
    capture_failed: bool,
    /// Per graph output: left on the device after a step (its host copy
    /// is not refreshed; [`GpuRunner::device_output`] reads it there).
    on_device: Vec<bool>,
    steps: u64,
    stream_len: Option<i64>,
    staging: PinnedBuffer,
    // the memory, kept alive for the raw addresses above
    _arena: DeviceBuffer,
    _consts: Vec<Arc<DeviceBuffer>>,
    state: DeviceBuffer,
    scratch: DeviceBuffer,
    /// `[step: u64, stream_len: i64]`.
    params: DeviceBuffer,
    /// Bytes of activations, state and constants on the device.
    pub memory: MemoryReport,
}

/// Where the device memory of a plan goes.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryReport {
    pub arena: usize,
    /// Sum of every activation's size, had none been reused.
    pub unshared: usize,
    pub state: usize,
    pub consts: usize,
    pub scratch: usize,
}

fn gpu_err(node: &str, op: &'static str, e: GpuError) -> Error {
    Error::node(node, op, OpError::Other(format!("GPU: {e}")))
}

impl GpuRunner {
    /// The translation (placement of every node of the device graph).
    pub fn translation(&self) -> &Translation {
        &self.tr
    }

    /// The device graph it runs (fused nodes in place of the groups they
    /// compute), which [`Self::translation`] indexes.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Nodes on the GPU and on the CPU (constants and inputs not counted).
    pub fn placement_counts(&self) -> (usize, usize) {
        let gpu = self.tr.placements.iter().filter(|p| p.is_gpu()).count();
        let cpu = self
            .tr
            .placements
            .iter()
            .filter(|p| matches!(p, Placement::Cpu(_)))
            .count();
        (gpu, cpu)
    }

    /// Number of CUDA graphs replayed per step (0 before capture or when eager).
    pub fn captured_graphs(&self) -> usize {
        self.graphs.iter().filter(|g| g.is_some()).count()
    }

    /// Nodes (kernels and copies) of the captured graphs of one step; 0
    /// before capture or when eager.
    pub fn graph_nodes(&self) -> Result<usize> {
        let mut n = 0;
        for Captured(g) in self.graphs.iter().flatten() {
            n += super::capture::node_count(g)?;
        }
        Ok(n)
    }

    /// Whether a capture failed and the runner fell back to eager launches.
    pub fn capture_failed(&self) -> bool {
        self.capture_failed
    }

    /// Graph output `i` on the device: `None` where it is made on the
    /// host.
    pub fn device_output(&self, i: usize) -> Option<&DevTensor> {
        let o = self.graph.outputs.get(i)?.1;
        if !self.tr.placements[o.node].is_gpu() {
            return None;
        }
        self.dev_values[o.node][o.slot].as_ref()
    }

    /// Leaves graph outputs `outputs` on the device after each step, for a
    /// reader there ([`GpuRunner::device_output`]): their host copies
    /// ([`StepRunner::output`]) are no longer refreshed. False, having
    /// changed nothing, where one of them is made on the host.
    pub fn keep_on_device(&mut self, outputs: std::ops::Range<usize>) -> bool {
        if outputs.clone().any(|i| self.device_output(i).is_none()) {
            return false;
        }
        self.on_device.resize(self.graph.outputs.len(), false);
        for i in outputs {
            self.on_device[i] = true;
        }
        true
    }

    /// Whether graph output `i` is left on the device after a step
    /// ([`GpuRunner::keep_on_device`]).
    pub fn kept_on_device(&self, i: usize) -> bool {
        self.on_device.get(i) == Some(&true)
    }

    /// Steps run since the start or the last reset.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    fn launch_nodes(&self, nodes: &[usize], advance: bool) -> Result<()> {
        let cx = LaunchCx {
            gpu: &self.dev.ctx,
            blas: &self.dev.blas,
            step: self.params.ptr(),
            stream_len: self.params.ptr() + 8,
        };
        let mut ins: Vec<DevTensor> = Vec::with_capacity(8);
        for &id in nodes {
            let node = &self.graph.nodes[id];
            let Placement::Gpu(op) = &self.tr.placements[id] else {
                continue;
            };
            ins.clear();
            for o in &node.inputs {
                match &self.dev_values[o.node][o.slot] {
                    Some(t) => ins.push(t.clone()),
                    None => {
                        return Err(gpu_err(
                            &node.name,
                            node.op.name(),
                            GpuError::NotOnDevice {
                                input: self.graph.outlet_name(*o),
                            },
                        ))
                    }
                }
            }
            let outs: Vec<DevTensor> = self.dev_values[id].iter().flatten().cloned().collect();
            let io = Io {
                ins: &ins,
                outs: &outs,
                state: if op.state_bytes() > 0 {
                    self.state.ptr() + self.state_offsets[id] as u64
                } else {
                    0
                },
                scratch: if op.scratch_bytes() > 0 {
                    self.scratch.ptr()
                } else {
                    0
                },
            };
            op.launch(&cx, &io)
                .map_err(|e| gpu_err(&node.name, node.op.name(), e))?;
        }
        if advance {
            launch(
                &cx,
                &self.advance,
                Grid::blocks(1, 32),
                &[Arg::Ptr(self.params.ptr())],
            )
            .map_err(Error::Gpu)?;
        }
        Ok(())
    }

    /// Captures a segment and launches the graph; on any failure, says so
    /// once, ends the capture and launches the segment eagerly from now on.
    fn capture(&mut self, k: usize, nodes: &[usize], advance: bool) -> Result<()> {
        let gpu = &self.dev.ctx;
        let t0 = std::time::Instant::now();
        let result = super::capture::capture(gpu, || self.launch_nodes(nodes, advance));
        crate::gpu::timing::report(|| format!("captured {} nodes", nodes.len()), t0);
        match result {
            Ok(g) => {
                g.launch()
                    .map_err(|e| Error::Gpu(GpuError::Driver(format!("graph launch: {e}"))))?;
                self.graphs[k] = Some(Captured(g));
                Ok(())
            }
            Err(e) => {
                eprintln!("warning: CUDA-graph capture failed ({e}); launching kernels one by one");
                self.capture_failed = true;
                self.launch_nodes(nodes, advance)
            }
        }
    }

    fn upload(&self, id: usize, slot: usize) -> Result<()> {
        if let Some(t) = &self.dev_values[id][slot] {
            let bytes = host_bytes(&self.host_values[id][slot], t.dtype);
            copy_to_device(&self.dev.ctx, &bytes, t.ptr)?;
        }
        Ok(())
    }

    fn download(&mut self, id: usize, slot: usize) -> Result<()> {
        let Some(t) = self.dev_values[id][slot].clone() else {
            return Ok(());
        };
        let bytes = &mut self.staging.as_bytes_mut()[..t.bytes()];
        copy_to_host(&self.dev.ctx, t.ptr, bytes)?;
        self.unstage(id, slot, 0)
    }

    /// Turns the staged bytes of value `(id, slot)` at `offset` into its host
    /// mirror.
    fn unstage(&mut self, id: usize, slot: usize, offset: usize) -> Result<()> {
        let Some(t) = self.dev_values[id][slot].clone() else {
            return Ok(());
        };
        let logical = self.tr.facts[id][slot].dtype;
        let bytes = &self.staging.as_bytes()[offset..offset + t.bytes()];
        let host = &mut self.host_values[id][slot];
        if t.dtype == logical && logical == DType::F32 {
            host.ensure(DType::F32, &t.shape);
            let dst = host.as_slice_mut::<f32>()?;
            bytemuck::cast_slice_mut::<f32, u8>(dst).copy_from_slice(bytes);
        } else {
            *host = tensor_from_bytes(bytes, t.dtype, logical, &t.shape)?;
        }
        Ok(())
    }

    fn run_host(&mut self, nodes: &[usize]) -> Result<()> {
        self.dev.ctx.synchronize()?;
        for &id in nodes {
            let node = self.graph.nodes[id].clone();
            for o in &node.inputs {
                if self.needs_host[o.node][o.slot] && self.tr.placements[o.node].is_gpu() {
                    self.download(o.node, o.slot)?;
                }
            }
            let mut outs = std::mem::take(&mut self.host_values[id]);
            let ins: Vec<&Tensor> = node
                .inputs
                .iter()
                .map(|o| &self.host_values[o.node][o.slot])
                .collect();
            let r = match &mut self.cpu_states[id] {
                Some(st) => st.eval(&ins, &mut outs, &mut self.cpu_scratch[id]),
                None => node.op.eval(&ins, &mut outs, &mut self.cpu_scratch[id]),
            };
            self.host_values[id] = outs;
            r.map_err(|e| Error::node(&node.name, node.op.name(), e))?;
            for slot in 0..node.facts.len() {
                if self.needs_device[id][slot] {
                    self.upload(id, slot)?;
                }
            }
        }
        Ok(())
    }

    fn step_inner(&mut self, inputs: &[&Tensor]) -> Result<()> {
        self.copy_inputs(inputs)?;
        let segments = std::mem::take(&mut self.segments);
        let r = self.run_segments(&segments);
        self.segments = segments;
        r?;
        self.finish_step()
    }

    fn finish_step(&mut self) -> Result<()> {
        // every output copied back side by side, then one wait
        let graph = self.graph.clone();
        let mut staged = Vec::with_capacity(graph.outputs.len());
        let mut offset = 0;
        for (i, (_, o)) in graph.outputs.iter().enumerate() {
            if !self.tr.placements[o.node].is_gpu() || self.on_device.get(i) == Some(&true) {
                continue;
            }
            if let Some(t) = self.dev_values[o.node][o.slot].clone() {
                let dst = &mut self.staging.as_bytes_mut()[offset..offset + t.bytes()];
                copy_to_host_async(&self.dev.ctx, t.ptr, dst)?;
                staged.push((*o, offset));
                offset += super::memory::align(t.bytes());
            }
        }
        self.dev.ctx.synchronize()?;
        for (o, offset) in staged {
            self.unstage(o.node, o.slot, offset)?;
        }
        self.steps += 1;
        Ok(())
    }

    fn copy_inputs(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let graph = self.graph.clone();
        if inputs.len() != graph.inputs.len() {
            return Err(Error::Graph(format!(
                "graph has {} inputs, {} were given",
                graph.inputs.len(),
                inputs.len()
            )));
        }
        self.dev
            .ctx
            .ctx()
            .bind_to_thread()
            .map_err(GpuError::from)?;
        // each input staged at its own offset, so the copies need no wait
        // (the last step's ended with one, so staging is free)
        let mut offset = 0;
        for (k, (&id, t)) in graph.inputs.iter().zip(inputs).enumerate() {
            let node = &graph.nodes[id];
            let mut s = None;
            check_input(&node.name, &self.tr.facts[id][0], t, &mut s)?;
            if self.host_inputs[k] {
                self.host_values[id][0].copy_from(t);
            }
            if let Some(d) = self.dev_values[id][0].clone() {
                let buf = &mut self.staging.as_bytes_mut()[offset..offset + d.bytes()];
                to_storage(t, d.dtype, buf)?;
                copy_to_device(&self.dev.ctx, buf, d.ptr)?;
                offset += super::memory::align(d.bytes());
            }
        }
        Ok(())
    }

    fn run_segments(&mut self, segments: &[Segment]) -> Result<()> {
        for (k, seg) in segments.iter().enumerate() {
            match seg {
                Segment::Host(nodes) => self.run_host(nodes)?,
                Segment::Gpu { nodes, advance } => {
                    if let Some(g) = &self.graphs[k] {
                        g.0.launch()
                            .map_err(|e| GpuError::Driver(format!("graph launch: {e}")))?;
                    } else if self.launches == Launches::Captured
                        && self.steps >= 1
                        && !self.capture_failed
                    {
                        self.capture(k, nodes, *advance)?;
                    } else {
                        self.launch_nodes(nodes, *advance)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Writes `t` as `storage` bytes into `out` (f32 copied, bf16 rounded).
fn to_storage(t: &Tensor, storage: DType, out: &mut [u8]) -> Result<()> {
    match (t.dtype(), storage) {
        (DType::F32, DType::F32) => {
            let c = crate::ops::contig(t);
            out.copy_from_slice(bytemuck::cast_slice(c.as_slice::<f32>()?));
        }
        (DType::F32, DType::BF16) => {
            let c = crate::ops::contig(t);
            for (o, v) in out.chunks_exact_mut(2).zip(c.as_slice::<f32>()?) {
                o.copy_from_slice(&half::bf16::from_f32(*v).to_le_bytes());
            }
        }
        _ => out.copy_from_slice(&host_bytes(t, storage)),
    }
    Ok(())
}

impl StepRunner for GpuRunner {
    fn step(&mut self, inputs: &[&Tensor]) -> Result<()> {
        self.step_inner(inputs)
    }

    fn output(&self, i: usize) -> &Tensor {
        let o = self.graph.outputs[i].1;
        &self.host_values[o.node][o.slot]
    }

    fn reset(&mut self) {
        // The state, the step counter and the CPU nodes' states back to zero;
        // captured graphs stay valid (same addresses).
        let gpu = &self.dev.ctx;
        let _ = gpu.ctx().bind_to_thread();
        let r = zero(gpu, self.state.ptr(), self.state.bytes())
            .and_then(|_| copy_to_device(gpu, &0u64.to_le_bytes(), self.params.ptr()))
            .and_then(|_| copy_to_device(gpu, &(-1i64).to_le_bytes(), self.params.ptr() + 8))
            .and_then(|_| gpu.synchronize());
        if let Err(e) = r {
            eprintln!("warning: GPU reset failed: {e}");
        }
        for s in self.cpu_states.iter_mut().flatten() {
            s.reset();
            s.set_stream_len(None);
        }
        self.stream_len = None;
        self.steps = 0;
    }

    fn set_stream_len(&mut self, s: Option<i64>) {
        self.stream_len = s;
        let gpu = &self.dev.ctx;
        let v = s.unwrap_or(-1);
        if let Err(e) = copy_to_device(gpu, &v.to_le_bytes(), self.params.ptr() + 8)
            .and_then(|_| gpu.synchronize())
        {
            eprintln!("warning: could not set the stream length on the GPU: {e}");
        }
        for st in self.cpu_states.iter_mut().flatten() {
            st.set_stream_len(s);
        }
    }

    /// The value of the source graph's outlet `o`: the output of the device
    /// node computing it, `None` when it was fused away.
    fn value(&self, o: OutletId) -> Option<Tensor> {
        self.device_value(self.tr.device_outlet(o)?)
    }

    fn device(&self) -> &'static str {
        "cuda"
    }
}

impl GpuRunner {
    /// The value of the device graph's outlet `o` after a step.
    fn device_value(&self, o: OutletId) -> Option<Tensor> {
        if let Some(t) = self.dev_values.get(o.node)?.get(o.slot)?.clone() {
            if self.tr.placements[o.node].is_gpu()
                || matches!(self.tr.placements[o.node], Placement::Input)
            {
                let mut bytes = vec![0u8; t.bytes()];
                copy_to_host(&self.dev.ctx, t.ptr, &mut bytes).ok()?;
                return tensor_from_bytes(
                    &bytes,
                    t.dtype,
                    self.tr.facts[o.node][o.slot].dtype,
                    &t.shape,
                )
                .ok();
            }
        }
        Some(self.host_values.get(o.node)?.get(o.slot)?.clone())
    }
}
