//! The streaming student a user fetches, `whisper-base-streaming-640ms`
//! (`bash scripts/fetch_whisper.sh whisper-base-streaming-640ms`: whisper-base
//! and the delta committed in `models/`, rebuilt and checked against its
//! checksum), run as a user runs it: its encoder streams exactly at
//! 632.5 ms, and it transcribes a person reading, offline and live; the
//! same weights at 312.5 ms are `whisper-base-streaming-320ms`.
//! `scripts/test.sh` fetches both.

mod common;

use std::path::Path;

use common::pulsed;
use pulsed::asr::metrics::{normalize, ErrorCounts};
use pulsed::graph::Runner;
use pulsed::ops::Tensor;
use pulsed::pulse::verify::check_streaming;
use pulsed::whisper::{graphs, streaming, WhisperModel};
use serde_json::Value;

const MODEL: &str = "whisper-base-streaming-640ms";
const MODEL_320: &str = "whisper-base-streaming-320ms";
const CLIP: &str = "fixtures/whisper/librivox_dev00.wav";
/// The clip's human transcript (`fixtures/whisper/README.md`).
const SAID: &str = "he was not an ill disposed young man";

fn model(name: &str) -> WhisperModel {
    WhisperModel::open(name).unwrap_or_else(|e| {
        panic!("{e}\n(the test command fetches it: bash scripts/fetch_whisper.sh {name})")
    })
}

fn clip() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(CLIP)
        .display()
        .to_string()
}

fn word_errors(reference: &str, hypothesis: &str) -> usize {
    let mut e = ErrorCounts::default();
    e.add(&normalize(reference), &normalize(hypothesis));
    e.word_edits
}

/// `m`'s encoder streams in chunks of `chunk` frames, every layer looking
/// `right` frames ahead through copies, and waits no more than that.
fn assert_streams(m: &WhisperModel, chunk: usize, right: usize) {
    let ctx = streaming::context(&m.config).unwrap();
    assert_eq!(
        (ctx.chunk, ctx.right, ctx.right_copies),
        (chunk, right, true)
    );
    let p = streaming::pulsed_encoder(&m.config, &m.f32_weights).unwrap();
    assert_eq!(p.input_stream().unwrap().pulse, 2 * chunk);
    let out = p.output_stream(0).unwrap();
    assert_eq!(out.pulse, chunk);
    assert!(out.delay <= chunk + right + 2, "delay {}", out.delay);
    p.check_facts().unwrap();
}

#[test]
fn the_student_streams_in_chunks_of_320_ms_with_280_ms_of_look_ahead() {
    assert_streams(&model(MODEL), 16, 14);
}

/// The trained weights, not only the mask, stream exactly: on the clip's
/// features, pulse by pulse, within float rounding of the stream graph.
#[test]
fn the_students_pulsed_encoder_gives_its_stream_graphs_frames() {
    let m = model(MODEL);
    let n_mels = m.config.num_mel_bins;
    let audio = pulsed::audio::load_wav(Path::new(&clip()), 16_000)
        .unwrap()
        .samples;
    let mut mel = Runner::new(graphs::log_mel_frames(n_mels).unwrap()).unwrap();
    mel.step(&[&Tensor::from_slice(&audio)]).unwrap();
    let mut x = mel.output(0).to_f32_vec();
    let top = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for v in &mut x {
        *v = (v.max(top - 8.0) + 4.0) / 4.0;
    }
    let frames = x.len() / n_mels;
    let x = Tensor::from_vec(vec![frames, n_mels], x).unwrap();
    let g = streaming::encoder(&m.config, &m.f32_weights).unwrap();
    for pulse in [32, 20] {
        check_streaming(&g, pulse, &x, &[7, 32, 61, 1], 1e-4)
            .unwrap_or_else(|e| panic!("pulse {pulse}: {e}"));
    }
}

#[test]
fn the_student_transcribes_a_person_reading() {
    for name in [MODEL, MODEL_320] {
        let (code, out, err) =
            pulsed(&["transcribe", "--model", name, "--language", "en", &clip()]);
        assert_eq!(code, 0, "{err}");
        assert!(word_errors(SAID, &out) <= 1, "{name}: {out:?}");
    }
}

/// The 320 ms variant is the same weights (one delta, two configs) at
/// chunks of 160 ms with 120 ms of look-ahead.
#[test]
fn the_320_ms_variant_streams_the_same_weights_in_chunks_of_160_ms() {
    let (m, m640) = (model(MODEL_320), model(MODEL));
    let name = "model.encoder.layers.3.fc1.weight";
    assert_eq!(
        m.f32_weights.tensor(name).unwrap().to_f32_vec(),
        m640.f32_weights.tensor(name).unwrap().to_f32_vec()
    );
    assert_streams(&m, 8, 6);
}

#[test]
fn live_the_students_final_line_is_what_was_said() {
    let (code, out, err) = pulsed(&[
        "mic",
        "--model",
        MODEL,
        "--language",
        "en",
        "--input",
        &clip(),
        "--format",
        "jsonl",
    ]);
    assert_eq!(code, 0, "{err}");
    let finals: Vec<String> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|e| e["type"] == "final")
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect();
    let text = finals.join(" ");
    assert!(word_errors(SAID, &text) <= 1, "{text:?}");
}
