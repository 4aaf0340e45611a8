//! Model builders: graphs written with the builder from a config and weights.

mod config;
pub mod conformer;
mod package;
pub mod silero;

pub use config::{ConformerConfig, ConformerConfigError};
pub use package::ModelDir;
