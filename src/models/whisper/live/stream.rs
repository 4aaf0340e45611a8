//! Live Whisper whose text streams with its encoder: at every encoder
//! pulse the new frames' cross-attention keys and values replace the
//! tail's in the decoder's window, and the [`StreamDecoder`] continues
//! from the tokens it committed (AlignAtt). Partial lines are the
//! committed text and the pulse's uncommitted token; at the end of speech
//! the rest is decoded and the final line's words are timed by Whisper's
//! own alignment. A final line starts with every token committed in its
//! utterance, unless the streamed text is doubtful (a loop, or speech left
//! without words): then the utterance's second pass makes it.
//!
//! An utterance longer than the buffer's hard limit is made final there
//! and the next one starts after it (the VAD is still in speech).

use super::buffer::{prompt_text, trimmed};
use super::policy::{Update, WhisperLive};
use crate::decode::Word;
use crate::models::whisper::decode::{
    find_alignment, merge_punctuations, prompt_tokens, suppressed_tokens, AlignSpec, StreamDecoder,
    StreamOptions, StreamSpec, WordTiming, SAMPLE_RATE,
};
use crate::models::whisper::GenerationConfig;
use crate::profile::{self, Phase};
use crate::{Error, Result};
use std::sync::Arc;

/// Median filter width of Whisper's word alignment.
const MEDIAN_FILTER_WIDTH: usize = 7;

/// The streaming decoder's state across pulses and utterances.
pub(super) struct TextStream {
    o: StreamOptions,
    language: String,
    sot_sequence: Vec<u32>,
    /// What every utterance's decoding shares (its prompt is set when it
    /// starts).
    spec: StreamSpec,
    /// The current utterance's decoding (none between utterances).
    decoder: Option<StreamDecoder>,
    /// Encoder frames of the backend's window that hold heard audio (the
    /// rest the tail's); `None` before the window is first set.
    rows: Option<usize>,
    /// The encoder stream's frames the decoder has read (0 when the
    /// stream starts again): a pulse is due when the stream has more.
    read: usize,
    /// Per committed token: when it was committed and when first shown
    /// (stream seconds).
    committed_at: Vec<f64>,
    shown_at: Vec<f64>,
    /// The tokens shown last (committed, then tentative), each with when
    /// it was first shown there.
    shown: Vec<(u32, f64)>,
    /// The utterance's streamed text is doubtful (its decoding ended in a
    /// loop, [`StreamOptions::repeats`], or left speech without words,
    /// [`crate::live::WhisperLiveOptions::untexted_speech_s`]): its final
    /// line comes from the second pass, and this one is held back.
    pub(super) held: Option<Held>,
}

/// A streamed final line held back for the second pass: it stands where
/// the second pass gives no text, and the words the second pass keeps
/// keep its commit times.
pub(super) struct Held {
    /// The line (`None`: it has no words) and its words untrimmed, as the
    /// prompt's history takes them.
    pub(super) line: Option<(Update, Vec<Word>)>,
}

impl TextStream {
    pub(super) fn new(
        model: &crate::models::whisper::WhisperModel,
        live: &crate::live::WhisperLiveOptions,
        tokenizer: &crate::models::whisper::WhisperTokenizer,
        gen: &GenerationConfig,
    ) -> Result<TextStream> {
        let language = live.decode.language.clone().unwrap_or_else(|| "en".into());
        let sot_sequence =
            tokenizer.sot_sequence(gen.is_multilingual, &language, live.decode.task)?;
        let mut suppress = suppressed_tokens(tokenizer, live.decode.suppress_tokens.as_deref())?;
        // text alone: every id past the end of text is special (languages,
        // tasks, timestamps), so the committed tokens are all text
        let sp = tokenizer.special();
        suppress.extend(sp.eot + 1..model.config.vocab_size as u32);
        let suppress_begin = if live.decode.suppress_blank {
            gen.begin_suppress_tokens.clone()
        } else {
            Vec::new()
        };
        if gen.alignment_heads.is_empty() {
            return Err(Error::Other(
                "live Whisper: the streaming decoder needs the checkpoint's alignment heads".into(),
            ));
        }
        let o = StreamOptions {
            margin: Some(live.margin_for(model)),
            ..live.stream.clone()
        };
        Ok(TextStream {
            o,
            language,
            sot_sequence,
            spec: StreamSpec {
                prompt: Vec::new(),
                eot: sp.eot,
                suppress,
                suppress_begin,
                heads: gen.alignment_heads.clone(),
                word_starts: Some(Arc::new(tokenizer.word_starts(model.config.vocab_size))),
                keys: Some(Arc::new(tokenizer.text_keys(model.config.vocab_size))),
            },
            decoder: None,
            rows: None,
            read: 0,
            committed_at: Vec::new(),
            shown_at: Vec::new(),
            shown: Vec::new(),
            held: None,
        })
    }

    /// Forgets the utterance's decoding and the window's rows (another
    /// decoding of the buffer is about to use the backend).
    pub(super) fn restart(&mut self) {
        self.decoder = None;
        self.rows = None;
        self.committed_at.clear();
        self.shown_at.clear();
        self.shown.clear();
        self.held = None;
    }
}

impl WhisperLive {
    /// One pulse of the streaming decoder over the audio so far; `last`:
    /// the utterance ended, its final line is made.
    pub(super) fn stream_pulse(&mut self, last: bool) -> Result<Option<Update>> {
        let r = self.text_pulse(last);
        // the encoder's work comes next: a shared decoder's steps go on
        // without this stream's
        self.net.idle();
        r
    }

    fn text_pulse(&mut self, last: bool) -> Result<Option<Update>> {
        self.since_decode = 0;
        let now = self.fed as f64 / SAMPLE_RATE as f64;
        let heard = self.stream_frames(last)?;
        let offset = self.buffer_start as f64 / SAMPLE_RATE as f64;
        if heard == 0 && !last {
            return Ok(None);
        }
        if self.text.as_ref().is_some_and(|t| t.decoder.is_none()) {
            let prompt = self.stream_prompt(offset)?;
            if let Some(ts) = self.text.as_mut() {
                let spec = StreamSpec {
                    prompt,
                    ..ts.spec.clone()
                };
                ts.decoder = Some(StreamDecoder::new(spec, ts.o.clone())?);
            }
        }
        let Some(ts) = self.text.as_mut() else {
            return Ok(None);
        };
        let Some(decoder) = ts.decoder.as_mut() else {
            return Ok(None);
        };
        let committed = decoder.pulse(&mut *self.net, heard, last)?;
        let tokens = decoder.committed().to_vec();
        let tentative = decoder.tentative().to_vec();
        // when each token was first shown: kept while it stays in place
        let mut shown: Vec<(u32, f64)> = Vec::with_capacity(tokens.len() + tentative.len());
        for (i, &t) in tokens.iter().chain(&tentative).enumerate() {
            let since = match ts.shown.get(i) {
                Some(&(s, at)) if s == t => at,
                _ => now,
            };
            shown.push((t, since));
        }
        for &(_, since) in &shown[tokens.len() - committed..tokens.len()] {
            ts.committed_at.push(now);
            ts.shown_at.push(since);
        }
        ts.shown = shown;
        if last {
            let looped = decoder.looped();
            return self.stream_final(tokens, heard, offset, now, looped);
        }
        // a pulse commits whole words: every committed word is stable
        let stable = self.token_words(&tokens, offset)?.len();
        let mut all = tokens;
        all.extend(&tentative);
        let text = self.tokenizer.decode(&all)?.trim().to_string();
        if text.is_empty() || text == self.last_partial {
            return Ok(None);
        }
        self.last_partial.clone_from(&text);
        let words = self.token_words(&all, offset)?;
        Ok(Some(Update {
            stable: stable.min(words.len()),
            text,
            words: trimmed(words),
            is_final: false,
            committed_at_s: Vec::new(),
            shown_at_s: Vec::new(),
            utterance: self.utterance_index,
        }))
    }

    /// Pushes the buffer's new audio into the streamed encoder; whether
    /// it gave frames the backend's window does not hold yet.
    pub(super) fn stream_has_news(&mut self) -> Result<bool> {
        let heard = self.stream_push()?;
        Ok(self.text.as_ref().is_some_and(|ts| heard > ts.read))
    }

    /// Pushes the buffer's new audio into the streamed encoder (its stream
    /// started again where the buffer starts); returns its frames.
    fn stream_push(&mut self) -> Result<usize> {
        let Some((stream, start)) = self.encoder.as_mut() else {
            return Err(Error::Other(
                "live Whisper: a streaming decoder without a streamed encoder".into(),
            ));
        };
        if *start != self.buffer_start || stream.samples() > self.buffer.len() || stream.finished()
        {
            stream.reset();
            *start = self.buffer_start;
            if let Some(ts) = self.text.as_mut() {
                ts.read = 0;
            }
        }
        profile::time(Phase::Encoder, || {
            stream.push(&self.buffer[stream.samples()..])
        })?;
        Ok(stream.frames())
    }

    /// Pushes the buffer's new audio into the streamed encoder and gives
    /// the backend's window the new frames; returns the frames heard.
    fn stream_frames(&mut self, last: bool) -> Result<usize> {
        self.stream_push()?;
        let (Some((stream, _)), Some(ts)) = (self.encoder.as_mut(), self.text.as_mut()) else {
            return Err(Error::Other(
                "live Whisper: a streaming decoder without a streamed encoder".into(),
            ));
        };
        if last {
            profile::time(Phase::Encoder, || stream.finish())?;
        }
        let heard = stream.frames();
        let net = &mut *self.net;
        let _frames = profile::Timer::new(Phase::Frames);
        let set = match ts.rows {
            None => false,
            // the stream started again: its frames so far, then the tail
            // where the last stream's frames were
            Some(r) if heard < r => {
                net.encode_frame_rows(0, stream.frame_rows(0, heard))?
                    && net.encode_frame_rows(heard, stream.tail_rows(heard, r))?
            }
            Some(r) => net.encode_frame_rows(r, stream.frame_rows(r, heard))?,
        };
        if !set {
            net.encode_frames(&[&stream.window()])?;
        }
        // a finished stream stays as it is for a second pass over the same
        // buffer; the next utterance starts a stream of its own
        ts.rows = Some(heard);
        ts.read = heard;
        Ok(heard)
    }

    /// The prompt of a new decoding: the committed words before `offset`
    /// as previous text, then the start of transcript without timestamps.
    fn stream_prompt(&self, offset: f64) -> Result<Vec<u32>> {
        let Some(ts) = &self.text else {
            return Ok(Vec::new());
        };
        let previous = prompt_text(&self.history, offset + 1e-3, self.o.prompt_chars);
        Ok(prompt_tokens(
            &self.tokenizer,
            &previous,
            &ts.sot_sequence,
            self.gen.max_length,
        )?)
    }

    /// The final line of the utterance: every token, its words timed by
    /// Whisper's alignment over the window.
    fn stream_final(
        &mut self,
        tokens: Vec<u32>,
        heard: usize,
        offset: f64,
        now: f64,
        looped: bool,
    ) -> Result<Option<Update>> {
        // where the VAD heard speech (none without one): from its start
        // (the buffer keeps a pre-roll before it) to its end, or now
        let speech = self.vad.is_some().then(|| {
            (
                offset + self.o.pre_roll_s,
                self.speech_end_s().unwrap_or(now),
            )
        });
        let untexted_s = self.o.untexted_speech_s;
        let Some(ts) = self.text.as_mut() else {
            return Ok(None);
        };
        ts.decoder = None;
        let committed_at = std::mem::take(&mut ts.committed_at);
        let shown_at = std::mem::take(&mut ts.shown_at);
        ts.shown.clear();
        let spec = AlignSpec {
            sot_sequence: &ts.sot_sequence,
            language: &ts.language,
            heads: &ts.spec.heads,
            num_frames: 2 * heard,
            median_filter_width: MEDIAN_FILTER_WIDTH,
        };
        let mut timings = profile::time(Phase::Words, || {
            find_alignment(&mut *self.net, &self.tokenizer, &tokens, &spec)
        })?;
        // punctuation joins its word, as in offline transcripts ("users,"
        // is one word, committed with its comma)
        let d = &self.o.decode;
        merge_punctuations(
            &mut timings,
            &d.prepend_punctuations,
            &d.append_punctuations,
        );
        let spans: Vec<(f64, f64)> = timings
            .iter()
            .filter(|t| !t.word.trim().is_empty())
            .map(|t| (t.start + offset, t.end + offset))
            .collect();
        let redo = looped || speech.is_some_and(|s| untexted_speech(s, &spans) > untexted_s);
        let (mut words, mut at, mut first) = (Vec::new(), Vec::new(), Vec::new());
        let mut n = 0;
        for t in timings {
            // a word is committed (and shown) with its last token
            n += t.tokens.len();
            // an entry emptied by the merge has no tokens (and is dropped below)
            let last = n.checked_sub(1);
            at.push(
                last.and_then(|i| committed_at.get(i))
                    .copied()
                    .unwrap_or(now),
            );
            first.push(last.and_then(|i| shown_at.get(i)).copied().unwrap_or(now));
            words.push(Word {
                text: t.word,
                start_s: t.start + offset,
                end_s: t.end + offset,
                confidence: t.probability as f32,
            });
        }
        let said: Vec<(Word, f64, f64)> = words
            .into_iter()
            .zip(at.into_iter().zip(first))
            .filter(|(w, _)| !w.text.trim().is_empty())
            .map(|(w, (a, f))| (w, a, f))
            .collect();
        self.last_partial.clear();
        let spoken: Vec<Word> = said.iter().map(|s| s.0.clone()).collect();
        let update = if said.is_empty() {
            None
        } else {
            let words = spoken.clone();
            Some(Update {
                text: self.tokenizer.decode(&tokens)?.trim().to_string(),
                stable: words.len(),
                words: trimmed(words),
                is_final: true,
                committed_at_s: said.iter().map(|s| s.1).collect(),
                shown_at_s: said.iter().map(|s| s.2).collect(),
                utterance: self.utterance_index,
            })
        };
        if redo {
            // the second pass makes the line; this one stands if it has none
            if let Some(ts) = self.text.as_mut() {
                ts.held = Some(Held {
                    line: update.map(|u| (u, spoken)),
                });
            }
            return Ok(None);
        }
        self.remember(&spoken);
        Ok(update)
    }

    /// Adds a final line's words to the prompt's history.
    pub(super) fn remember(&mut self, words: &[Word]) {
        for w in words {
            self.history.push_back(w.clone());
            if self.history.len() > super::policy::HISTORY_WORDS {
                self.history.pop_front();
            }
        }
    }

    /// Words of `tokens` (a partial line), each timed by nothing better
    /// than the buffer's start: partial lines carry text, final lines times.
    /// Punctuation joins its word as in the final line, so that a partial
    /// line's words and the final line's are the same words, in order.
    fn token_words(&self, tokens: &[u32], offset: f64) -> Result<Vec<Word>> {
        let language = self.text.as_ref().map_or("en", |t| t.language.as_str());
        let (words, word_tokens) = self.tokenizer.split_to_word_tokens(tokens, language)?;
        let mut timings: Vec<WordTiming> = words
            .into_iter()
            .zip(word_tokens)
            .map(|(word, tokens)| WordTiming {
                word,
                tokens,
                start: 0.0,
                end: 0.0,
                probability: 1.0,
            })
            .collect();
        let d = &self.o.decode;
        merge_punctuations(
            &mut timings,
            &d.prepend_punctuations,
            &d.append_punctuations,
        );
        Ok(timings
            .into_iter()
            .filter(|t| !t.word.trim().is_empty())
            .map(|t| Word {
                text: t.word,
                start_s: offset,
                end_s: offset,
                confidence: 1.0,
            })
            .collect())
    }
}

/// The longest a word takes to say (seconds): the alignment stretches a
/// word over speech the text leaves out ("Shibu" over 11 s of a meeting
/// the decoder lost), so what a word spans past this is speech without a
/// word.
const LONGEST_WORD_S: f64 = 1.0;

/// The longest stretch of `speech` (start, end; seconds) that no word of
/// `words` (start, end; in order) covers, a word covering at most
/// [`LONGEST_WORD_S`] of it.
fn untexted_speech(speech: (f64, f64), words: &[(f64, f64)]) -> f64 {
    let mut gap: f64 = 0.0;
    let mut covered = speech.0;
    for &(start, end) in words {
        gap = gap.max(start - covered);
        let (from, to) = (start.max(speech.0), end.min(speech.1));
        gap = gap.max(to - from - LONGEST_WORD_S);
        covered = covered.max(end);
    }
    gap.max(speech.1 - covered)
}

#[cfg(test)]
mod tests {
    use super::untexted_speech;

    #[test]
    fn untexted_speech_is_the_longest_stretch_without_a_word() {
        let words = [(1.0, 1.4), (1.5, 2.0), (4.5, 5.0)];
        assert_eq!(untexted_speech((0.5, 5.2), &words), 2.5);
        assert_eq!(untexted_speech((0.5, 8.0), &words), 3.0);
        assert_eq!(untexted_speech((0.0, 3.0), &[]), 3.0);
        // words past the speech's end (the pre-roll, a late VAD) count none
        assert_eq!(untexted_speech((1.0, 2.0), &[(0.5, 2.5)]), 0.0);
        // a word stretched over speech covers what one word takes to say
        let stretched = [(0.2, 0.8), (0.8, 11.7)];
        assert!((untexted_speech((0.2, 12.0), &stretched) - 9.9).abs() < 1e-9);
    }
}
