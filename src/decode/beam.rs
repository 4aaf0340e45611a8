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

use std::collections::HashMap;
use std::sync::Arc;

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
struct Trie {
    parent: Vec<u32>,
    token: Vec<u32>,
    children: HashMap<(u32, u32), u32>,
    /// With a language model: each node's state and the score it added so far.
    lm: Option<Arc<LmScorer>>,
    lm_state: Vec<LmState>,
    lm_score: Vec<f64>,
}

const ROOT: u32 = 0;

impl Trie {
    fn new(lm: Option<Arc<LmScorer>>) -> Self {
        Trie {
            parent: vec![ROOT],
            token: vec![u32::MAX],
            children: HashMap::new(),
            lm_state: lm.iter().map(|s| s.start()).collect(),
            lm,
            lm_score: vec![0.0],
        }
    }

    fn child(&mut self, node: u32, tok: usize) -> u32 {
        let next = self.parent.len() as u32;
        *self.children.entry((node, tok as u32)).or_insert_with(|| {
            self.parent.push(node);
            self.token.push(tok as u32);
            let mut score = self.lm_score[node as usize];
            if let Some(lm) = &self.lm {
                let (s, d) = lm.extend(&self.lm_state[node as usize], tok);
                self.lm_state.push(s);
                score += d;
            }
            self.lm_score.push(score);
            next
        })
    }

    /// Keeps only the prefixes `nodes` and their ancestors (renumbered in place).
    fn compact(&mut self, nodes: &mut [&mut u32]) {
        let n = self.parent.len();
        let mut live = vec![false; n];
        live[ROOT as usize] = true;
        for x in nodes.iter() {
            let mut x = **x;
            while !live[x as usize] {
                live[x as usize] = true;
                x = self.parent[x as usize];
            }
        }
        let mut map = vec![ROOT; n];
        // the root's state is the start state the new trie begins with
        let mut kept = Trie::new(self.lm.clone());
        let mut states = std::mem::take(&mut self.lm_state);
        for (old, alive) in live.into_iter().enumerate().skip(1) {
            if !alive {
                continue;
            }
            let parent = map[self.parent[old] as usize];
            let id = kept.parent.len() as u32;
            map[old] = id;
            kept.parent.push(parent);
            kept.token.push(self.token[old]);
            kept.children.insert((parent, self.token[old]), id);
            kept.lm_score.push(self.lm_score[old]);
            if self.lm.is_some() {
                kept.lm_state.push(std::mem::take(&mut states[old]));
            }
        }
        for x in nodes.iter_mut() {
            **x = map[**x as usize];
        }
        *self = kept;
    }

    /// The language model's score of the prefix, finished when `end`.
    fn score(&self, node: u32, end: bool) -> f64 {
        let s = self.lm_score[node as usize];
        match &self.lm {
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

/// Frames between compactions of the trie and the span arena.
const COMPACT_EVERY: usize = 128;

/// No span: the empty path.
const NO_SPAN: u32 = u32::MAX;

/// Alignment paths as linked spans: a path is the id of its last span.
#[derive(Default)]
struct Spans {
    span: Vec<TokenSpan>,
    parent: Vec<u32>,
}

impl Spans {
    fn push(&mut self, span: TokenSpan, parent: u32) -> u32 {
        self.span.push(span);
        self.parent.push(parent);
        (self.span.len() - 1) as u32
    }

    /// `path` with its last span extended to frame `t`.
    fn extend(&mut self, path: u32, t: usize, logp: f64) -> u32 {
        if path == NO_SPAN {
            return NO_SPAN;
        }
        let mut last = self.span[path as usize];
        last.extend(t, logp);
        self.push(last, self.parent[path as usize])
    }

    fn collect(&self, mut path: u32) -> Vec<TokenSpan> {
        let mut out = Vec::new();
        while path != NO_SPAN {
            out.push(self.span[path as usize]);
            path = self.parent[path as usize];
        }
        out.reverse();
        out
    }

    /// Keeps only the spans reachable from `heads` (renumbered in place).
    fn compact(&mut self, heads: &mut [&mut u32]) {
        let mut live = vec![false; self.span.len()];
        for h in heads.iter() {
            let mut x = **h;
            while x != NO_SPAN && !live[x as usize] {
                live[x as usize] = true;
                x = self.parent[x as usize];
            }
        }
        // parents come before children, so one pass renumbers
        let mut map = vec![NO_SPAN; self.span.len()];
        let mut kept = Spans::default();
        for (old, alive) in live.into_iter().enumerate() {
            if alive {
                let p = self.parent[old];
                let p = if p == NO_SPAN {
                    NO_SPAN
                } else {
                    map[p as usize]
                };
                map[old] = kept.push(self.span[old], p);
            }
        }
        for h in heads.iter_mut() {
            if **h != NO_SPAN {
                **h = map[**h as usize];
            }
        }
        *self = kept;
    }
}

/// A prefix in the beam, with the best alignment of each state.
struct Entry {
    node: u32,
    pb: f64,
    pnb: f64,
    vb: f64,
    vnb: f64,
    path_b: u32,
    path_nb: u32,
}

impl Entry {
    /// The empty prefix before any frame.
    fn start() -> Entry {
        Entry {
            node: ROOT,
            pb: 0.0,
            pnb: f64::NEG_INFINITY,
            vb: 0.0,
            vnb: f64::NEG_INFINITY,
            path_b: NO_SPAN,
            path_nb: NO_SPAN,
        }
    }

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

    fn path(&self, blank_state: bool) -> u32 {
        if blank_state {
            self.path_b
        } else {
            self.path_nb
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

    /// One frame.
    fn step(&mut self, row: &[f32]) {
        let (t, blank, width, compact_every) = (self.t, self.blank, self.width, self.compact_every);
        let BeamSearch {
            trie,
            spans,
            beam,
            cands,
            index,
            ..
        } = self;
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
                let i = slot(e.node, cands);
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
                    let i = slot(e.node, cands);
                    let c = &mut cands[i];
                    c.pnb = logaddexp(c.pnb, e.pnb + p);
                    if e.vnb + p > c.vnb {
                        c.vnb = e.vnb + p;
                        c.nb_origin = Some(NbOrigin::Repeat { parent: pi });
                    }
                    let child = trie.child(e.node, tok);
                    let i = slot(child, cands);
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
                    let i = slot(child, cands);
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

        // Most probable first; ties go to the lower trie id (created first,
        // compaction keeps the order), so the order is deterministic.
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
                    .map_or(NO_SPAN, |(p, from_b)| beam[p].path(from_b));
                let path_nb = match c.nb_origin {
                    None => NO_SPAN,
                    Some(NbOrigin::Repeat { parent }) => {
                        let path = beam[parent].path_nb;
                        let logp = match path {
                            NO_SPAN => 0.0,
                            p => row[spans.span[p as usize].id] as f64,
                        };
                        spans.extend(path, t, logp)
                    }
                    Some(NbOrigin::Append {
                        parent,
                        from_blank,
                        tok,
                        logp,
                    }) => spans.push(TokenSpan::new(tok, t, logp), beam[parent].path(from_blank)),
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
        *beam = next;
        if (t + 1) % compact_every == 0 {
            let mut heads: Vec<&mut u32> = Vec::with_capacity(2 * beam.len());
            let mut nodes: Vec<&mut u32> = Vec::with_capacity(beam.len());
            for e in beam.iter_mut() {
                heads.push(&mut e.path_b);
                heads.push(&mut e.path_nb);
                nodes.push(&mut e.node);
            }
            spans.compact(&mut heads);
            trie.compact(&mut nodes);
        }
        self.t += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic peaky rows: one likely token per frame, every other
    /// value distinct too, so no two prefixes tie exactly (on a tie the
    /// order of creation decides, and compaction renumbers prefixes).
    fn rows(frames: usize, vocab: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut out = Vec::with_capacity(frames * vocab);
        for _ in 0..frames {
            let hot = (next() % vocab as u64) as usize;
            let mut row: Vec<f32> = (0..vocab)
                .map(|_| 0.01 + (next() >> 40) as f32 / (1u64 << 24) as f32 * 0.2)
                .collect();
            row[hot] += 2.0 + (next() >> 40) as f32 / (1u64 << 24) as f32 * 4.0;
            let sum: f32 = row.iter().sum();
            out.extend(row.iter().map(|p| (p / sum).ln()));
        }
        out
    }

    #[test]
    fn compaction_and_chunked_pushes_change_no_result() {
        let (frames, vocab) = (1000, 28);
        let lp = rows(frames, vocab, 42);
        let syms = ["<blk>", "<sp>"]
            .into_iter()
            .map(String::from)
            .chain(('a'..='z').map(String::from));
        let tokens = Tokens::from_lines(syms).unwrap();
        let arpa = "\\data\\\nngram 1=4\n\n\\1-grams:\n-0.5\t</s>\n-99\t<s>\n-1.0\t<unk>\n-0.7\tab\n\n\\end\\\n";
        let lm = crate::decode::WordLm::parse(arpa, "t").unwrap();
        let sc = Arc::new(LmScorer::new(Arc::new(lm), tokens, Default::default()).unwrap());
        let run = |scorer: Option<Arc<LmScorer>>, every: usize, chunk: usize| {
            let mut s = BeamSearch::new(vocab, 0, 8, scorer).unwrap();
            s.compact_every = every;
            for rows in lp.chunks(chunk * vocab) {
                s.push(rows).unwrap();
            }
            let all = s.finish();
            assert_eq!(s.best().as_ref(), all.first(), "best() is finish()'s first");
            all
        };
        for scorer in [None, Some(sc)] {
            // compacted every 7 frames and fed 13 rows at a time, or never
            // compacted and fed at once: the same search
            let every = run(scorer.clone(), 7, 13);
            let never = run(scorer.clone(), usize::MAX, frames);
            assert_eq!(every.len(), never.len(), "lm {}", scorer.is_some());
            for (i, (a, b)) in every.iter().zip(&never).enumerate() {
                assert_eq!(
                    a.tokens,
                    b.tokens,
                    "hyp {i} tokens, lm {}",
                    scorer.is_some()
                );
                assert!(a.spans == b.spans, "hyp {i} spans, lm {}", scorer.is_some());
                assert_eq!(
                    (a.log_prob, a.lm_score),
                    (b.log_prob, b.lm_score),
                    "hyp {i}, lm {}",
                    scorer.is_some()
                );
            }
            assert!(every[0].tokens.len() > 100, "{}", every[0].tokens.len());
        }
    }
}
