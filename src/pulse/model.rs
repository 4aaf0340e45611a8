//! The pulsified model: a graph over fixed-size pulses plus the pulsed fact
//! of every outlet.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::{PulsedFact, StreamInfo};
use crate::graph::{Graph, OutletId};
use crate::{Error, Result};

/// A graph whose streaming inputs take `pulse` frames per step.
#[derive(Clone, Debug)]
pub struct PulsedModel {
    /// The pulsed graph; its facts are the concrete per-step shapes.
    pub graph: Graph,
    /// The pulsed fact of every outlet of `graph`.
    pub facts: HashMap<OutletId, PulsedFact>,
    /// For each outlet of the whole-utterance graph, its pulsed counterpart.
    pub origin: HashMap<OutletId, OutletId>,
}

impl PulsedModel {
    /// The pulsed fact of an outlet of the pulsed graph.
    pub fn fact(&self, o: OutletId) -> Result<&PulsedFact> {
        self.facts.get(&o).ok_or_else(|| {
            Error::Graph(format!("no pulsed fact for {}", self.graph.outlet_name(o)))
        })
    }

    /// The stream of the first streaming graph input.
    pub fn input_stream(&self) -> Result<StreamInfo> {
        self.graph
            .inputs
            .iter()
            .find_map(|&i| self.facts.get(&OutletId::new(i, 0)).and_then(|f| f.stream))
            .ok_or_else(|| Error::Graph("the pulsed graph has no streaming input".into()))
    }

    /// The stream of graph output `i`, if it streams.
    pub fn output_stream(&self, i: usize) -> Option<StreamInfo> {
        let o = self.graph.outputs.get(i)?.1;
        self.facts.get(&o).and_then(|f| f.stream)
    }

    /// Re-types the pulsed graph and checks that every node's inferred
    /// facts are the stored pulsed facts (invariant 2, statically).
    pub fn check_facts(&self) -> Result<()> {
        let mut g = self.graph.clone();
        g.infer_facts()?;
        for (id, n) in g.nodes.iter().enumerate() {
            for (slot, f) in n.facts.iter().enumerate() {
                let pf = self.fact(OutletId::new(id, slot))?;
                if &pf.fact != f {
                    return Err(Error::Graph(format!(
                        "node `{}`: re-typed fact {f} differs from pulsed fact {}",
                        n.name, pf.fact
                    )));
                }
                if let Some(s) = pf.stream {
                    if f.shape.get(s.axis).and_then(|d| d.as_const()) != Some(s.frames() as i64) {
                        return Err(Error::Graph(format!(
                            "node `{}`: fact {f} does not have {} frames on axis {}",
                            n.name,
                            s.frames(),
                            s.axis
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// A readable dump of the pulsed graph: each node with its pulsed facts
    /// and delays.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        let order = self
            .graph
            .topo_order()
            .unwrap_or_else(|_| (0..self.graph.nodes.len()).collect());
        for id in order {
            let n = &self.graph.nodes[id];
            let facts: Vec<String> = (0..n.facts.len())
                .map(|k| {
                    self.facts
                        .get(&OutletId::new(id, k))
                        .map_or("?".into(), |f| f.to_string())
                })
                .collect();
            let ins: Vec<String> = n
                .inputs
                .iter()
                .map(|&o| self.graph.outlet_name(o))
                .collect();
            let _ = write!(
                s,
                "#{id:<4} {:<36} {:<20} {}",
                n.name,
                n.op.name(),
                facts.join(", ")
            );
            if !ins.is_empty() {
                let _ = write!(s, "  <- {}", ins.join(", "));
            }
            let info = n.op.info();
            if !info.is_empty() && !n.op.as_any().is::<crate::ops::Const>() {
                let _ = write!(s, "  [{info}]");
            }
            s.push('\n');
        }
        for (i, (name, o)) in self.graph.outputs.iter().enumerate() {
            let d = self.output_stream(i).map_or("fixed".to_string(), |st| {
                format!("delay {} frames", st.delay)
            });
            let _ = writeln!(s, "output {name} = {} ({d})", self.graph.outlet_name(*o));
        }
        s
    }
}
