//! Compressed audio (FLAC, MP3, OGG Vorbis, AAC or ALAC in M4A) read through
//! symphonia as mono f32 at its own rate, with failures mapped to [`AudioError`].

use std::panic::{catch_unwind, AssertUnwindSafe};

use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{Decoder, DecoderOptions, CODEC_TYPE_NULL, CODEC_TYPE_OPUS};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::{FormatOptions, FormatReader};
use symphonia::core::io::{MediaSource, MediaSourceStream};
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use super::policy::{self, Truncation};
use super::{mp4, AudioError};
use std::io::{Read, Seek, SeekFrom};

/// Most channels we mix down: more is a damaged header, not a recording.
const MAX_CHANNELS: usize = 256;

/// What the formats we read are, for "not an audio file" messages.
pub(crate) const KNOWN_FORMATS: &str = "WAV, FLAC, MP3, OGG Vorbis, M4A (AAC, ALAC)";

/// The error for a file symphonia panicked on. symphonia 0.5 panics on
/// some damaged files where it should return an error (an `unwrap` in its
/// M4A `esds` reader, found by the `audio` fuzz target); one bad file must
/// not end the program, so its calls run under `catch_unwind`.
fn decoder_panicked(path: &str) -> AudioError {
    AudioError::Corrupt {
        path: path.to_string(),
        reason: "damaged data (the decoder panicked on it)".into(),
    }
}

/// What is wrong with a seekable MP4's sample tables, if anything (see
/// [`mp4`]); the stream is back at its start after.
fn oversized_mp4_table(media: &mut Box<dyn MediaSource>) -> std::io::Result<Option<String>> {
    if !media.is_seekable() {
        return Ok(None);
    }
    let mut head = vec![0u8; 4096];
    let mut n = 0;
    while n < head.len() {
        match media.read(&mut head[n..])? {
            0 => break,
            k => n += k,
        }
    }
    let found = match mp4::mp4_start(&head[..n]) {
        Some(start) => {
            let len = media.byte_len().unwrap_or(u64::MAX);
            mp4::oversized_table(media, start, len)?
        }
        None => None,
    };
    media.seek(SeekFrom::Start(0))?;
    Ok(found)
}

/// A compressed stream being decoded packet by packet.
pub(crate) struct CodedSource {
    format: Box<dyn FormatReader>,
    decoder: Box<dyn Decoder>,
    track: u32,
    name: String,
    codec: String,
    rate: u32,
    channels: u16,
    /// Frames the container declares, where it does (FLAC always, MP3 with
    /// a Xing header, M4A); a hint for the truncation check only.
    frames_declared: Option<u64>,
    frames_read: u64,
    /// Decoded mono frames not handed out yet, from `pending_pos`.
    pending: Vec<f32>,
    pending_pos: usize,
    interleaved: Option<SampleBuffer<f32>>,
    truncation: Truncation,
    ended: bool,
}

impl CodedSource {
    /// Probes the container and opens a decoder for its first audio track;
    /// `ext` (the file's extension, if any) helps the probe.
    pub(crate) fn open(
        mut media: Box<dyn MediaSource>,
        ext: Option<&str>,
        name: &str,
    ) -> Result<Self, AudioError> {
        let io = |source| AudioError::Io {
            path: name.to_string(),
            source,
        };
        if let Some(reason) = oversized_mp4_table(&mut media).map_err(io)? {
            return Err(AudioError::Corrupt {
                path: name.to_string(),
                reason,
            });
        }
        catch_unwind(AssertUnwindSafe(|| Self::probe(media, ext, name)))
            .unwrap_or_else(|_| Err(decoder_panicked(name)))
    }

    fn probe(
        media: Box<dyn MediaSource>,
        ext: Option<&str>,
        name: &str,
    ) -> Result<Self, AudioError> {
        let path = name.to_string();
        let mut hint = Hint::new();
        if let Some(ext) = ext {
            hint.with_extension(ext);
        }
        let stream = MediaSourceStream::new(media, Default::default());
        // gapless: the encoder's delay and padding are cut, so the samples
        // line up with the WAV they were made from
        let opts = FormatOptions {
            enable_gapless: true,
            ..Default::default()
        };
        let probed = symphonia::default::get_probe()
            .format(&hint, stream, &opts, &MetadataOptions::default())
            .map_err(|e| match e {
                SymError::IoError(source) => AudioError::Io {
                    path: path.clone(),
                    source,
                },
                _ => AudioError::NotAudio {
                    path: path.clone(),
                    reason: format!("not one of {KNOWN_FORMATS}"),
                },
            })?;
        let format = probed.format;
        let Some(track) = format
            .tracks()
            .iter()
            .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        else {
            return Err(AudioError::Empty { path });
        };
        let params = track.codec_params.clone();
        let codec = symphonia::default::get_codecs()
            .get_codec(params.codec)
            .map_or_else(
                || format!("codec {}", params.codec),
                |d| d.short_name.to_string(),
            );
        if params.codec == CODEC_TYPE_OPUS {
            return Err(AudioError::Unsupported {
                path,
                format: "Opus (symphonia has no Opus decoder yet; convert it, e.g. `ffmpeg -i F.opus F.wav`)".into(),
            });
        }
        let decoder = symphonia::default::get_codecs()
            .make(&params, &DecoderOptions::default())
            .map_err(|e| AudioError::Unsupported {
                path: path.clone(),
                format: format!("{codec} ({e})"),
            })?;
        let rate = params.sample_rate.unwrap_or(0);
        if rate == 0 {
            return Err(AudioError::Corrupt {
                path,
                reason: "sample rate is 0 or missing".into(),
            });
        }
        if let Some(e) = super::unsupported_rate(rate, &path) {
            return Err(e);
        }
        let channels = params.channels.map_or(0, |c| c.count());
        Ok(CodedSource {
            track: track.id,
            format,
            decoder,
            name: path,
            codec,
            rate,
            // 0 when the container does not say: the first packet tells
            channels: channels.min(MAX_CHANNELS) as u16,
            frames_declared: params.n_frames.filter(|&n| n > 0),
            frames_read: 0,
            pending: Vec::new(),
            pending_pos: 0,
            interleaved: None,
            truncation: policy::truncation(),
            ended: false,
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

    pub(crate) fn format(&self) -> String {
        self.codec.clone()
    }

    pub(crate) fn frames_declared(&self) -> Option<u64> {
        self.frames_declared
    }

    /// The frames decoded so far, or the declared count before the end.
    pub(crate) fn frames_held(&self) -> u64 {
        if self.ended {
            self.frames_read
        } else {
            self.frames_declared.unwrap_or(self.frames_read)
        }
    }

    pub(crate) fn at_end(&self) -> bool {
        self.ended && self.pending_pos == self.pending.len()
    }

    /// Appends up to `max_frames` mono frames to `out`; 0 at the end.
    pub(crate) fn read_frames(
        &mut self,
        max_frames: usize,
        out: &mut Vec<f32>,
    ) -> Result<usize, AudioError> {
        while self.pending.len() - self.pending_pos < max_frames && !self.ended {
            if self.pending_pos > 0 {
                self.pending.drain(..self.pending_pos);
                self.pending_pos = 0;
            }
            // after a panic the decoder's state is unknown: the stream ends
            catch_unwind(AssertUnwindSafe(|| self.decode_packet())).unwrap_or_else(|_| {
                self.ended = true;
                Err(decoder_panicked(&self.name))
            })?;
        }
        let n = (self.pending.len() - self.pending_pos).min(max_frames);
        out.extend_from_slice(&self.pending[self.pending_pos..self.pending_pos + n]);
        self.pending_pos += n;
        self.frames_read += n as u64;
        Ok(n)
    }

    /// Decodes the next packet of our track into `pending`, or ends the stream.
    fn decode_packet(&mut self) -> Result<(), AudioError> {
        let packet = match self.format.next_packet() {
            Ok(p) => p,
            // symphonia's end of stream, whether the file is whole or cut
            Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return self.finish();
            }
            Err(SymError::IoError(source)) => {
                return Err(AudioError::Io {
                    path: self.name.clone(),
                    source,
                })
            }
            Err(e) => {
                return Err(AudioError::Corrupt {
                    path: self.name.clone(),
                    reason: e.to_string(),
                })
            }
        };
        if packet.track_id() != self.track {
            return Ok(());
        }
        let decoded = match self.decoder.decode(&packet) {
            Ok(d) => d,
            // a damaged packet (often the last of a cut file) is skipped,
            // as players do: the rest of the stream still decodes
            Err(SymError::DecodeError(_)) => return Ok(()),
            Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return self.finish();
            }
            Err(e) => {
                return Err(AudioError::Corrupt {
                    path: self.name.clone(),
                    reason: e.to_string(),
                })
            }
        };
        let spec = *decoded.spec();
        let ch = spec.channels.count();
        if ch == 0 || ch > MAX_CHANNELS {
            return Err(AudioError::Corrupt {
                path: self.name.clone(),
                reason: format!("{ch} channels"),
            });
        }
        self.channels = ch as u16;
        let need = decoded.capacity() as u64;
        let buf = match &mut self.interleaved {
            Some(b) if b.capacity() as u64 >= need * ch as u64 => b,
            slot => slot.insert(SampleBuffer::new(need, spec)),
        };
        buf.copy_interleaved_ref(decoded);
        let samples = buf.samples();
        let before = self.pending.len();
        if ch == 1 {
            self.pending.extend_from_slice(samples);
        } else {
            // averaged in f64, as the WAV reader does
            self.pending.extend(
                samples
                    .chunks_exact(ch)
                    .map(|f| (f.iter().map(|&s| s as f64).sum::<f64>() / ch as f64) as f32),
            );
        }
        if let Some(i) = self.pending[before..].iter().position(|s| !s.is_finite()) {
            return Err(AudioError::Corrupt {
                path: self.name.clone(),
                reason: format!(
                    "non-finite sample at frame {}",
                    self.frames_read + (before - self.pending_pos + i) as u64
                ),
            });
        }
        Ok(())
    }

    /// The end of the packets: checks the count against the declared one.
    fn finish(&mut self) -> Result<(), AudioError> {
        self.ended = true;
        let got = self.frames_read + (self.pending.len() - self.pending_pos) as u64;
        if got == 0 {
            return Err(AudioError::Empty {
                path: self.name.clone(),
            });
        }
        // encoders round the declared count to their frames: only a clear
        // shortfall (over 1% and a tenth of a second) is a cut file
        let Some(declared) = self.frames_declared else {
            return Ok(());
        };
        let slack = (declared / 100).max(u64::from(self.rate) / 10);
        if got + slack >= declared {
            return Ok(());
        }
        let detail = format!("the stream declares {declared} frames but ends after {got}");
        match self.truncation {
            Truncation::Refuse => Err(AudioError::Truncated {
                path: self.name.clone(),
                detail,
            }),
            Truncation::Warn => {
                policy::warn_truncated(&self.name, &detail, got, self.rate);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::audio::{decode_bytes, AudioError, Truncation};

    /// Found by the `audio` fuzz target (minimised): 29 bytes taken for an
    /// M4A on which symphonia's `esds` reader unwraps a `None`.
    const ESDS_PANIC: &[u8] = b"di\0\x80\x01\0\0\0\0\0\0\0\x03\xff\xf1\0\0\x03\x80000000\xff000";

    #[test]
    fn a_decoder_panic_is_an_error_for_that_file() {
        let e =
            decode_bytes(ESDS_PANIC.to_vec(), Some("m4a"), 16_000, Truncation::Refuse).unwrap_err();
        assert!(matches!(e, AudioError::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains("the decoder panicked"), "{e}");
    }
}
