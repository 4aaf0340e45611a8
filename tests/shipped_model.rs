//! The shipped model against PyTorch's golden outputs, streamed and whole,
//! and end-to-end transcription of the shipped WAV.

use pulsed::asr::{Decoding, Mode, Recognizer, RecognizerOptions};
use pulsed::graph::Runner;
use pulsed::models::conformer::{Head, Taps};
use pulsed::models::ModelDir;
use pulsed::pulse::verify::check_streaming;
use pulsed::weights::Weights;

const FIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/asr");

fn model() -> ModelDir {
    ModelDir::open(ModelDir::default_path()).unwrap()
}

fn golden() -> Weights {
    Weights::load(format!("{FIX}/golden.safetensors")).unwrap()
}

/// f32 tolerance: the graph and PyTorch sum in different orders over
/// 6 conformer blocks, so bit equality is not expected; 1e-4 is the contract.
const TOL: f32 = 1e-4;

#[test]
fn whole_utterance_matches_pytorch_golden_outputs() {
    let m = model();
    let g = golden();
    let graph = m
        .graph(Taps {
            head: Head::LogProbs,
            intermediates: true,
        })
        .unwrap();
    let wave = g.f32("waveform", &[32124]).unwrap();
    let outs = Runner::new(graph).unwrap().run(&[wave]).unwrap();
    let names = [
        ("log_probs", [50, 29]),
        ("features", [200, 80]),
        ("subsample", [50, 256]),
        ("encoder", [50, 256]),
    ];
    for (i, (name, shape)) in names.iter().enumerate() {
        let want = g.f32(name, shape).unwrap();
        let d = outs[i].max_abs_diff(&want).unwrap();
        // the encoder and its log-probs hold the contract in absolute terms;
        // log-mel features reach |x| ~ 10, where FFT rounding differs by ~1e-5 relative
        let ok = match *name {
            "encoder" | "log_probs" => d <= TOL,
            _ => outs[i].close_to(&want, TOL, TOL),
        };
        assert!(ok, "{name}: max abs diff {d}");
    }
}

#[test]
fn pulsed_model_equals_whole_utterance_on_the_fixture() {
    let m = model();
    let graph = m
        .graph(Taps {
            head: Head::LogProbs,
            intermediates: true,
        })
        .unwrap();
    let wave = golden().f32("waveform", &[32124]).unwrap();
    for pulse in [640, 5120] {
        let r = check_streaming(&graph, pulse, &wave, &[1000, 333, 4096], 1e-4).unwrap();
        assert!(
            r.max_abs_diff.iter().all(|&d| d <= 1e-4),
            "pulse {pulse}: {:?}",
            r.max_abs_diff
        );
    }
}

fn transcribe(mode: Mode, decoding: Decoding) -> String {
    let rec = Recognizer::open(
        ModelDir::default_path(),
        RecognizerOptions { mode, decoding },
    )
    .unwrap();
    let audio =
        pulsed::audio::load_wav(format!("{FIX}/hello.wav").as_ref(), rec.sample_rate()).unwrap();
    rec.transcribe(&audio.samples).unwrap().text
}

#[test]
fn shipped_wav_transcribes_the_same_streamed_and_whole() {
    let want = std::fs::read_to_string(format!("{FIX}/hello.txt"))
        .unwrap()
        .trim()
        .to_string();
    let streamed = transcribe(Mode::Streamed { pulse: 5120 }, Decoding::Greedy);
    let small = transcribe(Mode::Streamed { pulse: 640 }, Decoding::Greedy);
    let whole = transcribe(Mode::Whole, Decoding::Greedy);
    let beam = transcribe(Mode::Streamed { pulse: 5120 }, Decoding::Beam { width: 8 });
    assert_eq!(streamed, want);
    assert_eq!(small, want);
    assert_eq!(whole, want);
    assert_eq!(beam, want);
}

#[test]
fn pulse_not_a_multiple_of_the_frame_is_a_clear_error() {
    let opts = RecognizerOptions {
        mode: Mode::Streamed { pulse: 1000 },
        decoding: Decoding::Greedy,
    };
    let e = Recognizer::open(ModelDir::default_path(), opts)
        .err()
        .expect("must fail")
        .to_string();
    assert!(e.contains("multiple"), "{e}");
}

#[test]
fn bad_session_input_is_a_typed_error_and_loses_nothing() {
    use pulsed::pulse::SessionError;
    use pulsed::Error;
    let rec = Recognizer::open(ModelDir::default_path(), RecognizerOptions::default()).unwrap();
    let mut s = rec.stream().unwrap();
    let audio = pulsed::audio::load_wav(format!("{FIX}/hello.wav").as_ref(), 16000)
        .unwrap()
        .samples;
    s.push(&audio[..8000]).unwrap();
    let mut bad = audio[8000..9000].to_vec();
    bad[10] = f32::NAN;
    match s.push(&bad) {
        Err(Error::Session(SessionError::NotFinite { index: 10, .. })) => {}
        other => panic!("expected NotFinite, got {other:?}"),
    }
    // the rejected push used nothing: the rest of the file still gives the right text
    s.push(&audio[8000..]).unwrap();
    assert_eq!(s.finish().unwrap().text, "if anything can go wrong it will");
    assert!(matches!(
        s.push(&audio[..10]),
        Err(Error::Session(SessionError::Finished))
    ));
}

/// Beam search with the shipped language model, streamed (the search fed
/// chunk by chunk, partial text on the way) and whole, on held-out files:
/// the same words, with the same timings.
#[test]
fn streamed_beam_search_with_the_lm_equals_the_whole_utterance() {
    let open = |mode| {
        Recognizer::open(
            ModelDir::default_path(),
            RecognizerOptions {
                mode,
                decoding: Decoding::Beam { width: 8 },
            },
        )
        .unwrap()
    };
    let (streamed, whole) = (open(Mode::Streamed { pulse: 5120 }), open(Mode::Whole));
    assert!(streamed.lm().is_some(), "the shipped model has lm.arpa");
    for name in ["00", "05", "13"] {
        let path = format!("{FIX}/heldout/{name}.wav");
        let audio = pulsed::audio::load_wav(path.as_ref(), streamed.sample_rate()).unwrap();
        let mut s = streamed.stream().unwrap();
        let mut partials = Vec::new();
        for chunk in audio.samples.chunks(4000) {
            if s.push(chunk).unwrap() {
                partials.push(s.partial().text);
            }
        }
        let a = s.finish().unwrap();
        let b = whole.transcribe(&audio.samples).unwrap();
        assert_eq!(a.text, b.text, "{name}");
        assert!(!a.text.is_empty(), "{name}");
        for (x, y) in a.words.iter().zip(&b.words) {
            assert!((x.start_s - y.start_s).abs() < 1e-9, "{name}");
            assert!((x.end_s - y.end_s).abs() < 1e-9, "{name}");
        }
        assert!(partials.len() >= 3, "{name}: {partials:?}");
        assert!(
            partials.iter().any(|p| !p.is_empty()),
            "{name}: no partial text"
        );
    }
}
