//! A chunked Whisper checkpoint's CTC head on the live thread: partial
//! words as the streamed encoder gives each chunk's frames (no decoder
//! run), a final line when the head's blanks say the utterance ended; each
//! utterance then starts a window of its own.

use std::time::Instant;

use super::{Endpointer, LiveEngine, LiveEvent, LiveOptions};
use crate::whisper::ctc::CtcStream;
use crate::Result;

/// Whisper's encoder frame: 20 ms.
const FRAME_S: f64 = 0.02;

pub(super) struct CtcLive {
    stream: CtcStream,
    endpointer: Endpointer,
    last_partial: String,
}

impl CtcLive {
    pub(super) fn new(stream: CtcStream, opts: &LiveOptions) -> CtcLive {
        CtcLive {
            stream,
            endpointer: Endpointer::new((opts.end_silence_s / FRAME_S).ceil() as usize),
            last_partial: String::new(),
        }
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
            events.push(LiveEvent::Final { text, words, at });
        } else if text != self.last_partial {
            self.last_partial.clone_from(&text);
            events.push(LiveEvent::Partial {
                text,
                words,
                stable: 0,
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
