//! Errors raised by ops: what is wrong with which input, without the node
//! (the graph adds the node's name when it wraps one).

use thiserror::Error;

use super::DType;

/// An op's complaint about its inputs, parameters or state.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum OpError {
    #[error("expected {expected} inputs, got {got}")]
    InputCount { expected: String, got: usize },
    #[error("input {input}: expected rank {expected}, got rank {got}")]
    Rank {
        input: usize,
        expected: String,
        got: usize,
    },
    #[error("input {input}: expected dtype {expected}, got {got}")]
    DType {
        input: usize,
        expected: String,
        got: DType,
    },
    #[error("shape mismatch: {0}")]
    Shape(String),
    #[error("empty tensor: {0}")]
    Empty(String),
    #[error("index out of range: {0}")]
    Index(String),
    #[error("invalid parameter: {0}")]
    Param(String),
    #[error("size not representable: {0}")]
    Dim(String),
    #[error("cannot stream: {0}")]
    NotStreamable(String),
    #[error("{0}")]
    Other(String),
}

pub type OpResult<T> = Result<T, OpError>;

/// Shorthand for `Err(OpError::Shape(format!(..)))`.
#[macro_export]
macro_rules! shape_err {
    ($($t:tt)*) => { Err($crate::ops::OpError::Shape(format!($($t)*))) };
}

/// Shorthand for `Err(OpError::Param(format!(..)))`.
#[macro_export]
macro_rules! param_err {
    ($($t:tt)*) => { Err($crate::ops::OpError::Param(format!($($t)*))) };
}
