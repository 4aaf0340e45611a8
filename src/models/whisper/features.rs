//! Whisper's log-mel features of a recording, streamed: the frame-local
//! part of the front end ([`graphs::log_mel_frames`]) is pulsified and fed
//! one second at a time, so only the features themselves grow with the
//! recording (80 x 4 bytes per 10 ms: 115 MB per hour), never the STFT.
//! The recording-wide maximum is applied once the stream ends, while the
//! frames are turned frequency-major piece by piece (peak: the features
//! once, plus one piece).

use super::graphs::{self, HOP};
use crate::pulse::{pulsify, StreamingSession};
use crate::Result;

/// Input samples per pulse (1 s).
const PULSE: usize = 16_000;

/// Feeds a recording's samples in any pieces; [`FeatureStream::finish`]
/// gives the features as faster-whisper computes them.
pub struct FeatureStream {
    session: StreamingSession,
    n_mels: usize,
    /// Floored log10 mel frames so far, time-major `[frames, n_mels]`, in
    /// the pieces the session gave (so that `finish` can free each one as
    /// it is copied out: the features are held once, never twice).
    frames: Vec<Vec<f32>>,
}

/// Log-mel features of a whole recording (see [`FeatureStream`]), fed in
/// pieces so that no copy of it is made.
pub fn log_mel(n_mels: usize, audio: &[f32]) -> Result<Vec<f32>> {
    let mut s = FeatureStream::new(n_mels)?;
    for piece in audio.chunks(1 << 16) {
        s.push(piece)?;
    }
    s.finish()
}

impl FeatureStream {
    pub fn new(n_mels: usize) -> Result<FeatureStream> {
        let model = pulsify(&graphs::log_mel_frames(n_mels)?, PULSE)?;
        Ok(FeatureStream {
            session: StreamingSession::new(model)?,
            n_mels,
            frames: Vec::new(),
        })
    }

    /// Takes more samples (16 kHz); non-finite ones are an error.
    pub fn push(&mut self, samples: &[f32]) -> Result<()> {
        let chunks = self.session.push(samples)?;
        self.keep(chunks)
    }

    fn keep(&mut self, chunks: Vec<crate::pulse::Chunk>) -> Result<()> {
        for c in chunks {
            self.frames.push(c.data.as_slice::<f32>()?.to_vec());
        }
        Ok(())
    }

    /// Ends the recording: `[n_mels, samples / 160 + 1]` row-major, 160
    /// zero samples appended as the reference does, its last frame dropped,
    /// clamped to 8 below the maximum, then `(x + 4) / 4`.
    pub fn finish(mut self) -> Result<Vec<f32>> {
        let tail = self.session.push(&[0.0; HOP])?;
        self.keep(tail)?;
        let rest = self.session.finish()?;
        self.keep(rest)?;
        let m = self.n_mels;
        let total: usize = self.frames.iter().map(Vec::len).sum();
        let t = (total / m).saturating_sub(1);
        // the maximum is taken after the last frame is dropped
        let max = self
            .frames
            .iter()
            .flatten()
            .take(t * m)
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        let low = max - 8.0;
        let mut out = vec![0f32; m * t];
        let mut f = 0;
        for piece in std::mem::take(&mut self.frames) {
            for row in piece.chunks_exact(m) {
                if f == t {
                    break;
                }
                for (k, &x) in row.iter().enumerate() {
                    out[k * t + f] = (x.max(low) + 4.0) * 0.25;
                }
                f += 1;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Runner;
    use crate::ops::Tensor;

    fn signal(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let t = i as f32 / 16_000.0;
                0.3 * (2.0 * std::f32::consts::PI * 440.0 * t).sin() * (1.0 + (3.0 * t).sin())
                    + 0.01 * ((i * 7919 % 1000) as f32 / 1000.0 - 0.5)
            })
            .collect()
    }

    /// Streamed in odd pieces equals the whole-recording graph, value for
    /// value, for lengths around the pulse and frame boundaries.
    #[test]
    fn streamed_equals_whole() {
        for n in [41, 160, 400, 15_999, 16_000, 16_161, 40_037] {
            let audio = signal(n);
            let mut whole = Runner::new(graphs::frontend(80).unwrap()).unwrap();
            whole.step(&[&Tensor::from_slice(&audio)]).unwrap();
            let want = whole.output(0).to_f32_vec();
            let mut s = FeatureStream::new(80).unwrap();
            for piece in audio.chunks(7_777) {
                s.push(piece).unwrap();
            }
            let got = s.finish().unwrap();
            assert_eq!(got.len(), 80 * (n / 160 + 1), "length {n}");
            let d = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(d < 1e-6, "length {n}: {d}");
        }
    }
}
