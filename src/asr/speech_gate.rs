//! The speech gate in front of Whisper's text (issue 49): Whisper writes
//! words where nobody speaks ("You" on 5 s of digital silence), and its own
//! skip rule lets them through (tiny.en's no-speech probability is 0.95
//! there, but at -0.68 a token the decoding counts as likely). Silero VAD
//! hears none of that as speech: a recording in which it hears no speech
//! is not decoded, and a segment whose span holds none of its speech is
//! dropped. The gate never changes a kept segment's text.

use std::sync::Arc;

use crate::vad::{SegmentOptions, Segmenter, Vad, VadSession, SAMPLE_RATE};
use crate::whisper::decode::Segment;
use crate::Result;

/// Silero VAD over recordings, and where it hears speech.
#[derive(Clone)]
pub(super) struct SpeechGate {
    vad: Arc<Vad>,
}

impl SpeechGate {
    /// The gate over a loaded VAD.
    pub(super) fn new(vad: Vad) -> SpeechGate {
        SpeechGate { vad: Arc::new(vad) }
    }

    /// A listener for one recording, fed as its audio is read.
    pub(super) fn listen(&self) -> Result<Listener> {
        Ok(Listener {
            session: self.vad.session()?,
            probs: Vec::new(),
        })
    }

    /// Where `samples` (16 kHz mono, a whole recording) holds speech.
    pub(super) fn hear(&self, samples: &[f32]) -> Result<Heard> {
        let mut l = self.listen()?;
        l.push(samples)?;
        l.finish()
    }
}

/// One recording going through the VAD.
pub(super) struct Listener {
    session: VadSession,
    probs: Vec<f32>,
}

impl Listener {
    /// The recording's next samples (16 kHz mono).
    pub(super) fn push(&mut self, samples: &[f32]) -> Result<()> {
        self.probs.extend(self.session.push(samples)?);
        Ok(())
    }

    /// Where the recording holds speech.
    pub(super) fn finish(mut self) -> Result<Heard> {
        self.probs.extend(self.session.flush()?);
        let spans = Segmenter::segments(GATE_VAD, &self.probs, self.session.samples())
            .iter()
            .map(|s| s.seconds(SAMPLE_RATE))
            .collect();
        Ok(Heard { spans })
    }
}

/// The segmenter's settings for the gate: faster-whisper's `vad_filter`
/// defaults (threshold 0.5, 2 s of silence to end speech, 400 ms of
/// padding) but for the shortest speech, 250 ms (silero's own default), so
/// that a click or a beep over 0.5 for a chunk or two is no speech (the
/// non-speech set's highest chunk: 0.498, DTMF). Measured with tiny.en
/// (docs/notes/speech-gate.md): a lower threshold (0.2) or no shortest
/// speech gives no better WER on AMI or the padded set.
pub(super) const GATE_VAD: SegmentOptions = SegmentOptions {
    threshold: 0.5,
    neg_threshold: None,
    min_speech_ms: 250,
    min_silence_ms: 2000,
    speech_pad_ms: 400,
    sample_rate: SAMPLE_RATE,
    chunk: crate::vad::CHUNK,
};

/// Where a recording holds speech: `(start, end)` seconds, padded.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Heard {
    spans: Vec<(f64, f64)>,
}

impl Heard {
    /// No speech anywhere: nothing to decode.
    pub(super) fn is_silent(&self) -> bool {
        self.spans.is_empty()
    }

    /// Whether a segment from `start` to `end` (seconds) holds speech.
    /// Whisper's times are to 20 ms and the spans are padded, so any
    /// overlap counts.
    pub(super) fn keeps(&self, start: f64, end: f64) -> bool {
        self.spans.iter().any(|&(a, b)| start < b && a < end)
    }

    /// Whether the gate lets `segment` through.
    pub(super) fn keeps_segment(&self, segment: &Segment) -> bool {
        self.keeps(segment.start, segment.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heard(spans: &[(f64, f64)]) -> Heard {
        Heard {
            spans: spans.to_vec(),
        }
    }

    #[test]
    fn nothing_heard_keeps_nothing() {
        let h = heard(&[]);
        assert!(h.is_silent());
        assert!(!h.keeps(0.0, 30.0));
    }

    #[test]
    fn a_segment_is_kept_when_it_overlaps_speech() {
        let h = heard(&[(1.0, 2.5), (10.0, 12.0)]);
        assert!(!h.is_silent());
        assert!(h.keeps(0.0, 1.2)); // runs into the first span
        assert!(h.keeps(2.0, 9.0));
        assert!(h.keeps(11.0, 11.5)); // inside the second
        assert!(h.keeps(0.0, 30.0)); // a whole window without timestamps
                                     // between the spans, or after them: made up
        assert!(!h.keeps(3.0, 9.5));
        assert!(!h.keeps(12.0, 14.0)); // touching is not overlapping
        assert!(!h.keeps(0.0, 1.0));
    }
}
