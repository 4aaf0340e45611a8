//! One encoder window cut from a whole recording's features, padded to the
//! window's length (faster-whisper's `pad_or_trim`, with the padding the
//! checkpoint expects: [`WindowPadding`]).

use serde::Deserialize;

/// What fills an encoder window after a recording's last frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowPadding {
    /// The features of silent audio: the recording's floor (its maximum
    /// less 8 in log10, clamped as the front end clamps). Whisper was
    /// trained on audio padded to 30 s before its features were taken, and
    /// `transformers`' feature extractor pads the same way.
    #[default]
    Silence,
    /// Zeros in the feature domain, as faster-whisper and openai-whisper's
    /// `transcribe` pad a window (and as the streaming students of
    /// `training/streaming_whisper` were distilled).
    Zeros,
}

/// The feature of an all-zero frame: `(log10(1e-10) + 4) / 4`, the floor
/// when even the recording's loudest frame is that quiet.
const SILENT_FRAME: f32 = -1.5;

impl WindowPadding {
    /// The padded frames' value for a recording's normalised features.
    pub fn value(self, features: &[f32]) -> f32 {
        match self {
            WindowPadding::Zeros => 0.0,
            // normalised, the floor is the maximum less 2: (max - 8 + 4) / 4
            WindowPadding::Silence => {
                let max = features.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                (max - 2.0).max(SILENT_FRAME)
            }
        }
    }
}

/// The padding `asked` for, else the one the checkpoint behind `backend`
/// wants.
pub(crate) fn padding_for(
    asked: Option<WindowPadding>,
    backend: &dyn crate::models::whisper::WhisperBackend,
) -> WindowPadding {
    asked.unwrap_or_else(|| backend.window_padding())
}

/// Frames `[start, start + len)` of `features` (`[n_mels, frames]`
/// row-major) as a `[n_mels, size]` window, `pad` after them.
pub(crate) fn window_features(
    features: &[f32],
    n_mels: usize,
    frames: usize,
    (start, len): (usize, usize),
    size: usize,
    pad: f32,
) -> Vec<f32> {
    let len = len.min(size).min(frames.saturating_sub(start));
    let mut out = vec![pad; n_mels * size];
    for m in 0..n_mels {
        let row = &features[m * frames + start..m * frames + start + len];
        out[m * size..m * size + len].copy_from_slice(row);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_each_row_and_pads() {
        // 2 mels x 5 frames.
        let f = [0.0, 1.0, 2.0, 3.0, 4.0, 10.0, 11.0, 12.0, 13.0, 14.0];
        assert_eq!(
            window_features(&f, 2, 5, (3, 2), 3, 0.0),
            vec![3.0, 4.0, 0.0, 13.0, 14.0, 0.0]
        );
        assert_eq!(
            window_features(&f, 2, 5, (1, 9), 2, -7.0),
            vec![1.0, 2.0, 11.0, 12.0]
        );
        assert_eq!(
            window_features(&f, 2, 5, (4, 1), 3, -7.0),
            vec![4.0, -7.0, -7.0, 14.0, -7.0, -7.0]
        );
    }

    /// Silence pads with what the front end gives a silent frame of the
    /// same recording: the floor its clamp sets.
    #[test]
    fn silence_is_the_recordings_floor() {
        use crate::graph::Runner;
        use crate::models::whisper::graphs;
        use crate::ops::Tensor;
        // a tone, then a second of digital silence
        let mut audio: Vec<f32> = (0..16_000).map(|i| 0.5 * (i as f32 * 0.07).sin()).collect();
        audio.extend(std::iter::repeat_n(0.0, 16_000));
        let mut front = Runner::new(graphs::frontend(80).unwrap()).unwrap();
        front.step(&[&Tensor::from_slice(&audio)]).unwrap();
        let features = front.output(0).to_f32_vec();
        let frames = features.len() / 80;
        // a frame well inside the silence, every mel bin
        let silent: Vec<f32> = (0..80).map(|m| features[m * frames + 150]).collect();
        let pad = WindowPadding::Silence.value(&features);
        assert!(
            silent.iter().all(|&v| (v - pad).abs() <= 1e-6),
            "{pad} vs {:?}",
            &silent[..4]
        );
        assert_eq!(WindowPadding::Zeros.value(&features), 0.0);
        // all silence: the floor of log10(1e-10)
        assert_eq!(WindowPadding::Silence.value(&[-1.5; 8]), -1.5);
        assert_eq!(WindowPadding::Silence.value(&[]), -1.5);
    }
}
