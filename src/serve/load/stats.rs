//! What the load clients saw, gathered into one report: stream counts,
//! failures by reason, error events by code and word-latency quantiles.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::misbehave::Role;

/// How one stream ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every line came back and the server refused nothing.
    Completed,
    /// The reason: `connect: ...`, `error: CODE`, `timeout`, `disconnected`.
    Failed(String),
    /// `--duration` ran out first (or before the stream could start).
    Unfinished,
}

/// One word's latencies, in seconds from its end in the audio (as the
/// client paced it) to its arrival.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WordLatency {
    /// To the first delta holding the word (the `completed` event where no
    /// delta held it).
    pub first_shown_s: f64,
    /// To the `completed` event holding the word.
    pub committed_s: f64,
}

/// One client's stream.
#[derive(Debug, Clone)]
pub struct StreamResult {
    /// The recording it replayed.
    pub file: String,
    /// Whether it began connecting before `--duration` ran out.
    pub started: bool,
    pub outcome: Outcome,
    /// Seconds of audio appended.
    pub audio_s: f64,
    /// The non-empty `completed` transcripts, in order.
    pub lines: Vec<String>,
    pub words: Vec<WordLatency>,
    /// Words whose `completed` event had no word times: their end is taken
    /// as the end of their utterance's audio.
    pub words_without_times: usize,
    /// Words no delta held before `completed` (revised, or never partial).
    pub words_first_in_completed: usize,
    /// `error` events' codes, in order.
    pub errors: Vec<String>,
    /// What the client did ([`Role::Normal`] unless it misbehaved).
    pub role: Role,
}

impl StreamResult {
    pub fn new(file: &str) -> StreamResult {
        StreamResult {
            file: file.to_string(),
            started: false,
            outcome: Outcome::Unfinished,
            audio_s: 0.0,
            lines: Vec::new(),
            words: Vec::new(),
            words_without_times: 0,
            words_first_in_completed: 0,
            errors: Vec::new(),
            role: Role::Normal,
        }
    }
}

/// Median, p90, p99 and max of a set of latencies, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quantiles {
    pub count: usize,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Quantiles {
    /// Nearest-rank quantiles (`None` for no values).
    pub fn of(mut values: Vec<f64>) -> Option<Quantiles> {
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let rank = |p: f64| values[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        (n > 0).then(|| Quantiles {
            count: n,
            median: rank(0.5),
            p90: rank(0.9),
            p99: rank(0.99),
            max: values[n - 1],
        })
    }
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub url: String,
    pub clients: usize,
    pub wall_seconds: f64,
    pub audio_seconds_sent: f64,
    pub streams_started: usize,
    pub streams_completed: usize,
    pub streams_failed: usize,
    pub streams_unfinished: usize,
    /// Failed streams by reason.
    pub failures: BTreeMap<String, usize>,
    /// `error` events by code (over all streams).
    pub error_events: BTreeMap<String, usize>,
    pub words: usize,
    pub words_without_times: usize,
    pub words_first_in_completed: usize,
    pub first_shown: Option<Quantiles>,
    pub committed: Option<Quantiles>,
    /// Misbehaving clients by role and how their streams ended (`stall:
    /// stalled`), left out of every figure above.
    pub misbehaving: BTreeMap<String, usize>,
    /// Every stream, in client order (not in the JSON: thousands of them).
    #[serde(skip)]
    pub streams: Vec<StreamResult>,
}

impl LoadReport {
    pub fn new(url: &str, wall_seconds: f64, streams: Vec<StreamResult>) -> LoadReport {
        let mut failures = BTreeMap::new();
        let mut error_events = BTreeMap::new();
        let mut misbehaving = BTreeMap::new();
        let (mut shown, mut committed) = (Vec::new(), Vec::new());
        for s in streams.iter().filter(|s| !s.role.is_normal()) {
            let ended = match &s.outcome {
                Outcome::Completed => "completed",
                Outcome::Failed(why) => why.as_str(),
                Outcome::Unfinished => "unfinished",
            };
            *misbehaving
                .entry(format!("{}: {ended}", s.role))
                .or_insert(0) += 1;
        }
        let normal: Vec<&StreamResult> = streams.iter().filter(|s| s.role.is_normal()).collect();
        for s in &normal {
            if let Outcome::Failed(why) = &s.outcome {
                *failures.entry(why.clone()).or_insert(0) += 1;
            }
            for code in &s.errors {
                *error_events.entry(code.clone()).or_insert(0) += 1;
            }
            shown.extend(s.words.iter().map(|w| w.first_shown_s));
            committed.extend(s.words.iter().map(|w| w.committed_s));
        }
        let count = |f: fn(&StreamResult) -> bool| normal.iter().filter(|s| f(s)).count();
        LoadReport {
            url: url.to_string(),
            clients: normal.len(),
            wall_seconds,
            audio_seconds_sent: normal.iter().map(|s| s.audio_s).sum(),
            streams_started: count(|s| s.started),
            streams_completed: count(|s| s.outcome == Outcome::Completed),
            streams_failed: count(|s| matches!(s.outcome, Outcome::Failed(_))),
            streams_unfinished: count(|s| s.outcome == Outcome::Unfinished),
            failures,
            error_events,
            words: committed.len(),
            words_without_times: normal.iter().map(|s| s.words_without_times).sum(),
            words_first_in_completed: normal.iter().map(|s| s.words_first_in_completed).sum(),
            first_shown: Quantiles::of(shown),
            committed: Quantiles::of(committed),
            misbehaving,
            streams,
        }
    }

    /// The summary people read.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} clients against {} for {:.1} s; {:.1} s of audio sent",
            self.clients, self.url, self.wall_seconds, self.audio_seconds_sent
        );
        let _ = writeln!(
            out,
            "streams: {} started, {} completed, {} failed, {} unfinished",
            self.streams_started,
            self.streams_completed,
            self.streams_failed,
            self.streams_unfinished
        );
        for (why, n) in &self.failures {
            let _ = writeln!(out, "  failed: {why}: {n}");
        }
        for (code, n) in &self.error_events {
            let _ = writeln!(out, "  error events: {code}: {n}");
        }
        let _ = write!(out, "words: {}", self.words);
        if self.words_without_times > 0 {
            let _ = write!(
                out,
                " ({} without word times from the server: timed from their utterance's end)",
                self.words_without_times
            );
        }
        let _ = writeln!(out);
        for (name, q) in [
            ("first shown", &self.first_shown),
            ("committed  ", &self.committed),
        ] {
            let _ = match q {
                Some(q) => writeln!(
                    out,
                    "word end -> {name}: median {:.3} s, p90 {:.3} s, p99 {:.3} s, max {:.3} s",
                    q.median, q.p90, q.p99, q.max
                ),
                None => writeln!(out, "word end -> {name}: no words"),
            };
        }
        if !self.misbehaving.is_empty() {
            let n: usize = self.misbehaving.values().sum();
            let _ = writeln!(out, "misbehaving clients (not in the figures above): {n}");
            for (how, n) in &self.misbehaving {
                let _ = writeln!(out, "  {how}: {n}");
            }
        }
        out
    }

    /// The summary as one JSON object (no per-stream details).
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        assert_eq!(Quantiles::of(vec![]), None);
        let q = Quantiles::of((1..=100).rev().map(f64::from).collect()).unwrap();
        assert_eq!(
            (q.count, q.median, q.p90, q.p99, q.max),
            (100, 50.0, 90.0, 99.0, 100.0)
        );
        let q = Quantiles::of(vec![0.25]).unwrap();
        assert_eq!((q.median, q.p99, q.max), (0.25, 0.25, 0.25));
    }

    #[test]
    fn report_counts_outcomes_and_codes() {
        let mut ok = StreamResult::new("a.wav");
        ok.started = true;
        ok.outcome = Outcome::Completed;
        ok.audio_s = 2.0;
        ok.words.push(WordLatency {
            first_shown_s: 0.3,
            committed_s: 0.9,
        });
        let mut refused = StreamResult::new("a.wav");
        refused.started = true;
        refused.outcome = Outcome::Failed("error: max_streams_reached".into());
        refused.errors.push("max_streams_reached".into());
        let late = StreamResult::new("b.wav");
        let r = LoadReport::new("ws://x", 1.0, vec![ok, refused, late]);
        assert_eq!(
            (
                r.streams_started,
                r.streams_completed,
                r.streams_failed,
                r.streams_unfinished
            ),
            (2, 1, 1, 1)
        );
        assert_eq!(r.error_events["max_streams_reached"], 1);
        assert_eq!(r.failures["error: max_streams_reached"], 1);
        assert_eq!(r.committed.unwrap().max, 0.9);
        assert!(r.text().contains("1 completed, 1 failed, 1 unfinished"));
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["first_shown"]["median"], 0.3);
        assert_eq!(v["audio_seconds_sent"], 2.0);
    }
}
