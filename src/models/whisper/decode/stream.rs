//! Decoding that follows a streamed encoder (AlignAtt, Papi et al. 2023,
//! the policy SimulStreaming runs Whisper with): at each pulse the decoder
//! continues from the tokens it has committed, greedily, and commits a
//! token while its alignment heads' cross-attention peaks at least
//! `margin` encoder frames before the last frame heard; the first token
//! that fails stops the pulse and is shown, uncommitted, as partial text.
//! A committed token is never taken back.
//!
//! The committed prefix is never decoded token by token again: the
//! backend's cache keeps it ([`StreamOptions::refill`] off: only the last
//! committed token is fed again, so that its step reads the new frames), or
//! it is fed again in one batched pass per pulse (on: every committed
//! token's state then sees the new frames, as SimulStreaming does).
//!
//! At the end of the audio ([`StreamDecoder::pulse`] with `last`) the rest
//! is decoded to the end of text with no rule: fed the whole utterance in
//! one pulse, the decoder gives the offline greedy decoding of a window
//! without timestamps.

use super::beam::Beam;
use super::logits::LogitRules;
use super::search::{drive, Choice, Hypothesis, SearchSpec, Stepper};
use super::AlignedBackend;
use crate::profile::{self, Phase};
use crate::{Error, Result};

/// How a [`StreamDecoder`] commits and feeds.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamOptions {
    /// A token is committed while its attention peak lies at least this
    /// many encoder frames (20 ms each) before the last frame heard.
    /// `None`: the checkpoint's (`pulsed_stream_margin` in its
    /// config.json, resolved by the live policy), else [`DEFAULT_MARGIN`].
    pub margin: Option<usize>,
    /// A token the decoder is sure of (its probability at least `.0`) is
    /// committed at `.1` frames instead of [`StreamOptions::margin`]: the
    /// margin guards against a word guessed before its end is heard, and a
    /// sure token is seldom such a guess. `None`: one margin for all.
    /// Default (0.97, 10): on real and synthetic held-out speech 80-100 ms
    /// sooner for at most one word in a thousand
    /// (docs/notes/streaming-decoder.md).
    pub sure: Option<(f32, usize)>,
    /// Attention moves forward with the audio: a token whose peak lies
    /// more than this many frames before the last committed token's is
    /// the decoder going back over what it said (a loop), and ends the
    /// pulse (and, at the end of the audio, the decoding).
    pub backstep: usize,
    /// At the end of the audio, a token whose attention peaks past the
    /// last frame heard is text the audio does not hold (the decoder going
    /// on into the padding), and ends the decoding.
    pub stop_past_audio: bool,
    /// Most tokens past the committed ones shown as partial text: those
    /// that read audio heard, after the token before them, whole words (a
    /// decoder step each). 0: the committed text alone.
    pub show: usize,
    /// A token past the committed ones is shown only where the decoder
    /// gives it at least this probability (0: any). Default 0.3: on real
    /// and synthetic held-out speech the partial lines read 0.6 points
    /// better for at most 20 ms more before a word is first shown
    /// (docs/notes/streaming-decoder.md).
    pub show_sure: f32,
    /// Feed the committed prefix again in one pass at every pulse instead
    /// of keeping it in the backend's cache.
    pub refill: bool,
    /// Most tokens after the prompt: this many, plus this many a second of
    /// audio heard (speech runs at 3-5 tokens a second), so that a decoder
    /// looping over the tail cannot run on.
    pub max_tokens: (usize, f64),
    /// A token that makes the text end in this many copies of one phrase
    /// (up to [`LOOP_PERIOD`] tokens, punctuation and case aside; one more
    /// for a phrase of one token) is not committed: a greedy decoder loops
    /// over spontaneous speech with its attention moving forward, where the
    /// backstep guard does not see it.
    /// At the end of the audio it ends the decoding and marks it
    /// [`StreamDecoder::looped`]. 0: off.
    pub repeats: usize,
    /// Beam width of the decoding at the end of the audio, over what was
    /// not committed (the committed tokens fed in one pass first); 1:
    /// greedy, as the pulses. The rest is then cut where a token reads
    /// past the audio, goes back or loops, as the greedy end is.
    pub final_beam: usize,
    /// A token that goes on with a word, whose attention peaks in the
    /// stand-in for audio not heard yet while over the heard frames it
    /// peaks no earlier than the last committed token and at least this
    /// many frames before the last one heard, is placed at that heard
    /// peak: the stand-in can hold a word's last pieces ("over|r|ides")
    /// long after they were said, and the text stalls there until the end
    /// of speech. A token that starts a word is never placed so (a loop's
    /// first word back over the audio would be). 0: off.
    pub stall: usize,
}

/// The margin (frames) of a checkpoint that names none: chosen for the
/// 640 ms student on real held-out speech (docs/notes/streaming-decoder.md).
pub const DEFAULT_MARGIN: usize = 20;

/// The longest phrase, in tokens, whose repeats [`StreamOptions::repeats`]
/// counts.
pub const LOOP_PERIOD: usize = 16;

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            margin: None,
            sure: Some((0.97, 10)),
            backstep: 25,
            stop_past_audio: true,
            show: 2,
            show_sure: 0.3,
            refill: false,
            max_tokens: (16, 8.0),
            repeats: 3,
            final_beam: 1,
            stall: 50,
        }
    }
}

/// What one decoding streams over: the prompt (previous text, the
/// start-of-transcript sequence and `<|notimestamps|>`), the logit rules
/// and the heads whose attention follows the audio.
#[derive(Debug, Clone)]
pub struct StreamSpec {
    pub prompt: Vec<u32>,
    pub eot: u32,
    pub suppress: Vec<u32>,
    pub suppress_begin: Vec<u32>,
    pub heads: Vec<(usize, usize)>,
    /// For each token id, whether it starts a word
    /// ([`crate::models::whisper::WhisperTokenizer::word_starts`]): a pulse then
    /// commits whole words only. `None`: tokens one by one.
    pub word_starts: Option<std::sync::Arc<Vec<bool>>>,
    /// For each token id, its text folded (case and punctuation aside) to
    /// a number, 0 for none ([`crate::models::whisper::WhisperTokenizer::text_keys`]):
    /// what [`StreamOptions::repeats`] compares. `None`: no loop check.
    pub keys: Option<std::sync::Arc<Vec<u32>>>,
}

/// The tokens of one decoding and how they were fed.
pub struct StreamDecoder {
    spec: StreamSpec,
    rules: LogitRules,
    o: StreamOptions,
    /// Text tokens committed (after the prompt), and each one's attention
    /// peak (encoder frame).
    committed: Vec<u32>,
    peaks: Vec<usize>,
    /// The last pulse's uncommitted continuation as shown: the tokens
    /// past the committed ones that read audio heard, whole words.
    tentative: Vec<u32>,
    /// The last pulse's first uncommitted token, shown or not.
    next: Option<u32>,
    /// Each tentative token's probability, where [`StreamOptions::sure`]
    /// is set and attention comes from a pass of its own.
    sureness: Vec<f32>,
    /// Positions of prompt + committed the backend's cache holds (keep mode).
    cached: usize,
    /// The end of text was decoded at a last pulse.
    ended: bool,
    /// The last pulse's decoding ended in a loop.
    looped: bool,
    /// Tokens fed one at a time, and tokens fed in batched passes.
    pub fed_single: usize,
    pub fed_batched: usize,
    logits: Vec<f32>,
}

/// The peak frame of one position's attention, averaged over heads, and
/// its peak over the first `heard` frames.
fn peaks(rows: &[&[f32]], frames: usize, heard: usize) -> (usize, usize) {
    let mut best = (0, f32::NEG_INFINITY);
    let mut best_heard = best;
    for f in 0..frames {
        let s: f32 = rows.iter().map(|r| r[f]).sum();
        if s > best.1 {
            best = (f, s);
        }
        if f < heard && s > best_heard.1 {
            best_heard = (f, s);
        }
    }
    (best.0, best_heard.0)
}

/// The probability of `token` under `logits` (softmax).
fn probability(logits: &[f32], token: u32) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    logits
        .get(token as usize)
        .map_or(0.0, |&l| (l - max).exp() / sum)
}

impl StreamDecoder {
    /// The margin a token of probability `p` is committed at.
    fn margin(&self, p: impl FnOnce() -> f32) -> usize {
        let margin = self.o.margin.unwrap_or(DEFAULT_MARGIN);
        match self.o.sure {
            Some((sure, m)) if m < margin && p() >= sure => m,
            _ => margin,
        }
    }

    /// A decoding from `spec.prompt`, nothing committed.
    pub fn new(spec: StreamSpec, o: StreamOptions) -> Result<StreamDecoder> {
        if spec.prompt.is_empty() || spec.heads.is_empty() {
            return Err(Error::Other(
                "streaming decoder: needs a prompt and alignment heads".into(),
            ));
        }
        let rules = LogitRules {
            suppress: spec.suppress.clone(),
            suppress_begin: spec.suppress_begin.clone(),
            ..LogitRules::default()
        };
        Ok(StreamDecoder {
            spec,
            rules,
            o,
            committed: Vec::new(),
            peaks: Vec::new(),
            tentative: Vec::new(),
            sureness: Vec::new(),
            next: None,
            cached: 0,
            ended: false,
            looped: false,
            fed_single: 0,
            fed_batched: 0,
            logits: Vec::new(),
        })
    }

    /// The committed text tokens.
    pub fn committed(&self) -> &[u32] {
        &self.committed
    }

    /// Each committed token's attention peak (encoder frame).
    pub fn peaks(&self) -> &[usize] {
        &self.peaks
    }

    /// The last pulse's uncommitted continuation.
    pub fn tentative(&self) -> &[u32] {
        &self.tentative
    }

    /// The end of text was decoded (after a last pulse).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The last pulse ended in a loop ([`StreamOptions::repeats`]): the
    /// text after the committed tokens is cut there, so a caller decodes
    /// the utterance again another way.
    pub fn looped(&self) -> bool {
        self.looped
    }

    /// Whether `token` after `text` completes [`StreamOptions::repeats`]
    /// copies of one phrase.
    fn loops(&self, text: &[u32], token: u32) -> bool {
        let (Some(keys), r) = (&self.spec.keys, self.o.repeats) else {
            return false;
        };
        let key = |t: u32| keys.get(t as usize).copied().unwrap_or(0);
        if r < 2 || key(token) == 0 {
            return false;
        }
        // the text's last keys, newest first, as far as the longest loop
        let tail: Vec<u32> = std::iter::once(token)
            .chain(text.iter().rev().copied())
            .map(key)
            .filter(|&k| k != 0)
            .take((r + 1) * LOOP_PERIOD)
            .collect();
        // a word said three times is common speech ("no, no, no"), a
        // phrase said three times a loop: one word needs a copy more
        let copies = |p: usize| if p == 1 { r + 1 } else { r };
        (1..=LOOP_PERIOD)
            .take_while(|&p| copies(p) * p <= tail.len())
            .any(|p| (p..copies(p) * p).all(|i| tail[i] == tail[i % p]))
    }

    /// Decodes over the window the backend holds, whose first `heard`
    /// encoder frames are the audio's (the rest its stand-in); `last`: the
    /// audio ended, so everything left is decoded. Returns how many tokens
    /// it committed.
    pub fn pulse(
        &mut self,
        net: &mut dyn AlignedBackend,
        heard: usize,
        last: bool,
    ) -> Result<usize> {
        self.tentative.clear();
        self.sureness.clear();
        self.next = None;
        if self.ended {
            return Ok(0);
        }
        self.looped = false;
        let before = self.committed.len();
        if last && self.o.final_beam > 1 {
            profile::time(Phase::Decode, || self.search_rest(net, heard))?;
            return profile::time(Phase::Align, || self.commit_aligned(net, heard, true))
                .map(|()| self.committed.len() - before);
        }
        let records = net.record_attention(Some(&self.spec.heads));
        let r = profile::time(Phase::Decode, || self.decode(net, heard, last, records));
        if records {
            net.record_attention(None);
        }
        r?;
        if !records {
            profile::time(Phase::Align, || self.commit_aligned(net, heard, last))?;
        }
        if !last {
            self.hold_partial_word(before);
        }
        Ok(self.committed.len() - before)
    }

    /// A word whose first tokens passed the rule but whose next one did
    /// not may still be spelled otherwise once its end is heard: the tokens
    /// of it committed at this pulse (those after `before`) go back to the
    /// tentative ones (shown where its next token is).
    fn hold_partial_word(&mut self, before: usize) {
        let Some(next) = self.next else {
            return;
        };
        if self.starts_word(next) {
            return;
        }
        let pulse = &self.committed[before..];
        let keep = pulse
            .iter()
            .rposition(|&t| self.starts_word(t))
            .map_or(before, |i| before + i);
        let held: Vec<u32> = self.committed.drain(keep..).collect();
        self.peaks.truncate(keep);
        if self.tentative.first() == Some(&next) {
            self.tentative.splice(0..0, held);
        }
        self.cached = self
            .cached
            .min(self.spec.prompt.len() + self.committed.len());
    }

    /// Whether `token` starts a word (every token does without
    /// [`StreamSpec::word_starts`]).
    fn starts_word(&self, token: u32) -> bool {
        self.spec
            .word_starts
            .as_ref()
            .is_none_or(|s| s.get(token as usize).is_none_or(|&s| s))
    }

    /// Drops the shown tokens' last word where `next` (the token decoded
    /// after them; `None`: the end of text) goes on with it: the word's end
    /// is not read yet.
    fn cut_partial_word(&mut self, next: Option<u32>) {
        if next.is_none_or(|t| self.starts_word(t)) {
            return;
        }
        let keep = self
            .tentative
            .iter()
            .rposition(|&t| self.starts_word(t))
            .unwrap_or(0);
        self.tentative.truncate(keep);
    }

    /// Feeds what the pulse needs and runs the greedy search; with
    /// `records`, commits as it goes (else every token is tentative until
    /// [`StreamDecoder::commit_aligned`]).
    fn decode(
        &mut self,
        net: &mut dyn AlignedBackend,
        heard: usize,
        last: bool,
        records: bool,
    ) -> Result<()> {
        let mut seq = self.spec.prompt.clone();
        seq.extend(&self.committed);
        let n = seq.len();
        let bound = self.bound(net, heard);
        let keep = !self.o.refill && self.cached == n && n > 1 && net.rewind(n - 1)?;
        if keep {
            net.feed(&seq[n - 1..], 1, &[0], &mut self.logits)?;
            self.fed_single += 1;
        } else {
            net.start(&[0])?;
            net.feed(&seq, n, &[n - 1], &mut self.logits)?;
            self.fed_batched += n;
        }
        self.cached = n;
        let mut attention = if records {
            net.take_attention()
        } else {
            Vec::new()
        };
        // the text so far: committed, then tentative tokens, in the order
        // they were chosen
        let mut sequence = self.committed.clone();
        let mut shown_peak = self.peaks.last().copied().unwrap_or(0);
        while sequence.len() < bound {
            let logits = &mut self.logits;
            self.rules.apply(sequence.len(), logits, &sequence, 0);
            let token = logits
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
                .map_or(self.spec.eot, |(i, _)| i as u32);
            if token == self.spec.eot {
                self.ended = last;
                break;
            }
            if records {
                let frames = net.window_frames() / 2;
                let p = self.placed(
                    token,
                    peaks(&last_rows(&attention, frames)?, frames, heard),
                    heard,
                    last,
                );
                if self.goes_back(p) || (last && self.o.stop_past_audio && p >= heard) {
                    // a loop, or (at the end) text the audio does not hold
                    self.ended = last;
                    break;
                }
                let uncommitted = self.next.is_some();
                if !uncommitted && self.loops(&sequence, token) {
                    if last {
                        self.ended = true;
                        self.looped = true;
                    } else {
                        self.next = Some(token);
                    }
                    break;
                }
                // the token's probability (a softmax over the vocabulary),
                // taken once and only where a rule asks for it
                let mut prob = None;
                let mut prob_of =
                    |logits: &[f32]| *prob.get_or_insert_with(|| probability(logits, token));
                if uncommitted || (!last && p + self.margin(|| prob_of(&self.logits)) >= heard) {
                    self.next.get_or_insert(token);
                    // shown while it reads audio heard after the token
                    // before it (a word said again reads the same audio),
                    // whole words only, and sure enough
                    if p >= heard
                        || p < shown_peak
                        || self.tentative.len() >= self.o.show
                        || (self.o.show_sure > 0.0 && prob_of(&self.logits) < self.o.show_sure)
                    {
                        self.cut_partial_word(Some(token));
                        break;
                    }
                    self.tentative.push(token);
                    shown_peak = p;
                } else {
                    self.committed.push(token);
                    self.peaks.push(p);
                    shown_peak = p;
                }
            } else {
                if self.o.sure.is_some() || self.o.show_sure > 0.0 {
                    self.sureness.push(probability(&self.logits, token));
                }
                self.tentative.push(token);
            }
            sequence.push(token);
            net.feed(&[token], 1, &[0], &mut self.logits)?;
            self.fed_single += 1;
            if records {
                if self.next.is_none() {
                    self.cached += 1;
                }
                attention = net.take_attention();
            }
        }
        if last && !self.ended && records {
            // cut by the bound: the decoding is over all the same
            self.ended = true;
        }
        Ok(())
    }

    /// Most text tokens of the decoding, `heard` frames heard.
    fn bound(&self, net: &dyn AlignedBackend, heard: usize) -> usize {
        let bound = self.o.max_tokens.0 + (heard as f64 * 0.02 * self.o.max_tokens.1) as usize;
        let room = net
            .max_text_positions()
            .saturating_sub(self.spec.prompt.len() + 1);
        bound.min(room)
    }

    /// The end of the audio with a beam ([`StreamOptions::final_beam`]):
    /// the prompt and the committed tokens are fed in one pass, the rest is
    /// searched from there and left tentative, for
    /// [`StreamDecoder::commit_aligned`] to cut by where it attends.
    fn search_rest(&mut self, net: &mut dyn AlignedBackend, heard: usize) -> Result<()> {
        let mut seq = self.spec.prompt.clone();
        seq.extend(&self.committed);
        let n = seq.len();
        net.reserve(self.o.final_beam)?;
        net.start(&[0])?;
        if n > 1 {
            net.feed(&seq[..n - 1], n - 1, &[], &mut self.logits)?;
            self.fed_batched += n - 1;
        }
        // the first free step's suppression is for the first text token
        let rules = if self.committed.is_empty() {
            self.rules.clone()
        } else {
            LogitRules {
                suppress_begin: Vec::new(),
                ..self.rules.clone()
            }
        };
        let spec = SearchSpec {
            start: seq[n - 1],
            prefix: Vec::new(),
            max_length: self.bound(net, heard).saturating_sub(self.committed.len()),
            eot: self.spec.eot,
            rules: &rules,
            no_speech: None,
            length_penalty: 1.0,
        };
        let mut beam = Counted {
            search: Beam::new(&spec, self.o.final_beam, 1.0),
            fed: 0,
        };
        drive(net, &mut beam)?;
        self.fed_single += beam.fed;
        self.tentative = beam.search.result().0.tokens;
        self.cached = 0;
        Ok(())
    }

    /// Where a token whose attention peaks at `p`, and at `p_heard` over
    /// the `heard` frames, is taken to read ([`StreamOptions::stall`]).
    fn placed(&self, token: u32, (p, p_heard): (usize, usize), heard: usize, last: bool) -> usize {
        // at the end of the audio the stand-in is where text the audio
        // does not hold reads (stop_past_audio): a stalled token was
        // committed by the pulses before
        let stalled = !last
            && self.o.stall > 0
            && !self.starts_word(token)
            && p >= heard
            && p_heard + self.o.stall <= heard
            && self.peaks.last().is_none_or(|&prev| p_heard >= prev);
        if stalled {
            p_heard
        } else {
            p
        }
    }

    /// Whether a token peaking at frame `p` goes back over what was said.
    fn goes_back(&self, p: usize) -> bool {
        self.peaks
            .last()
            .is_some_and(|&prev| p.saturating_add(self.o.backstep) < prev)
    }

    /// Commits the tentative tokens whose attention (a pass of its own,
    /// for a backend whose steps keep none) passes the rule.
    fn commit_aligned(
        &mut self,
        net: &mut dyn AlignedBackend,
        heard: usize,
        last: bool,
    ) -> Result<()> {
        if self.tentative.is_empty() {
            if last {
                self.ended = true;
            }
            return Ok(());
        }
        let mut seq = self.spec.prompt.clone();
        seq.extend(&self.committed);
        let first = seq.len() - 1;
        seq.extend(&self.tentative);
        let heads = &self.spec.heads;
        // the rows that predict the tentative tokens; the prompt and the
        // committed tokens before them may be kept from the last pulse
        let attn = net.cross_attention_from(0, &seq, heads, first)?;
        let t = seq.len() - first;
        let frames = attn.len() / (heads.len() * t).max(1);
        if frames == 0 {
            return Err(Error::Other("streaming decoder: no cross-attention".into()));
        }
        let tentative = std::mem::take(&mut self.tentative);
        let found: Vec<(usize, usize)> = (0..tentative.len())
            .map(|row| {
                let rows: Vec<&[f32]> = (0..heads.len())
                    .map(|h| &attn[(h * t + row) * frames..(h * t + row + 1) * frames])
                    .collect();
                peaks(&rows, frames, heard)
            })
            .collect();
        let mut passed = 0;
        for (i, (&token, &found)) in tentative.iter().zip(&found).enumerate() {
            let p = self.placed(token, found, heard, last);
            let past = if last {
                self.o.stop_past_audio && p >= heard
            } else {
                p + self.margin(|| self.sureness.get(i).copied().unwrap_or(0.0)) >= heard
            };
            if self.goes_back(p) || past {
                break;
            }
            if self.loops(&self.committed, token) {
                self.looped = last;
                break;
            }
            self.committed.push(token);
            self.peaks.push(p);
            passed += 1;
        }
        // shown as the steps that keep attention show it: past the
        // committed tokens, while they read audio heard, whole words
        self.next = tentative.get(passed).copied();
        let mut before = self.peaks.last().copied().unwrap_or(0);
        let sure = |i: usize| {
            self.o.show_sure <= 0.0 || self.sureness.get(i).is_some_and(|&p| p >= self.o.show_sure)
        };
        let shown = found[passed..]
            .iter()
            .zip(&tentative[passed..])
            .map(|(&f, &token)| self.placed(token, f, heard, last))
            .enumerate()
            .take(self.o.show)
            .take_while(|&(i, p)| {
                let forward = p < heard && p >= before && sure(passed + i);
                before = p;
                forward
            })
            .count();
        self.tentative = tentative[passed..passed + shown].to_vec();
        self.cut_partial_word(tentative.get(passed + shown).copied());
        // every tentative token was fed, into the decoder's own cache (the
        // pass above runs over a cache of its own): the prompt and the
        // committed tokens stay valid there
        self.cached = self.spec.prompt.len() + self.committed.len();
        if last {
            self.ended = true;
            self.tentative.clear();
        }
        Ok(())
    }
}

/// A search that counts the tokens it is fed (a row each, every step).
struct Counted<S> {
    search: S,
    fed: usize,
}

impl<S: Stepper> Stepper for Counted<S> {
    fn inputs(&self) -> &[u32] {
        self.search.inputs()
    }
    fn advance(&mut self, logits: &mut [f32], vocab: usize) -> Option<Vec<usize>> {
        self.fed += self.search.inputs().len();
        self.search.advance(logits, vocab)
    }
    fn choice(&mut self, vocab: usize) -> Option<Choice> {
        self.search.choice(vocab)
    }
    fn advance_chosen(
        &mut self,
        ids: &[u32],
        scores: &[f32],
        stride: usize,
        no_speech: &[f32],
    ) -> Option<Vec<usize>> {
        self.fed += self.search.inputs().len();
        self.search.advance_chosen(ids, scores, stride, no_speech)
    }
    fn rules(&self) -> &LogitRules {
        self.search.rules()
    }
    fn result(&mut self) -> (Hypothesis, Option<f32>) {
        self.search.result()
    }
}

/// The last fed position's row of each head's kept attention (`[rows,
/// frames]` a head).
fn last_rows(attention: &[Vec<f32>], frames: usize) -> Result<Vec<&[f32]>> {
    if frames == 0 || attention.is_empty() || attention.iter().any(|a| a.len() < frames) {
        return Err(Error::Other(
            "streaming decoder: the backend kept no attention".into(),
        ));
    }
    Ok(attention.iter().map(|a| &a[a.len() - frames..]).collect())
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
