//! A layer norm over the last axis whose readers are Linears of few rows:
//! each one normalises its rows as its skinny kernel loads them, reading
//! the norm's input, gamma and beta. When every reader does, the norm's
//! launch is saved.

use super::{Fusion, Rewriter};
use crate::gpu::ops::linear_fused::FusedLinearGpu;
use crate::graph::OutletId;
use crate::ops::matmul::Linear;
use crate::ops::norm::LayerNorm;

/// `n`'s eps and inputs (x, gamma, beta) when it is a layer norm over the
/// last axis on the GPU with all its inputs on the device, that nothing
/// was fused into and that is no graph output.
pub(super) fn row_norm(g: &Rewriter, n: usize) -> Option<(f32, Vec<OutletId>)> {
    let ln = g.op::<LayerNorm>(n)?;
    let ins = g.inputs(n);
    let rank = g.facts(n)[0].rank() as isize;
    (ins.len() == 3
        && g.free(n)
        && (ln.axis == -1 || ln.axis == rank - 1)
        && g.readers(n) == g.users(n).len()
        && ins.iter().all(|o| g.on_device(o.node)))
    .then(|| (ln.eps, ins.to_vec()))
}

/// The readers of `n` that may normalise for it: Linears on the GPU (a
/// fused one too) reading it as their input, after it.
pub(super) fn candidates(g: &Rewriter, n: usize) -> Vec<usize> {
    g.users(n)
        .iter()
        .filter(|&&(u, k)| k == 0 && g.op::<Linear>(u).is_some() && g.gpu(u) && g.pos(u) > g.pos(n))
        .map(|&(u, _)| u)
        .collect()
}

pub(super) fn rewrite(g: &mut Rewriter, n: usize) {
    let Some((eps, ins)) = row_norm(g, n) else {
        return;
    };
    let mut all = g.users(n).len() == candidates(g, n).len();
    for u in candidates(g, n) {
        let Some(op) = g
            .gpu_op(u)
            .and_then(FusedLinearGpu::of)
            .and_then(|f| f.with_norm_before(eps))
        else {
            all = false;
            continue;
        };
        let mut inputs = g.inputs(u).to_vec();
        inputs[0] = ins[0];
        let at = op.norm_before_input();
        inputs.splice(at..at, [ins[1], ins[2]]);
        g.fuse(Fusion {
            kind: "FusedLinear",
            anchor: u,
            absorbed: Vec::new(),
            inputs,
            outputs: g.outlets(u),
            op: Box::new(op),
        });
    }
    if all {
        // its readers compute it
        g.remove(n);
    }
}
