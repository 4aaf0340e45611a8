//! The pulse rules of right-context copies: [`RightCopies`] waits (a lag,
//! as a chunked attention's look-ahead) until the frames a chunk copies
//! have arrived, with the rows before the pulse from a Delay;
//! [`CopiesAttention`] is then a chunked attention with no look-ahead over
//! rows of a frame and its copy slot.

use std::sync::Arc;

use super::chunked_attention::pulsify_qkv;
use super::Rules;
use crate::graph::Node;
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

fn pulsify_copies(
    cx: &mut Ctx,
    node: &Node,
    op: &RightCopies,
    ins: &[Pulsed],
) -> Result<Option<Vec<Pulsed>>> {
    let time = ins[0].1.fact.rank().saturating_sub(2);
    if ins[0].1.stream.is_none_or(|s| s.axis != time) {
        return Err(not_streamable(
            node,
            format!("the input must stream along its time axis {time}"),
        ));
    }
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
    pulsify_qkv(cx, node, ins, time, |s, len| {
        let pulsed = PulsedCopiesAttention {
            attn: op.clone(),
            pulse: s.pulse,
            delay: s.delay,
            lag: PulsedCopiesAttention::lag_for(op, s.pulse, s.delay),
            len,
        };
        (pulsed.lag, pulsed.overlap(), Arc::new(pulsed))
    })
}
