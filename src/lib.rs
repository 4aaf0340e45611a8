//! `pulsed`: streaming ("pulsed") speech and audio inference.
//!
//! An encoder written over a whole utterance is a [`graph::Graph`] of
//! [`ops::Op`]s over tensors whose streaming axis has the symbolic size `S`.
//! The pulsifier (`pulse`) turns it into a graph over fixed-size chunks that
//! gives, chunk by chunk, the same numbers.
//!
//! Layers, bottom up: [`ops`] (tensors, dims, facts, ops), [`graph`] (nodes,
//! builder, type inference, CPU runner), [`weights`] (safetensors).

pub mod asr;
pub mod audio;
pub mod batch;
pub mod decode;
pub mod engine;
pub mod error;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod graph;
pub mod live;
pub mod models;
pub mod ops;
pub mod output;
pub mod profile;
pub mod pulse;
#[cfg(feature = "serve")]
pub mod serve;
pub mod vad;
pub mod weights;

pub use error::{Error, Result};

/// The examples of `docs/api.md`, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../docs/api.md")]
pub struct ApiDocExamples;
