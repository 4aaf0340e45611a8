//! Decoded text with word timings and confidences.
//!
//! Choices, shared by the greedy and beam decoders:
//! - A token's *span* is the run of frames in which the (best) alignment
//!   emits it: its first frame up to its last repeated frame; blank frames
//!   belong to no token.
//! - Words are split at `<sp>` tokens (leading, trailing and repeated spaces
//!   make no empty words); `text` is the words joined by one space.
//! - A word starts at the first frame of its first token and ends at the last
//!   frame of its last token + 1; seconds = `offset_s + frame * frame_duration_s`.
//! - A word's confidence is `exp(mean log-prob)` over the frames of its
//!   tokens' spans (the geometric mean of their probabilities), in [0, 1].

use super::{DecodeError, Tokens};

/// How frame indices map to seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameTiming {
    /// Seconds per output frame (0.04 for the shipped model).
    pub frame_duration_s: f64,
    /// Seconds added to every time (where frame 0 sits in the audio).
    pub offset_s: f64,
}

impl FrameTiming {
    /// Frames of `frame_duration_s` seconds, starting at 0 s.
    pub fn new(frame_duration_s: f64) -> Self {
        FrameTiming {
            frame_duration_s,
            offset_s: 0.0,
        }
    }

    /// The same timing shifted by `offset_s`.
    pub fn with_offset(self, offset_s: f64) -> Self {
        FrameTiming { offset_s, ..self }
    }

    /// Seconds at the start of `frame`.
    pub fn seconds(&self, frame: usize) -> f64 {
        self.offset_s + frame as f64 * self.frame_duration_s
    }

    pub(crate) fn check(&self) -> Result<(), DecodeError> {
        let ok = self.frame_duration_s.is_finite()
            && self.frame_duration_s > 0.0
            && self.offset_s.is_finite();
        if !ok {
            return Err(DecodeError::Param(format!(
                "frame duration {} s / offset {} s: need a positive duration and a finite offset",
                self.frame_duration_s, self.offset_s
            )));
        }
        Ok(())
    }
}

/// One emitted token and the frames that emitted it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenSpan {
    /// Token id (never the blank).
    pub id: usize,
    /// Frame where the token was emitted.
    pub first_frame: usize,
    /// Last frame of its run of repeats (`>= first_frame`).
    pub last_frame: usize,
    /// Sum of the log-probs of the token over its run.
    pub logp_sum: f64,
    /// Frames in the run (`last_frame - first_frame + 1`).
    pub n_frames: usize,
}

impl TokenSpan {
    pub(crate) fn new(id: usize, frame: usize, logp: f64) -> Self {
        TokenSpan {
            id,
            first_frame: frame,
            last_frame: frame,
            logp_sum: logp,
            n_frames: 1,
        }
    }

    pub(crate) fn extend(&mut self, frame: usize, logp: f64) {
        self.last_frame = frame;
        self.logp_sum += logp;
        self.n_frames += 1;
    }
}

/// One word with its time span and confidence.
#[derive(Debug, Clone, PartialEq)]
pub struct Word {
    /// The word's characters.
    pub text: String,
    /// Start time in seconds.
    pub start_s: f64,
    /// End time in seconds (exclusive).
    pub end_s: f64,
    /// `exp(mean log-prob)` of its frames, in [0, 1].
    pub confidence: f32,
}

/// A decoded utterance (or the part decoded so far).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Transcript {
    /// The words joined by single spaces.
    pub text: String,
    /// The words with timings.
    pub words: Vec<Word>,
    /// Seconds of audio the decoder has seen (frames x frame duration); callers
    /// that know the exact audio length may overwrite it.
    pub duration_s: f64,
}

impl Transcript {
    /// Builds the words of `spans` (in time order) over `n_frames` frames.
    pub fn from_spans(
        spans: &[TokenSpan],
        tokens: &Tokens,
        timing: FrameTiming,
        n_frames: usize,
    ) -> Result<Transcript, DecodeError> {
        struct Acc {
            text: String,
            first: usize,
            last: usize,
            logp: f64,
            n: usize,
        }
        let mut words = Vec::new();
        let mut cur: Option<Acc> = None;
        let close = |acc: Acc, words: &mut Vec<Word>| {
            let mean = if acc.n == 0 {
                f64::NEG_INFINITY
            } else {
                acc.logp / acc.n as f64
            };
            words.push(Word {
                text: acc.text,
                start_s: timing.seconds(acc.first),
                end_s: timing.seconds(acc.last + 1),
                confidence: (mean.exp() as f32).clamp(0.0, 1.0),
            });
        };
        for s in spans {
            let piece = tokens.piece(s.id).ok_or(DecodeError::TokenOutOfRange {
                id: s.id as i64,
                vocab: tokens.len(),
                frame: Some(s.first_frame),
            })?;
            if tokens.is_space(s.id) {
                if let Some(acc) = cur.take() {
                    close(acc, &mut words);
                }
                continue;
            }
            if piece.is_empty() {
                continue;
            }
            let acc = cur.get_or_insert_with(|| Acc {
                text: String::new(),
                first: s.first_frame,
                last: s.last_frame,
                logp: 0.0,
                n: 0,
            });
            acc.text.push_str(piece);
            acc.first = acc.first.min(s.first_frame);
            acc.last = acc.last.max(s.last_frame);
            acc.logp += s.logp_sum;
            acc.n += s.n_frames;
        }
        if let Some(acc) = cur.take() {
            close(acc, &mut words);
        }
        let text = words
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        Ok(Transcript {
            text,
            words,
            duration_s: n_frames as f64 * timing.frame_duration_s,
        })
    }
}
