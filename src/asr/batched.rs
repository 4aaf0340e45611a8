//! Several files transcribed at once through one batched session: every
//! chunk step (one CUDA graph on a GPU) advances all of them, and each
//! stream's log-probs feed a decoder of its own.

use std::sync::Arc;

use super::recognizer::Lm;
use super::Decoding;
use crate::decode::{BeamSearch, FrameTiming, GreedyDecoder, Tokens, Transcript};
use crate::pulse::BatchedSession;
use crate::Result;

/// One stream's decoder, fed `[frames, vocab]` log-prob rows.
enum SlotDecoder {
    Greedy(GreedyDecoder),
    Beam {
        search: Box<BeamSearch>,
        frames: usize,
    },
}

/// `B` streams through a [`BatchedSession`], each decoded on its own. Feed
/// every stream that has not ended ([`Self::fill`], [`Self::end`]), then
/// [`Self::step`]; a stream's transcript is final once [`Self::done`].
pub struct BatchTranscriber {
    session: BatchedSession,
    tokens: Tokens,
    timing: FrameTiming,
    slots: Vec<SlotDecoder>,
    /// A stream's decoding error: its own, the other streams go on.
    errors: Vec<Option<String>>,
}

impl BatchTranscriber {
    pub(super) fn new(
        session: BatchedSession,
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
        Ok(BatchTranscriber {
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

    /// Samples per step and stream.
    pub fn pulse(&self) -> usize {
        self.session.pulse()
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

    /// Steps run since the last reset.
    pub fn steps(&self) -> u64 {
        self.session.steps()
    }

    /// Runs one step for every stream and decodes its new frames. An error
    /// of the step is everyone's; a stream's decoding error is kept for it
    /// alone ([`Self::error`]) and its later frames are ignored.
    pub fn step(&mut self) -> Result<()> {
        for c in self.session.step()? {
            if c.chunk.output != 0 || self.errors[c.stream].is_some() {
                continue;
            }
            if let Err(e) = self.decode(c) {
                let b = e.0;
                self.errors[b] = Some(e.1.to_string());
            }
        }
        Ok(())
    }

    fn decode(
        &mut self,
        c: crate::pulse::BatchChunk,
    ) -> std::result::Result<(), (usize, crate::Error)> {
        let b = c.stream;
        let rows = c.chunk.data.to_vec::<f32>().map_err(|e| (b, e.into()))?;
        let frames = c.chunk.data.shape()[0];
        match &mut self.slots[b] {
            SlotDecoder::Greedy(g) => {
                let (ids, lps) = argmax_rows(&rows, self.tokens.len());
                g.push_frames(c.chunk.start as usize, &ids, &lps)
                    .map_err(|e| (b, e.into()))?;
            }
            SlotDecoder::Beam { search, frames: n } => {
                search.push(&rows).map_err(|e| (b, e.into()))?;
                *n += frames;
            }
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
            Some(SlotDecoder::Beam { search, frames }) => match search.best() {
                Some(h) => Ok(h.transcript(&self.tokens, self.timing, *frames)?),
                None => Ok(GreedyDecoder::new(self.tokens.clone(), self.timing)?.finish()),
            },
            None => Err(crate::pulse::BatchError::NoSuchStream {
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
                SlotDecoder::Beam { search, frames } => {
                    search.reset();
                    *frames = 0;
                }
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
        Decoding::Beam { width } => SlotDecoder::Beam {
            search: Box::new(BeamSearch::new(
                tokens.len(),
                tokens.blank(),
                width,
                scorer,
            )?),
            frames: 0,
        },
    })
}

/// Per row of `vocab` log-probs, the first best id and its log-prob (what
/// the fused greedy head gives).
fn argmax_rows(rows: &[f32], vocab: usize) -> (Vec<i64>, Vec<f32>) {
    rows.chunks_exact(vocab.max(1))
        .map(|r| {
            let (i, v) = r
                .iter()
                .enumerate()
                .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
                    if v > best.1 {
                        (i, v)
                    } else {
                        best
                    }
                });
            (i as i64, v)
        })
        .unzip()
}
