//! The streaming ops: what a pulsed graph runs besides the ordinary ops
//! (Delay rings, padding and concatenation at the stream's ends, stream
//! positions, the pulsed forms of attention and the LSTM, chunk trims).
//! The transform that puts them in a graph is `pulsifier.rs` and `rules/`.

mod attention;
mod chunked_attention;
mod concat;
mod copies_attention;
mod delay;
mod frames;
mod lstm;
mod pad;
mod position;
mod reflect;
mod right_copies;
mod trim;
mod unfold;

pub use attention::PulsedLimitedAttention;
pub use chunked_attention::PulsedChunkedAttention;
pub use concat::PulsedSameAxisConcat;
pub use copies_attention::PulsedCopiesAttention;
pub use delay::Delay;
pub use frames::FrameLayout;
pub use lstm::PulsedLstm;
pub use pad::PulsePad;
pub use position::StreamPosition;
pub use reflect::ReflectPulsePad;
pub use right_copies::PulsedRightCopies;
pub use trim::AffineChunkTrim;
pub use unfold::Unfold;
