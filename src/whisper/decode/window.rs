//! One encoder window cut from a whole recording's features, padded with
//! zeros (faster-whisper's `pad_or_trim`).

/// Frames `[start, start + len)` of `features` (`[n_mels, frames]`
/// row-major) as a `[n_mels, size]` window, zeros after them.
pub(crate) fn window_features(
    features: &[f32],
    n_mels: usize,
    frames: usize,
    start: usize,
    len: usize,
    size: usize,
) -> Vec<f32> {
    let len = len.min(size).min(frames.saturating_sub(start));
    let mut out = vec![0.0; n_mels * size];
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
            window_features(&f, 2, 5, 3, 2, 3),
            vec![3.0, 4.0, 0.0, 13.0, 14.0, 0.0]
        );
        assert_eq!(
            window_features(&f, 2, 5, 1, 9, 2),
            vec![1.0, 2.0, 11.0, 12.0]
        );
    }
}
