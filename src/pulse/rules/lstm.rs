//! The pulse rule of [`Lstm`] along its sequence: a [`PulsedLstm`] that
//! carries its state from pulse to pulse.

use std::sync::Arc;

use super::Rules;
use crate::graph::{Node, OutletId};
use crate::ops::lstm::Lstm;
use crate::pulse::pulsifier::{not_streamable, stream, Ctx, Pulsed};
use crate::pulse::{PulsedLstm, StreamInfo};
use crate::Result;

pub(super) fn register(r: &mut Rules) {
    r.add::<Lstm>(pulsify);
}

/// An LSTM whose sequence streams along its time axis runs pulse by pulse
/// with its state carried; its final-state outputs do not stream.
fn pulsify(cx: &mut Ctx, node: &Node, op: &Lstm, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    let s = stream(&node.name, &ins[0])?;
    if s.axis != 0 || s.overlap > 0 {
        return Err(not_streamable(
            node,
            "the sequence must stream along axis 0 without overlap".into(),
        ));
    }
    if ins[1..].iter().any(|p| p.1.stream.is_some()) {
        return Err(not_streamable(
            node,
            "weights and initial state must not stream".into(),
        ));
    }
    let pulsed = PulsedLstm {
        lstm: *op,
        delay: s.delay,
    };
    let inputs: Vec<OutletId> = ins.iter().map(|p| p.0).collect();
    let y = StreamInfo {
        len: node.facts[0].shape[0],
        ..s
    };
    cx.add(
        &node.name,
        Arc::new(pulsed),
        &inputs,
        &[Some(y), None, None],
    )
    .map(Some)
}
