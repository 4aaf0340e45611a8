//! The pulse rule of [`Conv1d`]. Two cases, tried in this order:
//! - a channels-first convolution streaming along its batch axis (`x [N, C,
//!   T]` with `N` the stream, as in models that run a small network per
//!   chunk): each batch entry is convolved on its own, so the op is
//!   frame-local and runs unchanged;
//! - a convolution along the stream (its time axis): a Delay for its
//!   window, then the valid convolution.

use std::sync::Arc;

use super::window::{pulsify_window, Window};
use super::Rules;
use crate::graph::{Node, OutletId};
use crate::ops::conv::{Conv1d, ConvLayout};
use crate::pulse::pulsifier::{not_streamable, stream, Ctx, Pulsed};
use crate::pulse::StreamInfo;
use crate::Result;

pub(super) fn register(r: &mut Rules) {
    r.add::<Conv1d>(pulsify);
}

fn pulsify(cx: &mut Ctx, node: &Node, op: &Conv1d, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    match along_batch(cx, node, op, ins)? {
        Some(outs) => Ok(Some(outs)),
        None => along_time(cx, node, op, ins),
    }
}

/// A rank-3 input streaming along axis 0 runs unchanged on each pulse of
/// batch entries; `None` for the other cases.
fn along_batch(
    cx: &mut Ctx,
    node: &Node,
    op: &Conv1d,
    ins: &[Pulsed],
) -> Result<Option<Vec<Pulsed>>> {
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

/// A convolution along the stream: Delay for its window, valid convolution.
fn along_time(
    cx: &mut Ctx,
    node: &Node,
    op: &Conv1d,
    ins: &[Pulsed],
) -> Result<Option<Vec<Pulsed>>> {
    let s = stream(&node.name, &ins[0])?;
    let rank = ins[0].1.fact.rank();
    let time = match op.layout {
        ConvLayout::ChannelsLast => rank.saturating_sub(2),
        ConvLayout::ChannelsFirst => rank.saturating_sub(1),
    };
    if s.axis != time {
        return Err(not_streamable(
            node,
            format!(
                "streams along axis {} but convolves along axis {time}",
                s.axis
            ),
        ));
    }
    let k = ins.get(1).and_then(|w| w.1.fact.shape.get(2).copied());
    let k = k.and_then(|d| d.as_const()).filter(|&k| k > 0);
    let Some(k) = k else {
        return Err(not_streamable(
            node,
            "kernel size must be a fixed number".into(),
        ));
    };
    let w = Window {
        extent: op.extent(k as usize),
        stride: op.stride,
        pad_before: op.pad.0,
        pad_after: op.pad.1,
        out_axis: time,
    };
    let valid = Conv1d { pad: (0, 0), ..*op };
    pulsify_window(cx, node, ins, w, Arc::new(valid)).map(Some)
}
