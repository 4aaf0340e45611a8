//! A whole recording (faster-whisper's `transcribe`): the recording's
//! features, its language, the suppressed tokens, then the long-audio loop
//! (`generate_segments.rs`).

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::generate_segments::{Cursor, Run};
use super::language::{detect_language, Detection};
use super::window::padding_for;
use super::words::Word;
use super::{DecodeOptions, Network};
use crate::models::whisper::{GenerationConfig, WhisperError, WhisperTokenizer};
use crate::Result;

/// Samples per second of the audio `transcribe` takes.
pub const SAMPLE_RATE: usize = 16_000;
/// Seconds per feature frame.
pub(crate) const TIME_PER_FRAME: f64 = 0.01;

/// A piece of transcript, as faster-whisper yields it.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// 1, 2, ... in order.
    pub id: usize,
    /// Feature frame where its window starts.
    pub seek: usize,
    /// Seconds in the recording.
    pub start: f64,
    pub end: f64,
    pub text: String,
    /// Its tokens, timestamps included.
    pub tokens: Vec<u32>,
    /// Of the window's accepted decoding.
    pub avg_logprob: f64,
    pub compression_ratio: f64,
    pub no_speech_prob: f64,
    pub temperature: f64,
    /// With `word_timestamps`.
    pub words: Option<Vec<Word>>,
}

/// What was transcribed.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptionInfo {
    /// Language code, given or detected.
    pub language: String,
    /// 1 when given.
    pub language_probability: f64,
    /// Seconds of audio.
    pub duration: f64,
    /// Every language's probability, best first, when detected.
    pub all_language_probs: Option<Vec<(String, f64)>>,
}

/// Transcribes `audio` (16 kHz mono samples) the way faster-whisper 1.2.1
/// does on CTranslate2, calling `on_segment` with each segment as soon as
/// its window is decoded (memory stays that of one window's decoding plus
/// the recording's features).
///
/// `network` runs the model; word timestamps (`opts.word_timestamps`) need
/// [`Network::Aligned`]. `tokenizer` and `gen` come from the same
/// checkpoint folder. Returns the language (given, or detected on the
/// first window of a multilingual checkpoint), its probability and the
/// duration. Errors: options that cannot work (beam 0, no temperature,
/// word timestamps without alignment), a language the model lacks, a
/// prompt longer than the model's positions, backend failures, and any
/// error `on_segment` returns (which stops the run).
pub fn transcribe(
    mut network: Network<'_>,
    tokenizer: &WhisperTokenizer,
    gen: &GenerationConfig,
    audio: &[f32],
    opts: &DecodeOptions,
    on_segment: impl FnMut(Segment) -> Result<()>,
) -> Result<TranscriptionInfo> {
    check_options(opts, &network)?;
    let features = network.backend().log_mel(audio)?;
    let duration = audio.len() as f64 / SAMPLE_RATE as f64;
    transcribe_features(
        network, tokenizer, gen, &features, duration, opts, on_segment,
    )
}

/// [`transcribe`] from the recording's features (`[n_mels, samples / 160 +
/// 1]` as [`WhisperBackend::log_mel`](crate::models::whisper::WhisperBackend::log_mel)
/// gives them, e.g. streamed by
/// [`FeatureStream`](crate::models::whisper::features::FeatureStream) so that the
/// audio itself is never held) and its length in seconds.
pub fn transcribe_features(
    mut network: Network<'_>,
    tokenizer: &WhisperTokenizer,
    gen: &GenerationConfig,
    features: &[f32],
    duration: f64,
    opts: &DecodeOptions,
    mut on_segment: impl FnMut(Segment) -> Result<()>,
) -> Result<TranscriptionInfo> {
    let mut started = start(&mut network, tokenizer, gen, features, duration, opts)?;
    let run = &mut started.run;
    run.generate_segments(&mut network, &mut started.cursor, &mut on_segment)?;
    Ok(started.info)
}

/// A recording ready for the long-audio loop: its settings and language,
/// its cursor at the start, and what [`transcribe_features`] returns.
pub(crate) struct Started<'a, 'f> {
    pub run: Run<'a>,
    pub cursor: Cursor<'f>,
    pub info: TranscriptionInfo,
}

/// Checks `opts` and `features`, detects the language when asked (which
/// encodes the detection windows), and sets up the loop.
pub(crate) fn start<'a, 'f>(
    network: &mut Network<'_>,
    tokenizer: &'a WhisperTokenizer,
    gen: &'a GenerationConfig,
    features: &'f [f32],
    duration: f64,
    opts: &'a DecodeOptions,
) -> Result<Started<'a, 'f>> {
    check_options(opts, network)?;
    let sp = *tokenizer.special();
    let n_mels = network.backend().n_mels();
    if n_mels == 0 || features.is_empty() || !features.len().is_multiple_of(n_mels) {
        return Err(WhisperError::BackendShape {
            what: "log-mel features",
            expected: n_mels * ((duration * SAMPLE_RATE as f64) as usize / 160 + 1),
            got: features.len(),
        }
        .into());
    }
    let frames = features.len() / n_mels;
    let content_frames = frames - 1;
    let model_multilingual = gen.is_multilingual;
    let languages: &[(String, u32)] = if gen.lang_to_id.is_empty() {
        tokenizer.languages()
    } else {
        &gen.lang_to_id
    };

    let clips = seek_clips(&opts.clip_timestamps, content_frames);
    let pad = padding_for(opts.padding, network.backend()).value(features);
    let (language, language_probability, all_language_probs) = match &opts.language {
        _ if !model_multilingual => ("en".to_string(), 1.0, None),
        Some(code) => (code.clone(), 1.0, None),
        None => {
            let seek = clips.first().map_or(0, |c| c.0);
            let seek = if seek < content_frames { seek } else { 0 };
            let detection = Detection {
                sot: sp.sot,
                languages,
                segments: opts.language_detection_segments,
                threshold: opts.language_detection_threshold,
                pad,
            };
            let found = detect_language(network.backend(), features, frames, seek, &detection)?;
            let all = found.all.into_iter().map(|(c, p)| (c, p as f64)).collect();
            (found.language, found.probability as f64, Some(all))
        }
    };

    let suppress = suppressed_tokens(tokenizer, opts.suppress_tokens.as_deref())?;
    let suppress_begin = if opts.suppress_blank {
        gen.begin_suppress_tokens.clone()
    } else {
        Vec::new()
    };
    let run = Run {
        tokenizer,
        opts,
        gen,
        multilingual: model_multilingual,
        languages,
        language: language.clone(),
        suppress,
        suppress_begin,
        rng: StdRng::seed_from_u64(opts.seed),
    };
    let cursor = run.cursor(features, frames, pad, clips)?;
    Ok(Started {
        run,
        cursor,
        info: TranscriptionInfo {
            language,
            language_probability,
            duration,
            all_language_probs,
        },
    })
}

fn check_options(opts: &DecodeOptions, network: &Network<'_>) -> Result<()> {
    let bad = |option, reason: &str| -> Result<()> {
        Err(WhisperError::Option {
            option,
            reason: reason.to_string(),
        }
        .into())
    };
    if opts.beam_size == 0 {
        return bad("beam_size", "must be at least 1");
    }
    if opts.best_of == 0 {
        return bad("best_of", "must be at least 1");
    }
    if opts.patience <= 0.0 {
        return bad("patience", "must be above 0");
    }
    if opts.temperatures.is_empty() {
        return bad("temperatures", "needs at least one temperature");
    }
    if opts.word_timestamps && matches!(network, Network::Plain(_)) {
        return bad("word_timestamps", "the backend gives no cross-attention");
    }
    Ok(())
}

/// `(start, end)` frame ranges to decode, from `start, end, ...` seconds.
fn seek_clips(clip_timestamps: &[f64], content_frames: usize) -> Vec<(usize, usize)> {
    let mut points: Vec<usize> = clip_timestamps
        .iter()
        .map(|&t| (t * 100.0).round_ties_even().max(0.0) as usize)
        .collect();
    if points.is_empty() {
        points.push(0);
    }
    if points.len() % 2 == 1 {
        points.push(content_frames);
    }
    points.chunks_exact(2).map(|p| (p[0], p[1])).collect()
}

/// faster-whisper's `get_suppressed_tokens`: `-1` becomes the non-speech
/// symbols; the task, start and no-speech tokens are always added; `None`
/// or empty suppresses nothing.
pub fn suppressed_tokens(tokenizer: &WhisperTokenizer, ids: Option<&[i64]>) -> Result<Vec<u32>> {
    let Some(ids) = ids.filter(|i| !i.is_empty()) else {
        return Ok(Vec::new());
    };
    let mut out: Vec<u32> = ids.iter().filter_map(|&i| u32::try_from(i).ok()).collect();
    if ids.contains(&-1) {
        out.extend(tokenizer.non_speech_tokens()?);
    }
    let sp = tokenizer.special();
    out.extend([
        sp.transcribe,
        sp.translate,
        sp.sot,
        sp.sot_prev,
        sp.sot_lm,
        sp.no_speech,
    ]);
    out.sort_unstable();
    out.dedup();
    Ok(out)
}
