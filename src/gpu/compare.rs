//! CPU-vs-GPU comparison of a pulsed model, chunk by chunk and node by
//! node: the library side of `pulsed compare` and of the GPU model tests.
//! The GPU runs on its own outputs (cumulative mode), so drift shows.

use std::sync::Arc;

use crate::graph::{OutletId, StepRunner};
use crate::ops::{Const, Tensor};
use crate::pulse::{PulsedModel, StreamingSession};
use crate::Result;

/// How one node's GPU output compares with the CPU's over every chunk.
#[derive(Debug, Clone)]
pub struct NodeDiff {
    pub node: usize,
    pub name: String,
    pub op: &'static str,
    /// Largest |GPU - CPU|.
    pub max_abs: f32,
    /// Largest `|GPU - CPU| / max(1, max |CPU|)` of a chunk.
    pub max_rel: f32,
    /// Elements beyond tolerance, and elements compared.
    pub beyond: usize,
    pub total: usize,
    /// The first chunk and flat index beyond tolerance.
    pub first_bad: Option<(u64, usize)>,
}

/// The comparison of every node over a run.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub nodes: Vec<NodeDiff>,
    pub chunks: u64,
    pub tolerance: f32,
}

impl Comparison {
    /// Nodes with any element beyond tolerance, in execution order of their
    /// first bad chunk.
    pub fn failures(&self) -> Vec<&NodeDiff> {
        let mut v: Vec<&NodeDiff> = self.nodes.iter().filter(|n| n.beyond > 0).collect();
        v.sort_by_key(|n| (n.first_bad.map_or(u64::MAX, |f| f.0), n.node));
        v
    }

    /// The node with the largest relative error.
    pub fn worst(&self) -> Option<&NodeDiff> {
        self.nodes
            .iter()
            .max_by(|a, b| a.max_rel.total_cmp(&b.max_rel))
    }
}

fn diff_into(d: &mut NodeDiff, cpu: &Tensor, gpu: &Tensor, chunk: u64, tol: f32) {
    let (c, g) = (cpu.to_f32_vec(), gpu.to_f32_vec());
    if c.len() != g.len() {
        d.beyond += c.len().max(g.len());
        d.total += c.len().max(g.len());
        d.max_rel = f32::INFINITY;
        d.first_bad.get_or_insert((chunk, 0));
        return;
    }
    let scale = c.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
    for (i, (a, b)) in g.iter().zip(&c).enumerate() {
        let e = (a - b).abs();
        let e = if e.is_nan() && !(a.is_nan() && b.is_nan()) {
            f32::INFINITY
        } else if e.is_nan() {
            0.0
        } else {
            e
        };
        d.max_abs = d.max_abs.max(e);
        d.max_rel = d.max_rel.max(e / scale);
        if e > tol * scale {
            d.beyond += 1;
            d.first_bad.get_or_insert((chunk, i));
        }
    }
    d.total += c.len();
}

/// Streams `samples` through `model` on the CPU and through `gpu` (a runner
/// made for `model.graph`; for `every_node`, a GPU runner made with
/// `keep_values`, or reused memory reads as errors), one pulse at a time, and compares
/// every non-constant node after each chunk step (only the graph outputs
/// when `every_node` is false). `tolerance` is relative to each chunk's
/// largest CPU magnitude (at least 1).
pub fn compare_pulsed(
    model: Arc<PulsedModel>,
    gpu: Box<dyn StepRunner>,
    samples: &[f32],
    tolerance: f32,
    every_node: bool,
) -> Result<Comparison> {
    let mut cpu = StreamingSession::new(model.clone())?;
    let mut gs = StreamingSession::with_runner(model.clone(), gpu)?;
    let g = &model.graph;
    let outlets: Vec<OutletId> = if every_node {
        g.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.op.as_any().is::<Const>())
            .flat_map(|(id, n)| (0..n.facts.len()).map(move |s| OutletId::new(id, s)))
            .collect()
    } else {
        g.outputs.iter().map(|(_, o)| *o).collect()
    };
    let mut nodes: Vec<NodeDiff> = outlets
        .iter()
        .map(|o| NodeDiff {
            node: o.node,
            name: g.outlet_name(*o),
            op: g.nodes[o.node].op.name(),
            max_abs: 0.0,
            max_rel: 0.0,
            beyond: 0,
            total: 0,
            first_bad: None,
        })
        .collect();
    let pulse = cpu.pulse();
    let mut compare = |cpu: &StreamingSession, gs: &StreamingSession, chunk: u64| {
        for (d, o) in nodes.iter_mut().zip(&outlets) {
            if let (Some(c), Some(v)) = (cpu.runner().value(*o), gs.runner().value(*o)) {
                diff_into(d, &c, &v, chunk, tolerance);
            }
        }
    };
    for block in samples.chunks(pulse) {
        cpu.push(block)?;
        gs.push(block)?;
        if cpu.steps() > 0 && block.len() == pulse {
            compare(&cpu, &gs, cpu.steps() - 1);
        }
    }
    cpu.finish()?;
    gs.finish()?;
    compare(&cpu, &gs, cpu.steps().saturating_sub(1));
    Ok(Comparison {
        nodes,
        chunks: cpu.steps(),
        tolerance,
    })
}

/// How the GPU side of [`compare_steps`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareMode {
    /// On its own outputs: errors propagate, so drift shows.
    Cumulative,
    /// Every GPU node fed the CPU's inputs: pins the node that is wrong.
    Reseeded,
}

/// Runs the pulsed `model` over `samples` pulse by pulse (the last one
/// padded with zeros, then `tail` more silent pulses) on the CPU runner and
/// on `gpu` (made for `model.graph` with `keep_values`), comparing every
/// node after every chunk. `tolerance` is relative to each chunk's largest
/// CPU magnitude (at least 1).
pub fn compare_steps(
    model: &PulsedModel,
    gpu: &mut super::GpuRunner,
    samples: &[f32],
    tail: usize,
    tolerance: f32,
    mode: CompareMode,
) -> Result<Comparison> {
    let g = &model.graph;
    let mut cpu = crate::graph::Runner::new(g.clone())?;
    StepRunner::reset(gpu);
    let stream = model.input_stream()?;
    let pulse = stream.pulse;
    let mut nodes: Vec<NodeDiff> = Vec::new();
    let mut index = std::collections::HashMap::new();
    let mut x = Tensor::zeros(crate::ops::DType::F32, &[pulse]);
    let chunks = samples.len().div_ceil(pulse) + tail;
    for chunk in 0..chunks {
        let from = (chunk * pulse).min(samples.len());
        let to = ((chunk + 1) * pulse).min(samples.len());
        let buf = x.as_slice_mut::<f32>()?;
        buf.fill(0.0);
        buf[..to - from].copy_from_slice(&samples[from..to]);
        if to == samples.len() && (chunk + 1) * pulse >= samples.len() && from < to {
            cpu.set_stream_len(Some(samples.len() as i64));
            StepRunner::set_stream_len(gpu, Some(samples.len() as i64));
        }
        cpu.step(&[&x])?;
        let got: Vec<(OutletId, Tensor)> = match mode {
            CompareMode::Reseeded => gpu.step_reseeded(&[&x], &cpu)?,
            CompareMode::Cumulative => {
                StepRunner::step(gpu, &[&x])?;
                g.nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| !n.op.as_any().is::<Const>())
                    .flat_map(|(id, n)| (0..n.facts.len()).map(move |s| OutletId::new(id, s)))
                    .filter_map(|o| Some((o, StepRunner::value(gpu, o)?)))
                    .collect()
            }
        };
        for (o, v) in got {
            let Some(c) = cpu.value(o) else { continue };
            let k = *index.entry(o).or_insert_with(|| {
                nodes.push(NodeDiff {
                    node: o.node,
                    name: g.outlet_name(o),
                    op: g.nodes[o.node].op.name(),
                    max_abs: 0.0,
                    max_rel: 0.0,
                    beyond: 0,
                    total: 0,
                    first_bad: None,
                });
                nodes.len() - 1
            });
            diff_into(&mut nodes[k], c, &v, chunk as u64, tolerance);
        }
    }
    Ok(Comparison {
        nodes,
        chunks: chunks as u64,
        tolerance,
    })
}
