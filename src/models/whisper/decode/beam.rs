//! Beam search as CTranslate2's `BeamSearch` runs it for one input.
//!
//! Each step keeps `2 * beam` candidates over all beams' cumulative
//! log-probabilities. A candidate among the first `beam` that ends the
//! text (or any on the last step) is registered as a hypothesis with its
//! cumulative score, the end of text's log-probability included, and its
//! beam is taken over by the next candidate that does not end. The search
//! stops once `round(beam * patience)` hypotheses are registered (or, with
//! no length penalty, once the best beam ended); the hypotheses are then
//! ranked by score over `length ^ length_penalty`.

use super::logits::{log_softmax, softmax_at, LogitRules};
use super::search::{drive, finalize, Choice, Hypothesis, SearchSpec, Stepper};
use crate::models::whisper::WhisperBackend;
use crate::ops::top_tokens::top_k;
use crate::Result;

/// The score CTranslate2 gives forced prefix candidates other than the first.
const PREFIX_PENALTY: f32 = -1e10;

/// Runs beam search of width `beam` from the backend's single started
/// sequence, whose prompt is already fed.
pub(crate) fn beam_search(
    backend: &mut dyn WhisperBackend,
    spec: &SearchSpec,
    beam: usize,
    patience: f32,
) -> Result<(Hypothesis, Option<f32>)> {
    let mut search = Beam::new(spec, beam, patience);
    drive(backend, &mut search)?;
    Ok(search.result())
}

/// Beam search as a [`Stepper`]. The first step runs on the single prompt
/// sequence; the beams fork from it (the reference does the same on the
/// CPU).
pub(crate) struct Beam<'s> {
    spec: &'s SearchSpec<'s>,
    beam: usize,
    /// Hypotheses that end the search (`round(beam * patience)`).
    max_candidates: usize,
    step: usize,
    inputs: Vec<u32>,
    /// Each row's cumulative log-probability (none before the fork).
    cum: Option<Vec<f32>>,
    sequences: Vec<Vec<u32>>,
    hyps: Vec<Hypothesis>,
    top_beam_finished: bool,
    no_speech: Option<f32>,
}

impl<'s> Beam<'s> {
    pub(crate) fn new(spec: &'s SearchSpec<'s>, beam: usize, patience: f32) -> Beam<'s> {
        let beam = beam.max(1);
        Beam {
            spec,
            beam,
            max_candidates: (beam as f32 * patience).round() as usize,
            step: 0,
            inputs: if spec.max_length == 0 {
                Vec::new()
            } else {
                vec![spec.start]
            },
            cum: None,
            sequences: vec![Vec::new()],
            hyps: Vec::new(),
            top_beam_finished: false,
            no_speech: None,
        }
    }
}

impl Stepper for Beam<'_> {
    fn inputs(&self) -> &[u32] {
        &self.inputs
    }

    fn advance(&mut self, logits: &mut [f32], vocab: usize) -> Option<Vec<usize>> {
        let (spec, step, beam) = (self.spec, self.step, self.beam);
        let prefix_len = spec.prefix.len();
        for (row, l) in logits.chunks_exact_mut(vocab).enumerate() {
            if step == 0 && row == 0 {
                if let Some(id) = spec.no_speech {
                    self.no_speech = Some(softmax_at(l, id));
                }
            }
            spec.rules.apply(step, l, &self.sequences[row], prefix_len);
            log_softmax(l);
            if let Some(c) = &self.cum {
                l.iter_mut().for_each(|v| *v += c[row]);
            }
        }
        let top = top_k(logits, 2 * beam);
        let words: Vec<u32> = top.iter().map(|&(i, _)| (i % vocab) as u32).collect();
        let scores: Vec<f32> = top.iter().map(|&(_, s)| s).collect();
        let origins: Vec<usize> = top.iter().map(|&(i, _)| i / vocab).collect();
        self.take(words, scores, origins)
    }

    fn choice(&mut self, vocab: usize) -> Option<Choice> {
        let n = self.inputs.len();
        let rows = self.sequences.iter().take(n).map(Vec::as_slice);
        let rules = self.spec.row_rules(self.step, rows, vocab)?;
        let cum = self
            .cum
            .clone()
            .unwrap_or_else(|| vec![0.0; self.inputs.len()]);
        Some(Choice {
            rules,
            cum,
            k: 2 * self.beam,
        })
    }

    fn advance_chosen(
        &mut self,
        ids: &[u32],
        scores: &[f32],
        stride: usize,
        no_speech: &[f32],
    ) -> Option<Vec<usize>> {
        if self.step == 0 && self.spec.no_speech.is_some() {
            self.no_speech = no_speech.first().copied();
        }
        // every row's best, merged as one top-k over the rows would rank
        // them: by score, then row, then id
        let k = (2 * self.beam).min(stride);
        let mut all: Vec<(f32, usize, u32)> = Vec::with_capacity(scores.len() / stride.max(1) * k);
        for (row, (ids, scores)) in ids.chunks(stride).zip(scores.chunks(stride)).enumerate() {
            all.extend((0..k).map(|j| (scores[j], row, ids[j])));
        }
        all.sort_by(|a, b| b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
        all.truncate(2 * self.beam);
        let words = all.iter().map(|c| c.2).collect();
        let scores = all.iter().map(|c| c.0).collect();
        let origins = all.iter().map(|c| c.1).collect();
        self.take(words, scores, origins)
    }

    fn rules(&self) -> &LogitRules {
        self.spec.rules
    }

    fn result(&mut self) -> (Hypothesis, Option<f32>) {
        let hyps = std::mem::take(&mut self.hyps);
        (finalize(hyps, self.spec.length_penalty), self.no_speech)
    }
}

impl Beam<'_> {
    /// The step's continuation from its best `2 * beam` candidates (word,
    /// cumulative score, row it extends), best first.
    fn take(
        &mut self,
        mut words: Vec<u32>,
        mut scores: Vec<f32>,
        mut origins: Vec<usize>,
    ) -> Option<Vec<usize>> {
        let (spec, step, beam) = (self.spec, self.step, self.beam);
        let prefix_len = spec.prefix.len();
        if prefix_len > 0 && step <= prefix_len {
            force_prefix(spec, step, &mut words, &mut scores, &mut origins);
        }

        let sequences = &self.sequences;
        let candidate = |k: usize| -> Vec<u32> {
            let mut s = sequences[origins[k]].clone();
            s.push(words[k]);
            s
        };
        let is_last = step + 1 == spec.max_length;
        let mut secondary = beam;
        let mut active = Vec::with_capacity(beam);
        for k in 0..beam.min(words.len()) {
            let mut next = k;
            let is_eot = words[k] == spec.eot;
            if (is_eot && step >= prefix_len) || is_last {
                if k == 0 {
                    self.top_beam_finished = true;
                }
                let end = if is_eot { step } else { step + 1 };
                self.hyps.push(Hypothesis {
                    tokens: candidate(k)[..end].to_vec(),
                    score: scores[k],
                });
                if let Some(j) = (secondary..words.len()).find(|&j| words[j] != spec.eot) {
                    next = j;
                    secondary = j + 1;
                }
            }
            active.push(next);
        }
        // with no length penalty, the search ends once the best beam ended
        let done = is_last
            || if spec.length_penalty == 0.0 {
                self.top_beam_finished && !self.hyps.is_empty()
            } else {
                self.hyps.len() >= self.max_candidates
            };
        self.step += 1;
        if done {
            self.inputs.clear();
            return None;
        }
        let new_sequences: Vec<Vec<u32>> = active.iter().map(|&k| candidate(k)).collect();
        self.sequences = new_sequences;
        self.inputs = active.iter().map(|&k| words[k]).collect();
        self.cum = Some(active.iter().map(|&k| scores[k]).collect());
        Some(active.iter().map(|&k| origins[k]).collect())
    }
}

/// CTranslate2's `update_sample_with_prefix`: while in the prefix every
/// candidate is the prefix token from the first beam (only the first
/// scored 0); at the first free step, secondary candidates that end the
/// text become token 0 with a prohibitive score.
fn force_prefix(
    spec: &SearchSpec,
    step: usize,
    words: &mut [u32],
    scores: &mut [f32],
    origins: &mut [usize],
) {
    for k in 0..words.len() {
        if step < spec.prefix.len() {
            words[k] = spec.prefix[step];
            scores[k] = if k == 0 { 0.0 } else { PREFIX_PENALTY };
            origins[k] = 0;
        } else if k > 0 && words[k] == spec.eot {
            words[k] = 0;
            scores[k] = PREFIX_PENALTY;
            origins[k] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::whisper::decode::logits::LogitRules;
    use crate::models::whisper::decode::testing::Scripted;

    const V: usize = 8;
    const EOT: u32 = 5;

    fn spec(rules: &LogitRules, length_penalty: f32, prefix: Vec<u32>) -> SearchSpec<'_> {
        SearchSpec {
            start: 7,
            prefix,
            max_length: 6,
            eot: EOT,
            rules,
            no_speech: None,
            length_penalty,
        }
    }

    /// Log-probabilities given as probabilities (what is left spread over
    /// the other tokens).
    fn probs(p: &[(u32, f32)]) -> Vec<f32> {
        let left = 1.0 - p.iter().map(|&(_, q)| q).sum::<f32>();
        let mut l = vec![(left.max(1e-6) / (V - p.len()) as f32).ln(); V];
        for &(i, q) in p {
            l[i as usize] = q.ln();
        }
        l
    }

    /// After the start: 1 (0.6) or 2 (0.4). After 1: end (0.55) or 3
    /// (0.45). After 2: 4 (0.9). Then: end (0.9).
    fn backend() -> Scripted {
        Scripted::new(V, |_w, seq: &[u32]| match seq {
            [.., 7] => probs(&[(1, 0.6), (2, 0.4)]),
            [.., 7, 1] => probs(&[(EOT, 0.55), (3, 0.45)]),
            [.., 7, 2] => probs(&[(4, 0.9)]),
            _ => probs(&[(EOT, 0.9)]),
        })
    }

    fn run(length_penalty: f32, beam: usize, prefix: Vec<u32>) -> Hypothesis {
        let mut b = backend();
        b.start(&[0]).unwrap();
        let rules = LogitRules::default();
        beam_search(&mut b, &spec(&rules, length_penalty, prefix), beam, 1.0)
            .unwrap()
            .0
    }

    #[test]
    fn without_length_penalty_the_likeliest_sequence_wins() {
        // "1" ends at step 1 (0.6 * 0.55 = 0.33, end included) while the
        // best beam goes on; "2 4" ends at step 2 (0.4 * 0.9 * 0.9 = 0.324).
        let h = run(0.0, 2, vec![]);
        assert_eq!(h.tokens, vec![1]);
        assert!((h.score - 0.33f32.ln()).abs() < 1e-3, "{}", h.score);
    }

    #[test]
    fn length_penalty_divides_by_length() {
        // ln(0.33) / 1 = -1.11 against ln(0.324) / 2 = -0.56.
        let h = run(1.0, 2, vec![]);
        assert_eq!(h.tokens, vec![2, 4]);
        assert!((h.score - (0.4f32 * 0.9 * 0.9).ln() / 2.0).abs() < 1e-3);
    }

    #[test]
    fn forced_prefix_is_kept_and_scores_zero() {
        let h = run(1.0, 2, vec![2]);
        assert_eq!(h.tokens, vec![2, 4]);
        assert!(
            (h.score - (0.9f32 * 0.9).ln() / 2.0).abs() < 1e-3,
            "{}",
            h.score
        );
    }

    #[test]
    fn top_k_orders_best_first_lower_index_on_ties() {
        assert_eq!(
            top_k(&[0.1, 0.5, 0.5, -1.0, 0.7], 3),
            vec![(4, 0.7), (1, 0.5), (2, 0.5)]
        );
    }
}
