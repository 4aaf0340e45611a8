//! Streaming equivalence (invariant 1) and per-step fact consistency
//! (invariant 2) over random graphs, shapes, pulses and push sizes.

mod common;

use common::Rng;
use proptest::prelude::*;
use pulsed::graph::{Graph, GraphBuilder};
use pulsed::ops::limited_attention::LimitedAttention;
use pulsed::ops::{Binary, DType, Dim, TypedFact, Unary};
use pulsed::pulse::verify::check_streaming;

fn attention_graph(c: usize, heads: usize, lc: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b
        .input(
            "x",
            TypedFact::new(DType::F32, [Dim::s(), Dim::n(c as i64)]),
        )
        .unwrap();
    let two = b
        .constant("two", pulsed::ops::Tensor::scalar(2.0f32))
        .unwrap();
    let q = b.op("q", Binary::Mul, &[x, two]).unwrap();
    let k = b.op("k", Unary::Tanh, &[x]).unwrap();
    let v = b.op("v", Unary::Sigmoid, &[x]).unwrap();
    let a = b
        .op(
            "attn",
            LimitedAttention {
                heads,
                left_context: lc,
                scale: None,
            },
            &[q, k, v],
        )
        .unwrap();
    let y = b.op("res", Binary::Add, &[a, x]).unwrap();
    b.output("y", y);
    b.build().unwrap()
}

#[test]
fn attention_graph_streams_exactly() {
    let g = attention_graph(8, 2, 5);
    let mut rng = Rng(7);
    let x = rng.tensor(&[37, 8]);
    let r = check_streaming(&g, 3, &x, &[1, 4, 2, 7], 1e-5).unwrap();
    assert_eq!(r.delays, vec![0]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_attention_graphs_stream(seed in 1u64..10_000, heads in 1usize..3, lc in 0usize..9,
                                      pulse in 1usize..7, s in 1usize..40) {
        let c = heads * 4;
        let g = attention_graph(c, heads, lc);
        let mut rng = Rng(seed);
        let x = rng.tensor(&[s, c]);
        let pushes = [rng.below(9) + 1, rng.below(3) + 1, pulse];
        check_streaming(&g, pulse, &x, &pushes, 1e-5).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
}

/// `layers` chunked self-attentions in a row (their look-aheads add up),
/// each with a residual.
fn chunked_graph(c: usize, heads: usize, ctx: (usize, usize, usize), layers: usize) -> Graph {
    use pulsed::ops::chunked_attention::ChunkedAttention;
    let mut b = GraphBuilder::new();
    let mut x = b
        .input(
            "x",
            TypedFact::new(DType::F32, [Dim::s(), Dim::n(c as i64)]),
        )
        .unwrap();
    let two = b
        .constant("two", pulsed::ops::Tensor::scalar(2.0f32))
        .unwrap();
    for l in 0..layers {
        let q = b.op(&format!("q{l}"), Binary::Mul, &[x, two]).unwrap();
        let k = b.op(&format!("k{l}"), Unary::Tanh, &[x]).unwrap();
        let v = b.op(&format!("v{l}"), Unary::Sigmoid, &[x]).unwrap();
        let op = ChunkedAttention {
            heads,
            chunk: ctx.0,
            left: ctx.1,
            right: ctx.2,
        };
        let a = b.op(&format!("attn{l}"), op, &[q, k, v]).unwrap();
        x = b.op(&format!("res{l}"), Binary::Add, &[a, x]).unwrap();
    }
    b.output("y", x);
    b.build().unwrap()
}

#[test]
fn chunked_attention_streams_exactly() {
    let g = chunked_graph(8, 2, (4, 3, 2), 2);
    let mut rng = Rng(11);
    let x = rng.tensor(&[41, 8]);
    // a pulse of one chunk: the first layer's queries wait a chunk (the
    // last of the chunk then needs 2 frames more, which the pulse brings);
    // the second starts on a chunk's end and waits as long again for its
    // own 2-frame look-ahead
    let r = check_streaming(&g, 4, &x, &[1, 4, 2, 7], 1e-5).unwrap();
    assert_eq!(r.delays, vec![8]);
    // a pulse that is not a whole number of chunks: the worst case, 3 + 2 a layer
    let r = check_streaming(&g, 3, &x, &[1, 4, 2, 7], 1e-5).unwrap();
    assert_eq!(r.delays, vec![10]);
    // no look-ahead, pulses of whole chunks from the stream start: every
    // pulse holds whole chunks, so no layer waits
    let g = chunked_graph(8, 2, (4, 3, 0), 3);
    let r = check_streaming(&g, 8, &x, &[5, 8, 13], 1e-5).unwrap();
    assert_eq!(r.delays, vec![0]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_chunked_attention_graphs_stream(seed in 1u64..10_000, heads in 1usize..3,
                                              chunk in 1usize..6, left in 0usize..9, right in 0usize..4,
                                              layers in 1usize..3, pulse in 1usize..9, s in 1usize..40) {
        let c = heads * 4;
        let g = chunked_graph(c, heads, (chunk, left, right), layers);
        let mut rng = Rng(seed);
        let x = rng.tensor(&[s, c]);
        let pushes = [rng.below(9) + 1, rng.below(3) + 1, pulse];
        check_streaming(&g, pulse, &x, &pushes, 1e-5).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
}
