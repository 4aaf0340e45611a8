//! Decoding options, with faster-whisper's `transcribe` defaults but for the
//! window padding ([`WindowPadding`]: silence, as Whisper was trained).

pub use super::window::WindowPadding;
use crate::models::whisper::Task;

/// Text to condition the first window on.
#[derive(Debug, Clone, PartialEq)]
pub enum InitialPrompt {
    /// Encoded as `" " + text.trim()`.
    Text(String),
    /// Taken as they are.
    Tokens(Vec<u32>),
}

/// How to decode: search, fallback, thresholds, prompts, timestamps.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeOptions {
    /// Spoken language code (`en`); `None` detects it on the first window
    /// (multilingual checkpoints; English-only ones are always `en`).
    pub language: Option<String>,
    /// Transcribe, or translate into English.
    pub task: Task,
    /// Beam width at temperature 0 (1: greedy).
    pub beam_size: usize,
    /// Samples drawn at each temperature above 0; the best is kept.
    pub best_of: usize,
    /// Beam search ends once `round(beam_size * patience)` hypotheses ended.
    pub patience: f32,
    /// Scores are divided by `length ^ length_penalty`.
    pub length_penalty: f32,
    /// Logits of tokens already in the output are divided by this (or
    /// multiplied when negative); 1: off.
    pub repetition_penalty: f32,
    /// No n-gram of this size appears twice in the output; 0: off.
    pub no_repeat_ngram_size: usize,
    /// Temperatures tried in turn while a window's result fails the checks.
    pub temperatures: Vec<f64>,
    /// A result whose text compresses better than this (zlib) is too
    /// repetitive.
    pub compression_ratio_threshold: Option<f64>,
    /// A result whose average log probability is below this failed.
    pub log_prob_threshold: Option<f64>,
    /// A window whose no-speech probability is above this, with an average
    /// log probability below `log_prob_threshold`, is silence.
    pub no_speech_threshold: Option<f64>,
    /// Each window's prompt holds the text decoded before it.
    pub condition_on_previous_text: bool,
    /// The previous text is dropped after a window decoded at a temperature
    /// above this.
    pub prompt_reset_on_temperature: f64,
    /// Previous text for the first window.
    pub initial_prompt: Option<InitialPrompt>,
    /// Text the first window's transcript starts with.
    pub prefix: Option<String>,
    /// Hint phrases put in the prompt (when there is no prefix).
    pub hotwords: Option<String>,
    /// Suppresses a blank (space, end of text) as the first sampled token.
    pub suppress_blank: bool,
    /// Token ids never sampled; `-1` stands for the non-speech symbols.
    /// `None` or empty suppresses nothing, not even special tokens.
    pub suppress_tokens: Option<Vec<i64>>,
    /// Text tokens only (no timestamp tokens).
    pub without_timestamps: bool,
    /// The first timestamp is at most this many seconds.
    pub max_initial_timestamp: f64,
    /// Word start and end times from the cross-attention.
    pub word_timestamps: bool,
    /// Punctuation joined to the word after it (word timestamps).
    pub prepend_punctuations: String,
    /// Punctuation joined to the word before it (word timestamps).
    pub append_punctuations: String,
    /// Detects the language again on every window.
    pub multilingual: bool,
    /// Most new tokens per window (else the model's limit).
    pub max_new_tokens: Option<usize>,
    /// A decoding cut short by its bound (`max_new_tokens`, else the
    /// model's 224) fails its temperature, as a too repetitive one does,
    /// and the next temperature is tried: a tight bound then caps what a
    /// loop costs instead of cutting the text (a looping beam search runs
    /// to 224 tokens: 18 s for one second of speech, base on two cores).
    pub cut_fails: bool,
    /// A bound on each window's tokens by the audio it holds: the search
    /// runs at least `base + per_s` a second of the window's audio steps
    /// (never past the model's bound, nor past `max_new_tokens`), so that
    /// a loop over a short window stops early (with `cut_fails`, to be
    /// decoded again). Not for the batched pipeline, whose windows share
    /// one prompt.
    pub max_tokens_for_audio: Option<(usize, f64)>,
    /// `start, end, start, end...` seconds to decode; empty: everything.
    /// An odd count ends at the end of the recording.
    pub clip_timestamps: Vec<f64>,
    /// Decode at most this many windows, leaving the rest of the recording
    /// (after the last segment of the last window) undecoded; `None`: all.
    pub max_windows: Option<usize>,
    /// A language is taken once its probability is above this.
    pub language_detection_threshold: f64,
    /// Windows tried for language detection.
    pub language_detection_segments: usize,
    /// With word timestamps: a likely hallucination with more than this
    /// many seconds of silence around it is dropped and the silence skipped.
    pub hallucination_silence_threshold: Option<f64>,
    /// Seed of the sampler used at temperatures above 0.
    pub seed: u64,
    /// What fills a window after the recording; `None`: what the
    /// checkpoint asks for ([`crate::models::whisper::WhisperBackend::window_padding`]).
    pub padding: Option<WindowPadding>,
}

impl DecodeOptions {
    /// A window's `max_length` (its prompt plus new tokens) for a prompt of
    /// `prompt` tokens over `seconds` of audio, under the model's `limit`.
    /// The search takes the smaller of half of it and all but the fed
    /// prompt (CTranslate2's rule), so the audio bound asks for twice its
    /// steps.
    pub(crate) fn window_max_length(
        &self,
        prompt: usize,
        seconds: f64,
        limit: usize,
    ) -> std::result::Result<usize, crate::models::whisper::WhisperError> {
        let asked = match self.max_new_tokens {
            Some(n) => prompt + n,
            None => limit,
        };
        if asked > limit {
            return Err(crate::models::whisper::WhisperError::PromptTooLong {
                prompt,
                max_new_tokens: asked - prompt,
                max_length: limit,
            });
        }
        Ok(match self.max_tokens_for_audio {
            Some((base, per_s)) => {
                let steps = base + (seconds.max(0.0) * per_s) as usize;
                asked.min(prompt + 2 * steps).min(limit)
            }
            None => asked,
        })
    }
}

impl Default for DecodeOptions {
    fn default() -> DecodeOptions {
        DecodeOptions {
            language: None,
            task: Task::Transcribe,
            beam_size: 5,
            best_of: 5,
            patience: 1.0,
            length_penalty: 1.0,
            repetition_penalty: 1.0,
            no_repeat_ngram_size: 0,
            temperatures: vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
            compression_ratio_threshold: Some(2.4),
            log_prob_threshold: Some(-1.0),
            no_speech_threshold: Some(0.6),
            condition_on_previous_text: true,
            prompt_reset_on_temperature: 0.5,
            initial_prompt: None,
            prefix: None,
            hotwords: None,
            suppress_blank: true,
            suppress_tokens: Some(vec![-1]),
            without_timestamps: false,
            max_initial_timestamp: 1.0,
            word_timestamps: false,
            prepend_punctuations: "\"'“¿([{-".to_string(),
            append_punctuations: "\"'.。,，!！?？:：”)]}、".to_string(),
            multilingual: false,
            max_new_tokens: None,
            cut_fails: false,
            max_tokens_for_audio: None,
            clip_timestamps: Vec::new(),
            max_windows: None,
            language_detection_threshold: 0.5,
            language_detection_segments: 1,
            hallucination_silence_threshold: None,
            seed: 0,
            padding: None,
        }
    }
}
