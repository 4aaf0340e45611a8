//! Finding a Whisper model folder: a path as given, or a short name
//! (`whisper-tiny.en`) looked up in the model cache, and what is wrong with
//! a folder that cannot be used.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::WhisperConfigError;

/// Why a Whisper model folder cannot be used.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error("model `{name}` is not in the model cache ({}): `pulsed fetch {name}` fetches it if `pulsed models` lists it; else give a model folder", .dir.display())]
    NotFetched { name: String, dir: PathBuf },
    #[error("{}: no such model folder (give a Hugging Face Whisper folder or a short name such as whisper-tiny.en)", .path.display())]
    NoFolder { path: PathBuf },
    #[error("{}: `{file}` is missing from the model folder", .dir.display())]
    MissingFile { dir: PathBuf, file: &'static str },
    #[error("{}: {reason}", .path.display())]
    Read { path: PathBuf, reason: String },
    #[error("{}: bad config: {source}", .path.display())]
    Config {
        path: PathBuf,
        #[source]
        source: WhisperConfigError,
    },
}

/// The files a folder must have.
pub const REQUIRED: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// Where short names are looked up: `$XDG_CACHE_HOME/pulsed/models`, else
/// `$HOME/.cache/pulsed/models`.
pub fn cache_dir(xdg_cache_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    // the XDG base directory spec says to ignore a relative path
    if let Some(xdg) = xdg_cache_home.map(Path::new).filter(|p| p.is_absolute()) {
        return Some(xdg.join("pulsed").join("models"));
    }
    home.map(|h| Path::new(h).join(".cache").join("pulsed").join("models"))
}

/// Whether `spec` names a Whisper checkpoint rather than the shipped model.
pub fn is_whisper(spec: &str) -> bool {
    let name = Path::new(spec)
        .file_name()
        .and_then(OsStr::to_str)
        .unwrap_or(spec);
    name.starts_with("whisper") || Path::new(spec).join("tokenizer.json").is_file()
}

/// The folder `spec` names: an existing folder as given, else a short name
/// in the model cache. The folder must hold [`REQUIRED`].
pub fn resolve(spec: &str) -> Result<PathBuf, LoadError> {
    let given = PathBuf::from(spec);
    let dir = if given.is_dir() {
        given
    } else if !spec.contains('/') && !spec.is_empty() {
        let var = std::env::var_os;
        let cache = cache_dir(var("XDG_CACHE_HOME").as_deref(), var("HOME").as_deref())
            .unwrap_or_else(|| PathBuf::from(".cache/pulsed/models"));
        let dir = cache.join(spec);
        if !dir.is_dir() {
            return Err(LoadError::NotFetched {
                name: spec.to_string(),
                dir,
            });
        }
        dir
    } else {
        return Err(LoadError::NoFolder { path: given });
    };
    check_files(&dir)?;
    Ok(dir)
}

/// Every required file is there.
pub fn check_files(dir: &Path) -> Result<(), LoadError> {
    match REQUIRED.iter().find(|f| !dir.join(f).is_file()) {
        Some(file) => Err(LoadError::MissingFile {
            dir: dir.to_path_buf(),
            file,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dir_follows_xdg() {
        let home = Some(OsStr::new("/home/a"));
        assert_eq!(
            cache_dir(None, home),
            Some(PathBuf::from("/home/a/.cache/pulsed/models"))
        );
        assert_eq!(
            cache_dir(Some(OsStr::new("/x")), home),
            Some(PathBuf::from("/x/pulsed/models"))
        );
        assert_eq!(
            cache_dir(Some(OsStr::new("rel")), home),
            Some(PathBuf::from("/home/a/.cache/pulsed/models"))
        );
    }

    #[test]
    fn missing_things_are_named() {
        let e = resolve("whisper-nonexistent-size").unwrap_err().to_string();
        assert!(e.contains("pulsed fetch whisper-nonexistent-size"), "{e}");
        let e = resolve("/no/such/folder").unwrap_err();
        assert!(matches!(e, LoadError::NoFolder { .. }), "{e}");
        let dir = std::env::temp_dir().join(format!("pulsed-folder-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), "{}").unwrap();
        let e = resolve(dir.to_str().unwrap()).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.contains("`model.safetensors` is missing"), "{e}");
    }
}
