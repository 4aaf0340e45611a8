//! `config.json` of the shipped conformer-CTC model (see models/ARCHITECTURE.md).

use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::{Error, Result};

/// A relation between a conformer's sizes that its graph relies on and its
/// `config.json` breaks ([`Error::ModelConfig`] adds the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ConformerConfigError {
    #[error("n_fft must be >= hop > 0")]
    Hop { n_fft: usize, hop: usize },
    #[error("d_model must be a multiple of n_heads")]
    Heads { d_model: usize, n_heads: usize },
    #[error("kernels must be positive")]
    Kernels {
        conv_kernel: usize,
        subsample_kernel: usize,
    },
    #[error("vocab_size must be at least 2")]
    Vocab { vocab_size: usize },
    #[error("n_mels and sample_rate must be positive")]
    FrontEnd { n_mels: usize, sample_rate: u32 },
}

/// Hyper-parameters of a conformer-CTC encoder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConformerConfig {
    #[serde(default)]
    pub name: String,
    pub sample_rate: u32,
    pub n_fft: usize,
    pub hop: usize,
    pub n_mels: usize,
    pub log_eps: f32,
    pub subsample_channels: usize,
    pub subsample_kernel: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub ff_dim: usize,
    pub n_blocks: usize,
    pub conv_kernel: usize,
    pub left_context: usize,
    pub vocab_size: usize,
    pub layer_norm_eps: f32,
}

impl ConformerConfig {
    pub fn load(path: &Path) -> Result<ConformerConfig> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::File {
            path: path.to_path_buf(),
            reason: format!("cannot read model config: {e}"),
        })?;
        let cfg: ConformerConfig = serde_json::from_str(&text).map_err(|e| Error::File {
            path: path.to_path_buf(),
            reason: format!("invalid model config: {e}"),
        })?;
        cfg.validate().map_err(|source| Error::ModelConfig {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(cfg)
    }

    /// Checks the relations the graph relies on; the first one broken.
    pub fn validate(&self) -> std::result::Result<(), ConformerConfigError> {
        use ConformerConfigError as E;
        if !(self.hop > 0 && self.n_fft >= self.hop) {
            return Err(E::Hop {
                n_fft: self.n_fft,
                hop: self.hop,
            });
        }
        if !(self.n_heads > 0 && self.d_model.is_multiple_of(self.n_heads)) {
            return Err(E::Heads {
                d_model: self.d_model,
                n_heads: self.n_heads,
            });
        }
        if !(self.conv_kernel > 0 && self.subsample_kernel > 0) {
            return Err(E::Kernels {
                conv_kernel: self.conv_kernel,
                subsample_kernel: self.subsample_kernel,
            });
        }
        if self.vocab_size <= 1 {
            return Err(E::Vocab {
                vocab_size: self.vocab_size,
            });
        }
        if !(self.n_mels > 0 && self.sample_rate > 0) {
            return Err(E::FrontEnd {
                n_mels: self.n_mels,
                sample_rate: self.sample_rate,
            });
        }
        Ok(())
    }

    /// Input samples per encoder frame (hop times the 4x subsampling).
    pub fn samples_per_frame(&self) -> usize {
        self.hop * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_relations_are_named() {
        let dir = crate::models::ModelDir::default_path();
        let cfg = ConformerConfig::load(&dir.join("config.json")).unwrap();
        assert_eq!(cfg.validate(), Ok(()));
        let heads = ConformerConfig {
            n_heads: 3,
            ..cfg.clone()
        };
        assert_eq!(
            heads.validate(),
            Err(ConformerConfigError::Heads {
                d_model: 256,
                n_heads: 3
            })
        );
        let vocab = ConformerConfig {
            vocab_size: 1,
            ..cfg
        };
        let e = vocab.validate().unwrap_err();
        assert_eq!(e.to_string(), "vocab_size must be at least 2");
    }
}
