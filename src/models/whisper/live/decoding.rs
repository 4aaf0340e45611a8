//! One decoding of the live buffer, taken from the policy's state and run
//! on any network of its checkpoint: the policy runs it on its own, the
//! second pass beside the stream ([`super::second_pass`]) on a
//! network of its own.

use super::buffer::prompt_text;
use super::filter::{said_once, spoken};
use super::policy::WhisperLive;
use crate::decode::Word;
use crate::models::whisper::decode::{
    transcribe, AlignedBackend, DecodeOptions, InitialPrompt, Network, SAMPLE_RATE,
};
use crate::models::whisper::encoder_stream::FirstWindowFrames;
use crate::models::whisper::{GenerationConfig, WhisperTokenizer};
use crate::Result;

/// The most tokens a streamed decoding gives: this many, plus this many a
/// second of audio heard (speech runs at 3-5 tokens a second); a partial
/// decoding for its whole buffer, a final pass for each window.
const HEARD_TOKENS_BASE: usize = 16;
const HEARD_TOKENS_PER_S: f64 = 8.0;
/// How long after the VAD's end of speech a word of the final decoding may
/// start (word times run late by a few tenths of a second).
const WORD_AFTER_SPEECH_S: f64 = 0.3;
/// Audio a streamed encoder must have heard before a partial decoding.
const PARTIAL_MIN_HEARD_S: f64 = 1.0;

/// A decoding of the buffer, ready to run over its first `heard` samples.
pub(super) struct Decoding {
    /// How many of the buffer's samples the decoder is given.
    pub(super) heard: usize,
    /// The streamed encoder's window over them (`None`: the window encoder
    /// encodes them).
    frames: Option<Vec<f32>>,
    /// Where the buffer starts (stream seconds).
    offset: f64,
    opts: DecodeOptions,
    vad_heard_speech: bool,
    /// The utterance ends here: the final decoding of its buffer.
    last: bool,
    /// A final decoding's words must start by this (stream seconds).
    latest_start_s: Option<f64>,
}

impl Decoding {
    /// The hypothesis of `samples` (the buffer's first [`Self::heard`];
    /// words in stream seconds) and the ends of the segments it kept (see
    /// [`spoken`]).
    pub(super) fn run(
        self,
        net: &mut dyn AlignedBackend,
        tokenizer: &WhisperTokenizer,
        gen: &GenerationConfig,
        samples: &[f32],
    ) -> Result<(Vec<Word>, Vec<f64>)> {
        let mut streamed;
        let network = match self.frames {
            Some(frames) => {
                streamed = FirstWindowFrames::new(net, frames);
                Network::Aligned(&mut streamed)
            }
            None => Network::Aligned(net),
        };
        let mut segments = Vec::new();
        transcribe(network, tokenizer, gen, samples, &self.opts, |s| {
            segments.push(s);
            Ok(())
        })?;
        let mut words = Vec::new();
        let mut ends = Vec::new();
        for s in spoken(&segments, &self.opts, self.vad_heard_speech) {
            ends.push(s.end + self.offset);
            // each word keeps its leading space (none after a hyphen)
            let said = s
                .words
                .iter()
                .flatten()
                .filter(|w| !w.word.trim().is_empty());
            words.extend(said.map(|w| Word {
                text: w.word.clone(),
                start_s: w.start + self.offset,
                end_s: w.end + self.offset,
                confidence: w.probability as f32,
            }));
        }
        if let Some(latest) = self.latest_start_s {
            // a decoding into the silence after speech may go on with words
            // the audio does not hold (squeezed to no time at the buffer's
            // end, often the prompt's words again)
            words.retain(|w| w.start_s <= latest);
        }
        if self.last {
            words = said_once(words);
        }
        Ok((words, ends))
    }
}

impl WhisperLive {
    /// The decoding of the buffer now (`last`: the utterance ends here);
    /// `None` where there is nothing to decode yet.
    pub(super) fn buffer_decoding(&mut self, last: bool) -> Result<Option<Decoding>> {
        self.since_decode = 0;
        if self.buffer.is_empty() {
            return Ok(None);
        }
        let offset = self.buffer_start as f64 / SAMPLE_RATE as f64;
        let mut opts = self.o.decoding(last, self.greedy_partials);
        let prompt = prompt_text(&self.history, offset, self.o.prompt_chars);
        opts.initial_prompt = (!prompt.is_empty()).then_some(InitialPrompt::Text(prompt));
        // a streamed encoder has seen the audio up to its last frame: the
        // decoder is given that much (after it, the fixed tail)
        let (frames, heard) = match self.streamed_window(last)? {
            Some((frames, heard)) => (Some(frames), heard),
            None => (None, self.buffer.len()),
        };
        if heard == 0 {
            return Ok(None);
        }
        if frames.is_some() {
            // past its last frame the decoder reads the fixed tail, where a
            // decoding may loop
            if last {
                // a final pass that loops is cut at the tokens each window's
                // audio can hold and decoded again at the next
                // temperature, as a repetitive one is: a looping beam
                // search over one second of speech otherwise runs to 224
                // tokens (18 s on two cores), holding up the audio after it
                opts.cut_fails = true;
                opts.max_tokens_for_audio = Some((HEARD_TOKENS_BASE, HEARD_TOKENS_PER_S));
            } else {
                // a partial decoding waits for some audio and is bounded to
                // the tokens that audio can hold
                if (heard as f64) < PARTIAL_MIN_HEARD_S * SAMPLE_RATE as f64 {
                    return Ok(None);
                }
                let most = HEARD_TOKENS_BASE
                    + (heard as f64 / SAMPLE_RATE as f64 * HEARD_TOKENS_PER_S) as usize;
                opts.max_new_tokens = Some(opts.max_new_tokens.map_or(most, |m| m.min(most)));
                // a window after the first is not streamed: the window
                // encoder (on the CPU the slow, masked one) would encode it
                // at every step; its few seconds wait for the next step (on
                // realdev's dev03 x2's partial decodings started one 17 times)
                opts.max_windows = Some(1);
            }
        }
        let latest_start_s = if last {
            self.speech_end_s().map(|end| end + WORD_AFTER_SPEECH_S)
        } else {
            None
        };
        Ok(Some(Decoding {
            heard,
            frames,
            offset,
            opts,
            vad_heard_speech: self.vad_heard_speech(),
            last,
            latest_start_s,
        }))
    }

    /// The buffer's hypothesis (words in stream seconds) and the ends of the
    /// segments it kept, decoded on the policy's own network.
    pub(super) fn decode(&mut self, last: bool) -> Result<(Vec<Word>, Vec<f64>)> {
        match self.buffer_decoding(last)? {
            Some(d) => {
                let samples = &self.buffer[..d.heard];
                d.run(&mut *self.net, &self.tokenizer, &self.gen, samples)
            }
            None => Ok((Vec::new(), Vec::new())),
        }
    }
}
