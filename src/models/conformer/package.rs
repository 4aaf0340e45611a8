//! A model directory: `config.json`, `model.safetensors`, `tokens.txt`, and
//! optionally `lm.arpa` (a word language model for beam search).

use std::path::{Path, PathBuf};

use super::ConformerConfig;
use crate::graph::Graph;
use crate::models::conformer::{self, Taps};
use crate::weights::Weights;
use crate::{Error, Result};

/// The shipped model's folder name under `models/`.
pub const DEFAULT_MODEL: &str = "pulsed-en-ctc";

/// A loaded model directory.
#[derive(Debug, Clone)]
pub struct ModelDir {
    pub path: PathBuf,
    pub config: ConformerConfig,
    pub weights: Weights,
}

impl ModelDir {
    /// Where the shipped model lives: `$PULSED_MODEL_DIR`, else the
    /// repository's `models/pulsed-en-ctc` (found from the build's source
    /// tree, then from the current directory).
    pub fn default_path() -> PathBuf {
        if let Some(p) = std::env::var_os("PULSED_MODEL_DIR") {
            return PathBuf::from(p);
        }
        let built = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("models")
            .join(DEFAULT_MODEL);
        if built.exists() {
            return built;
        }
        PathBuf::from("models").join(DEFAULT_MODEL)
    }

    /// The folder `spec` names: `None`, or the shipped model's name
    /// (`pulsed-en-ctc`) where no folder of that name is at hand, is
    /// [`ModelDir::default_path`]; anything else is a folder as given.
    pub fn find(spec: Option<&Path>) -> PathBuf {
        match spec {
            Some(p) if p != Path::new(DEFAULT_MODEL) || p.is_dir() => p.to_path_buf(),
            _ => ModelDir::default_path(),
        }
    }

    /// Loads config and weights, checking that the folder is complete.
    pub fn open(path: impl AsRef<Path>) -> Result<ModelDir> {
        let path = path.as_ref().to_path_buf();
        if !path.is_dir() {
            return Err(Error::File {
                path,
                reason: "model directory not found".into(),
            });
        }
        let config = ConformerConfig::load(&path.join("config.json"))?;
        let weights = Weights::load(path.join("model.safetensors"))?;
        Ok(ModelDir {
            path,
            config,
            weights,
        })
    }

    /// The word language model beam search uses by default, when the
    /// folder has one (`lm.arpa`).
    pub fn lm_path(&self) -> Option<PathBuf> {
        Some(self.path.join("lm.arpa")).filter(|p| p.is_file())
    }

    /// The token list file.
    pub fn tokens_path(&self) -> PathBuf {
        self.path.join("tokens.txt")
    }

    /// The whole-utterance graph.
    pub fn graph(&self, taps: Taps) -> Result<Graph> {
        conformer::build(&self.config, &self.weights, taps)
    }

    /// The whole-utterance graph over `batch` utterances side by side
    /// (input `[batch, S]`; `taps.head` must be [`conformer::Head::LogProbs`]).
    pub fn batched_graph(&self, taps: Taps, batch: usize) -> Result<Graph> {
        conformer::build_batched(&self.config, &self.weights, taps, batch)
    }
}
