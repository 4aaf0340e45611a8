//! `pulsed load`: many Realtime clients at once against a `pulsed serve`
//! (or any server of OpenAI's Realtime transcription events), each
//! replaying a recording at real-time pace, to measure how many live
//! streams the server holds and how late their words come.
//!
//! All clients are tasks of one tokio runtime, so one process drives
//! thousands of them; [`client`] is one stream, [`stats`] the report.

mod client;
pub mod misbehave;
pub mod stats;

use std::io::{IsTerminal as _, Write as _};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use tokio::time::{sleep_until, Instant};
use tokio_tungstenite::tungstenite::http::{HeaderValue, Uri};

pub use misbehave::Role;
pub use stats::{LoadReport, Outcome, Quantiles, StreamResult, WordLatency};

/// The most clients one run may start: past it a run is more likely to be
/// a typo than a test (each client holds a socket and a file descriptor).
pub const MAX_CLIENTS: usize = 10_000;
/// The rate clients send (a rate `pulsed serve` takes as it is).
pub const RATE: u32 = 16_000;

/// How a run goes; `pulsed load`'s flags.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// `ws://HOST:PORT/v1/realtime`.
    pub url: String,
    pub clients: usize,
    /// Sent as `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// Clients start evenly over this time.
    pub ramp: Duration,
    /// The whole run stops here; streams still running count as unfinished.
    pub duration: Option<Duration>,
    /// Milliseconds of audio per append (20 to 100).
    pub block_ms: u32,
    /// How long a stream waits for its last line after it commits.
    pub final_timeout: Duration,
    /// Lets the URL name a host beyond loopback.
    pub allow_remote: bool,
    /// A progress line on standard error, once a second.
    pub progress: bool,
    /// Clients beside `clients` that misbehave ([`misbehave`]), started
    /// between them and left out of the report's figures.
    pub misbehaving: usize,
}

impl LoadOptions {
    pub fn new(url: impl Into<String>, clients: usize) -> LoadOptions {
        LoadOptions {
            url: url.into(),
            clients,
            api_key: None,
            ramp: Duration::from_secs(1),
            duration: None,
            block_ms: 40,
            final_timeout: Duration::from_secs(30),
            allow_remote: false,
            progress: false,
            misbehaving: 0,
        }
    }

    /// Refuses what cannot run, with a one-line reason.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_CLIENTS).contains(&self.clients) {
            return Err(format!("--clients must be 1 to {MAX_CLIENTS}"));
        }
        if self.clients + self.misbehaving > MAX_CLIENTS {
            return Err(format!(
                "--clients and --misbehaving make more than {MAX_CLIENTS} clients"
            ));
        }
        if !(20..=100).contains(&self.block_ms) {
            return Err("--block-ms must be 20 to 100".into());
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return Err("--duration must be above 0".into());
        }
        if let Some(k) = &self.api_key {
            HeaderValue::from_str(&format!("Bearer {k}"))
                .map_err(|_| "--api-key must be printable ASCII".to_string())?;
        }
        let uri: Uri = self
            .url
            .parse()
            .map_err(|e| format!("--url {}: {e}", self.url))?;
        match uri.scheme_str() {
            Some("ws") => {}
            Some("wss") => {
                return Err("--url: wss:// is not supported (this build has no TLS)".into())
            }
            _ => return Err(format!("--url {}: not a ws:// URL", self.url)),
        }
        let host = uri
            .host()
            .ok_or_else(|| format!("--url {}: no host", self.url))?;
        if !self.allow_remote && !is_loopback(host) {
            return Err(format!(
                "--url names {host}, beyond loopback: a load test can take a server down, \
                 so another host needs --allow-remote"
            ));
        }
        Ok(())
    }
}

/// Whether `host` (as a URL spells it) is this machine.
fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A recording as the clients send it: base64 PCM16 appends.
pub struct Recording {
    pub name: String,
    pub blocks: Vec<String>,
    pub block_samples: usize,
    pub samples: usize,
}

impl Recording {
    /// Reads a WAV (resampled to [`RATE`]); `block_ms` per append.
    pub fn load(path: &std::path::Path, block_ms: u32) -> Result<Recording, String> {
        let audio = crate::audio::load_wav(path, RATE).map_err(|e| e.to_string())?;
        if audio.samples.is_empty() {
            return Err(format!("{}: no audio", path.display()));
        }
        let block_samples = (RATE * block_ms / 1000) as usize;
        let encode = |b: &[f32]| {
            let bytes: Vec<u8> = b
                .iter()
                .flat_map(|s| ((s.clamp(-1.0, 1.0) * 32767.0).round() as i16).to_le_bytes())
                .collect();
            base64::engine::general_purpose::STANDARD.encode(bytes)
        };
        Ok(Recording {
            name: path.display().to_string(),
            blocks: audio.samples.chunks(block_samples).map(encode).collect(),
            block_samples,
            samples: audio.samples.len(),
        })
    }

    /// Samples in the first `blocks` appends.
    pub fn samples_through(&self, blocks: usize) -> usize {
        (blocks * self.block_samples).min(self.samples)
    }

    /// Seconds of audio in the first `blocks` appends.
    pub fn seconds(&self, blocks: usize) -> f64 {
        self.samples_through(blocks) as f64 / RATE as f64
    }
}

/// Live counts for the progress line.
#[derive(Default)]
pub struct Counters {
    pub started: AtomicUsize,
    /// Streams connected and not yet ended.
    pub active: AtomicUsize,
    pub completed: AtomicUsize,
    pub failed: AtomicUsize,
    /// Samples appended, over all streams.
    pub samples: AtomicUsize,
}

/// Runs `options.clients` streams, client `i` replaying `files[i % n]`.
pub async fn run(options: &LoadOptions, files: &[PathBuf]) -> Result<LoadReport, String> {
    options.check()?;
    if files.is_empty() {
        return Err("no audio files given".into());
    }
    let recordings: Vec<Arc<Recording>> = files
        .iter()
        .map(|f| Recording::load(f, options.block_ms).map(Arc::new))
        .collect::<Result<_, _>>()?;
    let counters = Arc::new(Counters::default());
    let begin = Instant::now();
    let deadline = options.duration.map(|d| begin + d);
    let mut tasks = tokio::task::JoinSet::new();
    let (clients, bad) = (options.clients, options.misbehaving);
    for i in 0..clients + bad {
        // the well-behaved first, then the misbehaving
        let (role, k) = match i < clients {
            true => (Role::Normal, i),
            false => (Role::misbehaving(i - clients), i - clients),
        };
        let recording = recordings[k % recordings.len()].clone();
        let start_at = begin
            + options
                .ramp
                .mul_f64(misbehave::start_fraction(role, k, clients, bad));
        let plan = client::Plan {
            url: options.url.clone(),
            api_key: options.api_key.clone(),
            recording,
            final_timeout: options.final_timeout,
            deadline,
            role,
        };
        let counters = counters.clone();
        tasks.spawn(async move {
            if deadline.is_some_and(|d| start_at >= d) {
                return (i, StreamResult::new(&plan.recording.name));
            }
            sleep_until(start_at).await;
            let r = client::run(plan, &counters).await;
            match (&r.outcome, role.is_normal()) {
                (_, false) => 0,
                (Outcome::Completed, _) => counters.completed.fetch_add(1, Ordering::Relaxed),
                (Outcome::Failed(_), _) => counters.failed.fetch_add(1, Ordering::Relaxed),
                (Outcome::Unfinished, _) => 0,
            };
            (i, r)
        });
    }
    let progress = options
        .progress
        .then(|| tokio::spawn(progress_line(counters.clone(), clients + bad, begin)));
    let mut results: Vec<Option<StreamResult>> = vec![None; clients + bad];
    while let Some(joined) = tasks.join_next().await {
        // a client task that panicked leaves its slot empty: counted below
        if let Ok((i, r)) = joined {
            results[i] = Some(r);
        }
    }
    if let Some(p) = progress {
        p.abort();
        if std::io::stderr().is_terminal() {
            eprintln!();
        }
    }
    let streams = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.unwrap_or_else(|| {
                let k = if i < clients { i } else { i - clients };
                let mut lost = StreamResult::new(&recordings[k % recordings.len()].name);
                lost.started = true;
                lost.outcome = Outcome::Failed("client task panicked".into());
                if i >= clients {
                    lost.role = Role::misbehaving(k);
                }
                lost
            })
        })
        .collect();
    Ok(LoadReport::new(
        &options.url,
        begin.elapsed().as_secs_f64(),
        streams,
    ))
}

async fn progress_line(counters: Arc<Counters>, clients: usize, begin: Instant) {
    // a terminal gets one line rewritten in place; a log, a line each 10 s
    let terminal = std::io::stderr().is_terminal();
    let (every, start, end) = match terminal {
        true => (Duration::from_secs(1), "\r", " "),
        false => (Duration::from_secs(10), "", "\n"),
    };
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        let c = &counters;
        let line = format!(
            "{start}pulsed load: {:.0} s: {}/{clients} started, {} streaming, {} completed, {} failed, {:.0} s of audio sent{end}",
            begin.elapsed().as_secs_f64(),
            c.started.load(Ordering::Relaxed),
            c.active.load(Ordering::Relaxed),
            c.completed.load(Ordering::Relaxed),
            c.failed.load(Ordering::Relaxed),
            c.samples.load(Ordering::Relaxed) as f64 / RATE as f64,
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_refuse_what_cannot_run() {
        let ok = LoadOptions::new("ws://127.0.0.1:8000/v1/realtime", 4);
        assert_eq!(ok.check(), Ok(()));
        for url in ["ws://localhost:1/v1/realtime", "ws://[::1]:8000/x"] {
            assert_eq!(LoadOptions::new(url, 1).check(), Ok(()), "{url}");
        }
        let remote = LoadOptions::new("ws://10.0.0.7:8000/v1/realtime", 4);
        assert!(remote.check().unwrap_err().contains("--allow-remote"));
        assert_eq!(
            LoadOptions {
                allow_remote: true,
                ..remote
            }
            .check(),
            Ok(())
        );
        assert!(LoadOptions::new("http://127.0.0.1/", 1).check().is_err());
        assert!(LoadOptions::new("wss://127.0.0.1/", 1).check().is_err());
        assert!(LoadOptions::new("ws://127.0.0.1/", 0).check().is_err());
        assert!(LoadOptions::new("ws://127.0.0.1/", MAX_CLIENTS + 1)
            .check()
            .is_err());
        let fast = LoadOptions {
            block_ms: 10,
            ..ok.clone()
        };
        assert!(fast.check().is_err());
        let bad_key = LoadOptions {
            api_key: Some("a\nb".into()),
            ..ok
        };
        assert!(bad_key.check().is_err());
    }
}
