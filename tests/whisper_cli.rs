//! `pulsed transcribe --model whisper-tiny.en` as a user runs it: the
//! reference's transcript on a real clip, every output format, and bad
//! model folders refused with one-line reasons (the checkpoint is fetched
//! by the test command: `pulsed fetch whisper-tiny.en`).

mod common;

use std::path::{Path, PathBuf};

use common::{pulsed, temp_dir};

const CLIP: &str = "fixtures/whisper/librivox_dev00.wav";

fn golden_text(run: &str) -> String {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/whisper/whisper-tiny.en_dev00.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    v["runs"][run]["text"].as_str().unwrap().trim().to_string()
}

fn clip() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(CLIP)
        .display()
        .to_string()
}

/// The cached checkpoint's folder (fails with the fetch command when absent).
fn tiny_dir() -> PathBuf {
    pulsed::models::whisper::folder::resolve("whisper-tiny.en").unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn greedy_and_beam_text_equal_faster_whisper() {
    let _ = tiny_dir();
    let c = clip();
    // faster-whisper pads a window with feature zeros: `--padding zeros`
    let (code, out, err) = pulsed(&[
        "transcribe",
        "--model",
        "whisper-tiny.en",
        "--beam",
        "1",
        "--no-fallback",
        "--without-timestamps",
        "--padding",
        "zeros",
        &c,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), golden_text("greedy_notimestamps"));
    // its defaults: beam 5, timestamps, fallback
    let (code, out, err) = pulsed(&[
        "transcribe",
        "--model",
        "whisper-tiny.en",
        "--padding",
        "zeros",
        &c,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), golden_text("beam5_timestamps"));
}

/// Padded with silence, as Whisper was trained (the default), tiny.en
/// reads the clip's "ill-disposed", which it mishears with faster-whisper's
/// zeros.
#[test]
fn silence_padding_is_the_default() {
    let _ = tiny_dir();
    let c = clip();
    let run = |extra: &[&str]| {
        let mut args = vec!["transcribe", "--model", "whisper-tiny.en"];
        args.extend_from_slice(extra);
        args.push(&c);
        let (code, out, err) = pulsed(&args);
        assert_eq!(code, 0, "{err}");
        out.trim().to_string()
    };
    let default = run(&[]);
    assert_eq!(default, run(&["--padding", "silence"]));
    assert_ne!(default, golden_text("beam5_timestamps"));
    assert_eq!(default, "He was not an ill-disposed young man.");
    let (code, _, err) = pulsed(&[
        "transcribe",
        "--model",
        "whisper-tiny.en",
        "--padding",
        "noise",
        &c,
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("noise"), "{err}");
}

#[test]
fn formats_carry_words_segments_and_cues() {
    let dir = tiny_dir();
    let c = clip();
    let model = dir.to_str().unwrap();
    let (code, out, err) = pulsed(&["transcribe", "--model", model, "--format", "jsonl", &c]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["language"], "en");
    let words = v["words"].as_array().unwrap();
    assert_eq!(words.len(), 8, "{out}");
    let mut last = 0.0;
    for w in words {
        let (s, e) = (w["start"].as_f64().unwrap(), w["end"].as_f64().unwrap());
        assert!(last <= s && s <= e && e <= 3.0, "{out}");
        last = e;
        let p = w["confidence"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p));
    }
    assert_eq!(v["segments"].as_array().unwrap().len(), 1);
    for (fmt, head) in [("srt", "1\n00:00:00,000 --> "), ("vtt", "WEBVTT")] {
        let (code, out, err) = pulsed(&["transcribe", "--model", model, "--format", fmt, &c]);
        assert_eq!(code, 0, "{err}");
        assert!(out.starts_with(head), "{fmt}: {out}");
        assert!(out.contains("young man."), "{fmt}: {out}");
    }
}

/// Copies the checkpoint's small files, then lets `f` spoil the folder.
fn spoiled(name: &str, f: impl FnOnce(&Path)) -> PathBuf {
    let src = tiny_dir();
    let d = temp_dir(name);
    for file in ["config.json", "tokenizer.json", "generation_config.json"] {
        std::fs::copy(src.join(file), d.join(file)).unwrap();
    }
    f(&d);
    d
}

fn refused(model: &Path) -> String {
    let (code, out, err) = pulsed(&["transcribe", "--model", model.to_str().unwrap(), &clip()]);
    assert_eq!(code, 2, "stdout {out} stderr {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    lines[0].to_string()
}

#[test]
fn bad_model_folders_are_refused_in_one_line() {
    // no weights at all
    let d = spoiled("whisper-noweights", |_| {});
    let e = refused(&d);
    assert!(e.contains("`model.safetensors` is missing"), "{e}");
    // truncated weights
    let d = spoiled("whisper-truncated", |d| {
        let bytes = std::fs::read(tiny_dir().join("model.safetensors")).unwrap();
        std::fs::write(d.join("model.safetensors"), &bytes[..bytes.len() / 3]).unwrap();
    });
    let e = refused(&d);
    assert!(e.contains("safetensors"), "{e}");
    // weights of another shape: the config claims a wider model
    let d = spoiled("whisper-shapes", |d| {
        std::fs::copy(
            tiny_dir().join("model.safetensors"),
            d.join("model.safetensors"),
        )
        .unwrap();
        let cfg = std::fs::read_to_string(d.join("config.json")).unwrap();
        let cfg = cfg.replacen("\"d_model\": 384", "\"d_model\": 768", 1);
        assert!(cfg.contains("768"), "config.json layout changed: {cfg}");
        std::fs::write(d.join("config.json"), cfg).unwrap();
    });
    let e = refused(&d);
    assert!(e.contains("expected shape"), "{e}");
    // a broken tokenizer
    let d = spoiled("whisper-tokenizer", |d| {
        std::fs::copy(
            tiny_dir().join("model.safetensors"),
            d.join("model.safetensors"),
        )
        .unwrap();
        std::fs::write(d.join("tokenizer.json"), "{\"not\": \"a tokenizer\"}").unwrap();
    });
    let e = refused(&d);
    assert!(e.contains("tokenizer.json"), "{e}");
    // a short name that was never fetched
    let (code, _, err) = pulsed(&["transcribe", "--model", "whisper-huge-nonexistent", &clip()]);
    assert_eq!(code, 2);
    assert!(err.contains("pulsed models"), "{err}");
}

#[test]
fn a_bad_file_fails_alone() {
    let _ = tiny_dir();
    let d = temp_dir("whisper-badwav");
    let bad = d.join("bad.wav");
    std::fs::write(&bad, b"RIFF\x10\x00\x00\x00WAVEjunk").unwrap();
    let c = clip();
    let (code, out, err) = pulsed(&[
        "transcribe",
        "--model",
        "whisper-tiny.en",
        "--format",
        "jsonl",
        "--beam",
        "1",
        bad.to_str().unwrap(),
        &c,
    ]);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0]["error"].is_string(), "{out}");
    assert!(
        lines[1]["text"].as_str().unwrap().contains("young man"),
        "{out}"
    );
}

#[test]
fn files_taken_together_each_get_their_own_text() {
    let _ = tiny_dir();
    let d = temp_dir("whisper-together");
    let bad = d.join("bad.wav");
    std::fs::write(&bad, b"RIFF\x10\x00\x00\x00WAVEjunk").unwrap();
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/asr/hello.wav");
    let c = clip();
    let files = [bad.to_str().unwrap(), &c, hello.to_str().unwrap()];
    let run = |batch: &str| {
        let mut args = vec![
            "transcribe",
            "--model",
            "whisper-tiny.en",
            "--format",
            "jsonl",
        ];
        args.extend(["--beam", "2", "-j", "1", "--batch-size", batch]);
        args.extend(files);
        let (code, out, err) = pulsed(&args);
        assert_eq!(code, 1, "{err}");
        let mut lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        lines.sort_by_key(|l| l["file"].as_str().unwrap_or_default().to_string());
        lines
    };
    // one worker takes all three: the bad file fails alone, the others
    // read as when each is decoded on its own
    let together = run("3");
    let alone = run("1");
    assert_eq!(together.len(), 3);
    assert_eq!(together, alone);
    assert_eq!(
        together.iter().filter(|l| l["error"].is_string()).count(),
        1
    );
    assert!(together
        .iter()
        .any(|l| l["text"].as_str().is_some_and(|t| t.contains("young man"))));
}

/// `bench` on a checkpoint that streams (tiny.en's weights, chunks of 16
/// frames, 8 of look-ahead) times the streamed encoder's chunk step too.
#[test]
fn bench_times_the_streamed_chunk_step() {
    let d = spoiled("whisper-chunked", |d| {
        let cfg = std::fs::read_to_string(d.join("config.json")).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&cfg).unwrap();
        v["pulsed_encoder_context"] = serde_json::json!({"chunk": 16, "left": 1500, "right": 8});
        std::fs::write(d.join("config.json"), v.to_string()).unwrap();
    });
    // the weights are large: a link, not a copy
    let weights = tiny_dir().join("model.safetensors");
    #[cfg(unix)]
    std::os::unix::fs::symlink(&weights, d.join("model.safetensors")).unwrap();
    #[cfg(not(unix))]
    std::fs::copy(&weights, d.join("model.safetensors")).unwrap();
    let (code, out, err) = pulsed(&["bench", "--model", d.to_str().unwrap(), "--reps", "1"]);
    assert_eq!(code, 0, "stdout {out} stderr {err}");
    let line = out
        .lines()
        .find(|l| l.contains("streamed encoder:"))
        .unwrap_or_else(|| panic!("no streamed encoder line: {out}"));
    assert!(
        line.contains("93 chunk steps of 32 feature frames") && line.contains("512.5 ms"),
        "{line}"
    );
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("cpu: median")),
        "{out}"
    );
}
