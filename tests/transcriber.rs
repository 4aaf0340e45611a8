//! The library API ([`Transcriber`]) gives what the command line gave
//! before the model families moved behind it: a fixture's JSON line equals
//! the one `pulsed transcribe --format jsonl` wrote (goldens made by the
//! binary before the move), the pool and a single file agree, and a live
//! session opened through the API ends on the same final text as the live
//! transcriber driven directly. The Whisper tests run where whisper-tiny.en
//! is in the model cache (and, live, Silero VAD is fetched), and say so
//! when they skip.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pulsed::asr::{
    LiveSettings, Recognizer, RecognizerOptions, Transcriber, TranscriberOptions, Transcription,
};
use pulsed::batch::{Control, Outcome};
use pulsed::engine::Engine;
use pulsed::live::{AudioInput, LiveEvent, LiveOptions, LiveTranscriber};
use pulsed::output::{write_transcript_with, Format, WriteOptions};

const TINY: &str = "whisper-tiny.en";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The JSON line `transcribe --format jsonl` writes for `t`, the file named
/// `name`.
fn jsonl(name: &str, t: &Transcription) -> String {
    let mut extra = t.json_fields();
    let d = (t.transcript.duration_s * 1000.0).round() / 1000.0;
    extra.insert("duration_s".into(), serde_json::json!(d));
    let mut out = Vec::new();
    let opts = WriteOptions::default();
    write_transcript_with(&mut out, Format::Jsonl, name, &t.transcript, &extra, &opts).unwrap();
    String::from_utf8(out).unwrap()
}

fn golden(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap()
}

/// whisper-tiny.en, or `None` (with a line saying so) when the cache lacks it.
fn tiny(opts: &TranscriberOptions) -> Option<Transcriber> {
    if pulsed::models::whisper::WhisperModel::open(TINY).is_err() {
        eprintln!("skipped: {TINY} is not in the model cache (pulsed fetch {TINY})");
        return None;
    }
    Some(Transcriber::open(Some(Path::new(TINY)), opts, Engine::Cpu).unwrap())
}

#[test]
fn shipped_model_gives_the_cli_line() {
    let t = Transcriber::open(None, &TranscriberOptions::default(), Engine::Cpu).unwrap();
    let got = t
        .transcribe_file(&root().join("fixtures/asr/hello.wav"))
        .unwrap();
    assert_eq!(
        jsonl("fixtures/asr/hello.wav", &got),
        golden("fixtures/asr/hello.jsonl")
    );
    assert_eq!(got.language, None);
}

#[test]
fn whisper_gives_the_cli_line() {
    let Some(t) = tiny(&TranscriberOptions::default()) else {
        return;
    };
    let name = "fixtures/whisper/librivox_dev00.wav";
    let got = t.transcribe_file(&root().join(name)).unwrap();
    assert_eq!(
        jsonl(name, &got),
        golden("fixtures/whisper/dev00_tiny.en.jsonl")
    );
    assert_eq!(got.language.as_deref(), Some("en"));
    assert!(!got.segments.is_empty() && !got.transcript.words.is_empty());
}

/// The pool's transcript of each file equals the single-file call's.
fn pool_equals_file(t: &Transcriber, files: &[PathBuf]) {
    let opts = t.batch_options(2, None, files.len());
    let mut seen = 0;
    t.run_files(files, opts, &Control::new(), |r| {
        let Outcome::Done { transcript, .. } = r.outcome else {
            panic!("{}: {:?}", r.path.display(), r.outcome);
        };
        let one = t.transcribe_file(&r.path).unwrap();
        assert_eq!(transcript.text, one.transcript.text, "{}", r.path.display());
        seen += 1;
        Ok::<(), ()>(())
    })
    .unwrap();
    assert_eq!(seen, files.len());
}

#[test]
fn the_pool_and_a_file_agree() {
    let t = Transcriber::open(None, &TranscriberOptions::default(), Engine::Cpu).unwrap();
    let heldout = root().join("fixtures/asr/heldout");
    let files: Vec<PathBuf> = ["00.wav", "01.wav", "02.wav"]
        .iter()
        .map(|f| heldout.join(f))
        .collect();
    pool_equals_file(&t, &files);
    if let Some(t) = tiny(&TranscriberOptions::default()) {
        pool_equals_file(&t, &[root().join("fixtures/whisper/librivox_dev00.wav")]);
    }
}

/// Feeds `samples` in 20 ms blocks, as fast as the session takes them;
/// the final lines joined.
fn finals(mut session: LiveTranscriber, mut input: AudioInput, samples: &[f32]) -> String {
    for block in samples.chunks(320) {
        assert!(input.write_waiting(block), "the session stopped");
    }
    session.finish();
    let mut text = Vec::new();
    for ev in session.events().try_iter() {
        match ev {
            LiveEvent::Final { text: t, .. } => text.push(t),
            LiveEvent::Failed(e) => panic!("{e}"),
            _ => {}
        }
    }
    text.join(" ")
}

/// The shipped conformer, streamed in pulses of 2560 samples, and
/// hello.wav.
fn streamed_conformer() -> (Transcriber, pulsed::audio::Audio) {
    let audio = pulsed::audio::load_wav(&root().join("fixtures/asr/hello.wav"), 16_000).unwrap();
    let opts = TranscriberOptions {
        mode: pulsed::asr::Mode::Streamed { pulse: 2560 },
        ..TranscriberOptions::default()
    };
    (Transcriber::open(None, &opts, Engine::Cpu).unwrap(), audio)
}

#[test]
fn a_live_session_ends_as_the_live_transcriber_does() {
    let (t, audio) = streamed_conformer();
    let (s, i) = t.live(LiveSettings::default()).unwrap().start().unwrap();
    let api = finals(s, i, &audio.samples);

    let rec = Recognizer::open(
        pulsed::models::ModelDir::default_path(),
        RecognizerOptions {
            mode: pulsed::asr::Mode::Streamed { pulse: 2560 },
            ..RecognizerOptions::default()
        },
    )
    .unwrap();
    let (s, i) = LiveTranscriber::start(Arc::new(rec), LiveOptions::default()).unwrap();
    let direct = finals(s, i, &audio.samples);
    assert_eq!(api, direct);
    assert_eq!(api, "if anything can go wrong it will");
}

/// A session dropped unfinished is abandoned: the utterance in progress
/// gets no final line (what is still buffered is not decoded for no one).
#[test]
fn a_live_session_dropped_unfinished_gives_no_final_line() {
    // hello.wav is speech to its last sample: only the end of the stream
    // makes it final
    let (t, audio) = streamed_conformer();
    let run = |finish: bool| {
        let (mut s, mut i) = t.live(LiveSettings::default()).unwrap().start().unwrap();
        assert!(i.write_waiting(&audio.samples));
        let events = s.events().clone();
        if finish {
            s.finish();
        }
        drop(s);
        let mut finals = Vec::new();
        for ev in events.try_iter() {
            match ev {
                LiveEvent::Final { text, .. } => finals.push(text),
                LiveEvent::Failed(e) => panic!("{e}"),
                _ => {}
            }
        }
        finals
    };
    assert_eq!(run(true), vec!["if anything can go wrong it will"]);
    assert_eq!(run(false), Vec::<String>::new());
}

#[test]
fn a_live_whisper_session_ends_as_the_live_transcriber_does() {
    let Some(t) = tiny(&TranscriberOptions::default()) else {
        return;
    };
    let Ok(vad) = pulsed::vad::Vad::load_default() else {
        eprintln!("skipped: no Silero VAD (bash scripts/fetch_silero.sh)");
        return;
    };
    let wav = root().join("fixtures/whisper/librivox_dev00.wav");
    let audio = pulsed::audio::load_wav(&wav, 16_000).unwrap();
    let (s, i) = t.live(LiveSettings::default()).unwrap().start().unwrap();
    let api = finals(s, i, &audio.samples);

    let live = pulsed::live::WhisperLive::open(TINY, Some(&vad), Default::default()).unwrap();
    let buffer = LiveOptions {
        buffer_s: 30.0,
        ..LiveOptions::default()
    };
    let (s, i) = LiveTranscriber::start_whisper(live, buffer).unwrap();
    let direct = finals(s, i, &audio.samples);
    assert!(!api.is_empty());
    assert_eq!(api, direct);
}

/// A server opens and closes live sessions all day: a session that ends
/// leaves its network for the next, which then builds none and gives the
/// same text.
#[test]
fn a_live_whisper_session_leaves_its_network_for_the_next() {
    let Some(t) = tiny(&TranscriberOptions::default()) else {
        return;
    };
    if pulsed::vad::Vad::load_default().is_err() {
        eprintln!("skipped: no Silero VAD (bash scripts/fetch_silero.sh)");
        return;
    }
    let audio = pulsed::audio::load_wav(&root().join("fixtures/asr/hello.wav"), 16_000).unwrap();
    // the network built while opening the checkpoint
    assert_eq!(t.spare_networks(), 1);
    let setup = t.live(LiveSettings::default()).unwrap();
    let (s1, i1) = setup.start().unwrap();
    assert_eq!(t.spare_networks(), 0);
    let (s2, i2) = setup.start().unwrap();
    let first = finals(s1, i1, &audio.samples);
    assert_eq!(t.spare_networks(), 1, "the first session's network is back");
    let second = finals(s2, i2, &audio.samples);
    assert_eq!(t.spare_networks(), 2);
    assert!(!first.is_empty());
    assert_eq!(first, second);
    let (s3, i3) = setup.start().unwrap();
    assert_eq!(t.spare_networks(), 1, "a session takes a spare network");
    assert_eq!(finals(s3, i3, &audio.samples), first);
}
