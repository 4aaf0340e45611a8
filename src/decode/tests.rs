//! Token lists, greedy and beam decoding, word building; beam search against
//! brute-force enumeration of every alignment, and on the shipped model's
//! golden log-probs.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

fn abc() -> Tokens {
    Tokens::from_lines(["<blk>", "<sp>", "a", "b", "c"]).unwrap()
}

fn model_tokens() -> Tokens {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/pulsed-en-ctc/tokens.txt");
    Tokens::load(&path).unwrap()
}

// ---------------------------------------------------------------- tokens

#[test]
fn tokens_load_the_shipped_list() {
    let t = model_tokens();
    assert_eq!(t.len(), 29);
    assert_eq!(t.blank(), 0);
    assert_eq!(t.space(), Some(1));
    assert_eq!(t.symbol(2), Some("a"));
    assert_eq!(t.symbol(28), Some("'"));
    assert_eq!(t.text_of(&[9, 10, 1, 0, 26, 16, 22]).unwrap(), "hi you");
    assert!(matches!(
        t.text_of(&[29]),
        Err(DecodeError::TokenOutOfRange { id: 29, .. })
    ));
}

#[test]
fn tokens_accept_ids_and_crlf_and_trailing_blank_lines() {
    let t = Tokens::from_lines(["<blk> 0\r", "<sp> 1", "x 2", "", ""]).unwrap();
    assert_eq!(t.len(), 3);
    assert_eq!(t.text_of(&[2, 1, 2]).unwrap(), "x x");
    let t = Tokens::from_lines(["a", "<blank>"]).unwrap();
    assert_eq!(t.blank(), 1);
    assert_eq!(t.space(), None);
}

#[test]
fn bad_token_lists_are_typed_errors() {
    let empty: [&str; 0] = [];
    assert!(matches!(
        Tokens::from_lines(empty),
        Err(DecodeError::EmptyTokens { .. })
    ));
    assert!(matches!(
        Tokens::from_lines(["", " "]),
        Err(DecodeError::EmptyTokens { .. })
    ));
    assert!(matches!(
        Tokens::from_lines(["a", "b"]),
        Err(DecodeError::NoBlank { .. })
    ));
    assert!(matches!(
        Tokens::from_lines(["<blk>", "a", "a"]),
        Err(DecodeError::BadTokenLine { line: 3, .. })
    ));
    assert!(matches!(
        Tokens::from_lines(["<blk>", "", "a"]),
        Err(DecodeError::BadTokenLine { line: 2, .. })
    ));
    assert!(matches!(
        Tokens::from_lines(["<blk> 0", "a 2"]),
        Err(DecodeError::BadTokenLine { line: 2, .. })
    ));
    let missing = std::env::temp_dir().join("pulsed-no-such-tokens.txt");
    let e = Tokens::load(&missing).unwrap_err();
    assert!(matches!(e, DecodeError::Io { .. }));
    assert!(e.to_string().starts_with(&missing.display().to_string()));
    // An empty file on disk.
    let path = std::env::temp_dir().join(format!("pulsed-empty-tokens-{}.txt", std::process::id()));
    std::fs::write(&path, "").unwrap();
    let r = Tokens::load(&path);
    let _ = std::fs::remove_file(&path);
    assert!(matches!(r, Err(DecodeError::EmptyTokens { .. })));
}

// ---------------------------------------------------------------- greedy

const T: FrameTiming = FrameTiming {
    frame_duration_s: 0.04,
    offset_s: 0.0,
};

#[test]
fn greedy_collapses_repeats_and_blanks_and_times_words() {
    // frames: a a _ a b <sp> <sp> c c _ c _
    let ids = [2, 2, 0, 2, 3, 1, 1, 4, 4, 0, 4, 0];
    let lp = [
        -0.1, -0.3, -0.0, -0.2, -0.4, -0.1, -0.1, -0.5, -0.7, -0.0, -0.6, -0.2,
    ];
    let mut d = GreedyDecoder::new(abc(), T.with_offset(1.0)).unwrap();
    d.push_frames(0, &ids, &lp).unwrap();
    let spans = d.spans().to_vec();
    let firsts: Vec<(usize, usize, usize)> = spans
        .iter()
        .map(|s| (s.id, s.first_frame, s.last_frame))
        .collect();
    assert_eq!(
        firsts,
        vec![
            (2, 0, 1),
            (2, 3, 3),
            (3, 4, 4),
            (1, 5, 6),
            (4, 7, 8),
            (4, 10, 10)
        ]
    );
    let t = d.finish();
    assert_eq!(t.text, "aab cc");
    assert_eq!(t.words.len(), 2);
    let w = &t.words[0];
    assert_eq!(w.text, "aab");
    assert!((w.start_s - 1.0).abs() < 1e-12);
    assert!((w.end_s - (1.0 + 5.0 * 0.04)).abs() < 1e-12);
    let mean = (-0.1f64 - 0.3 - 0.2 - 0.4) / 4.0;
    assert!((w.confidence as f64 - mean.exp()).abs() < 1e-6);
    let w = &t.words[1];
    assert_eq!(w.text, "cc");
    assert!((w.start_s - (1.0 + 7.0 * 0.04)).abs() < 1e-12);
    assert!((w.end_s - (1.0 + 11.0 * 0.04)).abs() < 1e-12);
    let mean = (-0.5f64 - 0.7 - 0.6) / 3.0;
    assert!((w.confidence as f64 - mean.exp()).abs() < 1e-6);
    assert!((t.duration_s - 12.0 * 0.04).abs() < 1e-12);
}

#[test]
fn greedy_spaces_at_the_edges_make_no_empty_words() {
    let mut d = GreedyDecoder::new(abc(), T).unwrap();
    d.push_frames(0, &[1, 0, 2, 1, 0, 1, 3, 1], &[0.0; 8])
        .unwrap();
    let t = d.partial();
    assert_eq!(t.text, "a b");
    assert_eq!(t.words.len(), 2);
    assert_eq!(t.words[0].confidence, 1.0);
    let mut d = GreedyDecoder::new(abc(), T).unwrap();
    d.push_frames(0, &[0, 0, 1], &[0.0; 3]).unwrap();
    assert_eq!(
        d.finish(),
        Transcript {
            text: String::new(),
            words: vec![],
            duration_s: 0.12
        }
    );
}

#[test]
fn greedy_partial_results_grow() {
    let mut d = GreedyDecoder::new(abc(), T).unwrap();
    let mut texts = Vec::new();
    for (f, id) in [2i64, 0, 3, 1, 4].into_iter().enumerate() {
        d.push(f, id, -0.1).unwrap();
        texts.push(d.partial().text);
    }
    assert_eq!(texts, ["a", "a", "ab", "ab", "ab c"]);
    d.reset();
    assert_eq!(d.frames(), 0);
    assert_eq!(d.partial().text, "");
}

#[test]
fn greedy_gap_in_frames_separates_repeats() {
    let mut d = GreedyDecoder::new(abc(), T).unwrap();
    d.push(0, 2, -0.1).unwrap();
    d.push(1, 2, -0.1).unwrap();
    d.push(3, 2, -0.1).unwrap();
    assert_eq!(d.partial().text, "aa");
}

#[test]
fn greedy_bad_input_is_an_error_and_changes_nothing() {
    let mut d = GreedyDecoder::new(abc(), T).unwrap();
    d.push(0, 2, -0.1).unwrap();
    let before = d.clone().finish();
    assert!(matches!(
        d.push(1, 5, -0.1),
        Err(DecodeError::TokenOutOfRange {
            id: 5,
            vocab: 5,
            frame: Some(1)
        })
    ));
    assert!(matches!(
        d.push(1, -1, -0.1),
        Err(DecodeError::TokenOutOfRange { .. })
    ));
    assert!(matches!(
        d.push(1, 2, f32::NAN),
        Err(DecodeError::NonFinite { .. })
    ));
    assert!(matches!(
        d.push(0, 2, -0.1),
        Err(DecodeError::FrameOrder { frame: 0, last: 0 })
    ));
    // A bad frame in the middle of a batch rejects the whole batch.
    assert!(d.push_frames(1, &[3, 3, 9], &[-0.1; 3]).is_err());
    assert!(d.push_frames(1, &[3, 3], &[-0.1; 3]).is_err());
    assert_eq!(d.frames(), 1);
    assert_eq!(d.clone().finish(), before);
    assert!(GreedyDecoder::new(abc(), FrameTiming::new(0.0)).is_err());
    assert!(GreedyDecoder::new(abc(), FrameTiming::new(f64::NAN)).is_err());
    let e = d.push(1, 7, 0.0).unwrap_err().to_string();
    assert_eq!(
        e,
        "token id 7 is out of range for a vocabulary of 5 at frame 1"
    );
}

proptest! {
    /// Fed in one go, frame by frame, or in random pieces: the same result.
    #[test]
    fn greedy_is_the_same_in_any_pieces(
        frames in prop::collection::vec((0i64..5, -5.0f32..0.0), 0..60),
        cuts in prop::collection::vec(0usize..60, 0..6),
    ) {
        let ids: Vec<i64> = frames.iter().map(|f| f.0).collect();
        let lps: Vec<f32> = frames.iter().map(|f| f.1).collect();
        let mut whole = GreedyDecoder::new(abc(), T).unwrap();
        whole.push_frames(0, &ids, &lps).unwrap();
        let mut one = GreedyDecoder::new(abc(), T).unwrap();
        for (f, (&id, &lp)) in ids.iter().zip(&lps).enumerate() {
            one.push(f, id, lp).unwrap();
        }
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(ids.len())).collect();
        cuts.push(0);
        cuts.push(ids.len());
        cuts.sort();
        let mut pieces = GreedyDecoder::new(abc(), T).unwrap();
        for w in cuts.windows(2) {
            pieces.push_frames(w[0], &ids[w[0]..w[1]], &lps[w[0]..w[1]]).unwrap();
        }
        prop_assert_eq!(whole.spans(), one.spans());
        prop_assert_eq!(whole.spans(), pieces.spans());
        let t = whole.finish();
        prop_assert_eq!(&t, &one.finish());
        prop_assert_eq!(&t, &pieces.finish());
        for w in &t.words {
            prop_assert!((0.0..=1.0).contains(&w.confidence));
            prop_assert!(w.end_s > w.start_s);
        }
    }
}

#[test]
fn greedy_from_log_prob_rows_takes_each_rows_first_best() {
    // rows over <blk> <sp> a b c: a, a (a tie with c: the first wins), blank, b
    let rows = [
        -3.0, -3.0, -0.1, -4.0, -2.0, //
        -2.0, -2.0, -0.5, -3.0, -0.5, //
        -0.2, -2.0, -3.0, -3.0, -3.0, //
        -4.0, -4.0, -4.0, -0.3, -4.0,
    ];
    let mut d = GreedyDecoder::new(abc(), T).unwrap();
    d.push_log_probs(0, &rows[..10]).unwrap();
    d.push_log_probs(2, &rows[10..]).unwrap();
    let mut want = GreedyDecoder::new(abc(), T).unwrap();
    want.push_frames(0, &[2, 2, 0, 3], &[-0.1, -0.5, -0.2, -0.3])
        .unwrap();
    assert_eq!(d.spans(), want.spans());
    assert_eq!(d.finish(), want.finish());
    // ragged rows: an error, and nothing pushed
    let mut d = GreedyDecoder::new(abc(), T).unwrap();
    assert!(matches!(
        d.push_log_probs(0, &rows[..7]),
        Err(DecodeError::Shape(_))
    ));
    assert_eq!(d.frames(), 0);
}

// ---------------------------------------------------------------- beam

/// Greedy decoding of full rows (argmax, first index on ties).
fn greedy_rows(lp: &[f32], vocab: usize) -> GreedyDecoder {
    let mut d = GreedyDecoder::new(Tokens::from_lines(vocab_lines(vocab)).unwrap(), T).unwrap();
    for (t, row) in lp.chunks(vocab).enumerate() {
        let (best, &p) =
            row.iter().enumerate().fold(
                (0, &f32::NEG_INFINITY),
                |acc, x| if x.1 > acc.1 { x } else { acc },
            );
        d.push(t, best as i64, p).unwrap();
    }
    d
}

fn vocab_lines(vocab: usize) -> Vec<String> {
    let mut v = vec!["<blk>".to_string(), "<sp>".to_string()];
    v.extend((2..vocab).map(|i| format!("t{i}")));
    v.truncate(vocab);
    v
}

fn ln_rows(p: &[&[f64]]) -> Vec<f32> {
    p.iter()
        .flat_map(|r| r.iter().map(|v| v.ln() as f32))
        .collect()
}

#[test]
fn beam_beats_greedy_on_the_classic_case() {
    // Two frames, P(blank) = 0.6, P(a) = 0.4 each. The best path is "_ _"
    // (0.36) so greedy says "", but "a" has three alignments (a_, _a, aa)
    // worth 0.24 + 0.24 + 0.16 = 0.64.
    let lp = ln_rows(&[&[0.6, 0.4], &[0.6, 0.4]]);
    let tokens = Tokens::from_lines(["<blk>", "a"]).unwrap();
    let g = greedy_rows(&lp, 2);
    assert!(g.spans().is_empty());
    let hyps = prefix_beam_search(&lp, 2, 2, 0, 4).unwrap();
    assert_eq!(hyps[0].tokens, vec![1]);
    assert!((hyps[0].log_prob - 0.64f64.ln()).abs() < 1e-6);
    assert_eq!(hyps[1].tokens, Vec::<usize>::new());
    assert!((hyps[1].log_prob - 0.36f64.ln()).abs() < 1e-6);
    let t = hyps[0].transcript(&tokens, T, 2).unwrap();
    assert_eq!(t.text, "a");
    // Width 1 keeps only the locally best prefix, like greedy.
    let h1 = prefix_beam_search(&lp, 2, 2, 0, 1).unwrap();
    assert_eq!(h1.len(), 1);
    assert!(h1[0].tokens.is_empty());
}

#[test]
fn width_one_is_not_greedy_on_flat_rows() {
    // The case in `prefix_beam_search`'s docs: vocab [blank, a, b].
    let lp = ln_rows(&[&[0.4, 0.6, 1e-9], &[0.25, 0.35, 0.4]]);
    let g: Vec<usize> = greedy_rows(&lp, 3).spans().iter().map(|s| s.id).collect();
    assert_eq!(g, vec![1, 2]);
    let h = prefix_beam_search(&lp, 2, 3, 0, 1).unwrap();
    assert_eq!(h[0].tokens, vec![1]);
    assert!((h[0].log_prob - 0.36f64.ln()).abs() < 1e-6);
}

/// Every alignment of `frames` x `vocab`, collapsed: the exact log-prob of
/// each prefix (the independent reference for beam search).
fn brute_force(lp: &[f32], frames: usize, vocab: usize, blank: usize) -> HashMap<Vec<usize>, f64> {
    let mut out: HashMap<Vec<usize>, f64> = HashMap::new();
    let n = vocab.pow(frames as u32);
    for code in 0..n {
        let mut c = code;
        let mut prob = 0.0f64;
        let mut path = Vec::new();
        for t in 0..frames {
            let tok = c % vocab;
            c /= vocab;
            prob += lp[t * vocab + tok] as f64;
            path.push(tok);
        }
        let mut prefix = Vec::new();
        let mut prev = None;
        for &tok in &path {
            if tok != blank && prev != Some(tok) {
                prefix.push(tok);
            }
            prev = Some(tok);
        }
        *out.entry(prefix).or_insert(0.0) += prob.exp();
    }
    out.into_iter().map(|(k, v)| (k, v.ln())).collect()
}

fn softmax_rows(raw: &[f32], vocab: usize) -> Vec<f32> {
    raw.chunks(vocab)
        .flat_map(|r| {
            let m = r.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let z: f32 = r.iter().map(|v| (v - m).exp()).sum();
            r.iter().map(move |v| v - m - z.ln()).collect::<Vec<_>>()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// With a beam wide enough to keep every prefix, beam search is exact:
    /// its log-probs equal the brute-force sums over all alignments.
    #[test]
    fn wide_beam_equals_brute_force(
        frames in 1usize..6,
        vocab in 2usize..4,
        blank_raw in 0usize..3,
        raw in prop::collection::vec(-3.0f32..3.0, 18),
    ) {
        let blank = blank_raw % vocab;
        let lp = softmax_rows(&raw[..frames * vocab], vocab);
        let exact = brute_force(&lp, frames, vocab, blank);
        let hyps = prefix_beam_search(&lp, frames, vocab, blank, 10_000).unwrap();
        prop_assert_eq!(hyps.len(), exact.len());
        for w in hyps.windows(2) {
            prop_assert!(w[0].log_prob >= w[1].log_prob);
        }
        for h in &hyps {
            let want = exact[&h.tokens];
            prop_assert!((h.log_prob - want).abs() < 1e-4, "{:?}: {} vs {}", h.tokens, h.log_prob, want);
            let ids: Vec<usize> = h.spans.iter().map(|s| s.id).collect();
            prop_assert_eq!(&ids, &h.tokens);
            for s in &h.spans {
                prop_assert!(s.first_frame <= s.last_frame && s.last_frame < frames);
            }
        }
        // The best hypothesis is the most probable prefix.
        let best = exact.values().cloned().fold(f64::NEG_INFINITY, f64::max);
        prop_assert!((hyps[0].log_prob - best).abs() < 1e-4);
    }

    /// Width 1 equals greedy on peaky rows, as CTC models produce (the best
    /// token of each frame holds >= 0.9 of the mass); see the note on
    /// `prefix_beam_search` for why not on every input.
    #[test]
    fn width_one_equals_greedy_on_peaky_rows(
        rows in prop::collection::vec((0usize..6, prop::collection::vec(0.0f64..1.0, 6)), 1..40),
    ) {
        let vocab = 6;
        let mut lp = Vec::new();
        for (best, noise) in &rows {
            let p_best = 0.9 + 0.09 * noise[*best];
            let rest: f64 = noise.iter().enumerate().filter(|(i, _)| i != best).map(|(_, v)| v).sum::<f64>().max(1e-9);
            for (i, v) in noise.iter().enumerate() {
                let p = if i == *best { p_best } else { (1.0 - p_best) * v / rest };
                lp.push(p.max(1e-30).ln() as f32);
            }
        }
        let frames = rows.len();
        let g = greedy_rows(&lp, vocab);
        let h = prefix_beam_search(&lp, frames, vocab, 0, 1).unwrap();
        prop_assert_eq!(h.len(), 1);
        let g_ids: Vec<usize> = g.spans().iter().map(|s| s.id).collect();
        prop_assert_eq!(&h[0].tokens, &g_ids);
        prop_assert_eq!(&h[0].spans.iter().map(|s| (s.first_frame, s.last_frame)).collect::<Vec<_>>(),
            &g.spans().iter().map(|s| (s.first_frame, s.last_frame)).collect::<Vec<_>>());
        let tokens = Tokens::from_lines(vocab_lines(vocab)).unwrap();
        let bt = h[0].transcript(&tokens, T, frames).unwrap();
        let gt = g.finish();
        prop_assert_eq!(&bt.text, &gt.text);
        for (a, b) in bt.words.iter().zip(&gt.words) {
            prop_assert_eq!((a.start_s, a.end_s), (b.start_s, b.end_s));
            prop_assert!((a.confidence - b.confidence).abs() < 1e-5);
        }
    }
}

#[test]
fn beam_bad_input_is_an_error() {
    let lp = vec![-0.5f32; 6];
    assert!(matches!(
        prefix_beam_search(&lp, 2, 3, 0, 0),
        Err(DecodeError::Param(_))
    ));
    assert!(matches!(
        prefix_beam_search(&lp, 2, 3, 3, 2),
        Err(DecodeError::Param(_))
    ));
    assert!(matches!(
        prefix_beam_search(&lp, 2, 0, 0, 2),
        Err(DecodeError::Param(_))
    ));
    assert!(matches!(
        prefix_beam_search(&lp, 3, 3, 0, 2),
        Err(DecodeError::Shape(_))
    ));
    assert!(matches!(
        prefix_beam_search(&lp, usize::MAX, 3, 0, 2),
        Err(DecodeError::Shape(_))
    ));
    let mut nan = lp.clone();
    nan[4] = f32::NAN;
    assert!(matches!(
        prefix_beam_search(&nan, 2, 3, 0, 2),
        Err(DecodeError::NonFinite {
            frame: 1,
            token: 1,
            ..
        })
    ));
    let mut dead = lp.clone();
    dead[..3].fill(f32::NEG_INFINITY);
    assert!(matches!(
        prefix_beam_search(&dead, 2, 3, 0, 2),
        Err(DecodeError::Shape(_))
    ));
    // Zero frames: one empty hypothesis.
    let h = prefix_beam_search(&[], 0, 3, 0, 4).unwrap();
    assert_eq!(h.len(), 1);
    assert!(h[0].tokens.is_empty() && h[0].log_prob == 0.0);
    // Some -inf entries are fine (probability 0).
    let mut sparse = lp;
    sparse[1] = f32::NEG_INFINITY;
    assert!(prefix_beam_search(&sparse, 2, 3, 0, 2).is_ok());
}

// ---------------------------------------------------------------- model

/// `log_probs` [50, 29] of `fixtures/asr/hello.wav` from the shipped model.
fn golden_log_probs() -> Vec<f32> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/asr/golden.safetensors");
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor("log_probs").unwrap();
    assert_eq!(t.shape(), &[50, 29]);
    t.data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn shipped_model_golden_log_probs_decode_to_the_reference() {
    let lp = golden_log_probs();
    let tokens = model_tokens();
    let g = greedy_rows(&lp, 29);
    let greedy_spans = g.spans().to_vec();
    let mut d = GreedyDecoder::new(tokens.clone(), FrameTiming::new(MODEL_FRAME_S)).unwrap();
    // Again with the real token list, for the text.
    for (t, row) in lp.chunks(29).enumerate() {
        let (best, &p) =
            row.iter().enumerate().fold(
                (0, &f32::NEG_INFINITY),
                |acc, x| if x.1 > acc.1 { x } else { acc },
            );
        d.push(t, best as i64, p).unwrap();
    }
    let gt = d.finish();
    assert_eq!(gt.text, "if anything can go wrong it will");
    assert_eq!(gt.words.len(), 7);
    assert!((gt.duration_s - 2.0).abs() < 1e-9);
    for w in gt.words.windows(2) {
        assert!(w[0].end_s <= w[1].start_s);
    }
    let h1 = prefix_beam_search(&lp, 50, 29, 0, 1).unwrap();
    assert_eq!(h1[0].spans, greedy_spans);
    for width in [4, 8, 16] {
        let h = prefix_beam_search(&lp, 50, 29, 0, width).unwrap();
        let t = h[0]
            .transcript(&tokens, FrameTiming::new(MODEL_FRAME_S), 50)
            .unwrap();
        assert_eq!(t.text, gt.text, "width {width}");
    }
}
