//! [`Format`]: which writer to use, parsed from a command-line word.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// Output format of a transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// One line of text per file.
    Text,
    /// One JSON object per line per file, with word timings.
    Jsonl,
    /// SubRip subtitles.
    Srt,
    /// WebVTT subtitles.
    Vtt,
}

/// A format name that is not one of `text`, `jsonl`, `srt`, `vtt`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown output format {0:?} (expected text, jsonl, srt or vtt)")]
pub struct ParseFormatError(pub String);

impl Format {
    /// Every format, in documentation order.
    pub const ALL: [Format; 4] = [Format::Text, Format::Jsonl, Format::Srt, Format::Vtt];

    /// The canonical lowercase name (what `Display` prints and `FromStr` reads).
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Jsonl => "jsonl",
            Format::Srt => "srt",
            Format::Vtt => "vtt",
        }
    }

    /// Conventional file extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Text => "txt",
            Format::Jsonl => "jsonl",
            Format::Srt => "srt",
            Format::Vtt => "vtt",
        }
    }

    /// Other accepted spellings.
    fn aliases(self) -> &'static [&'static str] {
        match self {
            Format::Text => &["txt"],
            Format::Jsonl => &["json", "ndjson"],
            Format::Srt => &[],
            Format::Vtt => &["webvtt"],
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = ParseFormatError;

    /// Case-insensitive; accepts the names and the aliases (`txt`, `json`, `webvtt`...).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Format::ALL
            .into_iter()
            .find(|f| f.name() == lower || f.aliases().contains(&lower.as_str()))
            .ok_or_else(|| ParseFormatError(s.to_string()))
    }
}

/// Lets `#[arg(value_enum)]` list the formats in `--help`.
impl clap::ValueEnum for Format {
    fn value_variants<'a>() -> &'a [Self] {
        &Format::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()).aliases(self.aliases().iter().copied()))
    }
}
