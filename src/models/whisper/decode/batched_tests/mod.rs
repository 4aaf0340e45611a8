//! The batched mode: its VAD arithmetic against faster-whisper's
//! (testdata/batched.json, made by scripts/whisper/reference_batched.py)
//! here, the pipeline over a scripted backend (batching, windows, prompts,
//! times back on the recording) in `pipeline.rs`, and over tiny.en against
//! faster-whisper's `BatchedInferencePipeline` fed the same speech segments
//! in `reference.rs`. Tests that need a tokenizer, a checkpoint or the
//! Silero weights skip, saying why.

use std::path::{Path, PathBuf};

use super::*;
use crate::models::whisper::decode::chunks::{collect_chunks, SpeechMap};
use crate::models::whisper::decode::speech::speech_segments;
use crate::models::whisper::decode::testing::Scripted;
use crate::models::whisper::tokenizer::tests::local_tokenizer;
use crate::models::whisper::{CpuWhisper, WhisperModel};
use crate::vad::Segment as Speech;

mod pipeline;
mod reference;

fn golden() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/models/whisper/decode/testdata/batched.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A float written as Python's repr (parsed exactly, unlike serde_json's
/// default number parsing).
fn exact(v: &serde_json::Value) -> f64 {
    v.as_str().unwrap().parse().unwrap()
}

fn speech_of(v: &serde_json::Value) -> Vec<Speech> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| Speech {
            start: s[0].as_u64().unwrap(),
            end: s[1].as_u64().unwrap(),
        })
        .collect()
}

/// get_speech_timestamps (longest-segment split included), collect_chunks
/// and SpeechTimestampsMap give faster-whisper's numbers exactly.
#[test]
fn vad_arithmetic_matches_faster_whisper() {
    let g = golden();
    let mut checked = 0;
    for case in g["vad"].as_array().unwrap() {
        let probs: Vec<f32> = case["probs_milli"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m.as_f64().unwrap() / 1000.0) as f32)
            .collect();
        let total = case["total"].as_u64().unwrap() as usize;
        for r in case["results"].as_array().unwrap() {
            let o = &r["options"];
            let opts = SegmentOptions {
                threshold: o["threshold"].as_f64().unwrap() as f32,
                neg_threshold: None,
                min_speech_ms: o["min_speech_ms"].as_u64().unwrap() as u32,
                min_silence_ms: o["min_silence_ms"].as_u64().unwrap() as u32,
                speech_pad_ms: o["speech_pad_ms"].as_u64().unwrap() as u32,
                ..SegmentOptions::default()
            };
            let max_s = o["max_speech_s"].as_f64().unwrap();
            let at = format!("seed {} {o}", case["seed"]);
            let speech = speech_segments(&probs, total, &opts, max_s);
            assert_eq!(speech, speech_of(&r["speech"]), "{at}");

            let chunks = collect_chunks(&speech, max_s * 16000.0);
            let got: Vec<(f64, f64)> = chunks
                .iter()
                .map(|c| (c.offset as f64 / 16000.0, c.samples as f64 / 16000.0))
                .collect();
            let want: Vec<(f64, f64)> = r["chunks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| (exact(&c[0]), exact(&c[1])))
                .collect();
            assert_eq!(got, want, "{at}");

            let map = SpeechMap::new(&speech, 16000);
            for q in r["queries"].as_array().unwrap() {
                let t = exact(&q[0]);
                let start = map.original(t, map.index(t, false));
                let end = map.original(t, map.index(t, true));
                assert_eq!(start, exact(&q[1]), "{at} start {t}");
                assert_eq!(end, exact(&q[2]), "{at} end {t}");
                checked += 1;
            }
        }
    }
    assert!(checked > 100);
}
