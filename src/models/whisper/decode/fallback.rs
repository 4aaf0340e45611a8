//! Temperature fallback (faster-whisper's `generate_with_fallback`): a
//! window is decoded at each temperature in turn until its text is neither
//! too repetitive (zlib compression ratio) nor too unlikely (average log
//! probability), unless it looks like silence.

use std::io::Write;

use flate2::write::ZlibEncoder;
use flate2::Compression;
use rand::rngs::StdRng;

use super::generate::{generate, GenerateParams, Generation, Strategy};
use super::DecodeOptions;
use crate::models::whisper::tokenizer::py_strip;
use crate::models::whisper::{WhisperBackend, WhisperTokenizer};
use crate::Result;

/// A window's accepted result and how it was reached.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decoded {
    pub result: Generation,
    /// Summed log-probability over (length + 1): the end of text counts.
    pub avg_logprob: f64,
    /// The last temperature tried (what the prompt reset compares).
    pub temperature: f64,
    pub compression_ratio: f64,
}

/// UTF-8 length of `text` over its zlib-compressed length (Python's
/// `zlib.compress` at its default level, 6).
pub fn compression_ratio(text: &str) -> f64 {
    let bytes = text.as_bytes();
    let mut enc = ZlibEncoder::new(Vec::new(), Compression::new(6));
    // Writing into a Vec cannot fail.
    let compressed = enc
        .write_all(bytes)
        .and_then(|_| enc.finish())
        .map(|v| v.len())
        .unwrap_or(1);
    bytes.len() as f64 / compressed as f64
}

/// Decodes encoded window 0 from `prompt`, falling back to higher
/// temperatures while the result fails the checks. `first`, when given,
/// is the window's decoding at the first temperature (0), made elsewhere.
pub(crate) fn generate_with_fallback(
    backend: &mut dyn WhisperBackend,
    tokenizer: &WhisperTokenizer,
    prompt: &[u32],
    params: &GenerateParams,
    opts: &DecodeOptions,
    rng: &mut StdRng,
    mut first: Option<Generation>,
) -> Result<Decoded> {
    let mut all: Vec<Decoded> = Vec::new();
    let mut below_cr: Vec<Decoded> = Vec::new();
    let mut last_temperature = 0.0;
    for &temperature in &opts.temperatures {
        last_temperature = temperature;
        let strategy = if temperature > 0.0 {
            Strategy::Sample {
                temperature: temperature as f32,
                best_of: opts.best_of,
                rng: &mut *rng,
            }
        } else {
            Strategy::Beam {
                size: opts.beam_size,
                patience: opts.patience,
            }
        };
        let result = match first.take() {
            Some(made) => made,
            None => generate(backend, prompt, params, strategy)?,
        };
        let seq_len = result.tokens.len() as f64;
        let cum_logprob = result.score as f64 * seq_len.powf(opts.length_penalty as f64);
        let avg_logprob = cum_logprob / (seq_len + 1.0);
        let text = tokenizer.decode(&result.tokens)?;
        let ratio = compression_ratio(py_strip(&text));
        let decoded = Decoded {
            result,
            avg_logprob,
            temperature,
            compression_ratio: ratio,
        };

        let mut needs_fallback = false;
        if opts.cut_fails && decoded.result.cut {
            needs_fallback = true; // a loop cut short: as too repetitive
        } else if let Some(threshold) = opts.compression_ratio_threshold {
            if ratio > threshold {
                needs_fallback = true; // too repetitive
            } else {
                below_cr.push(decoded.clone());
            }
        }
        let low_logprob = opts.log_prob_threshold.is_some_and(|t| avg_logprob < t);
        if low_logprob {
            needs_fallback = true;
        }
        let silent = opts
            .no_speech_threshold
            .is_some_and(|t| decoded.result.no_speech_prob as f64 > t);
        if silent && low_logprob {
            needs_fallback = false;
        }
        all.push(decoded);
        if !needs_fallback {
            return Ok(all.pop().expect("just pushed"));
        }
    }
    // Every temperature failed: the likeliest result, preferring those
    // that were not too repetitive, with the last temperature tried.
    let pool = if below_cr.is_empty() { all } else { below_cr };
    let mut best: Option<Decoded> = None;
    for d in pool {
        // Python's max keeps the first of equal keys.
        if best.as_ref().is_none_or(|b| d.avg_logprob > b.avg_logprob) {
            best = Some(d);
        }
    }
    let mut best = best.ok_or_else(|| crate::models::whisper::WhisperError::Option {
        option: "temperatures",
        reason: "no temperature to decode with".to_string(),
    })?;
    best.temperature = last_temperature;
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_ratio_matches_python_zlib() {
        // len(t.encode()) / len(zlib.compress(t.encode())) in Python 3.11
        // (zlib 1.2.13).
        let cases = [
            ("Hello world", 11.0 / 19.0),
            ("", 0.0),
            (
                "the cat sat on the mat the cat sat on the mat the cat sat on the mat",
                68.0 / 30.0,
            ),
            (
                "I don't know. I don't know. I don't know. I don't know. ",
                56.0 / 25.0,
            ),
        ];
        for (text, expected) in cases {
            let r = compression_ratio(text);
            assert!((r - expected).abs() < 1e-12, "{text:?}: {r} vs {expected}");
        }
        let long = "I don't know. ".repeat(40);
        assert_eq!(compression_ratio(&long), 20.0);
    }
}
