//! Fusion passes over a translation: small neighbours of a GPU op (an
//! activation, a residual add, a GLU, a layer norm before a Linear) are
//! folded into its kernel, and their nodes become views with no launch of
//! their own. A chunk step is a chain of small dependent kernels, each
//! costing a few microseconds however little it does, so every launch
//! saved shows in the step's latency.
//!
//! A fused-away node keeps its place in the graph (the CPU runs it as
//! before); on the GPU its output is a view that nothing reads (or, for a
//! sibling Linear or a norm a Linear's epilogue takes on, a buffer another
//! node's launch writes), and `fused_into` says which node computes it, so
//! comparisons skip it.

use super::op::{GpuOp, WrittenBy};
use super::ops::shape::{view, view_of};
use super::translator::Placement;
use crate::graph::{Graph, OutletId};
use crate::ops::conv::Conv1d;
use crate::ops::matmul::Linear;
use crate::ops::norm::LayerNorm;
use crate::ops::shape::Slice;
use crate::ops::{Binary, Const, DType, TypedFact, Unary};
use crate::pulse::{Delay, PulsedLimitedAttention};

/// For each node, the node its output was fused into; for each node, the
/// inputs its GPU form reads besides its own (launched after them).
pub type Fused = (Vec<Option<usize>>, Vec<Vec<OutletId>>);

/// Runs every pass, in an order where each leaves the next its pattern.
pub fn fuse<'a>(
    graph: &'a Graph,
    facts: &'a [Vec<TypedFact>],
    placements: &'a mut [Placement],
) -> Fused {
    let mut f = Fusion::new(graph, facts, placements);
    if f.pos.is_empty() {
        return (f.fused, f.extra);
    }
    let passes: [fn(&mut Fusion<'a>, usize); 9] = [
        Fusion::activation,
        Fusion::glu,
        Fusion::residual,
        Fusion::norm,
        Fusion::affine,
        Fusion::delays,
        Fusion::norm_after,
        Fusion::norm_copy,
        Fusion::siblings,
    ];
    for pass in passes {
        for id in 0..graph.nodes.len() {
            pass(&mut f, id);
        }
    }
    (f.fused, f.extra)
}

/// Sibling Linears one launch computes (its kernel's limit, with its own).
const SIBLINGS: usize = 3;

struct Fusion<'a> {
    graph: &'a Graph,
    facts: &'a [Vec<TypedFact>],
    placements: &'a mut [Placement],
    /// How many times each node's outputs are read (graph outputs count).
    readers: Vec<usize>,
    /// Readers of each node's output 0: (reader, input index).
    users: Vec<Vec<(usize, usize)>>,
    /// Topological position (empty when the graph has a cycle).
    pos: Vec<usize>,
    fused: Vec<Option<usize>>,
    extra: Vec<Vec<OutletId>>,
}

impl<'a> Fusion<'a> {
    fn new(
        graph: &'a Graph,
        facts: &'a [Vec<TypedFact>],
        placements: &'a mut [Placement],
    ) -> Fusion<'a> {
        let n = graph.nodes.len();
        let mut readers = vec![0usize; n];
        let mut users = vec![Vec::new(); n];
        for (id, node) in graph.nodes.iter().enumerate() {
            for (k, o) in node.inputs.iter().enumerate() {
                readers[o.node] += 1;
                if o.slot == 0 {
                    users[o.node].push((id, k));
                }
            }
        }
        for (_, o) in &graph.outputs {
            readers[o.node] += 1;
        }
        let mut pos = Vec::new();
        if let Ok(order) = graph.topo_order() {
            pos = vec![usize::MAX; n];
            for (t, &id) in order.iter().enumerate() {
                pos[id] = t;
            }
        }
        Fusion {
            graph,
            facts,
            placements,
            readers,
            users,
            pos,
            fused: vec![None; n],
            extra: vec![Vec::new(); n],
        }
    }

    fn gpu(&self, id: usize) -> bool {
        self.placements[id].is_gpu() && self.fused[id].is_none()
    }

    /// Whether `id`'s output is on the device whenever a GPU node runs: a
    /// GPU node's, a graph input's (copied in first) or a constant's
    /// (uploaded once), so a fused op may read it as an extra input.
    fn on_device(&self, id: usize) -> bool {
        matches!(
            self.placements[id],
            Placement::Gpu(_) | Placement::Const | Placement::Input
        )
    }

    /// The single reader of `id`'s only output, when that is all there is.
    fn sole_user(&self, id: usize) -> Option<(usize, usize)> {
        (self.readers[id] == 1 && self.users[id].len() == 1).then(|| self.users[id][0])
    }

    fn is<T: 'static>(&self, id: usize) -> bool {
        self.graph.nodes[id].op.as_any().is::<T>()
    }

    fn binary(&self, id: usize) -> Option<Binary> {
        self.graph.nodes[id]
            .op
            .as_any()
            .downcast_ref::<Binary>()
            .copied()
    }

    fn unary(&self, id: usize) -> Option<Unary> {
        self.graph.nodes[id]
            .op
            .as_any()
            .downcast_ref::<Unary>()
            .copied()
    }

    fn scalar(&self, o: OutletId) -> Option<f32> {
        let c = self.graph.nodes[o.node]
            .op
            .as_any()
            .downcast_ref::<Const>()?;
        (c.value.len() == 1 && c.value.dtype() == DType::F32).then(|| c.value.to_f32_vec()[0])
    }

    /// Index the next extra input of `id` will have.
    fn next_input(&self, id: usize) -> usize {
        self.graph.nodes[id].inputs.len() + self.extra[id].len()
    }

    /// Marks `id` as computed by `into`: a view of its input `input`.
    fn absorb(&mut self, id: usize, input: usize, into: usize) {
        self.placements[id] = Placement::Gpu(if input == 0 { view() } else { view_of(input) });
        self.fused[id] = Some(into);
    }

    /// An activation (Relu, Sigmoid, Tanh, Silu, Gelu) applied by its only
    /// producer (a Linear, a LayerNorm) when nothing else reads that.
    fn activation(&mut self, id: usize) {
        let Some(code) = self
            .unary(id)
            .and_then(super::ops::elementwise::unary_code)
            .filter(|c| (5..=9).contains(c))
        else {
            return;
        };
        let src = self.graph.nodes[id].inputs[0];
        if src.slot != 0 || self.readers[src.node] != 1 || !self.gpu(id) || !self.gpu(src.node) {
            return;
        }
        if let Placement::Gpu(op) = &mut self.placements[src.node] {
            if op.fuse_activation(code) {
                self.placements[id] = Placement::Gpu(view());
                // the producer's own output no longer exists on its own
                self.fused[src.node] = Some(id);
            }
        }
    }

    /// `a * sigmoid(b)` over the two halves of a Linear's output (two
    /// Slices of the last axis, a Sigmoid, a Mul) in the Linear's epilogue.
    fn glu(&mut self, l: usize) {
        if !self.is::<Linear>(l) || !self.gpu(l) || self.readers[l] != 2 {
            return;
        }
        let out = &self.facts[l][0];
        let Some(width) = out.shape.last().and_then(|d| d.as_const()) else {
            return;
        };
        let width = width as usize;
        let last = out.rank() - 1;
        let half = width / 2;
        let slice = |id: usize| -> Option<(i64, i64)> {
            let s = self.graph.nodes[id].op.as_any().downcast_ref::<Slice>()?;
            (s.axis == last).then_some((s.start, s.end.unwrap_or(width as i64)))
        };
        let users = &self.users[l];
        if users.len() != 2 || users.iter().any(|&(u, _)| !self.gpu(u)) {
            return;
        }
        let (mut a, mut b) = (None, None);
        for &(u, _) in users {
            match slice(u) {
                Some((0, e)) if e == half as i64 => a = Some(u),
                Some((s, e)) if s == half as i64 && e == width as i64 => b = Some(u),
                _ => {}
            }
        }
        let (Some(a), Some(b)) = (a, b) else { return };
        let Some((g, _)) = self.sole_user(b) else {
            return;
        };
        if self.unary(g) != Some(Unary::Sigmoid) || !self.gpu(g) {
            return;
        }
        let (Some((m, ka)), Some((m2, _))) = (self.sole_user(a), self.sole_user(g)) else {
            return;
        };
        if m != m2 || self.binary(m) != Some(Binary::Mul) || !self.gpu(m) {
            return;
        }
        let fused = match &mut self.placements[l] {
            Placement::Gpu(op) => op.fuse_glu(),
            _ => false,
        };
        if !fused {
            return;
        }
        // the Mul reads the Linear's (half-filled) output through `a`
        self.absorb(a, 0, m);
        self.absorb(b, 0, m);
        self.absorb(g, 0, m);
        self.placements[m] = Placement::Gpu(view_of(ka));
        self.fused[l] = Some(m);
    }

    /// `residual + linear * c` (a Linear, optionally a Mul by a constant
    /// scalar, then an Add of a same-shaped tensor computed before the
    /// Linear) in the Linear's epilogue: the Mul and the Add become views.
    fn residual(&mut self, l: usize) {
        if !self.is::<Linear>(l) || !self.gpu(l) || self.graph.nodes[l].facts.len() != 1 {
            return;
        }
        let Some((mut next, _)) = self.sole_user(l) else {
            return;
        };
        let mut chain = l;
        let mut alpha = 1.0f32;
        let mut mul = None;
        if self.binary(next) == Some(Binary::Mul) && self.gpu(next) {
            let other = self.graph.nodes[next]
                .inputs
                .iter()
                .find(|o| o.node != chain);
            let (Some(c), Some((after, _))) =
                (other.and_then(|&o| self.scalar(o)), self.sole_user(next))
            else {
                return;
            };
            alpha = c;
            mul = Some(next);
            chain = next;
            next = after;
        }
        let add = next;
        if self.binary(add) != Some(Binary::Add) || !self.gpu(add) {
            return;
        }
        let ins = &self.graph.nodes[add].inputs;
        let Some(k) = ins.iter().position(|o| o.node == chain) else {
            return;
        };
        let r = ins[1 - k.min(1)];
        if ins.len() != 2
            || r.node == chain
            || self.pos[r.node] >= self.pos[l]
            || !self.on_device(r.node)
            || self.facts[r.node][r.slot] != self.facts[add][0]
            || self.facts[l][0] != self.facts[add][0]
        {
            return;
        }
        let input = self.next_input(l);
        let fused = match &mut self.placements[l] {
            Placement::Gpu(op) => op.fuse_residual(alpha, input),
            _ => false,
        };
        if !fused {
            return;
        }
        self.extra[l].push(r);
        if let Some(m) = mul {
            self.absorb(m, 0, add);
        }
        self.placements[add] = Placement::Gpu(view_of(k));
        self.fused[l] = Some(add);
    }

    /// `(x - a) * b` after `x`'s producer, `a` and `b` constant vectors over
    /// the last axis (a fixed feature normalisation), in the producer's
    /// epilogue when nothing else reads `x` or `x - a`.
    fn affine(&mut self, p: usize) {
        let width = match self.facts[p].first().and_then(|f| f.shape.last()) {
            Some(w) => w.as_const(),
            None => None,
        };
        let (Some(width), Some((s, 0))) = (width, self.sole_user(p)) else {
            return;
        };
        if !self.gpu(p) || self.binary(s) != Some(Binary::Sub) || !self.gpu(s) {
            return;
        }
        let Some((m, k)) = self.sole_user(s) else {
            return;
        };
        if self.binary(m) != Some(Binary::Mul) || !self.gpu(m) || k > 1 {
            return;
        }
        let a = self.graph.nodes[s].inputs[1];
        let b = self.graph.nodes[m].inputs[1 - k];
        let vector = |o: OutletId| {
            matches!(self.placements[o.node], Placement::Const)
                && self.facts[o.node][o.slot].shape.len() == 1
                && self.facts[o.node][o.slot].shape[0].as_const() == Some(width)
                && self.facts[o.node][o.slot].dtype == self.facts[p][0].dtype
        };
        if !vector(a) || !vector(b) || self.facts[m][0] != self.facts[p][0] {
            return;
        }
        let input = self.next_input(p);
        let fused = match &mut self.placements[p] {
            Placement::Gpu(op) => op.fuse_affine(input),
            _ => false,
        };
        if !fused {
            return;
        }
        self.extra[p].extend([a, b]);
        self.absorb(s, 0, m);
        self.placements[m] = Placement::Gpu(view_of(k));
        self.fused[p] = Some(m);
    }

    /// `n`'s eps and inputs when it is a layer norm over the last axis with
    /// gamma and beta, on the GPU with all its inputs, and no graph output.
    fn row_norm(&self, n: usize) -> Option<(f32, Vec<OutletId>)> {
        let ln = self.graph.nodes[n]
            .op
            .as_any()
            .downcast_ref::<LayerNorm>()?;
        let ins = &self.graph.nodes[n].inputs;
        let rank = self.facts[n][0].rank() as isize;
        (ins.len() == 3
            && self.gpu(n)
            && (ln.axis == -1 || ln.axis == rank - 1)
            && self.readers[n] == self.users[n].len()
            && ins.iter().all(|o| self.on_device(o.node)))
        .then(|| (ln.eps, ins.clone()))
    }

    /// A layer norm over the last axis whose readers are all Linears: each
    /// normalises its input itself; when every one does, the norm is a view.
    fn norm(&mut self, n: usize) {
        let Some((eps, ins)) = self.row_norm(n) else {
            return;
        };
        let mut all = true;
        for (u, k) in self.users[n].clone() {
            // a Linear with a fused activation still takes a norm before it
            if k != 0
                || !self.is::<Linear>(u)
                || !self.placements[u].is_gpu()
                || self.pos[u] <= self.pos[n]
            {
                all = false;
                continue;
            }
            let input = self.next_input(u);
            let fused = match &mut self.placements[u] {
                Placement::Gpu(op) => op.fuse_norm(eps, input),
                _ => false,
            };
            if fused {
                self.extra[u].extend_from_slice(&ins);
            } else {
                all = false;
            }
        }
        if all {
            // its readers compute it; its output aliases x (same shape)
            let into = self.users[n][0].0;
            self.absorb(n, 0, into);
        }
    }

    /// The Delays that feed a streamed op's window (a pulsed attention's keys
    /// and values, a convolution's input), kept in the op's own state: it
    /// reads the ring and the new frames and writes the next step's ring (a
    /// launch fewer each, and no copy of the window).
    fn delays(&mut self, id: usize) {
        let slots = if self.is::<PulsedLimitedAttention>(id) {
            1..3
        } else if self.is::<Conv1d>(id) {
            0..1
        } else {
            return;
        };
        if !self.gpu(id) {
            return;
        }
        let ins = self.graph.nodes[id].inputs.clone();
        let mut ring = None;
        for k in slots.clone() {
            let Some(o) = ins.get(k) else { return };
            let node = &self.graph.nodes[o.node];
            let Some(d) = node.op.as_any().downcast_ref::<Delay>() else {
                return;
            };
            // the window is the ring and this pulse's frames, nothing held
            // back, time-major
            if d.delay != 0
                || d.axis + 2 != self.facts[o.node][0].rank()
                || ring.is_some_and(|r| r != d.overlap)
                || !self.gpu(o.node)
                || self.sole_user(o.node) != Some((id, k))
                || !self.on_device(node.inputs[0].node)
            {
                return;
            }
            ring = Some(d.overlap);
        }
        let Some(ring) = ring else { return };
        let input = self.next_input(id);
        let taken = match &mut self.placements[id] {
            Placement::Gpu(op) => op.fuse_delays(ring, input),
            _ => false,
        };
        if taken {
            for k in slots {
                let delay = ins[k].node;
                let src = self.graph.nodes[delay].inputs[0];
                self.extra[id].push(src);
                // nothing reads the view: the op reads the ring
                self.absorb(delay, 0, id);
            }
        }
    }

    /// A layer norm over the last axis (and the activation it took) after a
    /// convolution that reads it nowhere else (the conv module's `dw_norm`
    /// and SiLU after its depthwise conv), in the convolution's kernel.
    fn norm_after(&mut self, c: usize) {
        if !self.is::<Conv1d>(c) || !self.gpu(c) {
            return;
        }
        let Some((n, 0)) = self.sole_user(c) else {
            return;
        };
        let Some(ln) = self.graph.nodes[n].op.as_any().downcast_ref::<LayerNorm>() else {
            return;
        };
        let ins = self.graph.nodes[n].inputs.clone();
        let rank = self.facts[n][0].rank() as isize;
        if ins.len() != 3
            || !self.placements[n].is_gpu()
            || (ln.axis != -1 && ln.axis != rank - 1)
            || ins[1..].iter().any(|o| !self.on_device(o.node))
        {
            return;
        }
        // the activation pass may have given the norm its activation
        let (act, last) = match self.fused[n] {
            None => (-1, n),
            Some(a) => match self.unary(a).and_then(super::ops::elementwise::unary_code) {
                Some(code) if self.graph.nodes[a].inputs[0].node == n => (code, a),
                _ => return,
            },
        };
        let input = self.next_input(c);
        let taken = match &mut self.placements[c] {
            Placement::Gpu(op) => op.fuse_norm_after(ln.eps, act, input),
            _ => false,
        };
        if taken {
            self.extra[c].extend_from_slice(&ins[1..]);
            // the norm's output (and its activation's) is the conv's buffer
            self.placements[n] = Placement::Gpu(view());
            self.fused[c] = Some(last);
        }
    }

    /// A layer norm over the last axis of a Linear's result (the residual
    /// stream, then the next sublayer's norm), written by the Linear's own
    /// epilogue into the norm's buffer when the Linear runs cuBLAS (the
    /// skinny kernel normalises on load instead). The norm's output is
    /// written before its own place in the order: the runner keeps its
    /// buffer from the writer's step on.
    fn norm_copy(&mut self, n: usize) {
        let Some((eps, ins)) = self.row_norm(n).filter(|(_, ins)| ins[0].slot == 0) else {
            return;
        };
        // the Linear computing the norm's input: itself, or the one whose
        // epilogue the input's node was fused into
        let src = ins[0].node;
        let linear = if self.is::<Linear>(src) && self.gpu(src) {
            Some(src)
        } else {
            (0..self.graph.nodes.len())
                .find(|&l| self.fused[l] == Some(src) && self.is::<Linear>(l))
        };
        let Some(l) = linear.filter(|&l| self.placements[l].is_gpu()) else {
            return;
        };
        let input = self.next_input(l);
        let taken = match &mut self.placements[l] {
            Placement::Gpu(op) => op.fuse_norm_copy(eps, input),
            _ => false,
        };
        if taken {
            self.extra[l].extend_from_slice(&ins[1..]);
            self.extra[l].push(OutletId::new(n, 0));
            let name = self.graph.nodes[l].name.clone();
            self.placements[n] = Placement::Gpu(Box::new(WrittenBy(name)));
            self.fused[n] = Some(l);
        }
    }

    /// Linears of one shape reading the same input (attention's q, k and v
    /// after their shared layer norm) computed by one launch: the last of
    /// them in execution order writes the others' outputs too, so none of
    /// their readers may run before it.
    fn siblings(&mut self, src: usize) {
        let mut group: Vec<usize> = self.users[src]
            .iter()
            .filter(|&&(u, k)| {
                k == 0
                    && self.is::<Linear>(u)
                    && self.gpu(u)
                    && self.graph.nodes[u].facts.len() == 1
                    // not a graph output: read only inside the step
                    && self.readers[u] == self.users[u].len()
                    && self.graph.nodes[u].inputs[1..]
                        .iter()
                        .all(|o| matches!(self.placements[o.node], Placement::Const))
            })
            .map(|&(u, _)| u)
            .collect();
        group.sort_by_key(|&u| self.pos[u]);
        while group.len() > 1 {
            let first = group[0];
            let like = |u: usize| {
                let (a, b) = (&self.graph.nodes[first], &self.graph.nodes[u]);
                a.inputs.len() == b.inputs.len()
                    && a.inputs[1..]
                        .iter()
                        .zip(&b.inputs[1..])
                        .all(|(x, y)| self.facts[x.node][x.slot] == self.facts[y.node][y.slot])
                    && self.facts[first][0] == self.facts[u][0]
                    && self.extra[first] == self.extra[u]
            };
            let chunk: Vec<usize> = group
                .iter()
                .copied()
                .filter(|&u| like(u))
                .take(SIBLINGS)
                .collect();
            group.retain(|u| !chunk.contains(u));
            let Some((&launcher, others)) = chunk.split_last() else {
                continue;
            };
            // a sibling read before the launch stays on its own
            let others: Vec<usize> = others
                .iter()
                .copied()
                .filter(|&s| {
                    self.users[s]
                        .iter()
                        .all(|&(r, _)| self.pos[r] > self.pos[launcher])
                })
                .collect();
            if !others.is_empty() {
                self.join(launcher, &others);
            }
        }
    }

    /// Makes `launcher` compute `others` too, if its op takes them.
    fn join(&mut self, launcher: usize, others: &[usize]) {
        let input = self.next_input(launcher);
        let mut op = std::mem::replace(&mut self.placements[launcher], Placement::Input);
        let taken = match &mut op {
            Placement::Gpu(op) => {
                let sibs: Vec<&dyn GpuOp> = others
                    .iter()
                    .filter_map(|&s| match &self.placements[s] {
                        Placement::Gpu(o) => Some(o.as_ref()),
                        _ => None,
                    })
                    .collect();
                sibs.len() == others.len() && op.fuse_siblings(&sibs, input)
            }
            _ => false,
        };
        self.placements[launcher] = op;
        if !taken {
            return;
        }
        let name = self.graph.nodes[launcher].name.clone();
        for &s in others {
            let ins = &self.graph.nodes[s].inputs;
            self.extra[launcher].extend_from_slice(&ins[1..]);
            self.extra[launcher].push(OutletId::new(s, 0));
            self.placements[s] = Placement::Gpu(Box::new(WrittenBy(name.clone())));
            self.fused[s] = Some(launcher);
        }
    }
}

#[cfg(test)]
mod tests;
