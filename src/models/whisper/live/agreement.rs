//! LocalAgreement-2 (Macháček et al., "Turning Whisper into Real-Time
//! Transcription System", 2023; whisper_streaming's `HypothesisBuffer`):
//! each re-decoding of the rolling buffer gives a hypothesis of timed words;
//! the longest prefix that two consecutive hypotheses agree on is committed
//! and never changes again.
//!
//! Words are compared by [`word_key`] (lower case, letters and digits only):
//! a word that gains a full stop or a capital once the sentence goes on is
//! the same word. The committed text is the newer hypothesis's.

use crate::decode::Word;

/// How far (seconds) before the last committed word's end a new word may
/// start and still be taken as new (word times jitter between decodings).
const START_SLACK_S: f64 = 0.1;
/// A hypothesis whose first word starts within this many seconds of the
/// last committed end may repeat committed words at its head.
const OVERLAP_WINDOW_S: f64 = 1.0;
/// Longest repeated head (in words) looked for.
const MAX_OVERLAP_WORDS: usize = 5;

/// What a word is compared by.
pub fn word_key(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// The committed words and the latest unconfirmed hypothesis.
#[derive(Debug, Clone, Default)]
pub struct LocalAgreement {
    /// Committed words whose audio is still in the rolling buffer (to
    /// recognise them when a hypothesis repeats them).
    committed_in_buffer: Vec<Word>,
    /// End of the last committed word (stream seconds).
    last_committed_end: f64,
    /// The previous hypothesis, less what was committed.
    previous: Vec<Word>,
}

impl LocalAgreement {
    pub fn new() -> LocalAgreement {
        LocalAgreement::default()
    }

    /// Takes a new hypothesis (words in stream time) and returns the words
    /// it commits: its longest prefix that agrees with the previous one.
    pub fn commit(&mut self, hypothesis: Vec<Word>) -> Vec<Word> {
        let mut new = self.strip_committed(hypothesis);
        let agreed = new
            .iter()
            .zip(&self.previous)
            .take_while(|(a, b)| word_key(&a.text) == word_key(&b.text))
            .count();
        let committed: Vec<Word> = new.drain(..agreed).collect();
        if let Some(w) = committed.last() {
            self.last_committed_end = w.end_s;
        }
        self.committed_in_buffer.extend(committed.iter().cloned());
        self.previous = new;
        committed
    }

    /// The utterance ended: its last decoding (if any) commits what it
    /// agrees on, then every word left is committed; all are returned. An
    /// empty last decoding (a buffer Whisper skipped as silence) leaves the
    /// unconfirmed words to be committed as they stand.
    pub fn complete(&mut self, last: Option<Vec<Word>>) -> Vec<Word> {
        let mut words = match last {
            Some(h) if !h.is_empty() => self.commit(h),
            _ => Vec::new(),
        };
        words.extend(self.commit_all());
        words
    }

    /// Commits the whole last hypothesis (the utterance ended) and returns it.
    pub fn commit_all(&mut self) -> Vec<Word> {
        let rest = std::mem::take(&mut self.previous);
        if let Some(w) = rest.last() {
            self.last_committed_end = w.end_s;
        }
        self.committed_in_buffer.extend(rest.iter().cloned());
        rest
    }

    /// The unconfirmed words of the last hypothesis.
    pub fn tentative(&self) -> &[Word] {
        &self.previous
    }

    /// End of the last committed word (stream seconds), 0 before any.
    pub fn last_committed_end(&self) -> f64 {
        self.last_committed_end
    }

    /// Whether any word was committed since the buffer was last cut.
    pub fn has_committed(&self) -> bool {
        !self.committed_in_buffer.is_empty()
    }

    /// The buffer was cut at `t` (stream seconds): committed words ending
    /// by then are no longer in it.
    pub fn forget_before(&mut self, t: f64) {
        let gone = self
            .committed_in_buffer
            .iter()
            .take_while(|w| w.end_s <= t)
            .count();
        self.committed_in_buffer.drain(..gone);
    }

    /// Drops from a hypothesis what was already committed: words that start
    /// before the last committed end, and a head of up to five words that
    /// repeats the committed tail.
    fn strip_committed(&self, hypothesis: Vec<Word>) -> Vec<Word> {
        let floor = self.last_committed_end - START_SLACK_S;
        let mut new: Vec<Word> = hypothesis
            .into_iter()
            .filter(|w| w.start_s > floor)
            .collect();
        let near = new
            .first()
            .is_some_and(|w| (w.start_s - self.last_committed_end).abs() < OVERLAP_WINDOW_S);
        if near {
            let c = &self.committed_in_buffer;
            let most = c.len().min(new.len()).min(MAX_OVERLAP_WORDS);
            for i in 1..=most {
                let tail = &c[c.len() - i..];
                let same = tail
                    .iter()
                    .zip(&new[..i])
                    .all(|(a, b)| word_key(&a.text) == word_key(&b.text));
                if same {
                    new.drain(..i);
                    break;
                }
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words `text` one per 0.5 s from `start`.
    fn words(start: f64, text: &str) -> Vec<Word> {
        text.split_whitespace()
            .enumerate()
            .map(|(i, t)| Word {
                text: t.into(),
                start_s: start + 0.5 * i as f64,
                end_s: start + 0.5 * i as f64 + 0.4,
                confidence: 1.0,
            })
            .collect()
    }

    fn texts(w: &[Word]) -> String {
        w.iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn an_utterance_is_completed_by_its_last_decoding_if_it_gave_words() {
        let mut a = LocalAgreement::new();
        a.commit(words(0.0, "he was not"));
        let mut empty = a.clone();
        assert_eq!(texts(&empty.complete(Some(Vec::new()))), "he was not");
        let mut none = a.clone();
        assert_eq!(texts(&none.complete(None)), "he was not");
        assert_eq!(
            texts(&a.complete(Some(words(0.0, "he was an ill")))),
            "he was an ill"
        );
        assert!(a.tentative().is_empty());
    }

    #[test]
    fn commits_the_prefix_two_hypotheses_agree_on() {
        let mut a = LocalAgreement::new();
        assert!(a.commit(words(0.0, "he was not")).is_empty());
        assert_eq!(texts(a.tentative()), "he was not");
        // "not an" vs "not": agreement stops at the first difference
        let c = a.commit(words(0.0, "he was not an ill"));
        assert_eq!(texts(&c), "he was not");
        assert_eq!(texts(a.tentative()), "an ill");
        assert!((a.last_committed_end() - 1.4).abs() < 1e-9);
        // a revision of the tentative tail commits nothing
        assert!(a.commit(words(0.0, "he was not in ill will")).is_empty());
        assert_eq!(texts(a.tentative()), "in ill will");
        let c = a.commit(words(0.0, "he was not in ill will disposed"));
        assert_eq!(texts(&c), "in ill will");
        assert_eq!(texts(a.tentative()), "disposed");
    }

    #[test]
    fn punctuation_and_case_do_not_block_agreement() {
        let mut a = LocalAgreement::new();
        a.commit(words(0.0, "young man."));
        let c = a.commit(words(0.0, "Young man, who"));
        assert_eq!(texts(&c), "Young man,", "the newer text is committed");
        assert_eq!(word_key("Man,"), "man");
    }

    #[test]
    fn a_repeated_committed_head_is_dropped() {
        let mut a = LocalAgreement::new();
        a.commit(words(0.0, "one two three"));
        a.commit(words(0.0, "one two three four"));
        assert!((a.last_committed_end() - 1.4).abs() < 1e-9);
        // the buffer now starts later: Whisper repeats "three" with a time
        // after the committed end (the prompt did not hold it back)
        let c = a.commit(words(1.45, "three four five"));
        assert_eq!(texts(&c), "four");
        assert_eq!(texts(a.tentative()), "five");
        // "three" now lies before the committed end, "four" is the head
        let c = a.commit(words(1.45, "three four five six"));
        assert_eq!(texts(&c), "five");
        assert_eq!(texts(a.tentative()), "six");
    }

    #[test]
    fn words_before_the_committed_end_are_not_new() {
        let mut a = LocalAgreement::new();
        a.commit(words(0.0, "a b c"));
        a.commit(words(0.0, "a b c"));
        assert_eq!(texts(a.tentative()), "");
        let c = a.commit(words(0.0, "a b c d"));
        assert!(c.is_empty());
        assert_eq!(texts(a.tentative()), "d");
        assert_eq!(texts(&a.commit_all()), "d");
        assert!(a.tentative().is_empty());
        assert!((a.last_committed_end() - 1.9).abs() < 1e-9);
    }

    #[test]
    fn forgetting_keeps_only_committed_words_after_the_cut() {
        let mut a = LocalAgreement::new();
        a.commit(words(0.0, "a b c d"));
        a.commit(words(0.0, "a b c d"));
        assert!(a.has_committed());
        a.forget_before(0.9);
        assert_eq!(texts(&a.committed_in_buffer), "c d");
        a.forget_before(10.0);
        assert!(!a.has_committed());
    }
}
