//! The `pulsed` binary as a user runs it.

mod common;

use common::{pulsed, temp_dir};

const HELLO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/asr/hello.wav");

#[test]
fn transcribes_the_shipped_wav_as_text() {
    let (code, out, err) = pulsed(&["transcribe", "--model", "pulsed-en-ctc", HELLO]);
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
        "--model",
        "pulsed-en-ctc",
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
    let (code, out, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--format",
        "vtt",
        "--whole",
        HELLO,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("WEBVTT"), "{out}");
    assert!(out.contains("-->"));
    let (code, out, _) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--format",
        "srt",
        "--pulse",
        "640",
        HELLO,
    ]);
    assert_eq!(code, 0);
    assert!(out.starts_with("1\n"), "{out}");
}

#[test]
fn bad_arguments_exit_non_zero_with_one_line() {
    let (code, _, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--pulse",
        "1000",
        HELLO,
    ]);
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
    #[cfg(feature = "cuda")]
    if pulsed::gpu::GpuDevice::shared().is_ok() {
        eprintln!("a GPU is usable here; the no-GPU message is not shown");
        return;
    }
    let (code, _, err) = pulsed(&["compare"]);
    assert_eq!(code, 2);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let why = if cfg!(feature = "cuda") {
        "no usable GPU"
    } else {
        "no `cuda` feature"
    };
    assert!(err.contains(why), "{err}");
}

const HELDOUT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/asr/heldout/manifest.jsonl"
);

/// The shipped word language model, weighed into beam search, fixes words
/// the acoustics misspell: the sweep decodes the same log-probs with and
/// without it.
#[test]
fn the_language_model_lowers_word_errors_on_held_out_speech() {
    let (code, out, err) = pulsed(&["eval", HELDOUT, "--beam", "8", "--sweep-weight", "0.8"]);
    assert_eq!(code, 0, "{err}");
    let wer = |first: &str| -> f64 {
        let row = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(first))
            .unwrap_or_else(|| panic!("no `{first}` row: {out}"));
        row.split_whitespace().last().unwrap().parse().unwrap()
    };
    let (none, lm) = (wer("none"), wer("0.8"));
    assert!(
        lm < none * 0.8,
        "WER without {none} %, with the model {lm} %: {out}"
    );
}

#[test]
fn a_broken_language_model_is_one_line_and_exit_2() {
    let d = temp_dir("lm");
    let bad = d.join("bad.arpa");
    std::fs::write(
        &bad,
        "\\data\\\nngram 1=2\n\n\\1-grams:\n-1.0\ta\n\\end\\\n",
    )
    .unwrap();
    let (code, out, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        HELLO,
        "--beam",
        "4",
        "--lm",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.arpa") && err.contains("announces 2 1-grams"),
        "{err}"
    );
    // beam search with and without it still transcribes the fixture
    for extra in [&["--no-lm"][..], &[][..]] {
        let mut args = vec![
            "transcribe",
            "--model",
            "pulsed-en-ctc",
            HELLO,
            "--beam",
            "8",
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = pulsed(&args);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.trim(), "if anything can go wrong it will");
    }
}

/// With no `--model` and the default model not in the model cache, a fetch
/// that fails (no network: an index nobody answers) ends in one line that
/// names the offline model, and exit 2; nothing is written to standard
/// output.
#[test]
fn a_failed_fetch_of_the_default_model_names_the_offline_choice() {
    let d = temp_dir("fetch");
    let offline = "http://127.0.0.1:9/simple";
    for args in [
        &["transcribe", HELLO][..],
        &["mic", "--input", HELLO, "--no-vad"][..],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pulsed"))
            .args(args)
            .env("PIP_INDEX_URL", offline)
            .env("XDG_CACHE_HOME", d.join("cache"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        // what is fetched and why, then why it failed and the way out
        let lines: Vec<&str> = err.trim().lines().collect();
        assert!(
            lines[0].contains("no model named")
                && lines[0].contains("fetching whisper-base-streaming-640ms"),
            "{err}"
        );
        let last = lines.last().unwrap();
        assert!(
            last.contains("could not fetch whisper-base-streaming-640ms")
                && last.contains("127.0.0.1:9")
                && last.contains("--model pulsed-en-ctc"),
            "{err}"
        );
    }
    // the offline choice works with nothing fetched
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pulsed"))
        .args(["transcribe", "--model", "pulsed-en-ctc", HELLO])
        .env("PIP_INDEX_URL", offline)
        .env("XDG_CACHE_HOME", d.join("cache"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "if anything can go wrong it will"
    );
}
