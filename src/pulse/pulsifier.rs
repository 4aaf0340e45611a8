//! The pulsifier: walks a whole-utterance graph and gives each node a pulsed
//! form, propagating pulsed facts (stream axis, pulse, length, delay).

use std::collections::HashMap;
use std::sync::Arc;

use super::{rules, Delay, PulsedFact, PulsedModel, StreamInfo};
use crate::graph::{Graph, GraphBuilder, Node, OutletId};
use crate::ops::{Const, Dim, Op, OpError, Source, TypedFact};
use crate::{Error, Result};

/// A pulsed outlet with its fact.
pub type Pulsed = (OutletId, PulsedFact);

/// Turns `graph` (streaming inputs sized `S` on one axis) into a graph that
/// takes `pulse` frames of that axis per step.
pub fn pulsify(graph: &Graph, pulse: usize) -> Result<PulsedModel> {
    if pulse == 0 {
        return Err(Error::Graph("pulse must be at least 1".into()));
    }
    let mut cx = Ctx {
        b: GraphBuilder::new(),
        facts: HashMap::new(),
        map: HashMap::new(),
        pulse,
    };
    for id in graph.topo_order()? {
        let node = &graph.nodes[id];
        let ins: Vec<Pulsed> = node
            .inputs
            .iter()
            .map(|o| {
                cx.map
                    .get(o)
                    .cloned()
                    .expect("topological order maps inputs first")
            })
            .collect();
        let outs = cx.pulsify_node(node, &ins)?;
        if outs.len() != node.facts.len() {
            return Err(Error::Graph(format!(
                "node `{}`: pulsed form has {} outputs, expected {}",
                node.name,
                outs.len(),
                node.facts.len()
            )));
        }
        for (slot, p) in outs.into_iter().enumerate() {
            cx.map.insert(OutletId::new(id, slot), p);
        }
    }
    for (name, o) in &graph.outputs {
        let p = cx.map[o].0;
        cx.b.output(name, p);
    }
    let origin = cx.map.iter().map(|(k, v)| (*k, v.0)).collect();
    let Ctx { b, facts, .. } = cx;
    let model = PulsedModel {
        graph: b.build()?,
        facts,
        origin,
    };
    model.check_facts()?;
    Ok(model)
}

/// Pulsifier state handed to the rules: the pulsed graph being built and
/// the facts of its outlets.
pub struct Ctx {
    b: GraphBuilder,
    facts: HashMap<OutletId, PulsedFact>,
    map: HashMap<OutletId, Pulsed>,
    pulse: usize,
}

impl Ctx {
    fn pulsify_node(&mut self, node: &Node, ins: &[Pulsed]) -> Result<Vec<Pulsed>> {
        let op = node.op.as_any();
        if let Some(src) = op.downcast_ref::<Source>() {
            return self.source(&node.name, &src.fact).map(|p| vec![p]);
        }
        if op.is::<Const>() {
            return self.add_fixed(&node.name, node.op.clone(), &[]);
        }
        if ins.iter().all(|(_, f)| f.stream.is_none()) {
            let inputs: Vec<OutletId> = ins.iter().map(|p| p.0).collect();
            return self.add_fixed(&node.name, node.op.clone(), &inputs);
        }
        if let Some(r) = rules::pulsify(self, node, ins)? {
            return Ok(r);
        }
        self.frame_local(node, ins)
    }

    fn source(&mut self, name: &str, fact: &TypedFact) -> Result<Pulsed> {
        let sym: Vec<usize> = (0..fact.rank())
            .filter(|&a| fact.shape[a].is_symbolic())
            .collect();
        match sym.as_slice() {
            [] => {
                let o = self.b.input(name, fact.clone())?;
                let pf = PulsedFact::fixed(fact.clone());
                self.facts.insert(o, pf.clone());
                Ok((o, pf))
            }
            [axis] if fact.shape[*axis] == Dim::s() => {
                let mut f = fact.clone();
                f.shape[*axis] = Dim::n(self.pulse as i64);
                let o = self.b.input(name, f.clone())?;
                let stream = StreamInfo {
                    axis: *axis,
                    pulse: self.pulse,
                    len: Dim::s(),
                    delay: 0,
                    overlap: 0,
                };
                let pf = PulsedFact {
                    fact: f,
                    stream: Some(stream),
                };
                self.facts.insert(o, pf.clone());
                Ok((o, pf))
            }
            _ => Err(Error::Graph(format!(
                "input `{name}` ({fact}): a streaming input needs exactly one axis of size S"
            ))),
        }
    }

    /// Adds a node whose outputs do not stream (all inputs fixed).
    pub fn add_fixed(
        &mut self,
        name: &str,
        op: Arc<dyn Op>,
        inputs: &[OutletId],
    ) -> Result<Vec<Pulsed>> {
        let outs = self.b.op_arc(name, op, inputs)?;
        let mut r = Vec::new();
        for o in outs {
            let f = self.b.fact(o)?.clone();
            if f.concrete_shape().is_none() {
                return Err(Error::Graph(format!(
                    "node `{name}`: output {f} depends on S but no input streams"
                )));
            }
            let pf = PulsedFact::fixed(f);
            self.facts.insert(o, pf.clone());
            r.push((o, pf));
        }
        Ok(r)
    }

    /// Adds a node and records the given streams for its outputs (`None`
    /// for outputs that do not stream).
    pub fn add(
        &mut self,
        name: &str,
        op: Arc<dyn Op>,
        inputs: &[OutletId],
        streams: &[Option<StreamInfo>],
    ) -> Result<Vec<Pulsed>> {
        let outs = self.b.op_arc(name, op, inputs)?;
        let mut r = Vec::new();
        for (k, o) in outs.into_iter().enumerate() {
            let fact = self.b.fact(o)?.clone();
            let pf = PulsedFact {
                fact,
                stream: streams.get(k).copied().flatten(),
            };
            self.facts.insert(o, pf.clone());
            r.push((o, pf));
        }
        Ok(r)
    }

    /// Delays a stream by `extra` frames and gives each pulse `overlap` past
    /// frames. The returned fact's stream describes the new pulse frames (its
    /// `pulse` stays the step size; the shape has `pulse + overlap` frames).
    pub fn delay(
        &mut self,
        name: &str,
        input: &Pulsed,
        extra: usize,
        overlap: usize,
    ) -> Result<Pulsed> {
        let s = stream(name, input)?;
        if extra == 0 && overlap == 0 {
            return Ok(input.clone());
        }
        if s.overlap > 0 {
            return Err(Error::Graph(format!(
                "node `{name}`: cannot delay a stream that already carries overlap"
            )));
        }
        let op = Delay {
            axis: s.axis,
            delay: extra,
            overlap,
        };
        let stream = StreamInfo {
            delay: s.delay + extra,
            overlap,
            ..s
        };
        let o = self.add(
            &self.unique(&format!("{name}.delay")),
            Arc::new(op),
            &[input.0],
            &[Some(stream)],
        )?;
        Ok(o[0].clone())
    }

    /// The value of a constant outlet of the pulsed graph, if it is one.
    pub fn const_value(&self, o: OutletId) -> Option<crate::ops::Tensor> {
        let node = self.b.graph().nodes.get(o.node)?;
        node.op
            .as_any()
            .downcast_ref::<Const>()
            .map(|c| c.value.clone())
    }

    /// A node name not used yet, based on `name`.
    pub fn unique(&self, name: &str) -> String {
        if self.b.graph().node_by_name(name).is_none() {
            return name.to_string();
        }
        (1..)
            .map(|i| format!("{name}.{i}"))
            .find(|n| self.b.graph().node_by_name(n).is_none())
            .expect("some name is free")
    }

    /// Brings all streaming inputs to the largest delay among them.
    pub fn align(&mut self, name: &str, ins: &[Pulsed]) -> Result<Vec<Pulsed>> {
        let target = ins
            .iter()
            .filter_map(|p| p.1.stream.map(|s| s.delay))
            .max()
            .unwrap_or(0);
        let mut out = Vec::with_capacity(ins.len());
        for p in ins {
            match p.1.stream {
                Some(s) if s.delay < target => {
                    out.push(self.delay(name, p, target - s.delay, 0)?)
                }
                _ => out.push(p.clone()),
            }
        }
        Ok(out)
    }

    /// The generic rule: an op that is frame-local along the stream runs as is
    /// on delay-aligned inputs.
    fn frame_local(&mut self, node: &Node, ins: &[Pulsed]) -> Result<Vec<Pulsed>> {
        let ins = self.align(&node.name, ins)?;
        if ins
            .iter()
            .any(|p| p.1.stream.is_some_and(|s| s.overlap > 0))
        {
            return Err(not_streamable(
                node,
                "an input carries overlap frames meant for a windowed op".into(),
            ));
        }
        let pulses: Vec<usize> = ins
            .iter()
            .filter_map(|p| p.1.stream.map(|s| s.pulse))
            .collect();
        if pulses.windows(2).any(|w| w[0] != w[1]) {
            return Err(not_streamable(
                node,
                format!("its streaming inputs have different pulses {pulses:?}"),
            ));
        }
        let facts: Vec<&TypedFact> = ins.iter().map(|p| &p.1.fact).collect();
        let axes: Vec<Option<usize>> = ins.iter().map(|p| p.1.stream.map(|s| s.axis)).collect();
        let Some(axis) = node.op.frame_local_axis(&facts, &axes) else {
            return Err(not_streamable(
                node,
                format!(
                    "{} has no pulsed form along the streaming axis",
                    node.op.name()
                ),
            ));
        };
        let first = ins
            .iter()
            .find_map(|p| p.1.stream)
            .expect("some input streams");
        let mut streams = Vec::new();
        for f in &node.facts {
            let len = *f
                .shape
                .get(axis)
                .ok_or_else(|| not_streamable(node, "output lost the streaming axis".into()))?;
            streams.push(Some(StreamInfo {
                axis,
                pulse: first.pulse,
                len,
                delay: first.delay,
                overlap: 0,
            }));
        }
        let inputs: Vec<OutletId> = ins.iter().map(|p| p.0).collect();
        self.add(&node.name, node.op.clone(), &inputs, &streams)
    }
}

/// The stream of a pulsed outlet, or an error naming the node.
pub fn stream(name: &str, p: &Pulsed) -> Result<StreamInfo> {
    p.1.stream.ok_or_else(|| {
        Error::Graph(format!(
            "node `{name}`: expected a streaming input, got {}",
            p.1
        ))
    })
}

/// The error for a node that cannot be streamed, and why.
pub fn not_streamable(node: &Node, why: String) -> Error {
    Error::Node {
        node: node.name.clone(),
        op: node.op.name(),
        source: OpError::NotStreamable(why),
    }
}
