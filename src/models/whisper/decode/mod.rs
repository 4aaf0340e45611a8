//! Whisper decoding above the network, rule for rule as the reference
//! (faster-whisper 1.2.1 on CTranslate2) does it, written only against
//! [`WhisperBackend`] and [`AlignmentSource`]. One default differs: a
//! window is padded with silence, as Whisper was trained
//! ([`WindowPadding`]); `padding: Some(WindowPadding::Zeros)` is the
//! reference's.
//!
//! | file | what |
//! | --- | --- |
//! | `options.rs` | [`DecodeOptions`] with faster-whisper's defaults |
//! | `logits.rs` | suppression, the timestamp rules, log-softmax |
//! | `search.rs`, `greedy.rs`, `beam.rs` | greedy search and sampling, beam search, final scores |
//! | `generate.rs` | one window from a prompt: prompt feed, no-speech probability, search |
//! | `fallback.rs` | temperature fallback, compression ratio |
//! | `prompt.rs` | a window's prompt |
//! | `language.rs` | language detection |
//! | `window.rs`, `segments.rs` | 30 s windows of the features; segments at timestamps, seeking |
//! | `align.rs`, `words.rs` | word timestamps: attention, DTW, punctuation |
//! | `hallucination.rs` | skipping silence around likely hallucinations |
//! | `transcribe.rs`, `generate_segments.rs` | the whole recording: [`transcribe`], window by window |
//! | `many.rs`, `on_window.rs` | several recordings, first windows batched: [`transcribe_many`] |
//! | `batched.rs`, `speech.rs`, `chunks.rs` | the VAD-segmented batched mode: [`transcribe_batched`] |
//! | `stream.rs` | decoding that follows a streamed encoder (AlignAtt): [`StreamDecoder`] |

mod align;
mod batched;
mod beam;
mod chunks;
mod fallback;
mod generate;
mod generate_segments;
mod greedy;
mod hallucination;
mod language;
mod logits;
mod many;
mod on_window;
mod options;
mod prompt;
mod search;
mod segments;
mod speech;
mod stream;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;
mod transcribe;
mod window;
mod words;

pub use batched::{batched_speech, transcribe_batched, transcribe_batched_many, BatchedOptions};
pub use fallback::compression_ratio;
pub use many::{transcribe_many, Recording};
pub use options::{DecodeOptions, InitialPrompt, WindowPadding};
pub use stream::{StreamDecoder, StreamOptions, StreamSpec, DEFAULT_MARGIN};
pub use transcribe::{transcribe, transcribe_features, Segment, TranscriptionInfo, SAMPLE_RATE};
pub(crate) use words::merge_punctuations;
pub use words::Word;

pub(crate) use align::{find_alignment, AlignSpec, WordTiming};
pub(crate) use prompt::prompt_tokens;
pub use transcribe::suppressed_tokens;

use crate::models::whisper::{AlignmentSource, WhisperBackend};

/// A backend that also gives cross-attention (for word timestamps).
pub trait AlignedBackend: WhisperBackend + AlignmentSource {}

impl<T: WhisperBackend + AlignmentSource + ?Sized> AlignedBackend for T {}

/// The network [`transcribe`] runs: any backend, or one with alignment
/// heads' cross-attention when word timestamps are asked for.
pub enum Network<'a> {
    /// Decoding only.
    Plain(&'a mut dyn WhisperBackend),
    /// Decoding and word timestamps.
    Aligned(&'a mut dyn AlignedBackend),
}

impl Network<'_> {
    /// The backend, whichever variant holds it.
    pub fn backend(&mut self) -> &mut dyn WhisperBackend {
        match self {
            Network::Plain(b) => &mut **b,
            Network::Aligned(b) => &mut **b,
        }
    }
}
