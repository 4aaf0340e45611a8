//! GPU fusion as graph rewrites. After the translator has placed every node,
//! each rule looks for its pattern around one node (a Linear and the
//! activation after it, a convolution and the layer norm after it, ...)
//! and, when the GPU forms involved can take the fusion, replaces the group
//! by one fused node whose GPU form computes it all in one launch
//! (`FusedLinearGpu`, a `ConvGpu` with its norm, ...). The fused node is
//! then an ordinary node of the device graph the runner runs: it has its
//! inputs and outputs like any other, and the nodes it absorbed are gone.
//!
//! A chunk step is a chain of small dependent kernels, each costing a few
//! microseconds however little it does, so every launch saved shows in the
//! step's latency.
//!
//! Comparing with the CPU: a fused node's output computes the source outlet
//! of the last node it absorbed on that output ([`Rewritten::outlets`]);
//! the values in between (a Linear's output before its activation) no
//! longer exist on the GPU, and are not compared.

mod activation;
mod affine;
mod delays;
mod fused;
mod glu;
mod graph;
mod norm_after;
mod norm_before;
mod norm_copy;
mod residual;
mod siblings;

#[cfg(test)]
mod tests;

pub use fused::Fused;
pub use graph::{Fusion, Rewriter, Rewritten};

use crate::graph::Graph;
use crate::ops::TypedFact;

use super::translator::Placement;

/// A rewrite rule: tries its pattern at one node of the graph, and fuses
/// it when it matches and the GPU forms take it.
pub type Rule = fn(&mut Rewriter, usize);

/// Every rule, in the order they run (each over every node): each leaves
/// the next its pattern. An activation goes into its Linear before the
/// residual after it is looked for (a Linear with an activation takes no
/// residual), a norm into the Linears after it before one is written by
/// the Linear before it, and siblings are joined last, once each Linear's
/// epilogue is known.
pub const RULES: [(&str, Rule); 9] = [
    ("activation", activation::rewrite),
    ("glu", glu::rewrite),
    ("residual", residual::rewrite),
    ("norm_before", norm_before::rewrite),
    ("affine", affine::rewrite),
    ("delays", delays::rewrite),
    ("norm_after", norm_after::rewrite),
    ("norm_copy", norm_copy::rewrite),
    ("siblings", siblings::rewrite),
];

/// Runs every rule over `graph` with its translation (one placement and
/// concrete facts per node): the device graph.
pub fn rewrite(graph: &Graph, facts: Vec<Vec<TypedFact>>, placements: Vec<Placement>) -> Rewritten {
    let Ok(order) = graph.topo_order() else {
        // a graph with a cycle does not run anyway: leave it as it is
        let order: Vec<usize> = (0..graph.nodes.len()).collect();
        return Rewriter::new(graph, &order, facts, placements).finish();
    };
    let mut g = Rewriter::new(graph, &order, facts, placements);
    for (_, rule) in RULES {
        for id in 0..g.len() {
            if g.live(id) {
                rule(&mut g, id);
            }
        }
    }
    g.finish()
}
