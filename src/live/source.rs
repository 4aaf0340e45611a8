//! Audio sources for the live path: a WAV fed at real-time pace (so the
//! whole live path runs without a microphone) and, with the `mic` feature,
//! the default input device.

use std::path::Path;
use std::time::{Duration, Instant};

use super::AudioInput;
use crate::audio::WavStream;
use crate::Result;

/// What a real-time feed did.
#[derive(Debug, Clone, Copy)]
pub struct FeedReport {
    pub samples: u64,
    pub started: Instant,
}

/// Feeds a WAV (resampled to `rate`) into `input` in blocks of `block_ms`,
/// sleeping so that audio arrives no faster than real time (as a sound card
/// would deliver it); `realtime = false` feeds as fast as the inference
/// thread takes it (waiting when the ring buffer is full, dropping nothing).
pub fn feed_wav_realtime(
    path: &Path,
    rate: u32,
    input: &mut AudioInput,
    block_ms: u64,
    realtime: bool,
) -> Result<FeedReport> {
    let mut wav = WavStream::open(path, rate)?;
    let block = (rate as u64 * block_ms / 1000).max(1) as usize;
    let started = Instant::now();
    let mut samples = 0u64;
    while let Some(chunk) = wav.next_chunk(block)? {
        if realtime {
            let due = started + Duration::from_secs_f64(samples as f64 / rate as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        if realtime {
            input.write(&chunk);
        } else if !input.write_waiting(&chunk) {
            break; // the inference thread stopped (it reports why)
        }
        samples += chunk.len() as u64;
    }
    if realtime {
        // the last block is "recorded" when its duration has passed
        let due = started + Duration::from_secs_f64(samples as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    Ok(FeedReport { samples, started })
}
