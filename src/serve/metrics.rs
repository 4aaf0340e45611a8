//! The server's counters, read by `GET /metrics` in Prometheus' text
//! format (written by hand: a few counters need no client library).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (seconds) of the word-latency histogram's buckets.
const LATENCY_BUCKETS: [f64; 12] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0];

/// Everything `/metrics` reports; shared by every request and stream.
#[derive(Default)]
pub struct Metrics {
    /// Live (WebSocket) sessions open now.
    pub streams_active: AtomicU64,
    /// Live sessions admitted since the start.
    pub streams_total: AtomicU64,
    /// Live sessions refused at admission (over `--max-streams`).
    pub streams_rejected: AtomicU64,
    /// Live sessions ended by a model error.
    pub streams_failed: AtomicU64,
    /// Transcription requests admitted.
    pub requests_total: AtomicU64,
    /// Transcription requests refused at admission (503).
    pub requests_rejected: AtomicU64,
    /// Transcription requests that failed (bad audio: 400, model: 500).
    pub requests_failed: AtomicU64,
    /// Client events refused (bad JSON, bad base64, unknown type, ...).
    pub client_errors: AtomicU64,
    /// Audio transcribed, in microseconds: uploaded files.
    pub file_audio_us: AtomicU64,
    /// Audio transcribed, in microseconds: live streams.
    pub live_audio_us: AtomicU64,
    /// Live samples dropped because a stream's buffer was full.
    pub dropped_samples: AtomicU64,
    /// Word latency: word end (when its audio arrived) to its final line.
    pub word_latency: Histogram,
}

/// A Prometheus histogram over [`LATENCY_BUCKETS`].
#[derive(Default)]
pub struct Histogram {
    /// Observations at most each bucket's bound (not cumulative here).
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    /// Observations above the last bound.
    over: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    /// Counts one observation of `seconds` (negative counts as 0).
    pub fn observe(&self, seconds: f64) {
        let s = seconds.max(0.0);
        match LATENCY_BUCKETS.iter().position(|&b| s <= b) {
            Some(i) => self.buckets[i].fetch_add(1, Ordering::Relaxed),
            None => self.over.fetch_add(1, Ordering::Relaxed),
        };
        self.sum_us
            .fetch_add((s * 1e6).round() as u64, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum::<u64>()
            + self.over.load(Ordering::Relaxed)
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, n) in LATENCY_BUCKETS.iter().zip(&self.buckets) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// Adds `seconds` of audio to a microsecond counter.
pub fn add_seconds(counter: &AtomicU64, seconds: f64) {
    if seconds.is_finite() && seconds > 0.0 {
        counter.fetch_add((seconds * 1e6).round() as u64, Ordering::Relaxed);
    }
}

impl Metrics {
    /// The text `/metrics` serves.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut one = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        one(
            "pulsed_streams_active",
            "gauge",
            "Live transcription sessions open now.",
            get(&self.streams_active).to_string(),
        );
        one(
            "pulsed_streams_total",
            "counter",
            "Live transcription sessions admitted.",
            get(&self.streams_total).to_string(),
        );
        one(
            "pulsed_streams_rejected_total",
            "counter",
            "Live sessions refused (over --max-streams).",
            get(&self.streams_rejected).to_string(),
        );
        one(
            "pulsed_streams_failed_total",
            "counter",
            "Live sessions ended by a model error.",
            get(&self.streams_failed).to_string(),
        );
        one(
            "pulsed_requests_total",
            "counter",
            "Transcription requests admitted.",
            get(&self.requests_total).to_string(),
        );
        one(
            "pulsed_requests_rejected_total",
            "counter",
            "Transcription requests refused with 503 (over --max-requests).",
            get(&self.requests_rejected).to_string(),
        );
        one(
            "pulsed_requests_failed_total",
            "counter",
            "Transcription requests that failed.",
            get(&self.requests_failed).to_string(),
        );
        one(
            "pulsed_client_errors_total",
            "counter",
            "Realtime client events refused (bad JSON, base64, type, ...).",
            get(&self.client_errors).to_string(),
        );
        one(
            "pulsed_dropped_samples_total",
            "counter",
            "Live samples dropped because a stream's buffer was full.",
            get(&self.dropped_samples).to_string(),
        );
        let _ = writeln!(
            out,
            "# HELP pulsed_audio_seconds_total Audio transcribed.\n\
             # TYPE pulsed_audio_seconds_total counter\n\
             pulsed_audio_seconds_total{{source=\"file\"}} {}\n\
             pulsed_audio_seconds_total{{source=\"live\"}} {}",
            get(&self.file_audio_us) as f64 / 1e6,
            get(&self.live_audio_us) as f64 / 1e6
        );
        self.word_latency.render(
            "pulsed_word_latency_seconds",
            "Live words: end of the word's audio arriving to its final line.",
            &mut out,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.word_latency.observe(0.05);
        m.word_latency.observe(0.45);
        m.word_latency.observe(12.0);
        let text = m.render();
        assert!(text.contains("pulsed_word_latency_seconds_bucket{le=\"0.1\"} 1\n"));
        assert!(text.contains("pulsed_word_latency_seconds_bucket{le=\"0.5\"} 2\n"));
        assert!(text.contains("pulsed_word_latency_seconds_bucket{le=\"10\"} 2\n"));
        assert!(text.contains("pulsed_word_latency_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("pulsed_word_latency_seconds_count 3\n"));
        assert!(text.contains("pulsed_word_latency_seconds_sum 12.5\n"));
    }
}
