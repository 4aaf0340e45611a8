//! Streaming transcription: samples in as they arrive, partial text out.

use super::recognizer::Lm;
use super::Decoding;
use crate::decode::{BeamSearch, FrameTiming, GreedyDecoder, Tokens, Transcript};
use crate::pulse::StreamingSession;
use crate::Result;

/// Feeds samples through a [`StreamingSession`] and decodes as frames come out.
pub struct StreamTranscriber {
    session: StreamingSession,
    tokens: Tokens,
    decoding: Decoding,
    timing: FrameTiming,
    greedy: GreedyDecoder,
    /// With beam search: fed each chunk's rows as they come out.
    search: Option<BeamSearch>,
    /// `[frames, vocab]` log-probs, kept only for [`Self::finish_log_probs`].
    rows: Option<Vec<f32>>,
    frames: usize,
    /// Frames before the beam search's start (see [`Self::cut`]).
    cut_frame: usize,
}

impl StreamTranscriber {
    pub(super) fn new(
        session: StreamingSession,
        tokens: Tokens,
        decoding: Decoding,
        lm: Option<Lm>,
        timing: FrameTiming,
    ) -> Result<Self> {
        let greedy = GreedyDecoder::new(tokens.clone(), timing)?;
        let search = match decoding {
            Decoding::Greedy => None,
            Decoding::Beam { width } => {
                let scorer = lm.map(|lm| lm.scorer(&tokens)).transpose()?;
                Some(BeamSearch::new(
                    tokens.len(),
                    tokens.blank(),
                    width,
                    scorer,
                )?)
            }
        };
        Ok(StreamTranscriber {
            session,
            tokens,
            decoding,
            timing,
            greedy,
            search,
            rows: None,
            frames: 0,
            cut_frame: 0,
        })
    }

    /// Feeds samples; returns true when the decoded text may have changed.
    pub fn push(&mut self, samples: &[f32]) -> Result<bool> {
        let chunks = self.session.push(samples)?;
        self.take(chunks)
    }

    /// Flushes the tail of the stream and returns the final transcript.
    pub fn finish(&mut self) -> Result<Transcript> {
        let chunks = self.session.finish()?;
        self.take(chunks)?;
        match &self.search {
            None => Ok(self.greedy.partial()),
            Some(search) => Ok(match search.best() {
                Some(h) => h.transcript(&self.tokens, self.cut_timing(), search.frames())?,
                None => GreedyDecoder::new(self.tokens.clone(), self.timing)?.finish(),
            }),
        }
    }

    /// Keeps every frame's log-probs from now on, for [`Self::finish_log_probs`].
    pub(super) fn keep_log_probs(&mut self) {
        self.rows.get_or_insert_with(Vec::new);
    }

    /// Flushes the tail of the stream and returns every frame's log-probs
    /// (`[frames, vocab]`, row-major) instead of decoding them (beam-search
    /// recognisers only: greedy ones never see the rows).
    pub fn finish_log_probs(&mut self) -> Result<(Vec<f32>, usize)> {
        if self.decoding == Decoding::Greedy {
            return Err(crate::Error::Other(
                "log-probs need a recogniser opened for beam search".into(),
            ));
        }
        let chunks = self.session.finish()?;
        self.take(chunks)?;
        Ok((
            std::mem::take(&mut self.rows).unwrap_or_default(),
            std::mem::replace(&mut self.frames, 0),
        ))
    }

    /// The transcript so far: greedy, or beam search's best prefix now
    /// (which later frames may still revise, earlier words included; since
    /// the last [`Self::cut`]).
    pub fn partial(&self) -> Transcript {
        match (self.best(), &self.search) {
            (Some(h), Some(s)) => h
                .transcript(&self.tokens, self.cut_timing(), s.frames())
                .unwrap_or_else(|_| self.greedy.partial()),
            _ => self.greedy.partial(),
        }
    }

    /// Ends the words decided so far (an utterance's end, live): beam
    /// search starts afresh here, so earlier words are never revised again
    /// and later ones are timed from here on. Returns whether the
    /// transcript restarted (beam search); greedy words are final anyway.
    pub fn cut(&mut self) -> bool {
        match &mut self.search {
            Some(s) => {
                s.reset();
                self.cut_frame = self.frames;
                true
            }
            None => false,
        }
    }

    /// Timing of frames counted from the last cut.
    fn cut_timing(&self) -> FrameTiming {
        FrameTiming {
            offset_s: self.timing.offset_s + self.cut_frame as f64 * self.timing.frame_duration_s,
            ..self.timing
        }
    }

    /// Beam search's best hypothesis over the frames so far.
    fn best(&self) -> Option<crate::decode::Hypothesis> {
        self.search.as_ref()?.best()
    }

    /// Encoder frames decoded so far.
    pub fn frames(&self) -> usize {
        self.greedy.frames().max(self.frames)
    }

    /// The last encoder frame that emitted a letter (spaces do not count,
    /// the model may emit them in silence), if any.
    pub fn last_token_frame(&self) -> Option<usize> {
        let last = |spans: &[crate::decode::TokenSpan]| {
            spans
                .iter()
                .rev()
                .find(|s| !self.tokens.is_space(s.id))
                .map(|s| s.last_frame)
        };
        match self.best() {
            Some(h) => last(&h.spans).map(|f| f + self.cut_frame),
            None => last(self.greedy.spans()),
        }
    }

    /// Back to a fresh stream.
    pub fn reset(&mut self) {
        self.session.reset();
        self.greedy.reset();
        if let Some(s) = &mut self.search {
            s.reset();
        }
        if let Some(rows) = &mut self.rows {
            rows.clear();
        }
        self.frames = 0;
        self.cut_frame = 0;
    }

    /// The underlying session (delays, steps).
    pub fn session(&self) -> &StreamingSession {
        &self.session
    }

    fn take(&mut self, chunks: Vec<crate::pulse::Chunk>) -> Result<bool> {
        let mut changed = false;
        match self.decoding {
            Decoding::Greedy => {
                let ids: Vec<_> = chunks.iter().filter(|c| c.output == 0).collect();
                let lps: Vec<_> = chunks.iter().filter(|c| c.output == 1).collect();
                for (a, b) in ids.iter().zip(&lps) {
                    let (id, lp) = (a.data.to_vec::<i64>()?, b.data.to_vec::<f32>()?);
                    let before = self.greedy.spans().len();
                    self.greedy.push_frames(a.start as usize, &id, &lp)?;
                    changed |= self.greedy.spans().len() != before;
                }
            }
            Decoding::Beam { .. } => {
                for c in chunks.iter().filter(|c| c.output == 0) {
                    let rows = c.data.to_vec::<f32>()?;
                    if let Some(s) = &mut self.search {
                        s.push(&rows)?;
                    }
                    if let Some(kept) = &mut self.rows {
                        kept.extend_from_slice(&rows);
                    }
                    self.frames += c.data.shape()[0];
                    changed = true;
                }
            }
        }
        Ok(changed)
    }
}
