//! The CPU runner: evaluates a graph in topological order, keeping every
//! node's output buffers (or, recycling, the buffers of the values alive at
//! once) and op state between runs, so that repeated runs with the same
//! shapes (pulsed chunk steps) allocate nothing.

use std::sync::Arc;

use super::recycle::Recycler;
use super::{Graph, OutletId};
use crate::ops::{Const, Dim, OpState, Scratch, Source, Tensor, TypedFact};
use crate::{Error, Result};

/// Most inputs a node may have in the runner.
const MAX_INPUTS: usize = 32;

/// Runs a [`Graph`] on the CPU.
pub struct Runner {
    graph: Arc<Graph>,
    order: Vec<usize>,
    values: Vec<Vec<Tensor>>,
    states: Vec<Option<Box<dyn OpState>>>,
    scratch: Vec<Scratch>,
    placeholder: Tensor,
    last_s: Option<i64>,
    /// Per node, the time its evaluations took, when timing is on.
    times: Option<Vec<std::time::Duration>>,
    /// Whether every f32 value is rounded to bf16 ([`Runner::round_to_bf16`]).
    bf16: bool,
    /// Dead values' buffers, reused ([`Runner::recycle_buffers`]).
    recycler: Option<Recycler>,
}

/// Rounds f32 values to the nearest bf16 (ties to even, as the GPU stores
/// them), in place; other dtypes are left alone.
fn round_bf16(t: &mut Tensor) {
    if let Ok(v) = t.as_slice_mut::<f32>() {
        for x in v {
            *x = half::bf16::from_f32(*x).to_f32();
        }
    }
}

impl Runner {
    /// Plans the graph (checks it and orders it) and makes fresh state.
    pub fn new(graph: impl Into<Arc<Graph>>) -> Result<Runner> {
        let graph: Arc<Graph> = graph.into();
        graph.validate()?;
        let order = graph.topo_order()?;
        let n = graph.nodes.len();
        let mut values: Vec<Vec<Tensor>> = (0..n).map(|_| Vec::new()).collect();
        for (id, node) in graph.nodes.iter().enumerate() {
            if node.inputs.len() > MAX_INPUTS {
                return Err(Error::Graph(format!(
                    "node `{}` has {} inputs; the runner takes at most {MAX_INPUTS}",
                    node.name,
                    node.inputs.len()
                )));
            }
            if let Some(c) = node.op.as_any().downcast_ref::<Const>() {
                values[id] = vec![c.value.clone()];
            }
            if node.op.as_any().is::<Source>() {
                values[id] = vec![Tensor::empty()];
            }
        }
        let states = graph.nodes.iter().map(|n| n.op.state()).collect();
        let scratch = (0..n).map(|_| Scratch::default()).collect();
        Ok(Runner {
            graph,
            order,
            values,
            states,
            scratch,
            placeholder: Tensor::empty(),
            last_s: None,
            times: None,
            bf16: false,
            recycler: None,
        })
    }

    /// From now on, releases each value once the last node that reads it
    /// has run, hands its buffer to a later node of the same size (see
    /// `recycle.rs`), and gives every node one scratch: a step then holds
    /// the values alive at once and the largest node's scratch, not every
    /// node's outputs and every matrix product's packed (or widened int8)
    /// weight. Graph outputs stay readable; other nodes' [`Runner::value`]s
    /// do not (per-node comparisons keep a plain runner).
    pub fn recycle_buffers(mut self) -> Runner {
        self.recycler = Some(Recycler::new(&self.graph, &self.order));
        self.scratch.truncate(1);
        self
    }

    /// From now on, rounds the weights, the inputs and every node's output
    /// to bf16 (computing in f32 in between), as a GPU that stores bf16
    /// does: what bf16 storage alone costs is then this runner's distance
    /// from a plain one, the budget `pulsed compare` allows a bf16 GPU.
    pub fn round_to_bf16(&mut self) {
        self.bf16 = true;
        for (id, node) in self.graph.nodes.iter().enumerate() {
            if node.op.as_any().is::<Const>() {
                // a copy: the graph's constant keeps its f32 values
                round_bf16(&mut self.values[id][0]);
            }
        }
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Zeroes every op state, as in a fresh runner.
    pub fn reset(&mut self) {
        for s in self.states.iter_mut().flatten() {
            s.reset();
        }
    }

    /// Tells stateful ops the total input length, once the stream's end is known.
    pub fn set_stream_len(&mut self, s: Option<i64>) {
        for st in self.states.iter_mut().flatten() {
            st.set_stream_len(s);
        }
    }

    /// Starts (or restarts) adding up each node's evaluation time.
    pub fn time_nodes(&mut self) {
        self.times = Some(vec![std::time::Duration::ZERO; self.graph.nodes.len()]);
    }

    /// Each node's evaluation time since [`Runner::time_nodes`], by node id.
    pub fn node_times(&self) -> Option<&[std::time::Duration]> {
        self.times.as_deref()
    }

    /// The stream length `S` of the last run, when the inputs were symbolic.
    pub fn last_s(&self) -> Option<i64> {
        self.last_s
    }

    /// Runs once and returns the graph outputs (sharing storage with the
    /// runner's buffers until the next run).
    pub fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        self.step(&refs)?;
        Ok((0..self.graph.outputs.len())
            .map(|i| self.output(i).clone())
            .collect())
    }

    /// Runs once; read results with [`Runner::output`]. Allocation-free when
    /// shapes are the same as in the previous step.
    pub fn step(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let graph = &*self.graph;
        if inputs.len() != graph.inputs.len() {
            return Err(Error::Graph(format!(
                "graph has {} inputs, {} were given",
                graph.inputs.len(),
                inputs.len()
            )));
        }
        let mut s_value = None;
        for (&id, t) in graph.inputs.iter().zip(inputs) {
            let node = &graph.nodes[id];
            check_input(&node.name, &node.facts[0], t, &mut s_value)?;
            self.values[id][0].copy_from(t);
            if self.bf16 {
                round_bf16(&mut self.values[id][0]);
            }
        }
        self.last_s = s_value;
        let Runner {
            order,
            values,
            states,
            scratch,
            placeholder,
            times,
            bf16,
            recycler,
            last_s,
            ..
        } = self;
        if let Some(r) = recycler.as_mut() {
            r.begin();
        }
        for &id in order.iter() {
            let node = &graph.nodes[id];
            if node.inputs.is_empty() {
                continue; // sources and constants already hold their values
            }
            let mut outs = std::mem::take(&mut values[id]);
            // recycling nodes share one scratch: nodes run one at a time
            let mut work = id;
            if let Some(r) = recycler.as_mut() {
                r.before(graph, id, *last_s, &mut outs);
                work = 0;
            }
            let mut buf: [&Tensor; MAX_INPUTS] = [&*placeholder; MAX_INPUTS];
            for (k, o) in node.inputs.iter().enumerate() {
                buf[k] = &values[o.node][o.slot];
            }
            let ins = &buf[..node.inputs.len()];
            let t0 = times.as_ref().map(|_| std::time::Instant::now());
            let r = match &mut states[id] {
                Some(st) => st.eval(ins, &mut outs, &mut scratch[work]),
                None => node.op.eval(ins, &mut outs, &mut scratch[work]),
            };
            if let (Some(t), Some(t0)) = (times.as_mut(), t0) {
                t[id] += t0.elapsed();
            }
            values[id] = outs;
            r.map_err(|e| Error::node(&node.name, node.op.name(), e))?;
            if *bf16 {
                values[id].iter_mut().for_each(round_bf16);
            }
            if let Some(r) = recycler.as_mut() {
                r.after(id, values);
            }
        }
        Ok(())
    }

    /// The `i`-th graph output of the last step.
    pub fn output(&self, i: usize) -> &Tensor {
        let o = self.graph.outputs[i].1;
        &self.values[o.node][o.slot]
    }

    /// Any node output of the last step (for per-node comparisons).
    pub fn value(&self, o: OutletId) -> Option<&Tensor> {
        self.values.get(o.node)?.get(o.slot)
    }
}

/// What a streaming session needs from whatever runs its graph (the CPU
/// [`Runner`], or the GPU runner of the `cuda` feature).
pub trait StepRunner: Send {
    /// Runs one step on these inputs.
    fn step(&mut self, inputs: &[&Tensor]) -> Result<()>;
    /// The `i`-th graph output of the last step.
    fn output(&self, i: usize) -> &Tensor;
    /// Back to a fresh stream (zeroed state).
    fn reset(&mut self);
    /// Tells stateful ops the total input length once it is known.
    fn set_stream_len(&mut self, s: Option<i64>);
    /// Any node output of the last step, copied to the host (per-node comparisons).
    fn value(&self, o: OutletId) -> Option<Tensor>;
    /// Where this runner runs, for messages (`"cpu"`, `"cuda"`).
    fn device(&self) -> &'static str;
}

impl StepRunner for Runner {
    fn step(&mut self, inputs: &[&Tensor]) -> Result<()> {
        Runner::step(self, inputs)
    }
    fn output(&self, i: usize) -> &Tensor {
        Runner::output(self, i)
    }
    fn reset(&mut self) {
        Runner::reset(self)
    }
    fn set_stream_len(&mut self, s: Option<i64>) {
        Runner::set_stream_len(self, s)
    }
    fn value(&self, o: OutletId) -> Option<Tensor> {
        Runner::value(self, o).cloned()
    }
    fn device(&self) -> &'static str {
        "cpu"
    }
}

/// Checks a concrete input against its fact, solving `S` from symbolic sizes.
pub(crate) fn check_input(
    name: &str,
    fact: &TypedFact,
    t: &Tensor,
    s: &mut Option<i64>,
) -> Result<()> {
    let bad = |reason: String| Error::Input {
        name: name.to_string(),
        reason,
    };
    if t.dtype() != fact.dtype {
        return Err(bad(format!(
            "expected dtype {}, got {}",
            fact.dtype,
            t.dtype()
        )));
    }
    if t.rank() != fact.rank() {
        return Err(bad(format!("expected shape {fact}, got {:?}", t.shape())));
    }
    for (ax, (d, &n)) in fact.shape.iter().zip(t.shape()).enumerate() {
        let n = n as i64;
        let ok = match (d.as_const(), *s) {
            (Some(v), _) => v == n,
            (None, Some(sv)) => d.eval(sv) == n,
            (None, None) => match solve(d, n) {
                Some(sv) => {
                    *s = Some(sv);
                    true
                }
                None => false,
            },
        };
        if !ok {
            return Err(bad(format!(
                "axis {ax}: size {n} does not fit {d} (shape {fact})"
            )));
        }
    }
    Ok(())
}

/// The smallest `S >= 0` with `d(S) == n`, if any.
fn solve(d: &Dim, n: i64) -> Option<i64> {
    let c = d.coef()?;
    let b = d.eval(0);
    if c <= 0 || (n - b) % c != 0 || n < b {
        return None;
    }
    Some((n - b) / c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::GraphBuilder;
    use crate::ops::{Binary, DType, Dim};

    /// y = x * k + k with values bf16 cannot hold.
    fn graph() -> Graph {
        let mut b = GraphBuilder::new();
        let x = b
            .input("x", TypedFact::new(DType::F32, [Dim::s()]))
            .unwrap();
        let k = b.constant("k", Tensor::scalar(1.001f32)).unwrap();
        let m = b.op("m", Binary::Mul, &[x, k]).unwrap();
        let y = b.op("y", Binary::Add, &[m, k]).unwrap();
        b.output("y", y);
        b.build().unwrap()
    }

    #[test]
    fn bf16_rounding_rounds_weights_inputs_and_every_output() {
        let g = Arc::new(graph());
        let x = Tensor::from_slice(&[1.003f32, -2.7]);
        let mut plain = Runner::new(g.clone()).unwrap();
        plain.step(&[&x]).unwrap();
        let mut r = Runner::new(g.clone()).unwrap();
        r.round_to_bf16();
        r.step(&[&x]).unwrap();
        let bf = |v: f32| half::bf16::from_f32(v).to_f32();
        // k = 1.001 is 1.0 in bf16, x[0] = 1.003 is 1.0
        let want: Vec<f32> = [1.003f32, -2.7]
            .iter()
            .map(|&x| bf(bf(bf(x) * bf(1.001)) + bf(1.001)))
            .collect();
        assert_eq!(r.output(0).to_f32_vec(), want);
        assert_eq!(r.output(0).to_f32_vec()[0], 2.0);
        assert!((plain.output(0).to_f32_vec()[0] - (1.003 * 1.001 + 1.001)).abs() < 1e-6);
        // the graph's constant keeps its f32 value for other runners
        let mut again = Runner::new(g).unwrap();
        again.step(&[&x]).unwrap();
        assert_eq!(again.output(0).to_f32_vec(), plain.output(0).to_f32_vec());
    }

    /// `y = (((x k + k) k) + x k) k`: `x k` is read again after two
    /// nodes whose outputs have its size.
    fn chain() -> (Graph, OutletId) {
        let mut b = GraphBuilder::new();
        let x = b
            .input("x", TypedFact::new(DType::F32, [Dim::s()]))
            .unwrap();
        let k = b.constant("k", Tensor::scalar(1.5f32)).unwrap();
        let a = b.op("a", Binary::Mul, &[x, k]).unwrap();
        let c = b.op("c", Binary::Add, &[a, k]).unwrap();
        let c = b.op("c2", Binary::Mul, &[c, k]).unwrap();
        let d = b.op("d", Binary::Add, &[c, a]).unwrap();
        let y = b.op("y", Binary::Mul, &[d, k]).unwrap();
        b.output("y", y);
        (b.build().unwrap(), a)
    }

    #[test]
    fn recycling_buffers_gives_the_same_values_and_drops_dead_ones() {
        let (g, a) = chain();
        let g = Arc::new(g);
        let mut plain = Runner::new(g.clone()).unwrap();
        let mut r = Runner::new(g).unwrap().recycle_buffers();
        let inputs = [
            Tensor::from_slice(&[1.0f32, -2.0, 3.5]),
            Tensor::from_slice(&[4.0f32, 0.25, -1.0]),
            Tensor::from_slice(&[7.0f32]),
            Tensor::from_slice(&[0.5f32, 2.0, 9.0]),
        ];
        for x in &inputs {
            plain.step(&[x]).unwrap();
            r.step(&[x]).unwrap();
            assert_eq!(r.output(0).to_f32_vec(), plain.output(0).to_f32_vec());
            let v = x.to_f32_vec();
            let want: Vec<f32> = v
                .iter()
                .map(|x| (((x * 1.5 + 1.5) * 1.5) + x * 1.5) * 1.5)
                .collect();
            assert_eq!(r.output(0).to_f32_vec(), want);
            // `a` is dead once `d` has run; the plain runner keeps it
            assert!(r.value(a).is_none());
            assert!(plain.value(a).is_some());
        }
    }
}
