//! Several files transcribed at once through one batched session: every
//! chunk step (one CUDA graph on a GPU) advances all of them, and each
//! stream's log-probs feed a decoder of its own.

use std::sync::Arc;

use super::recognizer::Lm;
use super::Decoding;
use crate::decode::{BeamSearch, FrameTiming, GreedyDecoder, Tokens, Transcript};
use crate::pulse::MultiStreamSession;
use crate::Result;

/// One stream's decoder, fed `[frames, vocab]` log-prob rows.
enum SlotDecoder {
    Greedy(GreedyDecoder),
    Beam(Box<BeamSearch>),
}

/// `B` streams through a [`MultiStreamSession`], each decoded on its own. Feed
/// every stream that has not ended ([`Self::fill`], [`Self::end`]), then
/// [`Self::step`]; a stream's transcript is final once [`Self::done`].
pub struct MultiStreamTranscriber {
    session: MultiStreamSession,
    tokens: Tokens,
    timing: FrameTiming,
    slots: Vec<SlotDecoder>,
    /// A stream's decoding error: its own, the other streams go on.
    errors: Vec<Option<String>>,
}

impl MultiStreamTranscriber {
    pub(super) fn new(
        session: MultiStreamSession,
        tokens: Tokens,
        decoding: Decoding,
        lm: Option<Lm>,
        timing: FrameTiming,
    ) -> Result<Self> {
        let scorer = match (decoding, lm) {
            (Decoding::Beam { .. }, Some(lm)) => Some(lm.scorer(&tokens)?),
            _ => None,
        };
        let slots = (0..session.batch())
            .map(|_| slot_decoder(&tokens, decoding, scorer.clone(), timing))
            .collect::<Result<_>>()?;
        Ok(MultiStreamTranscriber {
            errors: vec![None; session.batch()],
            session,
            tokens,
            timing,
            slots,
        })
    }

    /// Streams per step.
    pub fn batch(&self) -> usize {
        self.session.batch()
    }

    /// Samples stream `b` takes before the next step.
    pub fn room(&self, b: usize) -> Result<usize> {
        self.session.room(b)
    }

    /// Copies what fits of `samples` into stream `b`'s pulse; how many it took.
    pub fn fill(&mut self, b: usize, samples: &[f32]) -> Result<usize> {
        self.session.fill(b, samples)
    }

    /// Stream `b` has no more audio.
    pub fn end(&mut self, b: usize) -> Result<()> {
        self.session.end(b)
    }

    /// Whether stream `b` ended and all its frames are decoded.
    pub fn done(&self, b: usize) -> bool {
        self.session.done(b)
    }

    /// Whether every stream is done.
    pub fn all_done(&self) -> bool {
        self.session.all_done()
    }

    /// Runs one step for every stream and decodes its new frames. An error
    /// of the step is everyone's; a stream's decoding error is kept for it
    /// alone ([`Self::error`]) and its later frames are ignored.
    pub fn step(&mut self) -> Result<()> {
        for c in self.session.step()? {
            let b = c.stream;
            if c.chunk.output != 0 || self.errors[b].is_some() {
                continue;
            }
            if let Err(e) = self.decode(b, c.chunk.start, &c.chunk.data) {
                self.errors[b] = Some(e.to_string());
            }
        }
        Ok(())
    }

    /// Feeds stream `b`'s decoder its new `[frames, vocab]` rows, which
    /// start at frame `start`.
    fn decode(&mut self, b: usize, start: u64, rows: &crate::ops::Tensor) -> Result<()> {
        let rows = rows.as_slice::<f32>()?;
        match &mut self.slots[b] {
            SlotDecoder::Greedy(g) => g.push_log_probs(start as usize, rows)?,
            SlotDecoder::Beam(search) => search.push(rows)?,
        }
        Ok(())
    }

    /// Stream `b`'s decoding error, if it had one.
    pub fn error(&self, b: usize) -> Option<&str> {
        self.errors.get(b)?.as_deref()
    }

    /// Stream `b`'s transcript: final once [`Self::done`], partial before.
    pub fn transcript(&self, b: usize) -> Result<Transcript> {
        match self.slots.get(b) {
            Some(SlotDecoder::Greedy(g)) => Ok(g.partial()),
            Some(SlotDecoder::Beam(search)) => match search.best() {
                Some(h) => Ok(h.transcript(&self.tokens, self.timing, search.frames())?),
                None => Ok(GreedyDecoder::new(self.tokens.clone(), self.timing)?.finish()),
            },
            None => Err(crate::pulse::MultiStreamError::NoSuchStream {
                stream: b,
                batch: self.batch(),
            }
            .into()),
        }
    }

    /// Back to fresh streams.
    pub fn reset(&mut self) {
        self.session.reset();
        self.errors.iter_mut().for_each(|e| *e = None);
        for s in &mut self.slots {
            match s {
                SlotDecoder::Greedy(g) => g.reset(),
                SlotDecoder::Beam(search) => search.reset(),
            }
        }
    }
}

fn slot_decoder(
    tokens: &Tokens,
    decoding: Decoding,
    scorer: Option<Arc<crate::decode::LmScorer>>,
    timing: FrameTiming,
) -> Result<SlotDecoder> {
    Ok(match decoding {
        Decoding::Greedy => SlotDecoder::Greedy(GreedyDecoder::new(tokens.clone(), timing)?),
        Decoding::Beam { width } => SlotDecoder::Beam(Box::new(BeamSearch::new(
            tokens.len(),
            tokens.blank(),
            width,
            scorer,
        )?)),
    })
}
