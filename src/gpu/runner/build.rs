//! Planning a runner: who reads what and until when, constants on the
//! device, every activation placed in one arena by liveness (views share
//! their root's memory), state and scratch, and the step cut into segments
//! at the nodes left on the CPU. Everything is allocated here, once.

use std::sync::Arc;

use super::{GpuRunner, GpuRunnerOptions, MemoryReport, Segment};
use crate::gpu::device::GpuDevice;
use crate::gpu::memory::{align, DeviceBuffer, PinnedBuffer};
use crate::gpu::plan::{place, Interval};
use crate::gpu::tensor::DevTensor;
use crate::gpu::translator::{translate, Placement, Translation};
use crate::graph::{Graph, OutletId};
use crate::ops::{Const, Scratch, Tensor};
use crate::Result;

/// A value per outlet of every node.
type PerOutlet<T> = Vec<Vec<T>>;

fn per_outlet<T: Clone>(graph: &Graph, value: T) -> PerOutlet<T> {
    graph
        .nodes
        .iter()
        .map(|nd| vec![value.clone(); nd.facts.len()])
        .collect()
}

/// Who reads each outlet, and when last.
struct Uses {
    /// Execution position of every node.
    pos: Vec<usize>,
    /// Read on the host (by a CPU node or as a graph output) but made on the GPU.
    needs_host: PerOutlet<bool>,
    /// Read by a GPU node but made on the host.
    needs_device: PerOutlet<bool>,
    /// Read on the host, wherever made (a CPU node or a graph output).
    host_reads: PerOutlet<bool>,
    /// Position of the last reader (`usize::MAX`: read after the step).
    last_use: PerOutlet<usize>,
}

fn uses(graph: &Graph, order: &[usize], tr: &Translation, keep_values: bool) -> Uses {
    let on_gpu = |id: usize| tr.placements[id].is_gpu();
    let mut needs_host = per_outlet(graph, false);
    let mut needs_device = needs_host.clone();
    let mut host_reads = needs_host.clone();
    let mut last_use = per_outlet(graph, 0usize);
    let mut pos = vec![0; graph.nodes.len()];
    for (t, &id) in order.iter().enumerate() {
        pos[id] = t;
    }
    for &id in order {
        for o in &graph.nodes[id].inputs {
            if on_gpu(id) {
                if !on_gpu(o.node) {
                    needs_device[o.node][o.slot] = true;
                }
            } else {
                host_reads[o.node][o.slot] = true;
                needs_host[o.node][o.slot] |= on_gpu(o.node);
            }
            let l = &mut last_use[o.node][o.slot];
            *l = (*l).max(pos[id]);
        }
    }
    for (_, o) in &graph.outputs {
        host_reads[o.node][o.slot] = true;
        needs_host[o.node][o.slot] |= on_gpu(o.node);
        last_use[o.node][o.slot] = usize::MAX;
    }
    if keep_values {
        last_use.iter_mut().flatten().for_each(|l| *l = usize::MAX);
    }
    Uses {
        pos,
        needs_host,
        needs_device,
        host_reads,
        last_use,
    }
}

/// Uploads the constants GPU nodes read, each into its own buffer in its
/// storage dtype; returns the buffers and their bytes.
fn upload_consts(
    dev: &GpuDevice,
    graph: &Graph,
    tr: &Translation,
    uses: &Uses,
    dev_values: &mut PerOutlet<Option<DevTensor>>,
) -> Result<(Vec<Arc<DeviceBuffer>>, usize)> {
    let mut consts = Vec::new();
    let mut bytes = 0;
    for (id, node) in graph.nodes.iter().enumerate() {
        if !matches!(tr.placements[id], Placement::Const) || !uses.needs_device[id][0] {
            continue;
        }
        let c = node
            .op
            .as_any()
            .downcast_ref::<Const>()
            .expect("placement says Const");
        let p = tr.precisions[id];
        let buf = dev.constant(&c.value, p)?;
        bytes += buf.bytes();
        dev_values[id][0] = Some(DevTensor {
            ptr: buf.ptr(),
            dtype: p.storage(c.value.dtype()),
            shape: c.value.shape().to_vec(),
        });
        consts.push(buf);
    }
    Ok((consts, bytes))
}

/// The activation arena: roots (values with their own memory) placed by
/// liveness, views pointing into their root. Fills `dev_values` and returns
/// the arena and the bytes the roots would take unshared.
fn place_activations(
    dev: &GpuDevice,
    graph: &Graph,
    order: &[usize],
    tr: &Translation,
    uses: &Uses,
    dev_values: &mut PerOutlet<Option<DevTensor>>,
) -> Result<(DeviceBuffer, usize)> {
    let on_gpu = |id: usize| tr.placements[id].is_gpu();
    let is_const = |id: usize| matches!(tr.placements[id], Placement::Const);
    let (pos, last_use) = (&uses.pos, &uses.last_use);
    let mut root: PerOutlet<Option<(OutletId, usize)>> = per_outlet(graph, None);
    let mut intervals: Vec<Interval> = Vec::new();
    let mut interval_of: PerOutlet<Option<usize>> = per_outlet(graph, None);
    let mut unshared = 0usize;
    for &id in order {
        let lives_on_device =
            |slot: usize| on_gpu(id) || (!is_const(id) && uses.needs_device[id][slot]);
        for slot in 0..graph.nodes[id].facts.len() {
            if is_const(id) || !lives_on_device(slot) {
                continue;
            }
            let fact = tr.device_fact(id, slot);
            let bytes = fact
                .concrete_shape()
                .map_or(0, |s| s.iter().product::<usize>())
                * fact.dtype.size_of();
            if let Placement::Gpu(op) = &tr.placements[id] {
                if let (Some((input, offset)), 0) = (op.alias(), slot) {
                    let src = graph.nodes[id].inputs[input];
                    let r = root[src.node][src.slot].unwrap_or((src, 0));
                    root[id][slot] = Some((r.0, r.1 + offset));
                    if let Some(iv) = interval_of[r.0.node][r.0.slot] {
                        let l = last_use[id][slot].max(pos[id]);
                        intervals[iv].last = intervals[iv].last.max(l);
                    }
                    continue;
                }
            }
            let first = match &tr.placements[id] {
                Placement::Input => 0,
                _ => pos[id],
            };
            interval_of[id][slot] = Some(intervals.len());
            unshared += bytes;
            intervals.push(Interval {
                bytes,
                first,
                last: last_use[id][slot].max(pos[id]),
            });
        }
    }
    // graph inputs stay put for the whole step (they are copied in first)
    for &id in &graph.inputs {
        if let Some(iv) = interval_of[id][0] {
            intervals[iv].first = 0;
        }
    }
    let (offsets, arena_bytes) = place(&intervals);
    let arena = DeviceBuffer::alloc(&dev.ctx, arena_bytes)?;
    for &id in order {
        for slot in 0..graph.nodes[id].facts.len() {
            let fact = tr.device_fact(id, slot);
            let shape = fact.concrete_shape().unwrap_or_default();
            let ptr = if let Some(iv) = interval_of[id][slot] {
                arena.ptr() + offsets[iv] as u64
            } else if let Some((r, off)) = root[id][slot] {
                let base = match interval_of[r.node][r.slot] {
                    Some(iv) => arena.ptr() + offsets[iv] as u64,
                    None => match &dev_values[r.node][r.slot] {
                        Some(t) => t.ptr,
                        None => continue,
                    },
                };
                base + off as u64
            } else {
                continue;
            };
            dev_values[id][slot] = Some(DevTensor {
                ptr,
                dtype: fact.dtype,
                shape,
            });
        }
    }
    Ok((arena, unshared))
}

/// The step in execution order: runs of GPU nodes and of CPU nodes; the
/// last GPU segment (one is added if need be) advances the step counter.
fn segments(order: &[usize], tr: &Translation) -> Vec<Segment> {
    let mut segments: Vec<Segment> = Vec::new();
    for &id in order {
        match &tr.placements[id] {
            Placement::Input | Placement::Const => {}
            Placement::Gpu(_) => match segments.last_mut() {
                Some(Segment::Gpu { nodes, .. }) => nodes.push(id),
                _ => segments.push(Segment::Gpu {
                    nodes: vec![id],
                    advance: false,
                }),
            },
            Placement::Cpu(_) => match segments.last_mut() {
                Some(Segment::Host(nodes)) => nodes.push(id),
                _ => segments.push(Segment::Host(vec![id])),
            },
        }
    }
    match segments.last_mut() {
        Some(Segment::Gpu { advance, .. }) => *advance = true,
        _ => segments.push(Segment::Gpu {
            nodes: Vec::new(),
            advance: true,
        }),
    }
    segments
}

/// Pinned staging with room for the largest value, for every graph output
/// side by side (they come back with one wait) and for every graph input
/// side by side (they go in with none).
fn staging_bytes(graph: &Graph, dev_values: &PerOutlet<Option<DevTensor>>) -> usize {
    let side_by_side = |outlets: &mut dyn Iterator<Item = (usize, usize)>| -> usize {
        outlets
            .filter_map(|(node, slot)| dev_values[node][slot].as_ref())
            .map(|t| align(t.bytes()))
            .sum()
    };
    let outputs = side_by_side(&mut graph.outputs.iter().map(|(_, o)| (o.node, o.slot)));
    let inputs = side_by_side(&mut graph.inputs.iter().map(|&id| (id, 0)));
    let largest = dev_values
        .iter()
        .flatten()
        .flatten()
        .map(DevTensor::bytes)
        .max()
        .unwrap_or(0);
    largest.max(outputs).max(inputs)
}

impl GpuRunner {
    /// Translates and plans `graph` (facts concrete, or made concrete by
    /// `s`, the stream length of a whole-utterance run). The runner runs
    /// the translation's device graph (fused nodes in place of the groups
    /// they compute); [`StepRunner::value`](crate::graph::StepRunner::value)
    /// still takes `graph`'s outlets.
    pub fn new(
        dev: Arc<GpuDevice>,
        graph: impl Into<Arc<Graph>>,
        s: Option<i64>,
        opts: &GpuRunnerOptions,
    ) -> Result<GpuRunner> {
        let source: Arc<Graph> = graph.into();
        source.validate()?;
        source.topo_order()?;
        let tr = translate(&source, &dev, s, &opts.translate)?;
        let graph = tr.graph.clone();
        let order = tr.order.clone();
        let n = graph.nodes.len();
        let uses = uses(&graph, &order, &tr, opts.keep_values);
        let mut dev_values = per_outlet(&graph, None);
        let (consts, const_bytes) = upload_consts(&dev, &graph, &tr, &uses, &mut dev_values)?;
        let (arena, unshared) =
            place_activations(&dev, &graph, &order, &tr, &uses, &mut dev_values)?;

        let mut state_offsets = vec![0usize; n];
        let mut state_bytes = 0usize;
        let mut scratch_bytes = 0usize;
        for (offset, placement) in state_offsets.iter_mut().zip(&tr.placements) {
            if let Placement::Gpu(op) = placement {
                *offset = state_bytes;
                state_bytes += align(op.state_bytes());
                scratch_bytes = scratch_bytes.max(op.scratch_bytes());
            }
        }
        let gpu = &dev.ctx;
        let state = DeviceBuffer::alloc(gpu, state_bytes)?;
        let scratch = DeviceBuffer::alloc(gpu, scratch_bytes)?;
        let params =
            DeviceBuffer::from_bytes(gpu, &[0u64.to_le_bytes(), (-1i64).to_le_bytes()].concat())?;
        let staging = PinnedBuffer::alloc(gpu, staging_bytes(&graph, &dev_values))?;
        let advance = dev.lib.function("copy", "advance_step")?;

        // host mirrors: constants as they are, the rest filled as they come
        let host_values = graph
            .nodes
            .iter()
            .map(|node| match node.op.as_any().downcast_ref::<Const>() {
                Some(c) => vec![c.value.clone()],
                None => node.facts.iter().map(|_| Tensor::empty()).collect(),
            })
            .collect();
        let cpu_states = (0..n)
            .map(|id| match tr.placements[id] {
                Placement::Cpu(_) => graph.nodes[id].op.state(),
                _ => None,
            })
            .collect();
        let memory = MemoryReport {
            arena: arena.bytes(),
            unshared,
            state: state_bytes,
            consts: const_bytes,
            scratch: scratch_bytes,
        };
        let host_inputs = graph
            .inputs
            .iter()
            .map(|&id| dev_values[id][0].is_none() || uses.host_reads[id][0])
            .collect();
        let segments = segments(&order, &tr);
        let graphs = segments.iter().map(|_| None).collect();
        Ok(GpuRunner {
            dev,
            graph,
            tr,
            segments,
            dev_values,
            host_values,
            needs_host: uses.needs_host,
            needs_device: uses.needs_device,
            host_inputs,
            state_offsets,
            cpu_states,
            cpu_scratch: (0..n).map(|_| Scratch::default()).collect(),
            graphs,
            advance,
            launches: opts.launches,
            capture_failed: false,
            on_device: Vec::new(),
            steps: 0,
            stream_len: None,
            staging,
            _arena: arena,
            _consts: consts,
            state,
            scratch,
            params,
            memory,
        })
    }
}
