//! Buffer reuse for a CPU runner ([`super::Runner::recycle_buffers`]): a
//! node's outputs go back to a pool once the last node that reads them has
//! run, and a node about to run takes from that pool buffers of the sizes
//! its facts give (the graph's inferred shapes at this step's length). A
//! step then holds the most values alive at once, not every node's output:
//! a Whisper encoder keeps a window's worth of activations for one layer
//! instead of all of them (tiny.en, heaptrack: 279 MB of buffers for one
//! worker before, 101 MB for two after). Steps with the same shapes still
//! allocate nothing once the pool holds what they need.

use super::Graph;
use crate::ops::{Const, Source, Tensor};

/// Which values die when, and the buffers they leave.
#[derive(Debug, Default)]
pub(super) struct Recycler {
    /// Per node, the nodes whose outputs nothing reads after it has run.
    dies_after: Vec<Vec<usize>>,
    /// Per node, which of its outputs were views of another value's
    /// buffer last step (they take no pooled buffer).
    views: Vec<Vec<bool>>,
    /// Unshared buffers of dead values, with the step that released them.
    pool: Vec<(Tensor, u64)>,
    /// Steps begun.
    step: u64,
}

impl Recycler {
    /// The plan for `graph` run in `order`: graph outputs, constants and
    /// sources are never released.
    pub(super) fn new(graph: &Graph, order: &[usize]) -> Recycler {
        let n = graph.nodes.len();
        let mut last_reader: Vec<Option<usize>> = vec![None; n];
        for &id in order {
            for o in &graph.nodes[id].inputs {
                last_reader[o.node] = Some(id);
            }
        }
        let mut dies_after = vec![Vec::new(); n];
        for &id in order {
            let node = &graph.nodes[id];
            let kept = graph.outputs.iter().any(|(_, o)| o.node == id)
                || node.op.as_any().is::<Const>()
                || node.op.as_any().is::<Source>();
            if !kept {
                // a value nothing reads dies as soon as it is made
                dies_after[last_reader[id].unwrap_or(id)].push(id);
            }
        }
        Recycler {
            dies_after,
            views: vec![Vec::new(); n],
            pool: Vec::new(),
            step: 0,
        }
    }

    /// Starts a step: buffers released before the last step and not taken
    /// since are dropped, so a graph run at many sizes (a prompt of each
    /// length) holds one step's buffers, not every size's.
    pub(super) fn begin(&mut self) {
        let last = self.step;
        self.pool.retain(|(_, at)| *at == last);
        self.step += 1;
    }

    /// Fills `outs` (node `id`'s outputs, empty when they were released)
    /// with pooled buffers of the sizes its facts give for stream length
    /// `s` (an output that was a view of another buffer last step gets
    /// none: its op makes it a view again).
    pub(super) fn before(
        &mut self,
        graph: &Graph,
        id: usize,
        s: Option<i64>,
        outs: &mut Vec<Tensor>,
    ) {
        if !outs.is_empty() {
            return;
        }
        let views = &self.views[id];
        for (k, fact) in graph.nodes[id].facts.iter().enumerate() {
            let len = fact
                .shape
                .iter()
                .map(|d| match (d.as_const(), s) {
                    (Some(n), _) => Some(n),
                    (None, Some(s)) => Some(d.eval(s)),
                    (None, None) => None,
                })
                .try_fold(1usize, |acc, n| Some(acc * usize::try_from(n?).ok()?));
            let found = match (len, views.get(k)) {
                (Some(len), None | Some(false)) => self
                    .pool
                    .iter_mut()
                    .position(|(t, _)| t.dtype() == fact.dtype && t.unshared_len() == Some(len)),
                _ => None,
            };
            outs.push(match found {
                Some(i) => self.pool.swap_remove(i).0,
                None => Tensor::empty(),
            });
        }
    }

    /// After node `id` ran: notes which outputs are views and releases the values
    /// that die here (a buffer still shared with a live view is left to
    /// that view; it comes back when the view dies).
    pub(super) fn after(&mut self, id: usize, values: &mut [Vec<Tensor>]) {
        let views = &mut self.views[id];
        views.clear();
        views.extend(values[id].iter_mut().map(|t| t.unshared_len().is_none()));
        for &dead in &self.dies_after[id] {
            for mut t in values[dead].drain(..) {
                if t.unshared_len().is_some() {
                    self.pool.push((t, self.step));
                }
            }
        }
    }
}
