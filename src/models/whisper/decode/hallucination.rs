//! Skipping silence before likely hallucinations (faster-whisper's
//! `hallucination_silence_threshold`, with word timestamps): a segment
//! whose words are improbable, very short or very long, with silence
//! around it, is dropped and decoding resumes after the silence.

use super::words::{Word, WordSegment};

/// Characters whose words the anomaly score leaves out.
const PUNCTUATION: &str = "\"'“¿([{-\"'.。,，!！?？:：”)]}、";

/// Where the window sits, in frames and seconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WindowTimes {
    /// Frame where the window started.
    pub seek: usize,
    pub time_offset: f64,
    pub segment_duration: f64,
    /// `(seek + window frames)` in seconds.
    pub window_end_time: f64,
    pub content_frames: usize,
    pub content_duration: f64,
}

/// What to do with the window's segments.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cut {
    /// Keep them all.
    Keep,
    /// Drop the whole window's output and resume at `seek`.
    SkipWindow { seek: usize },
    /// Keep the segments before `at` and resume at `seek`.
    Truncate { at: usize, seek: usize },
}

fn word_anomaly_score(w: &Word) -> f64 {
    let duration = w.end - w.start;
    let mut score = 0.0;
    if w.probability < 0.15 {
        score += 1.0;
    }
    if duration < 0.133 {
        score += (0.133 - duration) * 15.0;
    }
    if duration > 2.0 {
        score += duration - 2.0;
    }
    score
}

fn is_segment_anomaly(segment: Option<&WordSegment>) -> bool {
    let Some(segment) = segment.filter(|s| !s.words.is_empty()) else {
        return false;
    };
    // Python's `not in` on strings: a substring test.
    let words: Vec<&Word> = segment
        .words
        .iter()
        .filter(|w| !PUNCTUATION.contains(w.word.as_str()))
        .take(8)
        .collect();
    let score: f64 = words.iter().map(|w| word_anomaly_score(w)).sum();
    score >= 3.0 || score + 0.01 >= words.len() as f64
}

fn next_words_segment(segments: &[WordSegment]) -> Option<&WordSegment> {
    segments.iter().find(|s| !s.words.is_empty())
}

fn frames(seconds: f64) -> usize {
    (seconds * 100.0).round_ties_even().max(0.0) as usize
}

/// Decides, for one window's segments with words, whether a hallucination
/// surrounded by more than `threshold` seconds of silence cuts them.
pub(crate) fn check(
    segments: &[WordSegment],
    threshold: f64,
    t: &WindowTimes,
    last_speech_timestamp: f64,
) -> Cut {
    // A likely hallucination first, after a long gap: skip the gap.
    if let Some(first) = next_words_segment(segments) {
        if is_segment_anomaly(Some(first)) {
            let gap = first.raw.start - t.time_offset;
            if gap > threshold {
                return Cut::SkipWindow {
                    seek: t.seek + frames(gap),
                };
            }
        }
    }
    let mut hal_last_end = last_speech_timestamp;
    for (si, segment) in segments.iter().enumerate() {
        if segment.words.is_empty() {
            continue;
        }
        if is_segment_anomaly(Some(segment)) {
            let next = next_words_segment(&segments[si + 1..]);
            let hal_next_start =
                next.map_or(t.time_offset + t.segment_duration, |n| n.words[0].start);
            let (start, end) = (segment.raw.start, segment.raw.end);
            let silence_before = start - hal_last_end > threshold
                || start < threshold
                || start - t.time_offset < 2.0;
            let silence_after = hal_next_start - end > threshold
                || is_segment_anomaly(next)
                || t.window_end_time - end < 2.0;
            if silence_before && silence_after {
                let mut seek = frames((t.time_offset + 1.0).max(start));
                if t.content_duration - end < threshold {
                    seek = t.content_frames;
                }
                return Cut::Truncate { at: si, seek };
            }
        }
        hal_last_end = segment.raw.end;
    }
    Cut::Keep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::whisper::decode::segments::RawSegment;

    fn seg(start: f64, end: f64, words: &[(&str, f64, f64, f64)]) -> WordSegment {
        WordSegment {
            raw: RawSegment {
                seek: 0,
                start,
                end,
                tokens: vec![],
            },
            words: words
                .iter()
                .map(|&(w, s, e, p)| Word {
                    word: w.into(),
                    start: s,
                    end: e,
                    probability: p,
                })
                .collect(),
        }
    }

    const T: WindowTimes = WindowTimes {
        seek: 0,
        time_offset: 0.0,
        segment_duration: 30.0,
        window_end_time: 30.0,
        content_frames: 6000,
        content_duration: 60.0,
    };

    #[test]
    fn an_improbable_first_segment_after_silence_skips_the_gap() {
        let segs = [seg(5.0, 5.5, &[(" Thanks", 5.0, 5.5, 0.05)])];
        assert_eq!(check(&segs, 2.0, &T, 0.0), Cut::SkipWindow { seek: 500 });
        // A gap under the threshold: still silence before (it starts within
        // the threshold) and after (to the window's end), so cut there.
        assert_eq!(
            check(&segs, 6.0, &T, 0.0),
            Cut::Truncate { at: 0, seek: 500 }
        );
    }

    #[test]
    fn a_surrounded_hallucination_truncates() {
        let good = |s: f64| (" word", s, s + 0.4, 0.9);
        let segs = [
            seg(0.0, 2.0, &[good(0.0), good(0.5)]),
            seg(10.0, 10.05, &[(" you", 10.0, 10.05, 0.01)]),
            seg(20.0, 21.0, &[good(20.0)]),
        ];
        assert_eq!(
            check(&segs, 3.0, &T, 0.0),
            Cut::Truncate { at: 1, seek: 1000 }
        );
        // Speech right before it: no silence before, kept.
        assert_eq!(check(&segs, 9.0, &T, 0.0), Cut::Keep);
    }

    #[test]
    fn punctuation_only_words_are_an_anomaly() {
        // "..." is no substring of the punctuation: a plain, likely word.
        assert!(!is_segment_anomaly(Some(&seg(
            0.0,
            1.0,
            &[("...", 0.0, 1.0, 0.9)]
        ))));
        assert!(is_segment_anomaly(Some(&seg(
            0.0,
            1.0,
            &[(".", 0.0, 1.0, 0.9)]
        ))));
        assert!(!is_segment_anomaly(None));
    }
}
