//! The pulse rule of [`ChunkedAttention`]: keys and values keep the frames
//! a chunk looks back on through a Delay, and queries wait in another for
//! the frames their chunk looks ahead to (no longer than the pulse's phase
//! needs: see [`PulsedChunkedAttention::lag_for`]).

use std::sync::Arc;

use super::Rules;
use crate::graph::{Node, OutletId};
use crate::ops::chunked_attention::ChunkedAttention;
use crate::pulse::pulsifier::{not_streamable, stream, Ctx, Pulsed};
use crate::pulse::{PulsedChunkedAttention, StreamInfo};
use crate::Result;

pub(super) fn register(r: &mut Rules) {
    r.add::<ChunkedAttention>(pulsify);
}

fn pulsify(
    cx: &mut Ctx,
    node: &Node,
    op: &ChunkedAttention,
    ins: &[Pulsed],
) -> Result<Option<Vec<Pulsed>>> {
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
    let pulsed = PulsedChunkedAttention {
        attn: op.clone(),
        pulse: s.pulse,
        delay: s.delay,
        lag: PulsedChunkedAttention::lag_for(op, s.pulse, s.delay),
        len: node.facts[0].shape[time],
    };
    let o = pulsed.overlap();
    let q = cx.delay(&format!("{}.q", node.name), &ins[0], pulsed.lag, 0)?;
    let k = cx.delay(&format!("{}.k", node.name), &ins[1], 0, o)?;
    let v = cx.delay(&format!("{}.v", node.name), &ins[2], 0, o)?;
    let inputs: Vec<OutletId> = vec![q.0, k.0, v.0];
    let out = Some(StreamInfo {
        len: node.facts[0].shape[time],
        overlap: 0,
        delay: s.delay + pulsed.lag,
        ..s
    });
    cx.add(&node.name, Arc::new(pulsed), &inputs, &[out])
        .map(Some)
}
