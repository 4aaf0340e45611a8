//! Error rates of a hypothesis against a reference: character and word
//! edit distances, as used in the model card.

/// Levenshtein distance between two sequences.
pub fn edit_distance<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, x) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(x != y))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// Text as error rates compare it: lower case, hyphens as spaces,
/// punctuation dropped (apostrophes kept), so that a model that writes
/// "Ill-disposed." is not charged for the case and the full stop.
///
/// ```
/// assert_eq!(pulsed::asr::metrics::normalize("He's ill-disposed, (really)!"), "he's ill disposed really");
/// ```
pub fn normalize(text: &str) -> String {
    let kept: String = text
        .to_lowercase()
        .chars()
        .map(|c| if c == '-' { ' ' } else { c })
        .filter(|&c| c.is_alphanumeric() || c == '_' || c == '\'' || c.is_whitespace())
        .collect();
    kept.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Edit counts summed over a set of utterances.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ErrorCounts {
    pub char_edits: usize,
    pub chars: usize,
    pub word_edits: usize,
    pub words: usize,
}

impl ErrorCounts {
    /// Adds one utterance (texts compared after collapsing whitespace).
    pub fn add(&mut self, reference: &str, hypothesis: &str) {
        let (rw, hw): (Vec<&str>, Vec<&str>) = (
            reference.split_whitespace().collect(),
            hypothesis.split_whitespace().collect(),
        );
        let (rc, hc): (Vec<char>, Vec<char>) = (
            rw.join(" ").chars().collect(),
            hw.join(" ").chars().collect(),
        );
        self.char_edits += edit_distance(&rc, &hc);
        self.chars += rc.len();
        self.word_edits += edit_distance(&rw, &hw);
        self.words += rw.len();
    }

    /// Adds another set's counts.
    pub fn merge(&mut self, other: &ErrorCounts) {
        self.char_edits += other.char_edits;
        self.chars += other.chars;
        self.word_edits += other.word_edits;
        self.words += other.words;
    }

    /// Character error rate (0..; can exceed 1 with many insertions).
    pub fn cer(&self) -> f64 {
        self.char_edits as f64 / self.chars.max(1) as f64
    }

    /// Word error rate.
    pub fn wer(&self) -> f64 {
        self.word_edits as f64 / self.words.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_and_rates() {
        assert_eq!(
            edit_distance(
                &['k', 'i', 't', 't', 'e', 'n'],
                &['s', 'i', 't', 't', 'i', 'n', 'g']
            ),
            3
        );
        assert_eq!(edit_distance::<u8>(&[], &[1, 2]), 2);
        let mut e = ErrorCounts::default();
        e.add("the cat sat", "the cat  sat");
        assert_eq!((e.cer(), e.wer()), (0.0, 0.0));
        e.add("a b", "a c d");
        assert_eq!(e.word_edits, 2);
        assert_eq!(e.words, 5);
        assert!((e.wer() - 0.4).abs() < 1e-12);
    }
}
