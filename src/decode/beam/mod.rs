//! CTC prefix beam search over full log-prob rows.
//!
//! Each prefix (a collapsed token sequence) carries the log-probabilities of
//! all alignments that produce it and end in a blank (`pb`) or in its last
//! token (`pnb`); the beam keeps the `width` prefixes of highest total
//! `logaddexp(pb, pnb)` after every frame. Beside the sums it keeps, for each
//! of the two states, the best single alignment (Viterbi score and path): the
//! tokens' frames come from the best alignment of the winning prefix.
//!
//! Prefixes live in a trie and alignments in an arena of spans with parent
//! links, so a frame costs the same however long the input; both are
//! compacted to what the beam still reaches every [`COMPACT_EVERY`] frames,
//! so memory stays bounded on hour-long files.

mod entry;
mod spans;
mod step;
mod trie;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use super::lm::LmScorer;
use super::{DecodeError, FrameTiming, TokenSpan, Tokens, Transcript};
use entry::{Candidate, Entry};
use spans::Spans;
use trie::Trie;

/// One result of [`prefix_beam_search`].
#[derive(Debug, Clone, PartialEq)]
pub struct Hypothesis {
    /// Token ids of the prefix (collapsed, no blanks).
    pub tokens: Vec<usize>,
    /// For each token, the frames that emit it in the prefix's best alignment
    /// (`spans[i].first_frame` is where `tokens[i]` was emitted).
    pub spans: Vec<TokenSpan>,
    /// Log-probability of the prefix: the sum over all its alignments.
    pub log_prob: f64,
    /// What a language model added (0 without one); hypotheses are ranked
    /// by `log_prob + lm_score`.
    pub lm_score: f64,
}

impl Hypothesis {
    /// The words of this hypothesis over `n_frames` frames.
    pub fn transcript(
        &self,
        tokens: &Tokens,
        timing: FrameTiming,
        n_frames: usize,
    ) -> Result<Transcript, DecodeError> {
        timing.check()?;
        Transcript::from_spans(&self.spans, tokens, timing, n_frames)
    }
}

fn logaddexp(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY {
        return b;
    }
    if b == f64::NEG_INFINITY {
        return a;
    }
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    hi + (lo - hi).exp().ln_1p()
}

/// Frames between compactions of the trie and the span arena.
const COMPACT_EVERY: usize = 128;

/// Runs CTC prefix beam search over `frames` rows of `vocab` log-probs
/// (row-major, `log_probs[t * vocab + v]`) and returns up to `width`
/// hypotheses, most probable first.
///
/// Rows need not be normalised, but each must hold a finite value; NaN or
/// +inf is an error. With zero frames the result is one empty hypothesis.
///
/// Width 1 keeps the single most probable prefix after each frame. On the
/// peaky rows CTC models produce it gives the greedy result, but not on every
/// input: after `a` (0.6) a frame with `b` 0.4, `a` 0.35, blank 0.25 makes
/// greedy write `ab` while the prefix `a` (0.36) beats `ab` (0.24).
pub fn prefix_beam_search(
    log_probs: &[f32],
    frames: usize,
    vocab: usize,
    blank: usize,
    width: usize,
) -> Result<Vec<Hypothesis>, DecodeError> {
    prefix_beam_search_lm(log_probs, frames, vocab, blank, width, None)
}

/// [`prefix_beam_search`] with prefixes ranked by their CTC log-probability
/// plus what `lm` adds (shallow fusion of a word language model).
pub fn prefix_beam_search_lm(
    log_probs: &[f32],
    frames: usize,
    vocab: usize,
    blank: usize,
    width: usize,
    lm: Option<Arc<LmScorer>>,
) -> Result<Vec<Hypothesis>, DecodeError> {
    let mut search = BeamSearch::new(vocab, blank, width, lm)?;
    let expected = frames
        .checked_mul(vocab)
        .ok_or_else(|| DecodeError::Shape(format!("{frames} frames x {vocab} tokens overflows")))?;
    if log_probs.len() != expected {
        return Err(DecodeError::Shape(format!(
            "{} values for {frames} frames x {vocab} tokens (= {expected})",
            log_probs.len()
        )));
    }
    search.push(log_probs)?;
    Ok(search.finish())
}

/// CTC prefix beam search fed rows of log-probs as they come (a stream),
/// holding only what the beam reaches: memory stays bounded however long
/// the input. [`prefix_beam_search`] is one [`BeamSearch::push`] of every row.
pub struct BeamSearch {
    vocab: usize,
    blank: usize,
    width: usize,
    compact_every: usize,
    /// Frames consumed.
    t: usize,
    trie: Trie,
    spans: Spans,
    beam: Vec<Entry>,
    cands: Vec<Candidate>,
    index: HashMap<u32, usize>,
}

impl BeamSearch {
    /// A search over rows of `vocab` log-probs with CTC blank `blank`,
    /// keeping `width` prefixes, weighed by `lm` when given.
    pub fn new(
        vocab: usize,
        blank: usize,
        width: usize,
        lm: Option<Arc<LmScorer>>,
    ) -> Result<BeamSearch, DecodeError> {
        if width == 0 {
            return Err(DecodeError::Param("beam width must be at least 1".into()));
        }
        if vocab == 0 || blank >= vocab {
            return Err(DecodeError::Param(format!(
                "blank id {blank} must be below the vocabulary size {vocab}"
            )));
        }
        if vocab > u32::MAX as usize {
            return Err(DecodeError::Param(format!(
                "vocabulary of {vocab} is too large"
            )));
        }
        Ok(BeamSearch {
            vocab,
            blank,
            width,
            compact_every: COMPACT_EVERY,
            t: 0,
            trie: Trie::new(lm),
            spans: Spans::default(),
            beam: vec![Entry::start()],
            cands: Vec::new(),
            index: HashMap::new(),
        })
    }

    /// Back to no frames, keeping the language model.
    pub fn reset(&mut self) {
        self.t = 0;
        self.trie = Trie::new(self.trie.lm.clone());
        self.spans = Spans::default();
        self.beam = vec![Entry::start()];
    }

    /// Frames consumed so far.
    pub fn frames(&self) -> usize {
        self.t
    }

    /// Consumes whole rows (`rows.len()` a multiple of the vocabulary). Rows
    /// need not be normalised, but each must hold a finite value; on NaN,
    /// +inf or a row of -inf it is an error and no row of this call is used.
    pub fn push(&mut self, rows: &[f32]) -> Result<(), DecodeError> {
        let vocab = self.vocab;
        if !rows.len().is_multiple_of(vocab) {
            return Err(DecodeError::Shape(format!(
                "{} values are not whole rows of {vocab} tokens",
                rows.len()
            )));
        }
        for (i, row) in rows.chunks_exact(vocab).enumerate() {
            let t = self.t + i;
            if let Some(token) = row.iter().position(|v| v.is_nan() || *v == f32::INFINITY) {
                return Err(DecodeError::NonFinite {
                    value: row[token],
                    frame: t,
                    token,
                });
            }
            if row.iter().all(|v| *v == f32::NEG_INFINITY) {
                return Err(DecodeError::Shape(format!(
                    "frame {t} has no finite log-prob"
                )));
            }
        }
        for row in rows.chunks_exact(vocab) {
            self.step(row);
        }
        Ok(())
    }

    /// Up to `width` hypotheses over the frames so far, most probable first
    /// (with a language model, its end-of-sentence score included).
    pub fn finish(&self) -> Vec<Hypothesis> {
        let mut hyps: Vec<Hypothesis> = self.beam.iter().map(|e| self.hypothesis(e)).collect();
        // the last word and the sentence end can reorder the beam
        hyps.sort_by(|a, b| (b.log_prob + b.lm_score).total_cmp(&(a.log_prob + a.lm_score)));
        hyps
    }

    /// The first of [`BeamSearch::finish`], without building the others
    /// (partial text asks for it after every chunk).
    pub fn best(&self) -> Option<Hypothesis> {
        let rank = |e: &Entry| e.total() + self.trie.score(e.node, true);
        let mut best: Option<&Entry> = None;
        for e in &self.beam {
            if best.is_none_or(|b| rank(e) > rank(b)) {
                best = Some(e);
            }
        }
        best.map(|e| self.hypothesis(e))
    }

    fn hypothesis(&self, e: &Entry) -> Hypothesis {
        let (_, best_is_b) = e.best();
        Hypothesis {
            tokens: self.trie.tokens(e.node),
            spans: self.spans.collect(e.path(best_is_b)),
            log_prob: e.total(),
            lm_score: self.trie.score(e.node, true),
        }
    }
}
