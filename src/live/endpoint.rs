//! End-of-speech detection from CTC blanks: an utterance ends when no token
//! has been emitted for a while after the last word.

use crate::decode::Word;

/// Tracks which words were already given out as final.
#[derive(Debug, Clone)]
pub struct Endpointer {
    silence_frames: usize,
    committed: usize,
    pending: bool,
}

impl Endpointer {
    /// An utterance ends after `silence_frames` encoder frames without a token.
    pub fn new(silence_frames: usize) -> Endpointer {
        Endpointer {
            silence_frames: silence_frames.max(1),
            committed: 0,
            pending: false,
        }
    }

    /// The words not yet given out as final.
    pub fn uncommitted<'a>(&mut self, words: &'a [Word]) -> &'a [Word] {
        let w = words.get(self.committed..).unwrap_or(&[]);
        self.pending = !w.is_empty();
        w
    }

    /// True when uncommitted words wait for their end of utterance.
    pub fn pending(&self) -> bool {
        self.pending
    }

    /// Whether the trailing blanks after the last token mark an end of speech.
    pub fn utterance_ended(&self, frames: usize, last_token_frame: Option<usize>) -> bool {
        match last_token_frame {
            Some(f) => frames.saturating_sub(f + 1) >= self.silence_frames,
            None => false,
        }
    }

    /// Marks `n` more words as final.
    pub fn commit(&mut self, n: usize) {
        self.committed += n;
        self.pending = false;
    }

    /// The transcript starts afresh (a cut beam search): no word of the new
    /// one is final yet.
    pub fn restart(&mut self) {
        self.committed = 0;
        self.pending = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(t: &str) -> Word {
        Word {
            text: t.into(),
            start_s: 0.0,
            end_s: 0.1,
            confidence: 1.0,
        }
    }

    #[test]
    fn ends_after_enough_blanks_and_commits_once() {
        let mut e = Endpointer::new(5);
        let words = vec![word("a"), word("b")];
        assert_eq!(e.uncommitted(&words).len(), 2);
        assert!(!e.utterance_ended(10, Some(7)));
        assert!(e.utterance_ended(13, Some(7)));
        assert!(!e.utterance_ended(100, None));
        e.commit(2);
        assert!(e.uncommitted(&words).is_empty());
        let more = vec![word("a"), word("b"), word("c")];
        assert_eq!(e.uncommitted(&more)[0].text, "c");
    }
}
