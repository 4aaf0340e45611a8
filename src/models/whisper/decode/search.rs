//! What greedy and beam search share: the run's description, a finished
//! hypothesis, how hypotheses are scored and ranked at the end, and the
//! step-by-step form ([`Stepper`]) that lets one decoder step serve many
//! searches at once.

use super::logits::LogitRules;
use crate::models::whisper::{WhisperBackend, WhisperError};
use crate::ops::top_tokens::RowRules;
use crate::ops::Tensor;
use crate::Result;

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
    /// Each row's rules at `step` for a backend that chooses tokens itself
    /// (row 0 asks for the no-speech probability at step 0, when the spec
    /// does); `None` when the rules need whole rows of logits.
    pub(crate) fn row_rules<'s>(
        &self,
        step: usize,
        rows: impl Iterator<Item = &'s [u32]>,
        vocab: usize,
    ) -> Option<Vec<RowRules>> {
        rows.enumerate()
            .map(|(row, seq)| {
                let mut r = self.rules.row_rules(step, seq, self.prefix.len(), vocab)?;
                if step == 0 && row == 0 {
                    r.no_speech = self.no_speech;
                }
                Some(r)
            })
            .collect()
    }
}

/// Checks the backend gave `rows` rows of `vocab` logits.
pub(crate) fn check_logits(
    got: usize,
    rows: usize,
    vocab: usize,
) -> std::result::Result<(), WhisperError> {
    if got != rows * vocab {
        return Err(WhisperError::BackendShape {
            what: "decoder logits",
            expected: rows * vocab,
            got,
        });
    }
    Ok(())
}

/// One window's search, a decoder step at a time. Whoever drives it feeds
/// [`Stepper::inputs`] (one token per row the search holds, its rows
/// contiguous in the decoder's batch), hands back their logits, and
/// reorders the rows as [`Stepper::advance`] says; so one decoder step can
/// feed the rows of many searches ([`super::generate::generate_batch`]).
pub(crate) trait Stepper: Send {
    /// The token each of this search's rows is fed next; empty once done.
    fn inputs(&self) -> &[u32];
    /// Takes the logits of the last feed for this search's rows (`[rows,
    /// vocab]`, changed in place) and returns each next row's source among
    /// the current rows, or `None` when the search is done (its rows leave).
    fn advance(&mut self, logits: &mut [f32], vocab: usize) -> Option<Vec<usize>>;
    /// What this step asks of a backend that chooses tokens itself
    /// ([`WhisperBackend::feed_choose`]): each row's rules and running
    /// score (and a sampler's draws), and the candidates a row it needs;
    /// `None` when the step needs whole rows of logits (a repetition
    /// penalty, n-gram blocking).
    fn choice(&mut self, vocab: usize) -> Option<Choice>;
    /// As [`Stepper::advance`], from the candidates the backend chose for
    /// this search's rows (`stride` a row, best first) and the rows'
    /// no-speech probabilities where asked for.
    fn advance_chosen(
        &mut self,
        ids: &[u32],
        scores: &[f32],
        stride: usize,
        no_speech: &[f32],
    ) -> Option<Vec<usize>>;
    /// The run's logit rules (searches fed together must share their
    /// suppression lists to be chosen together).
    fn rules(&self) -> &LogitRules;
    /// The best hypothesis, and the no-speech probability when the spec
    /// asked for it at step 0.
    fn result(&mut self) -> (Hypothesis, Option<f32>);
}

/// One step's request to a backend that chooses ([`Stepper::choice`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Choice {
    pub rules: Vec<RowRules>,
    pub cum: Vec<f32>,
    pub k: usize,
}

/// A search, its rows' logits, its first row, and what it said.
type Job<'a, 's> = (
    &'a mut (dyn Stepper + 's),
    &'a mut [f32],
    usize,
    Option<Vec<usize>>,
);

/// Rows at which the searches' logit work (rules, log-softmax and choice
/// over the whole vocabulary, per row) is spread over threads: below it,
/// starting them costs more than it saves.
const PARALLEL_ROWS: usize = 16;

/// Advances every search over its logits; with many rows, on several
/// threads (each search's work is its own).
fn advance_all(jobs: &mut [Job<'_, '_>], vocab: usize, rows: usize) {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(jobs.len());
    if rows < PARALLEL_ROWS || threads < 2 {
        for (s, l, _, keep) in jobs.iter_mut() {
            *keep = s.advance(l, vocab);
        }
        return;
    }
    let per = jobs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        for part in jobs.chunks_mut(per) {
            scope.spawn(move || {
                for (s, l, _, keep) in part.iter_mut() {
                    *keep = s.advance(l, vocab);
                }
            });
        }
    });
}

/// Whether `src` keeps `rows` rows as they are.
pub(crate) fn is_identity(src: &[usize], rows: usize) -> bool {
    src.len() == rows && src.iter().enumerate().all(|(i, &s)| i == s)
}

/// Runs one search to its end over the backend's single started sequence.
pub(crate) fn drive(backend: &mut dyn WhisperBackend, search: &mut dyn Stepper) -> Result<()> {
    drive_all(backend, &mut [search])
}

/// Runs `searches` to their ends in lock-step, one decoder step feeding
/// every live search's rows (search `i` starts on the backend's sequence
/// `i`, whose prompt is fed); a search that ends leaves the batch, the
/// others go on.
pub(crate) fn drive_all<'s>(
    backend: &mut dyn WhisperBackend,
    searches: &mut [&mut (dyn Stepper + 's)],
) -> Result<()> {
    let vocab = backend.vocab_size();
    // each search's first rows fork from its sequence (samples of one
    // window); a search with nothing to do drops its sequence
    let mut src: Vec<usize> = searches
        .iter()
        .enumerate()
        .flat_map(|(i, s)| std::iter::repeat_n(i, s.inputs().len()))
        .collect();
    if src.is_empty() {
        return Ok(());
    }
    if !is_identity(&src, searches.len()) {
        backend.reorder(&src)?;
    }
    // the searches choose on the backend's side when they share their
    // suppression lists (one mask for the batch)
    let mut masks = shared_masks(searches, vocab);
    let (mut tokens, mut logits) = (Vec::new(), Vec::new());
    loop {
        tokens.clear();
        for s in searches.iter() {
            tokens.extend_from_slice(s.inputs());
        }
        let rows = tokens.len();
        let chosen = match &masks {
            Some(m) => choose(backend, searches, &tokens, m, vocab)?,
            None => Choose::SearchNeedsLogits,
        };
        src.clear();
        match chosen {
            Choose::Chosen(c) => advance_chosen_all(searches, &c, &mut src),
            declined => {
                if let Choose::BackendDeclined = declined {
                    // it will not choose later steps either
                    masks = None;
                }
                backend.feed(&tokens, 1, &[0], &mut logits)?;
                check_logits(logits.len(), rows, vocab)?;
                advance_on_logits(searches, &mut logits, vocab, &mut src);
            }
        }
        if src.is_empty() {
            return Ok(());
        }
        if !is_identity(&src, rows) {
            backend.reorder(&src)?;
        }
    }
}

/// Advances every live search over its rows of `logits` and writes into
/// `src` each next row's source among all rows.
fn advance_on_logits(
    searches: &mut [&mut (dyn Stepper + '_)],
    logits: &mut [f32],
    vocab: usize,
    src: &mut Vec<usize>,
) {
    // every live search with its rows' logits and its row offset
    let rows = logits.len() / vocab.max(1);
    let mut rest = logits;
    let mut jobs = Vec::with_capacity(searches.len());
    let mut offset = 0;
    for s in searches.iter_mut() {
        let n = s.inputs().len();
        if n == 0 {
            continue;
        }
        let (own, tail) = std::mem::take(&mut rest).split_at_mut(n * vocab);
        rest = tail;
        jobs.push((&mut **s, own, offset, None));
        offset += n;
    }
    advance_all(&mut jobs, vocab, rows);
    for (_, _, offset, keep) in &jobs {
        if let Some(keep) = keep {
            src.extend(keep.iter().map(|&k| offset + k));
        }
    }
}

/// Advances every live search over its rows' candidates in `chosen` and
/// writes into `src` each next row's source among all rows.
fn advance_chosen_all(
    searches: &mut [&mut (dyn Stepper + '_)],
    chosen: &crate::models::whisper::Chosen,
    src: &mut Vec<usize>,
) {
    let stride = chosen.stride;
    let mut offset = 0;
    for s in searches.iter_mut() {
        let n = s.inputs().len();
        if n == 0 {
            continue;
        }
        let (a, b) = (offset * stride, (offset + n) * stride);
        let keep = s.advance_chosen(
            &chosen.ids[a..b],
            &chosen.scores[a..b],
            stride,
            &chosen.no_speech[offset..offset + n],
        );
        if let Some(keep) = keep {
            src.extend(keep.iter().map(|&k| offset + k));
        }
        offset += n;
    }
}

/// The masks of the searches' suppression lists (`[2, vocab]`, made once
/// for the whole run) when every search has the same lists, else `None`
/// (each step then takes whole logits).
fn shared_masks(searches: &[&mut (dyn Stepper + '_)], vocab: usize) -> Option<Tensor> {
    let first = searches.first()?.rules();
    let same = searches.iter().all(|s| {
        let r = s.rules();
        r.suppress == first.suppress && r.suppress_begin == first.suppress_begin
    });
    same.then(|| Tensor::from_vec(vec![2, vocab], first.masks(vocab)).ok())
        .flatten()
}

/// What [`choose`] did.
enum Choose {
    /// Fed, and every row's candidates chosen.
    Chosen(crate::models::whisper::Chosen),
    /// Nothing fed: a search needs whole logits this step.
    SearchNeedsLogits,
    /// Nothing fed: the backend does not choose.
    BackendDeclined,
}

/// Feeds `tokens` and has the backend choose every live search's
/// candidates, when every search can take them this step and the backend
/// chooses.
fn choose(
    backend: &mut dyn WhisperBackend,
    searches: &mut [&mut (dyn Stepper + '_)],
    tokens: &[u32],
    masks: &Tensor,
    vocab: usize,
) -> Result<Choose> {
    let (mut rules, mut cum, mut k) = (Vec::new(), Vec::new(), 1);
    for s in searches.iter_mut().filter(|s| !s.inputs().is_empty()) {
        let Some(c) = s.choice(vocab) else {
            return Ok(Choose::SearchNeedsLogits);
        };
        if c.rules.len() != s.inputs().len() || c.cum.len() != c.rules.len() {
            return Ok(Choose::SearchNeedsLogits);
        }
        rules.extend(c.rules);
        cum.extend(c.cum);
        k = k.max(c.k);
    }
    if rules.len() != tokens.len() {
        return Ok(Choose::SearchNeedsLogits);
    }
    let Some(c) = backend.feed_choose(tokens, &rules, &cum, masks, k)? else {
        return Ok(Choose::BackendDeclined);
    };
    check_logits(c.ids.len(), tokens.len(), c.stride)?;
    check_logits(c.scores.len(), tokens.len(), c.stride)?;
    check_logits(c.no_speech.len(), tokens.len(), 1)?;
    Ok(Choose::Chosen(c))
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
