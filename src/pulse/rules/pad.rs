//! The pulse rule of [`Pad`] along the stream: constant padding becomes a
//! Delay and a [`PulsePad`], reflect padding a [`ReflectPulsePad`].

use std::sync::Arc;

use super::Rules;
use crate::graph::Node;
use crate::ops::pad::{Pad, PadMode};
use crate::pulse::pulsifier::{not_streamable, stream, Ctx, Pulsed};
use crate::pulse::{PulsePad, ReflectPulsePad, StreamInfo};
use crate::Result;

pub(super) fn register(r: &mut Rules) {
    r.add::<Pad>(pulsify);
}

/// Constant padding of the streaming axis: the stream is delayed by the
/// leading pad and a PulsePad writes the pad value over the frames before
/// the stream's start and after its end.
fn pulsify(cx: &mut Ctx, node: &Node, op: &Pad, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
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
