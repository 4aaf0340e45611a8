//! Spoken-language detection for multilingual checkpoints: the decoder's
//! logits after `<|startoftranscript|>`, softmaxed over the language tokens
//! only (CTranslate2's `detect_language`), over the first windows as
//! faster-whisper's `detect_language` walks them.

use super::window::window_features;
use crate::models::whisper::{WhisperBackend, WhisperError};
use crate::Result;

/// Language probabilities of the encoded window 0, best first: `(code,
/// probability)` for each of `languages` (code, token id).
pub(crate) fn language_probs(
    backend: &mut dyn WhisperBackend,
    sot: u32,
    languages: &[(String, u32)],
) -> Result<LanguageProbs> {
    let vocab = backend.vocab_size();
    backend.start(&[0])?;
    let mut logits = Vec::new();
    backend.feed(&[sot], 1, &[0], &mut logits)?;
    if logits.len() != vocab {
        return Err(WhisperError::BackendShape {
            what: "decoder logits",
            expected: vocab,
            got: logits.len(),
        }
        .into());
    }
    let scores: Vec<f32> = languages
        .iter()
        .map(|&(_, id)| logits.get(id as usize).copied().unwrap_or(f32::MIN))
        .collect();
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = scores.iter().map(|&s| (s - max).exp()).sum();
    let mut probs: Vec<(String, f32)> = languages
        .iter()
        .zip(&scores)
        .map(|((code, _), &s)| (code.clone(), (s - max).exp() / sum))
        .collect();
    probs.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
    Ok(probs)
}

/// Languages and their probabilities, best first.
pub(crate) type LanguageProbs = Vec<(String, f32)>;

/// A detected language.
pub(crate) struct Detected {
    pub language: String,
    pub probability: f32,
    /// Every language's probability in the last window tried.
    pub all: LanguageProbs,
}

/// How to detect the language.
pub(crate) struct Detection<'a> {
    pub sot: u32,
    /// Codes and token ids, in id order.
    pub languages: &'a [(String, u32)],
    /// Windows tried at most.
    pub segments: usize,
    /// A window's best language above this decides.
    pub threshold: f64,
    /// The value of the frames padding a window.
    pub pad: f32,
}

/// The detected language, its probability and every language's, over up
/// to `segments` windows of `features` (`[n_mels, frames]`) from frame
/// `seek`: the first window whose best language is above `threshold`
/// decides, else the language that came first most often, with its
/// highest probability.
pub(crate) fn detect_language(
    backend: &mut dyn WhisperBackend,
    features: &[f32],
    frames: usize,
    seek: usize,
    d: &Detection,
) -> Result<Detected> {
    let (sot, languages, threshold) = (d.sot, d.languages, d.threshold);
    let n_mels = backend.n_mels();
    let size = backend.window_frames();
    let frames_used = (frames - seek.min(frames)).min(d.segments.max(1) * size);
    // Per language: how often it came first and its probabilities then.
    let mut votes: Vec<(String, Vec<f32>)> = Vec::new();
    let mut all = Vec::new();
    let mut start = 0;
    while start < frames_used.max(1) {
        let len = (frames_used - start.min(frames_used)).min(size);
        let window = window_features(features, n_mels, frames, (seek + start, len), size, d.pad);
        backend.encode(&[&window])?;
        all = language_probs(backend, sot, languages)?;
        let (code, p) = all
            .first()
            .cloned()
            .ok_or_else(|| WhisperError::UnknownLanguage {
                code: "(the model lists no language)".to_string(),
            })?;
        if p as f64 > threshold {
            return Ok(Detected {
                language: code,
                probability: p,
                all,
            });
        }
        match votes.iter_mut().find(|(c, _)| *c == code) {
            Some((_, ps)) => ps.push(p),
            None => votes.push((code, vec![p])),
        }
        start += size;
    }
    // Python's max keeps the first of equal counts (dicts keep insertion order).
    let mut best: Option<&(String, Vec<f32>)> = None;
    for v in &votes {
        if best.is_none_or(|b| v.1.len() > b.1.len()) {
            best = Some(v);
        }
    }
    let (code, ps) = best.expect("at least one window");
    Ok(Detected {
        language: code.clone(),
        probability: ps.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        all,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::whisper::decode::testing::Scripted;

    fn langs() -> Vec<(String, u32)> {
        vec![("en".into(), 2), ("fr".into(), 3), ("de".into(), 4)]
    }

    #[test]
    fn softmax_over_language_tokens_only() {
        let mut b = Scripted::new(8, |_w, _s: &[u32]| {
            vec![9.0, 9.0, 1.0, 3.0, 2.0, 9.0, 9.0, 9.0]
        });
        b.encode(&[&[]]).unwrap();
        let p = language_probs(&mut b, 1, &langs()).unwrap();
        let z = 1f32.exp() + 3f32.exp() + 2f32.exp();
        assert_eq!(p[0].0, "fr");
        assert!((p[0].1 - 3f32.exp() / z).abs() < 1e-6);
        assert_eq!(p[2].0, "en");
    }

    #[test]
    fn unsure_windows_vote() {
        // Window features carry a marker: windows starting with 1.0 lean
        // French, others German, never above the threshold.
        let mut b = Scripted::new(8, |w, _s: &[u32]| {
            if w.first() == Some(&1.0) {
                vec![0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0]
            } else {
                vec![0.0, 0.0, 0.0, 0.0, 0.4, 0.0, 0.0, 0.0]
            }
        });
        b.n_mels = 1;
        b.window_frames = 4;
        // Three windows: German, French, German.
        let features = [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let langs = langs();
        let d = |segments| Detection {
            sot: 1,
            languages: &langs,
            segments,
            threshold: 0.5,
            pad: 0.0,
        };
        let found = detect_language(&mut b, &features, 12, 0, &d(3)).unwrap();
        let (code, p) = (found.language, found.probability);
        assert_eq!(code, "de");
        let z = 2.0 + 0.4f32.exp();
        assert!((p - 0.4f32.exp() / z).abs() < 1e-6);
        // With one window only, the first decides.
        let found = detect_language(&mut b, &features, 12, 0, &d(1)).unwrap();
        assert_eq!((found.language.as_str(), found.all.len()), ("de", 3));
        // From frame 4 on, French comes first.
        let found = detect_language(&mut b, &features, 12, 4, &d(1)).unwrap();
        assert_eq!(found.language, "fr");
    }
}
