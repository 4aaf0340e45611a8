//! Model builders: graphs written with the builder from a config and weights;
//! which model a name means, and fetching it ([`fetch`]).

mod config;
pub mod conformer;
pub mod fetch;
mod package;
pub mod silero;
pub mod whisper;

pub use config::{ConformerConfig, ConformerConfigError};
pub use fetch::{ModelChoice, DEFAULT_MODEL, SHIPPED_MODEL};
pub use package::ModelDir;
