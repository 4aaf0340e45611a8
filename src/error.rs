//! The crate's error type: every failure names what it is about.

use std::path::PathBuf;

use thiserror::Error;

use crate::ops::OpError;

/// Anything that can go wrong in `pulsed`.
#[derive(Debug, Error)]
pub enum Error {
    #[error("node `{node}` ({op}): {source}")]
    Node {
        node: String,
        op: &'static str,
        #[source]
        source: OpError,
    },
    #[error("graph: {0}")]
    Graph(String),
    #[error("input `{name}`: {reason}")]
    Input { name: String, reason: String },
    #[error("weight `{name}` is missing from {file}")]
    MissingWeight { name: String, file: String },
    #[error("weight `{name}`: expected shape {expected:?}, found {found:?}")]
    WeightShape {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("weight `{name}`: dtype {found} cannot be used (expected {expected})")]
    WeightDType {
        name: String,
        expected: String,
        found: String,
    },
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    /// A conformer `config.json` whose sizes the graph cannot be built from.
    #[error("{path}: {source}")]
    ModelConfig {
        path: PathBuf,
        #[source]
        source: crate::models::ConformerConfigError,
    },
    #[error(transparent)]
    Op(#[from] OpError),
    #[error(transparent)]
    Session(#[from] crate::pulse::SessionError),
    #[error(transparent)]
    MultiStream(#[from] crate::pulse::MultiStreamError),
    #[error(transparent)]
    Decode(#[from] crate::decode::DecodeError),
    #[error(transparent)]
    Audio(#[from] crate::audio::AudioError),
    /// A resampler of a stream that is not a file (the microphone's).
    #[error(transparent)]
    Resample(#[from] crate::audio::ResampleError),
    #[error(transparent)]
    Whisper(#[from] crate::models::whisper::WhisperError),
    #[error(transparent)]
    WhisperLoad(#[from] crate::models::whisper::LoadError),
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error("{0}")]
    Other(String),
}

impl Error {
    pub(crate) fn node(node: &str, op: &'static str, source: OpError) -> Error {
        Error::Node {
            node: node.to_string(),
            op,
            source,
        }
    }
}

/// Result with the crate's error.
pub type Result<T> = std::result::Result<T, Error>;
