//! The Realtime API's audio: base64 PCM16 little-endian mono at the
//! session's rate (24 kHz by default, or 16 kHz), turned into f32 samples
//! at the model's rate by the crate's streaming resampler (so a stream cut
//! into any appends gives the same samples as the whole).

use base64::Engine as _;

use crate::audio::resample::StreamResampler;

/// Why an append's audio was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum PcmError {
    /// Not base64.
    Base64(String),
    /// PCM16 is two bytes a sample.
    OddBytes(usize),
}

impl std::fmt::Display for PcmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PcmError::Base64(e) => write!(f, "`audio` is not valid base64: {e}"),
            PcmError::OddBytes(n) => write!(
                f,
                "`audio` holds {n} bytes: PCM16 needs an even number (2 bytes per sample)"
            ),
        }
    }
}

/// One stream's audio decoder and resampler.
pub struct PcmInput {
    rate: u32,
    model_rate: u32,
    resampler: StreamResampler,
}

impl PcmInput {
    /// PCM at `rate` to samples at `model_rate` (both above zero).
    pub fn new(rate: u32, model_rate: u32) -> Result<PcmInput, String> {
        let resampler = StreamResampler::new(rate, model_rate).map_err(|e| e.to_string())?;
        Ok(PcmInput {
            rate,
            model_rate,
            resampler,
        })
    }

    /// Decodes one append's `audio`, adding its samples (at the model's
    /// rate) to `out`; nothing is kept from a refused append.
    pub fn push(&mut self, b64: &str, out: &mut Vec<f32>) -> Result<(), PcmError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| PcmError::Base64(e.to_string()))?;
        if bytes.len() % 2 != 0 {
            return Err(PcmError::OddBytes(bytes.len()));
        }
        let samples: Vec<f32> = bytes
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]) as f32 / 32768.0)
            .collect();
        // rates are checked at construction; a block's failure would be a bug
        self.resampler
            .push(&samples, out)
            .map_err(|e| PcmError::Base64(format!("resampling: {e}")))
    }

    /// The samples the resampler still holds (the buffer is committed), and
    /// a fresh start for what follows.
    pub fn flush(&mut self, out: &mut Vec<f32>) {
        let _ = self.resampler.finish(out);
        if let Ok(fresh) = StreamResampler::new(self.rate, self.model_rate) {
            self.resampler = fresh;
        }
    }

    /// Forgets what the resampler holds (the buffer is cleared).
    pub fn reset(&mut self) {
        if let Ok(fresh) = StreamResampler::new(self.rate, self.model_rate) {
            self.resampler = fresh;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(samples: &[i16]) -> String {
        let bytes: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn pcm16_at_the_model_rate_passes_through() {
        let mut p = PcmInput::new(16_000, 16_000).unwrap();
        let mut out = Vec::new();
        p.push(&encode(&[0, 16384, -32768]), &mut out).unwrap();
        assert_eq!(out, vec![0.0, 0.5, -1.0]);
    }

    #[test]
    fn bad_audio_is_refused() {
        let mut p = PcmInput::new(24_000, 16_000).unwrap();
        let mut out = Vec::new();
        assert!(matches!(
            p.push("not base64!", &mut out),
            Err(PcmError::Base64(_))
        ));
        assert!(p.push(&encode(&[1])[..3], &mut out).is_err());
        let three_bytes = base64::engine::general_purpose::STANDARD.encode([1u8, 2, 3]);
        assert_eq!(p.push(&three_bytes, &mut out), Err(PcmError::OddBytes(3)));
        assert!(out.is_empty());
    }

    #[test]
    fn resampled_appends_give_two_thirds_the_samples() {
        let mut p = PcmInput::new(24_000, 16_000).unwrap();
        let mut out = Vec::new();
        let tone: Vec<i16> = (0..4800)
            .map(|i| ((i as f32 * 0.05).sin() * 8000.0) as i16)
            .collect();
        for block in tone.chunks(480) {
            p.push(&encode(block), &mut out).unwrap();
        }
        p.flush(&mut out);
        assert_eq!(out.len(), 3200);
    }
}
