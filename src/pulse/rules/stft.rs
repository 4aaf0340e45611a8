//! The pulse rule of [`Stft`]: a windowed op along the stream.

use super::window::{pulsify_window, Window};
use super::Rules;
use crate::graph::Node;
use crate::ops::stft::Stft;
use crate::pulse::pulsifier::{not_streamable, stream, Ctx, Pulsed};
use crate::Result;

pub(super) fn register(r: &mut Rules) {
    r.add::<Stft>(pulsify);
}

/// STFT frames: Delay for the frame overlap; centre (reflect) padding would
/// need samples from the future, so only `center = false` streams.
fn pulsify(cx: &mut Ctx, node: &Node, op: &Stft, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    if op.center() {
        return Err(not_streamable(
            node,
            "centre (reflect) padding reads samples from the future; pad with a constant Pad before an Stft with center = false".into(),
        ));
    }
    let s = stream(&node.name, &ins[0])?;
    let rank = ins[0].1.fact.rank();
    if s.axis + 1 != rank {
        return Err(not_streamable(
            node,
            format!(
                "the signal must stream along its last axis, not axis {}",
                s.axis
            ),
        ));
    }
    let w = Window {
        extent: op.n_fft(),
        stride: op.hop(),
        pad_before: 0,
        pad_after: 0,
        out_axis: rank - 1,
    };
    pulsify_window(cx, node, ins, w, node.op.clone()).map(Some)
}
