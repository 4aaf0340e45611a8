//! The pulse rule of [`Unfold`]: a windowed op along the stream.

use std::sync::Arc;

use super::window::{pulsify_window, Window};
use super::Rules;
use crate::graph::Node;
use crate::pulse::pulsifier::{Ctx, Pulsed};
use crate::pulse::Unfold;
use crate::Result;

pub(super) fn register(r: &mut Rules) {
    r.add::<Unfold>(pulsify);
}

/// Unfold along the stream: a Delay of `size - step` samples of overlap
/// (zeros before the start are the padding), then unpadded windows.
fn pulsify(cx: &mut Ctx, node: &Node, op: &Unfold, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    let w = Window {
        extent: op.size,
        stride: op.step,
        pad_before: op.pad_before,
        pad_after: 0,
        out_axis: 0,
    };
    let valid = Unfold {
        pad_before: 0,
        ..*op
    };
    pulsify_window(cx, node, ins, w, Arc::new(valid)).map(Some)
}
