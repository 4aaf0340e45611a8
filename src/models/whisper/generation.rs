//! A checkpoint's decoding settings: `generation_config.json`, with
//! `config.json` for what older folders keep there, the way the reference
//! converter (CTranslate2's Whisper loader) reads them.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::WhisperError;

/// Decoding settings of one Whisper checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationConfig {
    /// Tokens the checkpoint suppresses at every step (`suppress_tokens`);
    /// what `DecodeOptions::suppress_tokens = [-1]` means is computed from
    /// the tokenizer instead, as the reference does.
    pub suppress_tokens: Vec<u32>,
    /// Tokens suppressed at the first sampled step when `suppress_blank`
    /// (`begin_suppress_tokens`: the space and end of text).
    pub begin_suppress_tokens: Vec<u32>,
    /// `(layer, head)` of the cross-attention heads that follow the audio
    /// in time (word timestamps); without the field, every head of the
    /// decoder's second half.
    pub alignment_heads: Vec<(usize, usize)>,
    /// Language codes (`en`, not `<|en|>`) and their token ids, in id
    /// order; empty when the file lists none (the tokenizer's are used).
    pub lang_to_id: Vec<(String, u32)>,
    /// Whether the checkpoint knows several languages (and so takes
    /// language and task tokens).
    pub is_multilingual: bool,
    /// The checkpoint's own limit on the first timestamp, in 20 ms steps
    /// (decoding uses `DecodeOptions::max_initial_timestamp`, as the
    /// reference does).
    pub max_initial_timestamp_index: Option<usize>,
    /// Most text positions: prompt plus output (448).
    pub max_length: usize,
}

/// `generation_config.json` is optional; `config.json` is not.
const GENERATION: &str = "generation_config.json";
const CONFIG: &str = "config.json";

/// Vocabulary size from which a checkpoint is multilingual (51865 and
/// 51866 for large-v3; English-only ones have 51864).
const MULTILINGUAL_VOCAB: u64 = 51865;

impl GenerationConfig {
    /// Reads `dir/generation_config.json` (when there) and `dir/config.json`.
    pub fn load(dir: &Path) -> Result<GenerationConfig, WhisperError> {
        let gen_path = dir.join(GENERATION);
        let config_path = dir.join(CONFIG);
        let gen = if gen_path.exists() {
            Some(read_json(&gen_path)?)
        } else {
            None
        };
        let config = read_json(&config_path)?;
        GenerationConfig::from_json(
            gen.as_ref().map(|g| (g, gen_path.as_path())),
            (&config, &config_path),
        )
    }

    /// Builds the settings from parsed files, each with the path its errors
    /// name.
    pub fn from_json(
        gen: Option<(&Value, &Path)>,
        config: (&Value, &Path),
    ) -> Result<GenerationConfig, WhisperError> {
        let (config, config_path) = (object(config.0, config.1)?, config.1);
        let gen = match gen {
            Some((v, p)) => Some((object(v, p)?, p)),
            None => None,
        };
        // Each field: the generation file first, then config.json.
        let field = |name: &'static str| -> Option<(&Value, &Path)> {
            gen.and_then(|(g, p)| g.get(name).filter(|v| !v.is_null()).map(|v| (v, p)))
                .or_else(|| {
                    config
                        .get(name)
                        .filter(|v| !v.is_null())
                        .map(|v| (v, config_path))
                })
        };
        let missing = |name: &'static str| WhisperError::MissingField {
            file: gen.map_or(config_path, |(_, p)| p).to_path_buf(),
            field: name,
        };

        let suppress_tokens = match field("suppress_tokens") {
            Some((v, p)) => ids(v, p, "suppress_tokens")?,
            None => Vec::new(),
        };
        let begin_suppress_tokens = match field("begin_suppress_tokens") {
            Some((v, p)) => ids(v, p, "begin_suppress_tokens")?,
            None => return Err(missing("begin_suppress_tokens")),
        };
        let alignment_heads = match field("alignment_heads") {
            Some((v, p)) => heads(v, p)?,
            None => default_heads(config, config_path)?,
        };
        let lang_to_id = match field("lang_to_id") {
            Some((v, p)) => languages(v, p)?,
            None => Vec::new(),
        };
        let is_multilingual = match field("is_multilingual") {
            Some((v, p)) => v
                .as_bool()
                .ok_or_else(|| bad(p, "is_multilingual", "not a boolean"))?,
            None => match config.get("vocab_size") {
                Some(v) => {
                    v.as_u64()
                        .ok_or_else(|| bad(config_path, "vocab_size", "not a count"))?
                        >= MULTILINGUAL_VOCAB
                }
                None => return Err(missing("is_multilingual")),
            },
        };
        let max_initial_timestamp_index = match field("max_initial_timestamp_index") {
            Some((v, p)) => Some(count(v, p, "max_initial_timestamp_index")?),
            None => None,
        };
        let max_length = match field("max_length") {
            Some((v, p)) => count(v, p, "max_length")?,
            None => match config.get("max_target_positions") {
                Some(v) => count(v, config_path, "max_target_positions")?,
                None => 448,
            },
        };
        Ok(GenerationConfig {
            suppress_tokens,
            begin_suppress_tokens,
            alignment_heads,
            lang_to_id,
            is_multilingual,
            max_initial_timestamp_index,
            max_length,
        })
    }
}

fn read_json(path: &Path) -> Result<Value, WhisperError> {
    let text = std::fs::read_to_string(path).map_err(|source| WhisperError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| WhisperError::Json {
        path: path.to_path_buf(),
        source,
    })
}

fn bad(file: &Path, field: &'static str, reason: &str) -> WhisperError {
    WhisperError::BadField {
        file: file.to_path_buf(),
        field,
        reason: reason.to_string(),
    }
}

fn object<'a>(v: &'a Value, path: &Path) -> Result<&'a Map<String, Value>, WhisperError> {
    v.as_object().ok_or_else(|| WhisperError::BadField {
        file: PathBuf::from(path),
        field: "(top level)",
        reason: "not a JSON object".to_string(),
    })
}

fn count(v: &Value, file: &Path, field: &'static str) -> Result<usize, WhisperError> {
    v.as_u64()
        .map(|n| n as usize)
        .ok_or_else(|| bad(file, field, "not a non-negative integer"))
}

fn ids(v: &Value, file: &Path, field: &'static str) -> Result<Vec<u32>, WhisperError> {
    let list = v.as_array().ok_or_else(|| bad(file, field, "not a list"))?;
    list.iter()
        .map(|x| {
            x.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad(file, field, "holds something that is not a token id"))
        })
        .collect()
}

fn heads(v: &Value, file: &Path) -> Result<Vec<(usize, usize)>, WhisperError> {
    let field = "alignment_heads";
    let list = v.as_array().ok_or_else(|| bad(file, field, "not a list"))?;
    list.iter()
        .map(|pair| match pair.as_array().map(|p| p.as_slice()) {
            Some([l, h]) => Ok((count(l, file, field)?, count(h, file, field)?)),
            _ => Err(bad(
                file,
                field,
                "holds something that is not a [layer, head] pair",
            )),
        })
        .collect()
}

/// The reference's choice without `alignment_heads`: every head of the
/// last half of the decoder's layers.
fn default_heads(
    config: &Map<String, Value>,
    path: &Path,
) -> Result<Vec<(usize, usize)>, WhisperError> {
    let get = |name: &'static str| match config.get(name) {
        Some(v) => count(v, path, name),
        None => Err(WhisperError::MissingField {
            file: path.to_path_buf(),
            field: name,
        }),
    };
    let layers = get("decoder_layers")?;
    let n_heads = get("decoder_attention_heads")?;
    Ok((layers / 2..layers)
        .flat_map(|l| (0..n_heads).map(move |h| (l, h)))
        .collect())
}

fn languages(v: &Value, file: &Path) -> Result<Vec<(String, u32)>, WhisperError> {
    let field = "lang_to_id";
    let map = v
        .as_object()
        .ok_or_else(|| bad(file, field, "not an object"))?;
    let mut out = map
        .iter()
        .map(|(token, id)| {
            let code = token
                .strip_prefix("<|")
                .and_then(|t| t.strip_suffix("|>"))
                .ok_or_else(|| bad(file, field, "holds a key that is not a <|code|> token"))?;
            let id = id
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad(file, field, "holds a value that is not a token id"))?;
            Ok((code.to_string(), id))
        })
        .collect::<Result<Vec<_>, WhisperError>>()?;
    out.sort_by_key(|&(_, id)| id);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(gen: Option<Value>, config: Value) -> Result<GenerationConfig, WhisperError> {
        let gp = PathBuf::from("m/generation_config.json");
        let cp = PathBuf::from("m/config.json");
        GenerationConfig::from_json(gen.as_ref().map(|g| (g, gp.as_path())), (&config, &cp))
    }

    #[test]
    fn generation_file_first_then_config() {
        let gen = json!({
            "begin_suppress_tokens": [220, 50257],
            "suppress_tokens": [1, 2],
            "alignment_heads": [[1, 0], [2, 5]],
            "lang_to_id": {"<|fr|>": 50265, "<|en|>": 50259},
            "is_multilingual": true,
            "max_initial_timestamp_index": 50,
            "max_length": 448
        });
        let c = parse(Some(gen), json!({"vocab_size": 51865})).unwrap();
        assert_eq!(c.begin_suppress_tokens, vec![220, 50257]);
        assert_eq!(c.suppress_tokens, vec![1, 2]);
        assert_eq!(c.alignment_heads, vec![(1, 0), (2, 5)]);
        assert_eq!(
            c.lang_to_id,
            vec![("en".into(), 50259), ("fr".into(), 50265)]
        );
        assert!(c.is_multilingual);
        assert_eq!(c.max_initial_timestamp_index, Some(50));

        // Older folders: everything in config.json, heads by default.
        let config = json!({
            "vocab_size": 51864, "begin_suppress_tokens": [220, 50256],
            "decoder_layers": 4, "decoder_attention_heads": 2, "max_target_positions": 448
        });
        let c = parse(None, config).unwrap();
        assert!(!c.is_multilingual);
        assert_eq!(c.alignment_heads, vec![(2, 0), (2, 1), (3, 0), (3, 1)]);
        assert_eq!(c.max_length, 448);
        assert!(c.suppress_tokens.is_empty());
    }

    #[test]
    fn missing_required_field_names_file_and_field() {
        let err = parse(Some(json!({"is_multilingual": false})), json!({})).unwrap_err();
        match err {
            WhisperError::MissingField { file, field } => {
                assert_eq!(field, "begin_suppress_tokens");
                assert!(file.ends_with("generation_config.json"));
            }
            e => panic!("{e}"),
        }
        let err = parse(
            Some(json!({"begin_suppress_tokens": [220], "alignment_heads": [[1]]})),
            json!({"vocab_size": 51864}),
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                WhisperError::BadField {
                    field: "alignment_heads",
                    ..
                }
            ),
            "{err}"
        );
    }
}
