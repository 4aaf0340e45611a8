//! GLU after a Linear, `a * sigmoid(b)` over the two halves of its last
//! axis (two Slices, a Sigmoid and a Mul), in the Linear's epilogue: four
//! launches saved, and the full product is never written.

use super::{Fusion, Rewriter};
use crate::gpu::ops::linear_fused::FusedLinearGpu;
use crate::graph::OutletId;
use crate::ops::matmul::Linear;
use crate::ops::shape::Slice;
use crate::ops::{Binary, Unary};

/// The Linear, the slices `a` and `b`, the Sigmoid and the Mul.
pub(super) fn find(g: &Rewriter, l: usize) -> Option<[usize; 5]> {
    g.op::<Linear>(l)?;
    if !g.free(l) || g.readers(l) != 2 {
        return None;
    }
    let out = &g.facts(l)[0];
    let width = out.shape.last()?.as_const()? as usize;
    let last = out.rank() - 1;
    let half = width / 2;
    let slice = |id: usize| -> Option<(i64, i64)> {
        let s = g.op::<Slice>(id)?;
        (s.axis == last).then_some((s.start, s.end.unwrap_or(width as i64)))
    };
    let users = g.users(l);
    if users.len() != 2 || users.iter().any(|&(u, _)| !g.free(u)) {
        return None;
    }
    let (mut a, mut b) = (None, None);
    for &(u, _) in users {
        match slice(u) {
            Some((0, e)) if e == half as i64 => a = Some(u),
            Some((s, e)) if s == half as i64 && e == width as i64 => b = Some(u),
            _ => {}
        }
    }
    let (a, b) = (a?, b?);
    let (gate, _) = g.sole_user(b)?;
    if g.op::<Unary>(gate) != Some(&Unary::Sigmoid) || !g.free(gate) {
        return None;
    }
    let ((m, _), (m2, _)) = (g.sole_user(a)?, g.sole_user(gate)?);
    (m == m2 && g.op::<Binary>(m) == Some(&Binary::Mul) && g.free(m)).then_some([l, a, b, gate, m])
}

pub(super) fn rewrite(g: &mut Rewriter, l: usize) {
    let Some([l, a, b, gate, m]) = find(g, l) else {
        return;
    };
    let Some(op) = g
        .gpu_op(l)
        .and_then(FusedLinearGpu::of)
        .and_then(FusedLinearGpu::with_glu)
    else {
        return;
    };
    g.fuse(Fusion {
        kind: "FusedLinear",
        anchor: l,
        absorbed: vec![a, b, gate, m],
        inputs: g.inputs(l).to_vec(),
        outputs: vec![OutletId::new(m, 0)],
        op: Box::new(op),
    });
}
