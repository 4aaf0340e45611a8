//! The passes on small graphs with stand-in GPU ops (no device needed):
//! each stand-in accepts what the real op of its kind would (a skinny
//! Linear, a LayerNorm, LogMel, a pulsed attention or a Conv1d taking
//! Delays) and records it in its description.

use super::*;
use crate::gpu::op::{downcast, GpuOp, Io, LaunchCx};
use crate::gpu::translator::CpuReason;
use crate::gpu::GpuError;
use crate::graph::GraphBuilder;
use crate::ops::{Dim, Tensor};

#[derive(Debug, Default)]
struct Stub {
    kind: &'static str,
    fused: Vec<String>,
}

impl GpuOp for Stub {
    fn describe(&self) -> String {
        format!("{}{}", self.kind, self.fused.concat())
    }
    fn launch(&self, _: &LaunchCx, _: &Io) -> Result<(), GpuError> {
        Ok(())
    }
    fn fuse_activation(&mut self, code: i32) -> bool {
        let ok = matches!(self.kind, "Linear" | "LayerNorm");
        if ok {
            self.fused.push(format!(" +act{code}"));
        }
        ok
    }
    fn fuse_residual(&mut self, alpha: f32, input: usize) -> bool {
        let ok = self.kind == "Linear" && !self.fused.iter().any(|f| f.contains("glu"));
        if ok {
            self.fused.push(format!(" +res({alpha}, in{input})"));
        }
        ok
    }
    fn fuse_glu(&mut self) -> bool {
        let ok = self.kind == "Linear" && self.fused.is_empty();
        if ok {
            self.fused.push(" +glu".into());
        }
        ok
    }
    fn fuse_norm(&mut self, eps: f32, input: usize) -> bool {
        let ok = self.kind == "Linear";
        if ok {
            self.fused.push(format!(" +norm({eps}, in{input})"));
        }
        ok
    }
    fn fuse_affine(&mut self, input: usize) -> bool {
        let ok = self.kind == "LogMel";
        if ok {
            self.fused.push(format!(" +affine(in{input})"));
        }
        ok
    }
    fn fuse_delays(&mut self, ring: usize, input: usize) -> bool {
        let ok = matches!(self.kind, "PulsedLimitedAttention" | "Conv1d");
        if ok {
            self.fused.push(format!(" +delays({ring}, in{input})"));
        }
        ok
    }
    fn fuse_norm_after(&mut self, eps: f32, act: i32, input: usize) -> bool {
        let ok = self.kind == "Conv1d";
        if ok {
            self.fused
                .push(format!(" +norm_after({eps}, act{act}, in{input})"));
        }
        ok
    }
    fn fuse_norm_copy(&mut self, eps: f32, input: usize) -> bool {
        let ok = self.kind == "Linear" && !self.fused.iter().any(|f| f.contains("glu"));
        if ok {
            self.fused.push(format!(" +norm_copy({eps}, in{input})"));
        }
        ok
    }
    fn fuse_siblings(&mut self, siblings: &[&dyn GpuOp], input: usize) -> bool {
        let ok = self.kind == "Linear"
            && siblings.iter().all(|s| {
                downcast::<Stub>(*s).is_some_and(|s| s.kind == "Linear" && s.fused == self.fused)
            });
        if ok {
            self.fused
                .push(format!(" +siblings({}, in{input})", siblings.len()));
        }
        ok
    }
}

/// Every node placed as the translator would on a GPU with every kernel.
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
                Placement::Gpu(Box::new(Stub {
                    kind: n.op.name(),
                    fused: Vec::new(),
                }))
            }
        })
        .collect()
}

fn run(g: &Graph) -> (Vec<String>, Fused) {
    let facts: Vec<Vec<TypedFact>> = g.nodes.iter().map(|n| n.facts.clone()).collect();
    let mut p = place(g);
    let fused = fuse(g, &facts, &mut p);
    (p.iter().map(|p| p.to_string()).collect(), fused)
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

#[test]
fn every_pattern_fuses_into_its_producer() {
    let g = block();
    let (d, (fused, extra)) = run(&g);
    let show = |name: &str| d[at(&g, name)].clone();
    assert!(
        show("up").ends_with("Linear +act8 +norm(0.00001, in3)"),
        "{d:#?}"
    );
    assert!(show("down").ends_with("Linear +res(0.5, in3)"), "{d:#?}");
    assert!(show("pw").ends_with("Linear +glu"), "{d:#?}");
    assert!(
        show("out").ends_with("Linear +norm(0.00001, in3)"),
        "{d:#?}"
    );
    for v in [
        "n1", "act", "scaled", "res", "glu_a", "glu_b", "glu_gate", "glu",
    ] {
        assert!(
            show(v).contains("no kernel"),
            "{v} should be a view: {d:#?}"
        );
    }
    // n2 is also read by `side`, so it still runs
    assert_eq!(show("n2"), "GPU  LayerNorm");
    assert_eq!(show("side"), "GPU  Unary");
    // what each fused node reads besides its own inputs
    let x = g.inputs[0];
    let outlet = |name: &str| OutletId {
        node: at(&g, name),
        slot: 0,
    };
    assert_eq!(
        extra[at(&g, "up")],
        vec![OutletId { node: x, slot: 0 }, outlet("g1"), outlet("b1")]
    );
    assert_eq!(extra[at(&g, "down")], vec![OutletId { node: x, slot: 0 }]);
    assert_eq!(
        extra[at(&g, "out")],
        vec![outlet("glu"), outlet("g2"), outlet("b2")]
    );
    assert_eq!(fused[at(&g, "glu_gate")], Some(at(&g, "glu")));
    assert_eq!(fused[at(&g, "pw")], Some(at(&g, "glu")));
    assert_eq!(fused[at(&g, "n2")], None);
    assert_eq!(fused[at(&g, "glu")], None, "the GLU's result is real");
}

#[test]
fn nodes_on_the_cpu_or_read_twice_are_left_alone() {
    let g = block();
    let facts: Vec<Vec<TypedFact>> = g.nodes.iter().map(|n| n.facts.clone()).collect();
    // the Sigmoid on the CPU: no GLU; `down` on the CPU: no residual
    let mut p = place(&g);
    p[at(&g, "glu_gate")] = Placement::Cpu(CpuReason::Forced);
    p[at(&g, "down")] = Placement::Cpu(CpuReason::Forced);
    let _ = fuse(&g, &facts, &mut p);
    assert_eq!(p[at(&g, "pw")].to_string(), "GPU  Linear");
    for n in ["glu_a", "glu_b", "glu", "scaled", "res"] {
        assert!(!p[at(&g, n)].to_string().contains("no kernel"), "{n}");
    }
    // a Linear whose output is also a graph output keeps its own result
    let mut b = GraphBuilder::from_graph(block());
    let up = OutletId {
        node: at(b.graph(), "up"),
        slot: 0,
    };
    b.output("up", up);
    let g = b.build().unwrap();
    let (d, _) = run(&g);
    assert!(!d[at(&g, "up")].contains("+act"), "{d:#?}");
    assert!(!d[at(&g, "act")].contains("no kernel"), "{d:#?}");
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

#[test]
fn a_fixed_normalisation_goes_into_the_log_mel_kernel() {
    let g = front_end(false);
    let (d, (fused, extra)) = run(&g);
    let lm = at(&g, "logmel");
    assert!(d[lm].ends_with("+affine(in2)"), "{d:#?}");
    let outlet = |n: &str| OutletId {
        node: at(&g, n),
        slot: 0,
    };
    assert_eq!(extra[lm], vec![outlet("mean"), outlet("inv")]);
    assert_eq!(fused[lm], Some(at(&g, "features")));
    assert_eq!(fused[at(&g, "centre")], Some(at(&g, "features")));
    assert!(d[at(&g, "centre")].contains("view"), "{d:#?}");
    assert!(d[at(&g, "features")].contains("view"), "{d:#?}");
    // read elsewhere too: the centred values must exist, nothing fuses
    let g = front_end(true);
    let (d, (fused, _)) = run(&g);
    assert!(!d[at(&g, "logmel")].contains("affine"), "{d:#?}");
    assert_eq!(fused[at(&g, "logmel")], None);
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

#[test]
fn key_and_value_delays_go_into_the_attention() {
    let g = attention([(0, 4), (0, 4)]);
    let (d, (fused, extra)) = run(&g);
    let a = at(&g, "attn");
    assert!(d[a].ends_with("+delays(4, in3)"), "{d:#?}");
    let outlet = |n: &str| OutletId {
        node: at(&g, n),
        slot: 0,
    };
    assert_eq!(extra[a], vec![outlet("k"), outlet("v")]);
    for n in ["k_delay", "v_delay"] {
        assert_eq!(fused[at(&g, n)], Some(a), "{n}");
        assert!(d[at(&g, n)].contains("view"), "{d:#?}");
    }
    // a Delay that holds frames back: the window is not ring ++ pulse
    let g = attention([(0, 4), (1, 4)]);
    let (d, (fused, _)) = run(&g);
    assert!(!d[at(&g, "attn")].contains("delays"), "{d:#?}");
    assert_eq!(fused[at(&g, "k_delay")], None);
    // a delayed window read elsewhere too must exist on its own
    let mut b = GraphBuilder::from_graph(attention([(0, 4), (0, 4)]));
    let vd = OutletId {
        node: at(b.graph(), "v_delay"),
        slot: 0,
    };
    b.output("window", vd);
    let g = b.build().unwrap();
    let (d, (fused, _)) = run(&g);
    assert!(!d[at(&g, "attn")].contains("delays"), "{d:#?}");
    assert_eq!(fused[at(&g, "v_delay")], None);
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

#[test]
fn a_norm_after_a_convolution_goes_into_it() {
    let outlet = |g: &Graph, n: &str| OutletId {
        node: at(g, n),
        slot: 0,
    };
    for act in [true, false] {
        let tail = if act { Tail::NormSilu } else { Tail::Norm };
        let g = conv_tail(tail, false);
        let (d, (fused, extra)) = run(&g);
        let c = at(&g, "conv");
        let code = if act { 8 } else { -1 };
        assert!(
            d[c].ends_with(&format!(
                "+delays(2, in2) +norm_after(0.00001, act{code}, in3)"
            )),
            "{d:#?}"
        );
        assert_eq!(
            extra[c],
            vec![outlet(&g, "x"), outlet(&g, "g"), outlet(&g, "b")]
        );
        assert!(d[at(&g, "norm")].contains("view"), "{d:#?}");
        let last = if act { at(&g, "act") } else { at(&g, "norm") };
        assert_eq!(fused[c], Some(last));
        // the norm's output is real when nothing comes after it
        assert_eq!(fused[at(&g, "norm")], act.then(|| at(&g, "act")));
    }
    // the conv's own output is read too: it must exist
    let g = conv_tail(Tail::NormSilu, true);
    let (d, (fused, _)) = run(&g);
    assert!(!d[at(&g, "conv")].contains("norm_after"), "{d:#?}");
    assert_eq!(fused[at(&g, "conv")], None);
    assert!(d[at(&g, "norm")].contains("act8"), "{d:#?}");
}

#[test]
fn a_convolutions_input_delay_goes_into_it() {
    let g = conv_tail(Tail::Nothing, false);
    let (d, (fused, extra)) = run(&g);
    let c = at(&g, "conv");
    assert!(d[c].ends_with("+delays(2, in2)"), "{d:#?}");
    assert_eq!(
        extra[c],
        vec![OutletId {
            node: at(&g, "x"),
            slot: 0
        }]
    );
    assert_eq!(fused[at(&g, "delay")], Some(c));
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

#[test]
fn sibling_linears_run_as_one_launch() {
    let g = projections(false);
    let (d, (fused, extra)) = run(&g);
    let outlet = |n: &str| OutletId {
        node: at(&g, n),
        slot: 0,
    };
    // the last of them in execution order computes the others
    let v = at(&g, "v");
    assert!(
        d[v].ends_with("Linear +norm(0.00001, in3) +siblings(2, in6)"),
        "{d:#?}"
    );
    for n in ["q", "k"] {
        assert_eq!(d[at(&g, n)], "GPU  written by v's launch (no kernel)");
        assert_eq!(fused[at(&g, n)], Some(v), "{n}");
    }
    let mut want = vec![outlet("x"), outlet("g1"), outlet("b1")];
    want.extend([outlet("q_w"), outlet("q_b"), outlet("q")]);
    want.extend([outlet("k_w"), outlet("k_b"), outlet("k")]);
    assert_eq!(extra[v], want);
    // another shape on the same input runs on its own
    assert_eq!(d[at(&g, "wide")], "GPU  Linear +norm(0.00001, in3)");
    assert_eq!(fused[at(&g, "wide")], None);
    // the attention still reads k and v (through its fused Delays)
    assert_eq!(extra[at(&g, "attn")], vec![outlet("k"), outlet("v")]);

    // q is a graph output: it keeps its own launch; k still joins v
    let g = projections(true);
    let (d, (fused, _)) = run(&g);
    assert_eq!(d[at(&g, "q")], "GPU  Linear +norm(0.00001, in3)");
    assert_eq!(fused[at(&g, "q")], None);
    assert!(d[at(&g, "v")].ends_with("+siblings(1, in6)"), "{d:#?}");
    assert_eq!(fused[at(&g, "k")], Some(at(&g, "v")));

    // one of them on the CPU: the other two still pair up
    let g = projections(false);
    let facts: Vec<Vec<TypedFact>> = g.nodes.iter().map(|n| n.facts.clone()).collect();
    let mut p = place(&g);
    p[at(&g, "k")] = Placement::Cpu(CpuReason::Forced);
    let (fused, _) = fuse(&g, &facts, &mut p);
    assert!(p[at(&g, "v")].to_string().ends_with("+siblings(1, in6)"));
    assert_eq!(fused[at(&g, "q")], Some(at(&g, "v")));
    assert_eq!(fused[at(&g, "k")], None);
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

#[test]
fn a_norm_of_a_linears_result_is_written_by_its_epilogue() {
    let g = residual_then_norm(false);
    let (d, (fused, extra)) = run(&g);
    let outlet = |n: &str| OutletId {
        node: at(&g, n),
        slot: 0,
    };
    let up = at(&g, "up");
    assert!(
        d[up].ends_with("Linear +res(0.5, in3) +norm_copy(0.00001, in4)"),
        "{d:#?}"
    );
    assert_eq!(
        extra[up],
        vec![outlet("x"), outlet("g"), outlet("b"), outlet("norm")]
    );
    assert_eq!(d[at(&g, "norm")], "GPU  written by up's launch (no kernel)");
    assert_eq!(fused[at(&g, "norm")], Some(up));
    // a graph output keeps its own kernel
    let g = residual_then_norm(true);
    let (d, (fused, _)) = run(&g);
    assert_eq!(d[at(&g, "norm")], "GPU  LayerNorm");
    assert_eq!(fused[at(&g, "norm")], None);
}
