//! Whole-recording tests of the decoding loop: over a scripted backend
//! (seeking, segment splitting, silence skips, fallback, prompts, word
//! timestamps) with the local tiny.en tokenizer, and over the real CPU
//! backend against faster-whisper's outputs on the LibriVox clip.

use std::path::{Path, PathBuf};

use super::testing::Scripted;
use super::*;
use crate::whisper::tokenizer::tests::local_tokenizer;
use crate::whisper::{GenerationConfig, WhisperTokenizer};

/// tiny.en's settings, without a file.
fn english_config(tok: &WhisperTokenizer) -> GenerationConfig {
    GenerationConfig {
        suppress_tokens: Vec::new(),
        begin_suppress_tokens: vec![220, tok.special().eot],
        alignment_heads: vec![(0, 0)],
        lang_to_id: Vec::new(),
        is_multilingual: false,
        max_initial_timestamp_index: Some(50),
        max_length: 448,
    }
}

/// A backend that writes `plan` after each `<|startoftranscript|>` (one
/// token a step, each with logit `peak`), with `no_speech` as the logit of
/// the no-speech token at sot. Windows whose first feature is 0.5 use
/// `quiet` instead (when given).
fn planned(
    tok: &WhisperTokenizer,
    plan: Vec<u32>,
    peak: f32,
    quiet: Option<(Vec<u32>, f32, f32)>,
) -> Scripted {
    let sp = *tok.special();
    let vocab = 51864;
    Scripted::new(vocab, move |window: &[f32], seq: &[u32]| {
        let (plan, peak, no_speech) = match &quiet {
            Some((p, peak, ns)) if window.first() == Some(&0.5) => (p, *peak, *ns),
            _ => (&plan, peak, 0.0),
        };
        let sot = seq
            .iter()
            .rposition(|&t| t == sp.sot)
            .expect("a prompt has sot");
        let generated = seq.len() - sot - 1;
        let mut l = vec![0.0; vocab];
        if generated == 0 {
            l[sp.no_speech as usize] = no_speech;
        }
        let next = plan.get(generated).copied().unwrap_or(sp.eot);
        l[next as usize] = peak;
        l
    })
}

fn run(
    b: &mut Scripted,
    tok: &WhisperTokenizer,
    audio: &[f32],
    opts: &DecodeOptions,
) -> (Vec<Segment>, TranscriptionInfo) {
    let gen = english_config(tok);
    let mut segments = Vec::new();
    let network = if opts.word_timestamps {
        Network::Aligned(b)
    } else {
        Network::Plain(b)
    };
    let info = transcribe(network, tok, &gen, audio, opts, |s| {
        segments.push(s);
        Ok(())
    })
    .unwrap();
    (segments, info)
}

fn spans(segments: &[Segment]) -> Vec<(f64, f64)> {
    segments.iter().map(|s| (s.start, s.end)).collect()
}

#[test]
fn a_lone_final_timestamp_moves_to_the_next_window() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let tb = sp.timestamp_begin;
    // <0.00> Hello <2.00><2.00> world <5.00> end: two segments, then the
    // next window (a lone final timestamp means nothing more was said).
    let plan = vec![tb, 18435, tb + 100, tb + 100, 995, tb + 250, sp.eot];
    let mut b = planned(&tok, plan, 10.0, None);
    let audio = vec![0.0; 65 * 16_000];
    let (segs, info) = run(&mut b, &tok, &audio, &DecodeOptions::default());
    assert_eq!(info.language, "en");
    assert_eq!(info.duration, 65.0);
    assert_eq!(
        spans(&segs),
        vec![
            (0.0, 2.0),
            (2.0, 5.0),
            (30.0, 32.0),
            (30.0 + 2.0, 35.0),
            (60.0, 62.0),
            (62.0, 65.0)
        ]
    );
    assert_eq!(segs[1].text, " world");
    assert_eq!(segs[2].seek, 3000);
    assert_eq!(
        segs.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6]
    );
    // Windows at frames 0, 3000, 6000; the last has 500 content frames.
    assert_eq!(b.encoded_log.len(), 3);
    // The later windows' prompts carry the text so far after <|startofprev|>.
    let prompts: Vec<&Vec<u32>> = b
        .fed_log
        .iter()
        .filter(|s| s.first() == Some(&sp.sot_prev))
        .collect();
    // (English-only with timestamps: sot is the start token, fed after.)
    let previous: Vec<u32> = segs[..2].iter().flat_map(|s| s.tokens.clone()).collect();
    assert_eq!(prompts[0][1..], previous[..]);
}

#[test]
fn an_unfinished_segment_is_dropped_and_decoded_again() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let tb = sp.timestamp_begin;
    // Ends with a pair: the window is cut at <5.00>, 500 frames later.
    let plan = vec![
        tb,
        18435,
        tb + 100,
        tb + 100,
        995,
        tb + 250,
        tb + 250,
        sp.eot,
    ];
    let mut b = planned(&tok, plan, 10.0, None);
    let audio = vec![0.0; 12 * 16_000];
    let (segs, _) = run(&mut b, &tok, &audio, &DecodeOptions::default());
    // Windows at 0, 5 and 10 s; the last (2 s of content) still ends at +5 s.
    let starts: Vec<f64> = segs.iter().map(|s| s.start).collect();
    assert_eq!(starts, vec![0.0, 2.0, 5.0, 7.0, 10.0, 12.0]);
    assert_eq!(segs[2].seek, 500);
    assert_eq!(b.encoded_log.len(), 3);
}

#[test]
fn silence_is_skipped_and_repetition_falls_back() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let tb = sp.timestamp_begin;
    let plan = vec![tb, 18435, tb + 100, sp.eot];
    // The second window is silence: the no-speech token dominates at sot
    // and the text is unlikely (logit 1 of 51864): skipped.
    let quiet = (vec![tb, 995, tb + 100, sp.eot], 1.0, 30.0);
    let mut b = planned(&tok, plan, 10.0, Some(quiet));
    let mut audio = vec![0.0; 45 * 16_000];
    audio[30 * 16_000..].fill(0.5);
    let (segs, _) = run(&mut b, &tok, &audio, &DecodeOptions::default());
    assert_eq!(spans(&segs), vec![(0.0, 2.0)]);
    assert!(segs[0].no_speech_prob < 0.01);

    // Repetitive text fails the compression check at every temperature:
    // the likeliest result is kept, with the last temperature, and the
    // prompt is reset after it.
    let mut plan = vec![tb];
    plan.extend(std::iter::repeat_n([314, 836, 470, 760, 13], 12).flatten()); // " I don't know."
    plan.extend([tb + 200, sp.eot]);
    let mut b = planned(&tok, plan, 30.0, None);
    let audio = vec![0.0; 50 * 16_000];
    let (segs, _) = run(&mut b, &tok, &audio, &DecodeOptions::default());
    assert_eq!(segs.len(), 2);
    assert_eq!(segs[0].temperature, 1.0);
    assert!(segs[0].compression_ratio > 2.4);
    // Per window: beam search at 0 (its first step on one sequence), then
    // five samples at each of 0.2 ... 1.0; no prompt has previous text.
    let first_steps = b
        .fed_log
        .iter()
        .filter(|s| s.len() == 1 && s[0] == sp.sot)
        .count();
    assert_eq!(first_steps, 2 * (1 + 5 * 5));
    assert!(b.fed_log.iter().all(|s| s.first() != Some(&sp.sot_prev)));
}

#[test]
fn word_timestamps_follow_the_attention() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let tb = sp.timestamp_begin;
    // " Hello world." from 0 to 2 s.
    let plan = vec![tb, 18435, 995, 13, tb + 100, sp.eot];
    let mut b = planned(&tok, plan, 10.0, None);
    // Token row r attends encoder frames [20 r, 20 r + 20) (0.4 s each).
    b.attention = Some(Box::new(
        |_w: &[f32], tokens: &[u32], heads: &[(usize, usize)]| {
            let (t, f) = (tokens.len(), 1500);
            let mut a = vec![1e-6f32; heads.len() * t * f];
            for h in 0..heads.len() {
                for r in 0..t {
                    for j in 20 * r..20 * r + 20 {
                        a[(h * t + r) * f + j] = 1.0;
                    }
                }
            }
            a
        },
    ));
    let audio = vec![0.0; 3 * 16_000];
    let opts = DecodeOptions {
        word_timestamps: true,
        ..DecodeOptions::default()
    };
    let (segs, _) = run(&mut b, &tok, &audio, &opts);
    let words = segs[0].words.as_ref().unwrap();
    let text: Vec<&str> = words.iter().map(|w| w.word.as_str()).collect();
    assert_eq!(text, vec![" Hello", " world."]);
    // Text token i is the row of the position before it: Hello the
    // <|notimestamps|> row (frames 20-40), world the Hello row (40-60), "."
    // the world row (60-80). A token's time is where the path enters its
    // row; the path starts at frame 0, so the first word does too. Merged
    // punctuation keeps the word's own times (" world" ends at 1.2 s).
    let times: Vec<(f64, f64)> = words.iter().map(|w| (w.start, w.end)).collect();
    assert_eq!(times, vec![(0.0, 0.8), (0.8, 1.2)]);
    assert_eq!((segs[0].start, segs[0].end), (0.0, 1.2));
    // Each token's probability over the text vocabulary (logit 10 against
    // 50255 zeros).
    let p = 10f64.exp() / (10f64.exp() + 50255.0);
    assert!(
        words.iter().all(|w| (w.probability - p).abs() < 1e-4),
        "{words:?}"
    );
}

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
                "skipped {name}: no checkpoint at {} (bash scripts/fetch_whisper.sh {name})",
                dir.display()
            );
            continue;
        }
        let model = crate::whisper::WhisperModel::open_dir(&dir).unwrap();
        let mut backend = crate::whisper::CpuWhisper::new(&model).unwrap();
        let tok = WhisperTokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
        let gen = GenerationConfig::load(&dir).unwrap();
        let golden: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures.join(format!("{name}_dev00.json"))).unwrap(),
        )
        .unwrap();
        let audio = crate::audio::load_wav(&fixtures.join("librivox_dev00.wav"), 16_000).unwrap();
        for (run_name, run) in golden["runs"].as_object().unwrap() {
            let kw = &run["transcribe_kwargs"];
            let opts = DecodeOptions {
                beam_size: kw["beam_size"].as_u64().unwrap() as usize,
                temperatures: vec![kw["temperature"].as_f64().unwrap()],
                without_timestamps: kw["without_timestamps"].as_bool().unwrap(),
                language: gen.is_multilingual.then(|| "en".to_string()),
                ..DecodeOptions::default()
            };
            let mut segs = Vec::new();
            transcribe(
                Network::Plain(&mut backend),
                &tok,
                &gen,
                &audio.samples,
                &opts,
                |s| {
                    segs.push(s);
                    Ok(())
                },
            )
            .unwrap();
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
                "{name} {run_name}: {:?}",
                segs.iter().map(|s| &s.text).collect::<Vec<_>>()
            );
        }
    }
}

/// Runs `opts` over `audio` on the CPU backend (word timestamps through
/// its cross-attention).
fn cpu_run(
    backend: &mut crate::whisper::CpuWhisper,
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
    crate::whisper::CpuWhisper,
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
        eprintln!(
            "skipped: no {} (bash scripts/fetch_whisper.sh {name})",
            dir.display()
        );
        return None;
    }
    let model = crate::whisper::WhisperModel::open_dir(&dir).unwrap();
    Some((
        crate::whisper::CpuWhisper::new(&model).unwrap(),
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
        serde_json::from_str(include_str!("testdata/realdev_long.json")).unwrap();
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
        serde_json::from_str(include_str!("testdata/realdev_short.json")).unwrap();
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
