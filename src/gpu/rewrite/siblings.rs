//! Linears of one shape reading the same input (attention's q, k and v
//! after their shared layer norm) computed by one skinny launch, in the
//! place of the last of them; its outputs are theirs. A sibling read
//! before that place stays on its own.

use super::{Fusion, Rewriter};
use crate::gpu::ops::linear_fused::{FusedLinearGpu, MAX_SIBLINGS};
use crate::graph::OutletId;
use crate::ops::matmul::Linear;

/// The groups of Linears reading `src`'s output that one launch may
/// compute: each group's last (in execution order) launches, with the
/// others before it.
pub(super) fn find(g: &Rewriter, src: usize) -> Vec<Vec<usize>> {
    let mut group: Vec<usize> = g
        .users(src)
        .iter()
        .filter(|&&(u, k)| {
            let own = g.own_inputs(u);
            k == 0
                && g.op::<Linear>(u).is_some()
                && g.free(u)
                && g.facts(u).len() == 1
                // not a graph output: read only inside the step
                && g.readers(u) == g.users(u).len()
                && g.inputs(u)[1..own].iter().all(|&o| g.is_const(o))
        })
        .map(|&(u, _)| u)
        .collect();
    group.sort_by_key(|&u| g.pos(u));
    let mut found = Vec::new();
    while group.len() > 1 {
        let first = group[0];
        // same weight shapes, same output, and the same fused inputs (a
        // norm's gamma and beta)
        let like = |u: usize| {
            let (a, b) = (g.inputs(first), g.inputs(u));
            let own = g.own_inputs(first);
            a.len() == b.len()
                && own == g.own_inputs(u)
                && a[1..own]
                    .iter()
                    .zip(&b[1..own])
                    .all(|(x, y)| g.fact(*x) == g.fact(*y))
                && a[own..] == b[own..]
                && g.facts(first)[0] == g.facts(u)[0]
        };
        let chunk: Vec<usize> = group
            .iter()
            .copied()
            .filter(|&u| like(u))
            .take(1 + MAX_SIBLINGS)
            .collect();
        group.retain(|u| !chunk.contains(u));
        let Some((&launcher, others)) = chunk.split_last() else {
            continue;
        };
        let mut joined: Vec<usize> = others
            .iter()
            .copied()
            .filter(|&s| g.users(s).iter().all(|&(r, _)| g.pos(r) > g.pos(launcher)))
            .collect();
        if !joined.is_empty() {
            joined.push(launcher);
            found.push(joined);
        }
    }
    found
}

pub(super) fn rewrite(g: &mut Rewriter, src: usize) {
    for group in find(g, src) {
        let Some((&launcher, others)) = group.split_last() else {
            continue;
        };
        let forms: Option<Vec<FusedLinearGpu>> = others
            .iter()
            .map(|&s| g.gpu_op(s).and_then(FusedLinearGpu::of))
            .collect();
        let Some(op) = g
            .gpu_op(launcher)
            .and_then(FusedLinearGpu::of)
            .zip(forms)
            .and_then(|(f, sibs)| f.with_siblings(&sibs))
        else {
            continue;
        };
        // each sibling's weights and bias, after the launcher's inputs
        let mut inputs = g.inputs(launcher).to_vec();
        for &s in others {
            inputs.extend_from_slice(&g.inputs(s)[1..g.own_inputs(s)]);
        }
        debug_assert_eq!(
            inputs.len(),
            op.siblings_input() + others.len() * op.sibling_inputs()
        );
        let outputs = std::iter::once(launcher)
            .chain(others.iter().copied())
            .map(|u| OutletId::new(u, 0))
            .collect();
        g.fuse(Fusion {
            kind: "FusedLinear",
            anchor: launcher,
            absorbed: others.to_vec(),
            inputs,
            outputs,
            op: Box::new(op),
        });
    }
}
