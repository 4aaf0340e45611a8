//! The VAD-segmented batched mode, as faster-whisper 1.2.1's
//! `BatchedInferencePipeline.transcribe` runs it: Silero VAD finds the
//! speech (`speech.rs`), its segments are joined into chunks of at most
//! 30 s (`chunks.rs`), the chunks' windows are encoded `batch_size` at a
//! time in one [`WhisperBackend::encode`] call, and those chunks are
//! decoded together, from the same prompt, with no previous text: one
//! decoder step feeds every chunk's beams, and a chunk whose search ends
//! leaves the batch (`generate_batch`). Each chunk's result is the one it
//! gets decoded alone, as faster-whisper decodes it. Segment times are put
//! back on the recording's timeline.
//!
//! What the pipeline does differently from [`transcribe`](super::transcribe())
//! (each followed here):
//!
//! | | batched pipeline |
//! | --- | --- |
//! | windows | one per chunk of joined speech, features computed per chunk |
//! | search | one generation at `beam_size` (`temperatures[0]` is only reported: CTranslate2's default top-1 sampler ignores it); no fallback, so `best_of`, `compression_ratio_threshold`, `log_prob_threshold` and `prompt_reset_on_temperature` do nothing |
//! | silence | no window is skipped: `no_speech_threshold` does nothing, and every segment is given, empty text included |
//! | prompt | the same for every chunk: `initial_prompt` (text encoded as it is, without a leading space) and `hotwords`; `condition_on_previous_text` and `prefix` do nothing |
//! | timestamps | `without_timestamps` defaults to true ([`BatchedOptions::decode_defaults`]); with timestamps, the first one is at most 1 s in (CTranslate2's default: `max_initial_timestamp` does nothing) and segments are split as usual, without seeking |
//! | words | as usual, each chunk on its own, the last speech time carried across chunks; `hallucination_silence_threshold` does nothing |
//! | language | detected (multilingual checkpoints, none given) on the joined speech's first windows; with `multilingual`, each chunk's language token is that chunk's best |
//! | `clip_timestamps` | not supported (the VAD decides) |

use crate::models::whisper::decode::align::AlignSpec;
use crate::models::whisper::decode::chunks::{collect_chunks, py_round, Chunk, SpeechMap};
use crate::models::whisper::decode::fallback::compression_ratio;
use crate::models::whisper::decode::generate::{generate_batch, GenerateParams, Generation};
use crate::models::whisper::decode::language::{detect_language, language_probs, Detection};
use crate::models::whisper::decode::on_window::OnWindow;
use crate::models::whisper::decode::prompt::{get_prompt, PromptSpec};
use crate::models::whisper::decode::segments::split_segments_by_timestamps;
use crate::models::whisper::decode::speech::{check_vad_options, speech_probs, speech_segments};
use crate::models::whisper::decode::transcribe::suppressed_tokens;
use crate::models::whisper::decode::window::{padding_for, window_features, WindowPadding};
use crate::models::whisper::decode::words::{add_word_timestamps, WordSegment};
use crate::models::whisper::decode::{
    DecodeOptions, InitialPrompt, Network, Segment, TranscriptionInfo, SAMPLE_RATE,
};
use crate::models::whisper::{
    GenerationConfig, SpecialTokens, WhisperBackend, WhisperError, WhisperTokenizer,
};
use crate::vad::{self, SegmentOptions, Vad};
use crate::Result;

/// CTranslate2's `max_initial_timestamp_index` (1 s), which the pipeline
/// leaves at its default.
const MAX_INITIAL_TIMESTAMP_INDEX: usize = 50;
/// Width of the median filter over the alignment heads' attention.
const MEDIAN_FILTER_WIDTH: usize = 7;
/// The feature value faster-whisper appends to the joined speech before
/// detecting its language (so that no speech still gives a window).
const DETECTION_PAD_VALUE: f32 = -1.5;

/// How the batched mode cuts and batches a recording.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchedOptions {
    /// Chunks encoded per [`WhisperBackend::encode`] call and decoded
    /// together (faster-whisper's default: 8). Each chunk's search is its
    /// own, so results do not depend on it (but for the arithmetic of a
    /// larger batch).
    pub batch_size: usize,
    /// Seconds of speech per chunk at most, and per speech segment (the
    /// pipeline's `chunk_length`: 30, one encoder window).
    pub chunk_length: f64,
    /// Speech detection, faster-whisper's `VadOptions` as the pipeline sets
    /// them: threshold 0.5, no minimum speech, 160 ms of silence to end a
    /// segment, 400 ms of padding. The longest segment is `chunk_length`.
    pub vad: SegmentOptions,
}

impl Default for BatchedOptions {
    fn default() -> BatchedOptions {
        BatchedOptions {
            batch_size: 8,
            chunk_length: 30.0,
            vad: SegmentOptions {
                threshold: 0.5,
                neg_threshold: None,
                min_speech_ms: 0,
                min_silence_ms: 160,
                speech_pad_ms: 400,
                ..SegmentOptions::default()
            },
        }
    }
}

impl BatchedOptions {
    /// Decoding options as the pipeline's `transcribe` defaults them:
    /// faster-whisper's usual ones (beam 5, temperature 0 first) without
    /// timestamps.
    pub fn decode_defaults() -> DecodeOptions {
        DecodeOptions {
            without_timestamps: true,
            ..DecodeOptions::default()
        }
    }
}

/// Transcribes `audio` (16 kHz mono samples) the way faster-whisper
/// 1.2.1's `BatchedInferencePipeline` does: speech found by `vad` is cut
/// into chunks of at most `batched.chunk_length` seconds, encoded
/// `batched.batch_size` chunks per encoder call, decoded together (each chunk's search its own)
/// (see the module's table for which of `opts` apply), and `on_segment`
/// gets each chunk's segments as soon as it is decoded, with times on the
/// recording's timeline (to 10 ms).
///
/// Start with [`BatchedOptions::decode_defaults`] for the pipeline's own
/// defaults. `network`, `tokenizer` and `gen` are as for
/// [`transcribe`](super::transcribe()); word timestamps need
/// [`Network::Aligned`]. A recording without speech gives no segment.
/// Errors: options that cannot work (beam 0, no temperature, batch size 0,
/// word timestamps without alignment, VAD options for another rate), a
/// language the model lacks, a prompt longer than the model's positions,
/// VAD and backend failures, and any error `on_segment` returns.
#[allow(clippy::too_many_arguments)] // faster-whisper's call, plus the VAD
pub fn transcribe_batched(
    network: Network<'_>,
    tokenizer: &WhisperTokenizer,
    gen: &GenerationConfig,
    audio: &[f32],
    opts: &DecodeOptions,
    batched: &BatchedOptions,
    vad: &Vad,
    mut on_segment: impl FnMut(Segment) -> Result<()>,
) -> Result<TranscriptionInfo> {
    check_options(opts, batched, &network)?;
    let speech = batched_speech(vad, audio, batched)?;
    let pipeline = Pipeline {
        tokenizer,
        gen,
        opts,
        batched,
    };
    pipeline.run(network, audio, &speech, &mut on_segment)
}

/// [`transcribe_batched`] over several recordings at once: each one's
/// speech found on its own, then their chunks in order, `batched.batch_size`
/// to an encoder call and decoded together whichever recording they come
/// from; `on_segment` gets each segment with its recording's index, in
/// order within a recording. Each recording's segments are those
/// [`transcribe_batched`] gives it alone (up to the backend's arithmetic
/// over a larger batch). Errors are [`transcribe_batched`]'s, for any
/// recording.
#[allow(clippy::too_many_arguments)] // transcribe_batched's call
pub fn transcribe_batched_many(
    network: Network<'_>,
    tokenizer: &WhisperTokenizer,
    gen: &GenerationConfig,
    recordings: &[&[f32]],
    opts: &DecodeOptions,
    batched: &BatchedOptions,
    vad: &Vad,
    mut on_segment: impl FnMut(usize, Segment) -> Result<()>,
) -> Result<Vec<TranscriptionInfo>> {
    check_options(opts, batched, &network)?;
    let speech = recordings
        .iter()
        .map(|audio| batched_speech(vad, audio, batched))
        .collect::<Result<Vec<_>>>()?;
    let runs: Vec<Source> = recordings
        .iter()
        .zip(&speech)
        .map(|(audio, speech)| Source { audio, speech })
        .collect();
    let pipeline = Pipeline {
        tokenizer,
        gen,
        opts,
        batched,
    };
    pipeline.run_many(network, &runs, &mut on_segment)
}

/// The speech segments (samples) the batched mode decodes: `vad`'s
/// probabilities under `batched.vad`, no segment longer than
/// `batched.chunk_length` before padding.
pub fn batched_speech(
    vad: &Vad,
    audio: &[f32],
    batched: &BatchedOptions,
) -> Result<Vec<vad::Segment>> {
    check_vad_options(&batched.vad)?;
    let probs = speech_probs(vad, audio)?;
    Ok(speech_segments(
        &probs,
        audio.len(),
        &batched.vad,
        batched.chunk_length,
    ))
}

fn check_options(
    opts: &DecodeOptions,
    batched: &BatchedOptions,
    network: &Network<'_>,
) -> Result<()> {
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
    if opts.patience <= 0.0 {
        return bad("patience", "must be above 0");
    }
    if opts.temperatures.is_empty() {
        return bad("temperatures", "needs at least one temperature");
    }
    if opts.word_timestamps && matches!(network, Network::Plain(_)) {
        return bad("word_timestamps", "the backend gives no cross-attention");
    }
    if opts.max_tokens_for_audio.is_some() {
        return bad(
            "max_tokens_for_audio",
            "the batched pipeline's windows share one prompt and one bound",
        );
    }
    if batched.batch_size == 0 {
        return bad("batch_size", "must be at least 1");
    }
    if !(batched.chunk_length > 0.0 && batched.chunk_length.is_finite()) {
        return bad("chunk_length", "must be a positive number of seconds");
    }
    check_vad_options(&batched.vad)
}

/// The settings of one run.
pub(crate) struct Pipeline<'a> {
    pub tokenizer: &'a WhisperTokenizer,
    pub gen: &'a GenerationConfig,
    pub opts: &'a DecodeOptions,
    pub batched: &'a BatchedOptions,
}

/// What every chunk's decoding shares, in one recording.
struct Shared<'a> {
    prompt: Vec<u32>,
    /// Where the language token is in the prompt, when each chunk gets its
    /// own language.
    language_slot: Option<usize>,
    sot_sequence: Vec<u32>,
    language: String,
    languages: &'a [(String, u32)],
    params: GenerateParams<'a>,
    map: SpeechMap,
}

/// One recording of a run: its audio and the speech the VAD found in it.
pub(crate) struct Source<'a> {
    pub audio: &'a [f32],
    pub speech: &'a [vad::Segment],
}

/// A recording's place in a run: its chunks, what they share, what is
/// carried from chunk to chunk.
struct Progress<'a> {
    chunks: Vec<Chunk>,
    shared: Shared<'a>,
    info: TranscriptionInfo,
    next_id: usize,
    last_speech_timestamp: f64,
}

/// The suppressed tokens, the same for every recording of a run.
struct Suppress {
    special: SpecialTokens,
    every: Vec<u32>,
    begin: Vec<u32>,
}

impl Pipeline<'_> {
    /// Decodes `speech` (segments of `audio`, in order): the whole run
    /// after the VAD.
    pub(crate) fn run(
        &self,
        network: Network<'_>,
        audio: &[f32],
        speech: &[vad::Segment],
        on_segment: &mut dyn FnMut(Segment) -> Result<()>,
    ) -> Result<TranscriptionInfo> {
        let mut infos = self.run_many(network, &[Source { audio, speech }], &mut |_, s| {
            on_segment(s)
        })?;
        Ok(infos.remove(0))
    }

    /// [`Pipeline::run`] over several recordings: their chunks in order,
    /// `batch_size` to an encoder call whichever recording they come from,
    /// each recording's segments given with its index and in its order.
    pub(crate) fn run_many(
        &self,
        mut network: Network<'_>,
        recordings: &[Source<'_>],
        on_segment: &mut dyn FnMut(usize, Segment) -> Result<()>,
    ) -> Result<Vec<TranscriptionInfo>> {
        let (opts, gen, tokenizer) = (self.opts, self.gen, self.tokenizer);
        let suppress = Suppress {
            special: *tokenizer.special(),
            every: suppressed_tokens(tokenizer, opts.suppress_tokens.as_deref())?,
            begin: if opts.suppress_blank {
                gen.begin_suppress_tokens.clone()
            } else {
                Vec::new()
            },
        };
        let mut runs = recordings
            .iter()
            .map(|r| self.recording(&mut network, r, &suppress))
            .collect::<Result<Vec<_>>>()?;
        let queue: Vec<(usize, usize)> = runs
            .iter()
            .enumerate()
            .flat_map(|(r, run)| (0..run.chunks.len()).map(move |c| (r, c)))
            .collect();
        for batch in queue.chunks(self.batched.batch_size) {
            let backend = network.backend();
            let windows = batch
                .iter()
                .map(|&(r, c)| {
                    chunk_window(
                        backend,
                        recordings[r].audio,
                        &runs[r].chunks[c],
                        opts.padding,
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<&[f32]> = windows.iter().map(Vec::as_slice).collect();
            backend.encode(&refs)?;
            // the batch's chunks decoded together, a decoder step feeding
            // every chunk's beams; then each one's segments in order
            let prompts = batch
                .iter()
                .enumerate()
                .map(|(window, &(r, _))| self.chunk_prompt(&mut network, window, &runs[r].shared))
                .collect::<Result<Vec<_>>>()?;
            let prompts: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
            let order: Vec<usize> = (0..batch.len()).collect();
            let (lead, _) = batch[0];
            let results = generate_batch(
                network.backend(),
                &prompts,
                &order,
                &runs[lead].shared.params,
                opts.beam_size,
                opts.patience,
            )?;
            for ((window, &(r, c)), result) in batch.iter().enumerate().zip(results) {
                let run = &mut runs[r];
                let segments = self.chunk_segments(
                    &mut network,
                    window,
                    &run.chunks[c],
                    &run.shared,
                    result,
                    &mut run.last_speech_timestamp,
                )?;
                for mut s in segments {
                    s.id = run.next_id;
                    run.next_id += 1;
                    on_segment(r, s)?;
                }
            }
        }
        Ok(runs.into_iter().map(|r| r.info).collect())
    }

    /// A recording's chunks, language (detected when asked, which encodes
    /// its first windows) and prompt.
    fn recording<'s>(
        &'s self,
        network: &mut Network<'_>,
        rec: &Source<'_>,
        suppress: &'s Suppress,
    ) -> Result<Progress<'s>> {
        let (opts, gen, tokenizer) = (self.opts, self.gen, self.tokenizer);
        let (audio, speech) = (rec.audio, rec.speech);
        let duration = audio.len() as f64 / SAMPLE_RATE as f64;
        let max_samples = self.batched.chunk_length * SAMPLE_RATE as f64;
        let chunks = collect_chunks(speech, max_samples);
        let languages: &[(String, u32)] = if gen.lang_to_id.is_empty() {
            tokenizer.languages()
        } else {
            &gen.lang_to_id
        };

        let (language, language_probability, all_language_probs) = match &opts.language {
            _ if !gen.is_multilingual => ("en".to_string(), 1.0, None),
            Some(code) => (code.clone(), 1.0, None),
            None if chunks.is_empty() => ("en".to_string(), 1.0, None),
            None => {
                let features = self.detection_features(network.backend(), audio, &chunks)?;
                let frames = features.len() / network.backend().n_mels();
                let detection = Detection {
                    sot: tokenizer.special().sot,
                    languages,
                    segments: opts.language_detection_segments,
                    threshold: opts.language_detection_threshold,
                    pad: padding_for(opts.padding, network.backend()).value(&features),
                };
                let found = detect_language(network.backend(), &features, frames, 0, &detection)?;
                let all = found.all.into_iter().map(|(c, p)| (c, p as f64)).collect();
                (found.language, found.probability as f64, Some(all))
            }
        };
        let info = TranscriptionInfo {
            language: language.clone(),
            language_probability,
            duration,
            all_language_probs,
        };

        let sot_sequence = tokenizer.sot_sequence(gen.is_multilingual, &language, opts.task)?;
        let previous: Vec<u32> = match &opts.initial_prompt {
            Some(InitialPrompt::Text(t)) => tokenizer.encode(t)?,
            Some(InitialPrompt::Tokens(t)) => t.clone(),
            None => Vec::new(),
        };
        let prompt = get_prompt(
            tokenizer,
            &previous,
            &PromptSpec {
                sot_sequence: &sot_sequence,
                without_timestamps: opts.without_timestamps,
                prefix: None,
                hotwords: opts.hotwords.as_deref(),
                max_length: gen.max_length,
            },
        )?;
        let max_length = match opts.max_new_tokens {
            Some(n) => prompt.len() + n,
            None => gen.max_length,
        };
        if max_length > gen.max_length {
            return Err(WhisperError::PromptTooLong {
                prompt: prompt.len(),
                max_new_tokens: max_length - prompt.len(),
                max_length: gen.max_length,
            }
            .into());
        }
        let language_slot = if opts.multilingual && gen.is_multilingual {
            let token = tokenizer.language_token(&language)?;
            prompt.iter().position(|&t| t == token)
        } else {
            None
        };
        let shared = Shared {
            prompt,
            language_slot,
            sot_sequence,
            language,
            languages,
            params: GenerateParams {
                special: &suppress.special,
                max_length,
                length_penalty: opts.length_penalty,
                repetition_penalty: opts.repetition_penalty,
                no_repeat_ngram_size: opts.no_repeat_ngram_size,
                suppress: &suppress.every,
                suppress_begin: &suppress.begin,
                max_initial_timestamp_index: MAX_INITIAL_TIMESTAMP_INDEX,
            },
            map: SpeechMap::new(speech, SAMPLE_RATE as u32),
        };
        Ok(Progress {
            chunks,
            shared,
            info,
            next_id: 1,
            last_speech_timestamp: 0.0,
        })
    }

    /// The prompt of the chunk in encoded window `window`: the shared one,
    /// with the chunk's own best language when each chunk gets its own.
    fn chunk_prompt(
        &self,
        network: &mut Network<'_>,
        window: usize,
        shared: &Shared<'_>,
    ) -> Result<Vec<u32>> {
        let sp = *self.tokenizer.special();
        let mut prompt = shared.prompt.clone();
        if let Some(slot) = shared.language_slot {
            let mut view = OnWindow::new(network.backend(), window);
            let probs = language_probs(&mut view, sp.sot, shared.languages)?;
            if let Some((code, _)) = probs.first() {
                prompt[slot] = self.tokenizer.language_token(code)?;
            }
        }
        Ok(prompt)
    }

    /// The segments of the chunk in encoded window `window`, decoded as
    /// `result`, with times on the recording's timeline (ids left at 0).
    fn chunk_segments(
        &self,
        network: &mut Network<'_>,
        window: usize,
        chunk: &Chunk,
        shared: &Shared<'_>,
        result: Generation,
        last_speech_timestamp: &mut f64,
    ) -> Result<Vec<Segment>> {
        let (opts, tokenizer) = (self.opts, self.tokenizer);
        let sp = *tokenizer.special();
        let seq_len = result.tokens.len() as f64;
        let cum_logprob = result.score as f64 * seq_len.powf(opts.length_penalty as f64);
        let avg_logprob = cum_logprob / (seq_len + 1.0);

        let rate = SAMPLE_RATE as f64;
        let (offset, duration) = (chunk.offset as f64 / rate, chunk.samples as f64 / rate);
        let segment_size = (duration.ceil() * 100.0) as usize;
        let seek = (offset * 100.0) as usize;
        let split = split_segments_by_timestamps(
            sp.timestamp_begin,
            &result.tokens,
            offset,
            segment_size,
            duration,
            0,
        );
        let mut pieces: Vec<WordSegment> = split
            .segments
            .into_iter()
            .map(|mut raw| {
                raw.seek = seek; // the words' time offset
                WordSegment {
                    raw,
                    words: Vec::new(),
                }
            })
            .collect();
        if opts.word_timestamps {
            let Network::Aligned(aligned) = network else {
                unreachable!("checked by check_options");
            };
            let spec = AlignSpec {
                sot_sequence: &shared.sot_sequence,
                language: &shared.language,
                heads: &self.gen.alignment_heads,
                num_frames: segment_size,
                median_filter_width: MEDIAN_FILTER_WIDTH,
            };
            let punctuation = (
                opts.prepend_punctuations.as_str(),
                opts.append_punctuations.as_str(),
            );
            let mut view = OnWindow::new(&mut **aligned, window);
            *last_speech_timestamp = add_word_timestamps(
                &mut view,
                tokenizer,
                &mut pieces,
                &spec,
                punctuation,
                *last_speech_timestamp,
            )?;
        }

        let mut out = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let text = tokenizer.decode(&piece.raw.tokens)?;
            let (start, end, words) = if piece.words.is_empty() {
                let start = py_round(piece.raw.start, 3);
                let end = py_round(piece.raw.end, 3);
                let (start, end) = shared.map.span(start, end);
                (start, end, opts.word_timestamps.then(Vec::new))
            } else {
                let mut words = piece.words;
                for w in &mut words {
                    // A word's start and end map through the same segment.
                    let index = shared.map.index((w.start + w.end) / 2.0, false);
                    w.start = shared.map.original(w.start, index);
                    w.end = shared.map.original(w.end, index);
                }
                (words[0].start, words[words.len() - 1].end, Some(words))
            };
            out.push(Segment {
                id: 0,
                seek,
                start,
                end,
                compression_ratio: compression_ratio(&text),
                text,
                tokens: piece.raw.tokens,
                avg_logprob,
                no_speech_prob: result.no_speech_prob as f64,
                temperature: opts.temperatures[0],
                words,
            });
        }
        Ok(out)
    }

    /// The joined speech's features for language detection (`[n_mels,
    /// frames]`): the chunks' features end to end, as many as the
    /// detection windows take, then one frame of [`DETECTION_PAD_VALUE`]
    /// when every chunk fit.
    fn detection_features(
        &self,
        backend: &mut dyn WhisperBackend,
        audio: &[f32],
        chunks: &[Chunk],
    ) -> Result<Vec<f32>> {
        let n_mels = backend.n_mels();
        let wanted = self.opts.language_detection_segments.max(1) * backend.window_frames();
        let mut rows: Vec<Vec<f32>> = vec![Vec::new(); n_mels];
        let mut every_chunk = true;
        for chunk in chunks {
            if rows[0].len() >= wanted {
                every_chunk = false;
                break;
            }
            let (features, frames) = chunk_features(backend, audio, chunk)?;
            for (m, row) in rows.iter_mut().enumerate() {
                row.extend_from_slice(&features[m * frames..m * frames + frames - 1]);
            }
        }
        if every_chunk {
            rows.iter_mut().for_each(|r| r.push(DETECTION_PAD_VALUE));
        }
        let frames = rows[0].len().min(wanted);
        Ok(rows
            .iter()
            .flat_map(|r| r[..frames].iter().copied())
            .collect())
    }
}

/// A chunk's log-mel features (`[n_mels, frames]`, computed over its joined
/// speech alone) and their frame count (the last one is padding).
fn chunk_features(
    backend: &mut dyn WhisperBackend,
    audio: &[f32],
    chunk: &Chunk,
) -> Result<(Vec<f32>, usize)> {
    let samples = chunk.audio(audio);
    let n_mels = backend.n_mels();
    let features = backend.log_mel(&samples)?;
    let expected = n_mels * (samples.len() / 160 + 1);
    if n_mels == 0 || features.len() != expected {
        return Err(WhisperError::BackendShape {
            what: "log-mel features",
            expected,
            got: features.len(),
        }
        .into());
    }
    let frames = features.len() / n_mels;
    Ok((features, frames))
}

/// A chunk's encoder window: its features less the last frame, padded
/// (as `asked`, else as the checkpoint wants) or trimmed to the window
/// (faster-whisper's `pad_or_trim`).
fn chunk_window(
    backend: &mut dyn WhisperBackend,
    audio: &[f32],
    chunk: &Chunk,
    asked: Option<WindowPadding>,
) -> Result<Vec<f32>> {
    let (features, frames) = chunk_features(backend, audio, chunk)?;
    let (n_mels, size) = (backend.n_mels(), backend.window_frames());
    let pad = padding_for(asked, backend).value(&features);
    Ok(window_features(
        &features,
        n_mels,
        frames,
        (0, frames - 1),
        size,
        pad,
    ))
}

#[cfg(test)]
#[path = "batched_tests/mod.rs"]
mod tests;
