//! The live Whisper policy's rolling buffer, as text: where the buffer is
//! cut (whisper_streaming's segment trimming), the committed text before it
//! as the prompt, and Whisper's words as a line.

use std::collections::VecDeque;

use crate::decode::Word;

/// Where to cut the rolling buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cut {
    /// At this stream time (seconds).
    At(f64),
    /// Commit the whole hypothesis and cut after it.
    CommitAll,
}

/// whisper_streaming's segment trimming: a buffer of `len_s` seconds
/// starting at `start_s`, longer than `trim_s`, is cut at the latest end of
/// a segment other than the last that is no later than the last committed
/// word's end. Past `max_s` with no such segment it is cut at the last
/// committed word, or, with none committed in it, everything is committed.
pub fn cut_point(
    len_s: f64,
    start_s: f64,
    segment_ends: &[f64],
    last_committed_end: Option<f64>,
    (trim_s, max_s): (f64, f64),
) -> Option<Cut> {
    if len_s <= trim_s {
        return None;
    }
    let t = last_committed_end.filter(|&t| t > start_s);
    if let Some(t) = t {
        let closed = &segment_ends[..segment_ends.len().saturating_sub(1)];
        if let Some(&e) = closed.iter().rev().find(|&&e| e <= t && e > start_s) {
            return Some(Cut::At(e));
        }
    }
    if len_s <= max_s {
        return None;
    }
    Some(t.map_or(Cut::CommitAll, Cut::At))
}

/// The prompt: committed words that end before the buffer starts, the last
/// ones up to about `chars` characters.
pub(super) fn prompt_text(history: &VecDeque<Word>, buffer_start_s: f64, chars: usize) -> String {
    let mut picked = Vec::new();
    let mut len = 0;
    for w in history.iter().rev().filter(|w| w.end_s <= buffer_start_s) {
        if len >= chars {
            break;
        }
        len += w.text.len();
        picked.push(w.clone());
    }
    picked.reverse();
    text_of(&picked)
}

/// Whisper's words (each with its leading space) as text.
pub(super) fn text_of(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| w.text.as_str())
        .collect::<String>()
        .trim()
        .to_string()
}

/// The words with their spaces trimmed, as the other paths give them.
pub(super) fn trimmed(mut words: Vec<Word>) -> Vec<Word> {
    for w in &mut words {
        w.text = w.text.trim().to_string();
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: (f64, f64) = (15.0, 25.0);

    #[test]
    fn a_short_buffer_is_never_cut() {
        assert_eq!(
            cut_point(14.0, 0.0, &[3.0, 8.0, 14.0], Some(13.0), LIMITS),
            None
        );
    }

    #[test]
    fn cut_at_the_latest_closed_segment_the_commits_reach() {
        // segments end at 3, 8, 12 and 16 s; words committed up to 10 s
        let ends = [3.0, 8.0, 12.0, 16.0];
        assert_eq!(
            cut_point(16.0, 0.0, &ends, Some(10.0), LIMITS),
            Some(Cut::At(8.0))
        );
        // committed through 12.5 s: the third segment is done too
        assert_eq!(
            cut_point(16.0, 0.0, &ends, Some(12.5), LIMITS),
            Some(Cut::At(12.0))
        );
        // the last segment is never a cut point, even when committed
        assert_eq!(cut_point(16.0, 0.0, &[16.0], Some(16.0), LIMITS), None);
        // nothing committed in this buffer: no cut yet
        assert_eq!(cut_point(16.0, 5.0, &ends, Some(4.0), LIMITS), None);
        assert_eq!(cut_point(16.0, 0.0, &ends, None, LIMITS), None);
    }

    #[test]
    fn a_buffer_past_the_maximum_is_cut_anyway() {
        // one long segment: cut at the last committed word
        assert_eq!(
            cut_point(26.0, 1.0, &[27.0], Some(20.0), LIMITS),
            Some(Cut::At(20.0))
        );
        // nothing committed in 25 s: the hypothesis is taken as it is
        assert_eq!(
            cut_point(26.0, 1.0, &[27.0], None, LIMITS),
            Some(Cut::CommitAll)
        );
    }

    #[test]
    fn the_prompt_is_the_committed_text_before_the_buffer() {
        let w = |t: &str, end: f64| Word {
            text: t.into(),
            start_s: end - 0.3,
            end_s: end,
            confidence: 1.0,
        };
        let h: VecDeque<Word> = [w(" one", 1.0), w(" two", 2.0), w(" three", 3.0)].into();
        assert_eq!(prompt_text(&h, 2.5, 200), "one two");
        assert_eq!(prompt_text(&h, 9.0, 200), "one two three");
        assert_eq!(prompt_text(&h, 9.0, 7), "two three");
        assert_eq!(prompt_text(&h, 0.5, 200), "");
    }
}
