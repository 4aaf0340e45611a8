//! Batch transcription: many files on parallel workers, with results handed
//! back as each file finishes.
//!
//! - [`expand_inputs`] / [`read_manifest`] turn paths, folders, glob patterns
//!   and manifests into a file list.
//! - [`run`] is the one pool: [`BatchOptions::jobs`] threads, each with a
//!   [`FileWorker`] of its own (a conformer's streaming session or batched
//!   cohort, a Whisper network: see `crate::asr`), take groups of files
//!   ([`Group`]) from one queue, longest first if asked, and answer each file
//!   through its [`Job`]; a panic fails only the files in flight.
//! - [`Control`] stops a run from another thread (Ctrl-C) and exposes
//!   counters for a progress display.
//! - [`open_for_resume`] reopens a JSON-lines output, dropping a line cut
//!   short by a killed run, and says which files it already covers.

mod control;
mod inputs;
mod options;
mod pool;
mod results;
mod resume;
mod worker;

pub use control::Control;
pub use inputs::{expand_inputs, read_manifest, InputError, ManifestLineError, AUDIO_EXTENSIONS};
pub use options::{default_jobs, BatchOptions};
pub use pool::run;
pub use results::{FileResult, Outcome, Summary};
pub use resume::{open_for_resume, read_done, Done};
pub use worker::{FileWorker, Group, Job};
