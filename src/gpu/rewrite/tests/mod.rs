//! The rules' patterns and the graph surgery on small graphs, with no
//! device: stand-in GPU forms (every node on the GPU, as the translator
//! would place it with every kernel). Whether the real GPU forms take each
//! fusion, and compute what the CPU does, is for `tests/gpu_runner.rs`.

mod graphs;

use graphs::*;

use super::graph::Rewriter;
use super::*;
use crate::gpu::op::{GpuOp, Io, LaunchCx};
use crate::gpu::translator::{CpuReason, Placement};
use crate::gpu::GpuError;
use crate::graph::{Graph, GraphBuilder, OutletId};
use crate::ops::matmul::Linear;
use crate::ops::Const;

#[derive(Debug)]
struct Stub(&'static str);

impl GpuOp for Stub {
    fn describe(&self) -> String {
        self.0.to_string()
    }
    fn launch(&self, _: &LaunchCx, _: &Io) -> Result<(), GpuError> {
        Ok(())
    }
}

/// Every node placed on the GPU (inputs and constants as such).
fn place(g: &Graph) -> Vec<Placement> {
    g.nodes
        .iter()
        .map(|n| {
            let any = n.op.as_any();
            if any.is::<crate::ops::Source>() {
                Placement::Input
            } else if any.is::<Const>() {
                Placement::Const
            } else {
                Placement::Gpu(Box::new(Stub(n.op.name())))
            }
        })
        .collect()
}

fn rewriter(g: &Graph) -> Rewriter<'_> {
    rewriter_with(g, place(g))
}

fn rewriter_with(g: &Graph, p: Vec<Placement>) -> Rewriter<'_> {
    let facts = g.nodes.iter().map(|n| n.facts.clone()).collect();
    Rewriter::new(g, &g.topo_order().unwrap(), facts, p)
}

fn outlet(g: &Graph, name: &str) -> OutletId {
    OutletId::new(at(g, name), 0)
}

#[test]
fn each_pattern_of_a_block_is_found() {
    let g = block();
    let r = rewriter(&g);
    let id = |n: &str| at(&g, n);
    assert_eq!(activation::find(&r, id("act")), Some((8, id("up"))));
    assert_eq!(
        glu::find(&r, id("pw")),
        Some([
            id("pw"),
            id("glu_a"),
            id("glu_b"),
            id("glu_gate"),
            id("glu")
        ])
    );
    let m = residual::find(&r, id("down")).expect("residual");
    assert_eq!(
        (m.mul, m.add, m.alpha),
        (Some(id("scaled")), id("res"), 0.5)
    );
    assert_eq!(m.residual, OutletId::new(g.inputs[0], 0));
    assert!(norm_before::row_norm(&r, id("n1")).is_some());
    assert_eq!(norm_before::candidates(&r, id("n1")), vec![id("up")]);
    // n2 is also read by `side`, which is no Linear
    assert_eq!(norm_before::candidates(&r, id("n2")), vec![id("out")]);
    assert_eq!(r.users(id("n2")).len(), 2);
    // `up` is read by its activation only; `pw` twice (the GLU halves)
    assert_eq!(activation::find(&r, id("side")), None);
}

#[test]
fn nodes_on_the_cpu_or_read_twice_are_left_alone() {
    let g = block();
    let mut p = place(&g);
    p[at(&g, "glu_gate")] = Placement::Cpu(CpuReason::Forced);
    p[at(&g, "down")] = Placement::Cpu(CpuReason::Forced);
    let r = rewriter_with(&g, p);
    assert_eq!(glu::find(&r, at(&g, "pw")), None);
    assert!(residual::find(&r, at(&g, "down")).is_none());
    // a Linear whose output is also a graph output keeps its own result
    let mut b = GraphBuilder::from_graph(block());
    let up = outlet(b.graph(), "up");
    b.output("up", up);
    let g = b.build().unwrap();
    let r = rewriter(&g);
    assert_eq!(activation::find(&r, at(&g, "act")), None);
}

/// Fusing `up` and its activation with a stand-in op: readers of the
/// activation read the fused node, which computes the activation's outlet;
/// `up`'s own outlet is gone; the device graph runs in order.
#[test]
fn a_fusion_rewires_readers_and_maps_outlets() {
    let g = block();
    let mut r = rewriter(&g);
    let (up, act) = (at(&g, "up"), at(&g, "act"));
    r.fuse(Fusion {
        kind: "FusedLinear",
        anchor: up,
        absorbed: vec![act],
        inputs: r.inputs(up).to_vec(),
        outputs: vec![OutletId::new(act, 0)],
        op: Box::new(Stub("linear+act")),
    });
    assert!(!r.live(act));
    assert_eq!(r.inputs(at(&g, "down"))[0], OutletId::new(up, 0));
    // the Linear has been fused into: no activation can follow it now
    assert!(!r.free(up) && r.gpu(up));
    assert_eq!(r.op::<Linear>(up), Some(&Linear));
    let d = r.finish();
    assert_eq!(d.graph.nodes.len(), g.nodes.len() - 1);
    let fused = d.outlets[act][0].expect("the activation's value is the fused node's");
    assert_eq!(d.outlets[up][0], None, "up's own output is gone");
    assert_eq!(d.graph.nodes[fused.node].op.name(), "FusedLinear");
    assert_eq!(d.sources[fused.node], vec![OutletId::new(act, 0)]);
    assert_eq!(d.origins[fused.node], up);
    assert_eq!(d.placements[fused.node].to_string(), "GPU  linear+act");
    // execution order is node order, and every input comes first
    assert_eq!(d.order, (0..d.graph.nodes.len()).collect::<Vec<_>>());
    for (id, n) in d.graph.nodes.iter().enumerate() {
        assert!(n.inputs.iter().all(|o| o.node < id), "{}", n.name);
    }
    assert_eq!(d.graph.outputs[0].1, d.outlets[at(&g, "y")][0].unwrap());
}

#[test]
fn a_fixed_normalisation_after_log_mel_is_found() {
    let g = front_end(false);
    let r = rewriter(&g);
    let (lm, c, f) = (at(&g, "logmel"), at(&g, "centre"), at(&g, "features"));
    let ab = [outlet(&g, "mean"), outlet(&g, "inv")];
    assert_eq!(affine::find(&r, lm), Some((lm, c, f, ab)));
    // read elsewhere too: the centred values must exist
    let g = front_end(true);
    assert_eq!(affine::find(&rewriter(&g), at(&g, "logmel")), None);
}

#[test]
fn key_and_value_delays_of_an_attention_are_found() {
    let g = attention([(0, 4), (0, 4)]);
    let r = rewriter(&g);
    let (slots, delays, ring) = delays::find(&r, at(&g, "attn")).expect("delays");
    assert_eq!((slots, ring), (1..3, 4));
    assert_eq!(delays, vec![at(&g, "k_delay"), at(&g, "v_delay")]);
    // a Delay that holds frames back: the window is not ring ++ pulse
    let g = attention([(0, 4), (1, 4)]);
    assert!(delays::find(&rewriter(&g), at(&g, "attn")).is_none());
    // a delayed window read elsewhere too must exist on its own
    let mut b = GraphBuilder::from_graph(attention([(0, 4), (0, 4)]));
    let vd = outlet(b.graph(), "v_delay");
    b.output("window", vd);
    let g = b.build().unwrap();
    assert!(delays::find(&rewriter(&g), at(&g, "attn")).is_none());
}

#[test]
fn a_convolutions_delay_and_norm_are_found() {
    for tail in [Tail::Nothing, Tail::Norm, Tail::NormSilu] {
        let g = conv_tail(tail, false);
        let r = rewriter(&g);
        let c = at(&g, "conv");
        let (slots, delays, ring) = delays::find(&r, c).expect("delay");
        assert_eq!((slots, delays, ring), (0..1, vec![at(&g, "delay")], 2));
        let found = norm_after::find(&r, c);
        match tail {
            Tail::Nothing => assert!(found.is_none()),
            _ => {
                let (_, n, eps, act, gb) = found.expect("norm after");
                assert_eq!((n, eps, act), (at(&g, "norm"), 1e-5, -1));
                assert_eq!(gb, [outlet(&g, "g"), outlet(&g, "b")]);
            }
        }
    }
    // the norm with its activation fused: the conv takes both
    let g = conv_tail(Tail::NormSilu, false);
    let mut r = rewriter(&g);
    let (n, act) = (at(&g, "norm"), at(&g, "act"));
    r.fuse(Fusion {
        kind: "FusedLayerNorm",
        anchor: n,
        absorbed: vec![act],
        inputs: r.inputs(n).to_vec(),
        outputs: vec![OutletId::new(act, 0)],
        op: Box::new(Stub("norm+act")),
    });
    let (_, _, _, code, _) = norm_after::find(&r, at(&g, "conv")).expect("norm after");
    assert_eq!(code, 8);
    // the conv's own output is read too: it must exist
    let g = conv_tail(Tail::NormSilu, true);
    assert!(norm_after::find(&rewriter(&g), at(&g, "conv")).is_none());
}

#[test]
fn sibling_linears_are_grouped() {
    let g = projections(false);
    let r = rewriter(&g);
    let id = |n: &str| at(&g, n);
    // the last of them in execution order launches; `wide` is another shape
    assert_eq!(
        siblings::find(&r, id("n")),
        vec![vec![id("q"), id("k"), id("v")]]
    );
    // q is a graph output: it keeps its own launch; k still joins v
    let g = projections(true);
    let r = rewriter(&g);
    assert_eq!(
        siblings::find(&r, at(&g, "n")),
        vec![vec![at(&g, "k"), at(&g, "v")]]
    );
    // one of them on the CPU: the other two still pair up
    let g = projections(false);
    let mut p = place(&g);
    p[at(&g, "k")] = Placement::Cpu(CpuReason::Forced);
    let r = rewriter_with(&g, p);
    assert_eq!(
        siblings::find(&r, at(&g, "n")),
        vec![vec![at(&g, "q"), at(&g, "v")]]
    );
}

#[test]
fn a_norm_of_a_residual_linear_is_found_once_the_residual_is_fused() {
    let g = residual_then_norm(false);
    let mut r = rewriter(&g);
    let norm = at(&g, "norm");
    // the norm reads the Add, not a Linear
    assert_eq!(norm_copy::find(&r, norm), None);
    let m = residual::find(&r, at(&g, "up")).expect("residual");
    r.fuse(Fusion {
        kind: "FusedLinear",
        anchor: m.linear,
        absorbed: m.mul.into_iter().chain([m.add]).collect(),
        inputs: r
            .inputs(m.linear)
            .iter()
            .copied()
            .chain([m.residual])
            .collect(),
        outputs: vec![OutletId::new(m.add, 0)],
        op: Box::new(Stub("linear+residual")),
    });
    let (eps, l, gb) = norm_copy::find(&r, norm).expect("norm copy");
    assert_eq!((eps, l), (1e-5, at(&g, "up")));
    assert_eq!(gb, [outlet(&g, "g"), outlet(&g, "b")]);
    // a graph output keeps its own kernel
    let g = residual_then_norm(true);
    assert_eq!(norm_copy::find(&rewriter(&g), at(&g, "norm")), None);
}
