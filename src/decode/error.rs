//! What can go wrong when loading a token list or decoding CTC output.

use thiserror::Error;

/// A token list or decoder input that cannot be used; one line each.
#[derive(Debug, Error)]
pub enum DecodeError {
    /// The token file could not be read.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The token list has no tokens.
    #[error("{path}: the token list is empty")]
    EmptyTokens { path: String },
    /// The token list has no `<blk>` (CTC blank) token.
    #[error("{path}: no blank token (<blk>) in the token list")]
    NoBlank { path: String },
    /// A line of the token list is unusable (empty, duplicate, wrong id).
    #[error("{path}: line {line}: {reason}")]
    BadTokenLine {
        path: String,
        line: usize,
        reason: String,
    },
    /// A token id outside the vocabulary (`frame` when it came from a frame).
    #[error("token id {id} is out of range for a vocabulary of {vocab}{}", at_frame(*frame))]
    TokenOutOfRange {
        id: i64,
        vocab: usize,
        frame: Option<usize>,
    },
    /// Frames must be pushed in increasing order.
    #[error("frame {frame} pushed after frame {last}: frames must increase")]
    FrameOrder { frame: usize, last: usize },
    /// A NaN (or +inf) log-probability.
    #[error("log-prob {value} at frame {frame}, token {token} is not a log-probability")]
    NonFinite {
        value: f32,
        frame: usize,
        token: usize,
    },
    /// Log-prob rows whose size disagrees with frames x vocab, or a row with no finite value.
    #[error("log-probs: {0}")]
    Shape(String),
    /// A language model file that cannot be used (line 0: the file as a whole).
    #[error("{path}: line {line}: {reason}")]
    BadLm {
        path: String,
        line: usize,
        reason: String,
    },
    /// A parameter out of its range (beam width 0, frame duration <= 0, ...).
    #[error("invalid parameter: {0}")]
    Param(String),
}

fn at_frame(frame: Option<usize>) -> String {
    frame.map(|f| format!(" at frame {f}")).unwrap_or_default()
}
