//! The arena of alignment paths: token spans linked to their parents.

use super::super::TokenSpan;

/// No span: the empty path.
pub(super) const NO_SPAN: u32 = u32::MAX;

/// Alignment paths as linked spans: a path is the id of its last span.
#[derive(Default)]
pub(super) struct Spans {
    pub(super) span: Vec<TokenSpan>,
    parent: Vec<u32>,
}

impl Spans {
    pub(super) fn push(&mut self, span: TokenSpan, parent: u32) -> u32 {
        self.span.push(span);
        self.parent.push(parent);
        (self.span.len() - 1) as u32
    }

    /// `path` with its last span extended to frame `t`.
    pub(super) fn extend(&mut self, path: u32, t: usize, logp: f64) -> u32 {
        if path == NO_SPAN {
            return NO_SPAN;
        }
        let mut last = self.span[path as usize];
        last.extend(t, logp);
        self.push(last, self.parent[path as usize])
    }

    pub(super) fn collect(&self, mut path: u32) -> Vec<TokenSpan> {
        let mut out = Vec::new();
        while path != NO_SPAN {
            out.push(self.span[path as usize]);
            path = self.parent[path as usize];
        }
        out.reverse();
        out
    }

    /// Keeps only the spans reachable from `heads` (renumbered in place).
    pub(super) fn compact(&mut self, heads: &mut [&mut u32]) {
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
