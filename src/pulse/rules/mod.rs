//! The registry of pulse rules, keyed by the op's type.
//!
//! An op that is not frame-local along the stream (it reads past frames,
//! pads the stream, concatenates on it, ...) has a pulse rule that gives it
//! its pulsed form. Each rule is a small file of this folder, named after
//! the op (`attention.rs` for `LimitedAttention`, `conv.rs` for `Conv1d`,
//! ...), that registers it in its own `register`; [`pulsify`] looks the
//! node's op type up here. An op with no rule, or whose rule
//! answers `Ok(None)` for this node, gets the generic frame-local form
//! (`Ctx::frame_local`). One rule per op type: where one op has several
//! cases (a `Conv1d` streaming along its batch or its time axis), its one
//! rule tries them in the order it documents.

mod attention;
mod chunked_attention;
mod concat;
mod conv;
mod copies;
mod lstm;
mod pad;
mod range;
mod stft;
mod unfold;
mod window;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::OnceLock;

use super::pulsifier::{Ctx, Pulsed};
use crate::graph::Node;
use crate::ops::Op;
use crate::Result;

/// The pulse rule of op type `T`: the node's pulsed outputs, or `Ok(None)`
/// when this node is frame-local after all.
pub type Rule<T> = fn(&mut Ctx, &Node, &T, &[Pulsed]) -> Result<Option<Vec<Pulsed>>>;

type Erased = Box<dyn Fn(&mut Ctx, &Node, &[Pulsed]) -> Result<Option<Vec<Pulsed>>> + Send + Sync>;

/// Pulse rules by op type.
#[derive(Default)]
pub struct Rules(HashMap<TypeId, Erased>);

impl Rules {
    /// Registers `rule` for the ops of type `T`; a second rule for the same
    /// type is a programming error.
    pub fn add<T: Op>(&mut self, rule: Rule<T>) {
        let erased: Erased = Box::new(move |cx, node, ins| {
            let op = node
                .op
                .as_any()
                .downcast_ref::<T>()
                .expect("rules are looked up by the op's type");
            rule(cx, node, op, ins)
        });
        let twice = self.0.insert(TypeId::of::<T>(), erased).is_some();
        assert!(!twice, "two pulse rules for {}", std::any::type_name::<T>());
    }
}

/// Every registered rule: one line per file that has rules.
fn rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(|| {
        let mut r = Rules::default();
        attention::register(&mut r);
        chunked_attention::register(&mut r);
        concat::register(&mut r);
        conv::register(&mut r);
        copies::register(&mut r);
        lstm::register(&mut r);
        pad::register(&mut r);
        range::register(&mut r);
        stft::register(&mut r);
        unfold::register(&mut r);
        r
    })
}

/// Applies the rule registered for the node's op type, if any.
pub fn pulsify(cx: &mut Ctx, node: &Node, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    match rules().0.get(&<dyn Any>::type_id(node.op.as_any())) {
        Some(rule) => rule(cx, node, ins),
        None => Ok(None),
    }
}
