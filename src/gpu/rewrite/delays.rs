//! The Delays that make a streamed op's window (a pulsed attention's keys
//! and values, a depthwise convolution's input) kept in the op's own state:
//! it reads the ring and the new frames and writes the next step's ring. A
//! launch saved per Delay, and the window is never copied.

use std::ops::Range;

use super::{Fusion, Rewriter};
use crate::gpu::op::{downcast, GpuOp};
use crate::gpu::ops::attention::LimitedGpu;
use crate::gpu::ops::conv::ConvGpu;
use crate::ops::conv::Conv1d;
use crate::pulse::{Delay, PulsedLimitedAttention};

/// The op's inputs that are windows, the Delays making them and their
/// ring (frames of overlap).
pub(super) fn find(g: &Rewriter, id: usize) -> Option<(Range<usize>, Vec<usize>, usize)> {
    let slots = if g.op::<PulsedLimitedAttention>(id).is_some() {
        1..3
    } else if g.op::<Conv1d>(id).is_some() {
        0..1
    } else {
        return None;
    };
    if !g.free(id) {
        return None;
    }
    let ins = g.inputs(id);
    let mut ring = None;
    let mut delays = Vec::new();
    for k in slots.clone() {
        let o = ins.get(k)?;
        let d = g.op::<Delay>(o.node)?;
        // the window is the ring and this pulse's frames, nothing held
        // back, time-major
        let fits = d.delay == 0
            && d.axis + 2 == g.fact(*o).rank()
            && ring.is_none_or(|r| r == d.overlap)
            && g.free(o.node)
            && g.sole_user(o.node) == Some((id, k))
            && g.on_device(g.inputs(o.node)[0].node);
        if !fits {
            return None;
        }
        ring = Some(d.overlap);
        delays.push(o.node);
    }
    Some((slots, delays, ring?))
}

pub(super) fn rewrite(g: &mut Rewriter, id: usize) {
    let Some((slots, delays, ring)) = find(g, id) else {
        return;
    };
    let Some(op) = g.gpu_op(id) else { return };
    let fused: Option<(&'static str, Box<dyn GpuOp>)> = if let Some(a) = downcast::<LimitedGpu>(op)
    {
        a.with_delays(ring)
            .map(|f| ("FusedAttention", Box::new(f) as Box<dyn GpuOp>))
    } else if let Some(c) = downcast::<ConvGpu>(op) {
        c.with_delay(ring)
            .map(|f| ("FusedConv", Box::new(f) as Box<dyn GpuOp>))
    } else {
        None
    };
    let Some((kind, op)) = fused else { return };
    // the op reads what the Delays read
    let mut inputs = g.inputs(id).to_vec();
    for (k, &d) in slots.zip(&delays) {
        inputs[k] = g.inputs(d)[0];
    }
    g.fuse(Fusion {
        kind,
        anchor: id,
        absorbed: delays,
        inputs,
        outputs: g.outlets(id),
        op,
    });
}
