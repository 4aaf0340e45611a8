//! Partial error rates: how right the text a live user sees is while the
//! speech goes on, not only once a line is final.
//!
//! At each partial update (stream time `t`) the text shown (the final lines
//! before it, then the partial line) is scored against the reference words
//! spoken by `t`. A reference has no times, so each reference word takes the
//! end time of the final word it aligns with (a word-level edit-distance
//! alignment); a reference word the final text left out takes the time of
//! the next aligned word (the end of the audio after the last). The rate
//! counts both errors and lag: a word shown before it was spoken, or not
//! yet shown after, is an error at that update.

use super::metrics::{normalize, ErrorCounts};

/// The text shown at one moment of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    /// Stream time (seconds of audio taken) when it was shown.
    pub at_s: f64,
    pub text: String,
}

/// A word-level edit alignment (the fewest edits): for each item of `a`,
/// the item of `b` it is kept or substituted with.
pub fn align<T: PartialEq>(a: &[T], b: &[T]) -> Vec<Option<usize>> {
    let (n, m) = (a.len(), b.len());
    // d[i][j]: edits between the first i items of a and j of b
    let mut d = vec![vec![0usize; m + 1]; n + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=m).collect();
    let cost = |i: usize, j: usize| usize::from(a[i] != b[j]);
    for i in 1..=n {
        for j in 1..=m {
            d[i][j] = (d[i - 1][j - 1] + cost(i - 1, j - 1))
                .min(d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1);
        }
    }
    let mut out = vec![None; n];
    let (mut i, mut j) = (n, m);
    while i > 0 && j > 0 {
        if d[i][j] == d[i - 1][j - 1] + cost(i - 1, j - 1) {
            out[i - 1] = Some(j - 1);
            i -= 1;
            j -= 1;
        } else if d[i][j] == d[i - 1][j] + 1 {
            i -= 1;
        } else {
            j -= 1;
        }
    }
    out
}

/// For each reference word, the time it was spoken by: the end of the final
/// word it aligns with (`finals`: normalised words and their end times).
/// Unaligned reference words take the next aligned time, else `end_s`.
pub fn reference_times(reference: &[&str], finals: &[(String, f64)], end_s: f64) -> Vec<f64> {
    let words: Vec<&str> = finals.iter().map(|(w, _)| w.as_str()).collect();
    let at = align(reference, &words);
    let mut next = end_s;
    let mut out = vec![0.0; reference.len()];
    for k in (0..reference.len()).rev() {
        if let Some(j) = at[k] {
            next = finals[j].1.min(next);
        }
        out[k] = at[k].map_or(next, |j| finals[j].1);
    }
    out
}

/// The errors of every shown text against the reference words spoken by
/// its time (`finals` as for [`reference_times`], raw text: normalised here).
pub fn partial_counts(
    reference: &str,
    finals: &[(String, f64)],
    shown: &[Shown],
    end_s: f64,
) -> ErrorCounts {
    let reference = normalize(reference);
    let words: Vec<&str> = reference.split_whitespace().collect();
    let finals: Vec<(String, f64)> = finals
        .iter()
        .flat_map(|(w, t)| {
            normalize(w)
                .split_whitespace()
                .map(|p| (p.to_string(), *t))
                .collect::<Vec<_>>()
        })
        .collect();
    let times = reference_times(&words, &finals, end_s);
    let mut counts = ErrorCounts::default();
    for s in shown {
        let spoken = times.iter().take_while(|&&t| t <= s.at_s).count();
        counts.add(&words[..spoken].join(" "), &normalize(&s.text));
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(words: &[(&str, f64)]) -> Vec<(String, f64)> {
        words.iter().map(|(w, t)| (w.to_string(), *t)).collect()
    }

    #[test]
    fn an_alignment_pairs_kept_and_substituted_words() {
        let a = ["the", "black", "cat", "sad"];
        let b = ["the", "cat", "sat"];
        assert_eq!(align(&a, &b), vec![Some(0), None, Some(1), Some(2)]);
        assert_eq!(align::<&str>(&[], &b), Vec::<Option<usize>>::new());
        assert_eq!(align(&a, &[]), vec![None; 4]);
    }

    #[test]
    fn reference_words_take_the_times_of_the_words_they_align_with() {
        let finals = timed(&[("the", 0.5), ("cat", 1.0), ("sat", 1.5), ("down", 2.0)]);
        // "black" left out: the next aligned word's time; "now" after the
        // last: the end of the audio; "sad" for "sat": a substitution aligns
        let r = ["the", "black", "cat", "sad", "down", "now"];
        assert_eq!(
            reference_times(&r, &finals, 3.0),
            vec![0.5, 1.0, 1.0, 1.5, 2.0, 3.0]
        );
        assert_eq!(reference_times(&[], &finals, 3.0), Vec::<f64>::new());
        assert_eq!(reference_times(&["a"], &[], 3.0), vec![3.0]);
    }

    fn shown(at_s: f64, text: &str) -> Shown {
        Shown {
            at_s,
            text: text.into(),
        }
    }

    /// Word edits and reference words of `shown` against `reference`.
    fn rate(
        reference: &str,
        finals: &[(&str, f64)],
        shown: &[Shown],
        end_s: f64,
    ) -> (usize, usize) {
        let c = partial_counts(reference, &timed(finals), shown, end_s);
        (c.word_edits, c.words)
    }

    #[test]
    fn a_shown_text_is_scored_against_what_was_spoken_by_then() {
        let finals = [("The", 0.5), ("cat", 1.0), ("sat.", 1.5)];
        let said = "the cat sat";
        // right at each moment: no error
        let on_time = [shown(0.6, "The"), shown(1.2, "the cat")];
        assert_eq!(rate(said, &finals, &on_time, 2.0), (0, 3));
        // a word guessed before it was said, and one shown late
        let off = [shown(0.6, "the cat"), shown(1.6, "the cat")];
        assert_eq!(rate(said, &finals, &off, 2.0), (2, 4));
        // nothing spoken yet and nothing shown
        assert_eq!(rate(said, &finals, &[shown(0.1, "")], 2.0), (0, 0));
    }

    #[test]
    fn hyphenated_finals_time_each_of_their_words() {
        let finals = [("ill-disposed", 1.0), ("man.", 2.0)];
        let at_one = [shown(1.0, "Ill-disposed")];
        assert_eq!(rate("ill disposed man", &finals, &at_one, 2.5), (0, 2));
    }
}
