//! Reading a WAV's samples as mono f32 at its own rate, with every failure
//! mapped to an [`AudioError`] (hound does the parsing; we sniff the header
//! first so that errors can say *which* unsupported format it was).

use std::io::{Cursor, Read};

use super::policy::{self, Truncation};
use super::AudioError;

/// How many leading bytes we keep to describe an unsupported format; the fmt
/// chunk is almost always within the first hundred bytes.
const HEAD_BYTES: u64 = 4096;

/// Most bytes one raw read asks for (one frame at least).
const RAW_BLOCK: usize = 1 << 20;

/// Data sizes that mean "not recorded": what writers to a pipe put there,
/// since they cannot seek back to fill it in (ffmpeg 0xFFFFFFFF, arecord
/// 0x7FFFFFFF, sox 0x7FFFF000, others 0). Such data is read to the end of
/// the bytes; any other size is believed, and a shortfall is a truncation.
fn is_streamed_len(len: u32) -> bool {
    matches!(len, 0x7FFF_F000..=0x7FFF_FFFF | u32::MAX)
}

/// The largest f32 below 1.0: integer samples map to [-1, 1) even after rounding.
const BELOW_ONE: f32 = 1.0 - f32::EPSILON / 2.0;

/// What the fmt chunk says, read by hand from the head of the file.
#[derive(Debug, Clone, Copy, Default)]
struct FmtSniff {
    tag: u16,
    channels: u16,
    block_align: u16,
    bits: u16,
    /// First two bytes of the WAVE_FORMAT_EXTENSIBLE sub-format GUID (its format tag).
    sub_tag: Option<u16>,
    valid_bits: Option<u16>,
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
        *b.get(at + 2)?,
        *b.get(at + 3)?,
    ]))
}

/// Walks the RIFF chunks within `head` looking for "fmt ".
fn sniff_fmt(head: &[u8]) -> Option<FmtSniff> {
    let mut at = 12usize;
    loop {
        let id = head.get(at..at + 4)?;
        let len = le32(head, at + 4)? as usize;
        let body = at + 8;
        if id == b"fmt " {
            let mut f = FmtSniff {
                tag: le16(head, body)?,
                channels: le16(head, body + 2)?,
                block_align: le16(head, body + 12)?,
                bits: le16(head, body + 14)?,
                ..FmtSniff::default()
            };
            if f.tag == 0xFFFE && len >= 40 {
                f.valid_bits = le16(head, body + 18);
                f.sub_tag = le16(head, body + 24);
            }
            return Some(f);
        }
        // RIFF chunks are padded to an even length.
        at = body.checked_add(len)?.checked_add(len & 1)?;
    }
}

/// Where the data chunk's length field sits in `head`, and its value.
fn find_data_len(head: &[u8]) -> Option<(usize, u32)> {
    let mut at = 12usize;
    loop {
        let id = head.get(at..at + 4)?;
        let len = le32(head, at + 4)?;
        if id == b"data" {
            return Some((at + 4, len));
        }
        at = (at + 8)
            .checked_add(len as usize)?
            .checked_add(len as usize & 1)?;
    }
}

/// Rewrites a "not recorded" data length in `head` to the largest whole
/// number of frames hound accepts; true if it did (the data is then read to
/// its end). A zero length over no bytes at all stays an empty file.
fn patch_streamed_len(head: &mut [u8], sniff: Option<FmtSniff>) -> bool {
    let Some((at, len)) = find_data_len(head) else {
        return false;
    };
    let streamed = is_streamed_len(len) || (len == 0 && head.len() > at + 4);
    let align = sniff.map_or(0, |f| u32::from(f.block_align));
    if !streamed || align == 0 {
        return false;
    }
    let len = u32::MAX - u32::MAX % align;
    head[at..at + 4].copy_from_slice(&len.to_le_bytes());
    true
}

fn tag_name(tag: u16) -> String {
    match tag {
        0x0002 => "MS ADPCM".into(),
        0x0006 => "A-law".into(),
        0x0007 => "mu-law".into(),
        0x0011 => "IMA ADPCM".into(),
        0x0031 => "GSM 6.10".into(),
        0x0050 | 0x0055 => "MPEG audio".into(),
        _ => format!("format tag 0x{tag:04x}"),
    }
}

/// A one-line description of an encoding hound (or we) cannot decode.
fn describe_unsupported(f: Option<FmtSniff>) -> String {
    let Some(f) = f else {
        return "unknown encoding".into();
    };
    let tag = if f.tag == 0xFFFE {
        f.sub_tag.unwrap_or(0xFFFE)
    } else {
        f.tag
    };
    let bits = f.valid_bits.filter(|&b| b > 0).unwrap_or(f.bits);
    match tag {
        1 => format!("{bits}-bit int PCM"),
        3 => format!("{bits}-bit float"),
        t => tag_name(t),
    }
}

/// Sample encodings we decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Int { bits: u16 },
    Float,
}

impl Encoding {
    fn describe(self) -> String {
        match self {
            Encoding::Int { bits } => format!("{bits}-bit int"),
            Encoding::Float => "32-bit float".into(),
        }
    }
}

type Chained<R> = std::io::Chain<Cursor<Vec<u8>>, R>;

/// Where the samples come from once hound has parsed the header.
enum Samples<R: Read> {
    /// hound's per-sample iterator, for layouts only it handles (24-bit
    /// samples in 4-byte containers).
    Hound(hound::WavReader<R>),
    /// The data chunk's bytes decoded here in blocks: hound's iterator costs
    /// ~20 ns a sample, which held a batch worker feeding a GPU to ~3,000
    /// audio seconds per second.
    Raw {
        reader: R,
        /// Bytes per sample (8 * bytes = its bits).
        bytes: usize,
        buf: Vec<u8>,
    },
}

/// A WAV being read frame by frame as mono f32 at its own sample rate.
pub(crate) struct WavSource<R: Read> {
    reader: Samples<Chained<R>>,
    name: String,
    encoding: Encoding,
    channels: u16,
    rate: u32,
    /// Frames the data chunk declares; `None` when its length was not
    /// recorded (a WAV written to a pipe).
    frames_total: Option<u64>,
    frames_read: u64,
    truncation: Truncation,
    /// The bytes ended before `frames_total` (or, unrecorded, just ended).
    cut_short: bool,
}

impl<R: Read> WavSource<R> {
    /// Reads and checks the header; the data is read on demand.
    pub(crate) fn open(reader: R, name: &str) -> Result<Self, AudioError> {
        Self::open_with(reader, name, false)
    }

    /// `hound_only`: decode through hound's iterator whatever the layout
    /// (tests compare the two paths).
    pub(crate) fn open_with(
        mut reader: R,
        name: &str,
        hound_only: bool,
    ) -> Result<Self, AudioError> {
        let path = name.to_string();
        let io = |source| AudioError::Io {
            path: path.clone(),
            source,
        };
        let mut head = Vec::new();
        (&mut reader)
            .take(HEAD_BYTES)
            .read_to_end(&mut head)
            .map_err(io)?;
        check_magic(&head, &path)?;
        let sniff = sniff_fmt(&head);
        let streamed = patch_streamed_len(&mut head, sniff);
        let wav = hound::WavReader::new(Cursor::new(head).chain(reader))
            .map_err(|e| header_error(e, sniff, &path))?;
        let spec = wav.spec();
        let bytes = sniff
            .filter(|f| f.channels > 0)
            .map(|f| f.block_align / f.channels);
        let encoding = match (spec.sample_format, spec.bits_per_sample, bytes) {
            (hound::SampleFormat::Float, 32, None | Some(4)) => Encoding::Float,
            (hound::SampleFormat::Int, b @ (8 | 16), None) => Encoding::Int { bits: b },
            (hound::SampleFormat::Int, 8, Some(1)) | (hound::SampleFormat::Int, 16, Some(2)) => {
                Encoding::Int {
                    bits: spec.bits_per_sample,
                }
            }
            (hound::SampleFormat::Int, 24, None | Some(3 | 4)) => Encoding::Int { bits: 24 },
            (hound::SampleFormat::Int, 32, None | Some(4)) => Encoding::Int { bits: 32 },
            (fmt, bits, bytes) => {
                let kind = if fmt == hound::SampleFormat::Float {
                    "float"
                } else {
                    "int"
                };
                let container = bytes
                    .map(|b| format!(" in {b}-byte samples"))
                    .unwrap_or_default();
                return Err(AudioError::Unsupported {
                    path,
                    format: format!("{bits}-bit {kind}{container}"),
                });
            }
        };
        if spec.sample_rate == 0 {
            return Err(AudioError::Corrupt {
                path,
                reason: "sample rate is 0".into(),
            });
        }
        if let Some(e) = super::unsupported_rate(spec.sample_rate, &path) {
            return Err(e);
        }
        let frames_total = (!streamed).then_some(wav.duration() as u64);
        if frames_total == Some(0) {
            return Err(AudioError::Empty { path });
        }
        // the raw path trusts the sniffed layout only where hound read the
        // same fmt chunk (a file may carry several)
        let container = sniff
            .filter(|f| f.channels == spec.channels && f.bits == spec.bits_per_sample)
            .and(bytes)
            .map(usize::from);
        let reader = match (encoding, container) {
            _ if hound_only => Samples::Hound(wav),
            (Encoding::Float, Some(4)) => Samples::Raw {
                reader: wav.into_inner(),
                bytes: 4,
                buf: Vec::new(),
            },
            (Encoding::Int { bits }, Some(b)) if usize::from(bits) == 8 * b => Samples::Raw {
                reader: wav.into_inner(),
                bytes: b,
                buf: Vec::new(),
            },
            _ => Samples::Hound(wav),
        };
        Ok(WavSource {
            reader,
            name: path,
            encoding,
            channels: spec.channels,
            rate: spec.sample_rate,
            frames_total,
            frames_read: 0,
            truncation: policy::truncation(),
            cut_short: false,
        })
    }

    /// Overrides the process's [`Truncation`] choice for this file.
    pub(crate) fn with_truncation(mut self, t: Truncation) -> Self {
        self.truncation = t;
        self
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn rate(&self) -> u32 {
        self.rate
    }

    pub(crate) fn channels(&self) -> u16 {
        self.channels
    }

    pub(crate) fn frames_total(&self) -> Option<u64> {
        self.frames_total
    }

    /// The frames the file holds: as declared, or as read when the bytes
    /// ended early or the length was not recorded.
    pub(crate) fn frames_held(&self) -> u64 {
        match self.frames_total {
            Some(t) if !self.cut_short => t,
            _ => self.frames_read,
        }
    }

    /// True once every frame there is has been read.
    pub(crate) fn at_end(&self) -> bool {
        self.cut_short || self.frames_total == Some(self.frames_read)
    }

    /// Ends the read where the bytes ended: silently when the length was not
    /// recorded, else as the [`Truncation`] choice says.
    fn ended_early(&mut self) -> Result<(), AudioError> {
        self.cut_short = true;
        let Some(total) = self.frames_total else {
            return Ok(());
        };
        let detail = format!(
            "the data chunk declares {total} frames but the file ends after {}",
            self.frames_read
        );
        match self.truncation {
            Truncation::Refuse => Err(AudioError::Truncated {
                path: self.name.clone(),
                detail,
            }),
            Truncation::Warn => {
                policy::warn_truncated(&self.name, &detail, self.frames_read, self.rate);
                Ok(())
            }
        }
    }

    pub(crate) fn format(&self) -> String {
        self.encoding.describe()
    }

    /// Appends up to `max_frames` frames, averaged over channels, to `out`;
    /// returns how many it appended (0 once the data chunk is exhausted).
    pub(crate) fn read_frames(
        &mut self,
        max_frames: usize,
        out: &mut Vec<f32>,
    ) -> Result<usize, AudioError> {
        if self.at_end() {
            return Ok(0);
        }
        let left = self.frames_total.map_or(u64::MAX, |t| t - self.frames_read);
        let frames = left.min(max_frames as u64) as usize;
        let ch = self.channels as usize;
        let start_frame = self.frames_read;
        if let Samples::Raw { .. } = self.reader {
            return self.read_raw(frames, out);
        }
        let Samples::Hound(reader) = &mut self.reader else {
            unreachable!("raw samples returned above")
        };
        let mut done = 0usize;
        let mut acc = 0f64;
        let mut in_frame = 0usize;
        let mut eof = false;
        match self.encoding {
            Encoding::Int { bits } => {
                let scale = 1.0 / (1u64 << (bits - 1)) as f64;
                let inv_ch = 1.0 / ch as f64;
                for s in reader.samples::<i32>().take(frames * ch) {
                    let s = match s {
                        Ok(s) => s,
                        Err(hound::Error::IoError(e)) if is_eof(&e) => {
                            eof = true;
                            break;
                        }
                        Err(e) => {
                            return Err(sample_error(e, &self.name, start_frame + done as u64))
                        }
                    };
                    acc += s as f64;
                    in_frame += 1;
                    if in_frame == ch {
                        out.push(((acc * scale * inv_ch) as f32).min(BELOW_ONE));
                        acc = 0.0;
                        in_frame = 0;
                        done += 1;
                    }
                }
            }
            Encoding::Float => {
                for s in reader.samples::<f32>().take(frames * ch) {
                    let s = match s {
                        Ok(s) => s,
                        Err(hound::Error::IoError(e)) if is_eof(&e) => {
                            eof = true;
                            break;
                        }
                        Err(e) => {
                            return Err(sample_error(e, &self.name, start_frame + done as u64))
                        }
                    };
                    if !s.is_finite() {
                        return Err(AudioError::Corrupt {
                            path: self.name.clone(),
                            reason: format!(
                                "non-finite sample ({s}) at frame {}",
                                start_frame + done as u64
                            ),
                        });
                    }
                    acc += s as f64;
                    in_frame += 1;
                    if in_frame == ch {
                        out.push((acc / ch as f64) as f32);
                        acc = 0.0;
                        in_frame = 0;
                        done += 1;
                    }
                }
            }
        }
        self.frames_read += done as u64;
        if eof {
            self.ended_early()?;
        }
        Ok(done)
    }

    /// Bytes the raw read buffer holds now (tests bound it).
    #[cfg(test)]
    pub(crate) fn raw_capacity(&self) -> usize {
        match &self.reader {
            Samples::Raw { buf, .. } => buf.capacity(),
            Samples::Hound(_) => 0,
        }
    }

    /// [`Self::read_frames`] from the raw data bytes: the same arithmetic
    /// as the hound path, so both give identical samples.
    fn read_raw(&mut self, frames: usize, out: &mut Vec<f32>) -> Result<usize, AudioError> {
        let Samples::Raw { reader, bytes, buf } = &mut self.reader else {
            unreachable!("called for raw samples only")
        };
        let (bytes, ch) = (*bytes, self.channels as usize);
        let frame_bytes = bytes * ch;
        // a lying header (thousands of channels) must not size the buffer:
        // at most a block of RAW_BLOCK bytes per call, callers loop
        let frames = frames.min((RAW_BLOCK / frame_bytes).max(1));
        buf.resize(frames * frame_bytes, 0);
        let mut got = 0;
        while got < buf.len() {
            match reader.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(AudioError::Io {
                        path: self.name.clone(),
                        source,
                    })
                }
            }
        }
        let done = got / frame_bytes;
        out.reserve(done);
        let data = &buf[..done * frame_bytes];
        match self.encoding {
            Encoding::Float => {
                for (f, frame) in data.chunks_exact(frame_bytes).enumerate() {
                    let mut acc = 0f64;
                    for b in frame.chunks_exact(4) {
                        let s = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                        if !s.is_finite() {
                            return Err(AudioError::Corrupt {
                                path: self.name.clone(),
                                reason: format!(
                                    "non-finite sample ({s}) at frame {}",
                                    self.frames_read + f as u64
                                ),
                            });
                        }
                        acc += s as f64;
                    }
                    out.push((acc / ch as f64) as f32);
                }
            }
            Encoding::Int { bits } => {
                let scale = 1.0 / (1u64 << (bits - 1)) as f64;
                let inv_ch = 1.0 / ch as f64;
                let sample = |b: &[u8]| -> i32 {
                    match bytes {
                        1 => b[0] as i32 - 128, // 8-bit WAV is unsigned
                        2 => i16::from_le_bytes([b[0], b[1]]) as i32,
                        3 => i32::from_le_bytes([0, b[0], b[1], b[2]]) >> 8,
                        _ => i32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                    }
                };
                if (bytes, ch) == (2, 1) {
                    // the common case, vectorised: s·2⁻¹⁵ is exact in f32,
                    // as in the general path, and below one
                    let scale = scale as f32;
                    out.extend(
                        data.chunks_exact(2)
                            .map(|b| i16::from_le_bytes([b[0], b[1]]) as f32 * scale),
                    );
                } else {
                    for frame in data.chunks_exact(frame_bytes) {
                        let acc = frame
                            .chunks_exact(bytes)
                            .fold(0f64, |a, b| a + sample(b) as f64);
                        out.push(((acc * scale * inv_ch) as f32).min(BELOW_ONE));
                    }
                }
            }
        }
        self.frames_read += done as u64;
        if done < frames {
            self.ended_early()?;
        }
        Ok(done)
    }
}

/// Rejects what is clearly not a RIFF/WAVE file before hound sees it.
fn check_magic(head: &[u8], path: &str) -> Result<(), AudioError> {
    let not_wav = |reason: String| {
        Err(AudioError::NotWav {
            path: path.to_string(),
            reason,
        })
    };
    if head.is_empty() {
        return not_wav("the file is empty (0 bytes)".into());
    }
    let magic = &head[..head.len().min(4)];
    match magic {
        b"RIFF" => {}
        b"RIFX" => {
            return Err(AudioError::Unsupported {
                path: path.into(),
                format: "big-endian RIFX".into(),
            })
        }
        b"RF64" | b"BW64" => {
            return Err(AudioError::Unsupported {
                path: path.into(),
                format: "RF64 (64-bit sizes)".into(),
            })
        }
        _ if b"RIFF".starts_with(magic) => {
            return Err(AudioError::Truncated {
                path: path.into(),
                detail: format!(
                    "the file ends inside the RIFF header ({} bytes)",
                    head.len()
                ),
            })
        }
        _ => return not_wav("no RIFF header".into()),
    }
    match head.get(8..12) {
        Some(b"WAVE") => Ok(()),
        Some(kind) => not_wav(format!(
            "RIFF file of type '{}', not 'WAVE'",
            String::from_utf8_lossy(kind).escape_debug()
        )),
        None => Err(AudioError::Truncated {
            path: path.into(),
            detail: format!(
                "the file ends inside the RIFF header ({} bytes)",
                head.len()
            ),
        }),
    }
}

/// Hound reports a short read either as `UnexpectedEof` or, from its own
/// helpers, as `Other` with this message.
fn is_eof(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::UnexpectedEof
        || (e.kind() == std::io::ErrorKind::Other
            && e.to_string() == "Failed to read enough bytes.")
}

fn header_error(e: hound::Error, sniff: Option<FmtSniff>, path: &str) -> AudioError {
    let path = path.to_string();
    match e {
        hound::Error::Unsupported => AudioError::Unsupported {
            path,
            format: describe_unsupported(sniff),
        },
        hound::Error::FormatError(reason)
            if reason.starts_with("bits per sample is not")
                || reason == "sample bits exceeds size of sample" =>
        {
            AudioError::Unsupported {
                path,
                format: describe_unsupported(sniff),
            }
        }
        hound::Error::FormatError(reason) => AudioError::Corrupt {
            path,
            reason: reason.into(),
        },
        hound::Error::IoError(e) if is_eof(&e) => AudioError::Truncated {
            path,
            detail: "the file ends before the data chunk starts".into(),
        },
        hound::Error::IoError(source) => AudioError::Io { path, source },
        other => AudioError::Corrupt {
            path,
            reason: other.to_string(),
        },
    }
}

/// A sample hound could not read, for reasons other than the bytes ending.
fn sample_error(e: hound::Error, path: &str, frame: u64) -> AudioError {
    let path = path.to_string();
    match e {
        hound::Error::IoError(source) => AudioError::Io { path, source },
        hound::Error::Unsupported => AudioError::Unsupported {
            path,
            format: "sample encoding".into(),
        },
        other => AudioError::Corrupt {
            path,
            reason: format!("at frame {frame}: {other}"),
        },
    }
}
