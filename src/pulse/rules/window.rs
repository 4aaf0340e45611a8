//! The pulse rule of windowed ops along the stream (convolutions, STFT
//! frames): a Delay gives each pulse the past frames its windows need, a
//! PulsePad puts padding zeros where the stream has none, and the op runs
//! unpadded ("valid") on the result.

use std::sync::Arc;

use crate::graph::{Node, OutletId};
use crate::ops::{Op, OpError};
use crate::pulse::pulsifier::{stream, Ctx, Pulsed};
use crate::pulse::{PulsePad, StreamInfo};
use crate::{Error, Result};

/// How a windowed op reads its streaming input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Frames one output reads: `dilation * (kernel - 1) + 1`.
    pub extent: usize,
    pub stride: usize,
    pub pad_before: usize,
    pub pad_after: usize,
    /// Streaming axis of the output.
    pub out_axis: usize,
}

/// Pulsifies a windowed op. `valid_op` is the op with its padding removed;
/// `ins[0]` is the streaming input, the others (weights) are fixed.
pub fn pulsify_window(
    cx: &mut Ctx,
    node: &Node,
    ins: &[Pulsed],
    w: Window,
    valid_op: Arc<dyn Op>,
) -> Result<Vec<Pulsed>> {
    let s = stream(&node.name, &ins[0])?;
    let bad = |why: String| Error::Node {
        node: node.name.clone(),
        op: node.op.name(),
        source: OpError::NotStreamable(why),
    };
    if ins[1..].iter().any(|p| p.1.stream.is_some()) {
        return Err(bad("only the first input may stream".into()));
    }
    if s.overlap > 0 {
        return Err(bad("input already carries overlap frames".into()));
    }
    if w.stride == 0 || w.extent == 0 {
        return Err(bad("zero stride or kernel".into()));
    }
    if s.pulse % w.stride != 0 {
        return Err(bad(format!(
            "pulse of {} frames is not a multiple of the stride {}: choose a pulse that is",
            s.pulse, w.stride
        )));
    }
    let overlap = w.extent.saturating_sub(w.stride);
    // smallest delay >= the input's that aligns windows on output frames
    // and leaves room for the start padding
    let min = s.delay.max(w.pad_before.saturating_sub(overlap));
    let mut delay = min;
    while (delay + overlap) < w.pad_before
        || !(delay + overlap - w.pad_before).is_multiple_of(w.stride)
    {
        delay += 1;
    }
    let mut x = ins[0].clone();
    // frames before the stream start (or after its end) must read as padding
    if (w.pad_before > 0 && s.delay > 0) || w.pad_after > 0 {
        let pad = PulsePad {
            axis: s.axis,
            pulse: s.pulse,
            delay: s.delay,
            begin: 0,
            end: if w.pad_after > 0 { Some(s.len) } else { None },
            value: 0.0,
        };
        let name = cx.unique(&format!("{}.pad", node.name));
        x = cx.add(&name, Arc::new(pad), &[x.0], &[Some(s)])?.remove(0);
    }
    let x = cx.delay(&node.name, &x, delay - s.delay, overlap)?;
    let out_delay = (delay + overlap - w.pad_before) / w.stride;
    let mut inputs: Vec<OutletId> = vec![x.0];
    inputs.extend(ins[1..].iter().map(|p| p.0));
    let len = *node.facts[0]
        .shape
        .get(w.out_axis)
        .ok_or_else(|| bad("output lost its streaming axis".into()))?;
    let out = StreamInfo {
        axis: w.out_axis,
        pulse: s.pulse / w.stride,
        len,
        delay: out_delay,
        overlap: 0,
    };
    cx.add(&node.name, valid_op, &inputs, &[Some(out)])
}
