//! Pulsification: pulsed facts, the pulsifier (whole-utterance graph over a
//! streaming axis `S` -> graph over a fixed pulse) and its rules (`rules/`),
//! the streaming ops (`ops/`) and the streaming sessions.

mod fact;
mod model;
mod multi_stream;
mod ops;
pub mod pulsifier;
mod rules;
mod session;
pub mod verify;

pub use fact::{PulsedFact, StreamInfo};
pub use model::PulsedModel;
pub use multi_stream::{MultiStreamError, MultiStreamSession, StreamChunk};
pub use ops::{
    AffineChunkTrim, Delay, FrameLayout, PulsePad, PulsedChunkedAttention, PulsedCopiesAttention,
    PulsedLimitedAttention, PulsedLstm, PulsedRightCopies, PulsedSameAxisConcat, ReflectPulsePad,
    StreamPosition, Unfold,
};
pub use pulsifier::pulsify;
pub use session::{Chunk, SessionError, StreamingSession};
