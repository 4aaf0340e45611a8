//! Streaming equivalence (invariant 1) and per-step fact consistency
//! (invariant 2) for the dedicated pulse rules: padding, convolutions, STFT,
//! same-axis concat, positions, and an encoder-like graph made of them all.

mod common;

use common::Rng;
use proptest::prelude::*;
use pulsed::graph::{Graph, GraphBuilder, OutletId};
use pulsed::ops::cast::Cast;
use pulsed::ops::concat::Concat;
use pulsed::ops::conv::{Conv1d, ConvLayout};
use pulsed::ops::limited_attention::LimitedAttention;
use pulsed::ops::matmul::Linear;
use pulsed::ops::mel::LogMel;
use pulsed::ops::pad::{Pad, PadMode};
use pulsed::ops::range::Range;
use pulsed::ops::shape::Unsqueeze;
use pulsed::ops::stft::{Stft, StftOutput};
use pulsed::ops::{Binary, DType, Dim, Tensor, TypedFact, Unary};
use pulsed::pulse::pulsify;
use pulsed::pulse::verify::check_streaming;

fn frames_input(b: &mut GraphBuilder, c: usize) -> OutletId {
    b.input(
        "x",
        TypedFact::new(DType::F32, [Dim::s(), Dim::n(c as i64)]),
    )
    .unwrap()
}

fn check(
    g: &Graph,
    pulse: usize,
    x: &Tensor,
    pushes: &[usize],
    tol: f32,
) -> Result<(), TestCaseError> {
    check_streaming(g, pulse, x, pushes, tol)
        .map(|_| ())
        .map_err(|e| TestCaseError::fail(e.to_string()))
}

/// Conv over a stream that already has warm-up frames (a strided conv in
/// front), so the PulsePad that zeroes them is exercised too.
fn conv_graph(
    rng: &mut Rng,
    c: usize,
    k: usize,
    stride: usize,
    dil: usize,
    pad: (usize, usize),
    groups: usize,
) -> Graph {
    let mut b = GraphBuilder::new();
    let x = frames_input(&mut b, c);
    let w0 = b.constant("w0", rng.tensor(&[c, c, 2])).unwrap();
    let y = b
        .op(
            "pre",
            Conv1d {
                stride: 1,
                dilation: 1,
                pad: (1, 0),
                groups: 1,
                layout: ConvLayout::ChannelsLast,
            },
            &[x, w0],
        )
        .unwrap();
    let y = b.op("act", Unary::Tanh, &[y]).unwrap();
    let w = b.constant("w", rng.tensor(&[c, c / groups, k])).unwrap();
    let bias = b.constant("b", rng.tensor(&[c])).unwrap();
    let conv = Conv1d {
        stride,
        dilation: dil,
        pad,
        groups,
        layout: ConvLayout::ChannelsLast,
    };
    let y = b.op("conv", conv, &[y, w, bias]).unwrap();
    b.output("y", y);
    b.build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn strided_dilated_padded_convs_stream(seed in 1u64..10_000, k in 1usize..5, stride in 1usize..4, dil in 1usize..3,
                                           before in 0usize..5, after in 0usize..3, depthwise in any::<bool>(),
                                           mult in 1usize..4, s in 12usize..60) {
        let mut rng = Rng(seed);
        let c = 4;
        let groups = if depthwise { c } else { 1 };
        let g = conv_graph(&mut rng, c, k, stride, dil, (before, after), groups);
        let pulse = stride * mult;
        let x = rng.tensor(&[s, c]);
        prop_assume!(s + before + after > dil * (k - 1));
        check(&g, pulse, &x, &[rng.below(7) + 1, pulse], 1e-5)?;
    }

    #[test]
    fn constant_padding_streams(seed in 1u64..10_000, before in 0usize..6, after in 0usize..6, value in -2.0f32..2.0,
                                pulse in 1usize..6, s in 1usize..30) {
        let mut b = GraphBuilder::new();
        let x = frames_input(&mut b, 3);
        let y = b.op("pad", Pad { pads: vec![(before, after), (1, 0)], mode: PadMode::Constant(value) }, &[x]).unwrap();
        let y = b.op("sq", Binary::Mul, &[y, y]).unwrap();
        b.output("y", y);
        let g = b.build().unwrap();
        let x = Rng(seed).tensor(&[s, 3]);
        check(&g, pulse, &x, &[2, 5, 1], 1e-6)?;
    }

    #[test]
    fn stft_after_causal_padding_streams(seed in 1u64..10_000, hop in 2usize..9, nmul in 1usize..4, mult in 1usize..4,
                                         s in 40usize..200, power in any::<bool>()) {
        let n_fft = hop * nmul + rng_extra(seed, hop);
        let mut b = GraphBuilder::new();
        let x = b.input("x", TypedFact::new(DType::F32, [Dim::s()])).unwrap();
        let p = b.op("pad", Pad { pads: vec![(n_fft - hop, 0)], mode: PadMode::Constant(0.0) }, &[x]).unwrap();
        let mut rng = Rng(seed);
        let win = b.constant("win", rng.tensor(&[n_fft])).unwrap();
        let out = if power { StftOutput::Power } else { StftOutput::Magnitude };
        let y = b.op("stft", Stft::new(n_fft, hop, false, out).unwrap(), &[p, win]).unwrap();
        b.output("y", y);
        let g = b.build().unwrap();
        let x = rng.tensor(&[s]);
        check(&g, hop * mult, &x, &[rng.below(30) + 1, 7], 1e-4)?;
    }

    #[test]
    fn constant_prefix_and_suffix_concat_streams(seed in 1u64..10_000, c0 in 0usize..4, c1 in 0usize..4,
                                                 pulse in 1usize..6, s in 1usize..25) {
        prop_assume!(c0 + c1 > 0);
        let mut rng = Rng(seed);
        let mut b = GraphBuilder::new();
        let x = frames_input(&mut b, 2);
        let mut parts = Vec::new();
        if c0 > 0 { parts.push(b.constant("pre", rng.tensor(&[c0, 2])).unwrap()); }
        parts.push(x);
        if c1 > 0 { parts.push(b.constant("post", rng.tensor(&[c1, 2])).unwrap()); }
        let y = b.op("cat", Concat { axis: 0 }, &parts).unwrap();
        b.output("y", y);
        let g = b.build().unwrap();
        let x = rng.tensor(&[s, 2]);
        check(&g, pulse, &x, &[3, 1], 0.0)?;
        let model = pulsify(&g, pulse).unwrap();
        // the output fact follows the stream, never the short constants
        let st = model.output_stream(0).unwrap();
        prop_assert_eq!(st.frames(), pulse);
        prop_assert_eq!(st.len, Dim::s().add_const((c0 + c1) as i64));
    }

    #[test]
    fn stream_positions_match_whole_positions(seed in 1u64..10_000, offset in -3i64..4, pulse in 1usize..6, s in 1usize..30) {
        let mut b = GraphBuilder::new();
        let x = frames_input(&mut b, 2);
        let w0 = b.constant("w0", Rng(seed).tensor(&[2, 2, 3])).unwrap();
        // a conv in front gives the stream a delay the positions must respect
        let y = b.op("conv", Conv1d { stride: 1, dilation: 1, pad: (2, 0), groups: 1, layout: ConvLayout::ChannelsLast }, &[x, w0]).unwrap();
        let pos = b.op("pos", Range { axis: 0, offset }, &[y]).unwrap();
        let pos = b.op("posf", Cast { to: DType::F32 }, &[pos]).unwrap();
        let pos = b.op("col", Unsqueeze { axis: 1 }, &[pos]).unwrap();
        let z = b.op("z", Binary::Add, &[y, pos]).unwrap();
        b.output("z", z);
        let g = b.build().unwrap();
        let x = Rng(seed + 1).tensor(&[s, 2]);
        check(&g, pulse, &x, &[2, 3], 1e-5)?;
    }
}

fn rng_extra(seed: u64, hop: usize) -> usize {
    (seed as usize) % hop
}

/// STFT -> log-mel -> strided conv subsampling -> attention block with a
/// causal depthwise conv: the shape of the shipped encoder, small.
fn encoder_like(rng: &mut Rng, lc: usize) -> Graph {
    let (n_fft, hop, mels, d) = (16, 4, 6, 8);
    let bins = n_fft / 2 + 1;
    let mut b = GraphBuilder::new();
    let x = b
        .input("audio", TypedFact::new(DType::F32, [Dim::s()]))
        .unwrap();
    let p = b
        .op(
            "pad",
            Pad {
                pads: vec![(n_fft - hop, 0)],
                mode: PadMode::Constant(0.0),
            },
            &[x],
        )
        .unwrap();
    let win = b.constant("win", rng.tensor(&[n_fft])).unwrap();
    let spec = b
        .op(
            "stft",
            Stft::new(n_fft, hop, false, StftOutput::Power).unwrap(),
            &[p, win],
        )
        .unwrap();
    let fb_vals: Vec<f32> = rng.vec(bins * mels).iter().map(|v| v.abs()).collect();
    let fb = b
        .constant("fb", Tensor::from_vec(vec![bins, mels], fb_vals).unwrap())
        .unwrap();
    let f = b.op("logmel", LogMel { eps: 1e-3 }, &[spec, fb]).unwrap();
    let conv = |stride| Conv1d {
        stride,
        dilation: 1,
        pad: (2, 0),
        groups: 1,
        layout: ConvLayout::ChannelsLast,
    };
    let w1 = b.constant("w1", rng.tensor(&[d, mels, 3])).unwrap();
    let h = b.op("sub1", conv(2), &[f, w1]).unwrap();
    let h = b.op("act1", Unary::Silu, &[h]).unwrap();
    let w2 = b.constant("w2", rng.tensor(&[d, d, 3])).unwrap();
    let h = b.op("sub2", conv(2), &[h, w2]).unwrap();
    let lin = |b: &mut GraphBuilder, rng: &mut Rng, name: &str, h| {
        let w = b
            .constant(&format!("{name}.w"), rng.tensor(&[d, d]))
            .unwrap();
        b.op(name, Linear, &[h, w]).unwrap()
    };
    let q = lin(&mut b, rng, "q", h);
    let k = lin(&mut b, rng, "k", h);
    let v = lin(&mut b, rng, "v", h);
    let a = b
        .op(
            "attn",
            LimitedAttention {
                heads: 2,
                left_context: lc,
                scale: None,
            },
            &[q, k, v],
        )
        .unwrap();
    let h = b.op("res1", Binary::Add, &[h, a]).unwrap();
    let wd = b.constant("wd", rng.tensor(&[d, 1, 5])).unwrap();
    let dw = Conv1d {
        stride: 1,
        dilation: 1,
        pad: (4, 0),
        groups: d,
        layout: ConvLayout::ChannelsLast,
    };
    let c = b.op("dw", dw, &[h, wd]).unwrap();
    let h = b.op("res2", Binary::Add, &[h, c]).unwrap();
    b.output("h", h);
    b.build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn encoder_like_graph_streams(seed in 1u64..10_000, lc in 0usize..6, mult in 1usize..4, s in 40usize..300) {
        let mut rng = Rng(seed);
        let g = encoder_like(&mut rng, lc);
        let x = rng.tensor(&[s]);
        check(&g, 16 * mult, &x, &[rng.below(50) + 1, 16, 3], 1e-4)?;
    }
}

#[test]
fn pulse_not_a_multiple_of_the_stride_is_a_named_error() {
    let g = conv_graph(&mut Rng(3), 4, 3, 2, 1, (2, 0), 1);
    let e = pulsify(&g, 3)
        .expect_err("pulse 3 with stride 2 must fail")
        .to_string();
    assert!(e.contains("conv") && e.contains("multiple"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn reflect_padding_of_the_stream_streams(seed in 1u64..10_000, before in 0usize..5, after in 0usize..5,
                                             pulse in 1usize..6, s in 1usize..30, conv_first in any::<bool>()) {
        prop_assume!(before + after > 0 && before < s && after < s);
        let mut rng = Rng(seed);
        let mut b = GraphBuilder::new();
        let mut x = frames_input(&mut b, 2);
        if conv_first {
            // a stream that already has warm-up frames
            let w = b.constant("w", rng.tensor(&[2, 2, 2])).unwrap();
            let c = Conv1d { stride: 1, dilation: 1, pad: (1, 0), groups: 1, layout: ConvLayout::ChannelsLast };
            x = b.op("conv", c, &[x, w]).unwrap();
        }
        let y = b.op("pad", Pad { pads: vec![(before, after), (0, 1)], mode: PadMode::Reflect }, &[x]).unwrap();
        let y = b.op("sq", Binary::Mul, &[y, y]).unwrap();
        b.output("y", y);
        let g = b.build().unwrap();
        let x = rng.tensor(&[s, 2]);
        check(&g, pulse, &x, &[rng.below(5) + 1, 2], 1e-6)?;
    }
}
