//! CTC prefix beam search over full log-prob rows.
//!
//! Each prefix (a collapsed token sequence) carries the log-probabilities of
//! all alignments that produce it and end in a blank (`pb`) or in its last
//! token (`pnb`); the beam keeps the `width` prefixes of highest total
//! `logaddexp(pb, pnb)` after every frame. Beside the sums it keeps, for each
//! of the two states, the best single alignment (Viterbi score and path): the
//! tokens' frames come from the best alignment of the winning prefix.

use std::collections::HashMap;

use super::lm::{LmScorer, LmState};
use super::{DecodeError, FrameTiming, TokenSpan, Tokens, Transcript};

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

/// Prefixes as nodes of a trie, so that equal prefixes reached in different
/// ways share one id and extending a prefix costs no copy.
struct Trie<'a> {
    parent: Vec<u32>,
    token: Vec<u32>,
    children: HashMap<(u32, u32), u32>,
    /// With a language model: each node's state and the score it added so far.
    lm: Option<&'a LmScorer<'a>>,
    lm_state: Vec<LmState>,
    lm_score: Vec<f64>,
}

const ROOT: u32 = 0;

impl<'a> Trie<'a> {
    fn new(lm: Option<&'a LmScorer<'a>>) -> Self {
        Trie {
            parent: vec![ROOT],
            token: vec![u32::MAX],
            children: HashMap::new(),
            lm,
            lm_state: lm.map(|s| s.start()).into_iter().collect(),
            lm_score: vec![0.0],
        }
    }

    fn child(&mut self, node: u32, tok: usize) -> u32 {
        let next = self.parent.len() as u32;
        *self.children.entry((node, tok as u32)).or_insert_with(|| {
            self.parent.push(node);
            self.token.push(tok as u32);
            let mut score = self.lm_score[node as usize];
            if let Some(lm) = self.lm {
                let (s, d) = lm.extend(&self.lm_state[node as usize], tok);
                self.lm_state.push(s);
                score += d;
            }
            self.lm_score.push(score);
            next
        })
    }

    /// The language model's score of the prefix, finished when `end`.
    fn score(&self, node: u32, end: bool) -> f64 {
        let s = self.lm_score[node as usize];
        match self.lm {
            Some(lm) if end => s + lm.finish(&self.lm_state[node as usize]),
            _ => s,
        }
    }

    fn last(&self, node: u32) -> Option<usize> {
        (node != ROOT).then(|| self.token[node as usize] as usize)
    }

    fn tokens(&self, mut node: u32) -> Vec<usize> {
        let mut out = Vec::new();
        while node != ROOT {
            out.push(self.token[node as usize] as usize);
            node = self.parent[node as usize];
        }
        out.reverse();
        out
    }
}

/// A prefix in the beam, with the best alignment of each state.
struct Entry {
    node: u32,
    pb: f64,
    pnb: f64,
    vb: f64,
    vnb: f64,
    path_b: Vec<TokenSpan>,
    path_nb: Vec<TokenSpan>,
}

impl Entry {
    fn total(&self) -> f64 {
        logaddexp(self.pb, self.pnb)
    }

    /// The better of the two states' best alignments: (score, ends in blank).
    fn best(&self) -> (f64, bool) {
        if self.vb >= self.vnb {
            (self.vb, true)
        } else {
            (self.vnb, false)
        }
    }

    fn path(&self, blank_state: bool) -> &[TokenSpan] {
        if blank_state {
            &self.path_b
        } else {
            &self.path_nb
        }
    }
}

/// How a candidate's best non-blank alignment came about.
#[derive(Clone, Copy)]
enum NbOrigin {
    /// The parent's last token repeated (the path ends in the same span).
    Repeat { parent: usize },
    /// A new token appended to the parent's blank-or-nonblank best path.
    Append {
        parent: usize,
        from_blank: bool,
        tok: usize,
        logp: f64,
    },
}

/// A prefix of the next frame's beam, with back-pointers instead of paths.
struct Candidate {
    node: u32,
    pb: f64,
    pnb: f64,
    vb: f64,
    vnb: f64,
    /// (parent index, parent path ends in blank) of the best blank-ending alignment.
    b_origin: Option<(usize, bool)>,
    nb_origin: Option<NbOrigin>,
}

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
    lm: Option<&LmScorer>,
) -> Result<Vec<Hypothesis>, DecodeError> {
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
    let expected = frames
        .checked_mul(vocab)
        .ok_or_else(|| DecodeError::Shape(format!("{frames} frames x {vocab} tokens overflows")))?;
    if log_probs.len() != expected {
        return Err(DecodeError::Shape(format!(
            "{} values for {frames} frames x {vocab} tokens (= {expected})",
            log_probs.len()
        )));
    }
    for (t, row) in log_probs.chunks_exact(vocab).enumerate() {
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

    let mut trie = Trie::new(lm);
    let mut beam = vec![Entry {
        node: ROOT,
        pb: 0.0,
        pnb: f64::NEG_INFINITY,
        vb: 0.0,
        vnb: f64::NEG_INFINITY,
        path_b: Vec::new(),
        path_nb: Vec::new(),
    }];
    let mut cands: Vec<Candidate> = Vec::new();
    let mut index: HashMap<u32, usize> = HashMap::new();

    for (t, row) in log_probs.chunks_exact(vocab).enumerate() {
        cands.clear();
        index.clear();
        let mut slot = |node: u32, cands: &mut Vec<Candidate>| -> usize {
            *index.entry(node).or_insert_with(|| {
                cands.push(Candidate {
                    node,
                    pb: f64::NEG_INFINITY,
                    pnb: f64::NEG_INFINITY,
                    vb: f64::NEG_INFINITY,
                    vnb: f64::NEG_INFINITY,
                    b_origin: None,
                    nb_origin: None,
                });
                cands.len() - 1
            })
        };
        for (pi, e) in beam.iter().enumerate() {
            let total = e.total();
            let (vbest, best_is_b) = e.best();
            let last = trie.last(e.node);

            let p = row[blank] as f64;
            if p > f64::NEG_INFINITY {
                let i = slot(e.node, &mut cands);
                let c = &mut cands[i];
                c.pb = logaddexp(c.pb, total + p);
                if vbest + p > c.vb {
                    c.vb = vbest + p;
                    c.b_origin = Some((pi, best_is_b));
                }
            }
            for (tok, &p) in row.iter().enumerate() {
                let p = p as f64;
                if tok == blank || p == f64::NEG_INFINITY {
                    continue;
                }
                if last == Some(tok) {
                    // The same token again: a repeat unless a blank came between.
                    let i = slot(e.node, &mut cands);
                    let c = &mut cands[i];
                    c.pnb = logaddexp(c.pnb, e.pnb + p);
                    if e.vnb + p > c.vnb {
                        c.vnb = e.vnb + p;
                        c.nb_origin = Some(NbOrigin::Repeat { parent: pi });
                    }
                    let child = trie.child(e.node, tok);
                    let i = slot(child, &mut cands);
                    let c = &mut cands[i];
                    c.pnb = logaddexp(c.pnb, e.pb + p);
                    if e.vb + p > c.vnb {
                        c.vnb = e.vb + p;
                        c.nb_origin = Some(NbOrigin::Append {
                            parent: pi,
                            from_blank: true,
                            tok,
                            logp: p,
                        });
                    }
                } else {
                    let child = trie.child(e.node, tok);
                    let i = slot(child, &mut cands);
                    let c = &mut cands[i];
                    c.pnb = logaddexp(c.pnb, total + p);
                    if vbest + p > c.vnb {
                        c.vnb = vbest + p;
                        c.nb_origin = Some(NbOrigin::Append {
                            parent: pi,
                            from_blank: best_is_b,
                            tok,
                            logp: p,
                        });
                    }
                }
            }
        }

        // Most probable first; ties go to the prefix created first, so the
        // order is deterministic.
        let mut order: Vec<usize> = (0..cands.len())
            .filter(|&i| logaddexp(cands[i].pb, cands[i].pnb) > f64::NEG_INFINITY)
            .collect();
        let rank =
            |i: usize| logaddexp(cands[i].pb, cands[i].pnb) + trie.score(cands[i].node, false);
        order.sort_by(|&a, &b| {
            rank(b)
                .total_cmp(&rank(a))
                .then(cands[a].node.cmp(&cands[b].node))
        });
        order.truncate(width);

        let next: Vec<Entry> = order
            .iter()
            .map(|&i| {
                let c = &cands[i];
                let path_b = c
                    .b_origin
                    .map(|(p, from_b)| beam[p].path(from_b).to_vec())
                    .unwrap_or_default();
                let path_nb = match c.nb_origin {
                    None => Vec::new(),
                    Some(NbOrigin::Repeat { parent }) => {
                        let mut path = beam[parent].path_nb.clone();
                        if let Some(span) = path.last_mut() {
                            span.extend(t, row[span.id] as f64);
                        }
                        path
                    }
                    Some(NbOrigin::Append {
                        parent,
                        from_blank,
                        tok,
                        logp,
                    }) => {
                        let mut path = beam[parent].path(from_blank).to_vec();
                        path.push(TokenSpan::new(tok, t, logp));
                        path
                    }
                };
                Entry {
                    node: c.node,
                    pb: c.pb,
                    pnb: c.pnb,
                    vb: c.vb,
                    vnb: c.vnb,
                    path_b,
                    path_nb,
                }
            })
            .collect();
        beam = next;
    }

    let mut hyps: Vec<Hypothesis> = beam
        .into_iter()
        .map(|e| {
            let (_, best_is_b) = e.best();
            Hypothesis {
                tokens: trie.tokens(e.node),
                spans: e.path(best_is_b).to_vec(),
                log_prob: e.total(),
                lm_score: trie.score(e.node, true),
            }
        })
        .collect();
    // the last word and the sentence end can reorder the beam
    hyps.sort_by(|a, b| (b.log_prob + b.lm_score).total_cmp(&(a.log_prob + a.lm_score)));
    Ok(hyps)
}
