//! The decoding loop over a scripted backend and the local tokenizer.

use crate::models::whisper::decode::testing::Scripted;
use crate::models::whisper::decode::*;
use crate::models::whisper::tokenizer::tests::local_tokenizer;
use crate::models::whisper::{GenerationConfig, WhisperTokenizer};

/// tiny.en's settings, without a file.
pub(super) fn english_config(tok: &WhisperTokenizer) -> GenerationConfig {
    GenerationConfig {
        suppress_tokens: Vec::new(),
        begin_suppress_tokens: vec![220, tok.special().eot],
        alignment_heads: vec![(0, 0)],
        lang_to_id: Vec::new(),
        is_multilingual: false,
        max_initial_timestamp_index: Some(50),
        max_length: 448,
    }
}

/// A backend that writes `plan` after each `<|startoftranscript|>` (one
/// token a step, each with logit `peak`), with `no_speech` as the logit of
/// the no-speech token at sot. Windows whose first feature is 0.5 use
/// `quiet` instead (when given).
fn planned(
    tok: &WhisperTokenizer,
    plan: Vec<u32>,
    peak: f32,
    quiet: Option<(Vec<u32>, f32, f32)>,
) -> Scripted {
    let sp = *tok.special();
    let vocab = 51864;
    Scripted::new(vocab, move |window: &[f32], seq: &[u32]| {
        let (plan, peak, no_speech) = match &quiet {
            Some((p, peak, ns)) if window.first() == Some(&0.5) => (p, *peak, *ns),
            _ => (&plan, peak, 0.0),
        };
        let sot = seq
            .iter()
            .rposition(|&t| t == sp.sot)
            .expect("a prompt has sot");
        let generated = seq.len() - sot - 1;
        let mut l = vec![0.0; vocab];
        if generated == 0 {
            l[sp.no_speech as usize] = no_speech;
        }
        let next = plan.get(generated).copied().unwrap_or(sp.eot);
        l[next as usize] = peak;
        l
    })
}

fn run(
    b: &mut Scripted,
    tok: &WhisperTokenizer,
    audio: &[f32],
    opts: &DecodeOptions,
) -> (Vec<Segment>, TranscriptionInfo) {
    let gen = english_config(tok);
    let mut segments = Vec::new();
    let network = if opts.word_timestamps {
        Network::Aligned(b)
    } else {
        Network::Plain(b)
    };
    let info = transcribe(network, tok, &gen, audio, opts, |s| {
        segments.push(s);
        Ok(())
    })
    .unwrap();
    (segments, info)
}

fn spans(segments: &[Segment]) -> Vec<(f64, f64)> {
    segments.iter().map(|s| (s.start, s.end)).collect()
}

/// <0.00> Hello <2.00><2.00> world <5.00> end: two segments, then the next
/// window (a lone final timestamp means nothing more was said).
fn two_segments(tok: &WhisperTokenizer) -> Vec<u32> {
    let sp = *tok.special();
    let tb = sp.timestamp_begin;
    vec![tb, 18435, tb + 100, tb + 100, 995, tb + 250, sp.eot]
}

#[test]
fn a_lone_final_timestamp_moves_to_the_next_window() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let mut b = planned(&tok, two_segments(&tok), 10.0, None);
    let audio = vec![0.0; 65 * 16_000];
    let (segs, info) = run(&mut b, &tok, &audio, &DecodeOptions::default());
    assert_eq!(info.language, "en");
    assert_eq!(info.duration, 65.0);
    assert_eq!(
        spans(&segs),
        vec![
            (0.0, 2.0),
            (2.0, 5.0),
            (30.0, 32.0),
            (30.0 + 2.0, 35.0),
            (60.0, 62.0),
            (62.0, 65.0)
        ]
    );
    assert_eq!(segs[1].text, " world");
    assert_eq!(segs[2].seek, 3000);
    assert_eq!(
        segs.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6]
    );
    // Windows at frames 0, 3000, 6000; the last has 500 content frames.
    assert_eq!(b.encoded_log.len(), 3);
    // The later windows' prompts carry the text so far after <|startofprev|>.
    let prompts: Vec<&Vec<u32>> = b
        .fed_log
        .iter()
        .filter(|s| s.first() == Some(&sp.sot_prev))
        .collect();
    // (English-only with timestamps: sot is the start token, fed after.)
    let previous: Vec<u32> = segs[..2].iter().flat_map(|s| s.tokens.clone()).collect();
    assert_eq!(prompts[0][1..], previous[..]);
}

/// `max_windows` stops after that many windows: their segments only, and
/// no later window encoded.
#[test]
fn max_windows_leaves_the_rest_undecoded() {
    let Some(tok) = local_tokenizer() else { return };
    let audio = vec![0.0; 65 * 16_000];
    for (most, spans_then) in [(1, 2), (2, 4)] {
        let mut b = planned(&tok, two_segments(&tok), 10.0, None);
        let opts = DecodeOptions {
            max_windows: Some(most),
            ..DecodeOptions::default()
        };
        let (segs, _) = run(&mut b, &tok, &audio, &opts);
        assert_eq!(segs.len(), spans_then, "{:?}", spans(&segs));
        assert_eq!(b.encoded_log.len(), most);
    }
}

#[test]
fn an_unfinished_segment_is_dropped_and_decoded_again() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let tb = sp.timestamp_begin;
    // Ends with a pair: the window is cut at <5.00>, 500 frames later.
    let plan = vec![
        tb,
        18435,
        tb + 100,
        tb + 100,
        995,
        tb + 250,
        tb + 250,
        sp.eot,
    ];
    let mut b = planned(&tok, plan, 10.0, None);
    let audio = vec![0.0; 12 * 16_000];
    let (segs, _) = run(&mut b, &tok, &audio, &DecodeOptions::default());
    // Windows at 0, 5 and 10 s; the last (2 s of content) still ends at +5 s.
    let starts: Vec<f64> = segs.iter().map(|s| s.start).collect();
    assert_eq!(starts, vec![0.0, 2.0, 5.0, 7.0, 10.0, 12.0]);
    assert_eq!(segs[2].seek, 500);
    assert_eq!(b.encoded_log.len(), 3);
}

#[test]
fn silence_is_skipped_and_repetition_falls_back() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let tb = sp.timestamp_begin;
    let plan = vec![tb, 18435, tb + 100, sp.eot];
    // The second window is silence: the no-speech token dominates at sot
    // and the text is unlikely (logit 1 of 51864): skipped.
    let quiet = (vec![tb, 995, tb + 100, sp.eot], 1.0, 30.0);
    let mut b = planned(&tok, plan, 10.0, Some(quiet));
    let mut audio = vec![0.0; 45 * 16_000];
    audio[30 * 16_000..].fill(0.5);
    let (segs, _) = run(&mut b, &tok, &audio, &DecodeOptions::default());
    assert_eq!(spans(&segs), vec![(0.0, 2.0)]);
    assert!(segs[0].no_speech_prob < 0.01);

    // Repetitive text fails the compression check at every temperature:
    // the likeliest result is kept, with the last temperature, and the
    // prompt is reset after it.
    let mut plan = vec![tb];
    plan.extend(std::iter::repeat_n([314, 836, 470, 760, 13], 12).flatten()); // " I don't know."
    plan.extend([tb + 200, sp.eot]);
    let mut b = planned(&tok, plan, 30.0, None);
    let audio = vec![0.0; 50 * 16_000];
    let (segs, _) = run(&mut b, &tok, &audio, &DecodeOptions::default());
    assert_eq!(segs.len(), 2);
    assert_eq!(segs[0].temperature, 1.0);
    assert!(segs[0].compression_ratio > 2.4);
    // Per window: beam search at 0 (its first step on one sequence), then
    // five samples at each of 0.2 ... 1.0; no prompt has previous text.
    let first_steps = b
        .fed_log
        .iter()
        .filter(|s| s.len() == 1 && s[0] == sp.sot)
        .count();
    assert_eq!(first_steps, 2 * (1 + 5 * 5));
    assert!(b.fed_log.iter().all(|s| s.first() != Some(&sp.sot_prev)));
}

/// With `cut_fails` a decoding cut short by its bound is tried
/// again at the next temperature (and, failing at all, the likeliest is
/// kept with the last temperature); one that ends before it is taken at 0.
/// Without it the bound only cuts the text.
#[test]
fn a_decoding_that_fills_its_bound_falls_back_when_asked() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let tb = sp.timestamp_begin;
    // " Hello world." then more words than the bound: not repetitive
    let mut long = vec![tb, 18435, 995, 13];
    long.extend([314, 836, 470, 760, 13, 632, 318, 257, 1332, 13]);
    long.extend([tb + 100, sp.eot]);
    let short = vec![tb, 18435, 995, 13, tb + 100, sp.eot];
    let audio = vec![0.0; 3 * 16_000];
    // the search takes min(half, all but the fed prompt) of prompt + 20
    let bounded = |fails: bool| DecodeOptions {
        max_new_tokens: Some(20),
        cut_fails: fails,
        ..DecodeOptions::default()
    };
    let first = |plan: &[u32], opts: &DecodeOptions| {
        let mut b = planned(&tok, plan.to_vec(), 30.0, None);
        let (segs, _) = run(&mut b, &tok, &audio, opts);
        (segs[0].temperature, segs[0].tokens.len())
    };
    assert_eq!(first(&long, &bounded(false)).0, 0.0);
    let (t, n) = first(&long, &bounded(true));
    assert_eq!(t, 1.0, "every temperature filled the bound");
    assert!(n < long.len() - 1, "{n} tokens");
    assert_eq!(first(&short, &bounded(true)).0, 0.0);
}

#[test]
fn word_timestamps_follow_the_attention() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let tb = sp.timestamp_begin;
    // " Hello world." from 0 to 2 s.
    let plan = vec![tb, 18435, 995, 13, tb + 100, sp.eot];
    let mut b = planned(&tok, plan, 10.0, None);
    // Token row r attends encoder frames [20 r, 20 r + 20) (0.4 s each).
    b.attention = Some(Box::new(
        |_w: &[f32], tokens: &[u32], heads: &[(usize, usize)]| {
            let (t, f) = (tokens.len(), 1500);
            let mut a = vec![1e-6f32; heads.len() * t * f];
            for h in 0..heads.len() {
                for r in 0..t {
                    for j in 20 * r..20 * r + 20 {
                        a[(h * t + r) * f + j] = 1.0;
                    }
                }
            }
            a
        },
    ));
    let audio = vec![0.0; 3 * 16_000];
    let opts = DecodeOptions {
        word_timestamps: true,
        ..DecodeOptions::default()
    };
    let (segs, _) = run(&mut b, &tok, &audio, &opts);
    let words = segs[0].words.as_ref().unwrap();
    let text: Vec<&str> = words.iter().map(|w| w.word.as_str()).collect();
    assert_eq!(text, vec![" Hello", " world."]);
    // Text token i is the row of the position before it: Hello the
    // <|notimestamps|> row (frames 20-40), world the Hello row (40-60), "."
    // the world row (60-80). A token's time is where the path enters its
    // row; the path starts at frame 0, so the first word does too. Merged
    // punctuation keeps the word's own times (" world" ends at 1.2 s).
    let times: Vec<(f64, f64)> = words.iter().map(|w| (w.start, w.end)).collect();
    assert_eq!(times, vec![(0.0, 0.8), (0.8, 1.2)]);
    assert_eq!((segs[0].start, segs[0].end), (0.0, 1.2));
    // Each token's probability over the text vocabulary (logit 10 against
    // 50255 zeros).
    let p = 10f64.exp() / (10f64.exp() + 50255.0);
    assert!(
        words.iter().all(|w| (w.probability - p).abs() < 1e-4),
        "{words:?}"
    );
}

/// A window is padded as the options ask, else as the checkpoint asks:
/// silence (the recording's floor, its maximum less 2) or zeros.
#[test]
fn the_padding_is_the_options_else_the_checkpoints() {
    let Some(tok) = local_tokenizer() else { return };
    // one second whose features are all 3.0: the floor is 1.0
    let audio = vec![3.0f32; 16_000];
    let pad_of = |checkpoint: WindowPadding, asked: Option<WindowPadding>| {
        let mut b = planned(&tok, Vec::new(), 5.0, None);
        b.padding = checkpoint;
        let opts = DecodeOptions {
            padding: asked,
            temperatures: vec![0.0],
            ..DecodeOptions::default()
        };
        run(&mut b, &tok, &audio, &opts);
        let w = &b.encoded_log[0];
        // frames 0..100 hold the audio, then padding (row 0 of 2 mels)
        assert_eq!(w[99], 3.0);
        w[100..3000].iter().copied().fold(f32::NAN, |a, v| {
            assert!(a.is_nan() || a == v, "padding not uniform: {a} then {v}");
            v
        })
    };
    use WindowPadding::{Silence, Zeros};
    assert_eq!(pad_of(Silence, None), 1.0);
    assert_eq!(pad_of(Zeros, None), 0.0);
    assert_eq!(pad_of(Zeros, Some(Silence)), 1.0);
    assert_eq!(pad_of(Silence, Some(Zeros)), 0.0);
}
