//! Audio as users hold it, through the `pulsed` binary: compressed formats,
//! WAVs piped through standard input with unrecorded sizes, cut files.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::{pulsed, temp_dir};

const HELLO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/asr/hello.wav");
const HELLO_TEXT: &str = "if anything can go wrong it will";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(name)
}

/// Runs the binary with `stdin` piped in: exit code, stdout, stderr.
fn pulsed_piped(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pulsed"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    // written from a thread: the child may answer before reading it all
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// `wav` with its RIFF and data sizes overwritten, as a writer to a pipe leaves them.
fn with_sizes(wav: &[u8], size: u32) -> Vec<u8> {
    let mut b = wav.to_vec();
    let at = b.windows(4).position(|w| w == b"data").unwrap();
    b[4..8].copy_from_slice(&size.to_le_bytes());
    b[at + 4..at + 8].copy_from_slice(&size.to_le_bytes());
    b
}

#[test]
fn a_piped_wav_with_unrecorded_sizes_gives_the_files_text() {
    let wav = std::fs::read(HELLO).unwrap();
    // ffmpeg writes 0xFFFFFFFF, arecord 0x7FFFFFFF, others 0
    for size in [u32::MAX, 0x7FFF_FFFF, 0] {
        let (code, out, err) = pulsed_piped(
            &[
                "transcribe",
                "--model",
                "pulsed-en-ctc",
                "--format",
                "jsonl",
                "-",
            ],
            &with_sizes(&wav, size),
        );
        assert_eq!(code, 0, "size {size:#x}: {err}");
        let line: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(line["text"], HELLO_TEXT, "size {size:#x}");
        assert_eq!(line["file"], "-");
        // the length is known once the pipe ends
        assert!(line["duration_s"].as_f64().unwrap() > 1.9, "{line}");
        assert!(!err.contains("warning"), "{err}");
    }
}

#[test]
fn mic_reads_a_piped_wav() {
    let wav = with_sizes(&std::fs::read(HELLO).unwrap(), u32::MAX);
    let (code, out, err) = pulsed_piped(&["mic", "--model", "pulsed-en-ctc", "--input", "-"], &wav);
    assert_eq!(code, 0, "{err}");
    let text: String = out
        .lines()
        .map(|l| l.split_once("] ").map_or(l, |(_, t)| t))
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(text.trim(), HELLO_TEXT, "{out}");
}

#[test]
fn a_cut_wav_is_transcribed_with_a_warning_and_refused_with_strict() {
    let d = temp_dir("cut-wav");
    let wav = std::fs::read(HELLO).unwrap();
    let cut = d.join("cut.wav");
    std::fs::write(&cut, &wav[..wav.len() * 3 / 4 + 1]).unwrap();
    let (code, out, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        cut.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.trim().is_empty(), "no text: {err}");
    let warnings: Vec<_> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("cut.wav") && warnings[0].contains("truncated"));

    let (code, out, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--strict",
        cut.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.trim().is_empty(), "{out}");
    assert!(
        err.lines().any(|l| l.contains("cut.wav: truncated")),
        "{err}"
    );
    // piped, the same
    let (code, _, err) = pulsed_piped(&["transcribe", "--strict", "-"], &wav[..wav.len() / 2]);
    assert_eq!(code, 1);
    assert!(err.contains("<stdin>: truncated"), "{err}");
}

#[test]
fn compressed_files_give_the_wavs_text() {
    let Ok(_) = pulsed::models::whisper::folder::resolve("whisper-tiny.en") else {
        eprintln!("skipped: whisper-tiny.en is not fetched (pulsed fetch whisper-tiny.en)");
        return;
    };
    let text = |path: &str| {
        let (code, out, err) = pulsed(&[
            "transcribe",
            "--model",
            "whisper-tiny.en",
            "--beam",
            "1",
            path,
        ]);
        assert_eq!(code, 0, "{path}: {err}");
        out.trim().to_string()
    };
    let want = text(
        fixture("fixtures/whisper/librivox_dev00.wav")
            .to_str()
            .unwrap(),
    );
    let flac = fixture("fixtures/audio/dev00.flac");
    assert_eq!(
        text(flac.to_str().unwrap()),
        want,
        "lossless: the same text"
    );
    let words: Vec<&str> = want.split_whitespace().collect();
    for lossy in ["dev00_44k_stereo.mp3", "dev00_22k.ogg", "dev00.m4a"] {
        let got = text(
            fixture(&format!("fixtures/audio/{lossy}"))
                .to_str()
                .unwrap(),
        );
        let got: Vec<&str> = got.split_whitespace().collect();
        let differ = words.iter().zip(&got).filter(|(a, b)| a != b).count()
            + words.len().abs_diff(got.len());
        assert!(differ <= 1, "{lossy}: {got:?} against {words:?}");
    }
}

#[test]
fn folders_pick_up_compressed_files_and_opus_is_named() {
    let d = temp_dir("formats");
    std::fs::copy(HELLO, d.join("a.wav")).unwrap();
    std::fs::copy(fixture("fixtures/audio/dev00.flac"), d.join("b.FLAC")).unwrap();
    std::fs::write(d.join("notes.txt"), "not audio").unwrap();
    let (code, out, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--format",
        "jsonl",
        d.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("b.FLAC"), "{out}");

    let (code, _, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        fixture("fixtures/audio/dev00.opus").to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("Opus"), "{err}");
}

#[test]
fn mic_help_lists_only_the_formats_it_writes() {
    let (code, out, _) = pulsed(&["mic", "--help"]);
    assert_eq!(code, 0);
    let line = out.lines().find(|l| l.contains("possible values")).unwrap();
    assert!(line.contains("text") && line.contains("jsonl"), "{line}");
    assert!(!line.contains("srt") && !line.contains("vtt"), "{line}");
}
