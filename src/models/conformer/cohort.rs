//! A conformer worker's group: a cohort of up to `B` files through one
//! [`MultiStreamTranscriber`], every chunk step serving the whole cohort.
//! The streams of a cohort start together; each ends with its file and its
//! slot then idles (fed silence) until the cohort's longest file is done, so
//! cohorts of similar lengths (files handed out longest first) waste least.

use std::path::PathBuf;

use thiserror::Error;

use super::MultiStreamTranscriber;
use crate::audio::{AudioError, WavStream};
use crate::batch::{Job, Outcome};
use crate::pulse::MultiStreamError;

/// One file in a slot of the cohort.
struct Member {
    /// The file's place in the job.
    k: usize,
    wav: WavStream,
    /// Samples read from the file and not yet fed.
    pending: Vec<f32>,
    used: usize,
    pushed: u64,
    /// Set when the file failed half-way; its slot then just idles.
    failed: Option<String>,
}

/// Runs `job`'s files as one cohort, answering each as it finishes, and
/// resets the session for the next. An error of the shared step is every
/// unanswered member's (the pool answers them); a stop leaves them
/// unanswered, to be cancelled.
pub(super) fn run(
    bt: &mut MultiStreamTranscriber,
    job: &mut Job<'_>,
    chunk: usize,
    rate: u32,
) -> crate::Result<()> {
    // a file that cannot be opened is answered at once and takes no slot
    let mut members = Vec::with_capacity(job.len());
    for k in 0..job.len() {
        match WavStream::open(job.path(k), rate) {
            Ok(wav) => members.push(Some(Member {
                k,
                wav,
                pending: Vec::new(),
                used: 0,
                pushed: 0,
                failed: None,
            })),
            Err(e) => job.finish(k, Outcome::Failed(e.to_string())),
        }
    }
    if members.is_empty() {
        return Ok(());
    }
    step_until_done(bt, &mut members, job, chunk, rate as f64)?;
    bt.reset();
    Ok(())
}

/// Steps the cohort until every member is done (answering each as it
/// finishes and taking it out of `members`), or the run stops.
fn step_until_done(
    bt: &mut MultiStreamTranscriber,
    members: &mut [Option<Member>],
    job: &mut Job<'_>,
    chunk: usize,
    rate: f64,
) -> crate::Result<()> {
    for b in members.len()..bt.batch() {
        bt.end(b)?; // an empty slot of the last, short cohort
    }
    loop {
        if job.control().is_stopped() {
            return Ok(());
        }
        for (b, slot) in members.iter_mut().enumerate() {
            let Some(m) = slot else { continue };
            if m.failed.is_some() || bt.room(b)? == 0 {
                continue;
            }
            if let Err(e) = feed(bt, b, m, job, chunk, rate) {
                m.failed = Some(e.to_string());
                bt.end(b)?;
            }
        }
        bt.step()?;
        for (b, slot) in members.iter_mut().enumerate() {
            // a decoder error is this stream's alone
            if let (Some(m), Some(e)) = (slot.as_mut(), bt.error(b)) {
                if m.failed.is_none() {
                    m.failed = Some(format!("{}: {e}", job.path(m.k).display()));
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
                    Err(e) => Outcome::Failed(format!("{}: {e}", job.path(m.k).display())),
                },
            };
            job.finish(m.k, outcome);
        }
        if members.iter().all(Option::is_none) {
            return Ok(());
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
    job: &mut Job<'_>,
    chunk: usize,
    rate: f64,
) -> Result<(), FeedError> {
    let path = job.path(m.k);
    let session = |source| FeedError::Session {
        path: path.to_path_buf(),
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
                    path: path.to_path_buf(),
                    sample: m.pushed + index as u64,
                    value,
                }
            }
            e => session(e),
        })?;
        m.used += took;
        m.pushed += took as u64;
        job.progress(m.k, m.pushed as f64 / rate);
    }
    Ok(())
}
