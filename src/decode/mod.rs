//! CTC decoding of a character model: from per-frame token scores to text
//! with word timings.
//!
//! - [`Tokens`]: the alphabet from `tokens.txt` (`<blk>` blank, `<sp>` space).
//! - [`GreedyDecoder`]: best path, fed frame by frame (streaming), partial
//!   results at any time.
//! - [`prefix_beam_search`]: CTC prefix beam search over whole log-prob rows;
//!   sums over alignments, so it can beat the single best path.
//! - [`Transcript`] / [`Word`]: text, word start/end seconds and confidence;
//!   the conventions are documented in [`transcript`](self::Transcript).

mod beam;
mod error;
mod greedy;
mod tokens;
mod transcript;

#[cfg(test)]
mod tests;

pub use beam::{prefix_beam_search, Hypothesis};
pub use error::DecodeError;
pub use greedy::GreedyDecoder;
pub use tokens::Tokens;
pub use transcript::{FrameTiming, TokenSpan, Transcript, Word};

/// Output frame length of the shipped `pulsed-en-ctc` model, in seconds.
pub const MODEL_FRAME_S: f64 = 0.04;
