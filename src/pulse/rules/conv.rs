//! A channels-first convolution streaming along its batch axis (`x [N, C, T]`
//! with `N` the stream, as in models that run a small network per chunk):
//! each batch entry is convolved on its own, so the op is frame-local.

use crate::graph::{Node, OutletId};
use crate::ops::conv::{Conv1d, ConvLayout};
use crate::pulse::pulsifier::{not_streamable, Ctx, Pulsed};
use crate::pulse::StreamInfo;
use crate::Result;

/// `Conv1d` with a rank-3 input streaming along axis 0 runs unchanged on
/// each pulse of batch entries; other cases go to the convolution rule.
pub fn conv1d_batch(cx: &mut Ctx, node: &Node, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    let Some(op) = node.op.as_any().downcast_ref::<Conv1d>() else {
        return Ok(None);
    };
    let Some(s) = ins.first().and_then(|p| p.1.stream) else {
        return Ok(None);
    };
    if s.axis != 0 || ins[0].1.fact.rank() != 3 {
        return Ok(None);
    }
    if op.layout != ConvLayout::ChannelsFirst {
        return Ok(None); // [N, T, C] streaming on N: let the conv rule explain
    }
    if s.overlap > 0 {
        return Err(not_streamable(node, "input carries overlap frames".into()));
    }
    if ins[1..].iter().any(|p| p.1.stream.is_some()) {
        return Err(not_streamable(
            node,
            "weights and bias must not stream".into(),
        ));
    }
    let inputs: Vec<OutletId> = ins.iter().map(|p| p.0).collect();
    let out = StreamInfo {
        len: node.facts[0].shape[0],
        ..s
    };
    cx.add(&node.name, node.op.clone(), &inputs, &[Some(out)])
        .map(Some)
}
