//! Live Whisper as a user runs it: `pulsed mic --model whisper-tiny.en
//! --input F` (LocalAgreement over a rolling buffer, Silero VAD cutting
//! utterances) gives the offline transcript's text, never revises committed
//! words, measures latency at real-time pace, and refuses bad input in one
//! line. Needs the checkpoint and Silero's weights (`scripts/test.sh`
//! fetches both).

mod common;

use std::path::Path;

use common::whisper::{chunked_live, chunked_live_run, chunked_model};
use common::{pulsed, temp_dir};
use pulsed::asr::metrics::{normalize, ErrorCounts};
use pulsed::live::{Update, WhisperLive, WhisperLiveOptions};
use serde_json::Value;

const CLIP: &str = "fixtures/whisper/librivox_dev00.wav";

fn clip() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(CLIP)
        .display()
        .to_string()
}

/// faster-whisper's text of the clip (beam 5, the defaults).
fn offline_text() -> String {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/whisper/whisper-tiny.en_dev00.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    v["runs"]["beam5_timestamps"]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The clip, then the first `n` held-out espeak sentences, each followed by
/// 0.5 s of silence; and the text they say.
fn clip_and_sentences(n: usize) -> (Vec<f32>, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join(CLIP)];
    let mut reference = offline_text();
    let heldout = root.join("fixtures/asr/heldout");
    let manifest = std::fs::read_to_string(heldout.join("manifest.jsonl")).unwrap();
    for line in manifest.lines().take(n) {
        let v: Value = serde_json::from_str(line).unwrap();
        files.push(heldout.join(v["file"].as_str().unwrap()));
        reference = format!("{reference} {}", v["text"].as_str().unwrap());
    }
    let mut stream = Vec::new();
    for f in &files {
        stream.extend(pulsed::audio::load_wav(f, 16_000).unwrap().samples);
        stream.extend(std::iter::repeat_n(0.0, 8_000));
    }
    (stream, reference)
}

fn word_errors(reference: &str, hypothesis: &str) -> usize {
    let mut e = ErrorCounts::default();
    e.add(&normalize(reference), &normalize(hypothesis));
    e.word_edits
}

/// `pulsed mic --model whisper-tiny.en --input INPUT` and `extra`.
fn mic(input: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["mic", "--model", "whisper-tiny.en", "--input", input];
    args.extend_from_slice(extra);
    pulsed(&args)
}

fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn words_of(line: &Value) -> Vec<String> {
    line["text"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .map(pulsed::live::word_key)
        .collect()
}

#[test]
fn mic_with_whisper_gives_the_offline_text_and_keeps_committed_words() {
    let c = clip();
    // padded as faster-whisper pads, to compare with its text
    for second_pass in [false, true] {
        let mut args = vec!["--format", "jsonl", "--padding", "zeros"];
        if second_pass {
            args.push("--second-pass");
        }
        let (code, out, err) = mic(&c, &args);
        assert_eq!(code, 0, "{err}");
        let events = lines(&out);
        let finals: Vec<&Value> = events.iter().filter(|e| e["type"] == "final").collect();
        let text: Vec<&str> = finals.iter().map(|f| f["text"].as_str().unwrap()).collect();
        let text = text.join(" ");
        assert!(
            word_errors(&offline_text(), &text) <= 1,
            "live {text:?} vs offline {:?}",
            offline_text()
        );
        assert!(events.iter().any(|e| e["type"] == "partial"), "{out}");
        // what a partial gave as committed stays, word for word, in every
        // later line of its utterance (the second pass may revise it in the
        // final line)
        for (i, e) in events.iter().enumerate() {
            let Some(stable) = e["stable"].as_u64() else {
                continue;
            };
            let committed = &words_of(e)[..stable as usize];
            for later in &events[i + 1..] {
                let last = later["type"] == "final";
                if !last || !second_pass {
                    assert!(words_of(later).starts_with(committed), "{e} then {later}");
                }
                if last {
                    break;
                }
            }
        }
        assert!(err.contains("latency: not measured"), "{err}");
    }
}

/// With `--second-pass` the final line is the utterance's buffer decoded
/// whole, so without VAD (one utterance, shorter than a buffer) it is, word
/// for word, what `pulsed transcribe` gives for the same audio and settings.
#[test]
fn the_final_line_is_the_utterance_decoded_whole() {
    let c = clip();
    let settings = ["--beam", "1", "--no-fallback", "--padding", "zeros"];
    let mut args = vec!["--no-vad", "--second-pass", "--format", "jsonl"];
    args.extend_from_slice(&settings);
    let (code, out, err) = mic(&c, &args);
    assert_eq!(code, 0, "{err}");
    let events = lines(&out);
    let finals: Vec<&Value> = events.iter().filter(|e| e["type"] == "final").collect();
    assert_eq!(finals.len(), 1, "{out}");
    let mut args = vec!["transcribe", "--model", "whisper-tiny.en", c.as_str()];
    args.extend_from_slice(&settings);
    let (code, offline, err) = pulsed(&args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(finals[0]["text"].as_str().unwrap(), offline.trim());
}

#[test]
fn at_real_time_pace_each_final_word_has_a_latency() {
    let c = clip();
    let (code, out, err) = mic(&c, &["--realtime", "--format", "jsonl", "--beam", "1"]);
    assert_eq!(code, 0, "{err}");
    let events = lines(&out);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "final", "{out}");
    // one latency per word ("ill-disposed" is two of Whisper's words)
    let n = words_of(last).len();
    let latencies = last["word_latency_ms"].as_array().unwrap();
    assert!(n > 0 && latencies.len() >= n, "{last}");
    assert!(
        err.contains("latency from a word's end in the audio to its committed text"),
        "{err}"
    );
}

/// One utterance (no VAD) far longer than the buffer (the clip, then five
/// held-out espeak sentences): the buffer is cut several times, and the
/// final line of a second pass, the words committed before the last cut and
/// the rest decoded again, holds each sentence once, as the agreed line does.
#[test]
fn a_long_utterance_is_cut_and_its_final_line_loses_no_word() {
    let (stream, reference) = clip_and_sentences(5);
    let run = |second_pass: bool| {
        let mut opts = WhisperLiveOptions {
            trim_s: 5.0,
            max_buffer_s: 8.0,
            second_pass: Some(second_pass),
            ..WhisperLiveOptions::default()
        };
        opts.decode.beam_size = 1;
        opts.decode.temperatures = vec![0.0];
        let mut live = WhisperLive::open("whisper-tiny.en", None, opts).unwrap();
        let mut updates: Vec<Update> = Vec::new();
        let mut longest = 0.0f64;
        for block in stream.chunks(1000) {
            updates.extend(live.push(block).unwrap());
            longest = longest.max(live.buffer_s());
        }
        updates.extend(live.finish().unwrap());
        assert!(longest < 8.0 + 1.5, "the buffer grew to {longest} s");
        let finals: Vec<Update> = updates.into_iter().filter(|u| u.is_final).collect();
        assert_eq!(finals.len(), 1, "{finals:?}");
        finals.into_iter().next().unwrap()
    };
    let second = run(true);
    let agreed = run(false);
    let n = normalize(&reference).split_whitespace().count();
    // espeak voices read poorly: a bound that only a lost sentence breaks
    assert!(
        word_errors(&reference, &second.text) * 3 < n * 2,
        "{:?}",
        second.text
    );
    assert!(
        word_errors(&agreed.text, &second.text) <= 3,
        "second pass {:?} vs agreed {:?}",
        second.text,
        agreed.text
    );
    let w = &second.words;
    assert!(w.windows(2).all(|p| p[1].end_s >= p[0].end_s), "{w:?}");
    assert_eq!(second.committed_at_s.len(), w.len());
}

#[test]
fn the_vad_cuts_utterances_and_each_becomes_final() {
    let audio = pulsed::audio::load_wav(Path::new(&clip()), 16_000)
        .unwrap()
        .samples;
    let clip_s = audio.len() as f64 / 16_000.0;
    let mut stream = audio.clone();
    stream.extend(std::iter::repeat_n(0.0, 32_000));
    stream.extend(&audio);
    let vad = pulsed::vad::Vad::load_default().unwrap();
    let mut opts = WhisperLiveOptions::default();
    opts.decode.beam_size = 1;
    let mut live = WhisperLive::open("whisper-tiny.en", Some(&vad), opts).unwrap();
    let mut updates: Vec<Update> = Vec::new();
    for block in stream.chunks(1000) {
        updates.extend(live.push(block).unwrap());
        assert!(live.buffer_s() < 15.0 + 1.0);
    }
    updates.extend(live.finish().unwrap());
    let finals: Vec<&Update> = updates.iter().filter(|u| u.is_final).collect();
    assert_eq!(finals.len(), 2, "{updates:?}");
    for f in &finals {
        assert!(word_errors(&offline_text(), &f.text) <= 2, "{:?}", f.text);
        assert_eq!(f.stable, f.words.len());
        assert_eq!(f.committed_at_s.len(), f.words.len());
        // a word is committed after it is said
        for (w, at) in f.words.iter().zip(&f.committed_at_s) {
            assert!(*at >= w.end_s - 0.5, "{w:?} committed at {at}");
        }
    }
    assert!(finals[1].words[0].start_s > clip_s + 1.0, "{:?}", finals[1]);
    // no word of the first line in the pause (a decoding into silence can
    // go on with words the audio does not hold; they are left out)
    let last = finals[0].words.last().unwrap();
    assert!(last.start_s < clip_s + 0.3, "{:?}", finals[0]);
}

/// Without the VAD the whole file is one utterance: one final line, the
/// clip's text (greedy, no fallback: the cheap settings).
#[test]
fn without_vad_the_stream_is_one_utterance() {
    let c = clip();
    let (code, out, err) = mic(
        &c,
        &[
            "--no-vad",
            "--beam",
            "1",
            "--no-fallback",
            "--format",
            "jsonl",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let events = lines(&out);
    let finals: Vec<&Value> = events.iter().filter(|e| e["type"] == "final").collect();
    assert_eq!(finals.len(), 1, "{out}");
    let text = finals[0]["text"].as_str().unwrap();
    assert!(word_errors(&offline_text(), text) <= 2, "{text:?}");
    let words = finals[0]["words"].as_array().unwrap();
    assert!(
        words.iter().all(|w| w["end"].as_f64().unwrap() <= 3.0),
        "{out}"
    );
}

#[test]
fn bad_input_is_refused_in_one_line() {
    let c = clip();
    let (code, _, err) = pulsed(&["mic", "--model", "whisper-no-such-size", "--input", &c]);
    assert_ne!(code, 0);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("whisper-no-such-size"), "{err}");

    let d = temp_dir("whisper-live-badwav");
    let bad = d.join("bad.wav");
    std::fs::write(&bad, b"RIFF\x10\x00\x00\x00WAVEjunk").unwrap();
    let (code, out, err) = mic(bad.to_str().unwrap(), &[]);
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("pulsed:")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(errors[0].contains("bad.wav"), "{err}");

    // mic and eval --live read the decoding flags as transcribe does
    let m = d.join("manifest.jsonl");
    let line = serde_json::json!({"file": c, "text": "he was not"});
    std::fs::write(&m, format!("{line}\n")).unwrap();
    let live_eval = |flags: &[&str]| {
        let mut args = vec![
            "eval",
            m.to_str().unwrap(),
            "--model",
            "whisper-tiny.en",
            "--live",
        ];
        args.extend_from_slice(flags);
        pulsed(&args)
    };
    let refusals = [mic(&c, &["--beam", "0"]), live_eval(&["--beam", "0"])];
    for (code, _, err) in refusals {
        assert_ne!(code, 0);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("--beam must be at least 1"), "{err}");
    }
    for (code, _, err) in [mic(&c, &["--trim", "0"]), live_eval(&["--trim=-1"])] {
        assert_ne!(code, 0);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("0 < trim"), "{err}");
    }

    // without a usable GPU, --device cuda is refused in one line
    #[cfg(feature = "cuda")]
    let gpu = pulsed::gpu::GpuDevice::shared().is_ok();
    #[cfg(not(feature = "cuda"))]
    let gpu = false;
    if !gpu {
        let (code, _, err) = mic(&c, &["--device", "cuda"]);
        assert_ne!(code, 0);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("--device cuda"), "{err}");
    }
}

/// `pulsed eval --live` over a manifest: files on several workers give,
/// file for file, what one worker gives, in the manifest's order; the
/// rates of the partial lines come before the final lines'.
#[test]
fn eval_live_on_workers_equals_one_worker() {
    let dir = temp_dir("eval_live_workers");
    let clip = Path::new(env!("CARGO_MANIFEST_DIR")).join(CLIP);
    let quiet = dir.join("quiet.wav");
    // the clip at a third of its level: another file, another text length
    let audio = pulsed::audio::load_wav(&clip, 16_000).unwrap();
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(&quiet, spec).unwrap();
    for s in &audio.samples {
        w.write_sample((s * 0.3 * 32767.0) as i16).unwrap();
    }
    w.finalize().unwrap();
    let reference = "he was not an ill disposed young man";
    let mut manifest = String::new();
    for f in [clip.as_path(), quiet.as_path(), clip.as_path()] {
        let line = serde_json::json!({"file": f, "text": reference});
        manifest.push_str(&format!("{line}\n"));
    }
    let m = dir.join("manifest.jsonl");
    std::fs::write(&m, manifest).unwrap();
    let run = |jobs: &str| {
        let hyp = dir.join(format!("hyp-{jobs}.jsonl"));
        let (code, out, err) = pulsed(&[
            "eval",
            m.to_str().unwrap(),
            "--model",
            "whisper-tiny.en",
            "--device",
            "cpu",
            "--live",
            "--language",
            "en",
            "-j",
            jobs,
            "--hyp-out",
            hyp.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        // the decoding options the policy runs with take --language
        assert!(err.contains("language en"), "{err}");
        assert!(out.contains("latency from a word's end"), "{out}");
        assert!(err.contains(&format!("({jobs} workers)")), "{err}");
        // rates of the partial lines, then of the final ones
        let p = out.find("partial lines").expect("partial rates");
        let f = out.find("final lines:").expect("final rates");
        assert!(p < f, "{out}");
        assert_eq!(out.matches("all: CER").count(), 2, "{out}");
        std::fs::read_to_string(hyp).unwrap()
    };
    let one = run("1");
    assert_eq!(one.lines().count(), 3);
    assert!(one.contains("young man"), "{one}");
    assert_eq!(run("3"), one);
}

/// A chunked checkpoint streams its encoder live (each decoding reads the
/// streamed frames and a fixed tail) and ends with the text the window
/// encoder gives it.
#[test]
fn a_chunked_checkpoint_streams_its_encoder_live() {
    use pulsed::engine::Engine;
    let (streamed, text, partials) = chunked_live(Engine::Cpu, true);
    let (windowed, window_text, _) = chunked_live(Engine::Cpu, false);
    assert!(streamed && !windowed);
    assert!(partials > 0, "{text:?}");
    assert!(
        word_errors(&window_text, &text) <= 1,
        "streamed {text:?} vs window {window_text:?}"
    );
    assert!(word_errors(&offline_text(), &text) <= 3, "{text:?}");
}

/// Where the encoder streams, each final line is the second pass unless
/// asked otherwise; a whole-window checkpoint keeps the agreed words.
#[test]
fn a_streamed_encoder_ends_each_utterance_with_a_second_pass() {
    use pulsed::engine::Engine;
    // one utterance (no VAD) long enough for words to be agreed on before
    // its end
    let (audio, _) = clip_and_sentences(2);
    let final_of = |second_pass: Option<bool>, stream_encoder: bool| {
        let (live, updates) = chunked_live_run(Engine::Cpu, &audio, |o| {
            o.second_pass = second_pass;
            o.stream_encoder = stream_encoder;
        });
        let last = updates
            .into_iter()
            .rfind(|u| u.is_final)
            .expect("a final line");
        (live.second_pass(), last)
    };
    let (on, default) = final_of(None, true);
    let (_, second) = final_of(Some(true), true);
    let (off, agreed) = final_of(Some(false), true);
    assert!(on && !off);
    assert_eq!(default, second);
    // agreed words keep the stream position that committed them; the second
    // pass commits the whole line at the utterance's end
    let end = audio.len() as f64 / 16_000.0;
    assert!(
        agreed.committed_at_s.iter().any(|&t| t < end - 1.0),
        "{agreed:?}"
    );
    assert!(
        default.committed_at_s.iter().all(|&t| t > end - 1.0),
        "{default:?}"
    );
    let (windowed, _) = final_of(None, false);
    assert!(!windowed);
    let tiny = WhisperLive::open("whisper-tiny.en", None, WhisperLiveOptions::default()).unwrap();
    assert!(!tiny.second_pass());
}

/// Where the second pass makes the final lines, partial decodings are
/// greedy (`WhisperLiveOptions::decoding` is unit-tested for what that
/// means): the final line is the one partials decoded with the beam give.
#[test]
fn partial_decodings_are_greedy_where_a_second_pass_makes_the_final_line() {
    use pulsed::engine::Engine;
    let (audio, _) = clip_and_sentences(1);
    let run = |second_pass: Option<bool>, greedy_partials: Option<bool>| {
        let (live, updates) = chunked_live_run(Engine::Cpu, &audio, |o| {
            // the final pass searches (chunked_live_run decodes greedily),
            // over a buffer never cut (words before a cut stay as agreed)
            o.decode.beam_size = 2;
            o.trim_s = o.max_buffer_s;
            o.second_pass = second_pass;
            o.greedy_partials = greedy_partials;
        });
        let partials = updates.iter().filter(|u| !u.is_final).count();
        let last = updates
            .into_iter()
            .rfind(|u| u.is_final)
            .expect("a final line");
        (live.greedy_partials(), partials, last)
    };
    let (greedy, partials, last) = run(None, None);
    let (beam, _, beam_last) = run(None, Some(false));
    assert!(greedy && !beam);
    assert!(partials > 0);
    // the line is the second pass's (committed at the end), not the agreed
    // words, which the partial decodings made
    let end = audio.len() as f64 / 16_000.0;
    assert!(
        last.committed_at_s.iter().all(|&t| t > end - 1.0),
        "{last:?}"
    );
    assert_eq!(last.text, beam_last.text);
    let (agreed, _, _) = run(Some(false), None);
    assert!(
        !agreed,
        "without a second pass partials are decoded as finals"
    );
    let tiny = WhisperLive::open("whisper-tiny.en", None, WhisperLiveOptions::default()).unwrap();
    assert!(!tiny.greedy_partials());
}

/// The buffer grows a step past its maximum before it is cut, so a maximum
/// the streamed encoder's window could hold only without that step is
/// refused when the policy is made, not by an error mid-stream.
#[test]
fn a_buffer_the_streamed_encoder_cannot_hold_is_refused_up_front() {
    let m = chunked_model();
    let with_max = |max_s: f64| WhisperLiveOptions::default().with_trim(max_s);
    assert!(WhisperLive::new(&m, None, with_max(20.0)).is_ok());
    match WhisperLive::new(&m, None, with_max(29.5)) {
        Ok(_) => panic!("a 29.5 s buffer and a 1 s step fit a 30 s window"),
        Err(e) => assert!(e.to_string().contains("a step can too"), "{e}"),
    }
}
