//! A recording's transcript as every model family gives it: the text and
//! its words (times, confidence), plus the language and segments of the
//! families that have them.

use serde_json::{json, Map, Value};

use crate::decode::{Transcript, Word};

/// What [`super::Transcriber`] makes of a recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcription {
    /// The text, its words with times and confidence, the audio's length.
    pub transcript: Transcript,
    /// The spoken language, given or detected (Whisper).
    pub language: Option<String>,
    /// The decoder's segments in time order (Whisper; empty otherwise).
    pub segments: Vec<Segment>,
}

/// A stretch of text the decoder gave at once, with how sure it was.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// Seconds in the recording.
    pub start_s: f64,
    pub end_s: f64,
    /// As the decoder spells it (leading space included).
    pub text: String,
    pub avg_logprob: f64,
    pub no_speech_prob: f64,
    pub compression_ratio: f64,
    /// Of the decoding that was kept (0 unless it fell back to sampling).
    pub temperature: f64,
}

impl Transcription {
    /// A transcript with no language or segments (the CTC families).
    pub fn of_transcript(transcript: Transcript) -> Transcription {
        Transcription {
            transcript,
            language: None,
            segments: Vec::new(),
        }
    }

    /// Whisper's segments: the text joined as faster-whisper joins it, the
    /// words where the segments have times.
    pub fn of_whisper(
        segments: &[crate::models::whisper::decode::Segment],
        duration_s: f64,
        language: &str,
    ) -> Transcription {
        let text: String = segments.iter().map(|s| s.text.as_str()).collect();
        let words = segments
            .iter()
            .flat_map(|s| s.words.iter().flatten())
            .map(|w| Word {
                text: w.word.trim().to_string(),
                start_s: w.start,
                end_s: w.end,
                confidence: w.probability as f32,
            })
            .collect();
        let segments = segments
            .iter()
            .map(|s| Segment {
                start_s: s.start,
                end_s: s.end,
                text: s.text.clone(),
                avg_logprob: s.avg_logprob,
                no_speech_prob: s.no_speech_prob,
                compression_ratio: s.compression_ratio,
                temperature: s.temperature,
            })
            .collect();
        Transcription {
            transcript: Transcript {
                text: text.trim().to_string(),
                words,
                duration_s,
            },
            language: Some(language.to_string()),
            segments,
        }
    }

    /// The language and segments as JSON-lines fields (none for a family
    /// without them).
    pub fn json_fields(&self) -> Map<String, Value> {
        let mut extra = Map::new();
        let Some(language) = &self.language else {
            return extra;
        };
        let segs: Vec<Value> = self
            .segments
            .iter()
            .map(|s| {
                json!({
                    "start": round3(s.start_s),
                    "end": round3(s.end_s),
                    "text": s.text.trim(),
                    "avg_logprob": round3(s.avg_logprob),
                    "no_speech_prob": round3(s.no_speech_prob),
                    "compression_ratio": round3(s.compression_ratio),
                    "temperature": s.temperature,
                })
            })
            .collect();
        extra.insert("language".into(), json!(language));
        extra.insert("segments".into(), Value::Array(segs));
        extra
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
