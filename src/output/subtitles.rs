//! Subtitle cues (words grouped by length and duration) and the SRT / WebVTT
//! writers.

use std::io::{self, Write};

use crate::decode::Word;

/// One subtitle: a few consecutive words on screen together.
#[derive(Debug, Clone, PartialEq)]
pub struct Cue {
    /// Start of the first word, in seconds.
    pub start_s: f64,
    /// End of the last word, in seconds.
    pub end_s: f64,
    /// The words joined by spaces.
    pub text: String,
}

/// Groups `words` (in time order) into cues: a word joins the current cue
/// unless that would make its text longer than `max_chars` characters or its
/// span (first start to last end) longer than `max_s` seconds. A word longer
/// than either limit on its own gets a cue of its own.
pub fn cues(words: &[Word], max_chars: usize, max_s: f64) -> Vec<Cue> {
    let mut out: Vec<Cue> = Vec::new();
    let mut cur: Option<(Cue, usize)> = None;
    for w in words {
        let wlen = w.text.chars().count();
        if let Some((cue, len)) = &mut cur {
            if *len + 1 + wlen <= max_chars && w.end_s - cue.start_s <= max_s {
                cue.text.push(' ');
                cue.text.push_str(&w.text);
                cue.end_s = cue.end_s.max(w.end_s);
                *len += 1 + wlen;
                continue;
            }
        }
        if let Some((cue, _)) = cur.take() {
            out.push(cue);
        }
        cur = Some((
            Cue {
                start_s: w.start_s,
                end_s: w.end_s,
                text: w.text.clone(),
            },
            wlen,
        ));
    }
    if let Some((cue, _)) = cur {
        out.push(cue);
    }
    out
}

/// `HH:MM:SS<sep>mmm`, rounded to the millisecond; negative times print as
/// zero and hours grow past two digits when needed. SRT uses `,`, VTT `.`.
pub fn format_timestamp(seconds: f64, sep: char) -> String {
    let ms = if seconds.is_finite() && seconds > 0.0 {
        (seconds * 1000.0).round() as u64
    } else {
        0
    };
    let (h, rem) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rem) = (rem / 60_000, rem % 60_000);
    let (s, ms) = (rem / 1000, rem % 1000);
    format!("{h:02}:{m:02}:{s:02}{sep}{ms:03}")
}

/// Numbered SRT cues, each followed by a blank line.
pub(super) fn write_srt(w: &mut impl Write, cues: &[Cue]) -> io::Result<()> {
    for (i, c) in cues.iter().enumerate() {
        writeln!(
            w,
            "{}\n{} --> {}\n{}\n",
            i + 1,
            format_timestamp(c.start_s, ','),
            format_timestamp(c.end_s, ','),
            c.text
        )?;
    }
    Ok(())
}

/// The `WEBVTT` header, then the cues, each followed by a blank line.
pub(super) fn write_vtt(w: &mut impl Write, cues: &[Cue]) -> io::Result<()> {
    writeln!(w, "WEBVTT\n")?;
    for c in cues {
        writeln!(
            w,
            "{} --> {}\n{}\n",
            format_timestamp(c.start_s, '.'),
            format_timestamp(c.end_s, '.'),
            c.text
        )?;
    }
    Ok(())
}
