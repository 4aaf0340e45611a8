//! A transcription as `POST /v1/audio/transcriptions` answers it:
//! `response_format` json, text, srt, vtt or verbose_json, or (with
//! `stream=true`) server-sent `transcript.text.delta` / `.done` events.

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use crate::asr::Transcription;
use crate::output::{cues, write_transcript, Format, WriteOptions};

/// What the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFormat {
    Json,
    Text,
    Srt,
    Vtt,
    VerboseJson,
}

impl ResponseFormat {
    /// OpenAI's names; `None` for any other.
    pub fn parse(s: &str) -> Option<ResponseFormat> {
        Some(match s {
            "json" => ResponseFormat::Json,
            "text" => ResponseFormat::Text,
            "srt" => ResponseFormat::Srt,
            "vtt" => ResponseFormat::Vtt,
            "verbose_json" => ResponseFormat::VerboseJson,
            _ => return None,
        })
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `usage` as OpenAI gives it for models billed by the second.
fn usage(t: &Transcription) -> Value {
    json!({"type": "duration", "seconds": round3(t.transcript.duration_s)})
}

/// The response body in `format`.
pub fn render(t: &Transcription, format: ResponseFormat) -> Response {
    let text_body = |format: Format, mime: &'static str| {
        let mut out = Vec::new();
        // writing to a Vec cannot fail
        let _ = write_transcript(&mut out, format, "", &t.transcript, &Map::new());
        ([(CONTENT_TYPE, mime)], out).into_response()
    };
    match format {
        ResponseFormat::Json => {
            axum::Json(json!({"text": t.transcript.text, "usage": usage(t)})).into_response()
        }
        ResponseFormat::Text => text_body(Format::Text, "text/plain; charset=utf-8"),
        ResponseFormat::Srt => text_body(Format::Srt, "text/plain; charset=utf-8"),
        ResponseFormat::Vtt => text_body(Format::Vtt, "text/vtt; charset=utf-8"),
        ResponseFormat::VerboseJson => axum::Json(verbose(t)).into_response(),
    }
}

/// verbose_json: the text, language, duration, segments and words. A
/// family without decoder segments (CTC) gets one segment per subtitle
/// cue, with the mean log confidence of its words as `avg_logprob`.
pub fn verbose(t: &Transcription) -> Value {
    let words: Vec<Value> = t
        .transcript
        .words
        .iter()
        .map(|w| {
            json!({
                "word": w.text,
                "start": round3(w.start_s),
                "end": round3(w.end_s),
                "probability": (w.confidence as f64 * 1e4).round() / 1e4,
            })
        })
        .collect();
    let segments: Vec<Value> = if t.segments.is_empty() {
        let o = WriteOptions::default();
        let mut from = 0;
        cues(&t.transcript.words, o.max_cue_chars, o.max_cue_s)
            .into_iter()
            .enumerate()
            .map(|(id, c)| {
                let all = &t.transcript.words;
                let n = c.text.split(' ').count();
                let ws = all.get(from..(from + n).min(all.len())).unwrap_or(&[]);
                from += n;
                let logp = ws
                    .iter()
                    .map(|w| (w.confidence.max(1e-6) as f64).ln())
                    .sum::<f64>()
                    / ws.len().max(1) as f64;
                segment(id, c.start_s, c.end_s, &c.text, round3(logp), 0.0, 0.0, 0.0)
            })
            .collect()
    } else {
        t.segments
            .iter()
            .enumerate()
            .map(|(id, s)| {
                segment(
                    id,
                    s.start_s,
                    s.end_s,
                    &s.text,
                    round3(s.avg_logprob),
                    round3(s.compression_ratio),
                    round3(s.no_speech_prob),
                    s.temperature,
                )
            })
            .collect()
    };
    json!({
        "task": "transcribe",
        "language": t.language.as_deref().unwrap_or("en"),
        "duration": round3(t.transcript.duration_s),
        "text": t.transcript.text,
        "segments": segments,
        "words": words,
        "usage": usage(t),
    })
}

#[allow(clippy::too_many_arguments)]
fn segment(
    id: usize,
    start: f64,
    end: f64,
    text: &str,
    avg_logprob: f64,
    compression_ratio: f64,
    no_speech_prob: f64,
    temperature: f64,
) -> Value {
    json!({
        "id": id,
        "seek": 0,
        "start": round3(start),
        "end": round3(end),
        "text": text,
        "tokens": [],
        "temperature": temperature,
        "avg_logprob": avg_logprob,
        "compression_ratio": compression_ratio,
        "no_speech_prob": no_speech_prob,
    })
}

/// `stream=true`: one `transcript.text.delta` per word of the text (the
/// deltas joined are the text exactly), then `transcript.text.done`.
pub fn sse(t: &Transcription) -> Response {
    let mut body = String::new();
    let mut event = |v: Value| {
        body.push_str("data: ");
        body.push_str(&v.to_string());
        body.push_str("\n\n");
    };
    for piece in t.transcript.text.split_inclusive(' ') {
        event(json!({"type": "transcript.text.delta", "delta": piece, "logprobs": null}));
    }
    event(json!({
        "type": "transcript.text.done",
        "text": t.transcript.text,
        "logprobs": null,
        "usage": usage(t),
    }));
    (
        [
            (CONTENT_TYPE, "text/event-stream"),
            (axum::http::header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
