//! Word timestamps for one window's segments (faster-whisper's
//! `add_word_timestamps` and `merge_punctuations`): the aligned words are
//! trimmed where they run long at sentence and segment boundaries, joined
//! with their punctuation, handed out to the segments in token order, and
//! the segments' ends moved to their words'.

use super::align::{find_alignment, AlignSpec, WordTiming};
use super::segments::RawSegment;
use super::AlignedBackend;
use crate::models::whisper::WhisperTokenizer;
use crate::Result;

/// A word and when it is said.
#[derive(Debug, Clone, PartialEq)]
pub struct Word {
    /// Seconds in the recording (rounded to 10 ms).
    pub start: f64,
    pub end: f64,
    /// Its text, with its leading space and merged punctuation.
    pub word: String,
    /// Mean probability of its tokens.
    pub probability: f64,
}

/// A window's segment with its words.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WordSegment {
    pub raw: RawSegment,
    pub words: Vec<Word>,
}

/// Feature frames per second.
const FRAMES_PER_SECOND: f64 = 100.0;

/// Adds words to one window's `segments` (all from the same window) and
/// returns the end of the last speech.
pub(crate) fn add_word_timestamps(
    backend: &mut dyn AlignedBackend,
    tokenizer: &WhisperTokenizer,
    segments: &mut [WordSegment],
    spec: &AlignSpec,
    punctuation: (&str, &str),
    mut last_speech_timestamp: f64,
) -> Result<f64> {
    if segments.is_empty() {
        return Ok(last_speech_timestamp);
    }
    let eot = tokenizer.special().eot;
    let per_segment: Vec<Vec<u32>> = segments
        .iter()
        .map(|s| s.raw.tokens.iter().copied().filter(|&t| t < eot).collect())
        .collect();
    let text_tokens = per_segment.concat();
    let mut alignment = find_alignment(backend, tokenizer, &text_tokens, spec)?;

    let mut durations: Vec<f64> = alignment
        .iter()
        .map(|w| w.end - w.start)
        .filter(|&d| d != 0.0)
        .collect();
    let median = median(&mut durations).unwrap_or(0.0).min(0.7);
    let max_duration = median * 2.0;
    if !durations.is_empty() {
        // Words at sentence boundaries are at most twice the median long.
        let sentence_end = ".。!！?？";
        for i in 1..alignment.len() {
            if alignment[i].end - alignment[i].start > max_duration {
                if sentence_end.contains(alignment[i].word.as_str()) {
                    alignment[i].end = alignment[i].start + max_duration;
                } else if sentence_end.contains(alignment[i - 1].word.as_str()) {
                    alignment[i].start = alignment[i].end - max_duration;
                }
            }
        }
    }
    merge_punctuations(&mut alignment, punctuation.0, punctuation.1);

    let time_offset = segments[0].raw.seek as f64 / FRAMES_PER_SECOND;
    let mut word_index = 0;
    for (seg, text) in segments.iter_mut().zip(&per_segment) {
        let mut saved_tokens = 0;
        let mut words: Vec<Word> = Vec::new();
        while word_index < alignment.len() && saved_tokens < text.len() {
            let timing = &alignment[word_index];
            if !timing.word.is_empty() {
                words.push(Word {
                    word: timing.word.clone(),
                    start: py_round2(time_offset + timing.start),
                    end: py_round2(time_offset + timing.end),
                    probability: timing.probability,
                });
            }
            saved_tokens += timing.tokens.len();
            word_index += 1;
        }
        if !words.is_empty() {
            trim_boundary_words(
                &mut seg.raw,
                &mut words,
                last_speech_timestamp,
                median,
                max_duration,
            );
            last_speech_timestamp = seg.raw.end;
        }
        seg.words = words;
    }
    Ok(last_speech_timestamp)
}

/// The first words after a pause are at most twice the median long, and
/// the segment's start and end move to its words' unless a word runs long.
fn trim_boundary_words(
    seg: &mut RawSegment,
    words: &mut [Word],
    last_speech_timestamp: f64,
    median: f64,
    max_duration: f64,
) {
    if words[0].end - last_speech_timestamp > median * 4.0
        && (words[0].end - words[0].start > max_duration
            || (words.len() > 1 && words[1].end - words[0].start > max_duration * 2.0))
    {
        if words.len() > 1 && words[1].end - words[1].start > max_duration {
            let boundary = (words[1].end / 2.0).max(words[1].end - max_duration);
            words[0].end = boundary;
            words[1].start = boundary;
        }
        words[0].start = (words[0].end - max_duration).max(0.0);
    }
    if seg.start < words[0].end && seg.start - 0.5 > words[0].start {
        words[0].start = (words[0].end - median).min(seg.start).max(0.0);
    } else {
        seg.start = words[0].start;
    }
    let last = words.len() - 1;
    if seg.end > words[last].start && seg.end + 0.5 < words[last].end {
        words[last].end = (words[last].start + median).max(seg.end);
    } else {
        seg.end = words[last].end;
    }
}

/// Joins opening punctuation to the word after it and closing punctuation
/// to the word before it; the emptied entries stay, with no text and no
/// tokens (Python's substring tests included).
pub(crate) fn merge_punctuations(alignment: &mut [WordTiming], prepended: &str, appended: &str) {
    if alignment.len() >= 2 {
        let mut i = alignment.len() as isize - 2;
        let mut j = alignment.len() - 1;
        while i >= 0 {
            let iu = i as usize;
            let previous = &alignment[iu];
            if previous.word.starts_with(' ') && prepended.contains(previous.word.trim()) {
                let (word, tokens) = (
                    std::mem::take(&mut alignment[iu].word),
                    std::mem::take(&mut alignment[iu].tokens),
                );
                let following = &mut alignment[j];
                following.word = word + &following.word;
                following.tokens = [tokens, std::mem::take(&mut following.tokens)].concat();
            } else {
                j = iu;
            }
            i -= 1;
        }
    }
    let (mut i, mut j) = (0, 1);
    while j < alignment.len() {
        if !alignment[i].word.ends_with(' ') && appended.contains(alignment[j].word.as_str()) {
            let (word, tokens) = (
                std::mem::take(&mut alignment[j].word),
                std::mem::take(&mut alignment[j].tokens),
            );
            alignment[i].word.push_str(&word);
            alignment[i].tokens.extend(tokens);
        } else {
            i = j;
        }
        j += 1;
    }
}

/// numpy's median.
fn median(x: &mut [f64]) -> Option<f64> {
    if x.is_empty() {
        return None;
    }
    x.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = x.len();
    Some(if n % 2 == 1 {
        x[n / 2]
    } else {
        (x[n / 2 - 1] + x[n / 2]) / 2.0
    })
}

/// Python's `round(x, 2)`: the closest two-decimal value, ties to even on
/// the exact binary value (as Rust's formatting rounds).
pub(crate) fn py_round2(x: f64) -> f64 {
    format!("{x:.2}").parse().unwrap_or(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(word: &str, tokens: &[u32]) -> WordTiming {
        WordTiming {
            word: word.to_string(),
            tokens: tokens.to_vec(),
            start: 0.0,
            end: 0.0,
            probability: 1.0,
        }
    }

    #[test]
    fn punctuation_joins_its_word() {
        let mut a = vec![
            timing(" \"", &[1]),
            timing(" Hello", &[2]),
            timing(",", &[3]),
            timing(" world", &[4]),
            timing(".\"", &[5]),
        ];
        merge_punctuations(&mut a, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、");
        let words: Vec<&str> = a.iter().map(|w| w.word.as_str()).collect();
        // ".\"" is not a substring of the appended set: it stays apart.
        assert_eq!(words, vec!["", " \" Hello,", "", " world", ".\""]);
        assert_eq!(a[1].tokens, vec![1, 2, 3]);
        assert!(a[0].tokens.is_empty() && a[2].tokens.is_empty());
    }

    #[test]
    fn round2_as_python() {
        // Python: round(0.125, 2) == 0.12, round(0.375, 2) == 0.38,
        // round(2.675, 2) == 2.67 (2.675 is below the tie in binary).
        assert_eq!(py_round2(0.125), 0.12);
        assert_eq!(py_round2(0.375), 0.38);
        assert_eq!(py_round2(2.675), 2.67);
        assert_eq!(py_round2(1.0 + 0.1 * 3.0), 1.3);
    }

    #[test]
    fn boundary_words_are_trimmed() {
        // A 3 s first word after a long pause, median 0.3 s: cut to 0.6 s.
        let mut seg = RawSegment {
            seek: 0,
            start: 0.0,
            end: 5.0,
            tokens: vec![],
        };
        let w = |word: &str, start, end| Word {
            word: word.into(),
            start,
            end,
            probability: 1.0,
        };
        let mut words = vec![w(" a", 1.0, 4.0), w(" b", 4.0, 4.3)];
        trim_boundary_words(&mut seg, &mut words, 0.0, 0.3, 0.6);
        assert!((words[0].start - 3.4).abs() < 1e-12);
        assert_eq!(seg.start, words[0].start);
        assert_eq!(seg.end, 4.3);
    }
}
