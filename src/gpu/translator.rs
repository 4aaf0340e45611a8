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

    /// Where the source node `id` runs: the placement of the device node
    /// computing its output 0 (`None` when it was fused away).
    pub fn source_placement(&self, id: usize) -> Option<&Placement> {
        let o = self.device_outlet(OutletId::new(id, 0))?;
        self.placements.get(o.node)
    }
}

/// Which nodes a user forced to the CPU.
#[derive(Debug, Clone, Default)]
pub struct ForceCpu(Vec<String>);

impl ForceCpu {
    /// From [`FORCE_CPU_ENV`].
    pub fn from_env() -> ForceCpu {
        ForceCpu::parse(&std::env::var(FORCE_CPU_ENV).unwrap_or_default())
    }

    /// From a comma-separated list.
    pub fn parse(list: &str) -> ForceCpu {
        ForceCpu(
            list.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        )
    }

    /// Whether the node `name` of kind `kind` is forced to the CPU.
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
    pub force_cpu: ForceCpu,
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
            force_cpu: ForceCpu::from_env(),
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
        let placement = match choose(graph, dev, &facts, id, opts) {
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
        outlets: r.outlets,
        sources: r.sources,
        origins: r.origins,
    })
}

fn choose(
    graph: &Graph,
    dev: &GpuDevice,
    facts: &[Vec<TypedFact>],
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
        .map(|o| p.device_fact(&facts[o.node][o.slot]))
        .collect();
    let dev_out: Vec<TypedFact> = facts[id].iter().map(|f| p.device_fact(f)).collect();
    // pre-check: the op must type its device-side inputs to the device-side outputs
    let refs: Vec<&TypedFact> = dev_in.iter().collect();
    let typed = node
        .op
        .output_facts(&refs)
        .map_err(CpuReason::PreCheckFailed)?;
    if typed != dev_out {
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
