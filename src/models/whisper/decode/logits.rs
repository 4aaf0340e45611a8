//! The logit rules CTranslate2 applies to Whisper's decoder at each step,
//! in its order: the always-suppressed tokens, the blank suppressed at the
//! first sampled step, then the timestamp rules; and the log-softmax after
//! them.
//!
//! A suppressed logit is set to the lowest finite float, as CTranslate2
//! does (not minus infinity), so sums over suppressed entries stay finite.

pub(crate) use crate::ops::top_tokens::{log_softmax, softmax_at, DISABLED};
use crate::ops::top_tokens::{timestamps_outweigh_text, RowRules, RANGES};

/// Timestamp-token ids for the timestamp rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TimestampRules {
    /// End of text: every id below it is a text token.
    pub eot: u32,
    /// `<|notimestamps|>`, never sampled while timestamps are on.
    pub no_timestamps: u32,
    /// The first timestamp token (`<|0.00|>`).
    pub begin: u32,
    /// The last timestamp token (the vocabulary's last id).
    pub end: u32,
    /// The latest timestamp allowed as the first sampled token.
    pub max_initial: u32,
}

/// The rules of one decoding run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LogitRules {
    /// Logits of tokens already chosen are divided by it (multiplied when
    /// negative); 1: off.
    pub repetition_penalty: f32,
    /// Tokens that would repeat an n-gram of this size are suppressed; 0: off.
    pub no_repeat_ngram_size: usize,
    /// Suppressed at every step.
    pub suppress: Vec<u32>,
    /// Suppressed at the first step after the prefix (`suppress_blank`).
    pub suppress_begin: Vec<u32>,
    /// Present when the prompt does not end with `<|notimestamps|>`.
    pub timestamps: Option<TimestampRules>,
}

impl Default for LogitRules {
    fn default() -> LogitRules {
        LogitRules {
            repetition_penalty: 1.0,
            no_repeat_ngram_size: 0,
            suppress: Vec::new(),
            suppress_begin: Vec::new(),
            timestamps: None,
        }
    }
}

impl LogitRules {
    /// Applies the rules to one sequence's `logits` at decoding `step`
    /// (0: the token after the prompt's last), `sequence` holding the tokens
    /// chosen at the earlier steps (prefix included) and `sample_begin`
    /// the prefix length.
    pub(crate) fn apply(
        &self,
        step: usize,
        logits: &mut [f32],
        sequence: &[u32],
        sample_begin: usize,
    ) {
        let vocab = logits.len();
        if self.repetition_penalty != 1.0 {
            penalize_repetitions(logits, sequence, self.repetition_penalty);
        }
        if self.no_repeat_ngram_size > 0 {
            for id in repeated_ngram_ends(sequence, self.no_repeat_ngram_size) {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l = DISABLED;
                }
            }
        }
        let mut disable = |id: u32| {
            if let Some(l) = logits.get_mut(id as usize) {
                *l = DISABLED;
            }
        };
        for &id in &self.suppress {
            disable(id);
        }
        if step == sample_begin {
            for &id in &self.suppress_begin {
                disable(id);
            }
        }
        if let Some(ts) = &self.timestamps {
            apply_timestamp_rules(ts, step, logits, sequence, sample_begin, vocab);
        }
    }
}

impl LogitRules {
    /// One row's rules at decoding `step` in the form a decoder step
    /// applies them where the logits are ([`crate::ops::top_tokens`]): the
    /// same tokens disabled as [`LogitRules::apply`], the lists by
    /// [`LogitRules::masks`]. `None` when the rules read the logits beyond
    /// that (a repetition penalty, n-gram blocking).
    pub(crate) fn row_rules(
        &self,
        step: usize,
        sequence: &[u32],
        sample_begin: usize,
        vocab: usize,
    ) -> Option<RowRules> {
        if self.repetition_penalty != 1.0 || self.no_repeat_ngram_size > 0 {
            return None;
        }
        let mut r = RowRules::NONE;
        r.begin = step == sample_begin && !self.suppress_begin.is_empty();
        let Some(ts) = &self.timestamps else {
            return Some(r);
        };
        let (ranges, check) = timestamp_ranges(ts, step, sequence, sample_begin, vocab);
        let (begin, end) = (ts.begin, ts.end.min(vocab.saturating_sub(1) as u32));
        debug_assert!(ranges.len() <= RANGES);
        for (slot, range) in r.ranges.iter_mut().zip(ranges) {
            *slot = range;
        }
        r.check = (check && (begin as usize) < vocab).then_some((begin, end));
        Some(r)
    }

    /// The suppression lists as a decoder step's masks: `[2, vocab]`, row 0
    /// the tokens suppressed always, row 1 those at the first free step.
    pub(crate) fn masks(&self, vocab: usize) -> Vec<bool> {
        let mut m = vec![false; 2 * vocab];
        for (row, list) in [&self.suppress, &self.suppress_begin]
            .into_iter()
            .enumerate()
        {
            for &id in list.iter().filter(|&&id| (id as usize) < vocab) {
                m[row * vocab + id as usize] = true;
            }
        }
        m
    }
}

/// CTranslate2's `RepetitionPenalty`: each token already chosen has its
/// logit divided by `penalty` (multiplied when negative).
fn penalize_repetitions(logits: &mut [f32], sequence: &[u32], penalty: f32) {
    let original: Vec<f32> = sequence
        .iter()
        .map(|&t| logits.get(t as usize).copied().unwrap_or(0.0))
        .collect();
    for (&t, &score) in sequence.iter().zip(&original) {
        if let Some(l) = logits.get_mut(t as usize) {
            *l = if score < 0.0 {
                score * penalty
            } else {
                score / penalty
            };
        }
    }
}

/// CTranslate2's `NoRepeatNgram`: the tokens that followed each earlier
/// occurrence of the last `n - 1` tokens.
fn repeated_ngram_ends(sequence: &[u32], n: usize) -> Vec<u32> {
    if sequence.len() < n {
        return Vec::new();
    }
    let tail = &sequence[sequence.len() - (n - 1)..];
    let mut ends: Vec<u32> = (0..=sequence.len() - n)
        .filter(|&i| sequence[i..i + n - 1] == *tail)
        .map(|i| sequence[i + n - 1])
        .collect();
    ends.sort_unstable();
    ends.dedup();
    ends
}

/// CTranslate2's `ApplyTimestampRules` for one sequence.
fn apply_timestamp_rules(
    ts: &TimestampRules,
    step: usize,
    logits: &mut [f32],
    sequence: &[u32],
    sample_begin: usize,
    vocab: usize,
) {
    let end = (ts.end as usize).min(vocab.saturating_sub(1));
    let begin = ts.begin as usize;
    let disable_range = |logits: &mut [f32], from: usize, to_inclusive: usize| {
        if from < vocab && from <= to_inclusive {
            logits[from..=to_inclusive.min(vocab - 1)].fill(DISABLED);
        }
    };
    let (ranges, check) = timestamp_ranges(ts, step, sequence, sample_begin, vocab);
    for (lo, hi) in ranges {
        disable_range(logits, lo as usize, hi as usize);
    }
    if check && begin < vocab && timestamps_outweigh_text(logits, begin, end) {
        disable_range(logits, 0, begin - 1);
    }
}

/// The id ranges CTranslate2's timestamp rules disable at `step` (at most
/// three, `<|notimestamps|>` first), and whether the probability check
/// (timestamps against the best text token) follows: they depend on the
/// tokens chosen so far only.
fn timestamp_ranges(
    ts: &TimestampRules,
    step: usize,
    sequence: &[u32],
    sample_begin: usize,
    vocab: usize,
) -> (Vec<(u32, u32)>, bool) {
    let (begin, end) = (ts.begin, ts.end.min(vocab.saturating_sub(1) as u32));
    let mut ranges = vec![(ts.no_timestamps, ts.no_timestamps)];
    let mut check = false;
    // With a prefix, the first free step has no timestamp rule at all:
    // the reference only constrains step 0.
    if step == sample_begin && step == 0 {
        // The text starts with a timestamp, no later than max_initial.
        if begin > 0 {
            ranges.push((0, begin - 1));
        }
        ranges.push((ts.max_initial.saturating_add(1), end));
    } else if step > sample_begin {
        let last = sequence[step - 1];
        if last >= begin {
            let penultimate = if step - 1 > sample_begin {
                sequence[step - 2]
            } else {
                last
            };
            if penultimate >= begin {
                // Two timestamps in a row: text (or the end) must follow.
                ranges.push((begin, end));
            } else {
                // A lone timestamp closes a segment: another timestamp or
                // the end follows, not text.
                if ts.eot > 0 {
                    ranges.push((0, ts.eot - 1));
                }
                if last > begin {
                    ranges.push((begin, last - 1));
                }
                check = true;
            }
        } else {
            check = true;
            // Timestamps never decrease.
            if let Some(&t) = sequence[sample_begin..step]
                .iter()
                .rev()
                .find(|&&t| t >= begin)
            {
                ranges.push((begin, t));
            }
        }
    }
    (ranges, check)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A toy vocabulary: text 0..5, eot 5, no_timestamps 6, timestamps 7..=11.
    const TS: TimestampRules = TimestampRules {
        eot: 5,
        no_timestamps: 6,
        begin: 7,
        end: 11,
        max_initial: 8,
    };

    fn rules() -> LogitRules {
        LogitRules {
            suppress: vec![1],
            suppress_begin: vec![0, 5],
            timestamps: Some(TS),
            ..LogitRules::default()
        }
    }

    #[test]
    fn repetition_penalty_and_ngrams() {
        let r = LogitRules {
            repetition_penalty: 2.0,
            no_repeat_ngram_size: 2,
            ..LogitRules::default()
        };
        let mut l = vec![1.0, -1.0, 4.0, 0.5, 0.0, 0.0];
        // 2 follows 3 earlier, and 3 is last: 2 is banned; 1 and 3 penalised.
        r.apply(3, &mut l, &[3, 2, 1, 3], 0);
        assert_eq!(l, vec![1.0, -2.0, DISABLED, 0.25, 0.0, 0.0]);
        assert_eq!(repeated_ngram_ends(&[1, 2, 1, 3, 1], 2), vec![2, 3]);
        assert_eq!(repeated_ngram_ends(&[1, 2, 1, 3, 1], 3), Vec::<u32>::new());
        assert_eq!(repeated_ngram_ends(&[1, 2, 1, 2, 1], 3), vec![2]);
    }

    fn allowed(logits: &[f32]) -> Vec<usize> {
        (0..logits.len())
            .filter(|&i| logits[i] != DISABLED)
            .collect()
    }

    #[test]
    fn first_step_is_an_early_timestamp() {
        let mut l = vec![0.0; 12];
        rules().apply(0, &mut l, &[], 0);
        assert_eq!(allowed(&l), vec![7, 8]);
    }

    #[test]
    fn suppression_and_blank_at_the_first_free_step_only() {
        let r = LogitRules {
            suppress: vec![1],
            suppress_begin: vec![0, 5],
            ..LogitRules::default()
        };
        let mut l = vec![0.0; 12];
        r.apply(2, &mut l, &[3, 4], 2);
        assert_eq!(allowed(&l), vec![2, 3, 4, 6, 7, 8, 9, 10, 11]);
        let mut l = vec![0.0; 12];
        r.apply(3, &mut l, &[3, 4, 2], 2);
        assert_eq!(allowed(&l), vec![0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    }

    #[test]
    fn pairs_and_monotonic_timestamps() {
        // After text then a lone timestamp 9: no text, no earlier timestamp.
        let mut l = vec![0.0; 12];
        rules().apply(3, &mut l, &[7, 2, 9], 0);
        // (5 stays allowed by the pair rule; the timestamps' mass then
        // outweighs it.)
        assert_eq!(allowed(&l), vec![9, 10, 11]);
        // After a pair of timestamps: no timestamp.
        let mut l = vec![0.0; 12];
        rules().apply(4, &mut l, &[7, 2, 9, 9], 0);
        assert_eq!(allowed(&l), vec![0, 2, 3, 4, 5]);
        // After text: timestamps from the last one on (excluded) only.
        let mut l = vec![0.0; 12];
        l[3] = 5.0;
        rules().apply(5, &mut l, &[7, 2, 9, 9, 3], 0);
        assert_eq!(allowed(&l), vec![0, 2, 3, 4, 5, 10, 11]);
    }

    #[test]
    fn timestamp_mass_above_best_text_forces_a_timestamp() {
        // Text 2 is the single likeliest token, but the timestamps together
        // outweigh it: only timestamps stay.
        let mut l = vec![-10.0; 12];
        l[2] = 1.0;
        l[7..=11].fill(0.5);
        rules().apply(2, &mut l, &[7, 3], 0);
        assert_eq!(allowed(&l), vec![8, 9, 10, 11]);
        // With one timestamp as likely, text wins: nothing more is disabled.
        let mut l = vec![-10.0; 12];
        l[2] = 1.0;
        l[9] = 0.5;
        rules().apply(2, &mut l, &[7, 3], 0);
        assert_eq!(allowed(&l), vec![0, 2, 3, 4, 5, 8, 9, 10, 11]);
    }

    #[test]
    fn a_prefix_lifts_the_initial_rule() {
        // The first free step after a prefix of 2: only <|notimestamps|>
        // and the always/begin suppressions apply.
        let mut l = vec![0.0; 12];
        rules().apply(2, &mut l, &[7, 3], 2);
        assert_eq!(allowed(&l), vec![2, 3, 4, 7, 8, 9, 10, 11]);
    }

    /// The rules as ranges and masks (a decoder step's choice where its
    /// logits are) give what the host path gives: the same top candidates
    /// with the same scores, over random logits and every kind of step.
    #[test]
    fn row_rules_choose_as_the_host_path() {
        use crate::ops::top_tokens::{choose_row, mask_bytes};
        let vocab = 12;
        let r = rules();
        let m = r.masks(vocab);
        let mask = mask_bytes(&m, vocab);
        let mut seed = 7u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let sequences: [&[u32]; 7] = [
            &[],
            &[7, 3],
            &[7, 2, 9],
            &[7, 2, 9, 9],
            &[7, 2, 9, 9, 3],
            &[8, 8, 2, 4],
            &[2, 3, 4, 10],
        ];
        let mut checked = 0;
        for round in 0..200 {
            let seq = sequences[round % sequences.len()];
            for sample_begin in [0, seq.len().min(2)] {
                let step = seq.len();
                if step < sample_begin {
                    continue;
                }
                let logits: Vec<f32> = (0..vocab)
                    .map(|_| (next() % 2000) as f32 / 200.0 - 5.0)
                    .collect();
                let cum = (next() % 100) as f32 / -10.0;
                let mut host = logits.clone();
                r.apply(step, &mut host, seq, sample_begin);
                log_softmax(&mut host);
                host.iter_mut().for_each(|v| *v += cum);
                let want = crate::ops::top_tokens::top_k(&host, 4);
                let rr = r
                    .row_rules(step, seq, sample_begin, vocab)
                    .expect("no penalty");
                let (got, _) = choose_row(&logits, &rr, &mask, cum, 4);
                let got: Vec<(usize, f32)> = got.iter().map(|&(i, s)| (i as usize, s)).collect();
                assert_eq!(
                    got, want,
                    "step {step} begin {sample_begin} {seq:?} {logits:?}"
                );
                checked += 1;
            }
        }
        assert!(checked > 300);
        let penalised = LogitRules {
            repetition_penalty: 1.2,
            ..rules()
        };
        assert!(penalised.row_rules(1, &[3], 0, vocab).is_none());
    }

    #[test]
    fn log_softmax_and_no_speech() {
        let mut x = vec![1.0f32, 2.0, 3.0];
        log_softmax(&mut x);
        let total: f32 = x.iter().map(|v| v.exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert!((softmax_at(&[1.0, 2.0, 3.0], 2) - x[2].exp()).abs() < 1e-6);
        assert!(timestamps_outweigh_text(&[1.0, 0.8, 0.8], 1, 2));
        assert!(!timestamps_outweigh_text(&[1.0, 0.2, 0.2], 1, 2));
    }
}
