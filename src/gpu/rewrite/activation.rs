//! An activation (Relu, Sigmoid, Tanh, Silu, Gelu) applied by the kernel of
//! its producer, a Linear, a layer norm or a convolution, when nothing else
//! reads the producer's output: the activation's launch is saved.

use super::{Fusion, Rewriter};
use crate::gpu::op::{downcast, GpuOp};
use crate::gpu::ops::conv::ConvGpu;
use crate::gpu::ops::elementwise::unary_code;
use crate::gpu::ops::linear_fused::FusedLinearGpu;
use crate::gpu::ops::norm::AxisGpu;
use crate::graph::OutletId;
use crate::ops::Unary;

/// `(unary code, producer)` when node `id` is an activation whose producer
/// is on the GPU and read by it alone.
pub(super) fn find(g: &Rewriter, id: usize) -> Option<(i32, usize)> {
    let code = g
        .op::<Unary>(id)
        .and_then(|u| unary_code(*u))
        .filter(|c| (5..=9).contains(c))?;
    let src = g.inputs(id)[0];
    (src.slot == 0 && g.readers(src.node) == 1 && g.free(id) && g.free(src.node))
        .then_some((code, src.node))
}

pub(super) fn rewrite(g: &mut Rewriter, id: usize) {
    let Some((code, p)) = find(g, id) else { return };
    let Some(op) = g.gpu_op(p) else { return };
    let fused: Option<(&'static str, Box<dyn GpuOp>)> = if let Some(l) = FusedLinearGpu::of(op) {
        l.with_activation(code)
            .map(|f| ("FusedLinear", Box::new(f) as Box<dyn GpuOp>))
    } else if let Some(n) = downcast::<AxisGpu>(op) {
        n.with_activation(code)
            .map(|f| ("FusedLayerNorm", Box::new(f) as Box<dyn GpuOp>))
    } else if let Some(c) = downcast::<ConvGpu>(op) {
        c.with_activation(code)
            .map(|f| ("FusedConv", Box::new(f) as Box<dyn GpuOp>))
    } else {
        None
    };
    let Some((kind, op)) = fused else { return };
    g.fuse(Fusion {
        kind,
        anchor: p,
        absorbed: vec![id],
        inputs: g.inputs(p).to_vec(),
        outputs: vec![OutletId::new(id, 0)],
        op,
    });
}
