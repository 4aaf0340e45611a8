//! Issue 49: Whisper makes up text where nobody speaks (tiny.en wrote
//! "You" on 5 s of digital silence, and after a sentence followed by 30 s
//! of silence it wrote the sentence again). With the speech gate, the
//! default, silence, noise, a tone and clicks give no text and speech
//! keeps its own; `--no-speech-gate` (`speech_gate: false`) gives
//! Whisper's own output back. Runs where whisper-tiny.en and Silero VAD
//! are fetched (the test command fetches both), and says so when it skips.

mod common;

use std::path::{Path, PathBuf};

use common::{pulsed, temp_dir, Rng};
use pulsed::asr::{Transcriber, TranscriberOptions, WhisperOptions};
use pulsed::batch::{Control, Outcome};
use pulsed::engine::Engine;

const TINY: &str = "whisper-tiny.en";
const RATE: usize = 16_000;

/// Whether tiny.en and Silero VAD are at hand (a line says which is not).
fn fetched() -> bool {
    if pulsed::models::whisper::WhisperModel::open(TINY).is_err() {
        eprintln!("skipped: {TINY} is not in the model cache (pulsed fetch {TINY})");
        return false;
    }
    if !pulsed::models::silero::default_weights_path().is_file() {
        eprintln!("skipped: no Silero VAD weights (bash scripts/fetch_silero.sh)");
        return false;
    }
    true
}

fn write_wav(path: &Path, samples: &[f32]) {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: RATE as u32,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for &s in samples {
        w.write_sample((s * 32767.0).round() as i16).unwrap();
    }
    w.finalize().unwrap();
}

fn silence(seconds: f32) -> Vec<f32> {
    vec![0.0; (seconds * RATE as f32) as usize]
}

/// Uniform white noise with this standard deviation (full scale 1).
fn noise(seconds: f32, sigma: f32, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    let half_width = sigma * 3f32.sqrt();
    (0..(seconds * RATE as f32) as usize)
        .map(|_| rng.f32() * half_width)
        .collect()
}

fn tone(seconds: f32, hz: f32, amplitude: f32) -> Vec<f32> {
    (0..(seconds * RATE as f32) as usize)
        .map(|i| amplitude * (std::f32::consts::TAU * hz * i as f32 / RATE as f32).sin())
        .collect()
}

/// Silence with a decaying click at each of `at` seconds.
fn clicks(seconds: f32, at: &[f32]) -> Vec<f32> {
    let mut out = silence(seconds);
    for &t in at {
        let i = (t * RATE as f32) as usize;
        for j in 0..24 {
            let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
            out[i + j] += 0.5 * sign * (-(j as f32) / 4.0).exp();
        }
    }
    out
}

/// A real voice: "He was not an ill-disposed young man." (3 s).
fn clip() -> Vec<f32> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/whisper/librivox_dev00.wav");
    pulsed::audio::load_wav(&path, RATE as u32).unwrap().samples
}

fn tiny(speech_gate: bool) -> Transcriber {
    let opts = TranscriberOptions {
        whisper: WhisperOptions {
            speech_gate,
            ..WhisperOptions::default()
        },
        ..TranscriberOptions::default()
    };
    Transcriber::open(Some(Path::new(TINY)), &opts, Engine::Cpu).unwrap()
}

#[test]
fn transcribe_writes_nothing_on_silence_noise_tones_or_clicks() {
    if !fetched() {
        return;
    }
    let d = temp_dir("whisper-silence");
    let recordings: [(&str, Vec<f32>); 5] = [
        ("silence.wav", silence(5.0)),
        // gauss sigma 300 of int16, the "low white noise"
        ("noise.wav", noise(5.0, 300.0 / 32768.0, 49)),
        // tiny.en wrote "www.beadaholique.com" on this one
        ("tone.wav", tone(3.0, 440.0, 0.09)),
        ("hum.wav", tone(8.0, 50.0, 0.03)),
        ("clicks.wav", clicks(8.0, &[0.8, 2.0, 3.7, 5.1, 6.9])),
    ];
    let mut files: Vec<String> = Vec::new();
    for (name, samples) in &recordings {
        let p: PathBuf = d.join(name);
        write_wav(&p, samples);
        files.push(p.display().to_string());
    }
    // one file at a time, and files decoded together (a speech file among
    // them: the silent ones are left out of the batch)
    let speech = d.join("speech.wav");
    write_wav(&speech, &clip());
    let speech = speech.display().to_string();
    for batch in ["1", "3"] {
        let mut args = vec!["transcribe", "--model", TINY, "--format", "jsonl"];
        args.extend(["--batch-size", batch, "--order", "input", &speech]);
        args.extend(files.iter().map(String::as_str));
        let (code, out, err) = pulsed(&args);
        assert_eq!(code, 0, "{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), recordings.len() + 1, "{out}");
        assert!(lines[0].contains("young man"), "{}", lines[0]);
        for line in &lines[1..] {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["text"], "", "batch {batch}: {line}");
            assert_eq!(v["segments"], serde_json::json!([]), "{line}");
            assert_eq!(v["language"], "en", "{line}");
        }
    }
    // the gate is what takes the text away: Whisper alone writes on silence
    let (code, out, err) = pulsed(&["transcribe", "--model", TINY, "--no-speech-gate", &files[0]]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.trim().is_empty(), "tiny.en wrote nothing on silence");
}

#[test]
fn speech_keeps_its_segments_and_the_silence_after_it_gives_none() {
    if !fetched() {
        return;
    }
    let (gated, ungated) = (tiny(true), tiny(false));
    // a sentence, then a whole window of silence, which tiny.en fills with
    // the sentence again (conditioned on it)
    let mut samples = clip();
    samples.extend(silence(30.0));
    let kept = gated.transcribe(&samples).unwrap();
    let all = ungated.transcribe(&samples).unwrap();
    assert!(all.segments.len() > 1, "{:?}", all.segments);
    assert!(all.segments[1].start_s >= 30.0, "{:?}", all.segments);
    assert_eq!(kept.segments, all.segments[..1], "{}", all.transcript.text);
    assert_eq!(kept.transcript.text, all.segments[0].text.trim());
    assert!(kept.transcript.text.contains("young man"), "{kept:?}");

    // the pool hears a file as it streams it, as the samples were heard
    let d = temp_dir("whisper-silence-pool");
    let file = d.join("clip_then_silence.wav");
    write_wav(&file, &samples);
    let mut pooled = Vec::new();
    let opts = gated.batch_options(1, None, 1);
    gated
        .run_files(&[file], opts, &Control::new(), |r| {
            match r.outcome {
                Outcome::Done { transcript, .. } => pooled.push(transcript.text),
                other => panic!("{other:?}"),
            }
            Ok::<(), ()>(())
        })
        .unwrap();
    assert_eq!(pooled, std::slice::from_ref(&kept.transcript.text));

    // nothing heard, nothing decoded: no segment, the language still told
    let quiet = gated.transcribe(&silence(5.0)).unwrap();
    assert_eq!(quiet.transcript.text, "");
    assert!(quiet.segments.is_empty() && quiet.transcript.words.is_empty());
    assert_eq!(quiet.language.as_deref(), Some("en"));
    assert!(!ungated
        .transcribe(&silence(5.0))
        .unwrap()
        .transcript
        .text
        .is_empty());
}
