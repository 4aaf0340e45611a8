//! The configs a converted folder holds, derived from the model.bin's
//! tensors, the CTranslate2 config.json and the tokenizer: transformers'
//! `WhisperConfig`, its generation config and the feature extractor's.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{DType, ModelBin};

pub(super) struct Configs {
    pub(super) config: Value,
    pub(super) generation: Value,
    pub(super) preprocessor: Value,
    pub(super) dtype: (&'static str, &'static str),
    pub(super) d_model: usize,
    pub(super) vocab: usize,
}

/// The added tokens a Whisper tokenizer must have.
pub(super) const SPECIAL_TOKENS: [&str; 6] = [
    "<|endoftext|>",
    "<|startoftranscript|>",
    "<|translate|>",
    "<|transcribe|>",
    "<|startofprev|>",
    "<|notimestamps|>",
];

fn token_ids(tokenizer: &Value) -> Result<BTreeMap<String, i64>, String> {
    let ids: BTreeMap<String, i64> = tokenizer["added_tokens"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t["content"].as_str()?.to_string(), t["id"].as_i64()?)))
        .collect();
    for name in SPECIAL_TOKENS {
        if !ids.contains_key(name) {
            return Err(format!("tokenizer.json has no added token {name}"));
        }
    }
    Ok(ids)
}

pub(super) fn configs(
    m: &ModelBin,
    b: &[u8],
    ct2: &Value,
    tokenizer: &Value,
    n_enc: usize,
    n_dec: usize,
    tied: bool,
) -> Result<Configs, String> {
    let emb = m.var("decoder/embeddings/weight")?;
    let conv1 = m.var("encoder/conv1/weight")?;
    let (vocab, d_model) = match emb.shape[..] {
        [v, d] => (v, d),
        _ => return Err("model.bin: decoder/embeddings/weight is not a matrix".into()),
    };
    let n_mels = *conv1
        .shape
        .get(1)
        .ok_or("model.bin: encoder/conv1/weight is not 3-D")?;
    let ids = token_ids(tokenizer)?;
    let (eot, sot) = (ids["<|endoftext|>"], ids["<|startoftranscript|>"]);
    let (translate, transcribe) = (ids["<|translate|>"], ids["<|transcribe|>"]);
    let notimestamps = ids["<|notimestamps|>"];
    // HF's rule (and CTranslate2's): the multilingual vocabulary has 51865+ rows
    let multilingual = vocab >= 51865;
    let mut dtypes: Vec<DType> = m
        .vars
        .values()
        .filter(|v| !v.shape.is_empty())
        .map(|v| v.dtype)
        .collect();
    dtypes.sort_by_key(|d| *d as u8);
    dtypes.dedup();
    let dtype = match dtypes[..] {
        [d] => d
            .float()
            .ok_or_else(|| format!("model.bin stores {d:?} weights (quantized): not supported"))?,
        _ => {
            return Err(format!(
                "model.bin mixes dtypes {dtypes:?} (quantized?): not supported"
            ))
        }
    };
    for name in ["suppress_ids", "suppress_ids_begin", "alignment_heads"] {
        if ct2.get(name).is_none() {
            return Err(format!("the CTranslate2 config.json has no {name}"));
        }
    }
    let suppress = ct2["suppress_ids"].clone();
    let begin_suppress = ct2["suppress_ids_begin"].clone();
    let heads_enc = m.scalar(b, "encoder/num_heads")?;
    let heads_dec = m.scalar(b, "decoder/num_heads")?;
    for heads in [heads_enc, heads_dec] {
        if heads <= 0 || d_model % heads as usize != 0 {
            return Err(format!(
                "d_model {d_model} does not split into {heads} heads"
            ));
        }
    }
    let rows = |name: &str| {
        m.var(name)?
            .shape
            .first()
            .copied()
            .ok_or_else(|| format!("model.bin: {name} is a scalar"))
    };
    let config = json!({
        "_name_or_path": "",
        "activation_dropout": 0.0,
        "activation_function": "gelu",
        "apply_spec_augment": false,
        "architectures": ["WhisperForConditionalGeneration"],
        "attention_dropout": 0.0,
        "begin_suppress_tokens": begin_suppress,
        "bos_token_id": eot,
        "classifier_proj_size": 256,
        "d_model": d_model,
        "decoder_attention_heads": heads_dec,
        "decoder_ffn_dim": rows("decoder/layer_0/ffn/linear_0/weight")?,
        "decoder_layerdrop": 0.0,
        "decoder_layers": n_dec,
        "decoder_start_token_id": sot,
        "dropout": 0.0,
        "encoder_attention_heads": heads_enc,
        "encoder_ffn_dim": rows("encoder/layer_0/ffn/linear_0/weight")?,
        "encoder_layerdrop": 0.0,
        "encoder_layers": n_enc,
        "eos_token_id": eot,
    });
    // two halves: one json! of every key passes the macro's recursion limit
    let rest = json!({
        "init_std": 0.02,
        "is_encoder_decoder": true,
        "mask_feature_length": 10,
        "mask_feature_min_masks": 0,
        "mask_feature_prob": 0.0,
        "mask_time_length": 10,
        "mask_time_min_masks": 2,
        "mask_time_prob": 0.05,
        "max_length": 448,
        "max_source_positions": rows("encoder/position_encodings/encodings")?,
        "max_target_positions": rows("decoder/position_encodings/encodings")?,
        "median_filter_width": 7,
        "model_type": "whisper",
        "num_hidden_layers": n_enc,
        "num_mel_bins": n_mels,
        "pad_token_id": eot,
        "scale_embedding": false,
        "suppress_tokens": suppress,
        "tie_word_embeddings": tied,
        "torch_dtype": dtype.1,
        "use_cache": true,
        "use_weighted_layer_sum": false,
        "vocab_size": vocab,
    });
    let mut config = config;
    if let (Value::Object(c), Value::Object(r)) = (&mut config, rest) {
        c.extend(r);
    }
    let forced = if multilingual {
        json!([[1, null], [2, transcribe]])
    } else {
        json!([[1, notimestamps]])
    };
    let mut generation = json!({
        "alignment_heads": ct2["alignment_heads"].clone(),
        "begin_suppress_tokens": ct2["suppress_ids_begin"].clone(),
        "bos_token_id": eot,
        "decoder_start_token_id": sot,
        "eos_token_id": eot,
        "forced_decoder_ids": forced,
        "is_multilingual": multilingual,
        "max_initial_timestamp_index": 50,
        "max_length": 448,
        "no_timestamps_token_id": notimestamps,
        "pad_token_id": eot,
        "prev_sot_token_id": ids["<|startofprev|>"],
        "return_timestamps": false,
        "suppress_tokens": ct2["suppress_ids"].clone(),
    });
    if multilingual {
        // the language tokens sit between <|startoftranscript|> and <|translate|>
        let langs: serde_json::Map<String, Value> = ids
            .iter()
            .filter(|(_, &i)| sot < i && i < translate)
            .map(|(c, &i)| (c.clone(), json!(i)))
            .collect();
        if langs.is_empty() {
            return Err("tokenizer.json has no language tokens".into());
        }
        generation["lang_to_id"] = Value::Object(langs);
        generation["task_to_id"] = json!({"transcribe": transcribe, "translate": translate});
    }
    let preprocessor = json!({
        "chunk_length": 30,
        "feature_extractor_type": "WhisperFeatureExtractor",
        "feature_size": n_mels,
        "hop_length": 160,
        "n_fft": 400,
        "n_samples": 480000,
        "nb_max_frames": 3000,
        "padding_side": "right",
        "padding_value": 0.0,
        "processor_class": "WhisperProcessor",
        "return_attention_mask": false,
        "sampling_rate": 16000,
    });
    Ok(Configs {
        config,
        generation,
        preprocessor,
        dtype,
        d_model,
        vocab,
    })
}
