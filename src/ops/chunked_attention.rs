//! Multi-head self-attention restricted to chunks: the mask that lets an
//! encoder written for whole windows (Whisper's) run on a stream with a
//! bounded look-ahead. Frames are grouped in chunks of `chunk`; every frame of
//! a chunk sees the whole chunk, `left` frames before it and `right` frames
//! after it. `chunk = 1, right = 0` is [`super::limited_attention::LimitedAttention`].

use super::limited_attention::{check_qkv, eval_windowed, self_attention_facts};
use super::{OpError, OpResult, Scratch, Tensor, TypedFact};
use crate::op_common;
use crate::ops::Op;

/// Inputs `q, k, v` time-major `[T, heads * head_dim]` or `[B, T, heads *
/// head_dim]` (as a Linear produces them); output shaped like `q`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChunkedAttention {
    pub heads: usize,
    /// Frames per chunk (at least 1).
    pub chunk: usize,
    /// Frames seen before a chunk's first frame.
    pub left: usize,
    /// Frames seen after a chunk's last frame (the look-ahead beyond it).
    pub right: usize,
}

impl ChunkedAttention {
    /// The inclusive key range that query frame `i` sees (unclipped).
    pub fn window(&self, i: i64) -> (i64, i64) {
        let c = self.chunk.max(1) as i64;
        let start = i.div_euclid(c) * c;
        (start - self.left as i64, start + c - 1 + self.right as i64)
    }

    /// The most frames a query may look past itself: what a stream must
    /// wait for before the query's output is known.
    pub fn look_ahead(&self) -> usize {
        self.chunk.max(1) - 1 + self.right
    }

    /// The most frames a query may look back.
    pub fn look_back(&self) -> usize {
        self.chunk.max(1) - 1 + self.left
    }

    pub(crate) fn check(&self, inputs: &[&TypedFact]) -> OpResult<(usize, usize)> {
        if self.chunk == 0 {
            return Err(OpError::Param("chunk must be at least 1 frame".into()));
        }
        check_qkv(self.heads, inputs)
    }
}

impl Op for ChunkedAttention {
    op_common!("ChunkedAttention");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        let (_, t) = self.check(inputs)?;
        self_attention_facts(inputs, t)
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        eval_windowed(self, self.heads, None, inputs, outputs, scratch, |i| {
            self.window(i)
        })
    }

    fn info(&self) -> String {
        format!(
            "heads {} chunk {} left {} right {}",
            self.heads, self.chunk, self.left, self.right
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::Attention;
    use crate::ops::DType;

    fn rand(shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let v: Vec<f32> = (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect();
        Tensor::from_vec(shape.to_vec(), v).unwrap()
    }

    fn run(op: &dyn Op, ins: &[&Tensor]) -> Tensor {
        let mut out = Vec::new();
        op.eval(ins, &mut out, &mut Scratch::default()).unwrap();
        out.remove(0)
    }

    #[test]
    fn windows_follow_chunks() {
        let a = ChunkedAttention {
            heads: 1,
            chunk: 4,
            left: 3,
            right: 2,
        };
        assert_eq!(a.window(0), (-3, 5));
        assert_eq!(a.window(3), (-3, 5));
        assert_eq!(a.window(4), (1, 9));
        assert_eq!((a.look_ahead(), a.look_back()), (5, 6));
    }

    /// A window wider than the sequence is full attention.
    #[test]
    fn wide_window_is_full_attention() {
        let (t, heads, dh) = (13, 2, 4);
        let (q, k, v) = (
            rand(&[t, heads * dh], 1),
            rand(&[t, heads * dh], 2),
            rand(&[t, heads * dh], 3),
        );
        let a = ChunkedAttention {
            heads,
            chunk: 5,
            left: t,
            right: t,
        };
        let got = run(&a, &[&q, &k, &v]);
        // the reference: [heads, T, dh] per head
        let split = |x: &Tensor| {
            let s = x.as_slice::<f32>().unwrap();
            let mut o = vec![0f32; t * heads * dh];
            for i in 0..t {
                for h in 0..heads {
                    for e in 0..dh {
                        o[(h * t + i) * dh + e] = s[i * heads * dh + h * dh + e];
                    }
                }
            }
            Tensor::from_vec(vec![heads, t, dh], o).unwrap()
        };
        let want = run(
            &Attention { scale: None },
            &[&split(&q), &split(&k), &split(&v)],
        );
        let (w, g) = (
            want.as_slice::<f32>().unwrap(),
            got.as_slice::<f32>().unwrap(),
        );
        for i in 0..t {
            for h in 0..heads {
                for e in 0..dh {
                    let d = w[(h * t + i) * dh + e] - g[i * heads * dh + h * dh + e];
                    assert!(d.abs() < 1e-5, "{i} {h} {e}: {d}");
                }
            }
        }
    }

    /// A frame's output does not change with keys outside its window.
    #[test]
    fn keys_outside_the_window_are_unseen() {
        let (t, d) = (12, 4);
        let a = ChunkedAttention {
            heads: 1,
            chunk: 3,
            left: 2,
            right: 1,
        };
        let (q, k, v) = (rand(&[t, d], 4), rand(&[t, d], 5), rand(&[t, d], 6));
        let base = run(&a, &[&q, &k, &v]);
        for j in 0..t {
            let mut k2 = k.clone();
            let mut v2 = v.clone();
            for e in 0..d {
                k2.as_slice_mut::<f32>().unwrap()[j * d + e] += 3.0;
                v2.as_slice_mut::<f32>().unwrap()[j * d + e] -= 2.0;
            }
            let out = run(&a, &[&q, &k2, &v2]);
            for i in 0..t {
                let (lo, hi) = a.window(i as i64);
                let seen = (lo..=hi).contains(&(j as i64));
                let row = |x: &Tensor| x.as_slice::<f32>().unwrap()[i * d..(i + 1) * d].to_vec();
                assert_eq!(row(&base) != row(&out), seen, "query {i}, key {j}");
            }
        }
        assert_eq!(base.dtype(), DType::F32);
    }

    #[test]
    fn zero_chunk_is_refused() {
        let a = ChunkedAttention {
            heads: 1,
            chunk: 0,
            left: 0,
            right: 0,
        };
        let f = TypedFact::new(DType::F32, [crate::ops::Dim::n(4), crate::ops::Dim::n(2)]);
        assert!(a.output_facts(&[&f, &f, &f]).is_err());
    }
}
