//! `config.json` of the shipped conformer-CTC model (see models/ARCHITECTURE.md).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

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
        cfg.validate().map_err(|reason| Error::File {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(cfg)
    }

    /// Checks the relations the graph relies on.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let checks = [
            (
                self.hop > 0 && self.n_fft >= self.hop,
                "n_fft must be >= hop > 0",
            ),
            (
                self.n_heads > 0 && self.d_model.is_multiple_of(self.n_heads),
                "d_model must be a multiple of n_heads",
            ),
            (
                self.conv_kernel > 0 && self.subsample_kernel > 0,
                "kernels must be positive",
            ),
            (self.vocab_size > 1, "vocab_size must be at least 2"),
            (
                self.n_mels > 0 && self.sample_rate > 0,
                "n_mels and sample_rate must be positive",
            ),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, why)) => Err(why.to_string()),
            None => Ok(()),
        }
    }

    /// Input samples per encoder frame (hop times the 4x subsampling).
    pub fn samples_per_frame(&self) -> usize {
        self.hop * 4
    }
}
