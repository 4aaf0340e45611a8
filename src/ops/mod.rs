//! Tensors, dtypes, symbolic dims, typed facts, the `Op` trait and every op's
//! CPU evaluation and `output_facts`.

pub mod broadcast;
pub mod checks;
mod elementwise;
mod dim;
mod dtype;
mod error;
mod fact;
mod op;
mod source;
mod tensor;

pub use dim::Dim;
pub use dtype::{DType, Element};
pub use error::{OpError, OpResult};
pub use fact::TypedFact;
pub use op::{eval_op, outputs_len, Op, OpState, Scratch};
pub use source::{Const, Source};
pub use tensor::{Storage, StorageElement, Tensor};
pub use elementwise::{contig, Binary, Unary};
