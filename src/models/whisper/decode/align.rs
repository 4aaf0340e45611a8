//! Words' times from the alignment heads' cross-attention, as
//! CTranslate2's `WhisperReplica::align` and faster-whisper's
//! `find_alignment` compute them: the attention over the window's content
//! frames is normalised over tokens, median-filtered over time, averaged
//! over heads, and a dynamic time warping path through it gives each
//! token's first frame.

use super::logits::softmax_at;
use super::AlignedBackend;
use crate::models::whisper::{WhisperError, WhisperTokenizer};
use crate::Result;

/// Timestamp steps (encoder frames) per second.
const TOKENS_PER_SECOND: f64 = 50.0;

/// A word's place in the window, before punctuation is merged.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WordTiming {
    pub word: String,
    pub tokens: Vec<u32>,
    /// Seconds from the window's start.
    pub start: f64,
    pub end: f64,
    /// Mean probability of its tokens.
    pub probability: f64,
}

/// What the alignment of one window needs.
pub(crate) struct AlignSpec<'a> {
    pub sot_sequence: &'a [u32],
    /// The language code, for word splitting.
    pub language: &'a str,
    pub heads: &'a [(usize, usize)],
    /// Content frames of the window (features, not encoder frames).
    pub num_frames: usize,
    pub median_filter_width: usize,
}

/// Word timings of `text_tokens` over encoded window 0.
pub(crate) fn find_alignment(
    backend: &mut dyn AlignedBackend,
    tokenizer: &WhisperTokenizer,
    text_tokens: &[u32],
    spec: &AlignSpec,
) -> Result<Vec<WordTiming>> {
    if text_tokens.is_empty() {
        return Ok(Vec::new());
    }
    if spec.heads.is_empty() {
        return Err(WhisperError::NoAlignmentHeads.into());
    }
    let sp = tokenizer.special();
    let sot_len = spec.sot_sequence.len();
    let mut seq = spec.sot_sequence.to_vec();
    seq.push(sp.no_timestamps);
    seq.extend(text_tokens);
    seq.push(sp.eot);

    let n_heads = spec.heads.len();
    let t = seq.len();
    let attn = backend.cross_attention(0, &seq, spec.heads)?;
    if attn.is_empty() || attn.len() % (n_heads * t) != 0 {
        return Err(WhisperError::BackendShape {
            what: "cross-attention",
            expected: n_heads * t * 1500,
            got: attn.len(),
        }
        .into());
    }
    let enc_frames = attn.len() / (n_heads * t);
    let frames = (spec.num_frames / 2).min(enc_frames);
    if frames == 0 {
        return Ok(Vec::new());
    }
    let weights = alignment_weights(
        &attn,
        n_heads,
        t,
        enc_frames,
        frames,
        spec.median_filter_width,
    );
    let text_len = text_tokens.len();
    let matrix = &weights[sot_len * frames..(sot_len + text_len + 1) * frames];
    let path = negative_dtw(matrix, text_len + 1, frames);

    let probs = token_probs(backend, &seq, sot_len, text_tokens, sp.eot)?;

    let mut with_eot = text_tokens.to_vec();
    with_eot.push(sp.eot);
    let (words, word_tokens) = tokenizer.split_to_word_tokens(&with_eot, spec.language)?;
    if word_tokens.len() <= 1 {
        return Ok(Vec::new());
    }
    let mut boundaries = vec![0usize];
    for w in &word_tokens[..word_tokens.len() - 1] {
        boundaries.push(boundaries.last().copied().unwrap_or(0) + w.len());
    }
    // A token's time is where the path first reaches its row.
    let mut jump_times = Vec::with_capacity(text_len + 1);
    for (k, &(i, j)) in path.iter().enumerate() {
        if k == 0 || i != path[k - 1].0 {
            jump_times.push(j as f64 / TOKENS_PER_SECOND);
        }
    }
    Ok(words
        .into_iter()
        .zip(word_tokens)
        .zip(boundaries.windows(2))
        .map(|((word, tokens), b)| {
            let p = &probs[b[0]..b[1]];
            WordTiming {
                word,
                tokens,
                start: jump_times[b[0]],
                end: jump_times[b[1]],
                probability: p.iter().map(|&x| x as f64).sum::<f64>() / p.len() as f64,
            }
        })
        .collect())
}

/// `[tokens, frames]` alignment weights from `[heads, tokens, enc_frames]`
/// attention: renormalised over the first `frames` (the window's content),
/// standardised over tokens, median-filtered over frames, averaged over
/// heads.
pub(crate) fn alignment_weights(
    attn: &[f32],
    n_heads: usize,
    t: usize,
    enc_frames: usize,
    frames: usize,
    width: usize,
) -> Vec<f32> {
    let mut w = vec![0f32; n_heads * t * frames];
    for r in 0..n_heads * t {
        // Softmax over the kept frames of the raw scores is the full
        // softmax renormalised over them.
        let row = &attn[r * enc_frames..r * enc_frames + frames];
        let sum = row.iter().map(|&v| v as f64).sum::<f64>() as f32;
        for (o, &v) in w[r * frames..(r + 1) * frames].iter_mut().zip(row) {
            *o = v / sum;
        }
    }
    for h in 0..n_heads {
        standardize_over_tokens(&mut w[h * t * frames..(h + 1) * t * frames], t, frames);
    }
    let mut filtered = vec![0f32; w.len()];
    for r in 0..n_heads * t {
        median_filter(
            &w[r * frames..(r + 1) * frames],
            width,
            &mut filtered[r * frames..(r + 1) * frames],
        );
    }
    let mut mean = vec![0f32; t * frames];
    for h in 0..n_heads {
        for (m, &v) in mean
            .iter_mut()
            .zip(&filtered[h * t * frames..(h + 1) * t * frames])
        {
            *m += v;
        }
    }
    mean.iter_mut().for_each(|m| *m /= n_heads as f32);
    // A row whose attention on the content frames underflowed to zero (a
    // short window whose heads look at the padding) divides by zero above;
    // the path must still cross every token, so such weights count as 0.
    for m in &mut mean {
        if !m.is_finite() {
            *m = 0.0;
        }
    }
    mean
}

/// `(x - mean) / std` down each column of a `[t, frames]` block, as
/// CTranslate2's layer norm without epsilon computes it.
fn standardize_over_tokens(x: &mut [f32], t: usize, frames: usize) {
    for f in 0..frames {
        let (mut sum, mut squares) = (0f32, 0f32);
        for k in 0..t {
            let v = x[k * frames + f];
            sum += v;
            squares += v * v;
        }
        let mean = sum / t as f32;
        let var = (squares / t as f32 - mean * mean).max(0.0);
        let rstd = 1.0 / var.sqrt();
        for k in 0..t {
            x[k * frames + f] = (x[k * frames + f] - mean) * rstd;
        }
    }
}

/// Median of each `width` neighbourhood, reflecting at the edges
/// (rows shorter than `width / 2 + 1` pass through).
pub(crate) fn median_filter(row: &[f32], width: usize, out: &mut [f32]) {
    let n = row.len();
    let rank = width / 2;
    if n <= rank {
        out.copy_from_slice(row);
        return;
    }
    let mut window = vec![0f32; width];
    for (j, o) in out.iter_mut().enumerate() {
        for (slot, k) in window.iter_mut().zip(-(rank as isize)..=rank as isize) {
            let mut read = (j as isize + k).unsigned_abs();
            if read >= n {
                read = n - (read - n) - 2;
            }
            *slot = row[read];
        }
        window.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        *o = window[rank];
    }
}

/// The path of least cost through `-x` (`[n, m]`), from `(0, 0)` to
/// `(n - 1, m - 1)`, as CTranslate2 traces it (ties go to the left move).
pub(crate) fn negative_dtw(x: &[f32], n: usize, m: usize) -> Vec<(usize, usize)> {
    let inf = f32::INFINITY;
    let mut cost = vec![inf; (n + 1) * (m + 1)];
    let mut trace = vec![-1i8; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    cost[0] = 0.0;
    for j in 1..=m {
        for i in 1..=n {
            let c0 = cost[at(i - 1, j - 1)];
            let c1 = cost[at(i - 1, j)];
            let c2 = cost[at(i, j - 1)];
            let (c, t) = if c0 < c1 && c0 < c2 {
                (c0, 0)
            } else if c1 < c0 && c1 < c2 {
                (c1, 1)
            } else {
                (c2, 2)
            };
            cost[at(i, j)] = -x[(i - 1) * m + (j - 1)] + c;
            trace[at(i, j)] = t;
        }
    }
    for j in 0..=m {
        trace[at(0, j)] = 2;
    }
    for i in 0..=n {
        trace[at(i, 0)] = 1;
    }
    let (mut i, mut j) = (n, m);
    let mut path = Vec::with_capacity(n + m);
    while i > 0 || j > 0 {
        path.push((i.wrapping_sub(1), j.wrapping_sub(1)));
        match trace[at(i, j)] {
            0 => {
                i -= 1;
                j -= 1;
            }
            1 => i -= 1,
            _ => j -= 1,
        }
    }
    path.reverse();
    // Every step lands inside the matrix (the edges lead to the corner);
    // kept in range should a cost be NaN.
    path.retain(|&(i, j)| i < n && j < m);
    path
}

/// Probability of each text token given what precedes it, over the text
/// vocabulary only (ids below end of text).
fn token_probs(
    backend: &mut dyn AlignedBackend,
    seq: &[u32],
    sot_len: usize,
    text: &[u32],
    eot: u32,
) -> Result<Vec<f32>> {
    let vocab = backend.vocab_size();
    backend.start(&[0])?;
    let positions: Vec<usize> = (sot_len..sot_len + text.len()).collect();
    let mut logits = Vec::new();
    backend.feed(seq, seq.len(), &positions, &mut logits)?;
    if logits.len() != positions.len() * vocab {
        return Err(WhisperError::BackendShape {
            what: "decoder logits",
            expected: positions.len() * vocab,
            got: logits.len(),
        }
        .into());
    }
    Ok(text
        .iter()
        .zip(logits.chunks_exact(vocab))
        .map(|(&tok, row)| softmax_at(&row[..eot as usize], tok))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtw_follows_the_high_weights() {
        // 3 tokens over 5 frames: token 0 at frames 0-1, 1 at 2, 2 at 3-4.
        #[rustfmt::skip]
        let x = [
            1.0, 1.0, 0.0, 0.0, 0.0,
            0.0, 0.0, 1.0, 0.0, 0.0,
            0.0, 0.0, 0.0, 1.0, 1.0,
        ];
        let path = negative_dtw(&x, 3, 5);
        // (Diagonal moves are rare: a longer path collects more weight.)
        assert_eq!(
            path,
            vec![(0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (2, 3), (2, 4)]
        );
    }

    #[test]
    #[allow(clippy::excessive_precision)] // numpy's values as printed
    fn dtw_matches_the_reference() {
        // Paths from a line-by-line Python port of CTranslate2's
        // negative_dtw (float32 costs).
        #[rustfmt::skip]
        let x = [
            0.9, 0.1, 0.1,
            0.1, 0.1, 0.1,
            0.1, 0.2, 0.9,
        ];
        assert_eq!(
            negative_dtw(&x, 3, 3),
            vec![(0, 0), (1, 0), (2, 0), (2, 1), (2, 2)]
        );
        // numpy.random.RandomState(0).rand(4, 7) as float32.
        #[rustfmt::skip]
        let x = [
            0.5488135, 0.7151893, 0.6027634, 0.5448832, 0.4236548, 0.6458941, 0.4375872,
            0.8917730, 0.9636627, 0.3834415, 0.7917250, 0.5288949, 0.5680445, 0.9255967,
            0.0710361, 0.0871293, 0.0202184, 0.8326199, 0.7781568, 0.8700122, 0.9786183,
            0.7991586, 0.4614794, 0.7805292, 0.1182744, 0.6399210, 0.1433533, 0.9446689,
        ];
        assert_eq!(
            negative_dtw(&x, 4, 7),
            vec![
                (0, 0),
                (1, 0),
                (1, 1),
                (1, 2),
                (1, 3),
                (2, 3),
                (2, 4),
                (2, 5),
                (2, 6),
                (3, 6)
            ]
        );
        // One row: a walk along it.
        assert_eq!(negative_dtw(&[0.5, 0.2], 1, 2), vec![(0, 0), (0, 1)]);
    }

    #[test]
    fn median_filter_reflects_at_the_edges() {
        let row = [5.0, 1.0, 4.0, 2.0, 3.0];
        let mut out = [0.0; 5];
        median_filter(&row, 3, &mut out);
        // Reflection: [1,5,1] [5,1,4] [1,4,2] [4,2,3] [2,3,2].
        assert_eq!(out, [1.0, 4.0, 2.0, 3.0, 2.0]);
        let mut out = [0.0; 2];
        median_filter(&[1.0, 2.0], 7, &mut out);
        assert_eq!(out, [1.0, 2.0]);
    }

    #[test]
    fn weights_renormalise_standardise_and_average() {
        // One head, 2 tokens, 4 encoder frames of which 2 are content.
        let attn = [0.3, 0.1, 0.5, 0.1, 0.1, 0.3, 0.5, 0.1];
        let w = alignment_weights(&attn, 1, 2, 4, 2, 1);
        // Renormalised rows: [0.75, 0.25], [0.25, 0.75]; standardised
        // down each column: [1, -1], [-1, 1].
        let expect = [1.0, -1.0, -1.0, 1.0];
        for (a, b) in w.iter().zip(expect) {
            assert!((a - b).abs() < 1e-5, "{w:?}");
        }
    }

    #[test]
    fn weights_stay_finite_when_the_content_frames_get_no_attention() {
        // the first token looks only at the padding frames
        let attn = [0.0, 0.0, 0.5, 0.5, 0.1, 0.3, 0.5, 0.1];
        let w = alignment_weights(&attn, 1, 2, 4, 2, 1);
        assert!(w.iter().all(|v| v.is_finite()), "{w:?}");
        let path = negative_dtw(&w, 2, 2);
        let rows: std::collections::BTreeSet<usize> = path.iter().map(|p| p.0).collect();
        assert_eq!(rows.len(), 2, "the path crosses every token: {path:?}");
    }
}
