//! A CTC head over a chunked checkpoint's streamed encoder
//! (`pulsed::models::whisper::ctc`, `--ctc`): text from each frame as the streamed
//! encoder gives it, the same whatever pieces the audio comes in, going on
//! past a window, and the CLI's refusals. tiny.en's weights (fetched by the
//! test command) with chunk 8 +6 copies and a random head: exactness needs
//! no trained head.

mod common;

use std::path::{Path, PathBuf};

use common::{pulsed, temp_dir, Rng};
use pulsed::decode::{FrameTiming, GreedyDecoder};
use pulsed::engine::Engine;
use pulsed::graph::Runner;
use pulsed::models::whisper::ctc::{self, CtcDecoding, CtcHead, CtcStream};
use pulsed::models::whisper::decode::WindowPadding;
use pulsed::models::whisper::encoder_stream::EncoderStream;
use pulsed::models::whisper::WhisperModel;
use pulsed::ops::Tensor;

const VOCAB: usize = 29;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// tiny.en's folder made chunked (chunk 8 +6, copies), with a random head
/// (a hidden layer when `hidden`), or none.
fn folder(name: &str, head: Option<bool>) -> PathBuf {
    let src = pulsed::models::whisper::folder::resolve("whisper-tiny.en").unwrap_or_else(|e| {
        panic!("{e}\n(the test command fetches it: pulsed fetch whisper-tiny.en)")
    });
    let d = temp_dir(name);
    for f in ["tokenizer.json", "generation_config.json"] {
        std::fs::copy(src.join(f), d.join(f)).unwrap();
    }
    let cfg = std::fs::read_to_string(src.join("config.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&cfg).unwrap();
    v["pulsed_encoder_context"] =
        serde_json::json!({"chunk": 8, "left": 1500, "right": 6, "right_copies": true});
    v["pulsed_window_padding"] = serde_json::json!("zeros");
    std::fs::write(d.join("config.json"), v.to_string()).unwrap();
    // the weights are large: a link, not a copy
    let weights = src.join("model.safetensors");
    #[cfg(unix)]
    std::os::unix::fs::symlink(&weights, d.join("model.safetensors")).unwrap();
    #[cfg(not(unix))]
    std::fs::copy(&weights, d.join("model.safetensors")).unwrap();
    if let Some(hidden) = head {
        write_head(&d, hidden);
    }
    d
}

fn write_head(dir: &Path, hidden: bool) {
    let mut rng = Rng(7);
    let d = 384;
    let mut named: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    let fan_in = if hidden {
        named.push(("ctc.hidden.weight".into(), vec![64, d], rng.vec(64 * d)));
        named.push(("ctc.hidden.bias".into(), vec![64], rng.vec(64)));
        64
    } else {
        d
    };
    // scaled so that no token wins every frame
    let w: Vec<f32> = rng.vec(VOCAB * fan_in).iter().map(|v| v * 0.5).collect();
    named.push(("ctc.out.weight".into(), vec![VOCAB, fan_in], w));
    named.push(("ctc.out.bias".into(), vec![VOCAB], rng.vec(VOCAB)));
    let bytes: Vec<Vec<u8>> = named
        .iter()
        .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = named
        .iter()
        .zip(&bytes)
        .map(|((n, s, _), b)| {
            let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                .unwrap();
            (n.clone(), view)
        })
        .collect();
    std::fs::write(
        dir.join(ctc::HEAD_FILE),
        safetensors::serialize(views, &None).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        root().join("models/pulsed-en-ctc/tokens.txt"),
        dir.join(ctc::TOKENS_FILE),
    )
    .unwrap();
}

fn clip() -> Vec<f32> {
    pulsed::audio::load_wav(&root().join("fixtures/whisper/librivox_dev00.wav"), 16_000)
        .unwrap()
        .samples
}

/// The stream's text is the head's greedy reading of the streamed
/// encoder's frames, whatever pieces the audio comes in.
#[test]
fn the_head_reads_the_streamed_encoders_frames() {
    let dir = folder("ctc-frames", Some(true));
    let m = WhisperModel::open_dir(&dir).unwrap();
    let head = CtcHead::open(&dir, m.config.d_model).unwrap();
    let audio = clip();

    let mut enc = EncoderStream::new(&m, WindowPadding::Zeros, &Engine::Cpu).unwrap();
    enc.push(&audio).unwrap();
    enc.finish().unwrap();
    let n = enc.frames();
    let rows = enc.frame_rows(0, n).to_vec();
    let mut r = Runner::new(head.graph().clone()).unwrap();
    r.step(&[&Tensor::from_vec(vec![n, m.config.d_model], rows).unwrap()])
        .unwrap();
    let mut g = GreedyDecoder::new(head.tokens().clone(), FrameTiming::new(0.02)).unwrap();
    g.push_log_probs(0, &r.output(0).to_f32_vec()).unwrap();
    let want = g.finish();
    assert!(!want.words.is_empty(), "a random head writes something");

    for piece in [2_560, 7_777, audio.len()] {
        let mut s = CtcStream::new(&m, &head, CtcDecoding::Greedy, &Engine::Cpu).unwrap();
        let mut shown = 0;
        for p in audio.chunks(piece) {
            s.push(p).unwrap();
            let words = s.partial().unwrap().words.len();
            assert!(
                words + 1 >= shown,
                "partial text only grows: {words} after {shown}"
            );
            shown = words;
        }
        let got = s.finish().unwrap();
        assert_eq!(got.text, want.text, "pieces of {piece}");
        assert_eq!(got.words, want.words, "pieces of {piece}");
    }
}

/// Past 30 s (one window of the encoder's positions) the stream starts a
/// new window and the text goes on, its times counted from the start.
#[test]
fn a_recording_longer_than_a_window_goes_on() {
    let dir = folder("ctc-long", Some(false));
    let m = WhisperModel::open_dir(&dir).unwrap();
    let head = CtcHead::open(&dir, m.config.d_model).unwrap();
    let clip = clip();
    let audio: Vec<f32> = clip.iter().cycle().take(35 * 16_000).copied().collect();
    for decoding in [
        CtcDecoding::Greedy,
        CtcDecoding::Beam { width: 4, lm: None },
    ] {
        let t = ctc::transcribe(&m, &head, decoding, &Engine::Cpu, &audio).unwrap();
        assert!((t.duration_s - 35.0).abs() < 0.1, "{}", t.duration_s);
        // the first window ends at the streamed encoder's capacity, 29.55 s
        let cut = 472_800.0 / 16_000.0;
        assert!(
            t.words.iter().any(|w| w.start_s >= cut),
            "{:?}",
            t.words.last()
        );
        assert!(
            t.words.iter().all(|w| w.end_s <= 35.02),
            "{:?}",
            t.words.last()
        );
        assert!(t.words.windows(2).all(|w| w[0].start_s <= w[1].start_s));
    }
}

#[test]
fn transcribe_ctc_writes_words_greedy_and_with_beam_search() {
    let dir = folder("ctc-cli", Some(true));
    let wav = root().join("fixtures/whisper/librivox_dev00.wav");
    for extra in [&[][..], &["--beam", "4"][..]] {
        let mut args = vec![
            "transcribe",
            "--ctc",
            "--model",
            dir.to_str().unwrap(),
            "--format",
            "jsonl",
            wav.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = pulsed(&args);
        assert_eq!(code, 0, "{extra:?}: stdout {out} stderr {err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert!(!v["words"].as_array().unwrap().is_empty(), "{out}");
        assert!(
            err.contains("CTC head over the streamed encoder (312.5 ms)"),
            "{err}"
        );
    }
}

#[test]
fn ctc_without_a_head_or_a_whisper_model_is_refused_in_one_line() {
    let wav = root().join("fixtures/whisper/librivox_dev00.wav");
    let bare = folder("ctc-bare", None);
    for model in [Some(bare.to_str().unwrap()), None] {
        let mut args = vec!["transcribe", "--ctc", wav.to_str().unwrap()];
        if let Some(m) = model {
            args.extend(["--model", m]);
        }
        let (code, out, err) = pulsed(&args);
        assert_ne!(code, 0, "stdout {out}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line: {err}");
        assert!(
            lines[0].contains("no CTC head") || lines[0].contains("--ctc is for"),
            "{err}"
        );
    }
}

/// `mic --ctc`'s engine: partial lines while the audio comes, and with no
/// end of speech before the stream ends, one final line: the recording's
/// offline transcript.
#[test]
fn live_ctc_gives_partials_then_the_offline_text() {
    use pulsed::live::{LiveEvent, LiveOptions, LiveTranscriber};
    let dir = folder("ctc-live", Some(true));
    let m = WhisperModel::open_dir(&dir).unwrap();
    let head = CtcHead::open(&dir, m.config.d_model).unwrap();
    let audio = clip();
    let want = ctc::transcribe(&m, &head, CtcDecoding::Greedy, &Engine::Cpu, &audio).unwrap();
    let stream = CtcStream::new(&m, &head, CtcDecoding::Greedy, &Engine::Cpu).unwrap();
    let opts = LiveOptions {
        end_silence_s: 1e6,
        ..LiveOptions::default()
    };
    let (mut lt, mut input) = LiveTranscriber::start_ctc(stream, opts).unwrap();
    for c in audio.chunks(320) {
        assert!(input.write_waiting(c));
    }
    lt.finish();
    let events: Vec<LiveEvent> = lt.events().try_iter().collect();
    let partials = events
        .iter()
        .filter(|e| matches!(e, LiveEvent::Partial { .. }))
        .count();
    let finals: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            LiveEvent::Final { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(partials > 3, "{events:?}");
    assert_eq!(finals, vec![want.text.as_str()]);
}

#[test]
fn mic_ctc_reads_a_wav_through_the_head() {
    let dir = folder("ctc-mic", Some(false));
    let wav = root().join("fixtures/whisper/librivox_dev00.wav");
    let (code, out, err) = pulsed(&[
        "mic",
        "--ctc",
        "--model",
        dir.to_str().unwrap(),
        "--input",
        wav.to_str().unwrap(),
        "--format",
        "jsonl",
    ]);
    assert_eq!(code, 0, "stdout {out} stderr {err}");
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "final", "{out}");
    let (code, _, err) = pulsed(&["mic", "--ctc", "--input", wav.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.trim().lines().count() == 1 && err.contains("--ctc is for"),
        "{err}"
    );
}

/// `eval --live --ctc`: the live policy over a manifest, with partial and
/// final rates and the commit latency.
#[test]
fn eval_live_ctc_reports_partial_and_final_lines() {
    let dir = folder("ctc-eval-live", Some(false));
    let m = temp_dir("ctc-eval-live-manifest");
    std::fs::copy(
        root().join("fixtures/whisper/librivox_dev00.wav"),
        m.join("a.wav"),
    )
    .unwrap();
    let manifest = m.join("m.jsonl");
    std::fs::write(
        &manifest,
        "{\"file\": \"a.wav\", \"text\": \"he was not an ill disposed young man\"}\n",
    )
    .unwrap();
    let (code, out, err) = pulsed(&[
        "eval",
        manifest.to_str().unwrap(),
        "--model",
        dir.to_str().unwrap(),
        "--ctc",
        "--live",
        "-j",
        "1",
    ]);
    assert_eq!(code, 0, "stdout {out} stderr {err}");
    assert!(
        out.contains("partial lines") && out.contains("final lines"),
        "{out}"
    );
    assert!(out.contains("all: CER"), "{out}");
}
