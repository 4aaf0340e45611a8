//! The rules' patterns and the graph surgery on small graphs, with no
//! device: stand-in GPU forms (every node on the GPU, as the translator
//! would place it with every kernel). Whether the real GPU forms take each
//! fusion, and compute what the CPU does, is for `tests/gpu_runner.rs`.

use super::graph::Rewriter;
use super::*;
use crate::gpu::op::{GpuOp, Io, LaunchCx};
use crate::gpu::translator::{CpuReason, Placement};
use crate::gpu::GpuError;
use crate::graph::{Graph, GraphBuilder, OutletId};
use crate::ops::matmul::Linear;
use crate::ops::norm::LayerNorm;
use crate::ops::shape::Slice;
use crate::ops::{Binary, Const, DType, Dim, Tensor, TypedFact, Unary};
use crate::pulse::{Delay, PulsedLimitedAttention};

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

fn at(g: &Graph, name: &str) -> usize {
    g.nodes.iter().position(|n| n.name == name).expect(name)
}

fn weight(b: &mut GraphBuilder, name: &str, shape: &[usize]) -> OutletId {
    let n = shape.iter().product();
    b.constant(
        name,
        Tensor::from_vec(shape.to_vec(), vec![0.1f32; n]).unwrap(),
    )
    .unwrap()
}

fn norm() -> LayerNorm {
    LayerNorm {
        eps: 1e-5,
        axis: -1,
    }
}

/// LayerNorm -> Linear(+Silu) -> Linear -> *0.5 -> + x, then a conv-module
/// style GLU, and a norm read by a Linear and by a Tanh.
fn block() -> Graph {
    let c = 8;
    let mut b = GraphBuilder::new();
    let x = b
        .input(
            "x",
            TypedFact::new(DType::F32, [Dim::n(4), Dim::n(c as i64)]),
        )
        .unwrap();
    let (g1, b1) = (weight(&mut b, "g1", &[c]), weight(&mut b, "b1", &[c]));
    let n1 = b.op("n1", norm(), &[x, g1, b1]).unwrap();
    let (w1, c1) = (
        weight(&mut b, "w1", &[2 * c, c]),
        weight(&mut b, "c1", &[2 * c]),
    );
    let up = b.op("up", Linear, &[n1, w1, c1]).unwrap();
    let act = b.op("act", Unary::Silu, &[up]).unwrap();
    let (w2, c2) = (
        weight(&mut b, "w2", &[c, 2 * c]),
        weight(&mut b, "c2", &[c]),
    );
    let down = b.op("down", Linear, &[act, w2, c2]).unwrap();
    let half = b.constant("half", Tensor::scalar(0.5f32)).unwrap();
    let scaled = b.op("scaled", Binary::Mul, &[down, half]).unwrap();
    let r = b.op("res", Binary::Add, &[x, scaled]).unwrap();
    let (w3, c3) = (
        weight(&mut b, "w3", &[2 * c, c]),
        weight(&mut b, "c3", &[2 * c]),
    );
    let pw = b.op("pw", Linear, &[r, w3, c3]).unwrap();
    let slice = |start: i64, end: i64| Slice {
        axis: 1,
        start,
        end: Some(end),
    };
    let ga = b.op("glu_a", slice(0, c as i64), &[pw]).unwrap();
    let gb = b.op("glu_b", slice(c as i64, 2 * c as i64), &[pw]).unwrap();
    let gs = b.op("glu_gate", Unary::Sigmoid, &[gb]).unwrap();
    let glu = b.op("glu", Binary::Mul, &[ga, gs]).unwrap();
    let (g2, b2) = (weight(&mut b, "g2", &[c]), weight(&mut b, "b2", &[c]));
    let n2 = b.op("n2", norm(), &[glu, g2, b2]).unwrap();
    let (w4, c4) = (weight(&mut b, "w4", &[c, c]), weight(&mut b, "c4", &[c]));
    let out = b.op("out", Linear, &[n2, w4, c4]).unwrap();
    let side = b.op("side", Unary::Tanh, &[n2]).unwrap();
    let y = b.op("y", Binary::Add, &[out, side]).unwrap();
    b.output("y", y);
    b.build().unwrap()
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
/// LogMel -> (- mean) -> (* inv_std), as the shipped front end; with
/// `tap`, the centred features are also a graph output.
fn front_end(tap: bool) -> Graph {
    let mut b = GraphBuilder::new();
    let p = b
        .input("p", TypedFact::new(DType::F32, [Dim::n(4), Dim::n(6)]))
        .unwrap();
    let fb = weight(&mut b, "fb", &[6, 3]);
    let lm = b
        .op("logmel", crate::ops::mel::LogMel { eps: 1e-6 }, &[p, fb])
        .unwrap();
    let (mean, inv) = (weight(&mut b, "mean", &[3]), weight(&mut b, "inv", &[3]));
    let c = b.op("centre", Binary::Sub, &[lm, mean]).unwrap();
    let f = b.op("features", Binary::Mul, &[c, inv]).unwrap();
    b.output("features", f);
    if tap {
        b.output("centre", c);
    }
    b.build().unwrap()
}

/// q, k and v of 8 frames; k and v through Delays of `delays` frames
/// (delay, overlap) into a pulsed attention with a left context of 4.
fn attention(delays: [(usize, usize); 2]) -> Graph {
    let mut b = GraphBuilder::new();
    let fact = || TypedFact::new(DType::F32, [Dim::n(8), Dim::n(4)]);
    let q = b.input("q", fact()).unwrap();
    let k = b.input("k", fact()).unwrap();
    let v = b.input("v", fact()).unwrap();
    let a = attend(&mut b, [q, k, v], delays);
    b.output("out", a);
    b.build().unwrap()
}

/// k and v through Delays of `delays` (delay, overlap) frames into a pulsed
/// attention over 8-frame pulses with a left context of 4.
fn attend(b: &mut GraphBuilder, [q, k, v]: [OutletId; 3], delays: [(usize, usize); 2]) -> OutletId {
    use crate::ops::limited_attention::LimitedAttention;
    let [(dk, ok), (dv, ov)] = delays;
    let delay = |delay, overlap| Delay {
        axis: 0,
        delay,
        overlap,
    };
    let kd = b.op("k_delay", delay(dk, ok), &[k]).unwrap();
    let vd = b.op("v_delay", delay(dv, ov), &[v]).unwrap();
    let attn = PulsedLimitedAttention {
        attn: LimitedAttention {
            heads: 1,
            left_context: 4,
            scale: None,
        },
        pulse: 8,
        delay: 0,
    };
    b.op("attn", attn, &[q, kd, vd]).unwrap()
}

/// What follows the convolution in [`conv_tail`].
#[derive(Clone, Copy, PartialEq)]
enum Tail {
    Nothing,
    Norm,
    NormSilu,
}

/// x -> Delay -> depthwise Conv1d (time-major), then `tail` (a layer norm
/// and a SiLU: the conv module's tail), and with `tap` the conv's output as
/// a graph output too.
fn conv_tail(tail: Tail, tap: bool) -> Graph {
    use crate::ops::conv::{Conv1d, ConvLayout};
    let mut b = GraphBuilder::new();
    let fact = TypedFact::new(DType::F32, [Dim::n(8), Dim::n(4)]);
    let x = b.input("x", fact).unwrap();
    let delay = Delay {
        axis: 0,
        delay: 0,
        overlap: 2,
    };
    let d = b.op("delay", delay, &[x]).unwrap();
    let w = weight(&mut b, "w", &[4, 1, 3]);
    let conv = Conv1d {
        stride: 1,
        pad: (0, 0),
        dilation: 1,
        groups: 4,
        layout: ConvLayout::ChannelsLast,
    };
    let c = b.op("conv", conv, &[d, w]).unwrap();
    let mut y = c;
    if tail != Tail::Nothing {
        let (g, be) = (weight(&mut b, "g", &[4]), weight(&mut b, "b", &[4]));
        y = b.op("norm", norm(), &[c, g, be]).unwrap();
    }
    if tail == Tail::NormSilu {
        y = b.op("act", Unary::Silu, &[y]).unwrap();
    }
    b.output("y", y);
    if tap {
        b.output("conv", c);
    }
    b.build().unwrap()
}

/// x -> LayerNorm -> q, k, v (Linear 4 -> 4) and `wide` (4 -> 8), k and v
/// through Delays into a pulsed attention; `tap` makes q a graph output.
fn projections(tap: bool) -> Graph {
    let c = 4;
    let mut b = GraphBuilder::new();
    let x = b
        .input(
            "x",
            TypedFact::new(DType::F32, [Dim::n(8), Dim::n(c as i64)]),
        )
        .unwrap();
    let (g1, b1) = (weight(&mut b, "g1", &[c]), weight(&mut b, "b1", &[c]));
    let n = b.op("n", norm(), &[x, g1, b1]).unwrap();
    let linear = |b: &mut GraphBuilder, name: &str, out: usize| {
        let w = weight(b, &format!("{name}_w"), &[out, c]);
        let bias = weight(b, &format!("{name}_b"), &[out]);
        b.op(name, Linear, &[n, w, bias]).unwrap()
    };
    let q = linear(&mut b, "q", c);
    let k = linear(&mut b, "k", c);
    let v = linear(&mut b, "v", c);
    let wide = linear(&mut b, "wide", 2 * c);
    let a = attend(&mut b, [q, k, v], [(0, 4), (0, 4)]);
    b.output("out", a);
    b.output("wide", wide);
    if tap {
        b.output("q", q);
    }
    b.build().unwrap()
}

/// x -> Linear -> * 0.5 -> + x -> LayerNorm -> squared: the norm of a
/// residual Linear's result (with `tap`, the norm is a graph output too).
fn residual_then_norm(tap: bool) -> Graph {
    let c = 4;
    let mut b = GraphBuilder::new();
    let x = b
        .input(
            "x",
            TypedFact::new(DType::F32, [Dim::n(64), Dim::n(c as i64)]),
        )
        .unwrap();
    let (w, bias) = (weight(&mut b, "w", &[c, c]), weight(&mut b, "c", &[c]));
    let up = b.op("up", Linear, &[x, w, bias]).unwrap();
    let half = b.constant("half", Tensor::scalar(0.5f32)).unwrap();
    let scaled = b.op("scaled", Binary::Mul, &[up, half]).unwrap();
    let r = b.op("res", Binary::Add, &[x, scaled]).unwrap();
    let (g, be) = (weight(&mut b, "g", &[c]), weight(&mut b, "b", &[c]));
    let n = b.op("norm", norm(), &[r, g, be]).unwrap();
    let y = b.op("side", Binary::Mul, &[n, n]).unwrap();
    b.output("y", y);
    b.output("r", r);
    if tap {
        b.output("norm", n);
    }
    b.build().unwrap()
}
