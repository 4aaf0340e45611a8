//! What every request shares: the model, the options, the counters and
//! the admission slots.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::metrics::Metrics;
use super::ServeOptions;
use crate::asr::Transcriber;

/// Shared by every handler.
pub struct AppState {
    /// Opened once; every request and stream runs on it.
    pub transcriber: Arc<Transcriber>,
    pub options: ServeOptions,
    pub metrics: Metrics,
    /// Live sessions (`--max-streams`).
    streams: Arc<Semaphore>,
    /// Transcription requests running at once (`--max-requests`).
    requests: Arc<Semaphore>,
    /// Turns true when the server stops: live sessions finish their lines.
    pub shutdown: watch::Receiver<bool>,
}

/// A live session's slot: frees itself and updates the gauge when dropped.
pub struct StreamSlot {
    state: Arc<AppState>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.state
            .metrics
            .streams_active
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl AppState {
    pub fn new(
        transcriber: Arc<Transcriber>,
        options: ServeOptions,
        shutdown: watch::Receiver<bool>,
    ) -> AppState {
        AppState {
            transcriber,
            streams: Arc::new(Semaphore::new(options.max_streams)),
            requests: Arc::new(Semaphore::new(options.max_requests)),
            options,
            metrics: Metrics::default(),
            shutdown,
        }
    }

    /// A live session's slot, or `None` (counted as rejected) when all
    /// `--max-streams` are taken: never waits.
    pub fn admit_stream(self: &Arc<Self>) -> Option<StreamSlot> {
        let m = &self.metrics;
        match self.streams.clone().try_acquire_owned() {
            Ok(permit) => {
                m.streams_total.fetch_add(1, Ordering::Relaxed);
                m.streams_active.fetch_add(1, Ordering::Relaxed);
                Some(StreamSlot {
                    state: self.clone(),
                    _permit: permit,
                })
            }
            Err(_) => {
                m.streams_rejected.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// A transcription request's slot, or `None` (counted as rejected):
    /// never waits.
    pub fn admit_request(&self) -> Option<OwnedSemaphorePermit> {
        let m = &self.metrics;
        match self.requests.clone().try_acquire_owned() {
            Ok(permit) => {
                m.requests_total.fetch_add(1, Ordering::Relaxed);
                Some(permit)
            }
            Err(_) => {
                m.requests_rejected.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Whether `name` is the loaded model (`default` always is).
    pub fn is_model(&self, name: &str) -> bool {
        name == "default" || name == self.options.model_name
    }

    /// Refuses a language the loaded model is not set to transcribe
    /// (`--language`); with none set (a multilingual model that detects),
    /// a request's language is accepted and the model detects anyway.
    pub fn check_language(&self, asked: Option<&str>) -> Result<(), String> {
        match (asked.filter(|l| !l.is_empty()), &self.options.language) {
            (Some(a), Some(l)) if !a.eq_ignore_ascii_case(l) => Err(format!(
                "language `{a}` is not served: this server transcribes `{l}` \
                 (set with --language when it starts)"
            )),
            _ => Ok(()),
        }
    }
}
