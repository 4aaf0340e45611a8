//! The batched mode: its VAD arithmetic against faster-whisper's
//! (testdata/batched.json, made by scripts/whisper/reference_batched.py),
//! the pipeline over a scripted backend (batching, windows, prompts, times
//! back on the recording), and over tiny.en against faster-whisper's
//! `BatchedInferencePipeline` fed the same speech segments. Tests that need
//! a tokenizer, a checkpoint or the Silero weights skip, saying why.

use std::path::{Path, PathBuf};

use super::*;
use crate::vad::Segment as Speech;
use crate::whisper::decode::chunks::{collect_chunks, SpeechMap};
use crate::whisper::decode::speech::speech_segments;
use crate::whisper::decode::testing::Scripted;
use crate::whisper::tokenizer::tests::local_tokenizer;
use crate::whisper::{CpuWhisper, WhisperModel};

fn golden() -> serde_json::Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/whisper/decode/testdata/batched.json");
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

const VOCAB: usize = 51864;

/// Writes `plan(window's first feature)` after the prompt (one token a
/// step, then end of text), whatever the search.
fn planned(tok: &WhisperTokenizer, plan: impl Fn(f32) -> Vec<u32> + 'static) -> Scripted {
    let sp = *tok.special();
    Scripted::new(VOCAB, move |window: &[f32], seq: &[u32]| {
        let sot = seq.iter().rposition(|&t| t == sp.sot).expect("sot");
        let mut begin = sot + 1;
        if seq.get(begin) == Some(&sp.no_timestamps) {
            begin += 1;
        }
        let generated = seq.len().saturating_sub(begin);
        let plan = plan(window.first().copied().unwrap_or(0.0));
        let next = plan.get(generated).copied().unwrap_or(sp.eot);
        Scripted::peaked(VOCAB, next, 30.0)
    })
}

/// A scripted backend that records the size of each `encode` batch.
struct Counting {
    inner: Scripted,
    batches: Vec<usize>,
}

impl WhisperBackend for Counting {
    fn n_mels(&self) -> usize {
        self.inner.n_mels()
    }
    fn window_frames(&self) -> usize {
        self.inner.window_frames()
    }
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
    fn max_text_positions(&self) -> usize {
        self.inner.max_text_positions()
    }
    fn log_mel(&mut self, audio: &[f32]) -> Result<Vec<f32>> {
        self.inner.log_mel(audio)
    }
    fn encode(&mut self, windows: &[&[f32]]) -> Result<()> {
        self.batches.push(windows.len());
        self.inner.encode(windows)
    }
    fn start(&mut self, windows: &[usize]) -> Result<()> {
        self.inner.start(windows)
    }
    fn feed(&mut self, t: &[u32], n: usize, p: &[usize], l: &mut Vec<f32>) -> Result<()> {
        self.inner.feed(t, n, p, l)
    }
    fn reorder(&mut self, src: &[usize]) -> Result<()> {
        self.inner.reorder(src)
    }
}

/// 12 s of audio with speech at 1..2 s, 5..7 s and 10..11 s, each segment
/// filled with its own value (1, 2, 3) so a window tells its chunk.
fn three_segments() -> (Vec<f32>, Vec<Speech>) {
    let speech = vec![
        Speech {
            start: 16000,
            end: 32000,
        },
        Speech {
            start: 80000,
            end: 112000,
        },
        Speech {
            start: 160000,
            end: 176000,
        },
    ];
    let mut audio = vec![0.0f32; 192000];
    for (k, s) in speech.iter().enumerate() {
        audio[s.start as usize..s.end as usize].fill((k + 1) as f32);
    }
    (audio, speech)
}

fn run_pipeline(
    backend: &mut dyn WhisperBackend,
    tok: &WhisperTokenizer,
    audio: &[f32],
    speech: &[Speech],
    opts: &DecodeOptions,
    batched: &BatchedOptions,
) -> (Vec<Segment>, TranscriptionInfo) {
    let gen = english_config(tok);
    let pipeline = Pipeline {
        tokenizer: tok,
        gen: &gen,
        opts,
        batched,
    };
    let mut segments = Vec::new();
    let info = pipeline
        .run(Network::Plain(backend), audio, speech, &mut |s| {
            segments.push(s);
            Ok(())
        })
        .unwrap();
    (segments, info)
}

#[test]
fn chunks_are_encoded_batch_size_at_a_time_and_decoded_from_their_window() {
    let Some(tok) = local_tokenizer() else { return };
    let (audio, speech) = three_segments();
    // Each chunk writes one token telling its window: 1000 + its value.
    let plan = |v: f32| vec![1000 + v as u32];
    let mut b = Counting {
        inner: planned(&tok, plan),
        batches: Vec::new(),
    };
    // 1.5 s chunks: each segment alone (1 + 2 > 1.5, 2 + 1 > 1.5).
    let batched = BatchedOptions {
        batch_size: 2,
        chunk_length: 1.5,
        ..BatchedOptions::default()
    };
    let opts = BatchedOptions::decode_defaults();
    let (segs, info) = run_pipeline(&mut b, &tok, &audio, &speech, &opts, &batched);
    assert_eq!(b.batches, vec![2, 1]);
    let got: Vec<(usize, Vec<u32>, f64, f64, usize)> = segs
        .iter()
        .map(|s| (s.id, s.tokens.clone(), s.start, s.end, s.seek))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, vec![1001], 1.0, 2.0, 0),
            (2, vec![1002], 5.0, 7.0, 100),
            (3, vec![1003], 10.0, 11.0, 300),
        ]
    );
    assert_eq!(info.duration, 12.0);
    assert_eq!(
        (info.language.as_str(), info.language_probability),
        ("en", 1.0)
    );
    assert!(segs
        .iter()
        .all(|s| s.temperature == 0.0 && s.words.is_none()));

    // Batch size changes the encoder calls, not the results.
    for batch_size in [1, 3, 8] {
        let mut b = Counting {
            inner: planned(&tok, plan),
            batches: Vec::new(),
        };
        let batched = BatchedOptions {
            batch_size,
            ..batched.clone()
        };
        let (again, _) = run_pipeline(&mut b, &tok, &audio, &speech, &opts, &batched);
        assert_eq!(again, segs, "batch size {batch_size}");
        assert_eq!(b.batches.iter().sum::<usize>(), 3);
        assert!(b.batches.iter().all(|&n| n <= batch_size));
    }
}

#[test]
fn one_chunk_joins_the_speech_and_its_timestamps_map_back() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let (audio, speech) = three_segments();
    let ts = move |seconds: f64| sp.timestamp_begin + (seconds / 0.02).round() as u32;
    // Joined speech: 0..1 s, 1..3 s, 3..4 s.
    let plan = move |_v: f32| vec![ts(0.0), 1000, ts(0.9), ts(1.2), 1001, ts(3.5)];
    let mut b = planned(&tok, plan);
    let opts = DecodeOptions {
        without_timestamps: false,
        ..BatchedOptions::decode_defaults()
    };
    let (segs, _) = run_pipeline(
        &mut b,
        &tok,
        &audio,
        &speech,
        &opts,
        &BatchedOptions::default(),
    );
    let got: Vec<(f64, f64)> = segs.iter().map(|s| (s.start, s.end)).collect();
    // 0.9 s lies in the first segment (1..2 s), 1.2 s in the second
    // (5..7 s), 3.5 s in the third (10..11 s).
    assert_eq!(got, vec![(1.0, 1.9), (5.2, 10.5)]);
    // The window held the three segments end to end.
    let window = &b.encoded_log[0];
    assert_eq!((window[0], window[150], window[350]), (1.0, 2.0, 3.0));
    assert_eq!(window[400], 0.0);
}

#[test]
fn every_segment_is_given_and_no_speech_decodes_nothing() {
    let Some(tok) = local_tokenizer() else { return };
    let (audio, speech) = three_segments();
    // Without suppress_blank the end of text may come first: an empty
    // segment, given all the same (the pipeline filters nothing).
    let opts = DecodeOptions {
        suppress_blank: false,
        ..BatchedOptions::decode_defaults()
    };
    let mut b = planned(&tok, |_| Vec::new());
    let (segs, _) = run_pipeline(
        &mut b,
        &tok,
        &audio,
        &speech,
        &opts,
        &BatchedOptions::default(),
    );
    assert_eq!(segs.len(), 1);
    assert_eq!(
        (segs[0].text.as_str(), segs[0].start, segs[0].end),
        ("", 1.0, 11.0)
    );
    assert!(segs[0].tokens.is_empty());

    let mut b = planned(&tok, |_| vec![1000]);
    let (segs, info) = run_pipeline(&mut b, &tok, &audio, &[], &opts, &BatchedOptions::default());
    assert!(segs.is_empty());
    assert!(b.encoded_log.is_empty());
    assert_eq!(info.duration, 12.0);
}

#[test]
fn every_chunk_gets_the_same_prompt() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let (audio, speech) = three_segments();
    let mut b = planned(&tok, |_| vec![1000]);
    let opts = DecodeOptions {
        initial_prompt: Some(InitialPrompt::Text("hello world".into())),
        prefix: Some("ignored".into()),
        condition_on_previous_text: true,
        ..BatchedOptions::decode_defaults()
    };
    let batched = BatchedOptions {
        chunk_length: 1.5,
        ..BatchedOptions::default()
    };
    run_pipeline(&mut b, &tok, &audio, &speech, &opts, &batched);
    // The initial prompt is encoded as it is (no leading space), no
    // previous text is added, and there is no prefix.
    let mut prompt = vec![sp.sot_prev];
    prompt.extend(tok.encode("hello world").unwrap());
    prompt.push(sp.sot);
    let firsts: Vec<&Vec<u32>> = b
        .fed_log
        .iter()
        .filter(|f| f.len() == prompt.len())
        .collect();
    assert_eq!(firsts.len(), 3);
    assert!(firsts.iter().all(|f| **f == prompt));
    assert_ne!(
        tok.encode("hello world").unwrap(),
        tok.encode(" hello world").unwrap()
    );
}

#[test]
fn options_that_cannot_work_are_refused() {
    let Some(tok) = local_tokenizer() else { return };
    let gen = english_config(&tok);
    let vad_path = crate::models::silero::default_weights_path();
    let Ok(vad) = Vad::load(&vad_path) else {
        eprintln!(
            "skipped: no Silero weights at {} (bash scripts/fetch_silero.sh)",
            vad_path.display()
        );
        return;
    };
    let mut b = planned(&tok, |_| vec![1000]);
    let cases = [
        (
            BatchedOptions::decode_defaults(),
            BatchedOptions {
                batch_size: 0,
                ..Default::default()
            },
            "batch_size",
        ),
        (
            DecodeOptions {
                word_timestamps: true,
                ..BatchedOptions::decode_defaults()
            },
            BatchedOptions::default(),
            "word_timestamps",
        ),
        (
            BatchedOptions::decode_defaults(),
            BatchedOptions {
                vad: SegmentOptions {
                    sample_rate: 8000,
                    ..BatchedOptions::default().vad
                },
                ..Default::default()
            },
            "vad",
        ),
    ];
    for (opts, batched, what) in cases {
        let err = transcribe_batched(
            Network::Plain(&mut b),
            &tok,
            &gen,
            &[0.0; 1600],
            &opts,
            &batched,
            &vad,
            |_| Ok(()),
        )
        .unwrap_err();
        assert!(err.to_string().contains(what), "{what}: {err}");
    }
}

type Checkpoint = (CpuWhisper, WhisperTokenizer, GenerationConfig);

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
    let model = WhisperModel::open_dir(&dir).unwrap();
    Some((
        CpuWhisper::new(&model).unwrap(),
        WhisperTokenizer::from_file(&dir.join("tokenizer.json")).unwrap(),
        GenerationConfig::load(&dir).unwrap(),
    ))
}

/// The recording a golden run was made on, if it is here.
fn recording(run: &str) -> Option<Vec<f32>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if run.contains("librivox") {
        let wav = root.join("fixtures/whisper/librivox_dev00.wav");
        return Some(crate::audio::load_wav(&wav, 16_000).unwrap().samples);
    }
    // realdev dev00..dev09 joined by 0.5 s of silence
    let realdev = root.join("../shared/realdev/wav");
    if !realdev.exists() {
        eprintln!("skipped {run}: no {}", realdev.display());
        return None;
    }
    let mut audio = Vec::new();
    for i in 0..10 {
        if i > 0 {
            audio.extend(std::iter::repeat_n(0.0f32, 8000));
        }
        let wav = realdev.join(format!("dev{i:02}.wav"));
        audio.extend(crate::audio::load_wav(&wav, 16_000).unwrap().samples);
    }
    Some(audio)
}

fn close(at: &str, got: f64, want: &serde_json::Value, tolerance: f64) {
    let want = want.as_f64().unwrap();
    assert!((got - want).abs() <= tolerance, "{at}: {got} vs {want}");
}

/// tiny.en (and base, for the language) over faster-whisper's speech
/// segments gives its `BatchedInferencePipeline` segments: tokens, texts,
/// times and words equal, scores within float noise, whatever the batch
/// size.
#[test]
fn parity_with_faster_whisper_batched_pipeline() {
    let g = golden();
    let mut loaded: Vec<(String, Option<Checkpoint>)> = Vec::new();
    for (name, run) in g["runs"].as_object().unwrap() {
        let model = run["model"].as_str().unwrap();
        if !loaded.iter().any(|(m, _)| m == model) {
            loaded.push((model.to_string(), checkpoint(model)));
        }
        let Some((backend, tok, gen)) = loaded
            .iter_mut()
            .find(|(m, _)| m == model)
            .and_then(|(_, c)| c.as_mut())
        else {
            continue;
        };
        let Some(audio) = recording(name) else {
            continue;
        };
        let kw = &run["kwargs"];
        let d = BatchedOptions::decode_defaults();
        let opts = DecodeOptions {
            beam_size: kw["beam_size"].as_u64().map_or(d.beam_size, |b| b as usize),
            without_timestamps: kw["without_timestamps"].as_bool().unwrap_or(true),
            word_timestamps: kw["word_timestamps"].as_bool().unwrap_or(false),
            multilingual: kw["multilingual"].as_bool().unwrap_or(false),
            language: kw["language"].as_str().map(str::to_string),
            ..d
        };
        let speech = speech_of(&run["speech"]);
        // One chunk per encoder call must give the same as 8 (two chunks).
        let sizes: &[usize] = if name == "realdev10_defaults" {
            &[8, 1]
        } else {
            &[8]
        };
        for &batch_size in sizes {
            let batched = BatchedOptions {
                batch_size,
                ..BatchedOptions::default()
            };
            let pipeline = Pipeline {
                tokenizer: tok,
                gen,
                opts: &opts,
                batched: &batched,
            };
            let network = if opts.word_timestamps {
                Network::Aligned(backend)
            } else {
                Network::Plain(backend)
            };
            let mut segs = Vec::new();
            let info = pipeline
                .run(network, &audio, &speech, &mut |s| {
                    segs.push(s);
                    Ok(())
                })
                .unwrap();
            assert_eq!(info.language, run["language"].as_str().unwrap(), "{name}");
            close(
                name,
                info.language_probability,
                &run["language_probability"],
                1e-3,
            );
            close(name, info.duration, &run["duration"], 1e-9);
            let want = run["segments"].as_array().unwrap();
            assert_eq!(segs.len(), want.len(), "{name}");
            for (got, w) in segs.iter().zip(want) {
                let at = format!("{name} batch {batch_size} segment {}", got.id);
                let tokens: Vec<u32> = w["tokens"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_u64().unwrap() as u32)
                    .collect();
                assert_eq!(got.tokens, tokens, "{at}");
                assert_eq!(got.text, w["text"].as_str().unwrap(), "{at}");
                assert_eq!(got.id as u64, w["id"].as_u64().unwrap(), "{at}");
                assert_eq!(got.seek as u64, w["seek"].as_u64().unwrap(), "{at}");
                close(&at, got.start, &w["start"], 1e-9);
                close(&at, got.end, &w["end"], 1e-9);
                close(&at, got.avg_logprob, &w["avg_logprob"], 2e-3);
                close(&at, got.no_speech_prob, &w["no_speech_prob"], 1e-3);
                close(&at, got.compression_ratio, &w["compression_ratio"], 1e-9);
                match (&got.words, w.get("words")) {
                    (None, None) => {}
                    (Some(words), Some(want)) => {
                        let want = want.as_array().unwrap();
                        assert_eq!(words.len(), want.len(), "{at}");
                        for (word, ww) in words.iter().zip(want) {
                            assert_eq!(word.word, ww[2].as_str().unwrap(), "{at}");
                            close(&at, word.start, &ww[0], 1e-9);
                            close(&at, word.end, &ww[1], 1e-9);
                            close(&at, word.probability, &ww[3], 2e-3);
                        }
                    }
                    (a, b) => panic!("{at}: words {a:?} vs {b:?}"),
                }
            }
        }
        eprintln!(
            "{name}: {} segments equal",
            run["segments"].as_array().unwrap().len()
        );
    }
}

/// The whole mode, our VAD included, on the LibriVox clip: the speech found
/// and the text, beside faster-whisper's.
#[test]
fn librivox_clip_end_to_end() {
    let Some((mut backend, tok, gen)) = checkpoint("whisper-tiny.en") else {
        return;
    };
    let vad_path = crate::models::silero::default_weights_path();
    let Ok(vad) = Vad::load(&vad_path) else {
        eprintln!(
            "skipped: no Silero weights at {} (bash scripts/fetch_silero.sh)",
            vad_path.display()
        );
        return;
    };
    let audio = recording("librivox").unwrap();
    let batched = BatchedOptions::default();
    let speech = batched_speech(&vad, &audio, &batched).unwrap();
    let g = golden();
    let run = &g["runs"]["librivox_defaults"];
    eprintln!(
        "speech: ours {speech:?}, faster-whisper's {}",
        run["speech"]
    );
    let mut segs = Vec::new();
    let opts = BatchedOptions::decode_defaults();
    let info = transcribe_batched(
        Network::Plain(&mut backend),
        &tok,
        &gen,
        &audio,
        &opts,
        &batched,
        &vad,
        |s| {
            segs.push(s);
            Ok(())
        },
    )
    .unwrap();
    let text: String = segs.iter().map(|s| s.text.as_str()).collect();
    eprintln!("{segs:?}");
    assert_eq!(info.language, "en");
    assert_eq!(text, run["segments"][0]["text"].as_str().unwrap());
    let last = segs.last().unwrap();
    assert!(segs[0].start >= 0.0 && last.end <= info.duration + 1e-9);
}

/// Error rates per manifest group, and overall (last).
#[derive(Default)]
struct Rates(Vec<(String, crate::asr::metrics::ErrorCounts)>);

impl Rates {
    fn add(&mut self, group: &str, reference: &str, hypothesis: &str) {
        use crate::asr::metrics::normalize;
        let (r, h) = (normalize(reference), normalize(hypothesis));
        for g in [group, "all"] {
            match self.0.iter_mut().find(|e| e.0 == g) {
                Some(e) => e.1.add(&r, &h),
                None => {
                    let mut e = crate::asr::metrics::ErrorCounts::default();
                    e.add(&r, &h);
                    self.0.push((g.to_string(), e));
                }
            }
        }
    }

    fn print(&self, title: &str, audio_s: f64, wall_s: f64) {
        eprintln!("{title}:");
        let all = self.0.iter().filter(|g| g.0 == "all");
        for (g, e) in self.0.iter().filter(|g| g.0 != "all").chain(all) {
            let (cer, wer) = (e.cer() * 100.0, e.wer() * 100.0);
            eprintln!("  {g:>13}: CER {cer:6.2} %, WER {wer:6.2} %");
        }
        eprintln!(
            "  {wall_s:.1} s for {audio_s:.1} s of audio: {:.1} audio s per s (one thread)",
            audio_s / wall_s
        );
    }
}

/// Measuring only (nothing is tuned on realdev): error rates and speed of
/// the batched mode (our VAD included) and of the sequential mode
/// (faster-whisper's `transcribe` defaults), each file in turn through
/// the same backend on one thread, over shared/realdev's 24 files with
/// tiny.en (`PULSED_BATCHED_MODEL` names another checkpoint). Compare with
/// scripts/whisper/reference_batched.py (faster-whisper's pipeline).
///
/// ```text
/// cargo test --release --lib realdev_rates -- --ignored --nocapture
/// ```
#[test]
#[ignore = "measurement: needs shared/realdev and a checkpoint"]
fn realdev_rates() {
    let name = std::env::var("PULSED_BATCHED_MODEL").unwrap_or("whisper-tiny.en".into());
    let Some((mut backend, tok, gen)) = checkpoint(&name) else {
        return;
    };
    let vad = Vad::load_default().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/realdev");
    let manifest = std::fs::read_to_string(root.join("manifest.jsonl")).unwrap();
    let language = gen.is_multilingual.then(|| "en".to_string());
    let batched_opts = DecodeOptions {
        language: language.clone(),
        ..BatchedOptions::decode_defaults()
    };
    let sequential_opts = DecodeOptions {
        language,
        ..DecodeOptions::default()
    };
    let batched = BatchedOptions::default();
    let (mut rates, mut walls) = ([Rates::default(), Rates::default()], [0.0; 2]);
    let mut audio_s = 0.0;
    for line in manifest.lines().filter(|l| !l.trim().is_empty()) {
        let item: serde_json::Value = serde_json::from_str(line).unwrap();
        let file = item["file"].as_str().unwrap();
        let audio = crate::audio::load_wav(&root.join(file), 16_000)
            .unwrap()
            .samples;
        audio_s += audio.len() as f64 / 16000.0;
        let group = item["group"].as_str().unwrap_or("-");
        let reference = item["text"].as_str().unwrap();
        for mode in 0..2 {
            let mut text = String::new();
            let on_segment = |s: Segment| {
                text.push_str(&s.text);
                Ok(())
            };
            let network = Network::Plain(&mut backend);
            let t0 = std::time::Instant::now();
            if mode == 0 {
                let o = &batched_opts;
                transcribe_batched(network, &tok, &gen, &audio, o, &batched, &vad, on_segment)
            } else {
                crate::whisper::decode::transcribe(
                    network,
                    &tok,
                    &gen,
                    &audio,
                    &sequential_opts,
                    on_segment,
                )
            }
            .unwrap();
            walls[mode] += t0.elapsed().as_secs_f64();
            rates[mode].add(group, reference, text.trim());
            eprintln!(
                "{file} {}: {}",
                ["batched", "sequential"][mode],
                text.trim()
            );
        }
    }
    let titles = [
        format!("{name} batched (batch 8, beam 5, no timestamps, our VAD)"),
        format!("{name} sequential (beam 5, timestamps, fallback)"),
    ];
    for mode in 0..2 {
        rates[mode].print(&titles[mode], audio_s, walls[mode]);
    }

    // One long recording: the 24 files joined by 0.5 s of silence, so that
    // chunks fill batches.
    let (mut joined, mut reference) = (Vec::new(), String::new());
    for line in manifest.lines().filter(|l| !l.trim().is_empty()) {
        let item: serde_json::Value = serde_json::from_str(line).unwrap();
        let file = root.join(item["file"].as_str().unwrap());
        joined.extend(crate::audio::load_wav(&file, 16_000).unwrap().samples);
        joined.extend(std::iter::repeat_n(0.0f32, 8000));
        reference.push_str(item["text"].as_str().unwrap());
        reference.push(' ');
    }
    let seconds = joined.len() as f64 / 16000.0;
    for (title, batch_size) in [
        ("batched, batch 8", 8),
        ("batched, batch 1", 1),
        ("sequential", 0),
    ] {
        let mut text = String::new();
        let mut chunks = 0;
        let on_segment = |s: Segment| {
            text.push_str(&s.text);
            chunks += 1;
            Ok(())
        };
        let network = Network::Plain(&mut backend);
        let t0 = std::time::Instant::now();
        if batch_size > 0 {
            let b = BatchedOptions {
                batch_size,
                ..BatchedOptions::default()
            };
            transcribe_batched(
                network,
                &tok,
                &gen,
                &joined,
                &batched_opts,
                &b,
                &vad,
                on_segment,
            )
        } else {
            crate::whisper::decode::transcribe(
                network,
                &tok,
                &gen,
                &joined,
                &sequential_opts,
                on_segment,
            )
        }
        .unwrap();
        let wall = t0.elapsed().as_secs_f64();
        let mut r = Rates::default();
        r.add("joined", &reference, text.trim());
        let e = &r.0[0].1;
        eprintln!(
            "joined {seconds:.1} s, {title}: {chunks} segments, CER {:.2} %, WER {:.2} %, {wall:.1} s: {:.1} audio s per s",
            e.cer() * 100.0,
            e.wer() * 100.0,
            seconds / wall
        );
    }
}
