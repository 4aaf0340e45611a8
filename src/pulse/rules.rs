//! Dedicated pulse rules for ops that are not frame-local along the stream:
//! each returns `Ok(None)` when it does not apply to the node.

use super::pulsifier::{Ctx, Pulsed};
use crate::graph::Node;
use crate::Result;

type Rule = fn(&mut Ctx, &Node, &[Pulsed]) -> Result<Option<Vec<Pulsed>>>;

const RULES: &[Rule] = &[];

/// Applies the first dedicated rule that takes the node.
pub fn pulsify(cx: &mut Ctx, node: &Node, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    for rule in RULES {
        if let Some(r) = rule(cx, node, ins)? {
            return Ok(Some(r));
        }
    }
    Ok(None)
}
