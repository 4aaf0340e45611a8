//! The trie of prefixes, with each prefix's language-model state and score.

use std::collections::HashMap;
use std::sync::Arc;

use super::super::lm::{LmScorer, LmState};

/// Prefixes as nodes of a trie, so that equal prefixes reached in different
/// ways share one id and extending a prefix costs no copy.
pub(super) struct Trie {
    parent: Vec<u32>,
    token: Vec<u32>,
    children: HashMap<(u32, u32), u32>,
    /// With a language model: each node's state and the score it added so far.
    pub(super) lm: Option<Arc<LmScorer>>,
    lm_state: Vec<LmState>,
    lm_score: Vec<f64>,
}

pub(super) const ROOT: u32 = 0;

impl Trie {
    pub(super) fn new(lm: Option<Arc<LmScorer>>) -> Self {
        Trie {
            parent: vec![ROOT],
            token: vec![u32::MAX],
            children: HashMap::new(),
            lm_state: lm.iter().map(|s| s.start()).collect(),
            lm,
            lm_score: vec![0.0],
        }
    }

    pub(super) fn child(&mut self, node: u32, tok: usize) -> u32 {
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
    pub(super) fn compact(&mut self, nodes: &mut [&mut u32]) {
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
    pub(super) fn score(&self, node: u32, end: bool) -> f64 {
        let s = self.lm_score[node as usize];
        match &self.lm {
            Some(lm) if end => s + lm.finish(&self.lm_state[node as usize]),
            _ => s,
        }
    }

    pub(super) fn last(&self, node: u32) -> Option<usize> {
        (node != ROOT).then(|| self.token[node as usize] as usize)
    }

    pub(super) fn tokens(&self, mut node: u32) -> Vec<usize> {
        let mut out = Vec::new();
        while node != ROOT {
            out.push(self.token[node as usize] as usize);
            node = self.parent[node as usize];
        }
        out.reverse();
        out
    }
}
