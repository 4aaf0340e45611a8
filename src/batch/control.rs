//! [`Control`]: what a run shares with whoever watches or stops it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Shared between a run and whoever watches or stops it (a Ctrl-C handler, a
/// progress bar); every method may be called from any thread.
#[derive(Debug, Default)]
pub struct Control {
    stop: AtomicBool,
    /// In microseconds, so that it adds up exactly whatever the model's rate.
    audio_us: AtomicU64,
    files_finished: AtomicU64,
}

impl Control {
    /// A fresh control: not stopped, nothing counted.
    pub fn new() -> Control {
        Control::default()
    }

    /// Asks the workers to stop: no new file starts, files in flight are
    /// dropped at their next chunk (reported as [`super::Outcome::Cancelled`]).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Whether [`Control::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Seconds of audio the workers have got through so far, all together.
    pub fn audio_s_processed(&self) -> f64 {
        self.audio_us.load(Ordering::Relaxed) as f64 / 1e6
    }

    /// Files finished so far (transcribed or failed).
    pub fn files_finished(&self) -> u64 {
        self.files_finished.load(Ordering::Relaxed)
    }

    pub(super) fn count_audio_us(&self, us: u64) {
        self.audio_us.fetch_add(us, Ordering::Relaxed);
    }

    pub(super) fn count_finished(&self) {
        self.files_finished.fetch_add(1, Ordering::Relaxed);
    }
}
