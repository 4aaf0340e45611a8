//! Fusion passes over a translation: small neighbours of a GPU op (an
//! activation, a residual add, a GLU, a layer norm before a Linear) are
//! folded into its kernel, and their nodes become views with no launch of
//! their own. A chunk step is a chain of small dependent kernels, each
//! costing a few microseconds however little it does, so every launch
//! saved shows in the step's latency.
//!
//! A fused-away node keeps its place in the graph (the CPU runs it as
//! before); on the GPU its output is a view that nothing reads, and
//! `fused_into` says which node computes it, so comparisons skip it.

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
pub fn fuse(graph: &Graph, facts: &[Vec<TypedFact>], placements: &mut [Placement]) -> Fused {
    let mut f = Fusion::new(graph, facts, placements);
    if f.pos.is_empty() {
        return (f.fused, f.extra);
    }
    for id in 0..graph.nodes.len() {
        f.activation(id);
    }
    for id in 0..graph.nodes.len() {
        f.glu(id);
    }
    for id in 0..graph.nodes.len() {
        f.residual(id);
    }
    for id in 0..graph.nodes.len() {
        f.norm(id);
    }
    for id in 0..graph.nodes.len() {
        f.affine(id);
    }
    for id in 0..graph.nodes.len() {
        f.delays(id);
    }
    (f.fused, f.extra)
}

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

    /// A layer norm over the last axis whose readers are all Linears: each
    /// normalises its input itself; when every one does, the norm is a view.
    fn norm(&mut self, n: usize) {
        let Some(ln) = self.graph.nodes[n].op.as_any().downcast_ref::<LayerNorm>() else {
            return;
        };
        let ins = self.graph.nodes[n].inputs.clone();
        let rank = self.facts[n][0].rank() as isize;
        if ins.len() != 3
            || !self.gpu(n)
            || (ln.axis != -1 && ln.axis != rank - 1)
            || self.readers[n] != self.users[n].len()
            || ins.iter().any(|o| !self.on_device(o.node))
        {
            return;
        }
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
                Placement::Gpu(op) => op.fuse_norm(ln.eps, input),
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
}

impl Fusion<'_> {
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
}

#[cfg(test)]
mod tests {
    //! The passes on small graphs with stand-in GPU ops (no device needed):
    //! each stand-in accepts what a skinny Linear or a LayerNorm would and
    //! records it in its description.
    use super::*;
    use crate::gpu::op::{GpuOp, Io, LaunchCx};
    use crate::gpu::GpuError;
    use crate::graph::GraphBuilder;
    use crate::ops::{Dim, Tensor};

    #[derive(Debug, Default)]
    struct Stub {
        kind: &'static str,
        fused: Vec<String>,
    }

    impl GpuOp for Stub {
        fn describe(&self) -> String {
            format!("{}{}", self.kind, self.fused.concat())
        }
        fn launch(&self, _: &LaunchCx, _: &Io) -> Result<(), GpuError> {
            Ok(())
        }
        fn fuse_activation(&mut self, code: i32) -> bool {
            let ok = matches!(self.kind, "Linear" | "LayerNorm");
            if ok {
                self.fused.push(format!(" +act{code}"));
            }
            ok
        }
        fn fuse_residual(&mut self, alpha: f32, input: usize) -> bool {
            let ok = self.kind == "Linear" && !self.fused.iter().any(|f| f.contains("glu"));
            if ok {
                self.fused.push(format!(" +res({alpha}, in{input})"));
            }
            ok
        }
        fn fuse_glu(&mut self) -> bool {
            let ok = self.kind == "Linear" && self.fused.is_empty();
            if ok {
                self.fused.push(" +glu".into());
            }
            ok
        }
        fn fuse_norm(&mut self, eps: f32, input: usize) -> bool {
            let ok = self.kind == "Linear";
            if ok {
                self.fused.push(format!(" +norm({eps}, in{input})"));
            }
            ok
        }
        fn fuse_affine(&mut self, input: usize) -> bool {
            let ok = self.kind == "LogMel";
            if ok {
                self.fused.push(format!(" +affine(in{input})"));
            }
            ok
        }
        fn fuse_delays(&mut self, ring: usize, input: usize) -> bool {
            let ok = matches!(self.kind, "PulsedLimitedAttention" | "Conv1d");
            if ok {
                self.fused.push(format!(" +delays({ring}, in{input})"));
            }
            ok
        }
    }

    /// Every node placed as the translator would on a GPU with every kernel.
    fn place(g: &Graph) -> Vec<Placement> {
        g.nodes
            .iter()
            .map(|n| {
                let any = n.op.as_any();
                if any.is::<crate::ops::Source>() {
                    Placement::Input
                } else if any.is::<Const>() {
                    Placement::Const
                } else {
                    Placement::Gpu(Box::new(Stub {
                        kind: n.op.name(),
                        fused: Vec::new(),
                    }))
                }
            })
            .collect()
    }

    fn run(g: &Graph) -> (Vec<String>, Fused) {
        let facts: Vec<Vec<TypedFact>> = g.nodes.iter().map(|n| n.facts.clone()).collect();
        let mut p = place(g);
        let fused = fuse(g, &facts, &mut p);
        (p.iter().map(|p| p.to_string()).collect(), fused)
    }

    fn at(g: &Graph, name: &str) -> usize {
        g.nodes.iter().position(|n| n.name == name).expect(name)
    }

    fn weight(b: &mut GraphBuilder, name: &str, shape: &[usize]) -> OutletId {
        let n = shape.iter().product();
        b.constant(
            name,
            Tensor::from_vec(shape.to_vec(), vec![0.1f32; n]).unwrap(),
        )
        .unwrap()
    }

    fn norm() -> LayerNorm {
        LayerNorm {
            eps: 1e-5,
            axis: -1,
        }
    }

    /// LayerNorm -> Linear(+Silu) -> Linear -> *0.5 -> + x, then a conv-module
    /// style GLU, and a norm read by a Linear and by a Tanh.
    fn block() -> Graph {
        let c = 8;
        let mut b = GraphBuilder::new();
        let x = b
            .input(
                "x",
                TypedFact::new(DType::F32, [Dim::n(4), Dim::n(c as i64)]),
            )
            .unwrap();
        let (g1, b1) = (weight(&mut b, "g1", &[c]), weight(&mut b, "b1", &[c]));
        let n1 = b.op("n1", norm(), &[x, g1, b1]).unwrap();
        let (w1, c1) = (
            weight(&mut b, "w1", &[2 * c, c]),
            weight(&mut b, "c1", &[2 * c]),
        );
        let up = b.op("up", Linear, &[n1, w1, c1]).unwrap();
        let act = b.op("act", Unary::Silu, &[up]).unwrap();
        let (w2, c2) = (
            weight(&mut b, "w2", &[c, 2 * c]),
            weight(&mut b, "c2", &[c]),
        );
        let down = b.op("down", Linear, &[act, w2, c2]).unwrap();
        let half = b.constant("half", Tensor::scalar(0.5f32)).unwrap();
        let scaled = b.op("scaled", Binary::Mul, &[down, half]).unwrap();
        let r = b.op("res", Binary::Add, &[x, scaled]).unwrap();
        let (w3, c3) = (
            weight(&mut b, "w3", &[2 * c, c]),
            weight(&mut b, "c3", &[2 * c]),
        );
        let pw = b.op("pw", Linear, &[r, w3, c3]).unwrap();
        let slice = |start: i64, end: i64| Slice {
            axis: 1,
            start,
            end: Some(end),
        };
        let ga = b.op("glu_a", slice(0, c as i64), &[pw]).unwrap();
        let gb = b.op("glu_b", slice(c as i64, 2 * c as i64), &[pw]).unwrap();
        let gs = b.op("glu_gate", Unary::Sigmoid, &[gb]).unwrap();
        let glu = b.op("glu", Binary::Mul, &[ga, gs]).unwrap();
        let (g2, b2) = (weight(&mut b, "g2", &[c]), weight(&mut b, "b2", &[c]));
        let n2 = b.op("n2", norm(), &[glu, g2, b2]).unwrap();
        let (w4, c4) = (weight(&mut b, "w4", &[c, c]), weight(&mut b, "c4", &[c]));
        let out = b.op("out", Linear, &[n2, w4, c4]).unwrap();
        let side = b.op("side", Unary::Tanh, &[n2]).unwrap();
        let y = b.op("y", Binary::Add, &[out, side]).unwrap();
        b.output("y", y);
        b.build().unwrap()
    }

    #[test]
    fn every_pattern_fuses_into_its_producer() {
        let g = block();
        let (d, (fused, extra)) = run(&g);
        let show = |name: &str| d[at(&g, name)].clone();
        assert!(
            show("up").ends_with("Linear +act8 +norm(0.00001, in3)"),
            "{d:#?}"
        );
        assert!(show("down").ends_with("Linear +res(0.5, in3)"), "{d:#?}");
        assert!(show("pw").ends_with("Linear +glu"), "{d:#?}");
        assert!(
            show("out").ends_with("Linear +norm(0.00001, in3)"),
            "{d:#?}"
        );
        for v in [
            "n1", "act", "scaled", "res", "glu_a", "glu_b", "glu_gate", "glu",
        ] {
            assert!(
                show(v).contains("no kernel"),
                "{v} should be a view: {d:#?}"
            );
        }
        // n2 is also read by `side`, so it still runs
        assert_eq!(show("n2"), "GPU  LayerNorm");
        assert_eq!(show("side"), "GPU  Unary");
        // what each fused node reads besides its own inputs
        let x = g.inputs[0];
        let outlet = |name: &str| OutletId {
            node: at(&g, name),
            slot: 0,
        };
        assert_eq!(
            extra[at(&g, "up")],
            vec![OutletId { node: x, slot: 0 }, outlet("g1"), outlet("b1")]
        );
        assert_eq!(extra[at(&g, "down")], vec![OutletId { node: x, slot: 0 }]);
        assert_eq!(
            extra[at(&g, "out")],
            vec![outlet("glu"), outlet("g2"), outlet("b2")]
        );
        assert_eq!(fused[at(&g, "glu_gate")], Some(at(&g, "glu")));
        assert_eq!(fused[at(&g, "pw")], Some(at(&g, "glu")));
        assert_eq!(fused[at(&g, "n2")], None);
        assert_eq!(fused[at(&g, "glu")], None, "the GLU's result is real");
    }

    #[test]
    fn nodes_on_the_cpu_or_read_twice_are_left_alone() {
        let g = block();
        let facts: Vec<Vec<TypedFact>> = g.nodes.iter().map(|n| n.facts.clone()).collect();
        // the Sigmoid on the CPU: no GLU; `down` on the CPU: no residual
        let mut p = place(&g);
        p[at(&g, "glu_gate")] = Placement::Cpu("forced".into());
        p[at(&g, "down")] = Placement::Cpu("forced".into());
        let _ = fuse(&g, &facts, &mut p);
        assert_eq!(p[at(&g, "pw")].to_string(), "GPU  Linear");
        for n in ["glu_a", "glu_b", "glu", "scaled", "res"] {
            assert!(!p[at(&g, n)].to_string().contains("no kernel"), "{n}");
        }
        // a Linear whose output is also a graph output keeps its own result
        let mut b = GraphBuilder::from_graph(block());
        let up = OutletId {
            node: at(b.graph(), "up"),
            slot: 0,
        };
        b.output("up", up);
        let g = b.build().unwrap();
        let (d, _) = run(&g);
        assert!(!d[at(&g, "up")].contains("+act"), "{d:#?}");
        assert!(!d[at(&g, "act")].contains("no kernel"), "{d:#?}");
    }

    /// LogMel -> (- mean) -> (* inv_std), as the shipped front end; with
    /// `tap`, the centred features are also a graph output.
    fn front_end(tap: bool) -> Graph {
        let mut b = GraphBuilder::new();
        let p = b
            .input("p", TypedFact::new(DType::F32, [Dim::n(4), Dim::n(6)]))
            .unwrap();
        let fb = weight(&mut b, "fb", &[6, 3]);
        let lm = b
            .op("logmel", crate::ops::mel::LogMel { eps: 1e-6 }, &[p, fb])
            .unwrap();
        let (mean, inv) = (weight(&mut b, "mean", &[3]), weight(&mut b, "inv", &[3]));
        let c = b.op("centre", Binary::Sub, &[lm, mean]).unwrap();
        let f = b.op("features", Binary::Mul, &[c, inv]).unwrap();
        b.output("features", f);
        if tap {
            b.output("centre", c);
        }
        b.build().unwrap()
    }

    #[test]
    fn a_fixed_normalisation_goes_into_the_log_mel_kernel() {
        let g = front_end(false);
        let (d, (fused, extra)) = run(&g);
        let lm = at(&g, "logmel");
        assert!(d[lm].ends_with("+affine(in2)"), "{d:#?}");
        let outlet = |n: &str| OutletId {
            node: at(&g, n),
            slot: 0,
        };
        assert_eq!(extra[lm], vec![outlet("mean"), outlet("inv")]);
        assert_eq!(fused[lm], Some(at(&g, "features")));
        assert_eq!(fused[at(&g, "centre")], Some(at(&g, "features")));
        assert!(d[at(&g, "centre")].contains("view"), "{d:#?}");
        assert!(d[at(&g, "features")].contains("view"), "{d:#?}");
        // read elsewhere too: the centred values must exist, nothing fuses
        let g = front_end(true);
        let (d, (fused, _)) = run(&g);
        assert!(!d[at(&g, "logmel")].contains("affine"), "{d:#?}");
        assert_eq!(fused[at(&g, "logmel")], None);
    }

    /// q, k and v of 8 frames; k and v through Delays of `delays` frames
    /// (delay, overlap) into a pulsed attention with a left context of 4.
    fn attention(delays: [(usize, usize); 2]) -> Graph {
        use crate::ops::limited_attention::LimitedAttention;
        let mut b = GraphBuilder::new();
        let fact = || TypedFact::new(DType::F32, [Dim::n(8), Dim::n(4)]);
        let q = b.input("q", fact()).unwrap();
        let k = b.input("k", fact()).unwrap();
        let v = b.input("v", fact()).unwrap();
        let [(dk, ok), (dv, ov)] = delays;
        let delay = |delay, overlap| Delay {
            axis: 0,
            delay,
            overlap,
        };
        let kd = b.op("k_delay", delay(dk, ok), &[k]).unwrap();
        let vd = b.op("v_delay", delay(dv, ov), &[v]).unwrap();
        let attn = PulsedLimitedAttention {
            attn: LimitedAttention {
                heads: 1,
                left_context: 4,
                scale: None,
            },
            pulse: 8,
            delay: 0,
        };
        let a = b.op("attn", attn, &[q, kd, vd]).unwrap();
        b.output("out", a);
        b.build().unwrap()
    }

    #[test]
    fn key_and_value_delays_go_into_the_attention() {
        let g = attention([(0, 4), (0, 4)]);
        let (d, (fused, extra)) = run(&g);
        let a = at(&g, "attn");
        assert!(d[a].ends_with("+delays(4, in3)"), "{d:#?}");
        let outlet = |n: &str| OutletId {
            node: at(&g, n),
            slot: 0,
        };
        assert_eq!(extra[a], vec![outlet("k"), outlet("v")]);
        for n in ["k_delay", "v_delay"] {
            assert_eq!(fused[at(&g, n)], Some(a), "{n}");
            assert!(d[at(&g, n)].contains("view"), "{d:#?}");
        }
        // a Delay that holds frames back: the window is not ring ++ pulse
        let g = attention([(0, 4), (1, 4)]);
        let (d, (fused, _)) = run(&g);
        assert!(!d[at(&g, "attn")].contains("delays"), "{d:#?}");
        assert_eq!(fused[at(&g, "k_delay")], None);
        // a delayed window read elsewhere too must exist on its own
        let mut b = GraphBuilder::from_graph(attention([(0, 4), (0, 4)]));
        let vd = OutletId {
            node: at(b.graph(), "v_delay"),
            slot: 0,
        };
        b.output("window", vd);
        let g = b.build().unwrap();
        let (d, (fused, _)) = run(&g);
        assert!(!d[at(&g, "attn")].contains("delays"), "{d:#?}");
        assert_eq!(fused[at(&g, "v_delay")], None);
    }

    #[test]
    fn a_convolutions_input_delay_goes_into_it() {
        use crate::ops::conv::{Conv1d, ConvLayout};
        let mut b = GraphBuilder::new();
        let fact = TypedFact::new(DType::F32, [Dim::n(8), Dim::n(4)]);
        let x = b.input("x", fact).unwrap();
        let delay = Delay {
            axis: 0,
            delay: 0,
            overlap: 2,
        };
        let d = b.op("delay", delay, &[x]).unwrap();
        let w = weight(&mut b, "w", &[4, 1, 3]);
        let conv = Conv1d {
            stride: 1,
            pad: (0, 0),
            dilation: 1,
            groups: 4,
            layout: ConvLayout::ChannelsLast,
        };
        let c = b.op("conv", conv, &[d, w]).unwrap();
        b.output("y", c);
        let g = b.build().unwrap();
        let (d, (fused, extra)) = run(&g);
        let c = at(&g, "conv");
        assert!(d[c].ends_with("+delays(2, in2)"), "{d:#?}");
        assert_eq!(
            extra[c],
            vec![OutletId {
                node: at(&g, "x"),
                slot: 0
            }]
        );
        assert_eq!(fused[at(&g, "delay")], Some(c));
    }
}
