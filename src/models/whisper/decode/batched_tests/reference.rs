//! The batched pipeline on fetched checkpoints against faster-whisper's
//! `BatchedInferencePipeline` (testdata/batched.json) and on realdev.

use super::*;
type Checkpoint = (CpuWhisper, WhisperTokenizer, GenerationConfig);

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
            padding: Some(WindowPadding::Zeros),
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
    let opts = DecodeOptions {
        padding: Some(WindowPadding::Zeros),
        ..BatchedOptions::decode_defaults()
    };
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
                crate::models::whisper::decode::transcribe(
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
            crate::models::whisper::decode::transcribe(
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
