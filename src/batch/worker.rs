//! What the pool asks of a model: a [`FileWorker`], made once per thread,
//! is handed a [`Job`] (a group of files) at a time and answers each file
//! through it as that file finishes.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

use super::{Control, FileResult, Outcome};

/// One worker's model: a conformer's streaming (or batched) session, a
/// Whisper network; made on the thread that uses it, so it need not be
/// `Send`.
pub trait FileWorker {
    /// How many files, and how many bytes of them, the worker takes at once.
    fn group(&self) -> Group {
        Group::ONE
    }

    /// Transcribes `job`'s files, answering each with [`Job::finish`] and
    /// counting its audio with [`Job::progress`] as it goes. Files left
    /// unanswered are cancelled when the run was stopped (else failed: a
    /// worker answers every file); an error is theirs, and the pool then
    /// drops this worker (its state is unknown) and makes a fresh one for
    /// the next group, as after a panic.
    fn transcribe(&mut self, job: &mut Job<'_>) -> crate::Result<()>;

    /// Why this worker runs one stream at a time though a batched session
    /// was asked for (counted in [`super::Summary::single_stream_workers`]).
    fn fallback(&self) -> Option<&str> {
        None
    }
}

/// The most a worker takes at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub files: usize,
    /// Summed file sizes on disk (what the worker holds decoded at once).
    pub bytes: u64,
    /// Take no more than a fair share of what is left, as a power of two
    /// when below `files`: for a worker whose time grows with the files it
    /// decodes together, so that the tail of a run keeps every worker busy
    /// (and a GPU plans a graph for few sizes). A batched session of fixed
    /// width costs as much half empty, so it takes full groups.
    pub fair_share: bool,
}

impl Group {
    /// One file at a time.
    pub const ONE: Group = Group {
        files: 1,
        bytes: u64::MAX,
        fair_share: false,
    };
}

/// The files a worker was handed, and how it answers each.
pub struct Job<'a> {
    files: &'a [PathBuf],
    /// Indices into `files`, in the order the worker got them.
    taken: Vec<usize>,
    answered: Vec<bool>,
    /// Seconds of each file's audio got through.
    done_s: Vec<f64>,
    control: &'a Control,
    tx: &'a mpsc::Sender<FileResult>,
    started: Instant,
}

impl<'a> Job<'a> {
    pub(super) fn new(
        files: &'a [PathBuf],
        taken: Vec<usize>,
        control: &'a Control,
        tx: &'a mpsc::Sender<FileResult>,
    ) -> Job<'a> {
        Job {
            files,
            answered: vec![false; taken.len()],
            done_s: vec![0.0; taken.len()],
            taken,
            control,
            tx,
            started: Instant::now(),
        }
    }

    /// How many files the job holds (at least one).
    pub fn len(&self) -> usize {
        self.taken.len()
    }

    pub fn is_empty(&self) -> bool {
        self.taken.is_empty()
    }

    /// The `k`th file of the job.
    pub fn path(&self, k: usize) -> &'a Path {
        &self.files[self.taken[k]]
    }

    pub fn paths(&self) -> Vec<&'a Path> {
        (0..self.len()).map(|k| self.path(k)).collect()
    }

    /// The run's control: workers stop at their next chunk once stopped.
    pub fn control(&self) -> &'a Control {
        self.control
    }

    /// File `k` has got through `seconds` of its audio (never counted back).
    pub fn progress(&mut self, k: usize, seconds: f64) {
        let us = |s: f64| (s * 1e6).round() as u64;
        let done = &mut self.done_s[k];
        if seconds > *done {
            self.control.count_audio_us(us(seconds) - us(*done));
            *done = seconds;
        }
    }

    /// Answers file `k` (once; a second answer is ignored).
    pub fn finish(&mut self, k: usize, outcome: Outcome) {
        if std::mem::replace(&mut self.answered[k], true) {
            return;
        }
        if !matches!(outcome, Outcome::Cancelled) {
            self.control.count_finished();
        }
        let r = FileResult {
            index: self.taken[k],
            path: self.path(k).to_path_buf(),
            outcome,
            audio_s_processed: self.done_s[k],
            elapsed_s: self.started.elapsed().as_secs_f64(),
        };
        if self.tx.send(r).is_err() {
            // the receiving thread is gone (it panicked): nothing more is wanted
            self.control.stop();
        }
    }

    /// Answers what the worker left: with `error` when it failed (the
    /// message is each file's own), else cancelled by a stop.
    pub(super) fn close(mut self, error: Option<&str>) {
        for k in 0..self.len() {
            if self.answered[k] {
                continue;
            }
            let outcome = match (error, self.control.is_stopped()) {
                (Some(e), _) => Outcome::Failed(format!("{}: {e}", self.path(k).display())),
                (None, true) => Outcome::Cancelled,
                (None, false) => Outcome::Failed(format!("{}: no outcome", self.path(k).display())),
            };
            self.finish(k, outcome);
        }
    }
}
