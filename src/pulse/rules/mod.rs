//! Dedicated pulse rules for ops that are not frame-local along the stream:
//! each returns `Ok(None)` when it does not apply to the node.

mod conv;
pub(super) mod window;

use std::sync::Arc;

use self::conv::conv1d_batch;
use self::window::{pulsify_window, Window};
use super::lstm::lstm;
use super::pulsifier::{not_streamable, stream, Ctx, Pulsed};
use super::reflect::ReflectPulsePad;
use super::unfold::unfold;
use super::{PulsePad, PulsedLimitedAttention, PulsedSameAxisConcat, StreamInfo, StreamPosition};
use crate::graph::{Node, OutletId};
use crate::ops::concat::Concat;
use crate::ops::conv::{Conv1d, ConvLayout};
use crate::ops::limited_attention::LimitedAttention;
use crate::ops::pad::{Pad, PadMode};
use crate::ops::range::Range;
use crate::ops::stft::Stft;
use crate::ops::{checks, Tensor};
use crate::Result;

type Rule = fn(&mut Ctx, &Node, &[Pulsed]) -> Result<Option<Vec<Pulsed>>>;

const RULES: &[Rule] = &[
    limited_attention,
    conv1d_batch,
    conv1d,
    stft,
    pad,
    range,
    concat,
    unfold,
    lstm,
];

/// Keys and values keep `left_context` past frames through a Delay; the
/// pulsed op masks positions before the stream start.
fn limited_attention(cx: &mut Ctx, node: &Node, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    let Some(op) = node.op.as_any().downcast_ref::<LimitedAttention>() else {
        return Ok(None);
    };
    // time is the axis before the width: 0, or 1 after a batch axis
    let time = ins[0].1.fact.rank().saturating_sub(2);
    if ins
        .iter()
        .any(|p| p.1.stream.is_none_or(|s| s.axis != time))
    {
        return Err(not_streamable(
            node,
            format!("q, k and v must all stream along their time axis {time}"),
        ));
    }
    let ins = cx.align(&node.name, ins)?;
    let s = stream(&node.name, &ins[0])?;
    let k = cx.delay(&format!("{}.k", node.name), &ins[1], 0, op.left_context)?;
    let v = cx.delay(&format!("{}.v", node.name), &ins[2], 0, op.left_context)?;
    let pulsed = PulsedLimitedAttention {
        attn: op.clone(),
        pulse: s.pulse,
        delay: s.delay,
    };
    let inputs: Vec<OutletId> = vec![ins[0].0, k.0, v.0];
    let out = Some(StreamInfo {
        len: node.facts[0].shape[time],
        overlap: 0,
        ..s
    });
    cx.add(&node.name, Arc::new(pulsed), &inputs, &[out])
        .map(Some)
}

/// A convolution along the stream: Delay for its window, valid convolution.
fn conv1d(cx: &mut Ctx, node: &Node, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    let Some(op) = node.op.as_any().downcast_ref::<Conv1d>() else {
        return Ok(None);
    };
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

/// STFT frames: Delay for the frame overlap; centre (reflect) padding would
/// need samples from the future, so only `center = false` streams.
fn stft(cx: &mut Ctx, node: &Node, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    let Some(op) = node.op.as_any().downcast_ref::<Stft>() else {
        return Ok(None);
    };
    if op.center() {
        return Err(not_streamable(
            node,
            "centre (reflect) padding reads samples from the future; pad with a constant Pad before an Stft with center = false".into(),
        ));
    }
    let s = stream(&node.name, &ins[0])?;
    let rank = ins[0].1.fact.rank();
    if s.axis + 1 != rank {
        return Err(not_streamable(
            node,
            format!(
                "the signal must stream along its last axis, not axis {}",
                s.axis
            ),
        ));
    }
    let w = Window {
        extent: op.n_fft(),
        stride: op.hop(),
        pad_before: 0,
        pad_after: 0,
        out_axis: rank - 1,
    };
    pulsify_window(cx, node, ins, w, node.op.clone()).map(Some)
}

/// Constant padding of the streaming axis: the stream is delayed by the
/// leading pad and a PulsePad writes the pad value over the frames before
/// the stream's start and after its end.
fn pad(cx: &mut Ctx, node: &Node, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    let Some(op) = node.op.as_any().downcast_ref::<Pad>() else {
        return Ok(None);
    };
    let s = stream(&node.name, &ins[0])?;
    let Some(&(before, after)) = op.pads.get(s.axis) else {
        return Err(not_streamable(
            node,
            format!("no padding given for the streaming axis {}", s.axis),
        ));
    };
    if (before, after) == (0, 0) {
        return Ok(None); // the streaming axis is untouched: frame-local
    }
    let mut others = op.pads.clone();
    others[s.axis] = (0, 0);
    let value = match op.mode {
        PadMode::Constant(v) => Some(v),
        PadMode::Reflect => None,
    };
    if s.overlap > 0 {
        return Err(not_streamable(node, "input carries overlap frames".into()));
    }
    let mut x = ins[0].clone();
    if others.iter().any(|&p| p != (0, 0)) {
        let inner = Pad {
            pads: others,
            mode: op.mode,
        };
        let name = cx.unique(&format!("{}.other_axes", node.name));
        x = cx
            .add(&name, Arc::new(inner), &[x.0], &[Some(s)])?
            .remove(0);
    }
    // shifted by `before`, padded frame p sits where input frame p - before
    // would: in padded coordinates the stream keeps the input's delay
    let Some(value) = value else {
        let len = node.facts[0].shape[s.axis];
        let op = ReflectPulsePad {
            axis: s.axis,
            pulse: s.pulse,
            in_delay: s.delay,
            before,
            after,
            len: s.len,
        };
        let out = StreamInfo {
            len,
            delay: s.delay + before,
            ..s
        };
        return cx
            .add(&node.name, Arc::new(op), &[x.0], &[Some(out)])
            .map(Some);
    };
    let x = cx.delay(&node.name, &x, before, 0)?;
    let len = node.facts[0].shape[s.axis];
    let delay = s.delay;
    let end = (after > 0).then(|| s.len.add_const(before as i64));
    let op = PulsePad {
        axis: s.axis,
        pulse: s.pulse,
        delay,
        begin: before,
        end,
        value,
    };
    let out = StreamInfo { len, delay, ..s };
    cx.add(&node.name, Arc::new(op), &[x.0], &[Some(out)])
        .map(Some)
}

/// Positions along the streaming axis come from a stream-position source.
fn range(cx: &mut Ctx, node: &Node, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    let Some(op) = node.op.as_any().downcast_ref::<Range>() else {
        return Ok(None);
    };
    let s = stream(&node.name, &ins[0])?;
    if s.axis != op.axis {
        return cx
            .add(&node.name, node.op.clone(), &[ins[0].0], &[None])
            .map(Some);
    }
    if s.overlap > 0 {
        return Err(not_streamable(node, "input carries overlap frames".into()));
    }
    let pos = StreamPosition {
        pulse: s.pulse,
        delay: s.delay,
        offset: op.offset,
    };
    let out = StreamInfo {
        axis: 0,
        pulse: s.pulse,
        len: s.len,
        delay: s.delay,
        overlap: 0,
    };
    cx.add(&node.name, Arc::new(pos), &[ins[0].0], &[Some(out)])
        .map(Some)
}

/// Concatenation on the streaming axis with constants before and/or after
/// the one streaming input; the output follows the stream, never the constants.
fn concat(cx: &mut Ctx, node: &Node, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    let Some(op) = node.op.as_any().downcast_ref::<Concat>() else {
        return Ok(None);
    };
    let streaming: Vec<usize> = (0..ins.len())
        .filter(|&i| ins[i].1.stream.is_some())
        .collect();
    let &[at] = streaming.as_slice() else {
        if streaming.len() > 1 {
            let axes: Vec<usize> = streaming
                .iter()
                .filter_map(|&i| ins[i].1.stream.map(|s| s.axis))
                .collect();
            let axis = checks::axis(op.axis, ins[0].1.fact.rank())
                .map_err(|e| crate::Error::node(&node.name, "Concat", e))?;
            if axes.iter().all(|&a| a != axis) {
                return Ok(None); // along another axis: frame-local
            }
            return Err(not_streamable(
                node,
                "concatenates two streams along the streaming axis".into(),
            ));
        }
        return Ok(None);
    };
    let s = stream(&node.name, &ins[at])?;
    let axis = checks::axis(op.axis, ins[at].1.fact.rank())
        .map_err(|e| crate::Error::node(&node.name, "Concat", e))?;
    if axis != s.axis {
        return Ok(None);
    }
    let mut parts: [Vec<Tensor>; 2] = [Vec::new(), Vec::new()];
    for (i, p) in ins.iter().enumerate() {
        if i == at {
            continue;
        }
        let Some(v) = cx.const_value(p.0) else {
            return Err(not_streamable(
                node,
                format!("input {i} is neither the stream nor a constant"),
            ));
        };
        parts[usize::from(i > at)].push(v);
    }
    let join = |ts: &[Tensor]| -> Result<Option<Tensor>> {
        match ts {
            [] => Ok(None),
            [t] => Ok(Some(t.clone())),
            _ => {
                let refs: Vec<&Tensor> = ts.iter().collect();
                let out = crate::ops::eval_op(
                    &Concat {
                        axis: axis as isize,
                    },
                    &refs,
                )
                .map_err(|e| crate::Error::node(&node.name, "Concat", e))?;
                Ok(out.into_iter().next())
            }
        }
    };
    let (prefix, suffix) = (join(&parts[0])?, join(&parts[1])?);
    let c = prefix.as_ref().map_or(0, |p| p.shape()[axis]);
    // as for padding: after the shift by `c`, the output keeps the input's delay
    let x = cx.delay(&node.name, &ins[at], c, 0)?;
    let delay = s.delay;
    let pulsed = PulsedSameAxisConcat {
        axis,
        pulse: s.pulse,
        delay,
        prefix,
        suffix,
        input_len: s.len,
    };
    let out = StreamInfo {
        len: node.facts[0].shape[axis],
        delay,
        ..s
    };
    cx.add(&node.name, Arc::new(pulsed), &[x.0], &[Some(out)])
        .map(Some)
}

/// Applies the first dedicated rule that takes the node.
pub fn pulsify(cx: &mut Ctx, node: &Node, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    for rule in RULES {
        if let Some(r) = rule(cx, node, ins)? {
            return Ok(Some(r));
        }
    }
    Ok(None)
}
