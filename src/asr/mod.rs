//! Speech recognition with a model directory: audio in, transcript out,
//! streamed in pulses (the default) or over the whole utterance.

mod batched;
pub mod metrics;
mod recognizer;
mod stream;

pub use batched::BatchTranscriber;
pub use recognizer::{Decoding, Lm, Mode, Recognizer, RecognizerOptions};
pub use stream::StreamTranscriber;
