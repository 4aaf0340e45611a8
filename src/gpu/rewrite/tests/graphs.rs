//! The small graphs the rule tests run on: a conformer-like block, the
//! front end's normalisation, an attention and a convolution with their
//! Delays, q/k/v projections, a residual Linear and its norm.

use crate::graph::{Graph, GraphBuilder, OutletId};
use crate::ops::matmul::Linear;
use crate::ops::norm::LayerNorm;
use crate::ops::shape::Slice;
use crate::ops::{Binary, DType, Dim, Tensor, TypedFact, Unary};
use crate::pulse::{Delay, PulsedLimitedAttention};

pub(super) fn at(g: &Graph, name: &str) -> usize {
    g.nodes.iter().position(|n| n.name == name).expect(name)
}

pub(super) fn weight(b: &mut GraphBuilder, name: &str, shape: &[usize]) -> OutletId {
    let n = shape.iter().product();
    b.constant(
        name,
        Tensor::from_vec(shape.to_vec(), vec![0.1f32; n]).unwrap(),
    )
    .unwrap()
}

pub(super) fn norm() -> LayerNorm {
    LayerNorm {
        eps: 1e-5,
        axis: -1,
    }
}

/// LayerNorm -> Linear(+Silu) -> Linear -> *0.5 -> + x, then a conv-module
/// style GLU, and a norm read by a Linear and by a Tanh.
pub(super) fn block() -> Graph {
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

/// LogMel -> (- mean) -> (* inv_std), as the shipped front end; with
/// `tap`, the centred features are also a graph output.
pub(super) fn front_end(tap: bool) -> Graph {
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
pub(super) fn attention(delays: [(usize, usize); 2]) -> Graph {
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
pub(super) fn attend(
    b: &mut GraphBuilder,
    [q, k, v]: [OutletId; 3],
    delays: [(usize, usize); 2],
) -> OutletId {
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
pub(super) enum Tail {
    Nothing,
    Norm,
    NormSilu,
}

/// x -> Delay -> depthwise Conv1d (time-major), then `tail` (a layer norm
/// and a SiLU: the conv module's tail), and with `tap` the conv's output as
/// a graph output too.
pub(super) fn conv_tail(tail: Tail, tap: bool) -> Graph {
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
pub(super) fn projections(tap: bool) -> Graph {
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
pub(super) fn residual_then_norm(tap: bool) -> Graph {
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
