//! The streaming decoder over a fake backend whose attention says where
//! each token was spoken.

use super::*;
use crate::models::whisper::{AlignmentSource, WhisperBackend};

const EOT: u32 = 50;
const PROMPT: [u32; 2] = [60, 61];
const FRAMES: usize = 1500;

/// A decoder that reads `words` tokens, token `k` (1-based) spoken at
/// encoder frame `10 k`; the position that predicts token `k` attends
/// there (or, `loop_at`, back to frame 0 from that token on: a loop).
struct Fake {
    words: u32,
    loop_at: Option<u32>,
    /// From this token on, tokens 1, 2, 1, 2, ... with the attention
    /// moving forward: a loop the backstep guard does not see.
    repeat_at: Option<u32>,
    /// From this token on, the decoder is unsure (probability about 0.04).
    unsure_at: Option<u32>,
    /// This token's attention peaks in the stand-in for audio not heard,
    /// at half that height where it was spoken: a stall.
    stuck_at: Option<u32>,
    /// Whether the backend keeps the attention of its steps (else the
    /// decoder asks a pass of its own).
    keeps: bool,
    /// Text positions fed: the sequence as the cache holds it.
    seq: Vec<u32>,
    /// Positions fed one token at a time, in order.
    single: Vec<usize>,
    recording: bool,
    kept: Vec<f32>,
}

impl Fake {
    fn new(words: u32) -> Fake {
        Fake {
            words,
            loop_at: None,
            repeat_at: None,
            unsure_at: None,
            stuck_at: None,
            keeps: true,
            seq: Vec::new(),
            single: Vec::new(),
            recording: false,
            kept: Vec::new(),
        }
    }

    /// The next token after `seq` and the frame its predicting
    /// position attends to.
    fn next(&self, seq: &[u32]) -> (u32, usize) {
        let said = seq.len() - PROMPT.len();
        let k = said as u32 + 1;
        if self.loop_at.is_some_and(|l| k >= l) {
            return (1 + k % 2, 0);
        }
        if self.repeat_at.is_some_and(|r| k >= r) {
            return (1 + (k + 1) % 2, 10 * k as usize);
        }
        if k > self.words {
            (EOT, 10 * k as usize)
        } else {
            (k, 10 * k as usize)
        }
    }

    /// The attention of the position that predicts the token after `seq`.
    fn row(&self, seq: &[u32]) -> Vec<f32> {
        let (token, at) = self.next(seq);
        let mut row = vec![0.0; FRAMES];
        row[at.min(FRAMES - 1)] = 1.0;
        if self.stuck_at == Some(token) {
            row[at.min(FRAMES - 1)] = 0.5;
            row[FRAMES - 7] = 1.0;
        }
        row
    }
}

impl WhisperBackend for Fake {
    fn n_mels(&self) -> usize {
        80
    }
    fn window_frames(&self) -> usize {
        2 * FRAMES
    }
    fn vocab_size(&self) -> usize {
        64
    }
    fn max_text_positions(&self) -> usize {
        448
    }
    fn log_mel(&mut self, _audio: &[f32]) -> Result<Vec<f32>> {
        Ok(Vec::new())
    }
    fn encode(&mut self, _windows: &[&[f32]]) -> Result<()> {
        Ok(())
    }
    fn start(&mut self, _windows: &[usize]) -> Result<()> {
        self.seq.clear();
        Ok(())
    }
    fn rewind(&mut self, len: usize) -> Result<bool> {
        assert!(len <= self.seq.len(), "rewind past the cache");
        self.seq.truncate(len);
        Ok(true)
    }
    fn feed(
        &mut self,
        tokens: &[u32],
        n: usize,
        _p: &[usize],
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        // a search's rows (beams) all read the first row's sequence
        let rows = tokens.len() / n;
        assert_eq!(tokens.len(), rows * n);
        if n == 1 {
            self.single.push(self.seq.len());
        }
        for &t in &tokens[..n] {
            self.seq.push(t);
            if self.recording {
                let row = self.row(&self.seq);
                self.kept.extend(row);
            }
        }
        let (token, _) = self.next(&self.seq);
        logits.clear();
        logits.resize(64 * rows, 0.0);
        let sure = self.unsure_at.is_none_or(|u| token < u || token == EOT);
        for row in logits.chunks_exact_mut(64) {
            row[token as usize] = if sure { 10.0 } else { 1.0 };
        }
        Ok(())
    }
    fn reorder(&mut self, _src: &[usize]) -> Result<()> {
        Ok(())
    }
}

impl AlignmentSource for Fake {
    fn cross_attention(
        &mut self,
        _w: usize,
        tokens: &[u32],
        _h: &[(usize, usize)],
    ) -> Result<Vec<f32>> {
        // one head: the row after each position peaks where the token it
        // predicts was spoken
        Ok((0..tokens.len())
            .flat_map(|i| self.row(&tokens[..=i]))
            .collect())
    }
    fn record_attention(&mut self, heads: Option<&[(usize, usize)]>) -> bool {
        self.recording = self.keeps && heads.is_some();
        self.kept.clear();
        self.keeps
    }
    fn take_attention(&mut self) -> Vec<Vec<f32>> {
        vec![std::mem::take(&mut self.kept)]
    }
}

fn spec(word_starts: Option<Vec<bool>>) -> StreamSpec {
    StreamSpec {
        prompt: PROMPT.to_vec(),
        eot: EOT,
        suppress: Vec::new(),
        suppress_begin: Vec::new(),
        heads: vec![(0, 0)],
        word_starts: word_starts.map(std::sync::Arc::new),
        keys: None,
    }
}

/// The defaults with one margin for every token (the fake is sure of all).
fn plain() -> StreamOptions {
    StreamOptions {
        sure: None,
        ..StreamOptions::default()
    }
}

fn decoder(o: StreamOptions) -> StreamDecoder {
    StreamDecoder::new(spec(None), o).unwrap()
}

/// Every text token its own key.
fn keyed(o: StreamOptions) -> StreamDecoder {
    let keys = (0..64).map(|t| if t < EOT { t + 1 } else { 0 }).collect();
    let spec = StreamSpec {
        keys: Some(std::sync::Arc::new(keys)),
        ..spec(None)
    };
    StreamDecoder::new(spec, o).unwrap()
}

/// Pulses every 32 frames up to `frames`, then the last one.
fn stream(net: &mut Fake, d: &mut StreamDecoder, frames: usize) -> Vec<usize> {
    let mut committed_after = Vec::new();
    for heard in (32..frames).step_by(32) {
        let before = d.committed().len();
        let new = d.pulse(net, heard, false).unwrap();
        assert_eq!(new, d.committed().len() - before, "the count of new tokens");
        committed_after.push(d.committed().len());
    }
    d.pulse(net, frames, true).unwrap();
    committed_after
}

/// A decoder over a fake of 12 tokens per way of feeding the committed
/// prefix (kept in the cache, refilled), with options `o` otherwise.
fn both_feeds(o: StreamOptions) -> [(bool, Fake, StreamDecoder); 2] {
    [false, true].map(|refill| {
        let o = StreamOptions {
            refill,
            ..o.clone()
        };
        (refill, Fake::new(12), decoder(o))
    })
}

#[test]
fn one_pulse_over_the_whole_audio_is_the_greedy_decoding() {
    let mut net = Fake::new(12);
    let mut d = decoder(plain());
    d.pulse(&mut net, 200, true).unwrap();
    assert_eq!(d.committed(), (1..=12).collect::<Vec<u32>>());
    assert!(d.ended() && d.tentative().is_empty());
    // every token fed once, after the prompt fed in one pass
    assert_eq!((d.fed_batched, d.fed_single), (PROMPT.len(), 12));
}

#[test]
fn pulses_commit_what_lies_a_margin_before_the_last_frame_heard() {
    for (refill, mut net, mut d) in both_feeds(StreamOptions {
        margin: Some(20),
        ..plain()
    }) {
        let after = stream(&mut net, &mut d, 140);
        for (i, &n) in after.iter().enumerate() {
            let heard = 32 * (i + 1);
            // token k peaks at 10 k: committed while 10 k + 20 < heard
            let expect = (1..=12).filter(|k| 10 * k + 20 < heard).count();
            assert_eq!(n, expect, "refill {refill}, heard {heard}");
        }
        assert_eq!(
            d.committed(),
            (1..=12).collect::<Vec<u32>>(),
            "refill {refill}"
        );
    }
}

#[test]
fn the_committed_prefix_is_not_fed_token_by_token_again() {
    // nothing shown past the committed tokens: each shown one is fed once
    // more when it is decoded again at the next pulse
    let o = StreamOptions { show: 0, ..plain() };
    for (refill, mut net, mut d) in both_feeds(o) {
        let pulses = stream(&mut net, &mut d, 140).len() + 1;
        let mut seen = vec![0usize; 448];
        for &p in &net.single {
            seen[p] += 1;
        }
        // a position is fed alone once when its token is committed; with
        // the cache kept, the last committed one is fed again at each
        // pulse (its step reads the new frames) and nothing before it
        let again: usize = seen.iter().map(|&n| n.saturating_sub(1)).sum();
        if refill {
            assert_eq!(again, 0);
            assert_eq!(d.fed_single, 12);
        } else {
            assert!(
                again < pulses,
                "{again} repeated feeds over {pulses} pulses"
            );
            assert_eq!(
                d.fed_batched,
                PROMPT.len(),
                "the prompt is fed in one pass, once"
            );
        }
    }
}

#[test]
fn tokens_past_the_first_uncommitted_one_are_shown_while_they_read_heard_audio() {
    for (refill, mut net, mut d) in both_feeds(StreamOptions { show: 3, ..plain() }) {
        d.pulse(&mut net, 64, false).unwrap();
        // committed while 10 k + 20 < 64; shown while 10 k < 64
        assert_eq!(d.committed(), [1, 2, 3, 4]);
        assert_eq!(d.tentative(), [5, 6]);
        d.pulse(&mut net, 96, false).unwrap();
        assert_eq!(d.committed(), [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(d.tentative(), [8, 9]);
        d.pulse(&mut net, 140, true).unwrap();
        assert_eq!(
            d.committed(),
            (1..=12).collect::<Vec<u32>>(),
            "refill {refill}"
        );
    }
}

#[test]
fn a_pulse_commits_whole_words() {
    // words of two tokens: odd ids start them
    let starts: Vec<bool> = (0..64).map(|t| t % 2 == 1 || t >= EOT as usize).collect();
    let mut net = Fake::new(12);
    let o = StreamOptions { show: 0, ..plain() };
    let mut d = StreamDecoder::new(spec(Some(starts)), o).unwrap();
    // 10 k + 20 < 80 passes 1..=5; 6 continues 5's word, which waits
    // (unshown: nothing past the committed words is shown)
    assert_eq!(d.pulse(&mut net, 80, false).unwrap(), 4);
    assert_eq!(d.committed(), [1, 2, 3, 4]);
    assert!(d.tentative().is_empty());
    // 1..=6 pass, 7 starts a word: 5 and 6 are committed
    assert_eq!(d.pulse(&mut net, 90, false).unwrap(), 2);
    assert_eq!(d.committed(), [1, 2, 3, 4, 5, 6]);
    d.pulse(&mut net, 140, true).unwrap();
    assert_eq!(d.committed(), (1..=12).collect::<Vec<u32>>());
}

#[test]
fn partial_text_shows_whole_words_that_read_heard_audio() {
    let starts: Vec<bool> = (0..64).map(|t| t % 2 == 1 || t >= EOT as usize).collect();
    for (heard, show, committed, tentative) in [
        // 1..=5 pass; 6 (frame 60) reads heard audio and ends 5's word,
        // shown with it
        (80, 1, 4, &[5, 6][..]),
        (80, 0, 4, &[][..]),
        // 1..=6 pass; 7 and 8 read heard audio: shown as one word, or not
        // at all where 8 is not decoded
        (85, 2, 6, &[7, 8][..]),
        (85, 1, 6, &[][..]),
        (85, 8, 6, &[7, 8][..]),
    ] {
        let mut net = Fake::new(12);
        let o = StreamOptions { show, ..plain() };
        let mut d = StreamDecoder::new(spec(Some(starts.clone())), o).unwrap();
        d.pulse(&mut net, heard, false).unwrap();
        let case = format!("heard {heard}, show {show}");
        assert_eq!(d.committed().len(), committed, "{case}");
        assert_eq!(d.tentative(), tentative, "{case}");
    }
}

#[test]
fn a_sure_token_is_committed_at_its_own_margin() {
    let o = StreamOptions {
        sure: Some((0.9, 5)),
        ..plain()
    };
    // sure tokens: committed while 10 k + 5 < 64
    let mut net = Fake::new(12);
    let mut d = decoder(o.clone());
    d.pulse(&mut net, 64, false).unwrap();
    assert_eq!(d.committed(), [1, 2, 3, 4, 5]);
    // unsure from token 4 on: those wait for the margin, 10 k + 20 < 64
    let mut net = Fake::new(12);
    net.unsure_at = Some(4);
    let mut d = decoder(o);
    d.pulse(&mut net, 64, false).unwrap();
    assert_eq!(d.committed(), [1, 2, 3, 4]);
    d.pulse(&mut net, 140, true).unwrap();
    assert_eq!(d.committed(), (1..=12).collect::<Vec<u32>>());
}

#[test]
fn an_unsure_token_past_the_committed_ones_is_not_shown() {
    let o = StreamOptions {
        show: 3,
        show_sure: 0.3,
        ..plain()
    };
    // committed while 10 k + 20 < 64; 5 and 6 read heard audio
    let mut net = Fake::new(12);
    let mut d = decoder(o.clone());
    d.pulse(&mut net, 64, false).unwrap();
    assert_eq!(d.committed(), [1, 2, 3, 4]);
    assert_eq!(d.tentative(), [5, 6]);
    // unsure from token 6 on (probability about 0.04): 5 alone is shown
    let mut net = Fake::new(12);
    net.unsure_at = Some(6);
    let mut d = decoder(o);
    d.pulse(&mut net, 64, false).unwrap();
    assert_eq!(d.committed(), [1, 2, 3, 4]);
    assert_eq!(d.tentative(), [5]);
    // what is shown is never committed by it: the end decodes it all
    d.pulse(&mut net, 140, true).unwrap();
    assert_eq!(d.committed(), (1..=12).collect::<Vec<u32>>());
}

#[test]
fn a_decoder_going_back_over_what_it_said_commits_nothing_more() {
    let mut net = Fake::new(12);
    net.loop_at = Some(6);
    let mut d = decoder(plain());
    stream(&mut net, &mut d, 140);
    assert_eq!(d.committed(), (1..=5).collect::<Vec<u32>>());
    assert!(d.ended());
}

#[test]
fn a_phrase_said_a_third_time_is_not_committed_and_ends_the_decoding_as_a_loop() {
    for refill in [false, true] {
        let mut net = Fake::new(12);
        net.repeat_at = Some(5);
        let o = StreamOptions { refill, ..plain() };
        let mut d = keyed(o.clone());
        stream(&mut net, &mut d, 200);
        // 1 2 3 4 then 1 2 1 2 1 2 ...: the third "1 2" waits, and ends it
        assert_eq!(
            d.committed(),
            [1, 2, 3, 4, 1, 2, 1, 2, 1],
            "refill {refill}"
        );
        assert!(d.ended() && d.looped());
        // the check off: the loop is committed until the audio ends
        let mut net = Fake::new(12);
        net.repeat_at = Some(5);
        let mut d = keyed(StreamOptions { repeats: 0, ..o });
        stream(&mut net, &mut d, 200);
        assert!(d.committed().len() > 12 && !d.looped());
    }
}

#[test]
fn a_phrase_said_twice_is_committed() {
    let mut net = Fake::new(12);
    net.repeat_at = Some(5);
    let mut d = keyed(plain());
    // heard up to token 8 and its margin: 1 2 3 4 1 2 1 2, no third copy
    d.pulse(&mut net, 10 * 8 + 21, false).unwrap();
    assert_eq!(d.committed(), [1, 2, 3, 4, 1, 2, 1, 2]);
    assert!(!d.looped());
}

#[test]
fn one_word_said_three_times_is_speech_a_phrase_said_three_times_a_loop() {
    let d = keyed(plain());
    assert!(!d.loops(&[7, 1, 1], 1), "no, no, no");
    assert!(d.loops(&[7, 1, 1, 1], 1));
    assert!(!d.loops(&[2, 3, 2], 3));
    assert!(d.loops(&[9, 2, 3, 2, 3, 2], 3));
    // keys aside (punctuation): EOT's neighbours carry none
    assert!(d.loops(&[2, 3, 60, 2, 3, 61, 2], 3));
    assert!(!keyed(StreamOptions {
        repeats: 0,
        ..plain()
    })
    .loops(&[1; 8], 1));
}

#[test]
fn a_beam_at_the_end_searches_the_rest_after_the_committed_tokens_in_one_pass() {
    let o = StreamOptions {
        final_beam: 3,
        ..plain()
    };
    let (mut net, mut d) = (Fake::new(12), decoder(o));
    for heard in (32..96).step_by(32) {
        d.pulse(&mut net, heard, false).unwrap();
    }
    let committed = d.committed().len();
    assert!(committed > 0);
    let (batched, singles) = (d.fed_batched, net.single.len());
    d.pulse(&mut net, 200, true).unwrap();
    assert_eq!(d.committed(), (1..=12).collect::<Vec<u32>>());
    assert!(d.ended() && d.tentative().is_empty());
    // the prompt and the committed tokens but the last: one pass
    assert_eq!(d.fed_batched - batched, PROMPT.len() + committed - 1);
    let first = PROMPT.len() + committed - 1;
    assert!(
        net.single[singles..].iter().all(|&p| p >= first),
        "a committed token fed alone again: {:?}",
        &net.single[singles..]
    );
}

#[test]
fn a_beam_at_the_end_stops_where_the_text_reads_past_the_audio_as_greedy_does() {
    for final_beam in [1, 4] {
        let (mut net, mut d) = (
            Fake::new(12),
            decoder(StreamOptions {
                final_beam,
                ..plain()
            }),
        );
        // tokens 1..=5 peak before frame 60, the rest past it
        d.pulse(&mut net, 60, true).unwrap();
        assert_eq!(d.committed(), [1, 2, 3, 4, 5], "beam {final_beam}");
        assert!(d.ended());
    }
}

#[test]
fn a_word_piece_the_stand_in_holds_after_its_audio_is_heard_is_read_where_it_was_spoken() {
    // token 5 (spoken at frame 50) goes on with 4's word, and peaks in the
    // stand-in for unheard audio at every pulse
    let starts: Vec<bool> = (0..64).map(|t| t != 5).collect();
    for keeps in [true, false] {
        let stuck = |stall, starts: &Vec<bool>| {
            let mut net = Fake::new(12);
            net.stuck_at = Some(5);
            net.keeps = keeps;
            let o = StreamOptions { stall, ..plain() };
            (
                net,
                StreamDecoder::new(spec(Some(starts.clone())), o).unwrap(),
            )
        };
        let (mut net, mut d) = stuck(0, &starts);
        let after = stream(&mut net, &mut d, 140);
        assert!(after.iter().all(|&n| n <= 3), "{after:?}, keeps {keeps}");
        // and at the end it reads past the audio: the decoding stops there
        assert_eq!(d.committed(), [1, 2, 3, 4], "keeps {keeps}");
        // read at its heard peak once 30 frames are heard past it, then
        // committed at the margin as the others
        let (mut net, mut d) = stuck(30, &starts);
        assert_eq!(d.pulse(&mut net, 64, false).unwrap(), 3);
        assert_eq!(d.pulse(&mut net, 79, false).unwrap(), 0, "keeps {keeps}");
        assert_eq!(d.pulse(&mut net, 96, false).unwrap(), 4, "keeps {keeps}");
        d.pulse(&mut net, 140, true).unwrap();
        assert_eq!(
            d.committed(),
            (1..=12).collect::<Vec<u32>>(),
            "keeps {keeps}"
        );
        // at the end of the audio the stand-in still stops the decoding
        // (text the audio does not hold reads there)
        let (mut net, mut d) = stuck(30, &starts);
        d.pulse(&mut net, 140, true).unwrap();
        assert_eq!(d.committed(), [1, 2, 3, 4], "keeps {keeps}");
        // a token that starts a word is not read so: a loop's first word
        // back over the audio would be
        let all: Vec<bool> = vec![true; 64];
        let (mut net, mut d) = stuck(30, &all);
        stream(&mut net, &mut d, 140);
        assert_eq!(d.committed(), [1, 2, 3, 4], "keeps {keeps}");
    }
}
