//! The pulse rules of right-context copies: [`RightCopies`] waits (a lag,
//! as a chunked attention's look-ahead) until the frames a chunk copies
//! have arrived, with the rows before the pulse from a Delay;
//! [`CopiesAttention`] is then a chunked attention with no look-ahead over
//! rows of a frame and its copy slot.

use std::sync::Arc;

use super::Rules;
use crate::graph::{Node, OutletId};
use crate::ops::chunked_attention::ChunkedAttention;
use crate::ops::copies_attention::CopiesAttention;
use crate::ops::right_copies::RightCopies;
use crate::pulse::pulsifier::{not_streamable, stream, Ctx, Pulsed};
use crate::pulse::{PulsedChunkedAttention, PulsedCopiesAttention, PulsedRightCopies, StreamInfo};
use crate::Result;

pub(super) fn register(r: &mut Rules) {
    r.add::<RightCopies>(pulsify_copies);
    r.add::<CopiesAttention>(pulsify_attention);
}

/// Refuses inputs that do not stream along `axis`.
fn along(node: &Node, ins: &[Pulsed], axis: usize) -> Result<()> {
    if ins
        .iter()
        .any(|p| p.1.stream.is_none_or(|s| s.axis != axis))
    {
        return Err(not_streamable(
            node,
            format!("inputs must stream along their time axis {axis}"),
        ));
    }
    Ok(())
}

fn pulsify_copies(
    cx: &mut Ctx,
    node: &Node,
    op: &RightCopies,
    ins: &[Pulsed],
) -> Result<Option<Vec<Pulsed>>> {
    let time = ins[0].1.fact.rank().saturating_sub(2);
    along(node, ins, time)?;
    let s = stream(&node.name, &ins[0])?;
    // a chunk's copies reach as far as a look-ahead of `right` past it
    let reach = ChunkedAttention {
        heads: 1,
        chunk: op.chunk,
        left: 0,
        right: op.right,
    };
    let lag = PulsedChunkedAttention::lag_for(&reach, s.pulse, s.delay);
    let len = node.facts[0].shape[time];
    let pulsed = PulsedRightCopies {
        op: *op,
        pulse: s.pulse,
        delay: s.delay,
        lag,
        len,
    };
    let x = cx.delay(&format!("{}.x", node.name), &ins[0], 0, lag)?;
    let out = Some(StreamInfo {
        len,
        overlap: 0,
        delay: s.delay + lag,
        ..s
    });
    cx.add(&node.name, Arc::new(pulsed), &[x.0], &[out])
        .map(Some)
}

fn pulsify_attention(
    cx: &mut Ctx,
    node: &Node,
    op: &CopiesAttention,
    ins: &[Pulsed],
) -> Result<Option<Vec<Pulsed>>> {
    let time = ins[0].1.fact.rank().saturating_sub(3);
    along(node, ins, time)?;
    let ins = cx.align(&node.name, ins)?;
    let s = stream(&node.name, &ins[0])?;
    let len = node.facts[0].shape[time];
    let pulsed = PulsedCopiesAttention {
        attn: op.clone(),
        pulse: s.pulse,
        delay: s.delay,
        lag: PulsedCopiesAttention::lag_for(op, s.pulse, s.delay),
        len,
    };
    let o = pulsed.overlap();
    let q = cx.delay(&format!("{}.q", node.name), &ins[0], pulsed.lag, 0)?;
    let k = cx.delay(&format!("{}.k", node.name), &ins[1], 0, o)?;
    let v = cx.delay(&format!("{}.v", node.name), &ins[2], 0, o)?;
    let inputs: Vec<OutletId> = vec![q.0, k.0, v.0];
    let out = Some(StreamInfo {
        len,
        overlap: 0,
        delay: s.delay + pulsed.lag,
        ..s
    });
    cx.add(&node.name, Arc::new(pulsed), &inputs, &[out])
        .map(Some)
}
