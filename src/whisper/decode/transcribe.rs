//! A whole recording, window by window (faster-whisper's `transcribe` and
//! `generate_segments`): features of the whole recording, a 30 s window at
//! `seek`, its decoding with fallback, a skip when it is silence, its
//! segments handed out one by one, and the next `seek` from its last
//! timestamp (or last word).

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::align::AlignSpec;
use super::fallback::generate_with_fallback;
use super::generate::GenerateParams;
use super::hallucination::{self, Cut, WindowTimes};
use super::language::{detect_language, language_probs, Detection};
use super::prompt::{get_prompt, PromptSpec};
use super::segments::{split_segments_by_timestamps, TIME_PRECISION};
use super::window::window_features;
use super::words::{add_word_timestamps, Word, WordSegment};
use super::{DecodeOptions, InitialPrompt, Network};
use crate::whisper::tokenizer::py_strip;
use crate::whisper::{GenerationConfig, WhisperError, WhisperTokenizer};
use crate::Result;

/// Samples per second of the audio `transcribe` takes.
pub const SAMPLE_RATE: usize = 16_000;
/// Seconds per feature frame.
const TIME_PER_FRAME: f64 = 0.01;
/// Width of the median filter over the alignment heads' attention.
const MEDIAN_FILTER_WIDTH: usize = 7;

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
    mut on_segment: impl FnMut(Segment) -> Result<()>,
) -> Result<TranscriptionInfo> {
    check_options(opts, &network)?;
    let duration = audio.len() as f64 / SAMPLE_RATE as f64;
    let sp = *tokenizer.special();
    let backend = network.backend();
    let n_mels = backend.n_mels();
    let features = backend.log_mel(audio)?;
    if n_mels == 0 || features.is_empty() || features.len() % n_mels != 0 {
        return Err(WhisperError::BackendShape {
            what: "log-mel features",
            expected: n_mels * (audio.len() / 160 + 1),
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
            };
            let found = detect_language(network.backend(), &features, frames, seek, &detection)?;
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
    let mut run = Run {
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
    run.generate_segments(&mut network, &features, frames, &clips, &mut on_segment)?;
    Ok(TranscriptionInfo {
        language,
        language_probability,
        duration,
        all_language_probs,
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
pub(crate) fn suppressed_tokens(
    tokenizer: &WhisperTokenizer,
    ids: Option<&[i64]>,
) -> Result<Vec<u32>> {
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

/// The long-audio loop's fixed settings and running language.
struct Run<'a> {
    tokenizer: &'a WhisperTokenizer,
    opts: &'a DecodeOptions,
    gen: &'a GenerationConfig,
    multilingual: bool,
    languages: &'a [(String, u32)],
    language: String,
    suppress: Vec<u32>,
    suppress_begin: Vec<u32>,
    rng: StdRng,
}

impl Run<'_> {
    fn generate_segments(
        &mut self,
        network: &mut Network<'_>,
        features: &[f32],
        frames: usize,
        clips: &[(usize, usize)],
        on_segment: &mut dyn FnMut(Segment) -> Result<()>,
    ) -> Result<()> {
        let (opts, tokenizer) = (self.opts, self.tokenizer);
        let sp = *tokenizer.special();
        let n_mels = network.backend().n_mels();
        let window_frames = network.backend().window_frames();
        let content_frames = frames - 1;
        let mut all_tokens: Vec<u32> = match &opts.initial_prompt {
            Some(InitialPrompt::Text(t)) => tokenizer.encode(&format!(" {}", t.trim()))?,
            Some(InitialPrompt::Tokens(t)) => t.clone(),
            None => Vec::new(),
        };
        let mut prompt_reset_since = 0;
        let mut idx = 0;
        let mut clip_idx = 0;
        let mut seek = clips[0].0;
        let mut last_speech_timestamp = 0.0;
        let max_initial_timestamp_index =
            (opts.max_initial_timestamp / TIME_PRECISION).round_ties_even() as usize;

        while clip_idx < clips.len() {
            let (clip_start, clip_end) = (clips[clip_idx].0, clips[clip_idx].1.min(content_frames));
            seek = seek.max(clip_start);
            if seek >= clip_end {
                clip_idx += 1;
                if clip_idx < clips.len() {
                    seek = clips[clip_idx].0;
                }
                continue;
            }
            let time_offset = seek as f64 * TIME_PER_FRAME;
            let segment_size = window_frames
                .min(content_frames - seek)
                .min(clip_end - seek);
            let segment_duration = segment_size as f64 * TIME_PER_FRAME;
            let window =
                window_features(features, n_mels, frames, seek, segment_size, window_frames);
            let previous_tokens = &all_tokens[prompt_reset_since..];
            network.backend().encode(&[&window])?;

            if opts.multilingual && self.multilingual {
                let probs = language_probs(network.backend(), sp.sot, self.languages)?;
                if let Some((code, _)) = probs.into_iter().next() {
                    self.language = code;
                }
            }
            let sot_sequence =
                tokenizer.sot_sequence(self.multilingual, &self.language, opts.task)?;
            let prompt = get_prompt(
                tokenizer,
                previous_tokens,
                &PromptSpec {
                    sot_sequence: &sot_sequence,
                    without_timestamps: opts.without_timestamps,
                    prefix: if seek == 0 {
                        opts.prefix.as_deref()
                    } else {
                        None
                    },
                    hotwords: opts.hotwords.as_deref(),
                    max_length: self.gen.max_length,
                },
            )?;
            let max_length = match opts.max_new_tokens {
                Some(n) => prompt.len() + n,
                None => self.gen.max_length,
            };
            if max_length > self.gen.max_length {
                return Err(WhisperError::PromptTooLong {
                    prompt: prompt.len(),
                    max_new_tokens: max_length - prompt.len(),
                    max_length: self.gen.max_length,
                }
                .into());
            }
            let params = GenerateParams {
                special: &sp,
                max_length,
                length_penalty: opts.length_penalty,
                repetition_penalty: opts.repetition_penalty,
                no_repeat_ngram_size: opts.no_repeat_ngram_size,
                suppress: &self.suppress,
                suppress_begin: &self.suppress_begin,
                max_initial_timestamp_index,
            };
            let decoded = generate_with_fallback(
                network.backend(),
                tokenizer,
                &prompt,
                &params,
                opts,
                &mut self.rng,
            )?;

            if let Some(threshold) = opts.no_speech_threshold {
                let mut skip = decoded.result.no_speech_prob as f64 > threshold;
                if opts
                    .log_prob_threshold
                    .is_some_and(|t| decoded.avg_logprob > t)
                {
                    skip = false; // likely enough, whatever the no-speech probability
                }
                if skip {
                    seek += segment_size;
                    continue;
                }
            }

            let previous_seek = seek;
            let split = split_segments_by_timestamps(
                sp.timestamp_begin,
                &decoded.result.tokens,
                time_offset,
                segment_size,
                segment_duration,
                seek,
            );
            seek = split.seek;
            let mut current: Vec<WordSegment> = split
                .segments
                .into_iter()
                .map(|raw| WordSegment {
                    raw,
                    words: Vec::new(),
                })
                .collect();

            if opts.word_timestamps {
                let Network::Aligned(aligned) = network else {
                    unreachable!("checked by check_options");
                };
                let spec = AlignSpec {
                    sot_sequence: &sot_sequence,
                    language: if self.multilingual {
                        &self.language
                    } else {
                        "en"
                    },
                    heads: &self.gen.alignment_heads,
                    num_frames: segment_size,
                    median_filter_width: MEDIAN_FILTER_WIDTH,
                };
                let punctuation = (
                    opts.prepend_punctuations.as_str(),
                    opts.append_punctuations.as_str(),
                );
                add_word_timestamps(
                    &mut **aligned,
                    tokenizer,
                    &mut current,
                    &spec,
                    punctuation,
                    last_speech_timestamp,
                )?;
                if !split.single_timestamp_ending {
                    if let Some(end) = get_end(&current) {
                        if end > time_offset {
                            seek = (end * 100.0).round_ties_even() as usize;
                        }
                    }
                }
                if let Some(threshold) = opts.hallucination_silence_threshold {
                    let times = WindowTimes {
                        seek: previous_seek,
                        time_offset,
                        segment_duration,
                        window_end_time: (previous_seek + window_frames) as f64 * TIME_PER_FRAME,
                        content_frames,
                        content_duration: content_frames as f64 * TIME_PER_FRAME,
                    };
                    match hallucination::check(&current, threshold, &times, last_speech_timestamp) {
                        Cut::Keep => {}
                        Cut::SkipWindow { seek: next } => {
                            seek = next;
                            continue;
                        }
                        Cut::Truncate { at, seek: next } => {
                            seek = next;
                            current.truncate(at);
                        }
                    }
                }
                if let Some(end) = get_end(&current) {
                    last_speech_timestamp = end;
                }
            }

            for seg in current {
                let text = tokenizer.decode(&seg.raw.tokens)?;
                if seg.raw.start == seg.raw.end || py_strip(&text).is_empty() {
                    continue;
                }
                all_tokens.extend(&seg.raw.tokens);
                idx += 1;
                on_segment(Segment {
                    id: idx,
                    seek: previous_seek,
                    start: seg.raw.start,
                    end: seg.raw.end,
                    text,
                    tokens: seg.raw.tokens,
                    avg_logprob: decoded.avg_logprob,
                    compression_ratio: decoded.compression_ratio,
                    no_speech_prob: decoded.result.no_speech_prob as f64,
                    temperature: decoded.temperature,
                    words: opts.word_timestamps.then_some(seg.words),
                })?;
            }
            if !opts.condition_on_previous_text
                || decoded.temperature > opts.prompt_reset_on_temperature
            {
                prompt_reset_since = all_tokens.len();
            }
        }
        Ok(())
    }
}

/// The end of the last word, else of the last segment.
fn get_end(segments: &[WordSegment]) -> Option<f64> {
    segments
        .iter()
        .rev()
        .flat_map(|s| s.words.iter().rev())
        .map(|w| w.end)
        .next()
        .or_else(|| segments.last().map(|s| s.raw.end))
}
