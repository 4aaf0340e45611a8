//! CPU-vs-GPU comparison of a pulsed model, chunk by chunk and node by
//! node: the library side of `pulsed compare` and of the GPU model tests.
//! The GPU runs on its own outputs (cumulative mode), so drift shows.
//!
//! Nodes are the source graph's (the CPU's). The GPU runs a device graph in
//! which the fusion rewrites (`gpu::rewrite`) replaced groups of nodes by
//! one fused node: a fused node's output is compared with the CPU output of
//! the last node it absorbed on that output (a Linear with its activation
//! and residual add, with the Add's), and reseeded with it; the values in
//! between exist only on the CPU and are skipped.

use std::collections::HashMap;
use std::sync::Arc;

use crate::graph::{Graph, OutletId, StepRunner};
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
    /// The largest tolerance a step allowed (above the run's with a bf16
    /// budget, [`Comparer::with_budget`]).
    pub allowed: f32,
    /// Elements beyond tolerance, and elements compared.
    pub beyond: usize,
    pub total: usize,
    /// The first chunk and flat index beyond tolerance.
    pub first_bad: Option<(u64, usize)>,
    /// The relative error of each chunk compared (chunk, error), for plots.
    pub per_chunk: Vec<(u64, f32)>,
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

/// `max |a - b| / max(1, max |a|)`; infinite when the sizes differ or one
/// side alone is NaN.
fn relative_error(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (a.to_f32_vec(), b.to_f32_vec());
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
    a.iter().zip(&b).fold(0f32, |m, (x, y)| {
        let e = (x - y).abs();
        match (e.is_nan(), x.is_nan() && y.is_nan()) {
            (true, true) => m,
            (true, false) => f32::INFINITY,
            _ => m.max(e / scale),
        }
    })
}

fn diff_into(d: &mut NodeDiff, cpu: &Tensor, gpu: &Tensor, chunk: u64, tol: f32) {
    d.allowed = d.allowed.max(tol);
    let (c, g) = (cpu.to_f32_vec(), gpu.to_f32_vec());
    if c.len() != g.len() {
        d.beyond += c.len().max(g.len());
        d.total += c.len().max(g.len());
        d.max_rel = f32::INFINITY;
        d.first_bad.get_or_insert((chunk, 0));
        return;
    }
    let scale = c.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
    let mut chunk_rel = 0f32;
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
        chunk_rel = chunk_rel.max(e / scale);
        if e > tol * scale {
            d.beyond += 1;
            d.first_bad.get_or_insert((chunk, i));
        }
    }
    d.total += c.len();
    d.per_chunk.push((chunk, chunk_rel));
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
            allowed: 0.0,
            beyond: 0,
            total: 0,
            first_bad: None,
            per_chunk: Vec::new(),
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
/// node after every chunk. `samples` are the input's frames one after the
/// other (audio samples, or feature frames of `n_mels` values for a
/// streamed Whisper encoder). `tolerance` is relative to each chunk's
/// largest CPU magnitude (at least 1).
pub fn compare_steps(
    model: &PulsedModel,
    gpu: &mut super::GpuRunner,
    samples: &[f32],
    tail: usize,
    tolerance: f32,
    mode: CompareMode,
) -> Result<Comparison> {
    compare_steps_with(model, gpu, samples, tail, tolerance, None, mode, None, None)
}

/// [`compare_steps`], comparing the GPU with a saved `reference` instead of
/// the live CPU when given (the CPU still runs, to feed reseeded nodes),
/// recording the CPU's values into `record` when given, and allowing each
/// node `bf16_budget` times what bf16 storage costs it when given
/// ([`Comparer::with_budget`]).
#[allow(clippy::too_many_arguments)]
pub fn compare_steps_with(
    model: &PulsedModel,
    gpu: &mut super::GpuRunner,
    samples: &[f32],
    tail: usize,
    tolerance: f32,
    bf16_budget: Option<f32>,
    mode: CompareMode,
    reference: Option<&Reference>,
    mut record: Option<&mut Reference>,
) -> Result<Comparison> {
    let g = &model.graph;
    let mut cpu = crate::graph::Runner::new(g.clone())?;
    StepRunner::reset(gpu);
    let (pulse, shape) = input_pulse(model)?;
    let inner: usize = shape[1..].iter().product();
    if inner == 0 || !samples.len().is_multiple_of(inner) {
        return Err(crate::Error::Graph(format!(
            "{} input values are not whole frames of {inner}",
            samples.len()
        )));
    }
    let frames = samples.len() / inner;
    let mut cmp = Comparer::new(g, tolerance, mode);
    if let Some(factor) = bf16_budget {
        let mut rounded = crate::graph::Runner::new(g.clone())?;
        rounded.round_to_bf16();
        cmp = cmp.with_budget(rounded, factor);
    }
    let mut x = Tensor::zeros(crate::ops::DType::F32, &shape);
    let chunks = frames.div_ceil(pulse) + tail;
    for chunk in 0..chunks {
        let from = (chunk * pulse).min(frames);
        let to = ((chunk + 1) * pulse).min(frames);
        let buf = x.as_slice_mut::<f32>()?;
        buf.fill(0.0);
        buf[..(to - from) * inner].copy_from_slice(&samples[from * inner..to * inner]);
        if to == frames && (chunk + 1) * pulse >= frames && from < to {
            cpu.set_stream_len(Some(frames as i64));
            cmp.set_stream_len(Some(frames as i64));
            StepRunner::set_stream_len(gpu, Some(frames as i64));
        }
        cmp.step_with(&mut cpu, gpu, &[&x], reference, record.as_deref_mut())?;
    }
    Ok(cmp.finish())
}

/// The streaming input's pulse and its concrete shape per step: the stream
/// axis first (samples `[P]`, feature frames `[P, n_mels]`).
fn input_pulse(model: &PulsedModel) -> Result<(usize, Vec<usize>)> {
    let stream = model.input_stream()?;
    let input = model
        .graph
        .inputs
        .first()
        .ok_or_else(|| crate::Error::Graph("the pulsed graph has no input".into()))?;
    let fact = &model.graph.nodes[*input].facts[0];
    let shape: Option<Vec<usize>> = fact
        .shape
        .iter()
        .map(|d| d.as_const().and_then(|v| usize::try_from(v).ok()))
        .collect();
    match shape {
        Some(shape) if stream.axis == 0 && shape.first() == Some(&stream.pulse) => {
            Ok((stream.pulse, shape))
        }
        _ => Err(crate::Error::Graph(format!(
            "compare streams along the input's first axis; the input is {fact} (stream axis {})",
            stream.axis
        ))),
    }
}

/// Node-by-node comparison of one graph run step by step on the CPU
/// runner and on a GPU runner made for the same graph (or one built the
/// same way, so node ids match) with `keep_values`.
pub struct Comparer<'g> {
    g: &'g Graph,
    mode: CompareMode,
    tolerance: f32,
    /// A CPU runner of the same graph that rounds every value to bf16, and
    /// how many times its distance from the plain CPU a node may be off.
    budget: Option<(crate::graph::Runner, f32)>,
    nodes: Vec<NodeDiff>,
    index: HashMap<OutletId, usize>,
    steps: u64,
}

impl<'g> Comparer<'g> {
    /// `tolerance` is relative to each step's largest CPU magnitude (at
    /// least 1).
    pub fn new(g: &'g Graph, tolerance: f32, mode: CompareMode) -> Comparer<'g> {
        Comparer {
            g,
            mode,
            tolerance,
            budget: None,
            nodes: Vec::new(),
            index: HashMap::new(),
            steps: 0,
        }
    }

    /// Judges a bf16 GPU by what bf16 storage costs: a node may be off by
    /// `factor` times the distance between the CPU and `rounded` (a runner
    /// of the same graph, built the same way, after
    /// [`Runner::round_to_bf16`](crate::graph::Runner::round_to_bf16)) at
    /// that step, or by the tolerance when that is more. A fixed tolerance
    /// cannot do both: bf16 drift grows through a network, most where
    /// values cancel (a log of small powers, a norm of a residual), so a
    /// bound loose enough there hides a wrong kernel elsewhere.
    pub fn with_budget(mut self, rounded: crate::graph::Runner, factor: f32) -> Comparer<'g> {
        self.budget = Some((rounded, factor));
        self
    }

    /// Tells the bf16 runner of the budget the stream's length.
    pub fn set_stream_len(&mut self, s: Option<i64>) {
        if let Some((r, _)) = &mut self.budget {
            r.set_stream_len(s);
        }
    }

    /// Runs one step of `inputs` on `cpu`, then on `gpu`, and compares
    /// every node the GPU kept.
    pub fn step(
        &mut self,
        cpu: &mut crate::graph::Runner,
        gpu: &mut super::GpuRunner,
        inputs: &[&Tensor],
    ) -> Result<()> {
        self.step_with(cpu, gpu, inputs, None, None)
    }

    /// [`Comparer::step`], comparing the GPU with a saved `reference`
    /// instead of the live CPU when given, and recording the CPU's values
    /// into `record` when given.
    pub fn step_with(
        &mut self,
        cpu: &mut crate::graph::Runner,
        gpu: &mut super::GpuRunner,
        inputs: &[&Tensor],
        reference: Option<&Reference>,
        mut record: Option<&mut Reference>,
    ) -> Result<()> {
        let (g, chunk) = (self.g, self.steps);
        cpu.step(inputs)?;
        if let Some((r, _)) = &mut self.budget {
            r.step(inputs)?;
        }
        let got: Vec<(OutletId, Tensor)> = match self.mode {
            CompareMode::Reseeded => gpu.step_reseeded(inputs, cpu)?,
            CompareMode::Cumulative => {
                StepRunner::step(gpu, inputs)?;
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
            let tolerance = match &self.budget {
                Some((r, factor)) => r.value(o).map_or(self.tolerance, |b| {
                    self.tolerance.max(factor * relative_error(c, b))
                }),
                None => self.tolerance,
            };
            let name = g.outlet_name(o);
            if let Some(rec) = record.as_deref_mut() {
                rec.insert(&name, chunk, c.clone());
            }
            let c = match reference {
                Some(r) => match r.get(&name, chunk) {
                    Some(t) => t.clone(),
                    None => continue,
                },
                None => c.clone(),
            };
            let nodes = &mut self.nodes;
            let k = *self.index.entry(o).or_insert_with(|| {
                nodes.push(NodeDiff {
                    node: o.node,
                    name,
                    op: g.nodes[o.node].op.name(),
                    max_abs: 0.0,
                    max_rel: 0.0,
                    allowed: 0.0,
                    beyond: 0,
                    total: 0,
                    first_bad: None,
                    per_chunk: Vec::new(),
                });
                nodes.len() - 1
            });
            diff_into(&mut nodes[k], &c, &v, chunk, tolerance);
        }
        self.steps += 1;
        Ok(())
    }

    /// Every node's comparison over the steps run.
    pub fn finish(self) -> Comparison {
        Comparison {
            nodes: self.nodes,
            chunks: self.steps,
            tolerance: self.tolerance,
        }
    }
}

/// Per-node, per-chunk outputs saved for regression tracking: a safetensors
/// file with one f32 tensor per `NODE#CHUNK` (written by `pulsed compare
/// --save`; anything that writes the same names, PyTorch included, works).
#[derive(Debug, Default)]
pub struct Reference {
    values: std::collections::HashMap<String, Tensor>,
}

impl Reference {
    fn key(name: &str, chunk: u64) -> String {
        format!("{name}#{chunk}")
    }

    pub fn insert(&mut self, name: &str, chunk: u64, t: Tensor) {
        self.values
            .insert(Reference::key(name, chunk), t.cast(crate::ops::DType::F32));
    }

    pub fn get(&self, name: &str, chunk: u64) -> Option<&Tensor> {
        self.values.get(&Reference::key(name, chunk))
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Reads a reference file.
    pub fn load(path: &std::path::Path) -> Result<Reference> {
        let w = crate::weights::Weights::load(path)?;
        let values = w
            .names()
            .into_iter()
            .filter_map(|n| Some((n.to_string(), w.tensor(n)?.cast(crate::ops::DType::F32))))
            .collect();
        Ok(Reference { values })
    }

    /// Writes the reference as safetensors.
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        let mut bufs: Vec<(&String, Vec<usize>, Vec<u8>)> = Vec::new();
        for (k, t) in &self.values {
            let v = t.to_f32_vec();
            bufs.push((k, t.shape().to_vec(), bytemuck::cast_slice(&v).to_vec()));
        }
        let views = bufs
            .iter()
            .map(|(k, shape, data)| {
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data)
                    .map(|v| (k.as_str(), v))
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| crate::Error::Other(format!("reference: {e}")))?;
        let bytes = safetensors::serialize(views, &None)
            .map_err(|e| crate::Error::Other(format!("reference: {e}")))?;
        std::fs::write(path, bytes).map_err(|e| crate::Error::File {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    }
}

/// A picture of the comparison: one row per node (execution order), one
/// column per chunk, colour from green (error 1e-8 or less) through yellow
/// to red (at or beyond the tolerance); hover a cell for its figures.
pub fn svg(c: &Comparison) -> String {
    let (cw, rh, left, top) = (14.0, 10.0, 330.0, 30.0);
    let chunks = c.chunks.max(1) as f64;
    let w = left + cw * chunks + 20.0;
    let h = top + rh * c.nodes.len() as f64 + 20.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"monospace\" font-size=\"8\">\n\
         <text x=\"4\" y=\"14\" font-size=\"11\">relative error per node (rows) and chunk (columns); red: at or beyond {:e}</text>\n",
        c.tolerance
    );
    let lo = -8.0f64;
    let hi = (c.tolerance.max(1e-12) as f64).log10();
    for (row, n) in c.nodes.iter().enumerate() {
        let y = top + rh * row as f64;
        s.push_str(&format!(
            "<text x=\"4\" y=\"{}\">{} ({})</text>\n",
            y + rh - 2.0,
            xml(&n.name),
            n.op
        ));
        for &(chunk, e) in &n.per_chunk {
            let t = if e <= 0.0 {
                0.0
            } else {
                (((e as f64).log10() - lo) / (hi - lo)).clamp(0.0, 1.0)
            };
            let (r, g) = if t < 0.5 {
                ((510.0 * t) as u8, 200u8)
            } else {
                (255u8, (200.0 * (2.0 - 2.0 * t)) as u8)
            };
            s.push_str(&format!(
                "<rect x=\"{}\" y=\"{y}\" width=\"{cw}\" height=\"{rh}\" fill=\"rgb({r},{g},60)\"><title>{} chunk {chunk}: {e:e}</title></rect>\n",
                left + cw * chunk as f64,
                xml(&n.name)
            ));
        }
    }
    s.push_str("</svg>\n");
    s
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_find_the_first_bad_element_and_plot() {
        let mut d = NodeDiff {
            node: 0,
            name: "a<b".into(),
            op: "Op",
            max_abs: 0.0,
            max_rel: 0.0,
            allowed: 0.0,
            beyond: 0,
            total: 0,
            first_bad: None,
            per_chunk: Vec::new(),
        };
        let c = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
        diff_into(&mut d, &c, &c, 0, 1e-4);
        assert_eq!((d.beyond, d.first_bad), (0, None));
        let g = Tensor::from_slice(&[1.0f32, 2.5, 3.0]);
        diff_into(&mut d, &c, &g, 1, 1e-4);
        assert_eq!((d.beyond, d.first_bad), (1, Some((1, 1))));
        assert!((d.max_rel - 0.5 / 3.0).abs() < 1e-6);
        let cmp = Comparison {
            nodes: vec![d],
            chunks: 2,
            tolerance: 1e-4,
        };
        assert_eq!(cmp.failures().len(), 1);
        let pic = svg(&cmp);
        assert!(
            pic.starts_with("<svg") && pic.contains("a&lt;b") && pic.matches("<rect").count() == 2
        );
    }

    #[test]
    fn a_stream_of_frames_steps_whole_frames() {
        use crate::graph::GraphBuilder;
        use crate::ops::{Binary, DType, Dim, TypedFact};
        let graph = |shape: Vec<Dim>| {
            let mut b = GraphBuilder::new();
            let x = b.input("x", TypedFact::new(DType::F32, shape)).unwrap();
            let y = b.op("y", Binary::Add, &[x, x]).unwrap();
            b.output("y", y);
            b.build().unwrap()
        };
        let frames = crate::pulse::pulsify(&graph(vec![Dim::s(), Dim::n(3)]), 4).unwrap();
        assert_eq!(input_pulse(&frames).unwrap(), (4, vec![4, 3]));
        let samples = crate::pulse::pulsify(&graph(vec![Dim::s()]), 5).unwrap();
        assert_eq!(input_pulse(&samples).unwrap(), (5, vec![5]));
    }

    #[test]
    fn references_round_trip() {
        let mut r = Reference::default();
        r.insert("x", 3, Tensor::from_slice(&[1.0f32, -2.0]));
        let p = std::env::temp_dir().join(format!("pulsed-ref-{}.safetensors", std::process::id()));
        r.save(&p).unwrap();
        let back = Reference::load(&p).unwrap();
        std::fs::remove_file(&p).ok();
        assert_eq!(back.get("x", 3).unwrap().to_f32_vec(), vec![1.0, -2.0]);
        assert!(back.get("x", 2).is_none());
    }
}
