//! The network's sizes from a Hugging Face `config.json` (`WhisperConfig`).

use std::path::Path;

use serde::Deserialize;

use super::{LoadError, WhisperConfigError};

/// What the graphs need to know of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WhisperConfig {
    pub d_model: usize,
    pub encoder_layers: usize,
    pub encoder_attention_heads: usize,
    pub decoder_layers: usize,
    pub decoder_attention_heads: usize,
    pub encoder_ffn_dim: usize,
    pub decoder_ffn_dim: usize,
    pub num_mel_bins: usize,
    pub vocab_size: usize,
    /// Encoder frames per window after the stride-2 convolution (1500).
    pub max_source_positions: usize,
    /// Text positions of the decoder (448).
    pub max_target_positions: usize,
    #[serde(default = "gelu")]
    pub activation_function: String,
    #[serde(default)]
    pub scale_embedding: bool,
    /// Encoder self-attention restricted to chunks (a streaming encoder);
    /// absent in the released checkpoints, which attend to the whole window.
    #[serde(default, rename = "pulsed_encoder_context")]
    pub encoder_context: Option<EncoderContext>,
    /// What the encoder was trained to see after a recording's end
    /// (`"silence"`, `"zeros"`); absent: silence, as the released
    /// checkpoints were trained.
    #[serde(default, rename = "pulsed_window_padding")]
    pub window_padding: Option<crate::models::whisper::decode::WindowPadding>,
    /// The streaming decoder's commit margin (encoder frames) this
    /// checkpoint was measured best at; absent: the decoder's default.
    #[serde(default, rename = "pulsed_stream_margin")]
    pub stream_margin: Option<usize>,
}

/// Which encoder frames each frame sees, in encoder frames (20 ms): its
/// chunk of `chunk` frames and `left` frames before it; in the first
/// layer also `right` frames after it. A look-ahead in later layers would
/// add a whole chunk of latency per layer (a frame past the chunk waits
/// for its own chunk's end), so it is there only with `right_all_layers`,
/// or through copies with `right_copies`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct EncoderContext {
    pub chunk: usize,
    pub left: usize,
    pub right: usize,
    #[serde(default)]
    pub right_all_layers: bool,
    /// Every layer sees `right` frames past its chunk at the latency of
    /// one look-ahead (Emformer's right context): each chunk carries
    /// copies of the `right` input frames after it through all layers,
    /// seen by that chunk alone and dropped at the output. A later chunk
    /// computes those frames again as its own, with its own look-ahead.
    #[serde(default)]
    pub right_copies: bool,
}

impl EncoderContext {
    /// The look-ahead of encoder layer `layer`.
    pub fn right_of(&self, layer: usize) -> usize {
        if layer == 0 || self.right_all_layers || self.right_copies {
            self.right
        } else {
            0
        }
    }
}

impl WhisperConfig {
    /// What fills a window after a recording's end for this checkpoint.
    pub fn padding(&self) -> crate::models::whisper::decode::WindowPadding {
        self.window_padding.unwrap_or_default()
    }
}

fn gelu() -> String {
    "gelu".into()
}

impl WhisperConfig {
    /// Reads and checks `config.json`.
    pub fn load(path: &Path) -> Result<WhisperConfig, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|e| LoadError::Read {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        WhisperConfig::parse(&text).map_err(|source| LoadError::Config {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Parses and checks the text of a `config.json`.
    pub fn parse(text: &str) -> Result<WhisperConfig, WhisperConfigError> {
        let cfg: WhisperConfig = serde_json::from_str(text)?;
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), WhisperConfigError> {
        let sizes = [
            ("d_model", self.d_model),
            ("encoder_layers", self.encoder_layers),
            ("encoder_attention_heads", self.encoder_attention_heads),
            ("decoder_layers", self.decoder_layers),
            ("decoder_attention_heads", self.decoder_attention_heads),
            ("encoder_ffn_dim", self.encoder_ffn_dim),
            ("decoder_ffn_dim", self.decoder_ffn_dim),
            ("num_mel_bins", self.num_mel_bins),
            ("vocab_size", self.vocab_size),
            ("max_source_positions", self.max_source_positions),
            ("max_target_positions", self.max_target_positions),
        ];
        if let Some(&(field, got)) = sizes.iter().find(|(_, v)| *v == 0 || *v > 1 << 20) {
            return Err(WhisperConfigError::Size { field, got });
        }
        for (field, heads) in [
            ("encoder_attention_heads", self.encoder_attention_heads),
            ("decoder_attention_heads", self.decoder_attention_heads),
        ] {
            if !self.d_model.is_multiple_of(heads) {
                return Err(WhisperConfigError::Heads {
                    field,
                    d_model: self.d_model,
                    heads,
                });
            }
        }
        if self.activation_function != "gelu" {
            return Err(WhisperConfigError::Activation {
                got: self.activation_function.clone(),
            });
        }
        if self.scale_embedding {
            return Err(WhisperConfigError::ScaleEmbedding);
        }
        if let Some(c) = self.encoder_context {
            if c.chunk == 0 || c.chunk > self.max_source_positions {
                return Err(WhisperConfigError::Chunk {
                    max: self.max_source_positions,
                    got: c.chunk,
                });
            }
            if c.right_copies && c.right_all_layers {
                return Err(WhisperConfigError::LookAhead);
            }
            if c.right_copies && c.right > c.chunk {
                return Err(WhisperConfigError::Copies {
                    chunk: c.chunk,
                    right: c.right,
                });
            }
        }
        Ok(())
    }

    /// Feature frames per encoder window (twice the encoder's frames).
    pub fn window_frames(&self) -> usize {
        2 * self.max_source_positions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: &str = r#"{"d_model": 384, "encoder_layers": 4, "encoder_attention_heads": 6,
        "decoder_layers": 4, "decoder_attention_heads": 6, "encoder_ffn_dim": 1536,
        "decoder_ffn_dim": 1536, "num_mel_bins": 80, "vocab_size": 51864,
        "max_source_positions": 1500, "max_target_positions": 448, "model_type": "whisper"}"#;

    #[test]
    fn reads_tiny() {
        let c = WhisperConfig::parse(TINY).unwrap();
        assert_eq!((c.d_model, c.window_frames()), (384, 3000));
    }

    #[test]
    fn the_window_padding_is_the_checkpoints() {
        use crate::models::whisper::decode::WindowPadding;
        assert_eq!(WhisperConfig::parse(TINY).unwrap().window_padding, None);
        let zeros = TINY.replace("}", r#", "pulsed_window_padding": "zeros"}"#);
        let c = WhisperConfig::parse(&zeros).unwrap();
        assert_eq!(c.window_padding, Some(WindowPadding::Zeros));
        let odd = TINY.replace("}", r#", "pulsed_window_padding": "noise"}"#);
        let e = WhisperConfig::parse(&odd).unwrap_err().to_string();
        assert!(e.contains("noise"), "{e}");
    }

    #[test]
    fn the_stream_margin_is_the_checkpoints() {
        assert_eq!(WhisperConfig::parse(TINY).unwrap().stream_margin, None);
        let m = TINY.replace("}", r#", "pulsed_stream_margin": 24}"#);
        assert_eq!(WhisperConfig::parse(&m).unwrap().stream_margin, Some(24));
        let bad = TINY.replace("}", r#", "pulsed_stream_margin": -1}"#);
        assert!(WhisperConfig::parse(&bad).is_err());
    }

    #[test]
    fn bad_configs_say_why() {
        let five = TINY.replace(
            "\"encoder_attention_heads\": 6",
            "\"encoder_attention_heads\": 5",
        );
        let e = WhisperConfig::parse(&five).unwrap_err();
        assert!(
            matches!(
                e,
                WhisperConfigError::Heads {
                    field: "encoder_attention_heads",
                    d_model: 384,
                    heads: 5
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "`d_model` 384 is not a multiple of `encoder_attention_heads` 5"
        );
        let e = WhisperConfig::parse(&TINY.replace("\"d_model\": 384,", "")).unwrap_err();
        assert!(matches!(e, WhisperConfigError::Json(_)), "{e}");
        assert!(e.to_string().contains("d_model"), "{e}");
        assert!(WhisperConfig::parse("{not json").is_err());
        let ctx = |c: &str| TINY.replace("}", &format!(r#", "pulsed_encoder_context": {c}}}"#));
        let both = ctx(
            r#"{"chunk": 8, "left": 16, "right": 6, "right_copies": true, "right_all_layers": true}"#,
        );
        assert!(matches!(
            WhisperConfig::parse(&both),
            Err(WhisperConfigError::LookAhead)
        ));
        let far = ctx(r#"{"chunk": 8, "left": 16, "right": 9, "right_copies": true}"#);
        let e = WhisperConfig::parse(&far).unwrap_err();
        assert!(e.to_string().contains("at most its chunk"), "{e}");
        let ok = ctx(r#"{"chunk": 8, "left": 16, "right": 8, "right_copies": true}"#);
        assert!(
            WhisperConfig::parse(&ok)
                .unwrap()
                .encoder_context
                .unwrap()
                .right_copies
        );
        let e = WhisperConfig::load(Path::new("/nonexistent/config.json")).unwrap_err();
        assert!(matches!(e, LoadError::Read { .. }), "{e}");
    }
}
