//! A worker that transcribes files in cohorts of `B` streams through one
//! [`MultiStreamTranscriber`]: every chunk step serves the whole cohort. The
//! streams of a cohort start together; each ends with its file and its slot
//! then idles (fed silence) until the cohort's longest file is done, so
//! cohorts of similar lengths (files handed out longest first) waste least.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

use thiserror::Error;

use super::pool::{panic_message, Control, FileResult, MakeBatch, Outcome};
use crate::asr::{MultiStreamTranscriber, Recognizer};
use crate::audio::{AudioError, WavStream};
use crate::pulse::MultiStreamError;

/// One file in a slot of the cohort.
struct Member {
    index: usize,
    path: PathBuf,
    wav: WavStream,
    /// Samples read from the file and not yet fed.
    pending: Vec<f32>,
    used: usize,
    pushed: u64,
    started: Instant,
    /// Set when the file failed half-way; its slot then just idles.
    failed: Option<String>,
}

/// Runs cohorts until the file list is used up or the run is stopped.
#[allow(clippy::too_many_arguments)]
pub(super) fn cohort_worker(
    rec: &Recognizer,
    files: &[PathBuf],
    order: &[usize],
    next: &AtomicUsize,
    chunk: usize,
    make_batch: &MakeBatch<'_>,
    fell_back: &Mutex<Vec<String>>,
    control: &Control,
    tx: mpsc::Sender<FileResult>,
) {
    let send = |index: usize, outcome: Outcome, pushed: u64, t0: Instant| {
        if !matches!(outcome, Outcome::Cancelled) {
            control.count_finished();
        }
        tx.send(FileResult {
            index,
            path: files[index].clone(),
            outcome,
            audio_s_processed: pushed as f64 / rec.sample_rate() as f64,
            elapsed_s: t0.elapsed().as_secs_f64(),
        })
        .is_ok()
    };
    // a model with no batched form (or no room for one) still runs, one
    // stream at a time, and the run's summary says so
    let single_stream = |e: crate::Error| {
        fell_back
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(e.to_string());
        super::pool::worker(rec, files, order, next, chunk, control, tx.clone())
    };
    let mut bt = match make_batch() {
        Ok(bt) => bt,
        Err(e) => return single_stream(e),
    };
    while !control.is_stopped() {
        // fill the cohort; files that cannot be opened are reported at once
        let streams = bt.batch();
        let mut members: Vec<Option<Member>> = Vec::with_capacity(streams);
        while members.len() < streams {
            let Some(&index) = order.get(next.fetch_add(1, Ordering::SeqCst)) else {
                break;
            };
            match WavStream::open(&files[index], rec.sample_rate()) {
                Ok(wav) => members.push(Some(Member {
                    index,
                    path: files[index].clone(),
                    wav,
                    pending: Vec::new(),
                    used: 0,
                    pushed: 0,
                    started: Instant::now(),
                    failed: None,
                })),
                Err(e) => {
                    if !send(index, Outcome::Failed(e.to_string()), 0, Instant::now()) {
                        return;
                    }
                }
            }
        }
        if members.is_empty() {
            return;
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_cohort(&mut bt, &mut members, chunk, control, &send)
        }));
        let error = match outcome {
            Ok(Ok(true)) => None,
            Ok(Ok(false)) => return, // the receiver is gone
            Ok(Err(e)) => Some(e.to_string()),
            Err(panic) => Some(format!("internal error: {}", panic_message(&panic))),
        };
        // what is left in the cohort was cut short: by a stop, or by an
        // error of the shared step, which every member shares
        for m in members.into_iter().flatten() {
            let outcome = match &error {
                Some(e) => Outcome::Failed(format!("{}: {e}", m.path.display())),
                None => Outcome::Cancelled,
            };
            if !send(m.index, outcome, m.pushed, m.started) {
                return;
            }
        }
        if error.is_some() {
            // the session's state is unknown after a failed step: a fresh
            // one (the old one's memory freed first), else one stream at a
            // time, which reports every file left with its own reason
            drop(bt);
            match make_batch() {
                Ok(fresh) => bt = fresh,
                Err(e) => return single_stream(e),
            }
        } else {
            bt.reset();
        }
    }
}

/// Steps the cohort until every member is done (sending each result as it
/// finishes and taking it out of `members`), or the run stops. `Ok(false)`:
/// the receiver hung up.
fn run_cohort(
    bt: &mut MultiStreamTranscriber,
    members: &mut [Option<Member>],
    chunk: usize,
    control: &Control,
    send: &impl Fn(usize, Outcome, u64, Instant) -> bool,
) -> crate::Result<bool> {
    for b in members.len()..bt.batch() {
        bt.end(b)?; // an empty slot of the last, short cohort
    }
    loop {
        if control.is_stopped() {
            return Ok(true);
        }
        for (b, slot) in members.iter_mut().enumerate() {
            let Some(m) = slot else { continue };
            if m.failed.is_some() || bt.room(b)? == 0 {
                continue;
            }
            if let Err(e) = feed(bt, b, m, chunk, control) {
                m.failed = Some(e.to_string());
                bt.end(b)?;
            }
        }
        bt.step()?;
        for (b, slot) in members.iter_mut().enumerate() {
            // a decoder error is this stream's alone
            if let (Some(m), Some(e)) = (slot.as_mut(), bt.error(b)) {
                if m.failed.is_none() {
                    m.failed = Some(format!("{}: {e}", m.path.display()));
                    bt.end(b)?;
                }
            }
            let Some(m) = slot.take_if(|m| m.failed.is_some() || bt.done(b)) else {
                continue;
            };
            let outcome = match m.failed {
                Some(e) => Outcome::Failed(e),
                None => match bt.transcript(b) {
                    Ok(transcript) => Outcome::Done {
                        transcript,
                        duration_s: m.wav.source_duration_s(),
                        extra: Default::default(),
                    },
                    Err(e) => Outcome::Failed(format!("{}: {e}", m.path.display())),
                },
            };
            if !send(m.index, outcome, m.pushed, m.started) {
                return Ok(false);
            }
        }
        if members.iter().all(Option::is_none) {
            return Ok(true);
        }
    }
}

/// Why a member's file failed while it was fed; each message starts with
/// the file.
#[derive(Debug, Error)]
enum FeedError {
    /// The file could not be read on (its error names the file).
    #[error(transparent)]
    Audio(#[from] AudioError),
    /// A sample the session refused, counted from the file's start.
    #[error("{}: sample {sample} (at the model's rate) is not finite ({value})", .path.display())]
    NotFinite {
        path: PathBuf,
        sample: u64,
        value: f32,
    },
    /// The batched session refused this stream's feed or end.
    #[error("{}: {source}", .path.display())]
    Session {
        path: PathBuf,
        #[source]
        source: crate::Error,
    },
}

/// Fills stream `b`'s pulse from its file, ending it at the file's end.
fn feed(
    bt: &mut MultiStreamTranscriber,
    b: usize,
    m: &mut Member,
    chunk: usize,
    control: &Control,
) -> Result<(), FeedError> {
    let session = |source| FeedError::Session {
        path: m.path.clone(),
        source,
    };
    while bt.room(b).map_err(session)? > 0 {
        if m.used == m.pending.len() {
            match m.wav.next_chunk(chunk)? {
                Some(samples) => {
                    m.pending = samples;
                    m.used = 0;
                }
                None => return bt.end(b).map_err(session),
            }
        }
        let took = bt.fill(b, &m.pending[m.used..]).map_err(|e| match e {
            // where in the file, not where in the batch
            crate::Error::MultiStream(MultiStreamError::NotFinite { index, value, .. }) => {
                FeedError::NotFinite {
                    path: m.path.clone(),
                    sample: m.pushed + index as u64,
                    value,
                }
            }
            e => session(e),
        })?;
        m.used += took;
        m.pushed += took as u64;
        control.count_pushed(took as u64);
    }
    Ok(())
}
