//! What a read does when a file ends before its header says it should.
//!
//! The choice belongs to the front end (the CLI's `--strict`) and holds for
//! the whole process: files are opened deep inside each model family's
//! workers, and one switch read at open time keeps those workers unaware of it.

use std::sync::atomic::{AtomicBool, Ordering};

/// How a file that ends early is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truncation {
    /// An [`super::AudioError::Truncated`] error (the library's default).
    Refuse,
    /// The audio up to where the file ends, and one warning line on stderr.
    Warn,
}

static WARN: AtomicBool = AtomicBool::new(false);

/// Sets how files opened from now on treat an early end.
pub fn set_truncation(t: Truncation) {
    WARN.store(t == Truncation::Warn, Ordering::Relaxed);
}

/// The process's current choice ([`Truncation::Refuse`] unless set).
pub fn truncation() -> Truncation {
    if WARN.load(Ordering::Relaxed) {
        Truncation::Warn
    } else {
        Truncation::Refuse
    }
}

/// The warning a [`Truncation::Warn`] read prints, once per file.
pub(crate) fn warn_truncated(path: &str, detail: &str, frames: u64, rate: u32) {
    eprintln!(
        "pulsed: warning: {path}: truncated: {detail}; decoding the {:.2} s that are there",
        frames as f64 / rate.max(1) as f64
    );
}
