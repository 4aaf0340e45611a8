//! Speech segments joined into chunks of at most one encoder window
//! (faster-whisper's `collect_chunks`), and times in the joined speech put
//! back on the recording's timeline (its `SpeechTimestampsMap`).
//!
//! The batched pipeline decodes each chunk as if its speech were one
//! recording with the silences between its segments cut out; a time in
//! that joined speech maps back by adding the silence cut before the
//! segment it falls in.

use crate::vad::Segment;

/// Speech segments decoded together as one window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chunk {
    /// Its segments, in order (samples of the recording).
    pub segments: Vec<Segment>,
    /// Samples of speech in the chunks before it: where it starts in the
    /// joined speech.
    pub offset: usize,
    /// Samples of speech in it.
    pub samples: usize,
}

impl Chunk {
    /// Its segments' samples, joined.
    pub fn audio(&self, audio: &[f32]) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.samples);
        for s in &self.segments {
            out.extend_from_slice(&audio[s.start as usize..s.end as usize]);
        }
        out
    }
}

/// Joins `segments` in order into chunks of at most `max_samples` samples
/// of speech: a segment that would overflow the current chunk starts the
/// next one (a longer segment gets a chunk of its own; the encoder window
/// then keeps its first 30 s). Empty when there is no speech.
///
/// faster-whisper also emits an empty first chunk when the first segment
/// alone overflows; with segments split at the window length (as the
/// pipeline splits them) that cannot happen, and here it never does.
pub(crate) fn collect_chunks(segments: &[Segment], max_samples: f64) -> Vec<Chunk> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut current = Chunk {
        segments: Vec::new(),
        offset: 0,
        samples: 0,
    };
    for s in segments {
        let len = (s.end - s.start) as usize;
        if (current.samples + len) as f64 > max_samples && !current.segments.is_empty() {
            let offset = current.offset + current.samples;
            chunks.push(std::mem::replace(
                &mut current,
                Chunk {
                    segments: Vec::new(),
                    offset,
                    samples: 0,
                },
            ));
        }
        current.segments.push(*s);
        current.samples += len;
    }
    if !current.segments.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// Times in the joined speech back to times in the recording.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpeechMap {
    /// Each segment's end in the joined speech (samples).
    ends: Vec<i64>,
    /// Seconds of silence cut before each segment.
    silence_before: Vec<f64>,
    rate: f64,
}

impl SpeechMap {
    /// The map of `segments` (samples at `rate`), in order.
    pub fn new(segments: &[Segment], rate: u32) -> SpeechMap {
        let (mut ends, mut silence_before) = (Vec::new(), Vec::new());
        let (mut previous_end, mut silent) = (0i64, 0i64);
        for s in segments {
            silent += s.start as i64 - previous_end;
            previous_end = s.end as i64;
            ends.push(s.end as i64 - silent);
            silence_before.push(silent as f64 / rate as f64);
        }
        SpeechMap {
            ends,
            silence_before,
            rate: rate as f64,
        }
    }

    /// The segment `time` (seconds of joined speech) falls in: the first
    /// whose end is past its sample, or, for an end time, the one ending on
    /// its very sample; times past the last segment belong to the last.
    pub fn index(&self, time: f64, is_end: bool) -> usize {
        let sample = (time * self.rate) as i64;
        if is_end {
            if let Some(i) = self.ends.iter().position(|&e| e == sample) {
                return i;
            }
        }
        let after = self.ends.partition_point(|&e| e <= sample);
        after.min(self.ends.len().saturating_sub(1))
    }

    /// `time` (seconds of joined speech) in the recording, taken to lie in
    /// segment `index`, to 10 ms (Python's `round(t, 2)`).
    pub fn original(&self, time: f64, index: usize) -> f64 {
        match self.silence_before.get(index) {
            Some(&silence) => py_round(silence + time, 2),
            None => py_round(time, 2),
        }
    }

    /// A segment's start and end in the recording: each in the segment it
    /// falls in, an end exactly on a segment's end staying in that one.
    pub fn span(&self, start: f64, end: f64) -> (f64, f64) {
        (
            self.original(start, self.index(start, false)),
            self.original(end, self.index(end, true)),
        )
    }
}

/// Python's `round(x, digits)`: the closest value with that many decimals,
/// ties to even on the exact binary value (as Rust's formatting rounds).
pub(crate) fn py_round(x: f64, digits: usize) -> f64 {
    format!("{x:.digits$}").parse().unwrap_or(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(start: u64, end: u64) -> Segment {
        Segment { start, end }
    }

    #[test]
    fn segments_fill_chunks_up_to_the_limit() {
        let segs = [
            seg(0, 400),
            seg(1000, 1500),
            seg(2000, 2200),
            seg(5000, 6000),
        ];
        let chunks = collect_chunks(&segs, 1000.0);
        let shape: Vec<(usize, usize, usize)> = chunks
            .iter()
            .map(|c| (c.segments.len(), c.offset, c.samples))
            .collect();
        // 400 + 500 fits in 1000; + 200 would pass it; 200 + 1000 too.
        assert_eq!(shape, vec![(2, 0, 900), (1, 900, 200), (1, 1100, 1000)]);
        // Filling a chunk exactly is fine.
        let exact = collect_chunks(&[seg(0, 400), seg(500, 1100)], 1000.0);
        assert_eq!(exact.len(), 1);
        assert!(collect_chunks(&[], 1000.0).is_empty());
        // A segment longer than the limit gets its own chunk, no empty one.
        let chunks = collect_chunks(&[seg(0, 3000), seg(4000, 4100)], 1000.0);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1].offset, 3000);
    }

    #[test]
    fn chunk_audio_joins_its_segments() {
        let audio: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let c = &collect_chunks(&[seg(1, 3), seg(6, 8)], 100.0)[0];
        assert_eq!(c.audio(&audio), vec![1.0, 2.0, 6.0, 7.0]);
    }

    #[test]
    fn times_map_back_past_the_silences_cut() {
        // Speech 1..2 s, 5..7 s, 10..11 s at 16 kHz: joined, 0..1, 1..3, 3..4.
        let m = SpeechMap::new(
            &[seg(16000, 32000), seg(80000, 112000), seg(160000, 176000)],
            16000,
        );
        assert_eq!(m.index(0.5, false), 0);
        assert_eq!(m.original(0.5, 0), 1.5);
        // A start on a boundary belongs to the next segment, an end to its own.
        assert_eq!(m.span(1.0, 3.0), (5.0, 7.0));
        assert_eq!(m.span(3.0, 4.0), (10.0, 11.0));
        assert_eq!(m.span(0.0, 2.0), (1.0, 6.0));
        // An end a hair past a boundary falls in the next segment
        // (faster-whisper's rule, kept as it is).
        assert_eq!(m.span(0.0, 1.001), (1.0, 5.0));
        // Past the end: the last segment.
        assert_eq!(m.original(9.0, m.index(9.0, false)), 16.0);
    }

    #[test]
    fn rounding_is_pythons() {
        assert_eq!(py_round(2.675, 2), 2.67); // 2.67499999... in binary
        assert_eq!(py_round(0.125, 2), 0.12); // an exact tie: to even
        assert_eq!(py_round(1.0005, 3), 1.0); // 1.000499999...
        assert_eq!(py_round(1.23456, 3), 1.235);
    }
}
