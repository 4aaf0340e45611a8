//! [`GreedyDecoder`]: best-path CTC decoding fed frame by frame.

use super::{DecodeError, FrameTiming, TokenSpan, Tokens, Transcript};

/// Greedy (best-path) CTC decoder: takes each frame's best token and its
/// log-prob, merges repeats, drops blanks, and can report the transcript at
/// any point. Feeding frames in one call or many gives the same result.
///
/// Frame indices must increase; a skipped frame counts as a blank (it
/// separates repeats: `a`, gap, `a` is two letters).
///
/// ```
/// use pulsed::decode::{FrameTiming, GreedyDecoder, Tokens};
/// let tokens = Tokens::from_lines(["<blk>", "<sp>", "h", "i"])?;
/// let mut d = GreedyDecoder::new(tokens, FrameTiming::new(0.04))?;
/// d.push_frames(0, &[2, 2, 0, 3], &[-0.1, -0.2, -0.1, -0.3])?;
/// assert_eq!(d.finish().text, "hi");
/// # Ok::<(), pulsed::decode::DecodeError>(())
/// ```
#[derive(Debug, Clone)]
pub struct GreedyDecoder {
    tokens: Tokens,
    timing: FrameTiming,
    spans: Vec<TokenSpan>,
    /// Token of the previous frame (blank included), to merge repeats.
    prev: Option<usize>,
    /// Index of the last frame pushed.
    last_frame: Option<usize>,
}

impl GreedyDecoder {
    /// A decoder over `tokens` whose frames last `timing.frame_duration_s`.
    pub fn new(tokens: Tokens, timing: FrameTiming) -> Result<Self, DecodeError> {
        timing.check()?;
        Ok(GreedyDecoder {
            tokens,
            timing,
            spans: Vec::new(),
            prev: None,
            last_frame: None,
        })
    }

    fn check(
        &self,
        frame: usize,
        id: i64,
        logp: f32,
        last: Option<usize>,
    ) -> Result<usize, DecodeError> {
        if let Some(last) = last {
            if frame <= last {
                return Err(DecodeError::FrameOrder { frame, last });
            }
        }
        let vocab = self.tokens.len();
        let tok = usize::try_from(id).ok().filter(|&t| t < vocab).ok_or(
            DecodeError::TokenOutOfRange {
                id,
                vocab,
                frame: Some(frame),
            },
        )?;
        if logp.is_nan() || logp == f32::INFINITY {
            return Err(DecodeError::NonFinite {
                value: logp,
                frame,
                token: tok,
            });
        }
        Ok(tok)
    }

    /// Adds frame `frame` whose best token is `id` with log-prob `logp`.
    /// On error nothing changes.
    pub fn push(&mut self, frame: usize, id: i64, logp: f32) -> Result<(), DecodeError> {
        let tok = self.check(frame, id, logp, self.last_frame)?;
        self.apply(frame, tok, logp);
        Ok(())
    }

    /// Adds frames `first_frame..first_frame + ids.len()`; all are checked
    /// before any is applied, so on error nothing changes.
    pub fn push_frames(
        &mut self,
        first_frame: usize,
        ids: &[i64],
        logps: &[f32],
    ) -> Result<(), DecodeError> {
        if ids.len() != logps.len() {
            return Err(DecodeError::Shape(format!(
                "{} token ids but {} log-probs",
                ids.len(),
                logps.len()
            )));
        }
        let mut last = self.last_frame;
        for (i, (&id, &logp)) in ids.iter().zip(logps).enumerate() {
            let frame = first_frame.checked_add(i).ok_or_else(|| {
                DecodeError::Param(format!("frame index {first_frame} + {i} overflows"))
            })?;
            self.check(frame, id, logp, last)?;
            last = Some(frame);
        }
        for (i, (&id, &logp)) in ids.iter().zip(logps).enumerate() {
            // Checked above: in range and non-negative.
            self.apply(first_frame + i, id as usize, logp);
        }
        Ok(())
    }

    /// Adds frames `first_frame..` from `[frames, vocab]` log-prob rows: each
    /// frame's best token (the first on ties) and its log-prob, as the fused
    /// greedy head gives them. On error nothing changes.
    pub fn push_log_probs(&mut self, first_frame: usize, rows: &[f32]) -> Result<(), DecodeError> {
        let vocab = self.tokens.len();
        if vocab == 0 || !rows.len().is_multiple_of(vocab) {
            return Err(DecodeError::Shape(format!(
                "{} log-probs are not whole rows of {vocab}",
                rows.len()
            )));
        }
        let (ids, logps): (Vec<i64>, Vec<f32>) = rows
            .chunks_exact(vocab)
            .map(|row| {
                let (id, lp) =
                    row.iter()
                        .enumerate()
                        .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
                            if v > best.1 {
                                (i, v)
                            } else {
                                best
                            }
                        });
                (id as i64, lp)
            })
            .unzip();
        self.push_frames(first_frame, &ids, &logps)
    }

    fn apply(&mut self, frame: usize, tok: usize, logp: f32) {
        let contiguous = self.last_frame.map_or(frame == 0, |l| frame == l + 1);
        let prev = if contiguous { self.prev } else { None };
        if tok != self.tokens.blank() {
            match self.spans.last_mut() {
                Some(span) if prev == Some(tok) => span.extend(frame, logp as f64),
                _ => self.spans.push(TokenSpan::new(tok, frame, logp as f64)),
            }
        }
        self.prev = Some(tok);
        self.last_frame = Some(frame);
    }

    /// Frames seen so far (index of the last frame + 1).
    pub fn frames(&self) -> usize {
        self.last_frame.map_or(0, |f| f + 1)
    }

    /// The emitted tokens so far, with their frames.
    pub fn spans(&self) -> &[TokenSpan] {
        &self.spans
    }

    /// The transcript of the frames so far.
    pub fn partial(&self) -> Transcript {
        // Spans only hold ids checked against this token list.
        Transcript::from_spans(&self.spans, &self.tokens, self.timing, self.frames())
            .unwrap_or_default()
    }

    /// The final transcript.
    pub fn finish(self) -> Transcript {
        self.partial()
    }

    /// Forgets every frame, for a new utterance.
    pub fn reset(&mut self) {
        self.spans.clear();
        self.prev = None;
        self.last_frame = None;
    }
}
