//! Graphs of ops: nodes with named outlets, a builder, validation, type
//! inference, a topological plan and a CPU runner.

mod builder;
mod nodes;
mod recycle;
mod runner;

pub use builder::GraphBuilder;
pub use nodes::{Graph, Node, OutletId};
#[cfg(feature = "cuda")]
pub(crate) use runner::check_input;
pub use runner::{Runner, StepRunner};
