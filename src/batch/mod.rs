//! Batch transcription: many files on parallel CPU workers, each streamed in
//! bounded memory, with results handed back as each file finishes.
//!
//! - [`expand_inputs`] / [`read_manifest`] turn paths, folders, glob patterns
//!   and manifests into a file list.
//! - [`run`] transcribes the list on [`BatchOptions::jobs`] threads sharing one
//!   [`crate::asr::Recognizer`] (its model is read-only); each worker keeps one
//!   [`crate::asr::StreamTranscriber`] and feeds it a [`crate::audio::WavStream`]
//!   chunk by chunk, so a one-hour file costs no more memory than a short one.
//! - With [`BatchOptions::streams`] > 1 each worker runs its files in
//!   cohorts through one batched session ([`crate::asr::MultiStreamTranscriber`]):
//!   one chunk step, one CUDA graph on a GPU, for the whole cohort.
//! - [`Control`] stops a run from another thread (Ctrl-C) and exposes
//!   counters for a progress display.
//! - [`run_whole`] runs models that take a whole recording (Whisper) on
//!   workers of their own ([`FileWorker`]), with the same results.
//! - [`open_for_resume`] reopens a JSON-lines output, dropping a line cut
//!   short by a killed run, and says which files it already covers.

mod cohort;
mod inputs;
mod pool;
mod resume;
mod whole;

pub use inputs::{expand_inputs, read_manifest, InputError, ManifestLineError, AUDIO_EXTENSIONS};
pub use pool::{
    default_jobs, default_streams, run, BatchOptions, Control, FileResult, Outcome, Summary,
    OPEN_FILES,
};
pub use resume::{open_for_resume, read_done, Done};
pub use whole::{one_by_one, run_whole, FileWorker, Group};
