//! A builder that reads well when a model is written with it: every node is
//! typed as it is added, so a mistake is reported at the line that made it.

use std::sync::Arc;

use super::{Graph, Node, OutletId};
use crate::ops::{Const, Op, Source, Tensor, TypedFact};
use crate::{Error, Result};

/// Builds a [`Graph`].
///
/// ```
/// use pulsed::graph::GraphBuilder;
/// use pulsed::ops::{DType, Dim, Tensor, TypedFact};
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", TypedFact::new(DType::F32, [Dim::s()])).unwrap();
/// let k = b.constant("k", Tensor::scalar(2.0f32)).unwrap();
/// let y = b.op("y", pulsed::ops::Binary::Mul, &[x, k]).unwrap();
/// b.output("y", y);
/// let g = b.build().unwrap();
/// assert_eq!(g.fact(y).unwrap().to_string(), "f32[S]");
/// ```
#[derive(Default)]
pub struct GraphBuilder {
    graph: Graph,
    scopes: Vec<String>,
}

impl GraphBuilder {
    pub fn new() -> GraphBuilder {
        GraphBuilder::default()
    }

    /// Continues building on an existing graph.
    pub fn from_graph(graph: Graph) -> GraphBuilder {
        GraphBuilder {
            graph,
            scopes: Vec::new(),
        }
    }

    /// Node names added inside `f` get the prefix `name.`.
    pub fn scoped<T>(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut GraphBuilder) -> Result<T>,
    ) -> Result<T> {
        self.scopes.push(name.to_string());
        let r = f(self);
        self.scopes.pop();
        r
    }

    /// `name` with the current scope prefixes (`a.b.name`).
    pub fn scoped_name(&self, name: &str) -> String {
        self.full_name(name)
    }

    fn full_name(&self, name: &str) -> String {
        let mut s = String::new();
        for p in &self.scopes {
            s.push_str(p);
            s.push('.');
        }
        s.push_str(name);
        s
    }

    /// Adds a graph input.
    pub fn input(&mut self, name: &str, fact: TypedFact) -> Result<OutletId> {
        let o = self.op(name, Source { fact }, &[])?;
        self.graph.inputs.push(o.node);
        Ok(o)
    }

    /// Adds a constant.
    pub fn constant(&mut self, name: &str, value: Tensor) -> Result<OutletId> {
        self.op(name, Const { value }, &[])
    }

    /// Adds a single-output node.
    pub fn op(&mut self, name: &str, op: impl Op, inputs: &[OutletId]) -> Result<OutletId> {
        let outs = self.op_multi(name, op, inputs)?;
        let name = &self.graph.nodes.last().expect("just added").name;
        match outs.as_slice() {
            [o] => Ok(*o),
            _ => Err(Error::Graph(format!(
                "node `{name}` has {} outputs; use op_multi",
                outs.len()
            ))),
        }
    }

    /// Adds a node from a shared op.
    pub fn op_arc(
        &mut self,
        name: &str,
        op: Arc<dyn Op>,
        inputs: &[OutletId],
    ) -> Result<Vec<OutletId>> {
        let name = self.full_name(name);
        if self.graph.node_by_name(&name).is_some() {
            return Err(Error::Graph(format!("node name `{name}` is already used")));
        }
        let mut facts = Vec::with_capacity(inputs.len());
        for (k, o) in inputs.iter().enumerate() {
            let f = self.graph.fact(*o).map_err(|_| {
                Error::Graph(format!(
                    "node `{name}`: input {k} refers to an outlet that does not exist"
                ))
            })?;
            facts.push(f);
        }
        let out = op
            .output_facts(&facts)
            .map_err(|e| Error::node(&name, op.name(), e))?;
        let id = self.graph.nodes.len();
        let n = out.len();
        self.graph.nodes.push(Node {
            name,
            op,
            inputs: inputs.to_vec(),
            facts: out,
        });
        Ok((0..n).map(|s| OutletId::new(id, s)).collect())
    }

    /// Adds a node with any number of outputs.
    pub fn op_multi(
        &mut self,
        name: &str,
        op: impl Op,
        inputs: &[OutletId],
    ) -> Result<Vec<OutletId>> {
        self.op_arc(name, Arc::new(op), inputs)
    }

    /// Marks an outlet as a named graph output.
    pub fn output(&mut self, name: &str, o: OutletId) {
        self.graph.outputs.push((name.to_string(), o));
    }

    /// The fact of an outlet added so far.
    pub fn fact(&self, o: OutletId) -> Result<&TypedFact> {
        self.graph.fact(o)
    }

    /// The graph so far.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Validates and returns the graph.
    pub fn build(self) -> Result<Graph> {
        if self.graph.outputs.is_empty() {
            return Err(Error::Graph("graph has no outputs".into()));
        }
        self.graph.validate()?;
        Ok(self.graph)
    }
}
