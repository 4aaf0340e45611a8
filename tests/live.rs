//! The live path end to end: a WAV fed through the ring buffer, the
//! inference thread and the event channel, as `pulsed mic --input` runs it.

use std::process::Command;
use std::sync::Arc;

use pulsed::asr::{Decoding, Mode, Recognizer, RecognizerOptions};
use pulsed::live::{feed_wav_realtime, LiveEvent, LiveOptions, LiveTranscriber};
use pulsed::models::ModelDir;

const FIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/asr");

fn finals(events: &[LiveEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| {
            if let LiveEvent::Final { text, .. } = e {
                Some(text.clone())
            } else {
                None
            }
        })
        .collect()
}

/// hello.wav, 1.5 s of silence (which ends the first utterance), hello.wav
/// again, fed quickly through a live transcriber decoding as `decoding`
/// asks: its events, and the length of hello.wav in seconds.
fn two_utterances(decoding: Decoding) -> (Vec<LiveEvent>, f64) {
    let hello = pulsed::audio::load_wav(format!("{FIX}/hello.wav").as_ref(), 16000)
        .unwrap()
        .samples;
    let mut audio = hello.clone();
    audio.extend(std::iter::repeat_n(0.0, 24000));
    audio.extend(&hello);
    let opts = RecognizerOptions {
        mode: Mode::Streamed { pulse: 2560 },
        decoding,
    };
    let rec = Arc::new(Recognizer::open(ModelDir::default_path(), opts).unwrap());
    if decoding != Decoding::Greedy {
        assert!(rec.lm().is_some(), "the shipped model has lm.arpa");
    }
    let (mut lt, mut input) = LiveTranscriber::start(rec, LiveOptions::default()).unwrap();
    for c in audio.chunks(320) {
        input.write(c);
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    lt.finish();
    let events = lt.events().try_iter().collect();
    (events, hello.len() as f64 / 16000.0)
}

#[test]
fn live_transcriber_gives_partials_then_the_final_text() {
    let opts = RecognizerOptions {
        mode: Mode::Streamed { pulse: 2560 },
        decoding: Decoding::Greedy,
    };
    let rec = Arc::new(Recognizer::open(ModelDir::default_path(), opts).unwrap());
    let (mut lt, mut input) = LiveTranscriber::start(rec.clone(), LiveOptions::default()).unwrap();
    feed_wav_realtime(
        format!("{FIX}/hello.wav").as_ref(),
        rec.sample_rate(),
        &mut input,
        20,
        false,
    )
    .unwrap();
    lt.finish();
    let events: Vec<LiveEvent> = lt.events().try_iter().collect();
    let want = std::fs::read_to_string(format!("{FIX}/hello.txt"))
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(finals(&events).join(" "), want);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, LiveEvent::Partial { .. })),
        "no partial text while speaking"
    );
    assert!(!events
        .iter()
        .any(|e| matches!(e, LiveEvent::Overrun { .. } | LiveEvent::Failed(_))));
}

#[test]
fn two_utterances_give_two_finals() {
    let (events, _) = two_utterances(Decoding::Greedy);
    let f = finals(&events);
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(f[0], f[1]);
}

#[test]
fn mic_command_with_a_wav_at_real_time_pace() {
    let out = Command::new(env!("CARGO_BIN_EXE_pulsed"))
        .args([
            "mic",
            "--model",
            "pulsed-en-ctc",
            "--input",
            &format!("{FIX}/hello.wav"),
            "--realtime",
            "--format",
            "jsonl",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "final");
    assert_eq!(last["text"], "if anything can go wrong it will");
    assert_eq!(last["word_latency_ms"].as_array().unwrap().len(), 7);
    assert!(lines.iter().any(|l| l["type"] == "partial"));
    assert!(stderr.contains("latency from a word's end"), "{stderr}");
}

#[test]
fn mic_without_the_feature_or_a_bad_input_says_why() {
    let out = Command::new(env!("CARGO_BIN_EXE_pulsed"))
        .args([
            "mic",
            "--model",
            "pulsed-en-ctc",
            "--input",
            "/nonexistent.wav",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nonexistent"), "{err}");
    // the encoder on a GPU: on a machine without one, exit 2 and one line why
    #[cfg(feature = "cuda")]
    if pulsed::gpu::GpuDevice::shared().is_err() {
        let hello = format!("{FIX}/hello.wav");
        let out = Command::new(env!("CARGO_BIN_EXE_pulsed"))
            .args([
                "mic",
                "--model",
                "pulsed-en-ctc",
                "--input",
                &hello,
                "--device",
                "cuda",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("pulsed: --device cuda: ") && err.lines().count() == 1,
            "{err}"
        );
    }
}

/// Live beam search with the shipped language model: partial text while
/// speaking, one final per utterance (the search starts afresh at each end,
/// so a final is never revised), timed where the second utterance is.
#[test]
fn live_beam_search_gives_a_final_per_utterance() {
    let (events, hello_s) = two_utterances(Decoding::Beam { width: 8 });
    let want = std::fs::read_to_string(format!("{FIX}/hello.txt"))
        .unwrap()
        .trim()
        .to_string();
    let f = finals(&events);
    assert_eq!(f, vec![want.clone(), want], "{events:?}");
    assert!(events
        .iter()
        .any(|e| matches!(e, LiveEvent::Partial { .. })));
    // the second final's words start after the first utterance and the pause
    let second = events
        .iter()
        .filter_map(|e| match e {
            LiveEvent::Final { words, .. } => Some(words.clone()),
            _ => None,
        })
        .nth(1)
        .unwrap();
    assert!(second[0].start_s > hello_s + 1.0, "{second:?}");
}
