//! The graph data structure and its whole-graph checks.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;

use crate::ops::{Op, Source, TypedFact};
use crate::{Error, Result};

/// One output of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OutletId {
    pub node: usize,
    pub slot: usize,
}

impl OutletId {
    pub fn new(node: usize, slot: usize) -> OutletId {
        OutletId { node, slot }
    }
}

/// A named op application.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub op: Arc<dyn Op>,
    pub inputs: Vec<OutletId>,
    /// The facts of this node's outputs, as last inferred.
    pub facts: Vec<TypedFact>,
}

/// A graph: nodes in insertion order, its inputs (Source nodes) and named outputs.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<(String, OutletId)>,
}

impl Graph {
    /// The node with this name.
    pub fn node_by_name(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The fact of an outlet.
    pub fn fact(&self, o: OutletId) -> Result<&TypedFact> {
        self.nodes
            .get(o.node)
            .and_then(|n| n.facts.get(o.slot))
            .ok_or_else(|| Error::Graph(format!("outlet {}:{} does not exist", o.node, o.slot)))
    }

    /// A printable name for an outlet: the node's name, with `:slot` after
    /// the first output.
    pub fn outlet_name(&self, o: OutletId) -> String {
        let n = self
            .nodes
            .get(o.node)
            .map(|n| n.name.as_str())
            .unwrap_or("?");
        if o.slot == 0 {
            n.to_string()
        } else {
            format!("{n}:{}", o.slot)
        }
    }

    /// Finds an outlet by `name` or `name:slot`.
    pub fn outlet_by_name(&self, name: &str) -> Option<OutletId> {
        if let Some(id) = self.node_by_name(name) {
            return Some(OutletId::new(id, 0));
        }
        let (n, s) = name.rsplit_once(':')?;
        Some(OutletId::new(self.node_by_name(n)?, s.parse().ok()?))
    }

    /// Nodes in an order where every node comes after its inputs (Kahn's
    /// algorithm, ties broken by insertion order). Names the node on a
    /// dangling input or a cycle.
    pub fn topo_order(&self) -> Result<Vec<usize>> {
        let n = self.nodes.len();
        let mut indeg = vec![0usize; n];
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (id, node) in self.nodes.iter().enumerate() {
            for (k, i) in node.inputs.iter().enumerate() {
                if i.node >= n {
                    return Err(Error::Graph(format!(
                        "node `{}`: input {k} refers to node #{} which does not exist",
                        node.name, i.node
                    )));
                }
                indeg[id] += 1;
                users[i.node].push(id);
            }
        }
        let mut ready: VecDeque<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(id) = ready.pop_front() {
            order.push(id);
            for &u in &users[id] {
                indeg[u] -= 1;
                if indeg[u] == 0 {
                    ready.push_back(u);
                }
            }
        }
        if order.len() != n {
            let stuck = (0..n).find(|&i| indeg[i] > 0).expect("some node is stuck");
            return Err(Error::Graph(format!(
                "node `{}` is part of a cycle",
                self.nodes[stuck].name
            )));
        }
        Ok(order)
    }

    /// Re-infers every node's facts from its inputs, in topological order.
    /// Type errors name the node.
    pub fn infer_facts(&mut self) -> Result<()> {
        for id in self.topo_order()? {
            let facts = self.infer_node(id)?;
            self.nodes[id].facts = facts;
        }
        Ok(())
    }

    fn infer_node(&self, id: usize) -> Result<Vec<TypedFact>> {
        let node = &self.nodes[id];
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for (k, o) in node.inputs.iter().enumerate() {
            let f = self.nodes[o.node].facts.get(o.slot).ok_or_else(|| {
                Error::Graph(format!(
                    "node `{}`: input {k} refers to output {} of `{}`, which has {} outputs",
                    node.name,
                    o.slot,
                    self.nodes[o.node].name,
                    self.nodes[o.node].facts.len()
                ))
            })?;
            inputs.push(f);
        }
        node.op
            .output_facts(&inputs)
            .map_err(|e| Error::node(&node.name, node.op.name(), e))
    }

    /// Checks the whole graph: unique names, no dangling inputs, no cycle,
    /// every stored fact equal to what the op infers now, outputs exist.
    pub fn validate(&self) -> Result<()> {
        let mut names = HashMap::new();
        for (id, n) in self.nodes.iter().enumerate() {
            if let Some(prev) = names.insert(n.name.as_str(), id) {
                return Err(Error::Graph(format!(
                    "node name `{}` used by nodes #{prev} and #{id}",
                    n.name
                )));
            }
        }
        for id in self.topo_order()? {
            let facts = self.infer_node(id)?;
            if facts != self.nodes[id].facts {
                return Err(Error::Graph(format!(
                    "node `{}`: stored facts {:?} differ from inferred {:?}",
                    self.nodes[id].name, self.nodes[id].facts, facts
                )));
            }
        }
        for &i in &self.inputs {
            if !self
                .nodes
                .get(i)
                .is_some_and(|n| n.op.as_any().is::<Source>())
            {
                return Err(Error::Graph(format!(
                    "graph input #{i} is not a Source node"
                )));
            }
        }
        for (name, o) in &self.outputs {
            self.fact(*o)
                .map_err(|_| Error::Graph(format!("output `{name}` refers to a missing outlet")))?;
        }
        Ok(())
    }

    /// A readable dump: one line per node with its op, inputs and facts.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        let order = self
            .topo_order()
            .unwrap_or_else(|_| (0..self.nodes.len()).collect());
        for id in order {
            let n = &self.nodes[id];
            let ins: Vec<String> = n.inputs.iter().map(|&o| self.outlet_name(o)).collect();
            let facts: Vec<String> = n.facts.iter().map(|f| f.to_string()).collect();
            let _ = write!(
                s,
                "#{id:<4} {:<36} {:<18} {}",
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
        for (name, o) in &self.outputs {
            let _ = writeln!(s, "output {name} = {}", self.outlet_name(*o));
        }
        s
    }
}
