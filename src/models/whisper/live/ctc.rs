//! A chunked Whisper checkpoint's CTC head on the live thread: partial
//! words as the streamed encoder gives each chunk's frames (no decoder
//! run), a final line when the head's blanks say the utterance ended; each
//! utterance then starts a window of its own.

use std::time::Instant;

use crate::live::{Endpointer, LiveEngine, LiveEvent, LiveOptions};
use crate::models::whisper::ctc::{CtcStream, FRAME_S};
use crate::Result;

/// The policy, also driven directly (`eval --live --ctc` feeds files
/// through it at the stream's own pace, as if compute were free).
pub struct CtcLive {
    stream: CtcStream,
    endpointer: Endpointer,
    last_partial: String,
    /// The current utterance's index in the stream.
    utterance: u64,
}

impl CtcLive {
    /// Over `stream`, an utterance ending after `end_silence_s` of blanks.
    pub fn new(stream: CtcStream, end_silence_s: f64) -> CtcLive {
        CtcLive {
            stream,
            endpointer: Endpointer::new((end_silence_s / FRAME_S).ceil() as usize),
            last_partial: String::new(),
            utterance: 0,
        }
    }

    pub(crate) fn with_options(stream: CtcStream, opts: &LiveOptions) -> CtcLive {
        CtcLive::new(stream, opts.end_silence_s)
    }

    /// Takes samples (16 kHz); the partial and final lines they caused.
    pub fn push_samples(&mut self, samples: &[f32]) -> Result<Vec<LiveEvent>> {
        let mut events = Vec::new();
        self.push(samples, &mut events)?;
        Ok(events)
    }

    /// The stream ended: the utterance in progress as a final line.
    pub fn end(&mut self) -> Result<Vec<LiveEvent>> {
        let mut events = Vec::new();
        self.finish(&mut events)?;
        Ok(events)
    }

    /// Sends the uncommitted words as partial text, or as final text at an
    /// end of speech (or of the stream).
    fn report(&mut self, end: bool, events: &mut Vec<LiveEvent>) -> Result<()> {
        let t = self.stream.partial()?;
        let ended = end
            || self
                .endpointer
                .utterance_ended(self.stream.frames(), self.stream.last_token_frame());
        let words = self.endpointer.uncommitted(&t.words).to_vec();
        if words.is_empty() {
            return Ok(());
        }
        let text = words
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let at = Instant::now();
        if ended {
            self.endpointer.commit(words.len());
            // the next utterance in a window of its own, and beam search
            // no longer revises what was given out as final
            self.stream.cut()?;
            self.last_partial.clear();
            let utterance = self.utterance;
            // the next line is the next utterance's
            self.utterance += 1;
            events.push(LiveEvent::Final {
                text,
                words,
                utterance,
                at,
            });
        } else if text != self.last_partial {
            self.last_partial.clone_from(&text);
            events.push(LiveEvent::Partial {
                text,
                words,
                stable: 0,
                utterance: self.utterance,
                at,
            });
        }
        Ok(())
    }
}

impl LiveEngine for CtcLive {
    fn max_push(&self) -> usize {
        // a chunk of 8 frames: text after every chunk
        2560
    }

    fn push(&mut self, samples: &[f32], events: &mut Vec<LiveEvent>) -> Result<()> {
        let before = self.stream.frames();
        self.stream.push(samples)?;
        if self.stream.frames() != before || self.endpointer.pending() {
            self.report(false, events)?;
        }
        Ok(())
    }

    fn finish(&mut self, events: &mut Vec<LiveEvent>) -> Result<()> {
        self.stream.cut()?;
        self.report(true, events)
    }
}
