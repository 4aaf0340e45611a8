//! A layer norm over the last axis (with the activation fused into it, if
//! any) after a convolution that nothing else reads (the conv module's
//! `dw_norm` and SiLU after its depthwise conv), in the convolution's
//! kernel: a block per frame normalises the channels it just computed.

use super::{Fusion, Rewriter};
use crate::gpu::op::downcast;
use crate::gpu::ops::conv::ConvGpu;
use crate::gpu::ops::elementwise::unary_code;
use crate::graph::OutletId;
use crate::ops::conv::Conv1d;
use crate::ops::norm::LayerNorm;
use crate::ops::Unary;

/// The conv, the norm, its eps, the activation's code (-1: none), gamma
/// and beta.
pub(super) fn find(g: &Rewriter, c: usize) -> Option<(usize, usize, f32, i32, [OutletId; 2])> {
    g.op::<Conv1d>(c)?;
    if !g.free(c) {
        return None;
    }
    let (n, 0) = g.sole_user(c)? else {
        return None;
    };
    let ln = g.op::<LayerNorm>(n)?;
    let ins = g.inputs(n);
    let rank = g.facts(n)[0].rank() as isize;
    if ins.len() != 3
        || !g.gpu(n)
        || (ln.axis != -1 && ln.axis != rank - 1)
        || ins[1..].iter().any(|o| !g.on_device(o.node))
    {
        return None;
    }
    // the activation rule may have given the norm its activation
    let act = if g.free(n) {
        -1
    } else {
        g.op_behind::<Unary>(OutletId::new(n, 0))
            .and_then(|u| unary_code(*u))?
    };
    Some((c, n, ln.eps, act, [ins[1], ins[2]]))
}

pub(super) fn rewrite(g: &mut Rewriter, c: usize) {
    let Some((c, n, eps, act, gamma_beta)) = find(g, c) else {
        return;
    };
    let Some(op) = g
        .gpu_op(c)
        .and_then(downcast::<ConvGpu>)
        .and_then(|conv| conv.with_norm_after(eps, act))
    else {
        return;
    };
    // the conv's own inputs, then gamma and beta
    let inputs = g.inputs(c).iter().copied().chain(gamma_beta).collect();
    g.fuse(Fusion {
        kind: "FusedConv",
        anchor: c,
        absorbed: vec![n],
        inputs,
        outputs: vec![OutletId::new(n, 0)],
        op: Box::new(op),
    });
}
