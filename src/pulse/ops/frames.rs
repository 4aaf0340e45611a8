//! Viewing a tensor as `[outer, frames, inner]` around its streaming axis, so
//! pulse ops move whole frames whatever the rank and dtype.

use crate::ops::{OpError, OpResult};

/// Sizes around an axis: `outer` blocks of `frames` frames of `inner` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameLayout {
    pub outer: usize,
    pub frames: usize,
    pub inner: usize,
}

impl FrameLayout {
    pub fn of(shape: &[usize], axis: usize) -> OpResult<FrameLayout> {
        if axis >= shape.len() {
            return Err(OpError::Param(format!(
                "stream axis {axis} out of range for shape {shape:?}"
            )));
        }
        Ok(FrameLayout {
            outer: shape[..axis].iter().product(),
            frames: shape[axis],
            inner: shape[axis + 1..].iter().product(),
        })
    }

    /// Element offset of frame `f` in block `o`.
    #[inline]
    pub fn at(&self, o: usize, f: usize) -> usize {
        (o * self.frames + f) * self.inner
    }
}

/// Checks that an op gets one input with exactly `pulse` frames on `axis`.
pub fn one_pulse_input(
    op: &str,
    inputs: &[&crate::ops::TypedFact],
    axis: usize,
    pulse: usize,
) -> OpResult<()> {
    crate::ops::checks::input_count(inputs, 1)?;
    crate::ops::checks::rank_at_least(inputs[0], 0, axis + 1)?;
    if inputs[0].shape[axis] != crate::ops::Dim::n(pulse as i64) {
        return Err(OpError::Shape(format!(
            "{op} expects pulse {pulse} on axis {axis}, got {}",
            inputs[0]
        )));
    }
    Ok(())
}
