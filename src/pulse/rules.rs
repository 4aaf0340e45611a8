//! Dedicated pulse rules for ops that are not frame-local along the stream:
//! each returns `Ok(None)` when it does not apply to the node.

use std::sync::Arc;

use super::pulsifier::{not_streamable, stream, Ctx, Pulsed};
use super::PulsedLimitedAttention;
use crate::graph::{Node, OutletId};
use crate::ops::limited_attention::LimitedAttention;
use crate::Result;

type Rule = fn(&mut Ctx, &Node, &[Pulsed]) -> Result<Option<Vec<Pulsed>>>;

const RULES: &[Rule] = &[limited_attention];

/// Keys and values keep `left_context` past frames through a Delay; the
/// pulsed op masks positions before the stream start.
fn limited_attention(cx: &mut Ctx, node: &Node, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    let Some(op) = node.op.as_any().downcast_ref::<LimitedAttention>() else { return Ok(None) };
    if ins.iter().any(|p| p.1.stream.is_none_or(|s| s.axis != 0)) {
        return Err(not_streamable(node, "q, k and v must all stream along axis 0".into()));
    }
    let ins = cx.align(&node.name, ins)?;
    let s = stream(&node.name, &ins[0])?;
    let k = cx.delay(&format!("{}.k", node.name), &ins[1], 0, op.left_context)?;
    let v = cx.delay(&format!("{}.v", node.name), &ins[2], 0, op.left_context)?;
    let pulsed = PulsedLimitedAttention { attn: op.clone(), pulse: s.pulse, delay: s.delay };
    let inputs: Vec<OutletId> = vec![ins[0].0, k.0, v.0];
    let out = Some(super::StreamInfo { len: node.facts[0].shape[0], overlap: 0, ..s });
    cx.add(&node.name, Arc::new(pulsed), &inputs, &[out]).map(Some)
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
