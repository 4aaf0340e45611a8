//! CTC decoding of a character model: from per-frame token scores to text
//! with word timings.
//!
//! - [`Tokens`]: the alphabet from `tokens.txt` (`<blk>` blank, `<sp>` space).
//! - [`GreedyDecoder`]: best path, fed frame by frame (streaming), partial
//!   results at any time.
//! - [`prefix_beam_search`] / [`BeamSearch`]: CTC prefix beam search, over
//!   whole log-prob rows or fed as they stream; sums over alignments, so it
//!   can beat the single best path.
//! - [`WordLm`] / [`LmScorer`]: a word n-gram model (ARPA) the beam search
//!   can weigh prefixes with (shallow fusion).
//! - [`Transcript`] / [`Word`]: text, word start/end seconds and confidence.
//!
//! Conventions (greedy and beam alike):
//! - a token's span is the run of frames in which the (best) alignment emits
//!   it, first frame to last repeat; blank frames belong to no token;
//! - words split at `<sp>` (no empty words); `text` is the words joined by one space;
//! - a word runs from the first frame of its first token to the last frame of
//!   its last token + 1; seconds = `offset_s + frame * frame_duration_s`
//!   ([`FrameTiming`]; the shipped model has [`MODEL_FRAME_S`] = 0.04 s frames);
//! - confidence = `exp(mean log-prob)` over the frames of its tokens' spans
//!   (the geometric mean of their probabilities), in [0, 1].

mod beam;
mod error;
mod greedy;
mod lm;
mod tokens;
mod transcript;

#[cfg(test)]
mod tests;

pub use beam::{prefix_beam_search, prefix_beam_search_lm, BeamSearch, Hypothesis};
pub use error::DecodeError;
pub use greedy::GreedyDecoder;
pub use lm::{LmScorer, LmState, LmWeights, WordLm};
pub use tokens::Tokens;
pub use transcript::{FrameTiming, TokenSpan, Transcript, Word};

/// Output frame length of the shipped `pulsed-en-ctc` model, in seconds.
pub const MODEL_FRAME_S: f64 = 0.04;
