//! Where a whole recording speaks, as faster-whisper's
//! `get_speech_timestamps` finds it for the batched pipeline: our Silero VAD
//! gives one probability per 512 samples, and the official segment rules
//! run over them with the longest-segment split the pipeline relies on (a
//! segment never outgrows one 30 s encoder window).
//!
//! [`crate::vad::Segmenter`] follows the same rules incrementally but has no
//! longest-segment split, which needs to look back at the last pause: here
//! the whole list of probabilities is at hand.

use crate::models::whisper::WhisperError;
use crate::vad::{Segment, SegmentOptions, Vad, CHUNK};
use crate::Result;

/// Samples pushed through the VAD at a time (memory stays bounded).
const BLOCK: usize = 16 * CHUNK * 64;

/// Pauses at least this long (ms) are where an over-long segment is cut.
const MIN_SILENCE_AT_MAX_SPEECH_MS: f64 = 98.0;

/// One speech probability per 512 samples of `audio` (16 kHz), padded as
/// faster-whisper pads: always with `512 - len % 512` zeros, so a length
/// that is a multiple of 512 gets one chunk of silence more.
pub(crate) fn speech_probs(vad: &Vad, audio: &[f32]) -> Result<Vec<f32>> {
    let mut session = vad.session()?;
    let mut probs = Vec::with_capacity(audio.len() / CHUNK + 1);
    for block in audio.chunks(BLOCK) {
        probs.extend(session.push(block)?);
    }
    let pad = CHUNK - audio.len() % CHUNK;
    probs.extend(session.push(&vec![0.0; pad])?);
    Ok(probs)
}

/// Checks that `o` describes our VAD's output (16 kHz, 512-sample chunks).
pub(crate) fn check_vad_options(o: &SegmentOptions) -> Result<()> {
    if o.sample_rate != crate::vad::SAMPLE_RATE || o.chunk != CHUNK {
        return Err(WhisperError::Option {
            option: "vad",
            reason: format!(
                "the VAD runs at {} Hz in chunks of {CHUNK}, not {} Hz in chunks of {}",
                crate::vad::SAMPLE_RATE,
                o.sample_rate,
                o.chunk
            ),
        }
        .into());
    }
    Ok(())
}

/// Speech segments (samples, padded) of a recording of `total` samples from
/// its chunk probabilities, under `o` and at most `max_speech_s` seconds of
/// speech each (before padding; `f64::INFINITY`: no limit).
///
/// A segment that grows past the limit ends at its last pause of 98 ms or
/// more, and the next one starts where speech came back after that pause;
/// without such a pause it is cut where it stands.
pub(crate) fn speech_segments(
    probs: &[f32],
    total: usize,
    o: &SegmentOptions,
    max_speech_s: f64,
) -> Vec<Segment> {
    let sr = o.sample_rate as f64;
    let step = o.chunk as f64;
    let pad = sr * o.speech_pad_ms as f64 / 1000.0;
    let raw = raw_segments(probs, total, o, sr * max_speech_s - step - 2.0 * pad);
    pad_segments(raw, total, pad)
}

/// The segments before padding: `(start, end)` samples.
fn raw_segments(
    probs: &[f32],
    total: usize,
    o: &SegmentOptions,
    max_speech: f64,
) -> Vec<(usize, usize)> {
    let sr = o.sample_rate as f64;
    let min_speech = sr * o.min_speech_ms as f64 / 1000.0;
    let min_silence = sr * o.min_silence_ms as f64 / 1000.0;
    let min_silence_at_max = sr * MIN_SILENCE_AT_MAX_SPEECH_MS / 1000.0;
    let neg = o.neg_threshold.unwrap_or((o.threshold - 0.15).max(0.01));

    let mut out = Vec::new();
    // The segment in progress starts here (`Some` exactly while in speech).
    let mut start: Option<usize> = None;
    // Where the current pause began; 0: none (no pause can begin at 0).
    let mut temp_end = 0;
    // The last pause long enough to cut at, and where speech resumed after it.
    let (mut prev_end, mut next_start) = (0, 0);
    for (i, &p) in probs.iter().enumerate() {
        let cur = i * o.chunk;
        if p >= o.threshold && temp_end != 0 {
            temp_end = 0;
            if next_start < prev_end {
                next_start = cur;
            }
        }
        let Some(s) = start else {
            if p >= o.threshold {
                start = Some(cur);
            }
            continue;
        };
        let mut s = s;
        if (cur - s) as f64 > max_speech {
            let resumed = if prev_end != 0 {
                out.push((s, prev_end));
                // Speech that came back after the pause starts the next segment.
                (next_start >= prev_end).then_some(next_start)
            } else {
                out.push((s, cur));
                None
            };
            prev_end = 0;
            next_start = 0;
            temp_end = 0;
            start = resumed;
            match resumed {
                Some(n) => s = n,
                None => continue,
            }
        }
        if p < neg {
            if temp_end == 0 {
                temp_end = cur;
            }
            if (cur - temp_end) as f64 > min_silence_at_max {
                prev_end = temp_end;
            }
            if ((cur - temp_end) as f64) < min_silence {
                continue;
            }
            if (temp_end - s) as f64 > min_speech {
                out.push((s, temp_end));
            }
            start = None;
            prev_end = 0;
            next_start = 0;
            temp_end = 0;
        }
    }
    if let Some(s) = start {
        if (total.saturating_sub(s)) as f64 > min_speech {
            out.push((s, total));
        }
    }
    out
}

/// Pads each segment by `pad` samples on each side, within the recording;
/// neighbours closer than two pads share the silence between them.
fn pad_segments(mut raw: Vec<(usize, usize)>, total: usize, pad: f64) -> Vec<Segment> {
    let n = raw.len();
    for i in 0..n {
        if i == 0 {
            raw[0].0 = (raw[0].0 as f64 - pad).max(0.0) as usize;
        }
        if i + 1 < n {
            let silence = raw[i + 1].0 - raw[i].1;
            if (silence as f64) < 2.0 * pad {
                raw[i].1 += silence / 2;
                raw[i + 1].0 -= silence / 2;
            } else {
                raw[i].1 = (total as f64).min(raw[i].1 as f64 + pad) as usize;
                raw[i + 1].0 = (raw[i + 1].0 as f64 - pad).max(0.0) as usize;
            }
        } else {
            raw[i].1 = (total as f64).min(raw[i].1 as f64 + pad) as usize;
        }
    }
    raw.into_iter()
        .map(|(start, end)| Segment {
            start: start as u64,
            end: end as u64,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vad::Segmenter;

    fn options(pad: u32, silence: u32, speech: u32) -> SegmentOptions {
        SegmentOptions {
            speech_pad_ms: pad,
            min_silence_ms: silence,
            min_speech_ms: speech,
            ..Default::default()
        }
    }

    /// Runs of speech and silence with jitter: `(level, chunks)` pairs.
    fn runs(seed: u64, n: usize, mean_run: u64) -> Vec<f32> {
        let mut s = seed | 1;
        let mut level = 0.0f32;
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let len = 1 + (s % (2 * mean_run)) as usize;
            for k in 0..len {
                let jitter = ((s >> (k % 32)) % 100) as f32 / 500.0;
                out.push((level * 0.8 + jitter).min(1.0));
            }
            level = 1.0 - level;
        }
        out.truncate(n);
        out
    }

    #[test]
    fn without_a_limit_the_rules_are_the_segmenters() {
        for seed in 1..150u64 {
            for (pad, silence, speech) in [(30, 100, 250), (400, 160, 0), (200, 2000, 64)] {
                let o = options(pad, silence, speech);
                let p = runs(seed, 400, 12);
                let total = p.len() * CHUNK - (seed as usize % 500);
                let want = Segmenter::segments(o, &p, total as u64);
                assert_eq!(
                    speech_segments(&p, total, &o, f64::INFINITY),
                    want,
                    "seed {seed} pad {pad} silence {silence}"
                );
            }
        }
    }

    #[test]
    fn long_speech_is_cut_at_its_last_pause() {
        let o = options(0, 2000, 0);
        // 1 s max: 16000 - 512 samples of speech at most before the cut.
        // Speech 0..20 chunks, a 5-chunk pause (its 4 chunk steps, 128 ms,
        // pass 98 ms), speech on.
        let mut p = vec![0.9; 20];
        p.extend([0.1; 5]);
        p.extend([0.9; 40]);
        let total = p.len() * CHUNK;
        let segs = speech_segments(&p, total, &o, 1.0);
        let got: Vec<(u64, u64)> = segs.iter().map(|s| (s.start, s.end)).collect();
        // Cut at the pause (chunk 20); the rest restarts at chunk 25 and is
        // cut again without a pause once past the limit (chunk 56); speech
        // triggers again on the next chunk.
        assert_eq!(
            got,
            vec![
                (0, 20 * 512),
                (25 * 512, 56 * 512),
                (57 * 512, total as u64)
            ]
        );
    }

    #[test]
    fn a_pause_too_short_to_cut_at_is_ignored() {
        let o = options(0, 2000, 0);
        // A 2-chunk pause (64 ms) is under 98 ms: the cut is where it stands.
        let mut p = vec![0.9; 20];
        p.extend([0.1; 2]);
        p.extend([0.9; 20]);
        let segs = speech_segments(&p, p.len() * CHUNK, &o, 1.0);
        assert_eq!((segs[0].start, segs[0].end), (0, 31 * 512));
    }

    #[test]
    fn a_cut_in_silence_waits_for_speech_to_come_back() {
        let o = options(0, 2000, 0);
        // The limit is reached inside a long pause: the segment ends where
        // the pause began and no segment starts until speech comes back.
        let mut p = vec![0.9; 25];
        p.extend([0.1; 20]);
        p.extend([0.9; 10]);
        let segs = speech_segments(&p, p.len() * CHUNK, &o, 1.0);
        let got: Vec<(u64, u64)> = segs.iter().map(|s| (s.start, s.end)).collect();
        assert_eq!(got, vec![(0, 25 * 512), (45 * 512, 55 * 512)]);
    }

    #[test]
    fn padding_shares_short_silences() {
        let segs = pad_segments(
            vec![(1000, 5000), (5400, 9000), (20000, 21000)],
            21500,
            480.0,
        );
        let got: Vec<(u64, u64)> = segs.iter().map(|s| (s.start, s.end)).collect();
        assert_eq!(got, vec![(520, 5200), (5200, 9480), (19520, 21480)]);
    }
}
