//! Chunked self-attention over frames with right-context copies (see
//! [`super::right_copies::RightCopies`]): every row of a chunk, frame or
//! copy, sees the chunk's frames, `left` frames before them, and the copies
//! its own chunk carries (the `right` frames after it, as this layer
//! computed them for this chunk). No row sees another chunk's copies, so
//! the look-ahead does not compound over layers.

use super::checks::concrete;
use super::chunked_attention::ChunkedAttention;
use super::limited_attention::check_qkv;
use super::{contig, outputs_len, DType, Op, OpError, OpResult, Scratch, Tensor, TypedFact};
use crate::op_common;

mod blocked;

/// Inputs `q, k, v` `[T, 2, heads * head_dim]` or `[B, T, 2, heads *
/// head_dim]` (slot 0 the frame, slot 1 its copy, as `RightCopies` lays
/// them out); output shaped like `q`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CopiesAttention {
    pub heads: usize,
    pub chunk: usize,
    pub left: usize,
    /// Copies each chunk carries (at most `chunk`).
    pub right: usize,
}

/// The key rows one query sees: frames `lo..=hi` and the copies in the
/// slots of rows `clo..=chi` (empty where `lo > hi`).
pub(crate) type KeyRanges = ((i64, i64), (i64, i64));

impl CopiesAttention {
    /// The frames a chunk attends to, as a [`ChunkedAttention`] without
    /// look-ahead.
    pub fn frames(&self) -> ChunkedAttention {
        ChunkedAttention {
            heads: self.heads,
            chunk: self.chunk,
            left: self.left,
            right: 0,
        }
    }

    /// What the rows at position `pos` see in a stream of `end` frames.
    pub fn keys(&self, pos: i64, end: i64) -> KeyRanges {
        let (lo, hi) = self.frames().window(pos);
        let start = pos.div_euclid(self.chunk.max(1) as i64) * self.chunk as i64;
        let copies = (
            start,
            (start + self.right as i64 - 1).min(end - 1 - self.chunk as i64),
        );
        ((lo.max(0), hi.min(end - 1)), copies)
    }

    /// Checks the inputs; gives the width and the time axis.
    pub(crate) fn check(&self, inputs: &[&TypedFact]) -> OpResult<(usize, usize)> {
        if self.chunk == 0 || self.right > self.chunk {
            return Err(OpError::Param(format!(
                "copies attention needs chunk >= 1 and right {} <= chunk {}",
                self.right, self.chunk
            )));
        }
        if let Some((input, f)) = inputs.iter().enumerate().find(|(_, f)| f.rank() < 3) {
            return Err(OpError::Rank {
                input,
                expected: "3 or 4".into(),
                got: f.rank(),
            });
        }
        // the slot axis taken out, the inputs are a plain self-attention's
        let mut flat = Vec::new();
        for f in inputs {
            let r = f.rank();
            if concrete(&f.shape[r - 2], "the slot axis")? != 2 {
                return Err(OpError::Shape(format!(
                    "expected a slot axis of 2, got {f}"
                )));
            }
            let mut g = (*f).clone();
            g.shape.remove(r - 2);
            flat.push(g);
        }
        let refs: Vec<&TypedFact> = flat.iter().collect();
        let (d, t) = check_qkv(self.heads, &refs)?;
        Ok((d, t))
    }
}

impl Op for CopiesAttention {
    op_common!("CopiesAttention");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        let (_, t) = self.check(inputs)?;
        if inputs[0].shape[t] != inputs[1].shape[t] {
            return Err(OpError::Shape(format!(
                "self-attention needs q and k of one length: {} vs {}",
                inputs[0], inputs[1]
            )));
        }
        Ok(vec![inputs[0].clone()])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        let facts: Vec<TypedFact> = inputs.iter().map(|t| TypedFact::of(t)).collect();
        let refs: Vec<&TypedFact> = facts.iter().collect();
        let (_, t) = self.check(&refs)?;
        let end = inputs[0].shape()[t] as i64;
        attend_copies(self.heads, inputs, outputs, scratch, |i| {
            self.keys(i as i64, end)
        })
    }

    fn info(&self) -> String {
        format!(
            "heads {} chunk {} left {} right {} (copies)",
            self.heads, self.chunk, self.left, self.right
        )
    }
}

/// Attention of every query row (both slots) over the key rows `keys(i)`
/// gives for query row `i`, in key-row coordinates; `q [.., tq, 2, d]`,
/// `k, v [.., tk, 2, d]`.
pub(crate) fn attend_copies(
    heads: usize,
    inputs: &[&Tensor],
    outputs: &mut Vec<Tensor>,
    scratch: &mut Scratch,
    keys: impl Fn(usize) -> KeyRanges,
) -> OpResult<()> {
    let dt = inputs[0].dtype();
    if dt != DType::F32 {
        let c: Vec<Tensor> = inputs.iter().map(|t| t.cast(DType::F32)).collect();
        let refs: Vec<&Tensor> = c.iter().collect();
        let mut tmp = Vec::new();
        attend_copies(heads, &refs, &mut tmp, scratch, keys)?;
        outputs_len(outputs, 1);
        outputs[0] = tmp[0].cast(dt);
        return Ok(());
    }
    let shape = inputs[0].shape();
    let r = shape.len();
    let (tq, d) = (shape[r - 3], shape[r - 1]);
    let tk = inputs[1].shape()[r - 3];
    let batch = if r == 4 { shape[0] } else { 1 };
    let dh = d / heads;
    let scale = 1.0 / (dh as f32).sqrt();
    let (q, k, v) = (contig(inputs[0]), contig(inputs[1]), contig(inputs[2]));
    let (q, k, v) = (
        q.as_slice::<f32>()?,
        k.as_slice::<f32>()?,
        v.as_slice::<f32>()?,
    );
    outputs_len(outputs, 1);
    outputs[0].ensure(DType::F32, shape);
    let out_all = outputs[0].as_slice_mut::<f32>()?;
    out_all.fill(0.0);
    let ranges = |i: usize| clip(keys(i), tk);
    let [sn, an, wn, inv] = blocked::scratch_len(blocked::runs(tq, &ranges), tk, dh);
    let (scores, acc, work, inv) = scratch.four(sn.max(2 * tk).max(1), an, wn, inv);
    let mut bufs = blocked::Buffers {
        scores,
        acc,
        work,
        inv,
    };
    let (qn, kn) = (2 * tq * d, 2 * tk * d);
    for b in 0..batch {
        let kv = (&k[b * kn..(b + 1) * kn], &v[b * kn..(b + 1) * kn]);
        let qb = &q[b * qn..(b + 1) * qn];
        let out = &mut out_all[b * qn..(b + 1) * qn];
        for (frames, ranges) in blocked::runs(tq, &ranges) {
            if blocked::blocked(frames.len(), &ranges) {
                for h in 0..heads {
                    let geometry = (d, h * dh, dh, scale);
                    let inputs = (qb, kv.0, kv.1);
                    blocked::attend_block(inputs, out, &frames, &ranges, geometry, &mut bufs)?;
                }
                continue;
            }
            for row in (2 * frames.start..2 * frames.end).map(|r| r * d) {
                for h in 0..heads {
                    let qh = &qb[row + h * dh..row + (h + 1) * dh];
                    let o = &mut out[row + h * dh..row + (h + 1) * dh];
                    let geometry = (d, h * dh, scale);
                    attend_row(qh, kv, o, bufs.scores, ranges.clone(), geometry);
                }
            }
        }
    }
    Ok(())
}

/// The key ranges inside `0..tk`, as half-open ranges of key rows.
fn clip(((lo, hi), (clo, chi)): KeyRanges, tk: usize) -> blocked::Ranges {
    let r = |lo: i64, hi: i64| {
        let lo = lo.clamp(0, tk as i64) as usize;
        let hi = (hi + 1).clamp(0, tk as i64) as usize;
        lo..hi.max(lo)
    };
    [r(lo, hi), r(clo, chi)]
}

/// One query head over the frames (slot 0) of `ranges[0]` and the copies
/// (slot 1) of `ranges[1]`; `o` stays zero where it sees nothing.
fn attend_row(
    qh: &[f32],
    (k, v): (&[f32], &[f32]),
    o: &mut [f32],
    scores: &mut [f32],
    ranges: [std::ops::Range<usize>; 2],
    (d, off, scale): (usize, usize, f32),
) {
    let dh = qh.len();
    let key = |j: usize, s: usize| (2 * j + s) * d + off;
    let mut n = 0;
    let mut max = f32::NEG_INFINITY;
    for (s, range) in ranges.iter().enumerate() {
        for j in range.clone() {
            let kj = &k[key(j, s)..key(j, s) + dh];
            let x = qh.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * scale;
            scores[n] = x;
            max = max.max(x);
            n += 1;
        }
    }
    if n == 0 {
        return;
    }
    let mut sum = 0.0;
    for x in &mut scores[..n] {
        *x = (*x - max).exp();
        sum += *x;
    }
    let mut n = 0;
    for (s, range) in ranges.iter().enumerate() {
        for j in range.clone() {
            let w = scores[n] / sum;
            n += 1;
            let vj = &v[key(j, s)..key(j, s) + dh];
            for (a, b) in o.iter_mut().zip(vj) {
                *a += w * b;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::eval_op;

    fn rand(shape: &[usize], seed: u64) -> Tensor {
        crate::ops::shape::test_util::rand_tensor(DType::F32, shape, seed)
    }

    /// A row's output changes with exactly the keys it is said to see.
    #[test]
    fn rows_see_their_chunk_its_left_and_their_own_copies() {
        let (t, d) = (9, 4);
        let a = CopiesAttention {
            heads: 2,
            chunk: 3,
            left: 2,
            right: 2,
        };
        let (q, k, v) = (
            rand(&[t, 2, d], 1),
            rand(&[t, 2, d], 2),
            rand(&[t, 2, d], 3),
        );
        let base = eval_op(&a, &[&q, &k, &v]).unwrap().remove(0);
        for j in 0..t {
            for s in 0..2 {
                let mut k2 = k.clone();
                for e in 0..d {
                    k2.as_slice_mut::<f32>().unwrap()[(2 * j + s) * d + e] += 3.0;
                }
                let out = eval_op(&a, &[&q, &k2, &v]).unwrap().remove(0);
                for i in 0..t {
                    let start = i / 3 * 3;
                    let seen = if s == 0 {
                        j + 2 >= start && j < start + 3
                    } else {
                        // a copy of frame j + 3, which exists below t
                        j >= start && j < start + 2 && j + 3 < t
                    };
                    let row = |x: &Tensor| {
                        x.as_slice::<f32>().unwrap()[2 * i * d..2 * (i + 1) * d].to_vec()
                    };
                    assert_eq!(row(&base) != row(&out), seen, "query {i}, key {j} slot {s}");
                }
            }
        }
    }

    /// With no copies, the frames attend as a chunked attention does.
    #[test]
    fn no_copies_is_chunked_attention() {
        let (t, d) = (10, 6);
        let a = CopiesAttention {
            heads: 3,
            chunk: 4,
            left: 3,
            right: 0,
        };
        let (q, k, v) = (
            rand(&[t, 2, d], 4),
            rand(&[t, 2, d], 5),
            rand(&[t, 2, d], 6),
        );
        let got = eval_op(&a, &[&q, &k, &v]).unwrap().remove(0);
        let frames = |x: &Tensor| {
            let s = x.as_slice::<f32>().unwrap();
            let f: Vec<f32> = (0..t)
                .flat_map(|i| s[2 * i * d..(2 * i + 1) * d].to_vec())
                .collect();
            Tensor::from_vec(vec![t, d], f).unwrap()
        };
        let want = eval_op(&a.frames(), &[&frames(&q), &frames(&k), &frames(&v)]).unwrap();
        let (g, w) = (frames(&got), &want[0]);
        let diff = g
            .as_slice::<f32>()
            .unwrap()
            .iter()
            .zip(w.as_slice::<f32>().unwrap())
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff < 1e-6, "{diff}");
    }

    /// Every row against attention written out in f64 over the keys
    /// `keys` names, batched: the first chunks' few keys take the
    /// row-by-row path, the later ones blocks (where the CPU has SIMD).
    #[test]
    fn rows_and_blocks_give_attention_over_their_keys() {
        let (batch, t, heads, d) = (2, 50, 2, 16);
        let a = CopiesAttention {
            heads,
            chunk: 8,
            left: 20,
            right: 6,
        };
        let (q, k, v) = (
            rand(&[batch, t, 2, d], 7),
            rand(&[batch, t, 2, d], 8),
            rand(&[batch, t, 2, d], 9),
        );
        let got = eval_op(&a, &[&q, &k, &v]).unwrap().remove(0).to_f32_vec();
        let (q, k, v) = (q.to_f32_vec(), k.to_f32_vec(), v.to_f32_vec());
        let dh = d / heads;
        let ranges = |i: usize| clip(a.keys(i as i64, t as i64), t);
        let row = |b: usize, j: usize, s: usize| ((b * t + j) * 2 + s) * d;
        let mut worst = 0f64;
        for (b, i, s, h) in (0..batch).flat_map(|b| {
            (0..t)
                .flat_map(move |i| (0..2).flat_map(move |s| (0..heads).map(move |h| (b, i, s, h))))
        }) {
            let qi = &q[row(b, i, s) + h * dh..][..dh];
            let keys: Vec<usize> = ranges(i)
                .iter()
                .enumerate()
                .flat_map(|(slot, r)| r.clone().map(move |j| row(b, j, slot) + h * dh))
                .collect();
            let scores: Vec<f64> = keys
                .iter()
                .map(|&kr| {
                    let dot: f64 = qi
                        .iter()
                        .zip(&k[kr..kr + dh])
                        .map(|(x, y)| (x * y) as f64)
                        .sum();
                    dot / (dh as f64).sqrt()
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = w.iter().sum();
            for e in 0..dh {
                let want: f64 = keys
                    .iter()
                    .zip(&w)
                    .map(|(&kr, w)| w / sum * v[kr + e] as f64)
                    .sum();
                worst = worst.max((got[row(b, i, s) + h * dh + e] as f64 - want).abs());
            }
        }
        assert!(worst < 1e-5, "worst difference {worst}");
        let runs: Vec<_> = blocked::runs(t, &ranges).collect();
        assert_eq!(runs.len(), t.div_ceil(8), "a run a chunk");
        if crate::ops::matmul::kernel() != crate::ops::matmul::Kernel::Crate {
            assert!(runs.iter().any(|(f, r)| blocked::blocked(f.len(), r)));
            assert!(runs.iter().any(|(f, r)| !blocked::blocked(f.len(), r)));
        }
    }

    #[test]
    fn inputs_without_a_slot_axis_are_refused() {
        let a = CopiesAttention {
            heads: 1,
            chunk: 2,
            left: 0,
            right: 1,
        };
        let f = TypedFact::new(DType::F32, [crate::ops::Dim::s(), crate::ops::Dim::n(4)]);
        assert!(a.output_facts(&[&f, &f, &f]).is_err());
        let g = TypedFact::new(
            DType::F32,
            [
                crate::ops::Dim::s(),
                crate::ops::Dim::n(3),
                crate::ops::Dim::n(4),
            ],
        );
        assert!(a.output_facts(&[&g, &g, &g]).is_err());
    }
}
