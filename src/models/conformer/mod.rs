//! The streaming conformer-CTC family (the shipped `pulsed-en-ctc`): its
//! config and model folder, the encoder graph, the [`Recognizer`] that
//! streams it in pulses (one stream, or many side by side), its file-pool
//! worker and cohorts, and its live engine. The family-neutral API
//! ([`crate::asr`], [`crate::live`]) re-exports what users call.

mod cohort;
pub(crate) mod config;
mod graph;
pub(crate) mod live;
pub(crate) mod multi_stream;
pub(crate) mod package;
pub(crate) mod recognizer;
pub(crate) mod stream;
pub(crate) mod worker;

pub use graph::{build, build_batched, Head, Taps};

use config::ConformerConfig;
use multi_stream::MultiStreamTranscriber;
use recognizer::{Decoding, Mode, Recognizer};
use stream::StreamTranscriber;
