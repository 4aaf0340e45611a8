//! The two attentions that read a [`KvCache`]: the decoder's causal
//! self-attention, whose keys and values accumulate in it, and its
//! attention over the encoder window.

use super::cache::CacheState;
use super::{param, KvCache};
use crate::op_common;
use crate::ops::checks::{float, input_count, rank};
use crate::ops::{contig, outputs_len, DType, Op, OpError, OpResult, Scratch, Tensor, TypedFact};

impl CacheState {
    /// Checks a layer's head count and a query `[B, n, width]` of the
    /// cache's `B` sequences; returns `(B, n)`.
    fn check_query(&self, layer: usize, heads: usize, q: &Tensor) -> OpResult<(usize, usize)> {
        if self.mirror.is_some() {
            // its rows are written on the GPU only: reading the host's
            // would be wrong, not slow
            return Err(param(format!(
                "layer {layer}: this cache's rows live on the GPU, so its attentions must run there"
            )));
        }
        let width = self.width;
        if layer >= self.layers || heads == 0 || !width.is_multiple_of(heads) {
            return Err(param(format!(
                "layer {layer} of {}, {heads} heads over {width} features",
                self.layers
            )));
        }
        let (b, n) = dims3(q, 0, width)?;
        if b != self.fed_count() {
            return Err(OpError::Shape(format!(
                "{b} sequences fed, the cache feeds {}",
                self.fed_count()
            )));
        }
        Ok((b, n))
    }
}

/// `[B, n, width]` float facts shared by both attentions (the host ops
/// compute in f32; a GPU's bf16 form keeps the dtype).
fn attention_facts(inputs: &[&TypedFact], count: usize) -> OpResult<Vec<TypedFact>> {
    input_count(inputs, count)?;
    for (i, f) in inputs.iter().enumerate() {
        rank(f, i, 3)?;
        float(f, i)?;
        if f.shape != inputs[0].shape {
            return Err(OpError::Shape(format!(
                "input {i} {f} is not shaped as q {}",
                inputs[0]
            )));
        }
    }
    Ok(vec![inputs[0].clone()])
}

/// `(batch, rows, width)` of a concrete `[B, n, width]` f32 input.
fn dims3(t: &Tensor, input: usize, width: usize) -> OpResult<(usize, usize)> {
    if t.rank() != 3 {
        return Err(OpError::Rank {
            input,
            expected: "3".into(),
            got: t.rank(),
        });
    }
    if t.dtype() != DType::F32 {
        return Err(OpError::DType {
            input,
            expected: "f32".into(),
            got: t.dtype(),
        });
    }
    if t.shape()[2] != width {
        return Err(OpError::Shape(format!(
            "input {input} {:?} is not {width} wide",
            t.shape()
        )));
    }
    Ok((t.shape()[0], t.shape()[1]))
}

/// Masked-free dot product written so that it vectorises.
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = acc.iter().sum::<f32>();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// One head of one query row: `softmax(q · k_j * scale)` over `keys` rows
/// of `k` (row stride `ld`), weights left in `w`, result into `out`.
#[allow(clippy::too_many_arguments)]
fn attend_row(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    ld: usize,
    keys: usize,
    scale: f32,
    w: &mut [f32],
    out: &mut [f32],
) {
    let dh = q.len();
    let mut max = f32::NEG_INFINITY;
    for (j, s) in w[..keys].iter_mut().enumerate() {
        *s = dot(q, &k[j * ld..j * ld + dh]) * scale;
        max = max.max(*s);
    }
    let mut sum = 0.0;
    for s in w[..keys].iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    let inv = 1.0 / sum;
    out.fill(0.0);
    for (j, s) in w[..keys].iter_mut().enumerate() {
        *s *= inv;
        let vj = &v[j * ld..j * ld + dh];
        for (o, x) in out.iter_mut().zip(vj) {
            *o += *s * x;
        }
    }
}

/// Causal self-attention whose keys and values accumulate in the cache.
///
/// Inputs `q`, `k`, `v` `[B, n, heads * head_dim]` f32 for `n` new tokens
/// of the cache's `B` sequences; their keys and values are appended to
/// layer `layer`'s cache, and new token `i` attends to every cached
/// position up to and including its own. Output `[B, n, width]`.
#[derive(Debug, Clone)]
pub struct CachedSelfAttention {
    pub layer: usize,
    pub heads: usize,
    pub cache: KvCache,
}

impl Op for CachedSelfAttention {
    op_common!("CachedSelfAttention");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        attention_facts(inputs, 3)
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        input_count(inputs, 3)?;
        let mut st = self.cache.lock();
        let (width, cap, layer) = (st.width, st.capacity, self.layer);
        let (b, n) = st.check_query(layer, self.heads, inputs[0])?;
        for i in 1..3 {
            if dims3(inputs[i], i, width)? != (b, n) {
                return Err(OpError::Shape(format!(
                    "input {i} {:?} is not shaped as q {:?}",
                    inputs[i].shape(),
                    inputs[0].shape()
                )));
            }
        }
        if let Some(r) = (0..b).find(|&r| st.lens[st.seq_of(r)] + n > cap) {
            return Err(OpError::Shape(format!(
                "{} + {n} text positions exceed the decoder's {cap}",
                st.lens[st.seq_of(r)]
            )));
        }
        let (q, k, v) = (contig(inputs[0]), contig(inputs[1]), contig(inputs[2]));
        let (q, k, v) = (
            q.as_slice::<f32>()?,
            k.as_slice::<f32>()?,
            v.as_slice::<f32>()?,
        );
        // one sequence's rows
        let stride = cap * width;
        let st = &mut *st;
        for r in 0..b {
            let s = st.seq_of(r);
            let dst = s * stride + st.lens[s] * width;
            let src = r * n * width..(r + 1) * n * width;
            st.self_k[layer][dst..dst + n * width].copy_from_slice(&k[src.clone()]);
            st.self_v[layer][dst..dst + n * width].copy_from_slice(&v[src]);
        }
        outputs_len(outputs, 1);
        outputs[0].ensure(DType::F32, &[b, n, width]);
        let out = outputs[0].as_slice_mut::<f32>()?;
        let dh = width / self.heads;
        let scale = 1.0 / (dh as f32).sqrt();
        // sized for the whole cache at once, not grown a token at a time
        // (a decoder step allocates nothing)
        let w = scratch.one(cap);
        let (kc, vc) = (&st.self_k[layer], &st.self_v[layer]);
        for fed in 0..b {
            let s = st.seq_of(fed);
            let past = st.lens[s];
            for i in 0..n {
                let r = (fed * n + i) * width;
                for h in 0..self.heads {
                    let o = h * dh;
                    let base = s * stride + o;
                    attend_row(
                        &q[r + o..r + o + dh],
                        &kc[base..],
                        &vc[base..],
                        width,
                        past + i + 1,
                        scale,
                        w,
                        &mut out[r + o..r + o + dh],
                    );
                }
            }
        }
        Ok(())
    }

    fn info(&self) -> String {
        format!("layer {} heads {}", self.layer, self.heads)
    }
}

/// Attention of the new tokens over their encoder window's cached keys and
/// values (set with [`KvCache::set_cross`]).
///
/// Input `q [B, n, heads * head_dim]` f32; output `[B, n, width]`.
#[derive(Debug, Clone)]
pub struct CrossAttention {
    pub layer: usize,
    pub heads: usize,
    pub cache: KvCache,
}

impl Op for CrossAttention {
    op_common!("CrossAttention");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        attention_facts(inputs, 1)
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        input_count(inputs, 1)?;
        let mut st = self.cache.lock();
        let (width, layer, frames) = (st.width, self.layer, st.frames);
        let (b, n) = st.check_query(layer, self.heads, inputs[0])?;
        if st.cross_k[layer].len() != st.windows * frames * width || frames == 0 {
            return Err(param(format!("layer {layer} has no encoder output")));
        }
        let q = contig(inputs[0]);
        let q = q.as_slice::<f32>()?;
        outputs_len(outputs, 1);
        outputs[0].ensure(DType::F32, &[b, n, width]);
        let out = outputs[0].as_slice_mut::<f32>()?;
        let dh = width / self.heads;
        let scale = 1.0 / (dh as f32).sqrt();
        let w = scratch.one(frames);
        let st = &mut *st;
        let keep: Vec<(usize, usize)> = st
            .record
            .iter()
            .flatten()
            .enumerate()
            .filter(|(_, (l, _))| *l == layer)
            .map(|(slot, &(_, h))| (slot, h))
            .collect();
        // heads outermost: one head's keys and values of a window (1500 x 64
        // floats) stay in cache while every beam reads them
        for h in 0..self.heads {
            let o = h * dh;
            for row in 0..b {
                let s = st.seq_of(row);
                let win = st.seq_window[s] * frames * width;
                for i in 0..n {
                    let r = (row * n + i) * width;
                    attend_row(
                        &q[r + o..r + o + dh],
                        &st.cross_k[layer][win + o..],
                        &st.cross_v[layer][win + o..],
                        width,
                        frames,
                        scale,
                        w,
                        &mut out[r + o..r + o + dh],
                    );
                    for &(slot, _) in keep.iter().filter(|(_, kh)| *kh == h) {
                        st.recorded[s][slot].extend_from_slice(&w[..frames]);
                    }
                }
            }
        }
        Ok(())
    }

    fn info(&self) -> String {
        format!("layer {} heads {}", self.layer, self.heads)
    }
}
