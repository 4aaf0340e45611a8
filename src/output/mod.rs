//! Writing transcripts: plain text, JSON lines, SRT and WebVTT subtitles.
//!
//! - Text: one line per file, the transcript (prefixed by `file: ` when
//!   [`WriteOptions::prefix_file_name`] is set, for runs over several files).
//! - JSONL: one object per file, keys in this order: `file`, `text`,
//!   `duration_s`, `words` (`word`, `start`, `end`, `confidence`), then the
//!   caller's extras (an extra with a standard key replaces that value).
//!   Times are seconds rounded to the millisecond, confidences to 4 decimals.
//! - SRT / VTT: one complete subtitle document per call (VTT starts with
//!   `WEBVTT`); words are grouped into cues of at most ~42 characters and
//!   5 seconds ([`cues`]).
//!
//! A failed file gets [`write_error_line`]: a `{"file","error"}` object in
//! JSONL, else a `file: error: message` line (meant for stderr or a log when
//! the output is a subtitle document).

mod format;
mod subtitles;

#[cfg(test)]
mod tests;

use std::io::{self, Write};

use serde_json::{Map, Value};

use crate::decode::Transcript;

pub use format::{Format, ParseFormatError};
pub use subtitles::{cues, format_timestamp, Cue};

/// Knobs of the writers; `Default` gives the documented behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteOptions {
    /// Text format: start each line with `file: ` (for several files).
    pub prefix_file_name: bool,
    /// Subtitle cues: at most this many characters (a longer single word gets its own cue).
    pub max_cue_chars: usize,
    /// Subtitle cues: at most this many seconds from the first word's start to the last word's end.
    pub max_cue_s: f64,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            prefix_file_name: false,
            max_cue_chars: 42,
            max_cue_s: 5.0,
        }
    }
}

/// Writes the transcript of `file_name` in `format` with default options.
pub fn write_transcript(
    w: &mut impl Write,
    format: Format,
    file_name: &str,
    t: &Transcript,
    extra: &Map<String, Value>,
) -> io::Result<()> {
    write_transcript_with(w, format, file_name, t, extra, &WriteOptions::default())
}

/// Writes the transcript of `file_name` in `format` with `opts`.
pub fn write_transcript_with(
    w: &mut impl Write,
    format: Format,
    file_name: &str,
    t: &Transcript,
    extra: &Map<String, Value>,
    opts: &WriteOptions,
) -> io::Result<()> {
    match format {
        Format::Text => {
            if opts.prefix_file_name {
                writeln!(w, "{file_name}: {}", t.text)
            } else {
                writeln!(w, "{}", t.text)
            }
        }
        Format::Jsonl => {
            let mut words = String::from("[");
            for (i, wd) in t.words.iter().enumerate() {
                if i > 0 {
                    words.push(',');
                }
                words.push_str(&render_object(&[
                    ("word", json(&wd.text)?),
                    ("start", json(&round_to(wd.start_s, 1e3))?),
                    ("end", json(&round_to(wd.end_s, 1e3))?),
                    ("confidence", json(&round_to(wd.confidence as f64, 1e4))?),
                ]));
            }
            words.push(']');
            let fields = vec![
                ("file".to_string(), json(file_name)?),
                ("text".to_string(), json(&t.text)?),
                (
                    "duration_s".to_string(),
                    json(&round_to(t.duration_s, 1e3))?,
                ),
                ("words".to_string(), words),
            ];
            write_json_line(w, fields, extra)
        }
        Format::Srt => subtitles::write_srt(w, &cues(&t.words, opts.max_cue_chars, opts.max_cue_s)),
        Format::Vtt => subtitles::write_vtt(w, &cues(&t.words, opts.max_cue_chars, opts.max_cue_s)),
    }
}

/// Reports a file that could not be transcribed.
pub fn write_error_line(
    w: &mut impl Write,
    format: Format,
    file: &str,
    error: &dyn std::fmt::Display,
) -> io::Result<()> {
    // Error messages are one line by contract; make sure of it.
    let msg = error.to_string().replace(['\n', '\r'], " ");
    match format {
        Format::Jsonl => write_json_line(
            w,
            vec![
                ("file".to_string(), json(file)?),
                ("error".to_string(), json(&msg)?),
            ],
            &Map::new(),
        ),
        Format::Text | Format::Srt | Format::Vtt => writeln!(w, "{file}: error: {msg}"),
    }
}

fn round_to(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

/// One JSON value as text (non-finite numbers become `null`).
fn json<T: serde::Serialize + ?Sized>(v: &T) -> io::Result<String> {
    serde_json::to_string(v).map_err(io::Error::other)
}

/// `{"k":v,...}` from pre-rendered values, keys in the given order
/// (serde_json's `Map` would sort them).
fn render_object<K: AsRef<str>>(fields: &[(K, String)]) -> String {
    let mut s = String::from("{");
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        // Keys are plain strings; serialising one cannot fail.
        s.push_str(&serde_json::to_string(k.as_ref()).unwrap_or_default());
        s.push(':');
        s.push_str(v);
    }
    s.push('}');
    s
}

/// Writes `fields` then `extra` as one JSON object on one line; an extra with
/// a key of `fields` replaces that value in place.
fn write_json_line(
    w: &mut impl Write,
    mut fields: Vec<(String, String)>,
    extra: &Map<String, Value>,
) -> io::Result<()> {
    for (k, v) in extra {
        let v = json(v)?;
        match fields.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = v,
            None => fields.push((k.clone(), v)),
        }
    }
    let mut line = render_object(&fields);
    line.push('\n');
    w.write_all(line.as_bytes())
}
