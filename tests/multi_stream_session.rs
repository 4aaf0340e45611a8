//! Batched streams: the shipped model over `[B, S]`, pulsified, gives each
//! stream what a session of its own gives, whatever the streams' lengths.

use pulsed::audio;
use pulsed::graph::Runner;
use pulsed::models::conformer::{Head, Taps};
use pulsed::models::ModelDir;
use pulsed::ops::Tensor;
use pulsed::pulse::{pulsify, MultiStreamError, MultiStreamSession, StreamingSession};
use pulsed::Error;

const HELD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/asr/heldout");
const TAPS: Taps = Taps {
    head: Head::LogProbs,
    intermediates: false,
};

fn model() -> ModelDir {
    ModelDir::open(ModelDir::default_path()).unwrap()
}

/// Three held-out utterances, the last cut short so lengths differ by more
/// than a pulse and one ends inside a pulse.
fn utterances() -> Vec<Vec<f32>> {
    let mut v: Vec<Vec<f32>> = ["00.wav", "01.wav", "02.wav"]
        .iter()
        .map(|f| {
            audio::load_wav(std::path::Path::new(&format!("{HELD}/{f}")), 16000)
                .unwrap()
                .samples
        })
        .collect();
    let half = v[2].len() / 2 + 77;
    v[2].truncate(half);
    v
}

/// Each stream through its own unbatched session.
fn one_by_one(m: &ModelDir, pulse: usize, utts: &[Vec<f32>]) -> Vec<Tensor> {
    let model = pulsify(&m.graph(TAPS).unwrap(), pulse).unwrap();
    let mut s = StreamingSession::new(model).unwrap();
    utts.iter()
        .map(|u| s.run_all(u).unwrap().remove(0))
        .collect()
}

/// Every stream through one batched session, fed in uneven pieces.
fn batched(session: &mut MultiStreamSession, utts: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let mut rest: Vec<&[f32]> = utts.iter().map(|u| u.as_slice()).collect();
    let mut rows = vec![Vec::new(); utts.len()];
    let mut next = vec![0u64; utts.len()];
    while !session.all_done() {
        for (b, r) in rest.iter_mut().enumerate() {
            // pieces of 1500: they need not line up with pulses
            while !r.is_empty() && session.room(b).unwrap() > 0 {
                let took = session.fill(b, &r[..r.len().min(1500)]).unwrap();
                *r = &r[took..];
            }
            if r.is_empty() && session.room(b).unwrap() > 0 {
                session.end(b).unwrap();
            }
        }
        for c in session.step().unwrap() {
            assert_eq!(
                c.chunk.start, next[c.stream],
                "stream {} frames in order",
                c.stream
            );
            next[c.stream] += c.chunk.data.shape()[0] as u64;
            rows[c.stream].extend(c.chunk.data.to_f32_vec());
        }
    }
    rows
}

#[test]
fn batched_streams_equal_their_own_sessions() {
    let m = model();
    let utts = utterances();
    let pulse = 5120;
    let want = one_by_one(&m, pulse, &utts);
    let graph = m.batched_graph(TAPS, utts.len()).unwrap();
    let pulsed = pulsify(&graph, pulse).unwrap();
    pulsed.check_facts().unwrap();
    let mut session = MultiStreamSession::new(pulsed).unwrap();
    assert_eq!((session.batch(), session.pulse()), (3, pulse));
    let got = batched(&mut session, &utts);
    for (b, (g, w)) in got.iter().zip(&want).enumerate() {
        let w = w.to_f32_vec();
        assert_eq!(g.len(), w.len(), "stream {b}: frames");
        let d = g
            .iter()
            .zip(&w)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(d <= 1e-4, "stream {b}: max abs diff {d}");
    }
    // a reset session gives the same again
    session.reset();
    assert_eq!(batched(&mut session, &utts), got);
}

#[test]
fn batched_whole_graph_equals_unbatched_on_equal_lengths() {
    let m = model();
    let mut utts = utterances();
    let n = utts.iter().map(Vec::len).min().unwrap();
    utts.iter_mut().for_each(|u| u.truncate(n));
    let whole = Runner::new(m.graph(TAPS).unwrap()).unwrap();
    let mut flat = Vec::new();
    utts.iter().for_each(|u| flat.extend_from_slice(u));
    let input = Tensor::from_vec(vec![utts.len(), n], flat).unwrap();
    let out = Runner::new(m.batched_graph(TAPS, utts.len()).unwrap())
        .unwrap()
        .run(&[input])
        .unwrap()
        .remove(0);
    let mut whole = whole;
    for (b, u) in utts.iter().enumerate() {
        let one = whole.run(&[Tensor::from_slice(u)]).unwrap().remove(0);
        let entry = out.narrow(0, b, 1).unwrap().contiguous();
        let d = entry
            .reshape(one.shape())
            .unwrap()
            .max_abs_diff(&one)
            .unwrap();
        assert!(d <= 1e-4, "utterance {b}: max abs diff {d}");
    }
}

fn batch_err(e: Error) -> MultiStreamError {
    match e {
        Error::MultiStream(b) => b,
        other => panic!("expected a batch error, got {other}"),
    }
}

#[test]
fn bad_feeds_are_typed_errors_that_use_nothing() {
    let m = model();
    let pulsed = pulsify(&m.batched_graph(TAPS, 2).unwrap(), 640).unwrap();
    let mut s = MultiStreamSession::new(pulsed).unwrap();
    assert_eq!(
        batch_err(s.fill(2, &[0.0]).unwrap_err()),
        MultiStreamError::NoSuchStream {
            stream: 2,
            batch: 2
        }
    );
    assert!(matches!(
        batch_err(s.fill(0, &[0.0, f32::NAN]).unwrap_err()),
        MultiStreamError::NotFinite { stream: 0, index: 1, value } if value.is_nan()
    ));
    assert_eq!(s.room(0).unwrap(), 640, "a rejected feed takes nothing");
    assert_eq!(s.fill(0, &[0.5; 100]).unwrap(), 100);
    assert_eq!(
        batch_err(s.step().unwrap_err()),
        MultiStreamError::NotReady {
            stream: 0,
            filled: 100,
            pulse: 640
        }
    );
    s.end(0).unwrap();
    assert_eq!(
        batch_err(s.fill(0, &[0.0]).unwrap_err()),
        MultiStreamError::Ended { stream: 0 }
    );
    assert!(matches!(
        batch_err(s.step().unwrap_err()),
        MultiStreamError::NotReady { stream: 1, .. }
    ));
    // an unbatched pulsed graph is refused
    let one = pulsify(&m.graph(TAPS).unwrap(), 640).unwrap();
    assert!(matches!(
        batch_err(MultiStreamSession::new(one).err().unwrap()),
        MultiStreamError::NotBatched { .. }
    ));
}

#[test]
fn the_fused_greedy_head_has_no_batched_form() {
    let m = model();
    let e = m.batched_graph(Taps::default(), 2).unwrap_err();
    assert!(e.to_string().contains("log-probs"), "{e}");
}
