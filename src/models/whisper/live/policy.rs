//! Live Whisper (whisper_streaming's policy, Macháček et al. 2023): audio
//! goes into a rolling buffer; every `step_s` of new audio the whole buffer
//! is decoded again (word timestamps on, the committed text before the
//! buffer as the prompt); [`LocalAgreement`] commits the words two
//! consecutive hypotheses agree on; once the buffer is longer than
//! `trim_s` it is cut at the end of a segment whose words are all
//! committed. Silero VAD skips silence and cuts utterances: at the end of
//! speech the buffer is decoded once more and its hypothesis completes the
//! final line. With a second pass (route 2, as WeNet's U2 rescores at an
//! endpoint) that decoding of the whole buffer replaces the words agreed on
//! in it instead, so the partial lines' committed words may change; it is
//! the default where the encoder streams (see
//! [`WhisperLiveOptions::second_pass`]), and there the partial decodings
//! are greedy ([`WhisperLiveOptions::greedy_partials`]).
//!
//! A checkpoint whose encoder attends in chunks (a streaming student) runs
//! its encoder streamed ([`EncoderStream`]; on a GPU its chunk step is
//! captured): each decoding encodes only the audio that came since the
//! last, and the stream starts again where the buffer is cut (its
//! positions count from the buffer's start).
//!
//! The policy is a plain object fed samples ([`WhisperLive::push`]): the
//! live thread drives it, and so do `pulsed eval --live` and the tests.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::agreement::LocalAgreement;
use super::buffer::{cut_point, text_of, trimmed, Cut};
use super::options::WhisperLiveOptions;
use super::second_pass::{Redo, SecondPasses};
use super::stream::TextStream;
use crate::decode::Word;
use crate::live::LiveEvent;
use crate::models::whisper::decode::AlignedBackend;
use crate::models::whisper::decode::SAMPLE_RATE;
use crate::models::whisper::encoder_stream::EncoderStream;
use crate::models::whisper::graphs::HOP;
use crate::models::whisper::shared::DecoderSlot;
use crate::models::whisper::{GenerationConfig, WhisperModel, WhisperTokenizer};
use crate::vad::{SegmentOptions, Segmenter, Vad, VadSession, CHUNK};
use crate::Result;

/// Committed words kept for the prompt.
pub(super) const HISTORY_WORDS: usize = 100;
/// What the policy reports after a step or an end of utterance.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// The utterance's text so far, as Whisper spells it.
    pub text: String,
    /// Its words (stream seconds): the committed ones, then the current
    /// unconfirmed hypothesis.
    pub words: Vec<Word>,
    /// How many leading words are committed (all of them when final).
    pub stable: usize,
    /// The utterance ended.
    pub is_final: bool,
    /// For each committed word, the stream position (seconds of audio
    /// taken) when it was committed (in a final line: when it became final).
    pub committed_at_s: Vec<f64>,
    /// In a final line of the streaming decoder, for each word: the
    /// stream position when its text was first shown where it stayed
    /// (empty otherwise).
    pub shown_at_s: Vec<f64>,
    /// Which utterance of the stream (from 0) the line is of (see
    /// [`LiveEvent::Final`]).
    pub utterance: u64,
}

/// The streaming policy over one Whisper network.
pub struct WhisperLive {
    pub(super) net: Box<dyn AlignedBackend + Send>,
    pub(super) tokenizer: Arc<WhisperTokenizer>,
    pub(super) gen: Arc<GenerationConfig>,
    pub(super) o: WhisperLiveOptions,
    pub(super) vad: Option<(VadSession, Segmenter)>,
    /// The rolling buffer and the stream sample its first one is.
    pub(super) buffer: Vec<f32>,
    pub(super) buffer_start: u64,
    /// Samples taken so far.
    pub(super) fed: u64,
    /// Samples taken since the last decoding (in an utterance).
    pub(super) since_decode: usize,
    pub(super) in_utterance: bool,
    pub(super) agreement: LocalAgreement,
    /// The current utterance's committed words, and when each was committed.
    pub(super) utterance: Vec<Word>,
    pub(super) committed_at: Vec<f64>,
    /// Committed words of this and earlier utterances, for the prompt.
    pub(super) history: VecDeque<Word>,
    /// Text of the last partial update (so an unchanged one is not repeated).
    pub(super) last_partial: String,
    /// The streamed encoder, and the stream sample its stream starts at.
    pub(super) encoder: Option<(EncoderStream, u64)>,
    /// [`WhisperLiveOptions::second_pass`] and
    /// [`WhisperLiveOptions::greedy_partials`], resolved for the model.
    pub(super) second_pass: bool,
    pub(super) greedy_partials: bool,
    /// The streaming decoder ([`WhisperLiveOptions::stream_text`]).
    pub(super) text: Option<TextStream>,
    /// Where the streamed text's second passes run beside the stream (not
    /// [`WhisperLiveOptions::paced`]).
    pub(super) second_passes: Option<SecondPasses>,
    /// The current utterance's index in the stream.
    pub(super) utterance_index: u64,
    /// Where `net` is a slot of a shared decoder (which decodes streamed
    /// frames only): the network that runs the second pass in the stream's
    /// way, built at the first.
    pub(super) whole: Option<Whole>,
}

/// The network of a policy whose decoder is shared, for whole decodings.
pub(super) enum Whole {
    Unbuilt(Box<WhisperModel>),
    Built(Box<dyn AlignedBackend + Send>),
}

impl WhisperLive {
    /// A policy over a loaded checkpoint; `vad` (Silero) ends utterances and
    /// skips silence, `None` treats the whole stream as one utterance.
    pub fn new(
        model: &WhisperModel,
        vad: Option<&Vad>,
        o: WhisperLiveOptions,
    ) -> Result<WhisperLive> {
        o.check()?;
        let net = crate::models::whisper::network(model, &o.engine)?;
        WhisperLive::with_network(model, net, vad, o)
    }

    /// [`WhisperLive::new`] over `net`, a network of `model` already built
    /// on `o.engine` (the one a [`crate::asr::Transcriber`] built when it
    /// opened the checkpoint, or one an earlier policy gave back): a
    /// network is the largest thing a policy holds, and the slowest to make.
    pub fn with_network(
        model: &WhisperModel,
        net: Box<dyn AlignedBackend + Send>,
        vad: Option<&Vad>,
        o: WhisperLiveOptions,
    ) -> Result<WhisperLive> {
        let tokenizer = WhisperTokenizer::from_file(&model.dir.join("tokenizer.json"))?;
        let gen = GenerationConfig::load(&model.dir)?;
        let vad = match vad {
            Some(v) => {
                let seg = SegmentOptions {
                    min_silence_ms: (o.end_silence_s * 1000.0).round().max(0.0) as u32,
                    ..SegmentOptions::default()
                };
                Some((v.session()?, Segmenter::new(seg)))
            }
            None => None,
        };
        o.check()?;
        let encoder = if o.streams_encoder(model) {
            let padding = o.decode.padding.unwrap_or(net.window_padding());
            let stream = EncoderStream::new(model, padding, &o.engine)?;
            // a stream holds one window, less its last look-ahead; the buffer
            // grows a step past its maximum before it is cut
            let holds = stream.capacity() as f64 / SAMPLE_RATE as f64;
            if o.max_buffer_s + o.step_s > holds {
                return Err(crate::Error::Other(format!(
                    "live Whisper: a streamed encoder holds {holds:.2} s, so the buffer \
                     and a step can too (max buffer {} s, step {} s)",
                    o.max_buffer_s, o.step_s
                )));
            }
            Some((stream, 0))
        } else {
            None
        };
        if o.stream_text == Some(true) && !o.streams_encoder(model) {
            return Err(crate::Error::Other(
                "live Whisper: the stream policy needs a chunked checkpoint's streamed encoder \
                 (this one encodes whole windows: --policy agreement)"
                    .into(),
            ));
        }
        let text = if o.stream_text_for(model) {
            Some(TextStream::new(model, &o, &tokenizer, &gen)?)
        } else {
            None
        };
        let (tokenizer, gen) = (Arc::new(tokenizer), Arc::new(gen));
        let second_passes = if text.is_some() && !o.paced {
            Some(SecondPasses::new(
                model.clone(),
                o.engine.clone(),
                tokenizer.clone(),
                gen.clone(),
            )?)
        } else {
            None
        };
        Ok(WhisperLive {
            text,
            second_passes,
            utterance_index: 0,
            whole: None,
            net,
            encoder,
            second_pass: o.second_pass_for(model),
            greedy_partials: o.greedy_partials_for(model),
            tokenizer,
            gen,
            in_utterance: vad.is_none(),
            vad,
            o,
            buffer: Vec::new(),
            buffer_start: 0,
            fed: 0,
            since_decode: 0,
            agreement: LocalAgreement::new(),
            utterance: Vec::new(),
            committed_at: Vec::new(),
            history: VecDeque::new(),
            last_partial: String::new(),
        })
    }

    /// [`WhisperLive::new`] over `slot`, a stream's slot of a decoder
    /// shared with other streams (see [`crate::models::whisper::shared`]): the
    /// streaming decoder's steps run batched with theirs. The policy must
    /// stream its text (a chunked checkpoint), greedily at the end of
    /// speech; a second pass in the stream's way runs on a network of its
    /// own.
    pub fn with_shared(
        model: &WhisperModel,
        slot: DecoderSlot,
        vad: Option<&Vad>,
        o: WhisperLiveOptions,
    ) -> Result<WhisperLive> {
        if !o.stream_text_for(model) {
            return Err(crate::Error::Other(
                "live Whisper: a shared decoder decodes streamed text (a chunked checkpoint, \
                 --policy stream)"
                    .into(),
            ));
        }
        if o.stream.final_beam > 1 {
            return Err(crate::Error::Other(
                "live Whisper: a shared decoder ends utterances greedily (--final-beam 1)".into(),
            ));
        }
        let mut live = WhisperLive::with_network(model, Box::new(slot), vad, o)?;
        live.whole = Some(Whole::Unbuilt(Box::new(model.clone())));
        Ok(live)
    }

    /// Whether its decoder is a slot of a shared one
    /// ([`WhisperLive::with_shared`]).
    pub fn is_shared(&self) -> bool {
        self.whole.is_some()
    }

    /// The policy's network, for the next policy over the same checkpoint
    /// and engine ([`WhisperLive::with_network`]).
    pub fn into_network(self) -> Box<dyn AlignedBackend + Send> {
        self.net
    }

    /// Loads the checkpoint `spec` names (see [`WhisperModel::open`]).
    pub fn open(spec: &str, vad: Option<&Vad>, o: WhisperLiveOptions) -> Result<WhisperLive> {
        WhisperLive::new(&WhisperModel::open(spec)?, vad, o)
    }

    /// The rate samples are taken at.
    pub fn sample_rate(&self) -> u32 {
        SAMPLE_RATE as u32
    }

    /// Whether decodings read a streamed encoder's frames.
    pub fn streams_encoder(&self) -> bool {
        self.encoder.is_some()
    }

    /// Whether each final line is the buffer decoded whole
    /// ([`WhisperLiveOptions::second_pass`], resolved).
    pub fn second_pass(&self) -> bool {
        self.second_pass
    }

    /// Whether partial decodings are greedy
    /// ([`WhisperLiveOptions::greedy_partials`], resolved).
    pub fn greedy_partials(&self) -> bool {
        self.greedy_partials
    }

    /// Seconds of audio in the rolling buffer.
    pub fn buffer_s(&self) -> f64 {
        self.buffer.len() as f64 / SAMPLE_RATE as f64
    }

    /// Takes samples (16 kHz mono); returns the updates they caused.
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<Update>> {
        if let Some((i, v)) = samples.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(crate::Error::Other(format!(
                "sample {i} is not finite ({v})"
            )));
        }
        let step = (self.o.step_s * SAMPLE_RATE as f64).round().max(1.0) as usize;
        let mut out = Vec::new();
        self.collect(false, &mut out)?;
        let mut rest = samples;
        while !rest.is_empty() {
            // pieces end on the VAD's chunk grid, where its state can change
            let room = CHUNK - (self.fed % CHUNK as u64) as usize;
            let (piece, tail) = rest.split_at(room.min(rest.len()));
            rest = tail;
            self.take(piece)?;
            if let Some((_, seg)) = &self.vad {
                let speaking = seg.in_speech();
                if !self.in_utterance && speaking {
                    self.in_utterance = true;
                    self.since_decode = self.buffer.len();
                } else if self.in_utterance && !speaking {
                    let line = self.end_utterance()?;
                    self.give(line, &mut out);
                    continue;
                }
            }
            if self.text.is_some() && self.in_utterance && self.buffer_s() >= self.o.max_buffer_s {
                // the streamed window is full: the utterance ends here
                let line = self.end_utterance()?;
                self.give(line, &mut out);
                self.in_utterance = true;
                continue;
            }
            // the streamed text decodes as soon as the encoder has new
            // frames (pulses on a grid of their own would leave them
            // waiting); the buffer is decoded every step
            let due = self.in_utterance
                && match self.text {
                    Some(_) => self.stream_has_news()?,
                    None => self.since_decode >= step,
                };
            if due && (self.o.paced || rest.is_empty()) {
                out.extend(self.step()?);
            }
        }
        Ok(out)
    }

    /// The stream ended: the utterance in progress becomes final.
    pub fn finish(&mut self) -> Result<Vec<Update>> {
        if let Some((session, seg)) = &mut self.vad {
            for p in session.flush()? {
                seg.push(p);
            }
        }
        let mut out = Vec::new();
        if self.in_utterance {
            let line = self.end_utterance()?;
            self.give(line, &mut out);
        }
        self.collect(true, &mut out)?;
        Ok(out)
    }

    fn take(&mut self, piece: &[f32]) -> Result<()> {
        if let Some((session, seg)) = &mut self.vad {
            for p in session.push(piece)? {
                seg.push(p);
            }
        }
        self.buffer.extend_from_slice(piece);
        self.fed += piece.len() as u64;
        if self.in_utterance {
            self.since_decode += piece.len();
        } else {
            let keep = (self.o.pre_roll_s * SAMPLE_RATE as f64) as usize;
            let drop = self.buffer.len().saturating_sub(keep);
            self.buffer.drain(..drop);
            self.buffer_start += drop as u64;
        }
        Ok(())
    }

    /// Decodes the buffer, commits what two hypotheses agree on, trims.
    fn step(&mut self) -> Result<Option<Update>> {
        if self.text.is_some() {
            return self.stream_pulse(false);
        }
        let (hypothesis, segment_ends) = self.decode(false)?;
        let committed = self.agreement.commit(hypothesis);
        self.keep(committed);
        self.trim(&segment_ends);
        let words: Vec<Word> = self
            .utterance
            .iter()
            .chain(self.agreement.tentative())
            .cloned()
            .collect();
        let text = text_of(&words);
        if words.is_empty() || text == self.last_partial {
            return Ok(None);
        }
        self.last_partial.clone_from(&text);
        Ok(Some(Update {
            text,
            words: trimmed(words),
            stable: self.utterance.len(),
            is_final: false,
            committed_at_s: self.committed_at.clone(),
            shown_at_s: Vec::new(),
            utterance: self.utterance_index,
        }))
    }

    /// Decodes the buffer once more and makes the utterance final (see
    /// [`WhisperLiveOptions::second_pass`]); then waits for the next one.
    /// `None` also where its line comes later, from the second pass beside
    /// the stream.
    fn end_utterance(&mut self) -> Result<Option<Update>> {
        if self.text.is_some() && !self.second_pass {
            let update = self.stream_pulse(true)?;
            let Some(held) = self.text.as_mut().and_then(|ts| ts.held.take()) else {
                self.next_utterance();
                return Ok(update);
            };
            return self.redo(held.line);
        }
        if let Some(ts) = &mut self.text {
            // the buffer decoded whole makes the final line
            ts.restart();
        }
        let second_pass = self.second_pass() && !self.buffer.is_empty();
        let last = if second_pass || self.since_decode > 0 {
            Some(self.decode(true)?.0)
        } else {
            None
        };
        match last {
            Some(h) if second_pass && !h.is_empty() => self.replace_buffered(h),
            // the last decoding completes what was agreed (a second pass
            // that gave nothing usable leaves it as it is)
            last => {
                let words = self.agreement.complete(last);
                self.keep(words);
            }
        }
        let utterance = self.utterance_index;
        self.next_utterance();
        let words = std::mem::take(&mut self.utterance);
        let committed_at_s = std::mem::take(&mut self.committed_at);
        if words.is_empty() {
            return Ok(None);
        }
        Ok(Some(Update {
            text: text_of(&words),
            stable: words.len(),
            words: trimmed(words),
            is_final: true,
            committed_at_s,
            shown_at_s: Vec::new(),
            utterance,
        }))
    }

    /// The second pass of an utterance whose streamed text is doubtful
    /// (`held`: its streamed line, which stands if the pass has no text):
    /// beside the stream where there are [`SecondPasses`], else now.
    fn redo(&mut self, held: Option<(Update, Vec<Word>)>) -> Result<Option<Update>> {
        if let Some(ts) = &mut self.text {
            ts.restart();
        }
        let span = (
            self.buffer_start as f64 / SAMPLE_RATE as f64,
            self.fed as f64 / SAMPLE_RATE as f64,
        );
        let decoding = self.buffer_decoding(true)?;
        // the next utterance's prompt holds the streamed words until the
        // second pass's replace them
        if let Some((_, words)) = &held {
            self.remember(words);
        }
        let redo = Redo {
            held,
            span,
            utterance: self.utterance_index,
        };
        if let Some(passes) = self.second_passes.as_mut() {
            // the pass owns its samples: the buffer moves on
            let job = decoding.map(|d| {
                let samples = self.buffer[..d.heard].to_vec();
                (d, samples)
            });
            passes.send(job, redo)?;
            self.next_utterance();
            return Ok(None);
        }
        let hypothesis = match decoding {
            Some(d) => {
                let samples = &self.buffer[..d.heard];
                let net = whole_net(&mut self.whole, &mut self.net, &self.o.engine)?;
                d.run(net, &self.tokenizer, &self.gen, samples)?.0
            }
            None => Vec::new(),
        };
        self.next_utterance();
        Ok(self.redone(redo, hypothesis, span.1))
    }

    /// Second passes running beside the stream whose final lines are not
    /// given out yet (0 where the policy is
    /// [`WhisperLiveOptions::paced`]: it runs them in its way).
    pub fn second_passes_waiting(&self) -> usize {
        self.second_passes.as_ref().map_or(0, |p| p.waiting())
    }

    /// Waits for the next utterance: the buffer back to its pre-roll.
    fn next_utterance(&mut self) {
        self.utterance_index += 1;
        self.agreement = LocalAgreement::new();
        self.in_utterance = self.vad.is_none();
        self.since_decode = 0;
        self.last_partial.clear();
        let keep = (self.o.pre_roll_s * SAMPLE_RATE as f64) as usize;
        let drop = self.buffer.len().saturating_sub(keep);
        self.buffer.drain(..drop);
        self.buffer_start += drop as u64;
    }

    /// The second pass: the words committed inside the buffer (and in the
    /// prompt's history) give way to `hypothesis`, the buffer decoded whole;
    /// those before its last cut stay.
    fn replace_buffered(&mut self, hypothesis: Vec<Word>) {
        // a cut falls at a segment's end, where its last word ends
        let start_s = self.buffer_start as f64 / SAMPLE_RATE as f64 + 1e-3;
        let sealed = self
            .utterance
            .iter()
            .take_while(|w| w.end_s <= start_s)
            .count();
        let replaced = self.utterance.len() - sealed;
        self.utterance.truncate(sealed);
        self.committed_at.truncate(sealed);
        let h = self.history.len();
        self.history.truncate(h - replaced.min(h));
        self.keep(hypothesis);
    }

    /// Where the VAD heard the utterance's speech end (stream seconds), if
    /// it has ended.
    pub(super) fn speech_end_s(&self) -> Option<f64> {
        let (_, seg) = self.vad.as_ref()?;
        if seg.in_speech() {
            return None;
        }
        let end = seg.speech_end()?;
        (end >= self.buffer_start).then(|| end as f64 / SAMPLE_RATE as f64)
    }

    /// Whether the VAD hears speech now or heard its end inside the buffer.
    pub(super) fn vad_heard_speech(&self) -> bool {
        let in_speech = self.vad.as_ref().is_some_and(|(_, seg)| seg.in_speech());
        in_speech || self.speech_end_s().is_some()
    }

    /// Adds newly committed words to the utterance and the prompt history.
    fn keep(&mut self, words: Vec<Word>) {
        let now = self.fed as f64 / SAMPLE_RATE as f64;
        for w in words {
            self.history.push_back(w.clone());
            if self.history.len() > HISTORY_WORDS {
                self.history.pop_front();
            }
            self.committed_at.push(now);
            self.utterance.push(w);
        }
    }

    /// The streamed encoder's window over the buffer (its stream started
    /// again if the buffer's start moved) and the buffer samples its frames
    /// cover; `None` without one. `last`: the utterance ends here, so its
    /// last frames are computed (the stream then starts again at the next
    /// decoding).
    pub(super) fn streamed_window(&mut self, last: bool) -> Result<Option<(Vec<f32>, usize)>> {
        let Some((stream, start)) = &mut self.encoder else {
            return Ok(None);
        };
        if stream.finished() && *start == self.buffer_start && stream.samples() == self.buffer.len()
        {
            // the streamed text's last pulse finished the stream over this
            // very buffer: its window stands as it is
            let window = stream.window();
            if last {
                stream.reset();
            }
            return Ok(Some((window, self.buffer.len())));
        }
        if *start != self.buffer_start || stream.samples() > self.buffer.len() || stream.finished()
        {
            stream.reset();
            *start = self.buffer_start;
        }
        stream.push(&self.buffer[stream.samples()..])?;
        if !last {
            let heard = (stream.frames() * 2 * HOP).min(self.buffer.len());
            return Ok(Some((stream.window(), heard)));
        }
        stream.finish()?;
        let window = stream.window();
        stream.reset();
        Ok(Some((window, self.buffer.len())))
    }

    /// Cuts the buffer once it is longer than `trim_s` (see [`cut_point`]).
    fn trim(&mut self, segment_ends: &[f64]) {
        let start = self.buffer_start as f64 / SAMPLE_RATE as f64;
        let committed = self
            .agreement
            .has_committed()
            .then(|| self.agreement.last_committed_end());
        let cut = cut_point(
            self.buffer_s(),
            start,
            segment_ends,
            committed,
            (self.o.trim_s, self.o.max_buffer_s),
        );
        let cut = match cut {
            Some(Cut::At(t)) => t,
            Some(Cut::CommitAll) => {
                // nothing agreed for a whole buffer: take what there is
                let rest = self.agreement.commit_all();
                let end = rest.last().map(|w| w.end_s);
                self.keep(rest);
                end.unwrap_or(start + self.buffer_s() - self.o.step_s)
            }
            None => return,
        };
        let n =
            (((cut - start) * SAMPLE_RATE as f64).round().max(0.0) as usize).min(self.buffer.len());
        self.buffer.drain(..n);
        self.buffer_start += n as u64;
        self.agreement
            .forget_before(self.buffer_start as f64 / SAMPLE_RATE as f64);
    }
}

impl crate::live::LiveEngine for WhisperLive {
    fn max_push(&self) -> usize {
        usize::MAX
    }

    fn push(&mut self, samples: &[f32], events: &mut Vec<LiveEvent>) -> Result<()> {
        let updates = WhisperLive::push(self, samples)?;
        events.extend(updates.into_iter().map(Update::into_event));
        Ok(())
    }

    fn finish(&mut self, events: &mut Vec<LiveEvent>) -> Result<()> {
        let updates = WhisperLive::finish(self)?;
        events.extend(updates.into_iter().map(Update::into_event));
        Ok(())
    }
}

impl Update {
    /// As the live thread reports it (stamped now).
    pub fn into_event(self) -> LiveEvent {
        let (text, at, utterance) = (self.text, Instant::now(), self.utterance);
        if self.is_final {
            LiveEvent::Final {
                text,
                words: self.words,
                utterance,
                at,
            }
        } else {
            LiveEvent::Partial {
                text,
                words: self.words,
                stable: self.stable,
                utterance,
                at,
            }
        }
    }
}

/// Whether two words are the same, case and punctuation aside.
pub(super) fn same_word(a: &str, b: &str) -> bool {
    let fold = |w: &str| {
        w.chars()
            .filter(|c| c.is_alphanumeric())
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    fold(a) == fold(b)
}

/// The network whole decodings run on: the policy's own `net`, or (where
/// its decoder is shared) one built for them at the first.
fn whole_net<'a>(
    whole: &'a mut Option<Whole>,
    net: &'a mut Box<dyn AlignedBackend + Send>,
    engine: &crate::engine::Engine,
) -> Result<&'a mut (dyn AlignedBackend + Send)> {
    if let Some(Whole::Unbuilt(model)) = whole {
        *whole = Some(Whole::Built(crate::models::whisper::network(
            model, engine,
        )?));
    }
    Ok(match whole {
        Some(Whole::Built(own)) => &mut **own,
        _ => &mut **net,
    })
}
