//! What greedy and beam search share: the run's description, a finished
//! hypothesis, and how hypotheses are scored and ranked at the end.

use super::logits::LogitRules;
use crate::whisper::WhisperError;

/// One decoding run after the prompt, as CTranslate2's `decode` sees it.
pub(crate) struct SearchSpec<'a> {
    /// The token fed at step 0 (the prompt's last task token, or
    /// `<|startoftranscript|>` when the prompt is only that).
    pub start: u32,
    /// Tokens forced at the first steps (a timestamp and the `prefix`
    /// text); they score 0 and stay in the hypothesis.
    pub prefix: Vec<u32>,
    /// Most steps, prefix included.
    pub max_length: usize,
    /// End of text.
    pub eot: u32,
    /// The logit rules.
    pub rules: &'a LogitRules,
    /// Token whose probability at step 0 (before any rule) is wanted: the
    /// no-speech token, when the start token is `<|startoftranscript|>`.
    pub no_speech: Option<u32>,
    /// Final scores are divided by `length ^ length_penalty`.
    pub length_penalty: f32,
}

impl SearchSpec<'_> {
    /// Checks the backend gave `rows` rows of `vocab` logits.
    pub(crate) fn check_logits(
        &self,
        got: usize,
        rows: usize,
        vocab: usize,
    ) -> Result<(), WhisperError> {
        if got != rows * vocab {
            return Err(WhisperError::BackendShape {
                what: "decoder logits",
                expected: rows * vocab,
                got,
            });
        }
        Ok(())
    }
}

/// A finished hypothesis: its tokens (prefix included, end of text not)
/// and its score (summed log-probabilities until `finalize` divides them).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Hypothesis {
    pub tokens: Vec<u32>,
    pub score: f32,
}

/// Divides each score by `length ^ length_penalty` (the end of text's
/// log-probability is in the sum, not in the length) and returns the best.
pub(crate) fn finalize(mut hyps: Vec<Hypothesis>, length_penalty: f32) -> Hypothesis {
    for h in &mut hyps {
        h.score /= (h.tokens.len() as f32).powf(length_penalty);
    }
    // Stable: on equal scores the earlier hypothesis wins.
    hyps.sort_by(|a, b| {
        b.score
            .partial_cmp(&a.score)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    hyps.into_iter().next().unwrap_or(Hypothesis {
        tokens: Vec::new(),
        score: f32::NEG_INFINITY,
    })
}
