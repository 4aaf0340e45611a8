//! Pretrained Whisper checkpoints (Hugging Face folders) run by our engine:
//! the log-mel front end, the encoder over 30 s windows and the text decoder
//! with its key/value cache are engine graphs; decoding follows the
//! reference (openai/whisper, faster-whisper) rule for rule.
//!
//! The family's job and pool worker (`job`, `worker`, `speech_gate`), a
//! chunked checkpoint's CTC head (`ctc`, `ctc_job`) and the live policies
//! (`live`) are here too; [`crate::asr`] and [`crate::live`] re-export what
//! users call.

mod backend;
#[cfg(feature = "cuda")]
pub mod compare;
mod config;
pub mod copy_layout;
mod cpu;
pub mod ctc;
pub(crate) mod ctc_job;
pub mod decode;
pub mod encoder_stream;
mod error;
pub mod features;
pub mod folder;
pub mod generation;
#[cfg(feature = "cuda")]
mod gpu;
pub mod graphs;
pub(crate) mod job;
mod layers;
pub(crate) mod live;
mod net;
mod net_sequences;
mod projection;
pub mod shared;
mod speech_gate;
pub mod streaming;
pub mod tokenizer;
pub(crate) mod worker;

pub use backend::{AlignmentSource, Chosen, WhisperBackend};
pub use config::{EncoderContext, WhisperConfig};
pub use cpu::{CpuRunners, CpuWhisper, WhisperModel, INT8_GROUP};
pub use error::{WhisperConfigError, WhisperError};
pub use folder::LoadError;
pub use generation::GenerationConfig;
#[cfg(feature = "cuda")]
pub use gpu::{GpuRunners, GpuWhisper, NodeTime};
pub use net::{network, CrossFrom, NetRunners, WhisperNet};
pub use tokenizer::{SpecialTokens, Task, WhisperTokenizer};
