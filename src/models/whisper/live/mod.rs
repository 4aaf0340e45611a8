//! Live Whisper: the streaming policy ([`WhisperLive`]: a rolling buffer,
//! LocalAgreement, the streaming text decoder, the second pass) and a
//! chunked checkpoint's CTC head run live ([`CtcLive`]); the family-neutral
//! live machinery (ring buffer, inference thread, events) is
//! [`crate::live`], which re-exports what users call.

mod agreement;
mod buffer;
mod ctc;
mod decoding;
mod filter;
mod options;
mod policy;
mod second_pass;
mod stream;

pub use agreement::{word_key, LocalAgreement};
pub use buffer::{cut_point, Cut};
pub use ctc::CtcLive;
pub use options::WhisperLiveOptions;
pub use policy::{Update, WhisperLive};
