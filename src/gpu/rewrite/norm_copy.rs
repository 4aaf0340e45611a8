//! A layer norm over the last axis of a cuBLAS Linear's result (the
//! residual stream, then the next sublayer's norm), written by the
//! Linear's epilogue as its second output: the epilogue holds the row
//! already, and the norm's launch is saved. (A skinny Linear after the
//! norm normalises on load instead: `norm_before`.)

use super::norm_before::row_norm;
use super::{Fusion, Rewriter};
use crate::gpu::ops::linear_fused::FusedLinearGpu;
use crate::graph::OutletId;
use crate::ops::matmul::Linear;

/// The norm's eps, the Linear (fused already or not) it reads, gamma and
/// beta.
pub(super) fn find(g: &Rewriter, n: usize) -> Option<(f32, usize, [OutletId; 2])> {
    let (eps, ins) = row_norm(g, n)?;
    let l = ins[0].node;
    // gamma and beta must be ready when the Linear runs
    let fits = ins[0].slot == 0
        && g.op::<Linear>(l).is_some()
        && g.gpu(l)
        && ins[1..].iter().all(|o| g.pos(o.node) < g.pos(l));
    fits.then_some((eps, l, [ins[1], ins[2]]))
}

pub(super) fn rewrite(g: &mut Rewriter, n: usize) {
    let Some((eps, l, gamma_beta)) = find(g, n) else {
        return;
    };
    let Some(op) = g
        .gpu_op(l)
        .and_then(FusedLinearGpu::of)
        .and_then(|f| f.with_norm_after(eps))
    else {
        return;
    };
    let mut inputs = g.inputs(l).to_vec();
    let at = op.norm_after_input();
    inputs.splice(at..at, gamma_beta);
    g.fuse(Fusion {
        kind: "FusedLinear",
        anchor: l,
        absorbed: vec![n],
        inputs,
        outputs: vec![OutletId::new(l, 0), OutletId::new(n, 0)],
        op: Box::new(op),
    });
}
