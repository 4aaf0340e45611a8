//! The pulse rule of [`Range`] along the stream: a [`StreamPosition`].

use std::sync::Arc;

use super::Rules;
use crate::graph::Node;
use crate::ops::range::Range;
use crate::pulse::pulsifier::{not_streamable, stream, Ctx, Pulsed};
use crate::pulse::{StreamInfo, StreamPosition};
use crate::Result;

pub(super) fn register(r: &mut Rules) {
    r.add::<Range>(pulsify);
}

/// Positions along the streaming axis come from a stream-position source.
fn pulsify(cx: &mut Ctx, node: &Node, op: &Range, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
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
