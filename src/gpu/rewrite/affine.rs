//! `(x - a) * b` after `x`'s producer, `a` and `b` constant vectors over
//! the last axis (a fixed feature normalisation), in the producer's kernel
//! (LogMel) when nothing else reads `x` or `x - a`.

use super::{Fusion, Rewriter};
use crate::gpu::op::downcast;
use crate::gpu::ops::stft::LogMelGpu;
use crate::graph::OutletId;
use crate::ops::Binary;

/// The producer, the Sub, the Mul, `a` and `b`.
pub(super) fn find(g: &Rewriter, p: usize) -> Option<(usize, usize, usize, [OutletId; 2])> {
    let width = g.facts(p).first()?.shape.last()?.as_const()?;
    let (s, 0) = g.sole_user(p)? else {
        return None;
    };
    if !g.free(p) || g.op::<Binary>(s) != Some(&Binary::Sub) || !g.free(s) {
        return None;
    }
    let (m, k) = g.sole_user(s)?;
    if g.op::<Binary>(m) != Some(&Binary::Mul) || !g.free(m) || k > 1 {
        return None;
    }
    let a = g.inputs(s)[1];
    let b = g.inputs(m)[1 - k];
    let vector = |o: OutletId| {
        let f = g.fact(o);
        g.is_const(o)
            && f.shape.len() == 1
            && f.shape[0].as_const() == Some(width)
            && f.dtype == g.facts(p)[0].dtype
    };
    (vector(a) && vector(b) && g.facts(m)[0] == g.facts(p)[0]).then_some((p, s, m, [a, b]))
}

pub(super) fn rewrite(g: &mut Rewriter, p: usize) {
    let Some((p, s, m, ab)) = find(g, p) else {
        return;
    };
    let Some(op) = g
        .gpu_op(p)
        .and_then(downcast::<LogMelGpu>)
        .and_then(LogMelGpu::with_affine)
    else {
        return;
    };
    // LogMel's two inputs, then a and b
    let inputs = g.inputs(p).iter().copied().chain(ab).collect();
    g.fuse(Fusion {
        kind: "FusedLogMel",
        anchor: p,
        absorbed: vec![s, m],
        inputs,
        outputs: vec![OutletId::new(m, 0)],
        op: Box::new(op),
    });
}
