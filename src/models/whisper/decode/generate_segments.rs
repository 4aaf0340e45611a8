//! The long-audio loop (faster-whisper's `generate_segments`): a 30 s
//! window at `seek`, its decoding with fallback, a skip when it is
//! silence, its segments handed out one by one (with words when asked),
//! and the next `seek` from its last timestamp or last word.

use rand::rngs::StdRng;

use super::align::AlignSpec;
use super::fallback::generate_with_fallback;
use super::generate::{GenerateParams, Generation};
use super::hallucination::{self, Cut, WindowTimes};
use super::language::language_probs;
use super::prompt::{get_prompt, PromptSpec};
use super::segments::{split_segments_by_timestamps, TIME_PRECISION};
use super::transcribe::{Segment, TIME_PER_FRAME};
use super::window::window_features;
use super::words::{add_word_timestamps, WordSegment};
use super::{DecodeOptions, InitialPrompt, Network};
use crate::models::whisper::tokenizer::py_strip;
use crate::models::whisper::{GenerationConfig, SpecialTokens, WhisperTokenizer};
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

/// Where the long-audio loop stands in one recording: the recording's
/// features and clips, the text so far (the next prompt's) and the seek.
pub(crate) struct Cursor<'f> {
    features: &'f [f32],
    frames: usize,
    /// The value of the frames padding a window.
    pad: f32,
    clips: Vec<(usize, usize)>,
    all_tokens: Vec<u32>,
    prompt_reset_since: usize,
    idx: usize,
    clip_idx: usize,
    seek: usize,
    last_speech_timestamp: f64,
}

/// The next window of a recording: where it starts, how many frames of
/// content it holds, and its features padded to a whole window.
pub(crate) struct Planned {
    pub seek: usize,
    pub segment_size: usize,
    pub window: Vec<f32>,
}

/// A window's prompt and what it sets.
pub(crate) struct WindowPrompt {
    pub sot_sequence: Vec<u32>,
    pub prompt: Vec<u32>,
    pub max_length: usize,
}

/// A recording's next window decoded elsewhere (with other recordings'):
/// the window [`Run::next_window`] gave, its [`Run::window_prompt`], and
/// its decoding at temperature 0 from that prompt.
pub(crate) struct Prefetched {
    pub planned: Planned,
    pub prompt: WindowPrompt,
    pub result: Generation,
}

impl Run<'_> {
    /// A cursor at the start of a recording's `features` (`[n_mels,
    /// frames]`), decoding the frame ranges `clips`, its windows padded
    /// with `pad`.
    pub(crate) fn cursor<'f>(
        &self,
        features: &'f [f32],
        frames: usize,
        pad: f32,
        clips: Vec<(usize, usize)>,
    ) -> Result<Cursor<'f>> {
        let all_tokens = match &self.opts.initial_prompt {
            Some(InitialPrompt::Text(t)) => self.tokenizer.encode(&format!(" {}", t.trim()))?,
            Some(InitialPrompt::Tokens(t)) => t.clone(),
            None => Vec::new(),
        };
        let seek = clips.first().map_or(0, |c| c.0);
        Ok(Cursor {
            features,
            frames,
            pad,
            clips,
            all_tokens,
            prompt_reset_since: 0,
            idx: 0,
            clip_idx: 0,
            seek,
            last_speech_timestamp: 0.0,
        })
    }

    /// Every window of the recording under `cur`, each segment handed to
    /// `on_segment` as its window is decoded.
    pub(crate) fn generate_segments(
        &mut self,
        network: &mut Network<'_>,
        cur: &mut Cursor<'_>,
        on_segment: &mut dyn FnMut(Segment) -> Result<()>,
    ) -> Result<()> {
        let mut windows = 0;
        while self.opts.max_windows.is_none_or(|m| windows < m)
            && self.step(network, cur, None, on_segment)?
        {
            windows += 1;
        }
        Ok(())
    }

    /// Moves `cur` past finished clips and gives the window it decodes
    /// next, or `None` at the end of the recording.
    pub(crate) fn next_window(
        &self,
        cur: &mut Cursor<'_>,
        n_mels: usize,
        window_frames: usize,
    ) -> Option<Planned> {
        let content_frames = cur.frames - 1;
        loop {
            let &(clip_start, clip_end) = cur.clips.get(cur.clip_idx)?;
            let clip_end = clip_end.min(content_frames);
            cur.seek = cur.seek.max(clip_start);
            if cur.seek < clip_end {
                let segment_size = window_frames
                    .min(content_frames - cur.seek)
                    .min(clip_end - cur.seek);
                let window = window_features(
                    cur.features,
                    n_mels,
                    cur.frames,
                    (cur.seek, segment_size),
                    window_frames,
                    cur.pad,
                );
                return Some(Planned {
                    seek: cur.seek,
                    segment_size,
                    window,
                });
            }
            cur.clip_idx += 1;
            if let Some(&(start, _)) = cur.clips.get(cur.clip_idx) {
                cur.seek = start;
            }
        }
    }

    /// The prompt of the window at `cur`'s seek, in the current language.
    /// `segment_size`: the window's frames of audio.
    pub(crate) fn window_prompt(
        &self,
        cur: &Cursor<'_>,
        segment_size: usize,
    ) -> Result<WindowPrompt> {
        let opts = self.opts;
        let sot_sequence =
            self.tokenizer
                .sot_sequence(self.multilingual, &self.language, opts.task)?;
        let prompt = get_prompt(
            self.tokenizer,
            &cur.all_tokens[cur.prompt_reset_since..],
            &PromptSpec {
                sot_sequence: &sot_sequence,
                without_timestamps: opts.without_timestamps,
                prefix: if cur.seek == 0 {
                    opts.prefix.as_deref()
                } else {
                    None
                },
                hotwords: opts.hotwords.as_deref(),
                max_length: self.gen.max_length,
            },
        )?;
        let seconds = segment_size as f64 * TIME_PER_FRAME;
        let max_length = opts.window_max_length(prompt.len(), seconds, self.gen.max_length)?;
        Ok(WindowPrompt {
            sot_sequence,
            prompt,
            max_length,
        })
    }

    /// Whether a window's first decoding can come from elsewhere (decoded
    /// with other recordings' windows): its prompt must not wait for the
    /// window's own language, and the first temperature must be 0.
    pub(crate) fn can_prefetch(&self) -> bool {
        !(self.opts.multilingual && self.multilingual)
            && self.opts.temperatures.first() == Some(&0.0)
    }

    /// Decodes the next window of `cur` and hands out its segments; false
    /// at the end of the recording. With `prefetched` (see
    /// [`Run::can_prefetch`]), the window is already encoded as
    /// `network`'s window 0 and decoded at temperature 0: it is not
    /// encoded or decoded again.
    pub(crate) fn step(
        &mut self,
        network: &mut Network<'_>,
        cur: &mut Cursor<'_>,
        prefetched: Option<Prefetched>,
        on_segment: &mut dyn FnMut(Segment) -> Result<()>,
    ) -> Result<bool> {
        let (opts, tokenizer) = (self.opts, self.tokenizer);
        let sp = *tokenizer.special();
        let window_frames = network.backend().window_frames();
        let content_frames = cur.frames - 1;
        let (
            Planned {
                seek, segment_size, ..
            },
            wp,
            first,
        ) = match prefetched {
            Some(p) => (p.planned, p.prompt, Some(p.result)),
            None => {
                let n_mels = network.backend().n_mels();
                let Some(planned) = self.next_window(cur, n_mels, window_frames) else {
                    return Ok(false);
                };
                network.backend().encode(&[&planned.window])?;
                if opts.multilingual && self.multilingual {
                    let probs = language_probs(network.backend(), sp.sot, self.languages)?;
                    if let Some((code, _)) = probs.into_iter().next() {
                        self.language = code;
                    }
                }
                let wp = self.window_prompt(cur, planned.segment_size)?;
                (planned, wp, None)
            }
        };
        let time_offset = seek as f64 * TIME_PER_FRAME;
        let segment_duration = segment_size as f64 * TIME_PER_FRAME;
        let params = window_params(opts, &self.suppress, &self.suppress_begin, &sp, &wp);
        let decoded = generate_with_fallback(
            network.backend(),
            tokenizer,
            &wp.prompt,
            &params,
            opts,
            &mut self.rng,
            first,
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
                cur.seek += segment_size;
                return Ok(true);
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
        cur.seek = split.seek;
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
                sot_sequence: &wp.sot_sequence,
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
                cur.last_speech_timestamp,
            )?;
            if !split.single_timestamp_ending {
                if let Some(end) = get_end(&current) {
                    if end > time_offset {
                        cur.seek = (end * 100.0).round_ties_even() as usize;
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
                match hallucination::check(&current, threshold, &times, cur.last_speech_timestamp) {
                    Cut::Keep => {}
                    Cut::SkipWindow { seek: next } => {
                        cur.seek = next;
                        return Ok(true);
                    }
                    Cut::Truncate { at, seek: next } => {
                        cur.seek = next;
                        current.truncate(at);
                    }
                }
            }
            if let Some(end) = get_end(&current) {
                cur.last_speech_timestamp = end;
            }
        }

        for seg in current {
            let text = tokenizer.decode(&seg.raw.tokens)?;
            if seg.raw.start == seg.raw.end || py_strip(&text).is_empty() {
                continue;
            }
            cur.all_tokens.extend(&seg.raw.tokens);
            cur.idx += 1;
            on_segment(Segment {
                id: cur.idx,
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
            cur.prompt_reset_since = cur.all_tokens.len();
        }
        Ok(true)
    }
}

/// The parameters of a window's generation under `prompt`.
pub(crate) fn window_params<'p>(
    opts: &DecodeOptions,
    suppress: &'p [u32],
    suppress_begin: &'p [u32],
    sp: &'p SpecialTokens,
    prompt: &WindowPrompt,
) -> GenerateParams<'p> {
    GenerateParams {
        special: sp,
        max_length: prompt.max_length,
        length_penalty: opts.length_penalty,
        repetition_penalty: opts.repetition_penalty,
        no_repeat_ngram_size: opts.no_repeat_ngram_size,
        suppress,
        suppress_begin,
        max_initial_timestamp_index: (opts.max_initial_timestamp / TIME_PRECISION).round_ties_even()
            as usize,
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
