//! Greedy search and sampling (CTranslate2's `GreedySearch`): one token per
//! step, the best one at temperature 0, else drawn from the softmax of the
//! log-probabilities over the temperature; several samples run as a batch
//! and the best-scoring one is kept.

use rand::Rng;

use super::logits::{log_softmax, softmax_at, LogitRules};
use super::search::{drive, finalize, Choice, Hypothesis, SearchSpec, Stepper};
use crate::models::whisper::WhisperBackend;
use crate::ops::top_tokens::{argmax, draw};
use crate::Result;

/// Draws at `temperature` for `samples` sequences (`None`: greedy, one).
pub(crate) struct Sampling<'r, R: Rng> {
    pub temperature: f32,
    pub samples: usize,
    pub rng: &'r mut R,
}

/// Runs greedy search (or sampling) from the backend's single started
/// sequence, whose prompt is already fed; returns the best hypothesis and
/// the no-speech probability when `spec.no_speech` asked for it.
pub(crate) fn greedy_search<R: Rng + Send>(
    backend: &mut dyn WhisperBackend,
    spec: &SearchSpec,
    sampling: Option<Sampling<'_, R>>,
) -> Result<(Hypothesis, Option<f32>)> {
    let mut search = Greedy::new(spec, sampling);
    drive(backend, &mut search)?;
    Ok(search.result())
}

/// Greedy search (or sampling) as a [`Stepper`]: one row per sample, all
/// fed `spec.start` first; a row leaves when its sample ends.
pub(crate) struct Greedy<'s, 'r, R: Rng> {
    spec: &'s SearchSpec<'s>,
    sampling: Option<Sampling<'r, R>>,
    step: usize,
    inputs: Vec<u32>,
    /// Per sample: every chosen token (the rules read them), the hypothesis
    /// (the same, less the end of text) and its summed log-probability.
    sequences: Vec<Vec<u32>>,
    scores: Vec<f32>,
    finished: Vec<Option<Hypothesis>>,
    /// The samples still running, in row order.
    alive: Vec<usize>,
    no_speech: Option<f32>,
    /// This step's draws, one a live row, once [`Stepper::choice`] made them.
    pending: Vec<f64>,
}

impl<'s, 'r, R: Rng> Greedy<'s, 'r, R> {
    pub(crate) fn new(spec: &'s SearchSpec<'s>, sampling: Option<Sampling<'r, R>>) -> Self {
        let n = sampling.as_ref().map_or(1, |s| s.samples.max(1));
        let rows = if spec.max_length == 0 { 0 } else { n };
        Greedy {
            spec,
            sampling,
            step: 0,
            inputs: vec![spec.start; rows],
            sequences: vec![Vec::new(); n],
            scores: vec![0f32; n],
            finished: vec![None; n],
            alive: (0..rows).collect(),
            no_speech: None,
            pending: Vec::new(),
        }
    }
}

impl<R: Rng + Send> Stepper for Greedy<'_, '_, R> {
    fn inputs(&self) -> &[u32] {
        &self.inputs
    }

    fn advance(&mut self, logits: &mut [f32], vocab: usize) -> Option<Vec<usize>> {
        let (spec, step) = (self.spec, self.step);
        let prefix_len = spec.prefix.len();
        let mut picks = Vec::with_capacity(self.alive.len());
        for (row, &s) in self.alive.iter().enumerate() {
            let l = &mut logits[row * vocab..(row + 1) * vocab];
            if step == 0 && row == 0 {
                if let Some(id) = spec.no_speech {
                    self.no_speech = Some(softmax_at(l, id));
                }
            }
            spec.rules.apply(step, l, &self.sequences[s], prefix_len);
            log_softmax(l);
            picks.push(match self.sampling.as_mut() {
                Some(smp) => {
                    // the draw choice() made for this row, if it made one
                    let u = match self.pending.get(row) {
                        Some(&u) => u,
                        None => smp.rng.random::<f64>(),
                    };
                    draw(l, smp.temperature, u)
                }
                None => argmax(l),
            });
        }
        self.pending.clear();
        self.take(&picks)
    }

    fn choice(&mut self, vocab: usize) -> Option<Choice> {
        let rows = self.alive.iter().map(|&s| self.sequences[s].as_slice());
        let mut rules = self.spec.row_rules(self.step, rows, vocab)?;
        if let Some(smp) = self.sampling.as_mut() {
            // one draw a row, in row order, as advance() makes them; kept
            // for advance() in case the backend does not choose after all
            self.pending = (0..rules.len()).map(|_| smp.rng.random::<f64>()).collect();
            for (r, &u) in rules.iter_mut().zip(&self.pending) {
                r.sample = Some((smp.temperature, u));
            }
        }
        Some(Choice {
            cum: vec![0.0; rules.len()],
            rules,
            k: 1,
        })
    }

    fn advance_chosen(
        &mut self,
        ids: &[u32],
        scores: &[f32],
        stride: usize,
        no_speech: &[f32],
    ) -> Option<Vec<usize>> {
        self.pending.clear();
        if self.step == 0 && self.spec.no_speech.is_some() {
            self.no_speech = no_speech.first().copied();
        }
        let picks: Vec<(u32, f32)> = ids
            .iter()
            .zip(scores)
            .step_by(stride.max(1))
            .map(|(&i, &s)| (i, s))
            .collect();
        self.take(&picks)
    }

    fn rules(&self) -> &LogitRules {
        self.spec.rules
    }

    fn result(&mut self) -> (Hypothesis, Option<f32>) {
        let hyps: Vec<Hypothesis> = self.finished.iter_mut().filter_map(Option::take).collect();
        (finalize(hyps, self.spec.length_penalty), self.no_speech)
    }
}

impl<R: Rng + Send> Greedy<'_, '_, R> {
    /// The step's continuation from each live row's token and its
    /// log-probability.
    fn take(&mut self, picks: &[(u32, f32)]) -> Option<Vec<usize>> {
        let (spec, step) = (self.spec, self.step);
        let prefix_len = spec.prefix.len();
        let mut keep = Vec::with_capacity(self.alive.len());
        for (row, (&s, &(id, score))) in self.alive.iter().zip(picks).enumerate() {
            let (mut id, mut score) = (id, score);
            if step < prefix_len {
                id = spec.prefix[step];
                score = 0.0;
            }
            self.sequences[s].push(id);
            self.scores[s] += score;
            let is_eot = id == spec.eot;
            if (is_eot && step >= prefix_len) || step + 1 == spec.max_length {
                let end = if is_eot { step } else { step + 1 };
                self.finished[s] = Some(Hypothesis {
                    tokens: self.sequences[s][..end].to_vec(),
                    score: self.scores[s],
                });
            } else {
                keep.push(row);
            }
        }
        self.step += 1;
        self.alive = keep.iter().map(|&r| self.alive[r]).collect();
        self.inputs = self
            .alive
            .iter()
            .map(|&s| *self.sequences[s].last().unwrap_or(&spec.start))
            .collect();
        (!keep.is_empty()).then_some(keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::whisper::decode::logits::LogitRules;
    use crate::models::whisper::decode::testing::Scripted;
    use rand::SeedableRng;

    fn spec<'a>(rules: &'a LogitRules, prefix: &[u32]) -> SearchSpec<'a> {
        SearchSpec {
            start: 9,
            prefix: prefix.to_vec(),
            max_length: 10,
            eot: 5,
            rules,
            no_speech: None,
            length_penalty: 1.0,
        }
    }

    #[test]
    fn greedy_follows_the_best_token_and_sums_its_log_probs() {
        // Vocabulary 10: after the start token, 2 then 3 then end of text.
        let mut b = Scripted::new(10, |_w, seq: &[u32]| match seq.last() {
            Some(9) => Scripted::peaked(10, 2, 3.0),
            Some(2) => Scripted::peaked(10, 3, 2.0),
            _ => Scripted::peaked(10, 5, 4.0),
        });
        b.start(&[0]).unwrap();
        b.feed(&[9], 1, &[], &mut Vec::new()).unwrap();
        let rules = LogitRules::default();
        let (h, _) = greedy_search::<rand::rngs::StdRng>(&mut b, &spec(&rules, &[]), None).unwrap();
        assert_eq!(h.tokens, vec![2, 3]);
        let lp = |k: f32| k - (k.exp() + 9.0).ln();
        // The end of text's log-probability counts; the length does not.
        let expected = (lp(3.0) + lp(2.0) + lp(4.0)) / 2.0;
        assert!(
            (h.score - expected).abs() < 1e-5,
            "{} vs {expected}",
            h.score
        );
    }

    #[test]
    fn prefix_is_forced_scored_zero_and_kept() {
        let mut b = Scripted::new(10, |_w, _seq: &[u32]| Scripted::peaked(10, 5, 4.0));
        b.start(&[0]).unwrap();
        let rules = LogitRules::default();
        let (h, _) =
            greedy_search::<rand::rngs::StdRng>(&mut b, &spec(&rules, &[7, 1]), None).unwrap();
        assert_eq!(h.tokens, vec![7, 1]);
        let lp = 4.0 - (4f32.exp() + 9.0).ln();
        assert!((h.score - lp / 2.0).abs() < 1e-6);
    }

    #[test]
    fn sampling_keeps_the_best_of_several() {
        // Flat after the start: samples differ; each then ends.
        let mut b = Scripted::new(10, |_w, seq: &[u32]| match seq.last() {
            Some(9) => {
                let mut l = vec![0.0; 10];
                l[5] = -50.0;
                l[1] = 1.0;
                l
            }
            _ => Scripted::peaked(10, 5, 8.0),
        });
        b.start(&[0]).unwrap();
        let rules = LogitRules::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let smp = Sampling {
            temperature: 1.0,
            samples: 16,
            rng: &mut rng,
        };
        let (h, _) = greedy_search(&mut b, &spec(&rules, &[]), Some(smp)).unwrap();
        // With 16 draws the likeliest first token (1) is among them and wins.
        assert_eq!(h.tokens, vec![1]);
    }

    /// Samples drawn by a backend that chooses (as a GPU step does, with
    /// the search's own draws) are the host's samples: the same tokens
    /// from the same seed, every step chosen there.
    #[test]
    fn samples_chosen_by_the_backend_are_the_hosts() {
        use crate::models::whisper::decode::testing::Choosing;
        let script = |_w: &[f32], seq: &[u32]| -> Vec<f32> {
            // a spread of likely tokens that moves with the sequence
            let n = seq.len() as f32;
            let mut l: Vec<f32> = (0..10)
                .map(|i| ((i as f32 + n) * 0.7).sin() * 2.0)
                .collect();
            l[5] = if seq.len() > 6 { 6.0 } else { -1.0 };
            l
        };
        let rules = LogitRules::default();
        let run = |choosing: bool, seed: u64| {
            let mut b = Scripted::new(10, script);
            b.start(&[0]).unwrap();
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let smp = Sampling {
                temperature: 0.8,
                samples: 5,
                rng: &mut rng,
            };
            let sp = spec(&rules, &[]);
            let mut c = Choosing(&mut b, 0);
            let (h, _) = if choosing {
                greedy_search(&mut c, &sp, Some(smp)).unwrap()
            } else {
                greedy_search(c.0, &sp, Some(smp)).unwrap()
            };
            (h.tokens, c.1)
        };
        for seed in 0..20 {
            let (host, none) = run(false, seed);
            let (chosen, steps) = run(true, seed);
            assert_eq!(host, chosen, "seed {seed}");
            assert_eq!(none, 0);
            assert!(steps > 0, "seed {seed}: no step chosen");
        }
    }
}
