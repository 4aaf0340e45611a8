//! The pulse rule of [`ChunkedAttention`]: keys and values keep the frames
//! a chunk looks back on through a Delay, and queries wait in another for
//! the frames their chunk looks ahead to (no longer than the pulse's phase
//! needs: see [`PulsedChunkedAttention::lag_for`]).

use std::sync::Arc;

use super::Rules;
use crate::graph::{Node, OutletId};
use crate::ops::chunked_attention::ChunkedAttention;
use crate::ops::{Dim, Op};
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
    pulsify_qkv(cx, node, ins, time, |s, len| {
        let pulsed = PulsedChunkedAttention {
            attn: op.clone(),
            pulse: s.pulse,
            delay: s.delay,
            lag: PulsedChunkedAttention::lag_for(op, s.pulse, s.delay),
            len,
        };
        (pulsed.lag, pulsed.overlap(), Arc::new(pulsed))
    })
}

/// A self-attention over `q, k, v` streaming along `time` (each chunked
/// attention's rule): `pulsed(stream, len)` gives the pulsed op with how
/// long its queries wait and how many past rows its keys and values carry.
pub(super) fn pulsify_qkv(
    cx: &mut Ctx,
    node: &Node,
    ins: &[Pulsed],
    time: usize,
    pulsed: impl FnOnce(StreamInfo, Dim) -> (usize, usize, Arc<dyn Op>),
) -> Result<Option<Vec<Pulsed>>> {
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
    let len = node.facts[0].shape[time];
    let (lag, overlap, op) = pulsed(s, len);
    let q = cx.delay(&format!("{}.q", node.name), &ins[0], lag, 0)?;
    let k = cx.delay(&format!("{}.k", node.name), &ins[1], 0, overlap)?;
    let v = cx.delay(&format!("{}.v", node.name), &ins[2], 0, overlap)?;
    let inputs: Vec<OutletId> = vec![q.0, k.0, v.0];
    let out = Some(StreamInfo {
        len,
        overlap: 0,
        delay: s.delay + lag,
        ..s
    });
    cx.add(&node.name, op, &inputs, &[out]).map(Some)
}
