//! Which files a batch covers: paths, folders, glob patterns and manifests.

use std::collections::HashSet;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// An input list that cannot be turned into files; the message names the input.
#[derive(Debug, Error)]
pub enum InputError {
    /// A folder or manifest that could not be read.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    /// A pattern that is not a valid glob.
    #[error("{pattern}: bad glob pattern: {reason}")]
    BadPattern { pattern: String, reason: String },
    /// A glob pattern that names no file (most often a typo).
    #[error("{pattern}: no file matches this pattern")]
    NoMatch { pattern: String },
    /// A manifest line that names no file.
    #[error("{path}:{line}: {source}")]
    Manifest {
        path: String,
        line: usize,
        #[source]
        source: ManifestLineError,
    },
}

/// Why a JSON line of a manifest names no file ([`InputError::Manifest`]
/// adds the manifest and the line).
#[derive(Debug, Error)]
pub enum ManifestLineError {
    #[error("not a JSON object: {0}")]
    Json(#[source] serde_json::Error),
    /// The path key holds something else than a non-empty string.
    #[error("\"{key}\" is not a non-empty string")]
    NotAPath { key: &'static str },
    #[error("no \"audio_filepath\" or \"file\" key")]
    NoPath,
}

/// Expands command-line inputs into files, in order, each once.
///
/// - A folder gives the audio files under it ([`AUDIO_EXTENSIONS`],
///   recursively, sorted; folders
///   reached through symbolic links are not entered, so a link cycle cannot loop).
/// - A path that does not exist but contains `*`, `?` or `[` is a glob
///   pattern (for shells that did not expand it); its matches come sorted.
/// - Anything else is kept as given: a missing or unreadable file fails on
///   its own result line, not here.
pub fn expand_inputs(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, InputError> {
    let mut files = Vec::new();
    for p in inputs {
        if p.is_dir() {
            let mut found = Vec::new();
            walk(p, &mut found).map_err(|source| InputError::Io {
                path: p.display().to_string(),
                source,
            })?;
            found.sort();
            files.extend(found);
        } else if !p.exists() && is_pattern(p) {
            files.extend(glob_files(p)?);
        } else {
            files.push(p.clone());
        }
    }
    Ok(dedup(files))
}

/// The extensions a folder is searched for (any case): what
/// [`crate::audio::load`] reads.
pub const AUDIO_EXTENSIONS: &[&str] = &["wav", "flac", "mp3", "ogg", "oga", "m4a", "mp4", "aac"];

fn is_audio_file(p: &Path) -> bool {
    p.extension()
        .and_then(|x| x.to_str())
        .is_some_and(|x| AUDIO_EXTENSIONS.iter().any(|e| x.eq_ignore_ascii_case(e)))
}

/// Reads a manifest: one path per line, or JSON lines with an
/// `audio_filepath` (NeMo) or `file` key. Blank lines and `#` comments are
/// skipped; relative paths are taken from the manifest's own folder.
pub fn read_manifest(path: &Path) -> Result<Vec<PathBuf>, InputError> {
    let name = path.display().to_string();
    let io_err = |source| InputError::Io {
        path: name.clone(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io_err)?;
    let base = path.parent().unwrap_or(Path::new(""));
    let mut files = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io_err)?;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let entry = if line.starts_with('{') {
            manifest_json_path(line).map_err(|source| InputError::Manifest {
                path: name.clone(),
                line: i + 1,
                source,
            })?
        } else {
            PathBuf::from(line)
        };
        files.push(if entry.is_relative() {
            base.join(entry)
        } else {
            entry
        });
    }
    Ok(dedup(files))
}

fn manifest_json_path(line: &str) -> Result<PathBuf, ManifestLineError> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(ManifestLineError::Json)?;
    for key in ["audio_filepath", "file"] {
        match v.get(key) {
            Some(serde_json::Value::String(s)) if !s.is_empty() => return Ok(PathBuf::from(s)),
            Some(_) => return Err(ManifestLineError::NotAPath { key }),
            None => {}
        }
    }
    Err(ManifestLineError::NoPath)
}

fn is_pattern(p: &Path) -> bool {
    p.to_string_lossy().contains(['*', '?', '['])
}

fn glob_files(p: &Path) -> Result<Vec<PathBuf>, InputError> {
    let pattern = p.to_string_lossy().into_owned();
    let paths = glob::glob(&pattern).map_err(|e| InputError::BadPattern {
        pattern: pattern.clone(),
        reason: e.to_string(),
    })?;
    // An unreadable entry met while matching is kept so that it fails on its own line.
    let mut found: Vec<PathBuf> = paths
        .map(|r| r.unwrap_or_else(|e| e.path().to_path_buf()))
        .filter(|p| !p.is_dir())
        .collect();
    if found.is_empty() {
        return Err(InputError::NoMatch { pattern });
    }
    found.sort();
    Ok(found)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        if e.file_type()?.is_dir() {
            walk(&p, out)?;
        } else if is_audio_file(&p) && !p.is_dir() {
            out.push(p);
        }
    }
    Ok(())
}

/// Keeps the first of each path as written (a file named twice runs once).
fn dedup(files: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = HashSet::new();
    files
        .into_iter()
        .filter(|p| seen.insert(p.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pulsed-inputs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("sub/deeper")).unwrap();
        d
    }

    #[test]
    fn folders_globs_and_duplicates() {
        let d = temp("walk");
        for f in [
            "b.wav",
            "a.WAV",
            "notes.txt",
            "sub/c.wav",
            "sub/deeper/d.wav",
            "sub/e.FLAC",
            "f.mp3",
            "g.ogg",
            "h.m4a",
            "i.opus",
        ] {
            std::fs::write(d.join(f), b"x").unwrap();
        }
        let files = expand_inputs(&[d.clone(), d.join("b.wav")]).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|p| p.strip_prefix(&d).unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "a.WAV",
                "b.wav",
                "f.mp3",
                "g.ogg",
                "h.m4a",
                "sub/c.wav",
                "sub/deeper/d.wav",
                "sub/e.FLAC"
            ]
        );
        let globbed = expand_inputs(&[d.join("sub/**/*.wav")]).unwrap();
        assert_eq!(globbed.len(), 2);
        assert!(matches!(
            expand_inputs(&[d.join("nothing*.wav")]),
            Err(InputError::NoMatch { .. })
        ));
        // a missing plain path is kept: it fails on its own line later
        assert_eq!(expand_inputs(&[d.join("missing.wav")]).unwrap().len(), 1);
    }

    #[test]
    fn manifests_of_paths_and_json() {
        let d = temp("manifest");
        let m = d.join("m.jsonl");
        std::fs::write(
            &m,
            "# comment\n\n{\"audio_filepath\": \"x.wav\", \"duration\": 1}\n{\"file\": \"/abs/y.wav\"}\nplain.wav\nx.wav\n",
        )
        .unwrap();
        let files = read_manifest(&m).unwrap();
        assert_eq!(
            files,
            vec![
                d.join("x.wav"),
                PathBuf::from("/abs/y.wav"),
                d.join("plain.wav")
            ]
        );
        std::fs::write(&m, "{\"text\": \"no path\"}\n").unwrap();
        let e = read_manifest(&m).unwrap_err().to_string();
        assert!(
            e.contains("m.jsonl:1") && e.contains("audio_filepath"),
            "{e}"
        );
        std::fs::write(&m, "{broken\n").unwrap();
        assert!(matches!(
            read_manifest(&m),
            Err(InputError::Manifest {
                line: 1,
                source: ManifestLineError::Json(_),
                ..
            })
        ));
        std::fs::write(&m, "x.wav\n{\"file\": 3}\n").unwrap();
        let e = read_manifest(&m).unwrap_err();
        assert!(
            matches!(
                e,
                InputError::Manifest {
                    line: 2,
                    source: ManifestLineError::NotAPath { key: "file" },
                    ..
                }
            ),
            "{e}"
        );
        assert!(e
            .to_string()
            .ends_with("m.jsonl:2: \"file\" is not a non-empty string"));
        assert!(matches!(
            read_manifest(&d.join("none")),
            Err(InputError::Io { .. })
        ));
    }
}
