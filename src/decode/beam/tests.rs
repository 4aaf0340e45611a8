//! Compaction and chunked feeding against one uncompacted push.

use super::*;

/// Deterministic peaky rows: one likely token per frame, every other
/// value distinct too, so no two prefixes tie exactly (on a tie the
/// order of creation decides, and compaction renumbers prefixes).
fn rows(frames: usize, vocab: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut out = Vec::with_capacity(frames * vocab);
    for _ in 0..frames {
        let hot = (next() % vocab as u64) as usize;
        let mut row: Vec<f32> = (0..vocab)
            .map(|_| 0.01 + (next() >> 40) as f32 / (1u64 << 24) as f32 * 0.2)
            .collect();
        row[hot] += 2.0 + (next() >> 40) as f32 / (1u64 << 24) as f32 * 4.0;
        let sum: f32 = row.iter().sum();
        out.extend(row.iter().map(|p| (p / sum).ln()));
    }
    out
}

#[test]
fn compaction_and_chunked_pushes_change_no_result() {
    let (frames, vocab) = (1000, 28);
    let lp = rows(frames, vocab, 42);
    let syms = ["<blk>", "<sp>"]
        .into_iter()
        .map(String::from)
        .chain(('a'..='z').map(String::from));
    let tokens = Tokens::from_lines(syms).unwrap();
    let arpa = "\\data\\\nngram 1=4\n\n\\1-grams:\n-0.5\t</s>\n-99\t<s>\n-1.0\t<unk>\n-0.7\tab\n\n\\end\\\n";
    let lm = crate::decode::WordLm::parse(arpa, "t").unwrap();
    let sc = Arc::new(LmScorer::new(Arc::new(lm), tokens, Default::default()).unwrap());
    let run = |scorer: Option<Arc<LmScorer>>, every: usize, chunk: usize| {
        let mut s = BeamSearch::new(vocab, 0, 8, scorer).unwrap();
        s.compact_every = every;
        for rows in lp.chunks(chunk * vocab) {
            s.push(rows).unwrap();
        }
        let all = s.finish();
        assert_eq!(s.best().as_ref(), all.first(), "best() is finish()'s first");
        all
    };
    for scorer in [None, Some(sc)] {
        // compacted every 7 frames and fed 13 rows at a time, or never
        // compacted and fed at once: the same search
        let every = run(scorer.clone(), 7, 13);
        let never = run(scorer.clone(), usize::MAX, frames);
        assert_eq!(every.len(), never.len(), "lm {}", scorer.is_some());
        for (i, (a, b)) in every.iter().zip(&never).enumerate() {
            assert_eq!(
                a.tokens,
                b.tokens,
                "hyp {i} tokens, lm {}",
                scorer.is_some()
            );
            assert!(a.spans == b.spans, "hyp {i} spans, lm {}", scorer.is_some());
            assert_eq!(
                (a.log_prob, a.lm_score),
                (b.log_prob, b.lm_score),
                "hyp {i}, lm {}",
                scorer.is_some()
            );
        }
        assert!(every[0].tokens.len() > 100, "{}", every[0].tokens.len());
    }
}
