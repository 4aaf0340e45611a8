//! Audio input: WAV files of any rate, channel count and PCM/float format,
//! turned into the mono f32 samples at the model's rate (16 kHz).
//!
//! - [`load_wav`] / [`decode_wav`] read a whole file into an [`Audio`].
//! - [`WavStream`] reads a long file chunk by chunk in bounded memory and gives
//!   the same samples as [`load_wav`].
//!
//! Channels are averaged; integer samples are scaled to [-1, 1) (`x / 2^(bits-1)`);
//! float samples are kept as they are (NaN or infinity is an error). Rates are
//! converted with rubato's FFT resampler, time-aligned (its delay is removed)
//! and cut to `round(n * target / source)` samples; equal rates pass through
//! untouched. Every failure is an [`AudioError`] naming the file.
//!
//! ```no_run
//! let audio = pulsed::audio::load_wav(std::path::Path::new("speech.wav"), 16_000)?;
//! assert_eq!(audio.sample_rate, 16_000);
//! # Ok::<(), pulsed::audio::AudioError>(())
//! ```

mod error;
pub(crate) mod resample;
mod stream;
mod wav;

#[cfg(test)]
mod tests;

use std::io::Read;
use std::path::Path;

pub use error::{AudioError, ResampleError};
pub use stream::WavStream;

use resample::StreamResampler;
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

/// Reads a whole WAV file as mono f32 at `target_rate`.
pub fn load_wav(path: &Path, target_rate: u32) -> Result<Audio, AudioError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| AudioError::Io {
        path: name.clone(),
        source,
    })?;
    decode_wav(std::io::BufReader::new(file), target_rate, &name)
}

/// Decodes a WAV from any reader as mono f32 at `target_rate`; `name` labels errors.
pub fn decode_wav<R: Read>(reader: R, target_rate: u32, name: &str) -> Result<Audio, AudioError> {
    let name = if name.is_empty() { "<input>" } else { name };
    let mut source = WavSource::open(reader, name)?;
    let mut resampler = new_resampler(&source, target_rate)?;
    let from = source.rate();
    let resample_err = |source| AudioError::Resample {
        path: name.to_string(),
        from,
        to: target_rate,
        source,
    };
    // Never size a buffer from the header alone: a lying header must not
    // allocate gigabytes before the truncation is noticed.
    let expected = resample::resampled_len(source.frames_total(), source.rate(), target_rate);
    let mut samples = Vec::with_capacity(expected.min(1 << 20) as usize);
    let mut block = Vec::with_capacity(READ_FRAMES);
    loop {
        block.clear();
        if source.read_frames(READ_FRAMES, &mut block)? == 0 {
            break;
        }
        resampler.push(&block, &mut samples).map_err(resample_err)?;
    }
    resampler.finish(&mut samples).map_err(resample_err)?;
    Ok(Audio {
        samples,
        sample_rate: target_rate,
        source_rate: source.rate(),
        source_channels: source.channels(),
        source_format: source.format(),
        duration_s: source.frames_total() as f64 / source.rate() as f64,
    })
}

fn new_resampler<R: Read>(
    source: &WavSource<R>,
    target_rate: u32,
) -> Result<StreamResampler, AudioError> {
    StreamResampler::new(source.rate(), target_rate).map_err(|e| AudioError::Resample {
        path: source.name().to_string(),
        from: source.rate(),
        to: target_rate,
        source: e,
    })
}
