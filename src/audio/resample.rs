//! Incremental, time-aligned mono resampling with rubato's synchronous FFT
//! resampler.
//!
//! The FFT resampler processes fixed blocks, so its output does not depend on
//! how the caller slices the input: a whole file and the same file fed chunk
//! by chunk give identical samples. Its startup delay (half an output block)
//! is dropped from the front, and the tail is flushed with silence and cut so
//! that `n` input samples give exactly `round(n * target / source)` outputs.

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Resampler};

use super::ResampleError;

/// The smaller FFT block (input or output side) is at least this long: long
/// blocks give a sharper anti-aliasing filter (cutoff ~0.98 of Nyquist here).
const MIN_BLOCK: usize = 512;

/// Above this (larger side), block length is not raised for quality.
const MAX_BLOCK: usize = 16_384;

/// The largest sample magnitude resampled. Audio is nominally within ±1
/// (float files overshoot a little); far beyond, a block's FFT overflows to
/// infinities, on which rubato panics, so such a sample (or NaN) is refused.
pub const MAX_AMPLITUDE: f32 = 1e6;

enum Mode {
    PassThrough,
    Fft {
        fft: Box<Fft<f32>>,
        chunk_in: usize,
        /// Input that does not fill a block yet.
        pending: Vec<f32>,
        out_buf: Vec<f32>,
        /// Startup-delay samples still to drop.
        skip: usize,
    },
}

/// Mono resampler fed any number of samples at a time: what [`super::load`]
/// converts a file's rate with, for samples that come from elsewhere (a
/// microphone, another program's arrays).
pub struct StreamResampler {
    mode: Mode,
    source_rate: u32,
    target_rate: u32,
    frames_in: u64,
    frames_out: u64,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `round(n * target / source)`, halves rounded up, in exact integer arithmetic.
pub(crate) fn resampled_len(n: u64, source: u32, target: u32) -> u64 {
    if source == target {
        return n;
    }
    let num = 2 * n as u128 * target as u128 + source as u128;
    (num / (2 * source as u128)) as u64
}

impl StreamResampler {
    /// A resampler from `source_rate` to `target_rate` (both > 0).
    pub fn new(source_rate: u32, target_rate: u32) -> Result<Self, ResampleError> {
        if source_rate == 0 || target_rate == 0 {
            return Err(ResampleError::ZeroRate {
                source_rate,
                target_rate,
            });
        }
        let mode = if source_rate == target_rate {
            Mode::PassThrough
        } else {
            let g = gcd(source_rate as u64, target_rate as u64);
            let (min_in, min_out) = ((source_rate as u64 / g), (target_rate as u64 / g));
            // An even number of minimal blocks makes both FFT sizes even, so
            // the filter's centre (half a block) is a whole number of samples
            // on both sides and the delay we drop is exact.
            // Co-prime rates force long blocks already; don't lengthen them further.
            let k_quality = (MIN_BLOCK as u64).div_ceil(min_in.min(min_out));
            let k_cap = (MAX_BLOCK as u64 / min_in.max(min_out)).max(1);
            let mut k = k_quality.min(k_cap).max(2);
            k += k % 2;
            let chunk = usize::try_from(k * min_in)?;
            let fft = Fft::<f32>::new(
                source_rate as usize,
                target_rate as usize,
                chunk,
                1,
                FixedSync::Both,
            )?;
            let (chunk_in, chunk_out) = (fft.input_frames_next(), fft.output_frames_next());
            if chunk_in as u64 * target_rate as u64 != chunk_out as u64 * source_rate as u64 {
                return Err(ResampleError::BlockSizes {
                    chunk_in,
                    chunk_out,
                });
            }
            let skip = fft.output_delay();
            Mode::Fft {
                fft: Box::new(fft),
                chunk_in,
                pending: Vec::with_capacity(chunk_in),
                out_buf: vec![0.0; chunk_out],
                skip,
            }
        };
        Ok(StreamResampler {
            mode,
            source_rate,
            target_rate,
            frames_in: 0,
            frames_out: 0,
        })
    }

    /// The output length once exactly `frames_in` inputs have been pushed.
    pub(crate) fn final_len(&self) -> u64 {
        resampled_len(self.frames_in, self.source_rate, self.target_rate)
    }

    /// Resamples `input`, appending every output sample that is ready to
    /// `out`; a sample beyond ±[`MAX_AMPLITUDE`] (or NaN) refuses the whole
    /// `input`.
    pub fn push(&mut self, input: &[f32], out: &mut Vec<f32>) -> Result<(), ResampleError> {
        if let Some(&value) = input.iter().find(|s| s.is_nan() || s.abs() > MAX_AMPLITUDE) {
            return Err(ResampleError::Amplitude { value });
        }
        self.frames_in += input.len() as u64;
        let Mode::Fft {
            fft,
            chunk_in,
            pending,
            out_buf,
            skip,
            ..
        } = &mut self.mode
        else {
            out.extend_from_slice(input);
            self.frames_out += input.len() as u64;
            return Ok(());
        };
        let chunk_in = *chunk_in;
        let mut input = input;
        if !pending.is_empty() {
            let take = (chunk_in - pending.len()).min(input.len());
            pending.extend_from_slice(&input[..take]);
            input = &input[take..];
            if pending.len() == chunk_in {
                let n = run_block(fft, pending, out_buf, skip, out)?;
                self.frames_out += n as u64;
                pending.clear();
            }
        }
        while input.len() >= chunk_in {
            let n = run_block(fft, &input[..chunk_in], out_buf, skip, out)?;
            self.frames_out += n as u64;
            input = &input[chunk_in..];
        }
        pending.extend_from_slice(input);
        Ok(())
    }

    /// Flushes the tail: after this, `out` has received exactly
    /// [`final_len`](Self::final_len) samples in all.
    pub fn finish(&mut self, out: &mut Vec<f32>) -> Result<(), ResampleError> {
        let want = self.final_len();
        let Mode::Fft {
            fft,
            chunk_in,
            pending,
            out_buf,
            skip,
            ..
        } = &mut self.mode
        else {
            return Ok(());
        };
        let mut block = std::mem::take(pending);
        block.resize(*chunk_in, 0.0);
        let mut first = true;
        while self.frames_out < want {
            if !first {
                block.iter_mut().for_each(|v| *v = 0.0);
            }
            first = false;
            let before = out.len();
            run_block(fft, &block, out_buf, skip, out)?;
            let room = (want - self.frames_out) as usize;
            out.truncate(before + room.min(out.len() - before));
            self.frames_out += (out.len() - before) as u64;
        }
        Ok(())
    }
}

/// Resamples one full input block; appends its output after the startup
/// delay is dropped and returns how many samples it appended.
fn run_block(
    fft: &mut Fft<f32>,
    block: &[f32],
    out_buf: &mut [f32],
    skip: &mut usize,
    out: &mut Vec<f32>,
) -> Result<usize, ResampleError> {
    let frames_out = out_buf.len();
    let input = InterleavedSlice::new(block, 1, block.len())?;
    let mut output = InterleavedSlice::new_mut(out_buf, 1, frames_out)?;
    let (_, produced) = fft.process_into_buffer(&input, &mut output, None)?;
    let produced = &out_buf[..produced.min(frames_out)];
    let drop = (*skip).min(produced.len());
    *skip -= drop;
    out.extend_from_slice(&produced[drop..]);
    Ok(produced.len() - drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audio::{decode_wav, AudioError};

    /// Found by the `wav` fuzz target (shortened): a 22.05 kHz float WAV
    /// of four samples of ±3e38, finite, whose FFT overflowed to infinities
    /// and made rubato panic.
    const HUGE_FLOAT_WAV: &[u8] = b"RIFF4\0\0\0WAVEfmt \x10\0\0\0\x03\0\x01\0\x22\x56\0\0\
        \x88\x58\x01\0\x04\0\x20\0data\x10\0\0\0\
        \xe6\xb1\x61\x7f\xe6\xb1\x61\xff\xe6\xb1\x61\x7f\xe6\xb1\x61\xff";

    #[test]
    fn samples_far_beyond_audio_range_are_an_error_not_a_panic() {
        let e = decode_wav(HUGE_FLOAT_WAV, 16_000, "huge.wav").unwrap_err();
        assert!(
            matches!(
                e,
                AudioError::Resample {
                    source: ResampleError::Amplitude { .. },
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("huge.wav: cannot resample 22050 Hz to 16000 Hz: sample 3"),
            "{e}"
        );
    }

    #[test]
    fn nan_or_huge_pushes_are_refused_whole_at_any_rate() {
        for (from, to) in [(22_050, 16_000), (16_000, 16_000)] {
            let mut r = StreamResampler::new(from, to).unwrap();
            let mut out = Vec::new();
            for bad in [f32::NAN, f32::INFINITY, -2e6, 3e38] {
                let e = r.push(&[0.5, bad], &mut out).unwrap_err();
                assert!(matches!(e, ResampleError::Amplitude { .. }), "{e}");
            }
            // nothing was taken in: the stream goes on as if they never came
            r.push(&[MAX_AMPLITUDE, -1.0, 0.25], &mut out).unwrap();
            r.finish(&mut out).unwrap();
            assert_eq!(out.len() as u64, resampled_len(3, from, to));
            assert!(out.iter().all(|s| s.is_finite()));
        }
    }
}
