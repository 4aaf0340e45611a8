//! The `pulsed` binary as a user runs it.

mod common;

use common::{pulsed, temp_dir};

const HELLO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/asr/hello.wav");

#[test]
fn transcribes_the_shipped_wav_as_text() {
    let (code, out, err) = pulsed(&["transcribe", HELLO]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "if anything can go wrong it will");
}

#[test]
fn a_bad_file_gets_its_own_error_line_and_the_run_goes_on() {
    let d = temp_dir("bad");
    let bad = d.join("corrupt.wav");
    std::fs::write(&bad, b"RIFF\x10\x00\x00\x00WAVEjunkjunk").unwrap();
    let missing = d.join("missing.wav");
    let (code, out, err) = pulsed(&[
        "transcribe",
        "--format",
        "jsonl",
        bad.to_str().unwrap(),
        HELLO,
        missing.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0]["error"].is_string());
    assert_eq!(lines[1]["text"], "if anything can go wrong it will");
    assert!(lines[1]["words"].as_array().is_some_and(|w| w.len() == 7));
    assert!(lines[2]["error"].is_string());
    assert!(err.lines().any(|l| l.contains("corrupt.wav")), "{err}");
}

#[test]
fn subtitles_and_whole_mode() {
    let (code, out, err) = pulsed(&["transcribe", "--format", "vtt", "--whole", HELLO]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("WEBVTT"), "{out}");
    assert!(out.contains("-->"));
    let (code, out, _) = pulsed(&["transcribe", "--format", "srt", "--pulse", "640", HELLO]);
    assert_eq!(code, 0);
    assert!(out.starts_with("1\n"), "{out}");
}

#[test]
fn bad_arguments_exit_non_zero_with_one_line() {
    let (code, _, err) = pulsed(&["transcribe", "--pulse", "1000", HELLO]);
    assert_eq!(code, 2);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("multiple"), "{err}");
    let (code, _, err) = pulsed(&["transcribe", "--model", "/nonexistent", HELLO]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent"), "{err}");
}

#[test]
fn inspect_prints_facts_and_pulsed_delays() {
    let (code, out, err) = pulsed(&["inspect"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("frontend.stft"), "{out}");
    assert!(out.contains("f32[S]"));
    let (code, out, err) = pulsed(&["inspect", "--pulse", "5120"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("delay"), "{out}");
    assert!(out.contains("pulse 5120 samples"), "{out}");
}

#[test]
fn compare_without_a_gpu_says_so_in_one_line() {
    if pulsed::gpu::GpuDevice::shared().is_ok() {
        eprintln!("a GPU is usable here; the no-GPU message is not shown");
        return;
    }
    let (code, _, err) = pulsed(&["compare"]);
    assert_eq!(code, 2);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("no usable GPU"), "{err}");
}
