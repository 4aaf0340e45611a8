//! Speech recognition with a model directory: audio in, transcript out,
//! streamed in pulses (the default) or over the whole utterance.

pub mod metrics;
mod multi_stream;
pub mod partial;
mod recognizer;
mod stream;

pub use multi_stream::MultiStreamTranscriber;
pub use recognizer::{Decoding, Lm, Mode, Recognizer, RecognizerOptions};
pub use stream::StreamTranscriber;
