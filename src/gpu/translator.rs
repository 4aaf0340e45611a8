//! The translator: decides, node by node, whether a graph runs on the GPU.
//!
//! A node gets its GPU form only when (1) it is not forced to the CPU
//! (`PULSED_FORCE_CPU`), (2) its CPU `output_facts`, given the device-side
//! input facts (storage dtypes; host inputs treated as device facts), give
//! exactly the node's device-side facts, and (3) the GPU builder registered for its op type
//! takes it (`gpu::ops`).
//! Anything else runs its CPU op with explicit transfers; a translation never
//! fails because of one node. `PULSED_TRANSLATE_DEBUG=1` prints every
//! rejected node with the reason.
//!
//! Storage follows the precision, except for the nodes kept in f32
//! (`PULSED_KEEP_F32`, or [`TranslateOptions::keep_f32`]): a bf16 decoder
//! step's logits, whose rounding alone flips near-tied words in beam
//! search. Such a node given bf16 operands runs a GPU form that widens
//! ([`GpuOp::widens`]), or its CPU op.
//!
//! Then the rewrites (`gpu::rewrite`) fuse groups of GPU nodes into fused
//! nodes: the translation is of the device graph they give, which maps back
//! to the source graph outlet by outlet.

use std::fmt;
use std::sync::Arc;

use super::device::GpuDevice;
use super::op::{BuildCx, GpuOp};
use super::tensor::Precision;
use super::GpuError;
use crate::graph::{Graph, OutletId};
use crate::ops::{Const, OpError, Source, Tensor, TypedFact};

/// Environment variable: comma-separated node names, op kinds (`Conv1d`) or
/// name prefixes ending in `*` (`blocks.0.*`) to run on the CPU.
pub const FORCE_CPU_ENV: &str = "PULSED_FORCE_CPU";
/// Environment variable: `1` prints each node the translator rejects.
pub const DEBUG_ENV: &str = "PULSED_TRANSLATE_DEBUG";
/// Environment variable: nodes (named as for [`FORCE_CPU_ENV`]) whose
/// outputs are stored in f32 whatever the precision.
pub const KEEP_F32_ENV: &str = "PULSED_KEEP_F32";

/// Where a node runs.
#[derive(Debug)]
pub enum Placement {
    /// A graph input, filled by the runner.
    Input,
    /// A constant: on the host, and uploaded once if a GPU node reads it.
    Const,
    /// Its GPU form.
    Gpu(Box<dyn GpuOp>),
    /// Its CPU op, and why.
    Cpu(CpuReason),
}

/// Why a node runs its CPU op.
#[derive(Debug, Clone, PartialEq)]
pub enum CpuReason {
    /// Named in [`FORCE_CPU_ENV`] (or [`TranslateOptions::force_cpu`]).
    Forced,
    /// Kept in f32 over narrower operands, and its GPU form does not widen.
    NoWidening,
    /// The op's `output_facts` fail on the device-side input facts.
    PreCheckFailed(OpError),
    /// The op's `output_facts` on the device-side input facts give other
    /// facts than the node's device-side facts.
    PreCheckMismatch {
        got: Vec<TypedFact>,
        expected: Vec<TypedFact>,
    },
    /// No GPU builder is registered for the op's type.
    NoKernel { op: &'static str },
    /// The GPU builder does not take these facts.
    Rejected(GpuError),
    /// [`TranslateOptions::wrap`] failed on its GPU form.
    Wrap(GpuError),
}

impl fmt::Display for CpuReason {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            CpuReason::Forced => write!(f, "forced by {FORCE_CPU_ENV}"),
            CpuReason::NoWidening => write!(
                f,
                "kept in f32 ({KEEP_F32_ENV}), and its GPU form cannot write f32 from its bf16 inputs"
            ),
            CpuReason::PreCheckFailed(e) => {
                write!(f, "pre-check: output_facts on device facts failed: {e}")
            }
            CpuReason::PreCheckMismatch { got, expected } => write!(
                f,
                "pre-check: output_facts on device facts give {} instead of {}",
                list(got),
                list(expected)
            ),
            CpuReason::NoKernel { op } => write!(f, "no GPU kernel for {op}"),
            CpuReason::Rejected(e) => write!(f, "GPU form rejected: {e}"),
            CpuReason::Wrap(e) => write!(f, "wrapping its GPU form: {e}"),
        }
    }
}

impl Placement {
    pub fn is_gpu(&self) -> bool {
        matches!(self, Placement::Gpu(_))
    }
}

/// The device graph (the source graph after the fusion rewrites) and where
/// each of its nodes runs, in node order.
#[derive(Debug)]
pub struct Translation {
    /// The graph the runner runs: the source graph's nodes, with each fused
    /// group replaced by one fused node.
    pub graph: Arc<Graph>,
    pub placements: Vec<Placement>,
    /// Concrete node facts as the graph will run (logical dtypes).
    pub facts: Vec<Vec<TypedFact>>,
    /// Execution order of the device graph's nodes.
    pub order: Vec<usize>,
    pub precision: Precision,
    /// Each device node's precision: [`Self::precision`], or f32 for a
    /// node kept in f32.
    pub precisions: Vec<Precision>,
    /// For each source outlet, the device outlet computing it; `None` for
    /// an intermediate value of a fused node (gone on the device).
    pub outlets: Vec<Vec<Option<OutletId>>>,
    /// For each device outlet, the source outlet it computes.
    pub sources: Vec<Vec<OutletId>>,
    /// For each device node, the source node it is (a fused node: the one
    /// it replaced in place).
    pub origins: Vec<usize>,
}

impl Translation {
    /// The device outlet computing the source outlet `o`, if any.
    pub fn device_outlet(&self, o: OutletId) -> Option<OutletId> {
        *self.outlets.get(o.node)?.get(o.slot)?
    }

    /// The device-side fact of device outlet `(id, slot)`: its storage dtype.
    pub fn device_fact(&self, id: usize, slot: usize) -> TypedFact {
        self.precisions[id].device_fact(&self.facts[id][slot])
    }

    /// Where the source node `id` runs: the placement of the device node
    /// computing its output 0 (`None` when it was fused away).
    pub fn source_placement(&self, id: usize) -> Option<&Placement> {
        let o = self.device_outlet(OutletId::new(id, 0))?;
        self.placements.get(o.node)
    }
}

/// A set of nodes: names, op kinds (`Conv1d`) and name prefixes ending in
/// `*` (`blocks.0.*`).
#[derive(Debug, Clone, Default)]
pub struct NodeSet(Vec<String>);

impl NodeSet {
    /// From the environment variable `var` (a comma-separated list).
    pub fn from_env(var: &str) -> NodeSet {
        NodeSet::parse(&std::env::var(var).unwrap_or_default())
    }

    /// From a comma-separated list.
    pub fn parse(list: &str) -> NodeSet {
        NodeSet(
            list.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        )
    }

    /// This set and `list`'s entries.
    pub fn with(mut self, list: &[&str]) -> NodeSet {
        self.0.extend(list.iter().map(|s| s.to_string()));
        self
    }

    /// Whether the node `name` of kind `kind` is in the set.
    pub fn matches(&self, name: &str, kind: &str) -> bool {
        self.0.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => p == name || p == kind,
        })
    }
}

/// Translation options.
#[derive(Debug, Clone, Default)]
pub struct TranslateOptions {
    pub precision: Precision,
    /// Nodes run on the CPU (defaults from [`FORCE_CPU_ENV`]).
    pub force_cpu: NodeSet,
    /// Nodes whose outputs are stored in f32 whatever the precision
    /// (defaults from [`KEEP_F32_ENV`]).
    pub keep_f32: NodeSet,
    /// Print rejected nodes (defaults from [`DEBUG_ENV`]).
    pub debug: bool,
    /// Wraps each node's GPU form as it is built, before the rewrites (tests
    /// inject faults with it: [`super::test_util::fault`]).
    pub wrap: Option<WrapGpuOp>,
}

/// A wrapper of GPU forms: given the node's name, its GPU form and the
/// context it was built in, the GPU form to run instead.
#[derive(Clone)]
pub struct WrapGpuOp(pub Arc<WrapFn>);

/// What [`WrapGpuOp`] calls.
pub type WrapFn =
    dyn Fn(&str, Box<dyn GpuOp>, &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> + Send + Sync;

impl fmt::Debug for WrapGpuOp {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("WrapGpuOp")
    }
}

impl TranslateOptions {
    /// The precision given, forced nodes and debug from the environment.
    pub fn from_env(precision: Precision) -> TranslateOptions {
        TranslateOptions {
            precision,
            force_cpu: NodeSet::from_env(FORCE_CPU_ENV),
            keep_f32: NodeSet::from_env(KEEP_F32_ENV),
            debug: std::env::var(DEBUG_ENV).as_deref() == Ok("1"),
            wrap: None,
        }
    }
}

/// Translates `graph` whose facts are concrete (a pulsed graph), or made
/// concrete with `s` (a whole-utterance graph for an input of length `s`).
pub fn translate(
    graph: &Graph,
    dev: &GpuDevice,
    s: Option<i64>,
    opts: &TranslateOptions,
) -> Result<Translation, GpuError> {
    let p = opts.precision;
    let mut facts = Vec::with_capacity(graph.nodes.len());
    for n in &graph.nodes {
        let mut fs = Vec::new();
        for f in &n.facts {
            let f = match s {
                Some(s) => f.concretize(s),
                None => f.clone(),
            };
            if f.concrete_shape().is_none() {
                return Err(GpuError::SymbolicShape {
                    node: n.name.clone(),
                    fact: f,
                });
            }
            fs.push(f);
        }
        facts.push(fs);
    }
    let precisions: Vec<Precision> = graph
        .nodes
        .iter()
        .map(|n| match opts.keep_f32.matches(&n.name, n.op.name()) {
            true => Precision::F32,
            false => p,
        })
        .collect();
    let mut placements = Vec::with_capacity(graph.nodes.len());
    for (id, node) in graph.nodes.iter().enumerate() {
        let any = node.op.as_any();
        if any.is::<Source>() {
            placements.push(Placement::Input);
            continue;
        }
        if any.is::<Const>() {
            placements.push(Placement::Const);
            continue;
        }
        let placement = match choose(graph, dev, &facts, &precisions, id, opts) {
            Ok(op) => Placement::Gpu(op),
            Err(why) => {
                if opts.debug {
                    eprintln!(
                        "translate: `{}` ({}) stays on the CPU: {why}",
                        node.name,
                        node.op.name()
                    );
                }
                Placement::Cpu(why)
            }
        };
        placements.push(placement);
    }
    let r = super::rewrite::rewrite(graph, facts, placements);
    Ok(Translation {
        graph: Arc::new(r.graph),
        placements: r.placements,
        facts: r.facts,
        order: r.order,
        precision: p,
        precisions: r.origins.iter().map(|&o| precisions[o]).collect(),
        outlets: r.outlets,
        sources: r.sources,
        origins: r.origins,
    })
}

fn choose(
    graph: &Graph,
    dev: &GpuDevice,
    facts: &[Vec<TypedFact>],
    precisions: &[Precision],
    id: usize,
    opts: &TranslateOptions,
) -> Result<Box<dyn GpuOp>, CpuReason> {
    let node = &graph.nodes[id];
    let kind = node.op.name();
    if opts.force_cpu.matches(&node.name, kind) {
        return Err(CpuReason::Forced);
    }
    let p = opts.precision;
    let dev_in: Vec<TypedFact> = node
        .inputs
        .iter()
        .map(|o| precisions[o.node].device_fact(&facts[o.node][o.slot]))
        .collect();
    let dev_out: Vec<TypedFact> = facts[id]
        .iter()
        .map(|f| precisions[id].device_fact(f))
        .collect();
    // pre-check: the op must type its device-side inputs to the device-side
    // outputs, or (a node kept in f32 over bf16 operands) to their bf16 form
    let refs: Vec<&TypedFact> = dev_in.iter().collect();
    let typed = node
        .op
        .output_facts(&refs)
        .map_err(CpuReason::PreCheckFailed)?;
    let widened = typed != dev_out;
    let narrow: Vec<TypedFact> = facts[id].iter().map(|f| p.device_fact(f)).collect();
    if widened && typed != narrow {
        return Err(CpuReason::PreCheckMismatch {
            got: typed,
            expected: dev_out,
        });
    }
    let consts: Vec<Option<&Tensor>> = node
        .inputs
        .iter()
        .map(|o| {
            graph.nodes[o.node]
                .op
                .as_any()
                .downcast_ref::<Const>()
                .map(|c| &c.value)
        })
        .collect();
    let cx = BuildCx {
        lib: &dev.lib,
        precision: p,
        inputs: &dev_in,
        outputs: &dev_out,
        consts: &consts,
    };
    let Some(r) = super::ops::build(node.op.as_ref(), &cx) else {
        return Err(CpuReason::NoKernel { op: kind });
    };
    let op = r.map_err(CpuReason::Rejected)?;
    if widened && !op.widens() {
        return Err(CpuReason::NoWidening);
    }
    match &opts.wrap {
        Some(w) => (w.0)(&node.name, op, &cx).map_err(CpuReason::Wrap),
        None => Ok(op),
    }
}

fn list(fs: &[TypedFact]) -> String {
    let v: Vec<String> = fs.iter().map(|f| f.to_string()).collect();
    v.join(", ")
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Placement::Input => write!(f, "input"),
            Placement::Const => write!(f, "const"),
            Placement::Gpu(op) => write!(f, "GPU  {}", op.describe()),
            Placement::Cpu(why) => write!(f, "CPU  {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::NodeSet;

    #[test]
    fn a_node_set_takes_names_kinds_and_prefixes() {
        let s = NodeSet::parse(" Conv1d, blocks.0.*,,head ").with(&["model.decoder.logit*"]);
        assert!(s.matches("anything", "Conv1d"));
        assert!(s.matches("blocks.0.ff.linear", "Linear"));
        assert!(!s.matches("blocks.1.ff.linear", "Linear"));
        assert!(s.matches("head", "Linear"));
        assert!(!s.matches("heads", "Linear"));
        assert!(s.matches("model.decoder.logit_rows", "Squeeze"));
        assert!(!NodeSet::parse("").matches("", ""));
    }
}
