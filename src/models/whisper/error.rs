//! What can go wrong reading a Whisper checkpoint's config or text side or
//! decoding with it: each variant names the file, field, token or option at
//! fault.

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
    #[error(
        "this backend encodes whole windows only: it cannot take a streamed \
         encoder's frames"
    )]
    NoFrameInput,
}

/// Why the text of a `config.json` cannot give the network's sizes; each
/// variant names the field at fault ([`super::LoadError::Config`] adds the
/// file).
#[derive(Debug, Error)]
pub enum WhisperConfigError {
    /// Not JSON, or a field missing or of the wrong type: serde's message
    /// names the field and the position.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A size of zero or one too large to allocate for.
    #[error("`{field}` must be between 1 and 2^20")]
    Size { field: &'static str, got: usize },
    /// Attention heads that do not split `d_model` evenly.
    #[error("`d_model` {d_model} is not a multiple of `{field}` {heads}")]
    Heads {
        field: &'static str,
        d_model: usize,
        heads: usize,
    },
    #[error("activation `{got}` is not supported (only `gelu`)")]
    Activation { got: String },
    #[error("`scale_embedding: true` is not supported")]
    ScaleEmbedding,
    /// A streaming chunk that is empty or longer than the encoder's window.
    #[error("`pulsed_encoder_context.chunk` must be between 1 and {max} frames, got {got}")]
    Chunk { max: usize, got: usize },
    /// Two ways of giving every layer a look-ahead at once.
    #[error(
        "`pulsed_encoder_context` sets both `right_all_layers` and `right_copies`: choose one"
    )]
    LookAhead,
    /// Copies of more frames than the next chunk holds.
    #[error("`pulsed_encoder_context.right` {right} must be at most its chunk {chunk} with `right_copies`")]
    Copies { chunk: usize, right: usize },
}
