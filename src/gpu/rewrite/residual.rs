//! `residual + linear * alpha` (a Linear, optionally a Mul by a constant
//! scalar, then an Add of a same-shaped tensor computed before the Linear)
//! in the Linear's epilogue: the Mul's and the Add's launches saved.

use super::{Fusion, Rewriter};
use crate::gpu::ops::linear_fused::FusedLinearGpu;
use crate::graph::OutletId;
use crate::ops::matmul::Linear;
use crate::ops::Binary;

/// A matched residual: the Linear, the scaling Mul if any, the Add, alpha
/// and the residual.
pub(super) struct Residual {
    pub linear: usize,
    pub mul: Option<usize>,
    pub add: usize,
    pub alpha: f32,
    pub residual: OutletId,
}

pub(super) fn find(g: &Rewriter, l: usize) -> Option<Residual> {
    g.op::<Linear>(l)?;
    if !g.free(l) || g.facts(l).len() != 1 {
        return None;
    }
    let (mut next, _) = g.sole_user(l)?;
    let mut chain = l;
    let mut alpha = 1.0f32;
    let mut mul = None;
    if g.op::<Binary>(next) == Some(&Binary::Mul) && g.free(next) {
        let other = g.inputs(next).iter().find(|o| o.node != chain)?;
        alpha = g.scalar(*other)?;
        let (after, _) = g.sole_user(next)?;
        mul = Some(next);
        chain = next;
        next = after;
    }
    let add = next;
    if g.op::<Binary>(add) != Some(&Binary::Add) || !g.free(add) {
        return None;
    }
    let ins = g.inputs(add);
    let k = ins.iter().position(|o| o.node == chain)?;
    let r = ins[1 - k.min(1)];
    // the residual must be ready when the Linear runs
    let fits = ins.len() == 2
        && r.node != chain
        && g.pos(r.node) < g.pos(l)
        && g.on_device(r.node)
        && g.fact(r) == &g.facts(add)[0]
        && g.facts(l)[0] == g.facts(add)[0];
    fits.then_some(Residual {
        linear: l,
        mul,
        add,
        alpha,
        residual: r,
    })
}

pub(super) fn rewrite(g: &mut Rewriter, l: usize) {
    let Some(m) = find(g, l) else { return };
    let Some(op) = g
        .gpu_op(l)
        .and_then(FusedLinearGpu::of)
        .and_then(|f| f.with_residual(m.alpha))
    else {
        return;
    };
    let mut inputs = g.inputs(l).to_vec();
    inputs.insert(op.residual_input(), m.residual);
    g.fuse(Fusion {
        kind: "FusedLinear",
        anchor: m.linear,
        absorbed: m.mul.into_iter().chain([m.add]).collect(),
        inputs,
        outputs: vec![OutletId::new(m.add, 0)],
        op: Box::new(op),
    });
}
