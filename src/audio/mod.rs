//! Audio input: WAV of any rate, channel count and PCM/float format, FLAC,
//! MP3, OGG Vorbis and M4A (AAC, ALAC), from a file or standard input (`-`),
//! turned into the mono f32 samples at the model's rate (16 kHz).
//!
//! - [`load`] / [`decode_wav`] read a whole file into an [`Audio`].
//! - [`WavStream`] reads a long file chunk by chunk in bounded memory and gives
//!   the same samples as [`load`].
//!
//! WAV is read by our reader over hound, compressed formats by symphonia
//! (pure Rust: no system library to install). Channels are averaged;
//! integer samples are scaled to [-1, 1) (`x / 2^(bits-1)`); float samples
//! are kept as they are (NaN or infinity is an error). Rates are converted
//! with rubato's FFT resampler, time-aligned (its delay is removed) and cut
//! to `round(n * target / source)` samples; equal rates pass through
//! untouched. A WAV whose data length says 0 or about 4 GiB (written to a
//! pipe) is read to its end; a file that ends before its header says is an
//! error or a warning, as [`set_truncation`] chose. Every failure is an
//! [`AudioError`] naming the file.
//!
//! ```no_run
//! let audio = pulsed::audio::load(std::path::Path::new("speech.flac"), 16_000)?;
//! assert_eq!(audio.sample_rate, 16_000);
//! # Ok::<(), pulsed::audio::AudioError>(())
//! ```

mod coded;
mod error;
mod mp4;
mod policy;
pub(crate) mod resample;
mod source;
mod stream;
mod wav;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_formats;

use std::io::Read;
use std::path::Path;

pub use error::{AudioError, ResampleError};
pub use policy::{set_truncation, truncation, Truncation};
pub use resample::StreamResampler;
pub use source::STDIN;
pub use stream::WavStream;

use source::Source;
use wav::WavSource;

/// Source frames read per step: bounds the memory of a read independently of the file.
const READ_FRAMES: usize = 1 << 14;

/// A decoded file: mono samples at `sample_rate`, plus what the file was.
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    /// Mono samples, nominally in [-1, 1].
    pub samples: Vec<f32>,
    /// Rate of `samples` (the requested target rate).
    pub sample_rate: u32,
    /// Sample rate stored in the file.
    pub source_rate: u32,
    /// Channel count stored in the file (averaged into one).
    pub source_channels: u16,
    /// Sample encoding of the file, e.g. "16-bit int" or "32-bit float".
    pub source_format: String,
    /// Length of the file's audio in seconds (source frames / source rate).
    pub duration_s: f64,
}

/// The sample rates we resample from, as an error for one outside them.
/// Above 384 kHz no real file goes, and a bit-flipped header must not make
/// the resampler allocate gigabytes; below 1 kHz no speech is left (its
/// band ends at half the rate), and each sample would become 16 or more:
/// a file of a few kB could be decoded into gigabytes.
pub(crate) fn unsupported_rate(rate: u32, path: &str) -> Option<AudioError> {
    const RATES: std::ops::RangeInclusive<u32> = 1_000..=384_000;
    if rate == 0 || RATES.contains(&rate) {
        return None; // 0 is a damaged header: said where it is read
    }
    let bound = if rate < *RATES.start() {
        format!("at least {}", RATES.start())
    } else {
        format!("at most {}", RATES.end())
    };
    Some(AudioError::Unsupported {
        path: path.to_string(),
        format: format!("sample rate {rate} Hz ({bound})"),
    })
}

/// Reads a whole audio file (any format [`load`] reads) as mono f32 at
/// `target_rate`; the name is older than the other formats.
pub fn load_wav(path: &Path, target_rate: u32) -> Result<Audio, AudioError> {
    load(path, target_rate)
}

/// Reads a whole audio file, or standard input for `-`, as mono f32 at
/// `target_rate`; an early end is treated as the process's [`truncation`] says.
pub fn load(path: &Path, target_rate: u32) -> Result<Audio, AudioError> {
    load_with(path, target_rate, truncation())
}

/// [`load`] with its own choice for a file that ends early.
pub fn load_with(path: &Path, target_rate: u32, t: Truncation) -> Result<Audio, AudioError> {
    read_all(Source::open(path, t)?, target_rate)
}

/// Decodes a WAV from any reader as mono f32 at `target_rate`; `name` labels errors.
pub fn decode_wav<R: Read>(reader: R, target_rate: u32, name: &str) -> Result<Audio, AudioError> {
    let name = if name.is_empty() { "<input>" } else { name };
    read_all(Source::Wav(WavSource::open(reader, name)?), target_rate)
}

/// Decodes a whole file held in memory (any format [`load`] reads) as mono
/// f32 at `target_rate`; `ext` is the file's extension, if any, a hint as a
/// path's is. The entry point of the fuzz targets (`fuzz/`).
#[doc(hidden)]
pub fn decode_bytes(
    bytes: Vec<u8>,
    ext: Option<&str>,
    target_rate: u32,
    t: Truncation,
) -> Result<Audio, AudioError> {
    read_all(Source::from_bytes(bytes, ext, "<input>", t)?, target_rate)
}

fn read_all<R: Read>(mut source: Source<R>, target_rate: u32) -> Result<Audio, AudioError> {
    let mut resampler = new_resampler(&source, target_rate)?;
    let (from, name) = (source.rate(), source.name().to_string());
    let resample_err = |source| AudioError::Resample {
        path: name.clone(),
        from,
        to: target_rate,
        source,
    };
    // Never size a buffer from the header alone: a lying header must not
    // allocate gigabytes before the truncation is noticed.
    let declared = source.frames_declared().unwrap_or(0);
    let expected = resample::resampled_len(declared, source.rate(), target_rate);
    let mut samples = Vec::with_capacity(expected.min(1 << 20) as usize);
    let mut block = Vec::with_capacity(READ_FRAMES);
    loop {
        block.clear();
        if source.read_frames(READ_FRAMES, &mut block)? == 0 {
            break;
        }
        resampler.push(&block, &mut samples).map_err(resample_err)?;
    }
    if source.frames_held() == 0 {
        return Err(AudioError::Empty { path: name });
    }
    resampler.finish(&mut samples).map_err(resample_err)?;
    Ok(Audio {
        samples,
        sample_rate: target_rate,
        source_rate: source.rate(),
        source_channels: source.channels(),
        source_format: source.format(),
        duration_s: source.frames_held() as f64 / source.rate() as f64,
    })
}

fn new_resampler<R: Read>(
    source: &Source<R>,
    target_rate: u32,
) -> Result<StreamResampler, AudioError> {
    StreamResampler::new(source.rate(), target_rate).map_err(|e| AudioError::Resample {
        path: source.name().to_string(),
        from: source.rate(),
        to: target_rate,
        source: e,
    })
}
