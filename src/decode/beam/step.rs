//! One frame of [`BeamSearch`]: every prefix extended by every token, the
//! best `width` kept, their paths built, the trie and arena compacted.

use super::super::TokenSpan;
use super::entry::{Candidate, Entry, NbOrigin};
use super::spans::NO_SPAN;
use super::{logaddexp, BeamSearch};

impl BeamSearch {
    /// One frame.
    pub(super) fn step(&mut self, row: &[f32]) {
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
