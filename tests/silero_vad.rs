//! Silero VAD v6 through the engine, against onnxruntime's probabilities on
//! the fixture (fixtures/vad/make_reference.py made them). The weights are
//! fetched by scripts/fetch_silero.sh (run here when they are missing); with
//! no network these tests fail and say so.

mod common;

use common::pulsed;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use pulsed::vad::{SegmentOptions, Segmenter, Vad, CHUNK};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const TOL: f32 = 1e-4;

fn weights() -> PathBuf {
    static FETCHED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FETCHED
        .get_or_init(|| {
            let path = Path::new(ROOT).join(pulsed::models::silero::DEFAULT_WEIGHTS);
            if !path.exists() {
                let st = Command::new("bash").arg(Path::new(ROOT).join("scripts/fetch_silero.sh")).status();
                if !st.is_ok_and(|s| s.success()) || !path.exists() {
                    return Err(format!(
                        "Silero VAD weights missing at {} and scripts/fetch_silero.sh could not fetch them \
                         (needs pip and network access to PyPI); these tests need them",
                        path.display()
                    ));
                }
            }
            Ok(path)
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn vad() -> Vad {
    Vad::load(&weights()).unwrap()
}

struct Reference {
    samples: Vec<f32>,
    probs: Vec<f32>,
}

fn reference() -> Reference {
    let dir = Path::new(ROOT).join("fixtures/vad");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let probs: Vec<f32> = r["probs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    let audio = pulsed::audio::load_wav(&dir.join("mix.wav"), 16_000).unwrap();
    assert_eq!(audio.samples.len() as u64, r["samples"].as_u64().unwrap());
    assert_eq!(probs.len(), audio.samples.len().div_ceil(CHUNK));
    Reference {
        samples: audio.samples,
        probs,
    }
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} probabilities, expected {}",
        got.len(),
        want.len()
    );
    let (i, d) = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .enumerate()
        .fold((0, 0f32), |m, (i, d)| if d > m.1 { (i, d) } else { m });
    assert!(
        d <= TOL,
        "{what}: chunk {i} differs by {d} ({} vs {})",
        got[i],
        want[i]
    );
}

#[test]
fn streamed_probabilities_match_onnxruntime() {
    let r = reference();
    let mut s = vad().session().unwrap();
    let mut p = s.push(&r.samples).unwrap();
    p.extend(s.flush().unwrap());
    assert_close(&p, &r.probs, "streamed");
    assert!(
        r.probs.iter().any(|&p| p > 0.9) && r.probs.iter().any(|&p| p < 0.1),
        "fixture has speech and non-speech"
    );
}

#[test]
fn whole_utterance_probabilities_match_onnxruntime() {
    let r = reference();
    assert_close(&vad().probs(&r.samples).unwrap(), &r.probs, "whole");
}

#[test]
fn pushes_of_any_length_and_reset_give_the_same_probabilities() {
    let r = reference();
    let mut s = vad().session().unwrap();
    for round in 0..2 {
        s.reset();
        let mut p = Vec::new();
        let mut rest = &r.samples[..];
        for k in [1usize, 100, 777, 511, 512, 513, 4000, 3].iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let n = (*k).min(rest.len());
            p.extend(s.push(&rest[..n]).unwrap());
            rest = &rest[n..];
        }
        p.extend(s.flush().unwrap());
        assert_eq!(s.samples() as usize, r.samples.len());
        assert_close(&p, &r.probs, &format!("round {round}"));
    }
}

#[test]
fn segments_cover_the_speech_of_the_fixture() {
    let r = reference();
    let segs = Segmenter::segments(SegmentOptions::default(), &r.probs, r.samples.len() as u64);
    let secs: Vec<(f64, f64)> = segs.iter().map(|s| s.seconds(16_000)).collect();
    // mix.wav: 0.6 s silence, speech to ~4.0 s, silence and noise, speech ~5.7-7.4 s
    assert!(secs.len() >= 2, "{secs:?}");
    assert!((secs[0].0 - 0.6).abs() < 0.1, "{secs:?}");
    assert!(
        secs.iter().all(|s| !(s.0 > 4.7 && s.1 < 5.6)),
        "no segment in the noise alone: {secs:?}"
    );
    assert!(secs.last().unwrap().1 > 7.0, "{secs:?}");
}

#[test]
fn pulsed_graph_reads_one_chunk_per_step() {
    let v = vad();
    let m = v.pulsed_model();
    assert_eq!(m.input_stream().unwrap().pulse, CHUNK);
    let probs = m.output_stream(0).unwrap();
    assert_eq!((probs.pulse, probs.delay), (1, 0));
    let dump = m.dump();
    assert!(
        dump.contains("Delay") && dump.contains("PulsedLstm"),
        "{dump}"
    );
}

fn write_wav(path: &Path, rate: u32, channels: u16, samples: &[f32]) {
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for &s in samples {
        for _ in 0..channels {
            w.write_sample((s * 32767.0) as i16).unwrap();
        }
    }
    w.finalize().unwrap();
}

#[test]
fn cli_prints_segments_and_error_lines_and_handles_rates_and_channels() {
    let w = weights();
    let r = reference();
    let d = std::env::temp_dir().join(format!("pulsed-vad-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    // 48 kHz stereo: every third output sample is the 16 kHz one, repeated
    let up: Vec<f32> = r.samples.iter().flat_map(|&s| [s, s, s]).collect();
    let stereo = d.join("stereo48k.wav");
    write_wav(&stereo, 48_000, 2, &up);
    let empty = d.join("empty.wav");
    write_wav(&empty, 16_000, 1, &[]);
    let corrupt = d.join("corrupt.wav");
    std::fs::write(&corrupt, b"RIFF\x10\x00\x00\x00WAVEjunkjunk").unwrap();
    let mix = format!("{ROOT}/fixtures/vad/mix.wav");
    let args = [
        "vad",
        "--weights",
        w.to_str().unwrap(),
        &mix,
        corrupt.to_str().unwrap(),
        stereo.to_str().unwrap(),
        empty.to_str().unwrap(),
    ];
    let (code, out, err) = pulsed(&args);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |f: &str| {
        lines
            .iter()
            .filter(|l| l["file"].as_str().is_some_and(|x| x.ends_with(f)))
            .collect::<Vec<_>>()
    };
    let mix_segs = of("mix.wav");
    assert!(
        mix_segs.len() >= 2
            && mix_segs
                .iter()
                .all(|l| l["start"].as_f64().unwrap() < l["end"].as_f64().unwrap()),
        "{out}"
    );
    assert!(of("corrupt.wav")[0]["error"].is_string(), "{out}");
    let st = of("stereo48k.wav");
    assert_eq!(st.len(), mix_segs.len(), "{out}");
    for (a, b) in st.iter().zip(&mix_segs) {
        assert!(
            (a["start"].as_f64().unwrap() - b["start"].as_f64().unwrap()).abs() < 0.1,
            "{out}"
        );
    }
    let e = of("empty.wav");
    assert!(e.len() == 1 && e[0]["error"].is_string(), "{out}");
    // --probs: one line per file, the reference within tolerance
    let (code, out, err) = pulsed(&["vad", "--probs", "--weights", w.to_str().unwrap(), &mix]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let p: Vec<f32> = v["probs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_close(&p, &r.probs, "cli --probs");
}
