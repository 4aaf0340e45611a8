//! What a run hands back: each file's [`FileResult`], then a [`Summary`].

use std::path::PathBuf;
use std::time::Instant;

use crate::decode::Transcript;

/// What became of one file.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Transcribed; `duration_s` is the length of the file's audio;
    /// `extra` holds what a model gives beyond the transcript (Whisper's
    /// segments and language), written as JSON-lines fields.
    Done {
        transcript: Transcript,
        duration_s: f64,
        extra: serde_json::Map<String, serde_json::Value>,
    },
    /// Not transcribed, with a one-line reason that names the file.
    Failed(String),
    /// Dropped half-way because the run was stopped.
    Cancelled,
}

/// One file's result, as a worker finished it.
#[derive(Debug, Clone)]
pub struct FileResult {
    /// Position of the file in the list given to [`super::run`].
    pub index: usize,
    pub path: PathBuf,
    pub outcome: Outcome,
    /// Seconds of audio this file got through the model.
    pub audio_s_processed: f64,
    /// Wall-clock seconds the worker spent on it (on the group it was in).
    pub elapsed_s: f64,
}

/// Counts of a finished run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub transcribed: usize,
    pub failed: usize,
    /// Dropped in flight by a stop.
    pub cancelled: usize,
    /// Never started because of a stop.
    pub not_started: usize,
    /// Seconds of audio in the transcribed files.
    pub audio_s: f64,
    /// Wall-clock seconds of the whole run.
    pub wall_s: f64,
    /// Workers of a batched run ([`super::BatchOptions::streams`] > 1) that
    /// could not build their batched session (out of GPU memory, say) and
    /// ran one stream at a time instead ([`super::FileWorker::fallback`]);
    /// 0 when every worker ran its cohorts.
    pub single_stream_workers: usize,
    /// Why the first of them could not.
    pub single_stream_reason: Option<String>,
}

impl Summary {
    /// Counts one result.
    pub(super) fn count(&mut self, r: &FileResult) {
        match &r.outcome {
            Outcome::Done { duration_s, .. } => {
                self.transcribed += 1;
                self.audio_s += duration_s;
            }
            Outcome::Failed(_) => self.failed += 1,
            Outcome::Cancelled => self.cancelled += 1,
        }
    }

    /// Once every worker is done: the files never started, the wall time,
    /// the workers that fell back.
    pub(super) fn close(&mut self, files: usize, started: Instant, fell_back: Vec<String>) {
        self.not_started = files - (self.transcribed + self.failed + self.cancelled);
        self.wall_s = started.elapsed().as_secs_f64();
        self.single_stream_workers = fell_back.len();
        self.single_stream_reason = fell_back.into_iter().next();
    }
}
