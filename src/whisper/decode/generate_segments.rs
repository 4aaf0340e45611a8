//! The long-audio loop (faster-whisper's `generate_segments`): a 30 s
//! window at `seek`, its decoding with fallback, a skip when it is
//! silence, its segments handed out one by one (with words when asked),
//! and the next `seek` from its last timestamp or last word.

use rand::rngs::StdRng;

use super::align::AlignSpec;
use super::fallback::generate_with_fallback;
use super::generate::GenerateParams;
use super::hallucination::{self, Cut, WindowTimes};
use super::language::language_probs;
use super::prompt::{get_prompt, PromptSpec};
use super::segments::{split_segments_by_timestamps, TIME_PRECISION};
use super::transcribe::{Segment, TIME_PER_FRAME};
use super::window::window_features;
use super::words::{add_word_timestamps, WordSegment};
use super::{DecodeOptions, InitialPrompt, Network};
use crate::whisper::tokenizer::py_strip;
use crate::whisper::{GenerationConfig, WhisperError, WhisperTokenizer};
use crate::Result;

/// Width of the median filter over the alignment heads' attention.
const MEDIAN_FILTER_WIDTH: usize = 7;

/// The long-audio loop's fixed settings and running language.
pub(crate) struct Run<'a> {
    pub tokenizer: &'a WhisperTokenizer,
    pub opts: &'a DecodeOptions,
    pub gen: &'a GenerationConfig,
    /// The checkpoint takes language and task tokens.
    pub multilingual: bool,
    /// Codes and token ids for detection, in id order.
    pub languages: &'a [(String, u32)],
    /// The language of the next window.
    pub language: String,
    /// Suppressed at every step.
    pub suppress: Vec<u32>,
    /// Suppressed at the first free step.
    pub suppress_begin: Vec<u32>,
    /// The sampler of temperatures above 0.
    pub rng: StdRng,
}

impl Run<'_> {
    pub(crate) fn generate_segments(
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
