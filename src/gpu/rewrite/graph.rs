//! The graph the rewrites work on: the source graph's nodes with the
//! translator's placements and concrete facts. A rewrite replaces a matched
//! group of nodes by one fused node in the place of one of them (its
//! anchor), whose GPU form computes them all ([`Rewriter::fuse`]);
//! [`Rewriter::finish`] gives the device graph the runner runs, and where
//! each source outlet went.
//!
//! Execution order is the source graph's topological order, a fused node
//! taking its anchor's place: the rules check that every input of the
//! fused node comes before the anchor and every reader after it, so that
//! order stays valid (and the kernels keep their order).

use std::sync::Arc;

use super::fused::Fused;
use crate::gpu::op::GpuOp;
use crate::gpu::translator::Placement;
use crate::graph::{Graph, Node, OutletId};
use crate::ops::{Const, DType, TypedFact};

/// One node of the graph under rewrite.
struct Work {
    node: Node,
    /// Concrete facts of its outputs (logical dtypes).
    facts: Vec<TypedFact>,
    placement: Placement,
    /// The source outlet each output computes.
    stands_for: Vec<OutletId>,
    /// The source node it is, or a fused node's anchor.
    origin: usize,
    /// Execution position.
    pos: usize,
    live: bool,
}

/// The source graph under rewrite.
pub struct Rewriter<'a> {
    src: &'a Graph,
    nodes: Vec<Work>,
    outputs: Vec<(String, OutletId)>,
    /// Readers of each outlet: (reader, input index).
    readers_of: Vec<Vec<Vec<(usize, usize)>>>,
    /// How many graph outputs each node's outlets are.
    graph_reads: Vec<usize>,
}

/// One fusion: `anchor` and `absorbed` become one node in the anchor's
/// place, reading `inputs` and computing `outputs` (outlets of the group,
/// in the order of the fused node's outputs) with `op`.
pub struct Fusion {
    /// The fused node's op kind (`Fused::kind`).
    pub kind: &'static str,
    pub anchor: usize,
    pub absorbed: Vec<usize>,
    pub inputs: Vec<OutletId>,
    pub outputs: Vec<OutletId>,
    pub op: Box<dyn GpuOp>,
}

/// The device graph and its translation.
pub struct Rewritten {
    pub graph: Graph,
    pub placements: Vec<Placement>,
    pub facts: Vec<Vec<TypedFact>>,
    /// Execution order.
    pub order: Vec<usize>,
    /// For each source outlet, the device outlet that computes it (`None`:
    /// fused away, an intermediate value of a fused node).
    pub outlets: Vec<Vec<Option<OutletId>>>,
    /// For each device outlet, the source outlet it computes.
    pub sources: Vec<Vec<OutletId>>,
    /// For each device node, the source node it is (a fused node: the one
    /// it replaced in place, whose launch it took on).
    pub origins: Vec<usize>,
}

impl<'a> Rewriter<'a> {
    /// `src` with one placement and concrete facts per node, run in `order`.
    pub fn new(
        src: &'a Graph,
        order: &[usize],
        facts: Vec<Vec<TypedFact>>,
        placements: Vec<Placement>,
    ) -> Rewriter<'a> {
        let mut pos = vec![0; src.nodes.len()];
        for (t, &id) in order.iter().enumerate() {
            pos[id] = t;
        }
        let nodes = src
            .nodes
            .iter()
            .zip(facts)
            .zip(placements)
            .enumerate()
            .map(|(id, ((node, facts), placement))| Work {
                stands_for: (0..node.facts.len())
                    .map(|s| OutletId::new(id, s))
                    .collect(),
                node: node.clone(),
                facts,
                placement,
                origin: id,
                pos: pos[id],
                live: true,
            })
            .collect();
        let mut g = Rewriter {
            src,
            nodes,
            outputs: src.outputs.clone(),
            readers_of: Vec::new(),
            graph_reads: Vec::new(),
        };
        g.reindex();
        g
    }

    fn reindex(&mut self) {
        self.readers_of = self
            .nodes
            .iter()
            .map(|w| vec![Vec::new(); w.facts.len()])
            .collect();
        self.graph_reads = vec![0; self.nodes.len()];
        for (id, w) in self.nodes.iter().enumerate().filter(|(_, w)| w.live) {
            for (k, o) in w.node.inputs.iter().enumerate() {
                self.readers_of[o.node][o.slot].push((id, k));
            }
        }
        for (_, o) in &self.outputs {
            self.graph_reads[o.node] += 1;
        }
    }

    /// Nodes, removed ones included (ids never change before `finish`).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn live(&self, id: usize) -> bool {
        self.nodes[id].live
    }

    pub fn name(&self, id: usize) -> &str {
        &self.nodes[id].node.name
    }

    pub fn inputs(&self, id: usize) -> &[OutletId] {
        &self.nodes[id].node.inputs
    }

    /// How many inputs the node's source node (a fused node's anchor) has:
    /// the inputs a fusion added come after them.
    pub fn own_inputs(&self, id: usize) -> usize {
        self.src.nodes[self.nodes[id].origin].inputs.len()
    }

    /// A node's output outlets.
    pub fn outlets(&self, id: usize) -> Vec<OutletId> {
        (0..self.nodes[id].facts.len())
            .map(|s| OutletId::new(id, s))
            .collect()
    }

    /// Concrete facts of a node's outputs.
    pub fn facts(&self, id: usize) -> &[TypedFact] {
        &self.nodes[id].facts
    }

    pub fn fact(&self, o: OutletId) -> &TypedFact {
        &self.nodes[o.node].facts[o.slot]
    }

    /// Execution position.
    pub fn pos(&self, id: usize) -> usize {
        self.nodes[id].pos
    }

    pub fn placement(&self, id: usize) -> &Placement {
        &self.nodes[id].placement
    }

    /// The GPU form of a node on the GPU.
    pub fn gpu_op(&self, id: usize) -> Option<&dyn GpuOp> {
        match &self.nodes[id].placement {
            Placement::Gpu(op) => Some(op.as_ref()),
            _ => None,
        }
    }

    /// Whether the node runs on the GPU.
    pub fn gpu(&self, id: usize) -> bool {
        self.nodes[id].placement.is_gpu()
    }

    /// Whether the node runs on the GPU and its output 0 is still its own
    /// source node's (nothing after it was fused into it).
    pub fn free(&self, id: usize) -> bool {
        let w = &self.nodes[id];
        self.gpu(id) && w.stands_for.first().is_some_and(|o| o.node == w.origin)
    }

    /// Whether the node's outputs are on the device whenever a GPU node
    /// runs: a GPU node's, a graph input's (copied in first) or a
    /// constant's (uploaded once), so a fused node may read them.
    pub fn on_device(&self, id: usize) -> bool {
        matches!(
            self.nodes[id].placement,
            Placement::Gpu(_) | Placement::Const | Placement::Input
        )
    }

    pub fn is_const(&self, o: OutletId) -> bool {
        matches!(self.nodes[o.node].placement, Placement::Const)
    }

    /// Reads of any of the node's outputs, graph outputs included.
    pub fn readers(&self, id: usize) -> usize {
        self.readers_of[id].iter().map(Vec::len).sum::<usize>() + self.graph_reads[id]
    }

    /// Readers of the node's output 0: (reader, input index).
    pub fn users(&self, id: usize) -> &[(usize, usize)] {
        self.readers_of[id].first().map_or(&[], |v| v.as_slice())
    }

    /// The single reader of the node's only read output, when that is all.
    pub fn sole_user(&self, id: usize) -> Option<(usize, usize)> {
        let users = self.users(id);
        (self.readers(id) == 1 && users.len() == 1).then(|| users[0])
    }

    /// The source op of the node, or of a fused node's anchor.
    pub fn op<T: 'static>(&self, id: usize) -> Option<&T> {
        self.src.nodes[self.nodes[id].origin]
            .op
            .as_any()
            .downcast_ref()
    }

    /// The source op whose output `o` computes (after a fusion, the last
    /// node fused into it on that output).
    pub fn op_behind<T: 'static>(&self, o: OutletId) -> Option<&T> {
        let s = self.nodes[o.node].stands_for[o.slot];
        self.src.nodes[s.node].op.as_any().downcast_ref()
    }

    /// The value of a constant scalar f32.
    pub fn scalar(&self, o: OutletId) -> Option<f32> {
        let c = self.nodes[o.node]
            .node
            .op
            .as_any()
            .downcast_ref::<Const>()?;
        (c.value.len() == 1 && c.value.dtype() == DType::F32).then(|| c.value.to_f32_vec()[0])
    }

    /// Replaces a group of nodes by one fused node (see [`Fusion`]): readers
    /// of the group's `outputs` read the fused node's instead.
    pub fn fuse(&mut self, f: Fusion) {
        let renamed: Vec<(OutletId, OutletId)> = f
            .outputs
            .iter()
            .enumerate()
            .map(|(j, &o)| (o, OutletId::new(f.anchor, j)))
            .collect();
        let facts: Vec<TypedFact> = f.outputs.iter().map(|&o| self.fact(o).clone()).collect();
        let node_facts = f
            .outputs
            .iter()
            .map(|o| self.nodes[o.node].node.facts[o.slot].clone())
            .collect();
        let stands_for = f
            .outputs
            .iter()
            .map(|o| self.nodes[o.node].stands_for[o.slot])
            .collect();
        let a = &self.nodes[f.anchor];
        let (anchor_op, mut absorbed) = match a.node.op.as_any().downcast_ref::<Fused>() {
            Some(prev) => (prev.anchor.clone(), prev.absorbed.clone()),
            None => (a.node.op.clone(), Vec::new()),
        };
        for &id in &f.absorbed {
            absorbed.push(self.nodes[id].node.name.clone());
            self.nodes[id].live = false;
        }
        let rename = |o: &mut OutletId| {
            if let Some(&(_, to)) = renamed.iter().find(|(from, _)| from == o) {
                *o = to;
            }
        };
        for (id, w) in self.nodes.iter_mut().enumerate() {
            if w.live && id != f.anchor {
                debug_assert!(
                    w.node
                        .inputs
                        .iter()
                        .all(|o| o.node != f.anchor || renamed.iter().any(|(from, _)| from == o)),
                    "`{}` reads an output the fusion drops",
                    w.node.name
                );
                w.node.inputs.iter_mut().for_each(rename);
            }
        }
        self.outputs.iter_mut().for_each(|(_, o)| rename(o));
        let w = &mut self.nodes[f.anchor];
        w.node.op = Arc::new(Fused {
            kind: f.kind,
            anchor: anchor_op,
            absorbed,
            facts: node_facts,
        });
        w.node.facts = facts.clone();
        w.node.inputs = f.inputs;
        w.facts = facts;
        w.stands_for = stands_for;
        w.placement = Placement::Gpu(f.op);
        self.reindex();
    }

    /// Removes a node nothing reads any more (its readers compute it).
    pub fn remove(&mut self, id: usize) {
        debug_assert_eq!(self.readers(id), 0, "{} is still read", self.name(id));
        self.nodes[id].live = false;
        self.reindex();
    }

    /// The device graph: the live nodes in execution order.
    pub fn finish(self) -> Rewritten {
        let mut live: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.live(i)).collect();
        live.sort_by_key(|&i| self.nodes[i].pos);
        let mut new_id = vec![usize::MAX; self.nodes.len()];
        for (n, &i) in live.iter().enumerate() {
            new_id[i] = n;
        }
        let map = |o: OutletId| OutletId::new(new_id[o.node], o.slot);
        let mut outlets: Vec<Vec<Option<OutletId>>> = self
            .src
            .nodes
            .iter()
            .map(|n| vec![None; n.facts.len()])
            .collect();
        let mut slots: Vec<Option<Work>> = self.nodes.into_iter().map(Some).collect();
        let mut out = Rewritten {
            graph: Graph {
                nodes: Vec::with_capacity(live.len()),
                inputs: self.src.inputs.iter().map(|&i| new_id[i]).collect(),
                outputs: self
                    .outputs
                    .iter()
                    .map(|(n, o)| (n.clone(), map(*o)))
                    .collect(),
            },
            placements: Vec::with_capacity(live.len()),
            facts: Vec::with_capacity(live.len()),
            order: (0..live.len()).collect(),
            outlets: Vec::new(),
            sources: Vec::with_capacity(live.len()),
            origins: Vec::with_capacity(live.len()),
        };
        for (n, &i) in live.iter().enumerate() {
            let mut w = slots[i].take().expect("each live node once");
            w.node.inputs.iter_mut().for_each(|o| *o = map(*o));
            for (slot, s) in w.stands_for.iter().enumerate() {
                outlets[s.node][s.slot] = Some(OutletId::new(n, slot));
            }
            out.graph.nodes.push(w.node);
            out.placements.push(w.placement);
            out.facts.push(w.facts);
            out.sources.push(w.stands_for);
            out.origins.push(w.origin);
        }
        out.outlets = outlets;
        out
    }
}
