//! What can go wrong reading a Whisper checkpoint's text side or decoding
//! with it: each variant names the file, field, token or option at fault.

use std::path::PathBuf;

use thiserror::Error;

/// A Whisper tokenizer, configuration or decoding failure.
#[derive(Debug, Error)]
pub enum WhisperError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not valid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{file}: field `{field}` is missing")]
    MissingField { file: PathBuf, field: &'static str },
    #[error("{file}: field `{field}`: {reason}")]
    BadField {
        file: PathBuf,
        field: &'static str,
        reason: String,
    },
    #[error("{path}: cannot load the tokenizer: {reason}")]
    Tokenizer { path: PathBuf, reason: String },
    #[error("the tokenizer has no special token `{token}`")]
    MissingToken { token: String },
    #[error("tokenizer: cannot {action}: {reason}")]
    Codec {
        action: &'static str,
        reason: String,
    },
    #[error("language `{code}` is not one of the model's languages")]
    UnknownLanguage { code: String },
    #[error("option `{option}`: {reason}")]
    Option {
        option: &'static str,
        reason: String,
    },
    #[error(
        "the prompt has {prompt} tokens and max_new_tokens is {max_new_tokens}: \
         together more than the model's {max_length} text positions"
    )]
    PromptTooLong {
        prompt: usize,
        max_new_tokens: usize,
        max_length: usize,
    },
    #[error("backend: {what}: expected {expected} values, got {got}")]
    BackendShape {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("word timestamps need alignment heads, and the model has none")]
    NoAlignmentHeads,
    #[error(
        "the checkpoint's encoder attends to its whole window and cannot stream \
         (its config.json has no `pulsed_encoder_context`)"
    )]
    NotStreaming,
}
