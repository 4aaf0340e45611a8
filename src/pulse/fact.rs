//! Pulsed facts: a typed fact whose streaming axis has a fixed pulse size.

use std::fmt;

use crate::ops::{Dim, TypedFact};

/// How a tensor streams: which axis, how many new frames each step brings,
/// how long the whole stream is, and how many warm-up frames come first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamInfo {
    /// The streaming axis.
    pub axis: usize,
    /// Frames per step on that axis.
    pub pulse: usize,
    /// Total frames of the whole stream, as a function of the input length `S`.
    pub len: Dim,
    /// Frames of warm-up before the first real frame: at step `n` the pulse
    /// holds logical frames `n*pulse - delay .. (n+1)*pulse - delay`.
    pub delay: usize,
    /// Past frames carried in front of the pulse (after a Delay with
    /// overlap): the axis then has `pulse + overlap` frames per step.
    pub overlap: usize,
}

impl StreamInfo {
    /// Frames on the streaming axis in one step's tensor.
    pub fn frames(&self) -> usize {
        self.pulse + self.overlap
    }

    /// The logical index of the first frame of step `n`.
    pub fn first_frame(&self, step: u64) -> i64 {
        step as i64 * self.pulse as i64 - self.delay as i64
    }
}

/// A concrete fact (the shape one step produces) plus its stream, if any.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PulsedFact {
    pub fact: TypedFact,
    pub stream: Option<StreamInfo>,
}

impl PulsedFact {
    /// A tensor that does not stream (weights, constants, LSTM state).
    pub fn fixed(fact: TypedFact) -> PulsedFact {
        PulsedFact { fact, stream: None }
    }
}

impl fmt::Display for PulsedFact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.fact)?;
        if let Some(s) = &self.stream {
            write!(
                f,
                " axis {} pulse {} len {} delay {}",
                s.axis, s.pulse, s.len, s.delay
            )?;
            if s.overlap > 0 {
                write!(f, " overlap {}", s.overlap)?;
            }
        }
        Ok(())
    }
}
