//! The model families, each in its own folder with its graphs, weights,
//! options and decoding: [`conformer`] (the shipped streaming CTC
//! conformer), [`whisper`] (Whisper checkpoints, whole-window or chunked,
//! and a chunked checkpoint's CTC head), [`silero`] (Silero VAD's graph);
//! which model a name means, and fetching it ([`fetch`]). The
//! family-neutral API is [`crate::asr`] (and [`crate::live`]).

pub mod conformer;
pub mod fetch;
pub mod silero;
pub mod whisper;

pub use conformer::config::{ConformerConfig, ConformerConfigError};
pub use conformer::package::ModelDir;
pub use fetch::{ModelChoice, DEFAULT_MODEL, SHIPPED_MODEL};
