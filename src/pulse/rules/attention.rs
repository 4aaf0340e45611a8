//! The pulse rule of [`LimitedAttention`]: its pulsed form
//! ([`PulsedLimitedAttention`]) reads keys and values through Delays.

use std::sync::Arc;

use super::Rules;
use crate::graph::{Node, OutletId};
use crate::ops::limited_attention::LimitedAttention;
use crate::pulse::pulsifier::{not_streamable, stream, Ctx, Pulsed};
use crate::pulse::{PulsedLimitedAttention, StreamInfo};
use crate::Result;

pub(super) fn register(r: &mut Rules) {
    r.add::<LimitedAttention>(pulsify);
}

/// Keys and values keep `left_context` past frames through a Delay; the
/// pulsed op masks positions before the stream start.
fn pulsify(
    cx: &mut Ctx,
    node: &Node,
    op: &LimitedAttention,
    ins: &[Pulsed],
) -> Result<Option<Vec<Pulsed>>> {
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
