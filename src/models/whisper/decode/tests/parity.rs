//! The CPU backend against faster-whisper 1.2.1 on CTranslate2: the
//! LibriVox clip's goldens (fixtures/whisper) and realdev recordings
//! (testdata/, with the scripts that made them). Each test skips, saying
//! why, when a checkpoint or shared/realdev is missing.

use std::path::{Path, PathBuf};

use crate::models::whisper::decode::*;
use crate::models::whisper::{GenerationConfig, WhisperTokenizer};

/// The CPU backend on the LibriVox clip against faster-whisper 1.2.1's
/// transcripts (fixtures/whisper): tokens, times and no-speech
/// probabilities equal, average log-probabilities within float noise.
#[test]
fn parity_with_faster_whisper_on_the_librivox_clip() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/whisper");
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    for name in ["whisper-tiny.en", "whisper-base"] {
        let dir = home.join(".cache/pulsed/models").join(name);
        if !dir.join("model.safetensors").exists() {
            eprintln!(
                "skipped {name}: no checkpoint at {} (pulsed fetch {name})",
                dir.display()
            );
            continue;
        }
        let model = crate::models::whisper::WhisperModel::open_dir(&dir).unwrap();
        let mut backend = crate::models::whisper::CpuWhisper::new(&model).unwrap();
        let tok = WhisperTokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
        let gen = GenerationConfig::load(&dir).unwrap();
        let golden: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures.join(format!("{name}_dev00.json"))).unwrap(),
        )
        .unwrap();
        let audio = crate::audio::load_wav(&fixtures.join("librivox_dev00.wav"), 16_000).unwrap();
        // each run twice: the host choosing from logits, and the backend
        // choosing its tokens itself (as a GPU step does)
        let runs = golden["runs"].as_object().unwrap();
        for ((run_name, run), choosing) in runs.iter().flat_map(|r| [(r, false), (r, true)]) {
            let kw = &run["transcribe_kwargs"];
            let opts = DecodeOptions {
                beam_size: kw["beam_size"].as_u64().unwrap() as usize,
                temperatures: vec![kw["temperature"].as_f64().unwrap()],
                without_timestamps: kw["without_timestamps"].as_bool().unwrap(),
                language: gen.is_multilingual.then(|| "en".to_string()),
                padding: Some(WindowPadding::Zeros),
                ..DecodeOptions::default()
            };
            let mut segs = Vec::new();
            let mut chooser = crate::models::whisper::decode::testing::Choosing(&mut backend, 0);
            let network = match choosing {
                true => Network::Plain(&mut chooser),
                false => Network::Plain(chooser.0),
            };
            transcribe(network, &tok, &gen, &audio.samples, &opts, |s| {
                segs.push(s);
                Ok(())
            })
            .unwrap();
            assert_eq!(chooser.1 > 0, choosing, "{name} {run_name}: steps chosen");
            let want = run["segments"].as_array().unwrap();
            assert_eq!(segs.len(), want.len(), "{name} {run_name}");
            for (got, want) in segs.iter().zip(want) {
                let tokens: Vec<u32> = want["tokens"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_u64().unwrap() as u32)
                    .collect();
                assert_eq!(got.tokens, tokens, "{name} {run_name}");
                assert_eq!(got.text, want["text"].as_str().unwrap());
                assert!((got.start - want["start"].as_f64().unwrap()).abs() < 1e-9);
                assert!((got.end - want["end"].as_f64().unwrap()).abs() < 1e-9);
                let (a, b) = (got.avg_logprob, want["avg_logprob"].as_f64().unwrap());
                assert!(
                    (a - b).abs() < 2e-3,
                    "{name} {run_name}: avg_logprob {a} vs {b}"
                );
                let (a, b) = (got.no_speech_prob, want["no_speech_prob"].as_f64().unwrap());
                assert!(
                    (a - b).abs() < 1e-3,
                    "{name} {run_name}: no_speech_prob {a} vs {b}"
                );
            }
            eprintln!(
                "{name} {run_name} (choosing: {choosing}): {:?}",
                segs.iter().map(|s| &s.text).collect::<Vec<_>>()
            );
        }
    }
}

/// Runs `opts` over `audio` on the CPU backend (word timestamps through
/// its cross-attention).
fn cpu_run(
    backend: &mut crate::models::whisper::CpuWhisper,
    tok: &WhisperTokenizer,
    gen: &GenerationConfig,
    audio: &[f32],
    opts: &DecodeOptions,
) -> (Vec<Segment>, TranscriptionInfo) {
    let mut segs = Vec::new();
    let network = if opts.word_timestamps {
        Network::Aligned(backend)
    } else {
        Network::Plain(backend)
    };
    let info = transcribe(network, tok, gen, audio, opts, |s| {
        segs.push(s);
        Ok(())
    })
    .unwrap();
    (segs, info)
}

/// The realdev recording: files `dev00..` up to `count` joined by 0.5 s of
/// silence, if shared/realdev is there.
fn realdev_recording(count: usize) -> Option<Vec<f32>> {
    let realdev = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/realdev/wav");
    if !realdev.exists() {
        eprintln!("skipped: no {}", realdev.display());
        return None;
    }
    let mut audio = Vec::new();
    for i in 0..count {
        if i > 0 {
            audio.extend(std::iter::repeat_n(0.0f32, 8000));
        }
        let wav = realdev.join(format!("dev{i:02}.wav"));
        audio.extend(crate::audio::load_wav(&wav, 16_000).unwrap().samples);
    }
    Some(audio)
}

type Checkpoint = (
    crate::models::whisper::CpuWhisper,
    WhisperTokenizer,
    GenerationConfig,
);

/// A fetched checkpoint: its CPU backend, tokenizer and settings.
fn checkpoint(name: &str) -> Option<Checkpoint> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let dir = home.join(".cache/pulsed/models").join(name);
    if !dir.join("model.safetensors").exists() {
        eprintln!("skipped: no {} (pulsed fetch {name})", dir.display());
        return None;
    }
    let model = crate::models::whisper::WhisperModel::open_dir(&dir).unwrap();
    Some((
        crate::models::whisper::CpuWhisper::new(&model).unwrap(),
        WhisperTokenizer::from_file(&dir.join("tokenizer.json")).unwrap(),
        GenerationConfig::load(&dir).unwrap(),
    ))
}

/// The options of a faster-whisper `transcribe(**kwargs)` call.
fn options_of(kw: &serde_json::Value) -> DecodeOptions {
    let d = DecodeOptions::default();
    let flag = |name: &str, default: bool| kw[name].as_bool().unwrap_or(default);
    DecodeOptions {
        beam_size: kw["beam_size"].as_u64().map_or(d.beam_size, |b| b as usize),
        word_timestamps: flag("word_timestamps", false),
        without_timestamps: flag("without_timestamps", false),
        multilingual: flag("multilingual", false),
        condition_on_previous_text: flag("condition_on_previous_text", true),
        repetition_penalty: kw["repetition_penalty"].as_f64().map_or(1.0, |p| p as f32),
        no_repeat_ngram_size: kw["no_repeat_ngram_size"]
            .as_u64()
            .map_or(0, |n| n as usize),
        initial_prompt: kw["initial_prompt"]
            .as_str()
            .map(|p| InitialPrompt::Text(p.to_string())),
        prefix: kw["prefix"].as_str().map(str::to_string),
        padding: Some(WindowPadding::Zeros),
        ..d
    }
}

fn close(at: &str, what: &str, got: f64, want: &serde_json::Value, tolerance: f64) {
    let want = want.as_f64().unwrap();
    assert!(
        (got - want).abs() <= tolerance,
        "{at}: {what} {got} vs {want}"
    );
}

/// Checks `segs` against faster-whisper's (a JSON list of segments, with
/// words when it had them): tokens, seeks, times, temperatures and
/// compression ratios equal; probabilities within float noise.
fn assert_same_segments(name: &str, segs: &[Segment], want: &serde_json::Value) {
    let want = want.as_array().unwrap();
    for (i, (got, want)) in segs.iter().zip(want).enumerate() {
        let at = format!("{name} segment {i} ({:?})", want["text"].as_str().unwrap());
        let tokens: Vec<u32> = want["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(got.tokens, tokens, "{at}");
        assert_eq!(got.text, want["text"].as_str().unwrap(), "{at}");
        assert_eq!(got.seek as u64, want["seek"].as_u64().unwrap(), "{at}");
        close(&at, "start", got.start, &want["start"], 1e-9);
        close(&at, "end", got.end, &want["end"], 1e-9);
        close(
            &at,
            "temperature",
            got.temperature,
            &want["temperature"],
            0.0,
        );
        close(
            &at,
            "compression_ratio",
            got.compression_ratio,
            &want["compression_ratio"],
            1e-12,
        );
        close(
            &at,
            "avg_logprob",
            got.avg_logprob,
            &want["avg_logprob"],
            2e-3,
        );
        close(
            &at,
            "no_speech_prob",
            got.no_speech_prob,
            &want["no_speech_prob"],
            2e-3,
        );
        if let Some(words) = want["words"].as_array() {
            let got_words = got.words.as_ref().unwrap();
            assert_eq!(got_words.len(), words.len(), "{at}");
            for (g, w) in got_words.iter().zip(words) {
                assert_eq!(g.word, w["word"].as_str().unwrap(), "{at}");
                close(&at, "word start", g.start, &w["start"], 1e-9);
                close(&at, "word end", g.end, &w["end"], 1e-9);
                close(
                    &at,
                    "word probability",
                    g.probability,
                    &w["probability"],
                    2e-3,
                );
            }
        }
    }
    assert_eq!(segs.len(), want.len(), "{name}");
}

/// 83 s of realdev (dev00..dev10) against faster-whisper 1.2.1
/// (testdata/realdev_long.json, with the script that made it): every
/// window, seek, segment, token and word the same, in the default beam
/// search, greedy, greedy without previous text, greedy with a repetition
/// penalty and no repeated 3-grams, and with word timestamps (whose seeking
/// follows the last word).
#[test]
fn long_audio_parity_with_faster_whisper() {
    let Some(audio) = realdev_recording(11) else {
        return;
    };
    let Some((mut backend, tok, gen)) = checkpoint("whisper-tiny.en") else {
        return;
    };
    let golden: serde_json::Value =
        serde_json::from_str(include_str!("../testdata/realdev_long.json")).unwrap();
    assert_eq!(audio.len() as u64, golden["samples"].as_u64().unwrap());
    for (name, run) in golden["runs"].as_object().unwrap() {
        let started = std::time::Instant::now();
        let (segs, _) = cpu_run(
            &mut backend,
            &tok,
            &gen,
            &audio,
            &options_of(&run["kwargs"]),
        );
        eprintln!(
            "{name}: {} segments in {:.1} s",
            segs.len(),
            started.elapsed().as_secs_f64()
        );
        assert_same_segments(name, &segs, &run["segments"]);
    }
}

/// 45 s of realdev (dev00..dev04) against faster-whisper 1.2.1
/// (testdata/realdev_short.json): base with language detection and word
/// timestamps, and with detection on every window; tiny.en with an initial
/// prompt and a prefix.
#[test]
fn prompts_prefix_and_language_detection_parity() {
    let Some(audio) = realdev_recording(5) else {
        return;
    };
    let golden: serde_json::Value =
        serde_json::from_str(include_str!("../testdata/realdev_short.json")).unwrap();
    assert_eq!(audio.len() as u64, golden["samples"].as_u64().unwrap());
    for model in ["whisper-base", "whisper-tiny.en"] {
        let Some((mut backend, tok, gen)) = checkpoint(model) else {
            continue;
        };
        for (name, run) in golden["runs"].as_object().unwrap() {
            if run["model"] != model {
                continue;
            }
            let (segs, info) = cpu_run(
                &mut backend,
                &tok,
                &gen,
                &audio,
                &options_of(&run["kwargs"]),
            );
            assert_eq!(info.language, run["language"].as_str().unwrap(), "{name}");
            close(
                name,
                "language probability",
                info.language_probability,
                &run["language_probability"],
                2e-3,
            );
            assert_same_segments(name, &segs, &run["segments"]);
        }
    }
}
