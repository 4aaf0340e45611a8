//! One window's decoding from a prompt, as CTranslate2's
//! `WhisperReplica::generate` does it: the prompt up to its last task token
//! is fed at once (and the no-speech probability read at
//! `<|startoftranscript|>`), the rest becomes the start token and a forced
//! prefix, and the search runs under the logit rules.

use rand::rngs::StdRng;

use super::beam::{beam_search, Beam};
use super::greedy::{greedy_search, Greedy, Sampling};
use super::logits::{softmax_at, LogitRules, TimestampRules};
use super::search::{drive_all, SearchSpec, Stepper};
use crate::models::whisper::{SpecialTokens, WhisperBackend, WhisperError};
use crate::Result;

/// How one generation searches.
pub(crate) enum Strategy<'r> {
    /// Beam search at temperature 0 (width 1: greedy).
    Beam { size: usize, patience: f32 },
    /// `best_of` samples at `temperature`.
    Sample {
        temperature: f32,
        best_of: usize,
        rng: &'r mut StdRng,
    },
}

/// What one generation needs besides the prompt.
pub(crate) struct GenerateParams<'a> {
    pub special: &'a SpecialTokens,
    /// Prompt plus output positions at most (448, or the prompt plus
    /// `max_new_tokens`).
    pub max_length: usize,
    pub length_penalty: f32,
    /// 1: off.
    pub repetition_penalty: f32,
    /// 0: off.
    pub no_repeat_ngram_size: usize,
    /// Suppressed at every step.
    pub suppress: &'a [u32],
    /// Suppressed at the first free step (empty without `suppress_blank`).
    pub suppress_begin: &'a [u32],
    /// In 20 ms steps.
    pub max_initial_timestamp_index: usize,
}

/// A window's result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Generation {
    /// The output (a forced prefix included, end of text not).
    pub tokens: Vec<u32>,
    /// Summed log-probability over `length ^ length_penalty`.
    pub score: f32,
    /// Probability of the no-speech token at `<|startoftranscript|>`.
    pub no_speech_prob: f32,
    /// The search ran out of steps before the end of text.
    pub cut: bool,
}

/// How a prompt splits: the tokens up to its last task token are fed at
/// once, that token starts the search, the rest is a forced prefix.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Split {
    sot_index: usize,
    /// The prompt proper: up to and including the task tokens after sot.
    prompt_length: usize,
    /// The prompt is `<|startoftranscript|>` alone (English-only with
    /// timestamps): the no-speech probability is read at step 0.
    sot_is_start: bool,
}

impl Split {
    fn of(prompt: &[u32], sp: &SpecialTokens) -> Result<Split> {
        let sot_index =
            prompt
                .iter()
                .position(|&t| t == sp.sot)
                .ok_or_else(|| WhisperError::Option {
                    option: "prompt",
                    reason: "no <|startoftranscript|> in the prompt".to_string(),
                })?;
        let mut prompt_length = sot_index;
        while prompt_length < prompt.len()
            && (sp.sot..=sp.no_timestamps).contains(&prompt[prompt_length])
        {
            prompt_length += 1;
        }
        Ok(Split {
            sot_index,
            prompt_length,
            sot_is_start: sot_index == prompt_length - 1,
        })
    }

    /// Tokens fed before the search (none when the prompt is one token).
    fn fed(self) -> usize {
        self.prompt_length - 1
    }
}

/// Feeds every sequence its prompt up to the search's start token (`prompts`
/// of one split, sequence `b` reading `prompts[b]`) and returns each one's
/// no-speech probability when it is read at `<|startoftranscript|>`.
fn feed_prompts(
    backend: &mut dyn WhisperBackend,
    prompts: &[&[u32]],
    split: Split,
    no_speech: u32,
) -> Result<Vec<Option<f32>>> {
    let n = split.fed();
    if n == 0 {
        return Ok(vec![None; prompts.len()]);
    }
    let tokens: Vec<u32> = prompts
        .iter()
        .flat_map(|p| p[..n].iter().copied())
        .collect();
    let positions: &[usize] = if split.sot_is_start {
        &[]
    } else {
        &[split.sot_index]
    };
    let mut logits = Vec::new();
    backend.feed(&tokens, n, positions, &mut logits)?;
    if split.sot_is_start {
        return Ok(vec![None; prompts.len()]);
    }
    let vocab = backend.vocab_size();
    Ok(logits
        .chunks_exact(vocab)
        .map(|row| Some(softmax_at(row, no_speech)))
        .collect())
}

/// The logit rules of a search from `prompt`.
fn rules(prompt: &[u32], split: Split, params: &GenerateParams, vocab: usize) -> LogitRules {
    let sp = params.special;
    let timestamps = (prompt[split.prompt_length - 1] != sp.no_timestamps).then(|| {
        let begin = sp.no_timestamps + 1;
        TimestampRules {
            eot: sp.eot,
            no_timestamps: sp.no_timestamps,
            begin,
            end: vocab as u32 - 1,
            max_initial: begin + params.max_initial_timestamp_index as u32,
        }
    });
    LogitRules {
        repetition_penalty: params.repetition_penalty,
        no_repeat_ngram_size: params.no_repeat_ngram_size,
        suppress: params.suppress.to_vec(),
        suppress_begin: params.suppress_begin.to_vec(),
        timestamps,
    }
}

/// The search after `prompt`'s fed part.
fn search_spec<'a>(
    prompt: &[u32],
    split: Split,
    params: &GenerateParams,
    rules: &'a LogitRules,
) -> SearchSpec<'a> {
    let start = &prompt[split.fed()..];
    SearchSpec {
        start: start[0],
        prefix: start[1..].to_vec(),
        max_length: (params.max_length / 2).min(params.max_length.saturating_sub(split.fed())),
        eot: params.special.eot,
        rules,
        no_speech: split.sot_is_start.then_some(params.special.no_speech),
        length_penalty: params.length_penalty,
    }
}

/// Decodes encoded window 0 from `prompt`.
pub(crate) fn generate(
    backend: &mut dyn WhisperBackend,
    prompt: &[u32],
    params: &GenerateParams,
    strategy: Strategy<'_>,
) -> Result<Generation> {
    let split = Split::of(prompt, params.special)?;
    // room for the search's rows before it starts (a GPU cache grows here)
    let rows = match &strategy {
        Strategy::Beam { size, .. } => *size,
        Strategy::Sample { best_of, .. } => *best_of,
    };
    backend.reserve(rows.max(1))?;
    backend.start(&[0])?;
    let no_speech_prob = feed_prompts(backend, &[prompt], split, params.special.no_speech)?[0];
    let rules = rules(prompt, split, params, backend.vocab_size());
    let spec = search_spec(prompt, split, params, &rules);
    let (hyp, step0_no_speech) = match strategy {
        Strategy::Beam { size: 1, .. } => greedy_search::<StdRng>(backend, &spec, None)?,
        Strategy::Beam { size, patience } => beam_search(backend, &spec, size, patience)?,
        Strategy::Sample {
            temperature,
            best_of,
            rng,
        } => {
            let sampling = Sampling {
                temperature,
                samples: best_of,
                rng,
            };
            greedy_search(backend, &spec, Some(sampling))?
        }
    };
    Ok(Generation {
        cut: hyp.tokens.len() >= spec.max_length,
        tokens: hyp.tokens,
        score: hyp.score,
        no_speech_prob: no_speech_prob.or(step0_no_speech).unwrap_or(0.0),
    })
}

/// Decodes encoded window `windows[b]` from `prompts[b]` for every `b` at
/// once, at temperature 0 with beams of `size` (1: greedy): one decoder
/// step feeds the rows of every window still searching, and a window whose
/// search ends leaves the batch without holding up the others. Each
/// window's result is the one [`generate`] gives it alone (up to the
/// backend's arithmetic over a larger batch). The prompts may differ only
/// before their last task token (a language token, say).
pub(crate) fn generate_batch(
    backend: &mut dyn WhisperBackend,
    prompts: &[&[u32]],
    windows: &[usize],
    params: &GenerateParams,
    size: usize,
    patience: f32,
) -> Result<Vec<Generation>> {
    let Some(first) = prompts.first() else {
        return Ok(Vec::new());
    };
    let split = Split::of(first, params.special)?;
    for p in prompts {
        if Split::of(p, params.special)? != split || p[split.fed()..] != first[split.fed()..] {
            return Err(WhisperError::Option {
                option: "prompt",
                reason: "prompts decoded together must differ only before their last task token"
                    .to_string(),
            }
            .into());
        }
    }
    if windows.len() != prompts.len() {
        return Err(WhisperError::Option {
            option: "prompt",
            reason: format!("{} prompts for {} windows", prompts.len(), windows.len()),
        }
        .into());
    }
    let size = size.max(1);
    backend.reserve(windows.len() * size)?;
    backend.start(windows)?;
    let no_speech = feed_prompts(backend, prompts, split, params.special.no_speech)?;
    let rules = rules(first, split, params, backend.vocab_size());
    let spec = search_spec(first, split, params, &rules);
    let mut searches: Vec<Box<dyn Stepper + '_>> = (0..windows.len())
        .map(|_| -> Box<dyn Stepper + '_> {
            if size == 1 {
                Box::new(Greedy::<StdRng>::new(&spec, None))
            } else {
                Box::new(Beam::new(&spec, size, patience))
            }
        })
        .collect();
    {
        let mut refs: Vec<&mut (dyn Stepper + '_)> =
            searches.iter_mut().map(|s| &mut **s).collect();
        drive_all(backend, &mut refs)?;
    }
    Ok(searches
        .iter_mut()
        .zip(no_speech)
        .map(|(s, ns)| {
            let (hyp, step0) = s.result();
            Generation {
                cut: hyp.tokens.len() >= spec.max_length,
                tokens: hyp.tokens,
                score: hyp.score,
                no_speech_prob: ns.or(step0).unwrap_or(0.0),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::whisper::decode::testing::Scripted;

    /// A toy vocabulary of 20: text 0..10, eot 10, sot 11, en 12,
    /// translate 13, transcribe 14, sot_lm 15, sot_prev 16, no_speech 17,
    /// no_timestamps 18, timestamps 19.. (only <|0.00|> here).
    pub(crate) const SP: SpecialTokens = SpecialTokens {
        sot: 11,
        eot: 10,
        sot_prev: 16,
        sot_lm: 15,
        no_timestamps: 18,
        timestamp_begin: 19,
        transcribe: 14,
        translate: 13,
        no_speech: 17,
    };

    fn params() -> GenerateParams<'static> {
        GenerateParams {
            special: &SP,
            max_length: 448,
            length_penalty: 1.0,
            repetition_penalty: 1.0,
            no_repeat_ngram_size: 0,
            suppress: &[],
            suppress_begin: &[],
            max_initial_timestamp_index: 50,
        }
    }

    fn backend() -> Scripted {
        Scripted::new(20, |_w, seq: &[u32]| {
            let mut l = vec![0.0; 20];
            match seq.last() {
                Some(11) => l[17] = 2.0, // no_speech likely after sot
                Some(3) => l[10] = 5.0,
                _ => l[3] = 5.0,
            }
            l
        })
    }

    #[test]
    fn prompt_is_split_after_the_task_tokens() {
        let mut b = backend();
        let prompt = [16, 1, 2, 11, 12, 14, 18];
        let g = generate(
            &mut b,
            &prompt,
            &params(),
            Strategy::Beam {
                size: 1,
                patience: 1.0,
            },
        )
        .unwrap();
        assert_eq!(g.tokens, vec![3]);
        // The prompt less its last task token went in one feed, then one token a step.
        assert_eq!(b.fed_log[0], vec![16, 1, 2, 11, 12, 14]);
        assert_eq!(b.fed_log[1], vec![16, 1, 2, 11, 12, 14, 18]);
        // no_speech read at sot: softmax of [0 x19, 2 at 17].
        let p = 2f32.exp() / (2f32.exp() + 19.0);
        assert!((g.no_speech_prob - p).abs() < 1e-6);
    }

    #[test]
    fn a_bare_sot_prompt_reads_no_speech_at_step_zero() {
        let mut b = backend();
        let g = generate(
            &mut b,
            &[11, 18],
            &params(),
            Strategy::Beam {
                size: 1,
                patience: 1.0,
            },
        )
        .unwrap();
        assert_eq!(b.fed_log[0], vec![11]);
        let p = 2f32.exp() / (2f32.exp() + 19.0);
        assert!((g.no_speech_prob - p).abs() < 1e-6);
        // English-only with timestamps: [sot] alone is the start token.
        let mut b = backend();
        let g = generate(
            &mut b,
            &[11],
            &params(),
            Strategy::Beam {
                size: 5,
                patience: 1.0,
            },
        )
        .unwrap();
        assert!((g.no_speech_prob - p).abs() < 1e-6);
        // The first token must be a timestamp: only <|0.00|> exists here.
        assert_eq!(g.tokens[0], 19);
    }

    /// Window `k` (its features' value) says `k + 1` text tokens, each
    /// with a close runner-up for the beams, then ends.
    fn counting(window: &[f32], seq: &[u32]) -> Vec<f32> {
        let k = window.first().copied().unwrap_or(0.0) as usize;
        let said = seq.iter().filter(|&&t| t < 10).count();
        let mut l = vec![0.0; 20];
        if said > k {
            l[10] = 6.0;
        } else {
            l[(k + said) % 10] = 4.0;
            l[(k + said + 1) % 10] = 3.5;
        }
        l
    }

    #[test]
    fn windows_decoded_together_each_get_what_they_get_alone() {
        // 8 windows at beam 3 are 24 rows: the searches advance on threads
        let windows: Vec<Vec<f32>> = (0..8).map(|k| vec![k as f32; 6000]).collect();
        let refs: Vec<&[f32]> = windows.iter().map(Vec::as_slice).collect();
        let prompt = [11, 18];
        for size in [1, 3] {
            let mut b = Scripted::new(20, counting);
            b.encode(&refs).unwrap();
            let order: Vec<usize> = (0..8).collect();
            let got =
                generate_batch(&mut b, &[&prompt[..]; 8], &order, &params(), size, 1.0).unwrap();
            for (k, w) in windows.iter().enumerate() {
                let mut alone = Scripted::new(20, counting);
                alone.encode(&[w]).unwrap();
                let strategy = Strategy::Beam {
                    size,
                    patience: 1.0,
                };
                let want = generate(&mut alone, &prompt, &params(), strategy).unwrap();
                assert_eq!(got[k], want, "window {k}, beam {size}");
                assert_eq!(want.tokens.len(), k + 1);
            }
            // one feed for the prompts, then steps over every live window's
            // rows: the first step holds all eight, the last only window 7's
            assert_eq!(b.feed_rows[0], 8);
            assert_eq!(b.feed_rows[1], 8);
            assert_eq!(*b.feed_rows.last().unwrap(), size);
            assert!(b.feed_rows.len() <= 1 + 9, "{:?}", b.feed_rows);
        }
    }

    #[test]
    fn prompts_decoded_together_must_share_their_search() {
        let mut b = backend();
        b.encode(&[&[0.0; 6000], &[1.0; 6000]]).unwrap();
        // a different start token cannot share the batch's search
        let r = generate_batch(&mut b, &[&[11, 18], &[11, 14]], &[0, 1], &params(), 1, 1.0);
        assert!(r.is_err());
        // a different task token before the last can
        let ok = generate_batch(
            &mut b,
            &[&[11, 12, 18], &[11, 13, 18]],
            &[0, 1],
            &params(),
            1,
            1.0,
        );
        assert_eq!(ok.unwrap().len(), 2);
    }

    #[test]
    fn max_length_is_half_the_positions_or_what_is_left() {
        let mut b = Scripted::new(20, |_w, _s: &[u32]| Scripted::peaked(20, 3, 5.0));
        let mut p = params();
        p.max_length = 20;
        let prompt = [16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 11, 18];
        // 14 tokens fed before the start token: min(20 / 2, 20 - 14) = 6 steps.
        let g = generate(
            &mut b,
            &prompt,
            &p,
            Strategy::Beam {
                size: 1,
                patience: 1.0,
            },
        )
        .unwrap();
        assert_eq!(g.tokens.len(), 6);
    }
}
