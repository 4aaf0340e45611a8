//! The pulse rule of [`Concat`] on the streaming axis with constants: a
//! Delay and a [`PulsedSameAxisConcat`].

use std::sync::Arc;

use super::Rules;
use crate::graph::Node;
use crate::ops::concat::Concat;
use crate::ops::{checks, Tensor};
use crate::pulse::pulsifier::{not_streamable, stream, Ctx, Pulsed};
use crate::pulse::{PulsedSameAxisConcat, StreamInfo};
use crate::Result;

pub(super) fn register(r: &mut Rules) {
    r.add::<Concat>(pulsify);
}

/// Concatenation on the streaming axis with constants before and/or after
/// the one streaming input; the output follows the stream, never the constants.
fn pulsify(cx: &mut Ctx, node: &Node, op: &Concat, ins: &[Pulsed]) -> Result<Option<Vec<Pulsed>>> {
    let streaming: Vec<usize> = (0..ins.len())
        .filter(|&i| ins[i].1.stream.is_some())
        .collect();
    let &[at] = streaming.as_slice() else {
        if streaming.len() > 1 {
            let axes: Vec<usize> = streaming
                .iter()
                .filter_map(|&i| ins[i].1.stream.map(|s| s.axis))
                .collect();
            let axis = checks::axis(op.axis, ins[0].1.fact.rank())
                .map_err(|e| crate::Error::node(&node.name, "Concat", e))?;
            if axes.iter().all(|&a| a != axis) {
                return Ok(None); // along another axis: frame-local
            }
            return Err(not_streamable(
                node,
                "concatenates two streams along the streaming axis".into(),
            ));
        }
        return Ok(None);
    };
    let s = stream(&node.name, &ins[at])?;
    let axis = checks::axis(op.axis, ins[at].1.fact.rank())
        .map_err(|e| crate::Error::node(&node.name, "Concat", e))?;
    if axis != s.axis {
        return Ok(None);
    }
    let mut parts: [Vec<Tensor>; 2] = [Vec::new(), Vec::new()];
    for (i, p) in ins.iter().enumerate() {
        if i == at {
            continue;
        }
        let Some(v) = cx.const_value(p.0) else {
            return Err(not_streamable(
                node,
                format!("input {i} is neither the stream nor a constant"),
            ));
        };
        parts[usize::from(i > at)].push(v);
    }
    let join = |ts: &[Tensor]| -> Result<Option<Tensor>> {
        match ts {
            [] => Ok(None),
            [t] => Ok(Some(t.clone())),
            _ => {
                let refs: Vec<&Tensor> = ts.iter().collect();
                let out = crate::ops::eval_op(
                    &Concat {
                        axis: axis as isize,
                    },
                    &refs,
                )
                .map_err(|e| crate::Error::node(&node.name, "Concat", e))?;
                Ok(out.into_iter().next())
            }
        }
    };
    let (prefix, suffix) = (join(&parts[0])?, join(&parts[1])?);
    let c = prefix.as_ref().map_or(0, |p| p.shape()[axis]);
    // as for padding: after the shift by `c`, the output keeps the input's delay
    let x = cx.delay(&node.name, &ins[at], c, 0)?;
    let delay = s.delay;
    let pulsed = PulsedSameAxisConcat {
        axis,
        pulse: s.pulse,
        delay,
        prefix,
        suffix,
        input_len: s.len,
    };
    let out = StreamInfo {
        len: node.facts[0].shape[axis],
        delay,
        ..s
    };
    cx.add(&node.name, Arc::new(pulsed), &[x.0], &[Some(out)])
        .map(Some)
}
