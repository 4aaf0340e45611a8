//! The streaming CTC conformer on the live thread: its partial words while
//! someone speaks, final words when the CTC blanks (and, with Silero VAD,
//! the VAD) say the utterance ended.

use std::time::Instant;

use crate::asr::{Recognizer, StreamTranscriber};
use crate::live::{Endpointer, LiveEngine, LiveEvent, LiveOptions};
use crate::vad::{SegmentOptions, Segmenter, VadSession};
use crate::Result;

/// The recogniser's stream plus its endpointing.
pub(crate) struct Conformer {
    stream: StreamTranscriber,
    endpointer: Endpointer,
    vad: Option<(VadSession, Segmenter)>,
    last_partial: String,
    /// The current utterance's index in the stream.
    utterance: u64,
}

impl Conformer {
    pub(crate) fn new(rec: &Recognizer, opts: &LiveOptions) -> Result<Conformer> {
        let endpointer =
            Endpointer::new((opts.end_silence_s / rec.frame_seconds()).ceil() as usize);
        let vad = match &opts.vad {
            Some(v) => Some((v.session()?, Segmenter::new(SegmentOptions::default()))),
            None => None,
        };
        Ok(Conformer {
            stream: rec.stream()?,
            endpointer,
            vad,
            last_partial: String::new(),
            utterance: 0,
        })
    }

    /// Sends the uncommitted words as partial text, or as final text when
    /// the endpointer sees the end of an utterance (or the stream ended).
    fn report(&mut self, end: bool, events: &mut Vec<LiveEvent>) {
        let t = self.stream.partial();
        let frames = self.stream.frames();
        let last_speech = self.stream.last_token_frame();
        let words = self.endpointer.uncommitted(&t.words).to_vec();
        let at = Instant::now();
        let vad_silent = self.vad.as_ref().is_none_or(|(_, seg)| !seg.in_speech());
        let ended = end || (vad_silent && self.endpointer.utterance_ended(frames, last_speech));
        if words.is_empty() {
            return;
        }
        let text = words
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let event = if ended {
            self.endpointer.commit(words.len());
            // beam search must not revise what was just given out as final
            if self.stream.cut() {
                self.endpointer.restart();
            }
            self.last_partial.clear();
            let utterance = self.utterance;
            // the next line is the next utterance's
            self.utterance += 1;
            LiveEvent::Final {
                text,
                words,
                utterance,
                at,
            }
        } else if text == self.last_partial {
            return; // nothing new to show
        } else {
            self.last_partial.clone_from(&text);
            LiveEvent::Partial {
                text,
                words,
                stable: 0,
                utterance: self.utterance,
                at,
            }
        };
        events.push(event);
    }
}

impl LiveEngine for Conformer {
    fn max_push(&self) -> usize {
        4096
    }

    fn push(&mut self, samples: &[f32], events: &mut Vec<LiveEvent>) -> Result<()> {
        if let Some((session, seg)) = &mut self.vad {
            for p in session.push(samples)? {
                seg.push(p);
            }
        }
        let changed = self.stream.push(samples)?;
        if changed || self.endpointer.pending() {
            self.report(false, events);
        }
        Ok(())
    }

    fn finish(&mut self, events: &mut Vec<LiveEvent>) -> Result<()> {
        self.stream.finish()?;
        self.report(true, events);
        Ok(())
    }
}
