//! Model builders: graphs written with the builder from a config and weights.

mod config;
pub mod conformer;
pub mod silero;
mod package;

pub use config::ConformerConfig;
pub use package::ModelDir;
