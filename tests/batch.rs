//! `pulsed transcribe` over many files: a folder mixing good, corrupt, empty,
//! truncated, non-WAV and oddly formatted files; `--resume`; manifests;
//! globs; Ctrl-C.

mod common;

use common::{pulsed, temp_dir};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pulsed::asr::{Recognizer, RecognizerOptions};

const HELDOUT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/asr/heldout");

fn heldout(i: usize) -> PathBuf {
    Path::new(HELDOUT).join(format!("{i:02}.wav"))
}

/// Heldout file 1 as stereo, 44.1 kHz, 24-bit (linear interpolation; the
/// reference transcript is taken from this very file, so quality does not matter).
fn write_odd_format(path: &Path) {
    let mut r = hound::WavReader::open(heldout(1)).unwrap();
    let spec = r.spec();
    let x: Vec<f32> = r
        .samples::<i16>()
        .map(|s| s.unwrap() as f32 / 32768.0)
        .collect();
    let out_rate = 44_100u32;
    let n = (x.len() as u64 * out_rate as u64 / spec.sample_rate as u64) as usize;
    let odd = hound::WavSpec {
        channels: 2,
        sample_rate: out_rate,
        bits_per_sample: 24,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, odd).unwrap();
    for i in 0..n {
        let t = i as f64 * spec.sample_rate as f64 / out_rate as f64;
        let (j, f) = (t as usize, (t - t.floor()) as f32);
        let v = x[j.min(x.len() - 1)] * (1.0 - f) + x[(j + 1).min(x.len() - 1)] * f;
        let s = (v * 8_388_607.0) as i32;
        w.write_sample(s).unwrap();
        w.write_sample(s / 2).unwrap();
    }
    w.finalize().unwrap();
}

/// The mixed folder's truncated file: neither good (its text is not the
/// whole recording's) nor bad (it is transcribed, with a warning).
const CUT: &str = "truncated.wav";

/// The mixed folder; returns (good files, bad files).
fn mixed_folder(d: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    std::fs::create_dir_all(d.join("sub")).unwrap();
    let mut good = Vec::new();
    for (i, name) in [(0, "a.wav"), (2, "b.wav"), (5, "sub/c.wav")] {
        std::fs::copy(heldout(i), d.join(name)).unwrap();
        good.push(d.join(name));
    }
    write_odd_format(&d.join("odd.wav"));
    good.push(d.join("odd.wav"));

    let bytes = std::fs::read(heldout(3)).unwrap();
    let bad = vec![
        d.join("corrupt.wav"),
        d.join("empty.wav"),
        d.join("no_samples.wav"),
        d.join("text.wav"),
    ];
    std::fs::write(&bad[0], b"RIFF\x10\x00\x00\x00WAVEjunkjunk").unwrap();
    std::fs::write(&bad[1], b"").unwrap();
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    hound::WavWriter::create(&bad[2], spec)
        .unwrap()
        .finalize()
        .unwrap();
    // cut: transcribed up to where it ends, with a warning (CUT)
    std::fs::write(d.join(CUT), &bytes[..bytes.len() / 2]).unwrap();
    std::fs::write(&bad[3], "this is not audio\n").unwrap();
    // a float WAV with a NaN a few pulses in: found half-way through the file
    let float = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut w = hound::WavWriter::create(d.join("nan.wav"), float).unwrap();
    for i in 0..40_000 {
        let v = if i == 23_456 {
            f32::NAN
        } else {
            (i as f32 * 0.01).sin() * 0.1
        };
        w.write_sample(v).unwrap();
    }
    w.finalize().unwrap();
    let mut bad = bad;
    bad.push(d.join("nan.wav"));
    std::fs::write(
        d.join("notes.txt"),
        "not a .wav: never picked from a folder",
    )
    .unwrap();
    (good, bad)
}

fn parse_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect()
}

/// file -> its line; panics if a file has two lines.
fn by_file(lines: &[serde_json::Value]) -> HashMap<String, serde_json::Value> {
    let mut m = HashMap::new();
    for l in lines {
        let f = l["file"].as_str().unwrap().to_string();
        assert!(
            m.insert(f.clone(), l.clone()).is_none(),
            "{f} has two lines"
        );
    }
    m
}

/// What the single-file library path gives: the whole file loaded, then transcribed.
fn reference(rec: &Recognizer, path: &Path) -> serde_json::Value {
    let audio = pulsed::audio::load_wav(path, rec.sample_rate()).unwrap();
    let t = rec.transcribe(&audio.samples).unwrap();
    let mut extra = serde_json::Map::new();
    extra.insert(
        "duration_s".into(),
        serde_json::json!((audio.duration_s * 1000.0).round() / 1000.0),
    );
    let mut buf = Vec::new();
    pulsed::output::write_transcript(
        &mut buf,
        pulsed::output::Format::Jsonl,
        &path.display().to_string(),
        &t,
        &extra,
    )
    .unwrap();
    serde_json::from_slice(&buf).unwrap()
}

#[test]
fn a_mixed_folder_accounts_for_every_file_once() {
    // one stream per worker, and cohorts of 4 through a batched session
    for streams in ["1", "4"] {
        mixed_folder_with_streams(streams);
    }
}

#[test]
fn whole_mode_runs_and_reports_one_stream_per_worker() {
    // whole-utterance mode has no batched form: the summary must not claim
    // the default cohorts
    let d = temp_dir("whole-streams");
    std::fs::create_dir_all(&d).unwrap();
    for (i, name) in [(0, "a.wav"), (2, "b.wav")] {
        std::fs::copy(heldout(i), d.join(name)).unwrap();
    }
    let (code, out, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--whole",
        "--jobs",
        "1",
        d.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(err.contains("1 workers x 1 streams"), "{err}");
}

fn mixed_folder_with_streams(streams: &str) {
    let d = temp_dir(&format!("mixed-{streams}"));
    let (good, bad) = mixed_folder(&d);
    let (code, out, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--format",
        "jsonl",
        "--jobs",
        "2",
        "--streams",
        streams,
        d.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    let lines = by_file(&parse_lines(&out));
    assert_eq!(lines.len(), good.len() + bad.len() + 1, "{out}");
    let cut = &lines[&d.join(CUT).display().to_string()];
    assert!(!cut["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{cut}"))
        .is_empty());
    let warned = format!("{}: truncated", d.join(CUT).display());
    assert_eq!(err.matches(&warned).count(), 1, "{err}");
    let rec = Recognizer::open(
        pulsed::models::ModelDir::default_path(),
        RecognizerOptions::default(),
    )
    .unwrap();
    for g in &good {
        let line = &lines[&g.display().to_string()];
        assert!(line.get("error").is_none(), "{line}");
        assert_eq!(line, &reference(&rec, g), "{}", g.display());
        assert!(!line["text"].as_str().unwrap().is_empty());
    }
    for b in &bad {
        let line = &lines[&b.display().to_string()];
        let e = line["error"].as_str().unwrap_or_else(|| panic!("{line}"));
        assert!(e.contains(b.file_name().unwrap().to_str().unwrap()), "{e}");
        assert!(err.contains(e), "stderr lacks {e}: {err}");
    }
    assert!(
        err.contains(&format!(
            "{} of {} files failed",
            bad.len(),
            good.len() + bad.len() + 1
        )),
        "{err}"
    );
}

#[test]
fn input_order_on_stdout_and_completion_order_with_o() {
    let d = temp_dir("order");
    let files: Vec<String> = (0..4).map(|i| heldout(i).display().to_string()).collect();
    let mut args = vec![
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--format",
        "jsonl",
        "--jobs",
        "2",
    ];
    args.extend(files.iter().map(String::as_str));
    let (code, out, err) = pulsed(&args);
    assert_eq!(code, 0, "{err}");
    let order: Vec<_> = parse_lines(&out)
        .iter()
        .map(|l| l["file"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(order, files);
    let o = d.join("out.jsonl");
    args.extend(["-o", o.to_str().unwrap()]);
    let (code, out, err) = pulsed(&args);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    let written = parse_lines(&std::fs::read_to_string(&o).unwrap());
    assert_eq!(by_file(&written).len(), 4);
}

#[test]
fn resume_skips_done_files_and_drops_a_cut_line() {
    let d = temp_dir("resume");
    let (good, bad) = mixed_folder(&d);
    let o = d.join("out.jsonl");
    // a previous run: one complete line, then a line cut short by a kill
    let first = good[0].display().to_string();
    let done_line = format!(
        "{{\"file\":{},\"text\":\"from the first run\"}}\n",
        serde_json::json!(first)
    );
    std::fs::write(&o, format!("{done_line}{{\"file\":\"x.wav\",\"te")).unwrap();
    let (code, _, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--format",
        "jsonl",
        "-o",
        o.to_str().unwrap(),
        "--resume",
        d.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    let all = good.len() + bad.len() + 1; // and the cut file
    assert!(
        err.contains(&format!("1 of {all} files already done")),
        "{err}"
    );
    let text = std::fs::read_to_string(&o).unwrap();
    assert!(text.starts_with(&done_line), "{text}");
    let lines = by_file(&parse_lines(&text));
    assert_eq!(lines.len(), all);
    assert_eq!(lines[&first]["text"], "from the first run");
    // everything done: nothing runs, nothing is added
    let (code, _, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--format",
        "jsonl",
        "-o",
        o.to_str().unwrap(),
        "--resume",
        d.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&o).unwrap(), text);
    // --resume needs jsonl
    let (code, _, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "-o",
        o.to_str().unwrap(),
        "--resume",
        d.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn manifests_and_glob_patterns() {
    let d = temp_dir("manifest");
    std::fs::copy(heldout(4), d.join("four.wav")).unwrap();
    let m = d.join("list.jsonl");
    let abs = heldout(6).display().to_string();
    std::fs::write(&m, format!("{{\"audio_filepath\": \"four.wav\", \"duration\": 1.9}}\n# comment\n{abs}\nmissing.wav\n")).unwrap();
    let (code, out, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--format",
        "jsonl",
        "--manifest",
        m.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    let lines = by_file(&parse_lines(&out));
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[&d.join("four.wav").display().to_string()]["text"].is_string());
    assert!(lines[&abs]["text"].is_string());
    assert!(lines[&d.join("missing.wav").display().to_string()]["error"].is_string());

    // the shipped held-out manifest ("file" keys relative to it), plus a pattern no shell expanded
    let shipped = format!("{HELDOUT}/manifest.jsonl");
    let pattern = format!("{HELDOUT}/0[0-4].wav");
    let (code, out, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--format",
        "jsonl",
        "--manifest",
        &shipped,
        &pattern,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        by_file(&parse_lines(&out)).len(),
        20,
        "0[0-4].wav are in the manifest too: run once"
    );

    let (code, _, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        &format!("{HELDOUT}/nothing*.wav"),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("no file matches"), "{err}");
}

#[test]
fn ctrl_c_leaves_complete_lines_and_resume_finishes() {
    let d = temp_dir("ctrlc");
    let mut files = HashSet::new();
    for k in 0..6 {
        for i in 0..20 {
            let p = d.join(format!("{k}-{i:02}.wav"));
            std::fs::copy(heldout(i), &p).unwrap();
            files.insert(p.display().to_string());
        }
    }
    let o = d.join("out.jsonl");
    let args = [
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--format",
        "jsonl",
        "--jobs",
        "2",
        "-o",
        o.to_str().unwrap(),
        d.to_str().unwrap(),
    ];
    let child = Command::new(env!("CARGO_BIN_EXE_pulsed"))
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while std::fs::read_to_string(&o).map_or(0, |s| s.lines().count()) < 3 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no output");
        std::thread::sleep(Duration::from_millis(20));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    let text = std::fs::read_to_string(&o).unwrap();
    assert!(text.ends_with('\n'));
    let partial = by_file(&parse_lines(&text));
    assert!(
        partial.len() < files.len(),
        "stopped too late to test anything"
    );

    let (code, _, err) = pulsed(&[
        "transcribe",
        "--model",
        "pulsed-en-ctc",
        "--format",
        "jsonl",
        "--jobs",
        "2",
        "-o",
        o.to_str().unwrap(),
        "--resume",
        d.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let all = by_file(&parse_lines(&std::fs::read_to_string(&o).unwrap()));
    assert_eq!(all.keys().cloned().collect::<HashSet<_>>(), files);
}

#[test]
fn beam_search_in_batched_cohorts_equals_one_stream_at_a_time() {
    let files: Vec<String> = [4, 7, 9]
        .iter()
        .map(|&i| heldout(i).display().to_string())
        .collect();
    let run = |streams: &str| {
        let mut args = vec![
            "transcribe",
            "--model",
            "pulsed-en-ctc",
            "--beam",
            "4",
            "--format",
            "jsonl",
            "-j",
            "1",
        ];
        args.extend(["--streams", streams]);
        args.extend(files.iter().map(String::as_str));
        let (code, out, err) = pulsed(&args);
        assert_eq!(code, 0, "{err}");
        assert!(err.contains(&format!("x {streams} streams")), "{err}");
        out
    };
    let one = run("1");
    assert_eq!(parse_lines(&one).len(), 3);
    assert_eq!(run("3"), one);
}
