//! The cache ops against plain causal attention; reordering, capacity, recording.

use super::*;
use crate::ops::attention::Attention;
use crate::ops::eval_op;
use crate::ops::{DType, Op, TypedFact};
use std::any::Any;

fn rand(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2654435761).max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x as f32 / u32::MAX as f32) - 0.5
        })
        .collect()
}

fn t(shape: &[usize], seed: u32) -> Tensor {
    Tensor::from_vec(shape.to_vec(), rand(shape.iter().product(), seed)).unwrap()
}

/// `[B, n, H*dh]` to `[B, H, n, dh]` for the reference attention.
fn heads(x: &Tensor, h: usize) -> Tensor {
    let s = x.shape();
    x.reshape(&[s[0], s[1], h, s[2] / h])
        .unwrap()
        .permute(&[0, 2, 1, 3])
        .unwrap()
        .contiguous()
}

/// Feeds `n` tokens of `b` sequences in pieces cut at `cuts` and checks
/// every output row against causal attention over all `n` at once, and
/// every output's shape against the op's facts.
fn check_pieces(b: usize, n: usize, h: usize, dh: usize, cuts: &[usize], seed: u32) {
    let width = h * dh;
    let (q, k, v) = (
        t(&[b, n, width], seed),
        t(&[b, n, width], seed + 1),
        t(&[b, n, width], seed + 2),
    );
    let mask: Vec<bool> = (0..n * n).map(|x| x % n <= x / n).collect();
    let mask = Tensor::from_vec(vec![n, n], mask).unwrap();
    let reference = eval_op(
        &Attention { scale: None },
        &[&heads(&q, h), &heads(&k, h), &heads(&v, h), &mask],
    )
    .unwrap()
    .remove(0)
    .permute(&[0, 2, 1, 3])
    .unwrap()
    .contiguous()
    .reshape(&[b, n, width])
    .unwrap()
    .to_f32_vec();
    let cache = KvCache::new(1, width, n + 3);
    cache
        .set_cross(0, &t(&[1, 4, width], 9), &t(&[1, 4, width], 10))
        .unwrap();
    cache.start(&vec![0; b]).unwrap();
    let op = CachedSelfAttention {
        layer: 0,
        heads: h,
        cache: cache.clone(),
    };
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (n + 1)).collect();
    bounds.extend([0, n]);
    bounds.sort_unstable();
    bounds.dedup();
    for w in bounds.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        let part = |x: &Tensor| x.narrow(1, lo, hi - lo).unwrap().contiguous();
        let ins = [part(&q), part(&k), part(&v)];
        let facts: Vec<TypedFact> = ins
            .iter()
            .map(|x| {
                TypedFact::dt_shape(
                    DType::F32,
                    &x.shape()
                        .iter()
                        .map(|&d| crate::ops::Dim::n(d as i64))
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let want = op.output_facts(&facts.iter().collect::<Vec<_>>()).unwrap();
        let y = eval_op(&op, &[&ins[0], &ins[1], &ins[2]])
            .unwrap()
            .remove(0);
        cache.advance(hi - lo).unwrap();
        assert_eq!(
            want[0]
                .shape
                .iter()
                .map(|d| d.as_const().unwrap() as usize)
                .collect::<Vec<_>>(),
            y.shape()
        );
        let y = y.to_f32_vec();
        for s in 0..b {
            for i in lo..hi {
                let g = &y[(s * (hi - lo) + i - lo) * width..][..width];
                let r = &reference[(s * n + i) * width..][..width];
                for (a, c) in g.iter().zip(r) {
                    assert!((a - c).abs() < 1e-5, "seq {s} row {i}: {a} vs {c}");
                }
            }
        }
    }
    assert_eq!(cache.len(), n);
}

#[test]
fn self_attention_fed_in_pieces_equals_causal_attention() {
    // the first 3 tokens at once, then one by one
    check_pieces(2, 7, 3, 4, &[3, 4, 5, 6], 1);
}

proptest::proptest! {
    #[test]
    fn any_split_equals_causal_attention(
        b in 1usize..4, n in 1usize..12, h in 1usize..4, dh in 1usize..10,
        cuts in proptest::collection::vec(0usize..12, 0..5), seed in 1u32..1000,
    ) {
        check_pieces(b, n, h, dh, &cuts, seed);
    }
}

#[test]
fn reorder_moves_sequences_and_windows() {
    let width = 4;
    let cache = KvCache::new(1, width, 8);
    let ck = Tensor::from_vec(vec![2, 1, width], vec![1f32; 8]).unwrap();
    // window 1's values are 2, window 0's are 1
    let cv = Tensor::from_vec(vec![2, 1, width], [[1f32; 4], [2f32; 4]].concat()).unwrap();
    cache.set_cross(0, &ck, &cv).unwrap();
    cache.start(&[0, 1]).unwrap();
    let cross = CrossAttention {
        layer: 0,
        heads: 2,
        cache: cache.clone(),
    };
    let q = t(&[2, 1, width], 5);
    let y = eval_op(&cross, &[&q]).unwrap().remove(0).to_f32_vec();
    assert_eq!(y, [[1f32; 4], [2f32; 4]].concat());
    cache.reorder(&[1, 1, 0]).unwrap();
    assert_eq!(cache.batch(), 3);
    let q = t(&[3, 1, width], 6);
    let y = eval_op(&cross, &[&q]).unwrap().remove(0).to_f32_vec();
    assert_eq!(y, [[2f32; 4], [2f32; 4], [1f32; 4]].concat());
    assert!(cache.reorder(&[3]).is_err());
    // a batch that does not match the cache is an error, not a wild read
    assert!(eval_op(&cross, &[&t(&[1, 1, width], 7)]).is_err());
}

#[test]
fn capacity_is_enforced() {
    let width = 4;
    let cache = KvCache::new(1, width, 2);
    cache
        .set_cross(0, &t(&[1, 3, width], 1), &t(&[1, 3, width], 2))
        .unwrap();
    cache.start(&[0]).unwrap();
    let op = CachedSelfAttention {
        layer: 0,
        heads: 1,
        cache,
    };
    let x = t(&[1, 3, width], 3);
    assert!(eval_op(&op, &[&x, &x, &x]).is_err());
    let x = t(&[1, 2, width], 3);
    assert!(eval_op(&op, &[&x, &x, &x]).is_ok());
    op.cache.advance(2).unwrap();
    // the next position is past the capacity, for the op and the driver
    let x = t(&[1, 1, width], 3);
    assert!(eval_op(&op, &[&x, &x, &x]).is_err());
    assert!(op.cache.advance(1).is_err());
}

#[test]
fn records_alignment_heads() {
    let width = 4;
    let cache = KvCache::new(2, width, 4);
    for l in 0..2 {
        cache
            .set_cross(l, &t(&[1, 5, width], 1), &t(&[1, 5, width], 2))
            .unwrap();
    }
    cache.start(&[0]).unwrap();
    cache.record(Some(vec![(1, 0)])).unwrap();
    let op = CrossAttention {
        layer: 1,
        heads: 2,
        cache: cache.clone(),
    };
    eval_op(&op, &[&t(&[1, 3, width], 4)]).unwrap();
    let rec = cache.recorded();
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].len(), 3 * 5);
    for row in rec[0].chunks(5) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
}

/// Records what a cache tells its mirror.
#[derive(Debug, Default)]
struct Log(std::sync::Mutex<Vec<String>>);

impl CacheMirror for Log {
    fn start(&self, windows: &[usize]) -> OpResult<()> {
        self.0.lock().unwrap().push(format!("start {windows:?}"));
        Ok(())
    }
    fn reorder(&self, src: &[usize], windows: &[usize], len: usize) -> OpResult<()> {
        let line = format!("reorder {src:?} {windows:?} {len}");
        self.0.lock().unwrap().push(line);
        Ok(())
    }
    fn set_cross(&self, layer: usize, k: &Tensor, _v: &Tensor) -> OpResult<()> {
        let line = format!("cross {layer} {:?}", k.shape());
        self.0.lock().unwrap().push(line);
        Ok(())
    }
    fn set_window(&self, layer: usize, window: usize, _k: &Tensor, _v: &Tensor) -> OpResult<()> {
        let line = format!("window {layer} {window}");
        self.0.lock().unwrap().push(line);
        Ok(())
    }
    fn set_lens(&self, lens: &[usize]) -> OpResult<()> {
        self.0.lock().unwrap().push(format!("lens {lens:?}"));
        Ok(())
    }
    fn set_rows(&self, rows: Option<&[usize]>) -> OpResult<()> {
        self.0.lock().unwrap().push(format!("rows {rows:?}"));
        Ok(())
    }
    fn set_windows(&self, windows: &[usize]) -> OpResult<()> {
        self.0.lock().unwrap().push(format!("windows {windows:?}"));
        Ok(())
    }
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

#[test]
fn a_mirror_is_told_every_change_and_host_ops_refuse() {
    let width = 4;
    let cache = KvCache::new(1, width, 8);
    let log = Arc::new(Log::default());
    cache.attach(log.clone());
    let x = t(&[2, 3, width], 1);
    cache.set_cross(0, &x, &x).unwrap();
    cache.start(&[1, 0]).unwrap();
    cache.advance(2).unwrap();
    cache.reorder(&[1, 1, 0]).unwrap();
    cache.advance(1).unwrap();
    assert_eq!(
        *log.0.lock().unwrap(),
        [
            "cross 0 [2, 3, 4]",
            "start [1, 0]",
            "lens [2, 2]",
            "reorder [1, 1, 0] [0, 0, 1] 2",
            "lens [2, 2, 2]",
            "lens [3, 3, 3]"
        ]
    );
    assert_eq!((cache.len(), cache.batch()), (3, 3));
    // a sequence started again, then a step over two of them
    log.0.lock().unwrap().clear();
    cache.restart(1, 1).unwrap();
    cache.select(Some(&[2, 1])).unwrap();
    cache.advance(1).unwrap();
    cache.select(None).unwrap();
    assert_eq!(
        *log.0.lock().unwrap(),
        [
            "windows [0, 1, 1]",
            "lens [3, 0, 3]",
            "rows Some([2, 1])",
            "lens [3, 1, 4]",
            "rows None"
        ]
    );
    // the rows are the mirror's: a host op would read stale ones
    let op = CachedSelfAttention {
        layer: 0,
        heads: 1,
        cache: cache.clone(),
    };
    let q = t(&[3, 1, width], 2);
    assert!(eval_op(&op, &[&q, &q, &q]).is_err());
    let cross = CrossAttention {
        layer: 0,
        heads: 1,
        cache: cache.clone(),
    };
    assert!(eval_op(&cross, &[&q]).is_err());
    // an alignment pass copies the windows into a cache of its own
    let own = KvCache::new(1, width, 8);
    own.copy_cross_from(&cache).unwrap();
    own.start(&[1]).unwrap();
    let one = t(&[1, 1, width], 3);
    assert!(eval_op(&cross, &[&one]).is_err());
    let own_cross = CrossAttention {
        layer: 0,
        heads: 1,
        cache: own,
    };
    assert!(eval_op(&own_cross, &[&one]).is_ok());
}

#[test]
fn windows_held_on_the_mirror_alone_are_not_taken_from_the_host() {
    let width = 4;
    let cache = KvCache::new(1, width, 8);
    // without a mirror nothing can hold them
    assert!(cache.hold_cross(2, 3).is_err());
    let log = Arc::new(Log::default());
    cache.attach(log.clone());
    cache.hold_cross(2, 3).unwrap();
    assert_eq!((cache.frames(), log.0.lock().unwrap().len()), (3, 0));
    // a window of other frames cannot sit beside them
    assert!(cache.hold_window(2, 4).is_err());
    // the host's copy is stale: an alignment pass may not copy it
    let own = KvCache::new(1, width, 8);
    assert!(own.copy_cross_from(&cache).is_err());
    // set again through the host, the windows are the host's again
    let x = t(&[2, 3, width], 1);
    cache.set_cross(0, &x, &x).unwrap();
    own.copy_cross_from(&cache).unwrap();
    // one window held again: a third one, the host's two kept
    cache.hold_window(2, 3).unwrap();
    assert!(own.copy_cross_from(&cache).is_err());
    let w = t(&[1, 3, width], 2);
    cache.set_window(2, &[&w], &[&w]).unwrap();
    own.copy_cross_from(&cache).unwrap();
    // a larger mirror is told where each sequence is, not the windows
    cache.start(&[1, 2]).unwrap();
    cache.advance(2).unwrap();
    log.0.lock().unwrap().clear();
    cache.replay_positions().unwrap();
    assert_eq!(*log.0.lock().unwrap(), ["windows [1, 2]", "lens [2, 2]"]);
}

/// A mirror whose ops keep scores: each step's rows score frame `f` as
/// `f` (so the softmax weights rise with the frame).
#[derive(Debug, Default)]
struct Scoring(std::sync::Mutex<Vec<String>>);

impl CacheMirror for Scoring {
    fn start(&self, _: &[usize]) -> OpResult<()> {
        Ok(())
    }
    fn reorder(&self, _: &[usize], _: &[usize], _: usize) -> OpResult<()> {
        Ok(())
    }
    fn set_cross(&self, _: usize, _: &Tensor, _: &Tensor) -> OpResult<()> {
        Ok(())
    }
    fn set_cross_rows(
        &self,
        layer: usize,
        window: usize,
        from: usize,
        k: &Tensor,
        _: &Tensor,
    ) -> OpResult<()> {
        let line = format!("rows {layer} {window} {from} {:?}", k.shape());
        self.0.lock().unwrap().push(line);
        Ok(())
    }
    fn set_lens(&self, _: &[usize]) -> OpResult<()> {
        Ok(())
    }
    fn set_windows(&self, _: &[usize]) -> OpResult<()> {
        Ok(())
    }
    fn set_rows(&self, _: Option<&[usize]>) -> OpResult<()> {
        Ok(())
    }
    fn can_record(&self) -> bool {
        true
    }
    fn record(&self, heads: Option<&[(usize, usize)]>) -> OpResult<()> {
        self.0.lock().unwrap().push(format!("record {heads:?}"));
        Ok(())
    }
    fn recorded(&self, heads: usize, rows: usize) -> OpResult<Vec<Vec<f32>>> {
        let row: Vec<f32> = (0..3).map(|f| f as f32).collect();
        Ok(vec![row.repeat(rows); heads])
    }
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

#[test]
fn a_mirror_that_keeps_scores_records_their_softmax_per_step() {
    let width = 4;
    let cache = KvCache::new(1, width, 8);
    let mirror = Arc::new(Scoring::default());
    cache.attach(mirror.clone());
    assert!(cache.can_record());
    let x = t(&[1, 3, width], 1);
    cache.set_cross(0, &x, &x).unwrap();
    cache
        .set_cross_rows(0, 0, 1, &t(&[1, 2, width], 2), &t(&[1, 2, width], 3))
        .unwrap();
    cache.start(&[0]).unwrap();
    cache.record(Some(vec![(0, 1), (0, 2)])).unwrap();
    cache.advance(2).unwrap();
    cache.advance(1).unwrap();
    let rec = cache.take_recorded();
    assert_eq!(rec.len(), 2);
    let e: Vec<f32> = (0..3).map(|f| (f as f32).exp()).collect();
    let sum: f32 = e.iter().sum();
    for head in &rec {
        // the prompt's two rows, then the step's one
        assert_eq!(head.len(), 3 * 3);
        for row in head.chunks(3) {
            for (w, e) in row.iter().zip(&e) {
                assert!((w - e / sum).abs() < 1e-6, "{row:?}");
            }
        }
    }
    // a step over two sequences: each keeps its own row
    cache.restart(1, 0).unwrap();
    cache.select(Some(&[1, 0])).unwrap();
    cache.advance(1).unwrap();
    cache.select(None).unwrap();
    for seq in [0, 1] {
        let rows = cache.take_recorded_of(seq);
        assert!(rows.iter().all(|h| h.len() == 3), "{seq}: {rows:?}");
    }
    cache.record(None).unwrap();
    cache.advance(1).unwrap();
    assert!(cache.take_recorded().is_empty());
    assert_eq!(
        *mirror.0.lock().unwrap(),
        [
            "rows 0 0 1 [1, 2, 4]",
            "record Some([(0, 1), (0, 2)])",
            "record None"
        ]
    );
}

/// Feeds `tokens` (`[n, width]` q, k, v rows) to sequence `seq` of `cache`
/// one at a time, alone, over both attentions; their outputs.
fn feed_alone(
    cache: &KvCache,
    seq: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    width: usize,
) -> Vec<f32> {
    let (sa, ca) = ops(cache);
    let mut out = Vec::new();
    for i in 0..q.len() / width {
        let row = |x: &[f32]| {
            Tensor::from_vec(vec![1, 1, width], x[i * width..(i + 1) * width].to_vec()).unwrap()
        };
        cache.select(Some(&[seq])).unwrap();
        let y = eval_op(&sa, &[&row(q), &row(k), &row(v)])
            .unwrap()
            .remove(0);
        let z = eval_op(&ca, &[&y]).unwrap().remove(0);
        cache.advance(1).unwrap();
        out.extend(z.to_f32_vec());
    }
    out
}

fn ops(cache: &KvCache) -> (CachedSelfAttention, CrossAttention) {
    (
        CachedSelfAttention {
            layer: 0,
            heads: 2,
            cache: cache.clone(),
        },
        CrossAttention {
            layer: 0,
            heads: 2,
            cache: cache.clone(),
        },
    )
}

#[test]
fn sequences_at_different_lengths_fed_in_one_step_equal_each_fed_alone() {
    let (width, frames) = (8, 5);
    let window = |seed| {
        (
            t(&[1, frames, width], seed),
            t(&[1, frames, width], seed + 1),
        )
    };
    let (k0, v0) = window(20);
    let (k1, v1) = window(30);
    // two sequences over windows of their own, 3 and 1 tokens in, then a
    // step feeding both (sequence 1 first), then sequence 0 alone again
    let shared = KvCache::new(1, width, 8);
    shared.set_window(1, &[&k1], &[&v1]).unwrap();
    shared.set_window(0, &[&k0], &[&v0]).unwrap();
    shared.restart(1, 1).unwrap();
    shared.restart(0, 0).unwrap();
    assert_eq!(shared.batch(), 2);
    let (q, k, v) = (rand(5 * width, 1), rand(5 * width, 2), rand(5 * width, 3));
    let (q1, k1r, v1r) = (rand(2 * width, 4), rand(2 * width, 5), rand(2 * width, 6));
    let span = |x: &[f32], a: usize, b: usize| x[a * width..b * width].to_vec();
    let mut got0 = feed_alone(
        &shared,
        0,
        &span(&q, 0, 3),
        &span(&k, 0, 3),
        &span(&v, 0, 3),
        width,
    );
    let mut got1 = feed_alone(
        &shared,
        1,
        &span(&q1, 0, 1),
        &span(&k1r, 0, 1),
        &span(&v1r, 0, 1),
        width,
    );
    shared.select(Some(&[1, 0])).unwrap();
    assert_eq!(shared.fed_lens(), [1, 3]);
    let both = |x: &[f32], y: &[f32]| {
        let mut r = span(y, 1, 2);
        r.extend(span(x, 3, 4));
        Tensor::from_vec(vec![2, 1, width], r).unwrap()
    };
    let (sa, ca) = ops(&shared);
    let y = eval_op(&sa, &[&both(&q, &q1), &both(&k, &k1r), &both(&v, &v1r)])
        .unwrap()
        .remove(0);
    let z = eval_op(&ca, &[&y]).unwrap().remove(0).to_f32_vec();
    shared.advance(1).unwrap();
    got1.extend(&z[..width]);
    got0.extend(&z[width..]);
    got0.extend(feed_alone(
        &shared,
        0,
        &span(&q, 4, 5),
        &span(&k, 4, 5),
        &span(&v, 4, 5),
        width,
    ));
    assert_eq!(shared.fed_lens(), [5]);
    shared.select(None).unwrap();
    assert_eq!(shared.fed_lens(), [5, 2]);

    // each sequence in a cache of its own, over its window alone
    let alone = |kk: &Tensor, vv: &Tensor, q: &[f32], k: &[f32], v: &[f32]| {
        let c = KvCache::new(1, width, 8);
        c.set_cross(0, kk, vv).unwrap();
        c.start(&[0]).unwrap();
        feed_alone(&c, 0, q, k, v, width)
    };
    let want0 = alone(&k0, &v0, &q, &k, &v);
    let want1 = alone(&window(30).0, &window(30).1, &q1, &k1r, &v1r);
    assert_eq!(got0, want0);
    assert_eq!(got1, want1);
}

#[test]
fn selected_rows_are_checked() {
    let cache = KvCache::new(1, 4, 8);
    cache
        .set_window(0, &[&t(&[1, 3, 4], 1)], &[&t(&[1, 3, 4], 2)])
        .unwrap();
    assert!(cache.restart(0, 1).is_err(), "window 1 was never set");
    cache.restart(2, 0).unwrap();
    assert_eq!(cache.batch(), 3);
    assert!(cache.select(Some(&[3])).is_err());
    assert!(cache.select(Some(&[1, 1])).is_err());
    cache.select(Some(&[2])).unwrap();
    assert!(cache.truncate(1).is_err(), "nothing filled to keep");
    // a window of another size beside the first
    assert!(cache
        .set_window(1, &[&t(&[1, 4, 4], 1)], &[&t(&[1, 4, 4], 2)])
        .is_err());
}
