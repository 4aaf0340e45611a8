//! A window's output cut into segments at its timestamp tokens, and where
//! the next window starts (faster-whisper's
//! `_split_segments_by_timestamps`).

/// Seconds per timestamp step.
pub(crate) const TIME_PRECISION: f64 = 0.02;
/// Feature frames per timestamp step (the encoder's stride).
pub(crate) const INPUT_STRIDE: usize = 2;

/// A piece of a window's output, before its text is decoded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawSegment {
    /// Feature frame where the window starts.
    pub seek: usize,
    /// Seconds in the recording.
    pub start: f64,
    pub end: f64,
    /// Its tokens, timestamps included.
    pub tokens: Vec<u32>,
}

/// How one window's output splits.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Split {
    pub segments: Vec<RawSegment>,
    /// Where the next window starts.
    pub seek: usize,
    /// The output ended with a lone timestamp: nothing is said after it.
    pub single_timestamp_ending: bool,
}

/// Splits `tokens`, decoded from the window at frame `seek` (`time_offset`
/// seconds) of `segment_size` content frames (`segment_duration` seconds).
pub(crate) fn split_segments_by_timestamps(
    timestamp_begin: u32,
    tokens: &[u32],
    time_offset: f64,
    segment_size: usize,
    segment_duration: f64,
    seek: usize,
) -> Split {
    let is_ts = |t: u32| t >= timestamp_begin;
    let n = tokens.len();
    let single_timestamp_ending = n >= 2 && !is_ts(tokens[n - 2]) && is_ts(tokens[n - 1]);
    let consecutive: Vec<usize> = (1..n)
        .filter(|&i| is_ts(tokens[i]) && is_ts(tokens[i - 1]))
        .collect();
    let mut segments = Vec::new();
    let mut seek = seek;
    let window_seek = seek;

    if !consecutive.is_empty() {
        let mut slices = consecutive;
        if single_timestamp_ending {
            slices.push(n);
        }
        let mut last_slice = 0;
        for &current in &slices {
            let sliced = &tokens[last_slice..current];
            let start_pos = sliced[0] as f64 - timestamp_begin as f64;
            let end_pos = sliced[sliced.len() - 1] as f64 - timestamp_begin as f64;
            segments.push(RawSegment {
                seek: window_seek,
                start: time_offset + start_pos * TIME_PRECISION,
                end: time_offset + end_pos * TIME_PRECISION,
                tokens: sliced.to_vec(),
            });
            last_slice = current;
        }
        if single_timestamp_ending {
            seek += segment_size;
        } else {
            // Drop the unfinished segment: the next window starts at the
            // last timestamp.
            let last_pos = (tokens[last_slice - 1] - timestamp_begin) as usize;
            seek += last_pos * INPUT_STRIDE;
        }
    } else {
        let mut duration = segment_duration;
        if let Some(&last) = tokens.iter().rev().find(|&&t| is_ts(t)) {
            if last != timestamp_begin {
                duration = (last - timestamp_begin) as f64 * TIME_PRECISION;
            }
        }
        segments.push(RawSegment {
            seek: window_seek,
            start: time_offset,
            end: time_offset + duration,
            tokens: tokens.to_vec(),
        });
        seek += segment_size;
    }
    Split {
        segments,
        seek,
        single_timestamp_ending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TB: u32 = 100;

    #[test]
    fn pairs_cut_segments_and_the_unfinished_one_is_dropped() {
        // <0.00> a b <1.00><1.00> c <2.00><2.00> d (unfinished)
        let tokens = [TB, 1, 2, TB + 50, TB + 50, 3, TB + 100, TB + 100, 4];
        let s = split_segments_by_timestamps(TB, &tokens, 30.0, 3000, 30.0, 3000);
        assert!(!s.single_timestamp_ending);
        assert_eq!(s.segments.len(), 2);
        assert_eq!(s.segments[0].tokens, vec![TB, 1, 2, TB + 50]);
        assert_eq!((s.segments[0].start, s.segments[0].end), (30.0, 31.0));
        assert_eq!(s.segments[1].tokens, vec![TB + 50, 3, TB + 100]);
        assert_eq!((s.segments[1].start, s.segments[1].end), (31.0, 32.0));
        // Seek to the last complete timestamp: 100 steps of 2 frames.
        assert_eq!(s.seek, 3000 + 200);
    }

    #[test]
    fn a_single_final_timestamp_consumes_the_window() {
        let tokens = [TB, 1, TB + 50, TB + 50, 3, TB + 80];
        let s = split_segments_by_timestamps(TB, &tokens, 0.0, 2500, 25.0, 0);
        assert!(s.single_timestamp_ending);
        assert_eq!(s.segments.len(), 2);
        assert_eq!(s.segments[1].tokens, vec![TB + 50, 3, TB + 80]);
        assert!((s.segments[1].end - 1.6).abs() < 1e-12);
        assert_eq!(s.seek, 2500);
    }

    #[test]
    fn no_pair_makes_one_segment() {
        // Ends on its last timestamp when there is one past <0.00>...
        let s = split_segments_by_timestamps(TB, &[TB, 1, 2, TB + 60], 10.0, 3000, 30.0, 1000);
        assert_eq!(s.segments.len(), 1);
        assert!((s.segments[0].end - 11.2).abs() < 1e-12);
        assert_eq!(s.seek, 4000);
        // ...else lasts the window (text only, no timestamps).
        let s = split_segments_by_timestamps(TB, &[1, 2], 10.0, 1234, 12.34, 1000);
        assert_eq!(
            (s.segments[0].start, s.segments[0].end),
            (10.0, 10.0 + 12.34)
        );
        assert_eq!(s.seek, 2234);
    }
}
