//! Pulsification: pulsed facts, the pulsifier (whole-utterance graph over a
//! streaming axis `S` -> graph over a fixed pulse), the pulse-only ops and
//! the streaming session.

mod attention;
mod batched;
mod concat;
mod delay;
mod fact;
mod frames;
mod lstm;
mod model;
mod pad;
mod position;
pub mod pulsifier;
mod reflect;
mod rules;
mod session;
mod trim;
mod unfold;
pub mod verify;

pub use attention::PulsedLimitedAttention;
pub use batched::{BatchChunk, BatchError, BatchedSession};
pub use concat::PulsedSameAxisConcat;
pub use delay::Delay;
pub use fact::{PulsedFact, StreamInfo};
pub use frames::FrameLayout;
pub use lstm::PulsedLstm;
pub use model::PulsedModel;
pub use pad::PulsePad;
pub use position::StreamPosition;
pub use pulsifier::pulsify;
pub use reflect::ReflectPulsePad;
pub use session::{Chunk, SessionError, StreamingSession};
pub use trim::AffineChunkTrim;
pub use unfold::Unfold;
