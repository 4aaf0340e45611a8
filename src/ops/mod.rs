//! Tensors, dtypes, symbolic dims, typed facts, the `Op` trait and every op's
//! CPU evaluation and `output_facts`.

pub mod broadcast;
pub mod checks;
mod elementwise;

// Op families, one file each.
pub mod attention;
pub mod cast;
pub mod chunked_attention;
pub mod concat;
pub mod conv;
pub mod copies_attention;
pub mod ctc_head;
mod dim;
mod dtype;
mod error;
mod fact;
pub mod gather;
pub mod kv_cache;
pub mod limited_attention;
pub mod lstm;
pub mod matmul;
pub mod mel;
pub mod norm;
mod op;
pub mod pad;
pub mod range;
pub mod reduce;
pub mod right_copies;
pub mod select;
pub mod shape;
pub mod softmax;
mod source;
pub mod stft;
mod tensor;
pub mod top_tokens;
pub mod vmath;

pub use dim::Dim;
pub use dtype::{DType, Element};
pub use elementwise::{broadcast_stream_axis, contig, Binary, Unary};
pub use error::{OpError, OpResult};
pub use fact::TypedFact;
pub use op::{eval_op, outputs_len, Op, OpState, Scratch};
pub use source::{Const, Source};
pub use tensor::{Storage, StorageElement, Tensor};
