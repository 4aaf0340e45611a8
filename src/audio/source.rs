//! [`Source`]: any input we read (a WAV, a compressed file, standard input),
//! as mono f32 frames at its own rate.

use std::fs::File;
use std::io::{BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::Path;

use symphonia::core::io::ReadOnlySource;

use super::coded::CodedSource;
use super::policy::Truncation;
use super::wav::WavSource;
use super::AudioError;

/// The path that means standard input.
pub const STDIN: &str = "-";

/// The name standard input has in messages.
const STDIN_NAME: &str = "<stdin>";

/// Bytes that tell a RIFF/WAVE stream from the rest.
const MAGIC_BYTES: u64 = 4;

pub(crate) type AnyRead = Box<dyn Read + Send + Sync>;

/// A file being read frame by frame.
pub(crate) enum Source<R: Read = AnyRead> {
    /// RIFF/WAVE through our reader (hound under it): identical samples to
    /// every earlier release.
    Wav(WavSource<R>),
    /// Everything else, through symphonia.
    Coded(Box<CodedSource>),
}

impl Source {
    /// Opens `path` (`-`: standard input), choosing the reader by its first
    /// bytes: RIFF goes to the WAV reader, so do `.wav` files whatever they
    /// hold (their errors say what is wrong with them as WAVs).
    pub(crate) fn open(path: &Path, truncation: Truncation) -> Result<Self, AudioError> {
        if path.as_os_str() == STDIN {
            return Self::open_stdin(truncation);
        }
        let name = path.display().to_string();
        let io = |source| AudioError::Io {
            path: name.clone(),
            source,
        };
        let mut file = File::open(path).map_err(io)?;
        let mut magic = Vec::new();
        (&mut file)
            .take(MAGIC_BYTES)
            .read_to_end(&mut magic)
            .map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        if is_wav(&magic, ext.as_deref()) {
            let reader: AnyRead = Box::new(BufReader::new(file));
            return Ok(Source::Wav(
                WavSource::open(reader, &name)?.with_truncation(truncation),
            ));
        }
        let coded = CodedSource::open(Box::new(file), ext.as_deref(), &name)?;
        Ok(Source::Coded(Box::new(coded.with_truncation(truncation))))
    }

    /// A whole file held in memory, chosen between the readers as [`Self::open`]
    /// chooses; `ext` is the file's extension, if any.
    pub(crate) fn from_bytes(
        bytes: Vec<u8>,
        ext: Option<&str>,
        name: &str,
        truncation: Truncation,
    ) -> Result<Self, AudioError> {
        let magic = &bytes[..bytes.len().min(MAGIC_BYTES as usize)];
        if is_wav(magic, ext) {
            let reader: AnyRead = Box::new(Cursor::new(bytes));
            return Ok(Source::Wav(
                WavSource::open(reader, name)?.with_truncation(truncation),
            ));
        }
        let coded = CodedSource::open(Box::new(Cursor::new(bytes)), ext, name)?;
        Ok(Source::Coded(Box::new(coded.with_truncation(truncation))))
    }

    /// Standard input, read as it arrives (a pipe from `arecord` or `ffmpeg`).
    fn open_stdin(truncation: Truncation) -> Result<Self, AudioError> {
        let mut stdin = std::io::stdin();
        let mut magic = Vec::new();
        (&mut stdin)
            .take(MAGIC_BYTES)
            .read_to_end(&mut magic)
            .map_err(|source| AudioError::Io {
                path: STDIN_NAME.into(),
                source,
            })?;
        let whole = Cursor::new(magic.clone()).chain(stdin);
        if looks_like_wav(&magic) {
            let reader: AnyRead = Box::new(BufReader::new(whole));
            return Ok(Source::Wav(
                WavSource::open(reader, STDIN_NAME)?.with_truncation(truncation),
            ));
        }
        let media = Box::new(ReadOnlySource::new(whole));
        let coded = CodedSource::open(media, None, STDIN_NAME)?;
        Ok(Source::Coded(Box::new(coded.with_truncation(truncation))))
    }
}

impl<R: Read> Source<R> {
    pub(crate) fn name(&self) -> &str {
        match self {
            Source::Wav(s) => s.name(),
            Source::Coded(s) => s.name(),
        }
    }

    pub(crate) fn rate(&self) -> u32 {
        match self {
            Source::Wav(s) => s.rate(),
            Source::Coded(s) => s.rate(),
        }
    }

    pub(crate) fn channels(&self) -> u16 {
        match self {
            Source::Wav(s) => s.channels(),
            Source::Coded(s) => s.channels(),
        }
    }

    pub(crate) fn format(&self) -> String {
        match self {
            Source::Wav(s) => s.format(),
            Source::Coded(s) => s.format(),
        }
    }

    /// Frames the header declares, where it does.
    pub(crate) fn frames_declared(&self) -> Option<u64> {
        match self {
            Source::Wav(s) => s.frames_total(),
            Source::Coded(s) => s.frames_declared(),
        }
    }

    /// The frames the input holds: declared until the end, read after it.
    pub(crate) fn frames_held(&self) -> u64 {
        match self {
            Source::Wav(s) => s.frames_held(),
            Source::Coded(s) => s.frames_held(),
        }
    }

    pub(crate) fn at_end(&self) -> bool {
        match self {
            Source::Wav(s) => s.at_end(),
            Source::Coded(s) => s.at_end(),
        }
    }

    /// Appends up to `max_frames` mono frames to `out`; 0 at the end.
    pub(crate) fn read_frames(
        &mut self,
        max_frames: usize,
        out: &mut Vec<f32>,
    ) -> Result<usize, AudioError> {
        match self {
            Source::Wav(s) => s.read_frames(max_frames, out),
            Source::Coded(s) => s.read_frames(max_frames, out),
        }
    }
}

/// Whether the WAV reader takes a file starting with `magic`: a RIFF-like
/// start, or a `.wav` name whatever it holds (its errors then say what is
/// wrong with it as a WAV).
fn is_wav(magic: &[u8], ext: Option<&str>) -> bool {
    looks_like_wav(magic) || matches!(ext, Some("wav" | "wave"))
}

/// RIFF, RIFX, RF64 or BW64, or a prefix of RIFF (a cut header): the WAV
/// reader's business, errors included.
fn looks_like_wav(magic: &[u8]) -> bool {
    magic.is_empty()
        || b"RIFF".starts_with(magic)
        || matches!(magic, b"RIFF" | b"RIFX" | b"RF64" | b"BW64")
}
