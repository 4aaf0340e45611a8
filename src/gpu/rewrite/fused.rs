//! The op of a fused node in the device graph: what it replaced, for
//! `inspect` and errors. Its work is its GPU form (a rewrite makes a fused
//! node only when the GPU forms take the fusion), so it has no CPU form.

use std::sync::Arc;

use crate::ops::{Op, OpError, OpResult, Scratch, Tensor, TypedFact};

/// A node that a rewrite made from several source nodes.
#[derive(Debug)]
pub struct Fused {
    /// The fused op's kind, e.g. `"FusedLinear"`.
    pub kind: &'static str,
    /// The source op of the node it replaced in place (its anchor): rules
    /// match a fused Linear as a Linear.
    pub anchor: Arc<dyn Op>,
    /// The source nodes it computes besides its anchor, in fusion order.
    pub absorbed: Vec<String>,
    /// Its output facts (those of the source outlets it computes).
    pub facts: Vec<TypedFact>,
}

impl Op for Fused {
    fn name(&self) -> &'static str {
        self.kind
    }

    fn output_facts(&self, _inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        Ok(self.facts.clone())
    }

    fn eval(&self, _: &[&Tensor], _: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        Err(OpError::Other(format!(
            "{} (a {} with {}) runs only on the GPU",
            self.kind,
            self.anchor.name(),
            self.absorbed.join(", ")
        )))
    }

    fn info(&self) -> String {
        format!("{} + {}", self.anchor.name(), self.absorbed.join(" + "))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
