//! A text decoder's key/value cache and the two attentions that read it.
//!
//! A Whisper-style decoder is stepped a few tokens at a time: its
//! self-attention keys and values grow by one row per token, and its
//! cross-attention keys and values are computed once per encoder window.
//! Both live in one [`KvCache`] that the decoder's step graphs share: the
//! prompt is fed through a graph over `[1, S]` tokens and the following
//! tokens through one over `[S, 1]` (facts have one symbol, so batch and
//! length cannot both be free in one graph), and beam search reorders the
//! sequences between steps. The cache is therefore a handle the ops hold,
//! not per-runner op state.
//!
//! Layouts are row-major `[rows, heads * head_dim]` per sequence, as the
//! projecting Linears write them; a head is a column block read through
//! strides, so nothing is transposed.
//!
//! The filled length is advanced by whoever runs the graph
//! ([`KvCache::advance`], after every layer wrote its rows), not by the
//! ops: every layer of a step writes at the same position, wherever it
//! runs. A [`CacheMirror`] (a GPU's copy of the cache, whose ops run there)
//! is told of every change made from outside the graph.

use std::any::Any;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};

use super::checks::{float, input_count, rank};
use super::{contig, outputs_len, DType, Op, OpError, OpResult, Scratch, Tensor, TypedFact};
use crate::op_common;

/// The shared cache of one decoder (all layers).
#[derive(Debug, Clone)]
pub struct KvCache {
    inner: Arc<Mutex<CacheState>>,
}

/// A copy of a cache's keys and values kept elsewhere (a GPU's memory, for
/// the GPU forms of the ops). The host cache keeps the bookkeeping and
/// tells the mirror of each change; each call sees the state after it.
pub trait CacheMirror: Debug + Send + Sync {
    /// Sequences start, reading these encoder windows; nothing filled.
    fn start(&self, windows: &[usize]) -> OpResult<()>;
    /// New sequence `b` continues old sequence `src[b]`, whose first `len`
    /// positions are filled.
    fn reorder(&self, src: &[usize], windows: &[usize], len: usize) -> OpResult<()>;
    /// Layer `layer`'s cross-attention keys and values, `[windows, frames,
    /// width]` f32 contiguous.
    fn set_cross(&self, layer: usize, k: &Tensor, v: &Tensor) -> OpResult<()>;
    /// Layer `layer`'s cross-attention keys and values of window 0's
    /// frames `from..` (`[1, rows, width]` f32 each); the rest kept.
    fn set_cross_rows(&self, layer: usize, from: usize, k: &Tensor, v: &Tensor) -> OpResult<()> {
        let _ = (layer, from, k, v);
        Err(param("this cache's copy takes whole windows".into()))
    }
    /// Positions filled from now on.
    fn set_len(&self, len: usize) -> OpResult<()>;
    /// Whether the ops over this copy can keep cross-attention scores
    /// ([`CacheMirror::record`]).
    fn can_record(&self) -> bool {
        false
    }
    /// Keeps the cross-attention scores of `heads` (`(layer, head)`,
    /// sequence 0) for every row the next steps feed (`None`: stop).
    fn record(&self, heads: Option<&[(usize, usize)]>) -> OpResult<()> {
        let _ = heads;
        Err(param("this cache's copy keeps no attention".into()))
    }
    /// The scores the last step kept: for each of `heads` recorded heads,
    /// `[rows, frames]`, scaled, before the softmax.
    fn recorded(&self, heads: usize, rows: usize) -> OpResult<Vec<Vec<f32>>> {
        let _ = (heads, rows);
        Ok(Vec::new())
    }
    /// The mirror as its concrete type, for the ops that read it.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

#[derive(Debug)]
struct CacheState {
    layers: usize,
    width: usize,
    capacity: usize,
    /// Sequences being decoded.
    batch: usize,
    /// Per layer: `[batch, capacity, width]` keys and values.
    self_k: Vec<Vec<f32>>,
    self_v: Vec<Vec<f32>>,
    /// Positions filled (in every layer).
    len: usize,
    /// Per layer: `[windows, frames, width]` cross-attention keys and values.
    cross_k: Vec<Vec<f32>>,
    cross_v: Vec<Vec<f32>>,
    windows: usize,
    frames: usize,
    /// The encoder window each sequence reads.
    seq_window: Vec<usize>,
    /// Spare buffer for reordering.
    spare: Vec<f32>,
    /// When set, cross-attention weights of these `(layer, head)` pairs are
    /// kept, in order, as `[rows, frames]` each.
    record: Option<Vec<(usize, usize)>>,
    recorded: Vec<Vec<f32>>,
    /// Told of every change from outside the graph; while set, the host
    /// keeps the bookkeeping and the windows (for alignment passes), not
    /// the self-attention rows, and host ops refuse to run.
    mirror: Option<Arc<dyn CacheMirror>>,
}

/// What can go wrong when driving the cache from outside the graph.
fn param(msg: String) -> OpError {
    OpError::Param(msg)
}

impl KvCache {
    /// An empty cache for `layers` layers of `width` (= heads x head_dim)
    /// features and at most `capacity` text positions.
    pub fn new(layers: usize, width: usize, capacity: usize) -> KvCache {
        KvCache {
            inner: Arc::new(Mutex::new(CacheState {
                layers,
                width,
                capacity,
                batch: 0,
                self_k: vec![Vec::new(); layers],
                self_v: vec![Vec::new(); layers],
                len: 0,
                cross_k: vec![Vec::new(); layers],
                cross_v: vec![Vec::new(); layers],
                windows: 0,
                frames: 0,
                seq_window: Vec::new(),
                spare: Vec::new(),
                record: None,
                recorded: Vec::new(),
                mirror: None,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, CacheState> {
        // a panic while holding the lock leaves plain buffers behind, which
        // `start` resets anyway
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Most text positions.
    pub fn capacity(&self) -> usize {
        self.lock().capacity
    }

    /// Text positions filled so far.
    pub fn len(&self) -> usize {
        self.lock().len
    }

    /// The positions the last step wrote (`n` new tokens) are now filled;
    /// called once the whole decoder ran over them.
    pub fn advance(&self, n: usize) -> OpResult<()> {
        let mut st = self.lock();
        if st.len + n > st.capacity {
            return Err(OpError::Shape(format!(
                "{} + {n} text positions exceed the decoder's {}",
                st.len, st.capacity
            )));
        }
        st.len += n;
        let st = &mut *st;
        if let Some(m) = &st.mirror {
            m.set_len(st.len)?;
            if let Some(heads) = &st.record {
                // the step kept its scores on the device
                let raw = m.recorded(heads.len(), n)?;
                for (kept, mut scores) in st.recorded.iter_mut().zip(raw) {
                    for row in scores.chunks_mut(st.frames.max(1)) {
                        softmax(row);
                    }
                    kept.extend_from_slice(&scores);
                }
            }
        }
        Ok(())
    }

    /// Keeps `mirror` told of every change from now on.
    pub fn attach(&self, mirror: Arc<dyn CacheMirror>) {
        self.lock().mirror = Some(mirror);
    }

    /// Tells the mirror again of every layer's cross-attention keys and
    /// values (a mirror attached after they were set: a larger one).
    pub fn replay_cross(&self) -> OpResult<()> {
        let st = self.lock();
        let Some(m) = &st.mirror else { return Ok(()) };
        if st.windows == 0 {
            return Ok(());
        }
        let shape = vec![st.windows, st.frames, st.width];
        for l in 0..st.layers {
            let k = Tensor::from_vec(shape.clone(), st.cross_k[l].clone())?;
            let v = Tensor::from_vec(shape.clone(), st.cross_v[l].clone())?;
            m.set_cross(l, &k, &v)?;
        }
        Ok(())
    }

    /// The attached mirror, if any.
    pub fn mirror(&self) -> Option<Arc<dyn CacheMirror>> {
        self.lock().mirror.clone()
    }

    /// Whether no position is filled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sequences being decoded.
    pub fn batch(&self) -> usize {
        self.lock().batch
    }

    /// Sets layer `layer`'s cross-attention keys and values, `[windows,
    /// frames, width]` each (f32, any layout).
    pub fn set_cross(&self, layer: usize, k: &Tensor, v: &Tensor) -> OpResult<()> {
        let mut st = self.lock();
        if layer >= st.layers {
            return Err(param(format!("layer {layer} of {}", st.layers)));
        }
        let (k, v) = (contig(k), contig(v));
        for (name, t) in [("keys", &k), ("values", &v)] {
            if t.rank() != 3 || t.shape()[2] != st.width || t.dtype() != DType::F32 {
                return Err(OpError::Shape(format!(
                    "cross {name} {:?} {} are not f32 [windows, frames, {}]",
                    t.shape(),
                    t.dtype(),
                    st.width
                )));
            }
        }
        if k.shape() != v.shape() {
            return Err(OpError::Shape(format!(
                "cross keys {:?} and values {:?} differ",
                k.shape(),
                v.shape()
            )));
        }
        let (w, f) = (k.shape()[0], k.shape()[1]);
        if layer > 0 && (w, f) != (st.windows, st.frames) {
            return Err(OpError::Shape(format!(
                "layer {layer}: {w} windows of {f} frames, layer 0 has {} of {}",
                st.windows, st.frames
            )));
        }
        (st.windows, st.frames) = (w, f);
        st.cross_k[layer].clear();
        st.cross_k[layer].extend_from_slice(k.as_slice::<f32>()?);
        st.cross_v[layer].clear();
        st.cross_v[layer].extend_from_slice(v.as_slice::<f32>()?);
        if let Some(m) = &st.mirror {
            m.set_cross(layer, &k, &v)?;
        }
        Ok(())
    }

    /// Replaces layer `layer`'s cross-attention keys and values of window
    /// 0's frames `from..` with `k` and `v` (`[1, rows, width]` f32 each):
    /// a streamed encoder's new frames, the rest of the window kept.
    pub fn set_cross_rows(
        &self,
        layer: usize,
        from: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> OpResult<()> {
        let mut st = self.lock();
        if layer >= st.layers {
            return Err(param(format!("layer {layer} of {}", st.layers)));
        }
        let (k, v) = (contig(k), contig(v));
        let rows = k.shape().get(1).copied().unwrap_or(0);
        let fits = |t: &Tensor| {
            t.rank() == 3 && t.shape() == [1, rows, st.width] && t.dtype() == DType::F32
        };
        if !fits(&k) || !fits(&v) || st.windows == 0 || from + rows > st.frames {
            return Err(OpError::Shape(format!(
                "cross rows {:?} and {:?} from frame {from} do not fit {} windows of {} frames x {}",
                k.shape(),
                v.shape(),
                st.windows,
                st.frames,
                st.width
            )));
        }
        let span = from * st.width..(from + rows) * st.width;
        st.cross_k[layer][span.clone()].copy_from_slice(k.as_slice::<f32>()?);
        st.cross_v[layer][span].copy_from_slice(v.as_slice::<f32>()?);
        if let Some(m) = &st.mirror {
            m.set_cross_rows(layer, from, &k, &v)?;
        }
        Ok(())
    }

    /// Forgets every text position from `len` on (of every sequence): a
    /// decoding that continues from a shorter prefix, without feeding it
    /// again. A mirror is told the new length: the rows past it are written
    /// again before they are read.
    pub fn truncate(&self, len: usize) -> OpResult<()> {
        let mut st = self.lock();
        if len > st.len {
            return Err(param(format!(
                "cannot keep {len} text positions of {}",
                st.len
            )));
        }
        st.len = len;
        if let Some(m) = &st.mirror {
            m.set_len(len)?;
        }
        Ok(())
    }

    /// Takes the weights kept since [`KvCache::record`] or the last take,
    /// recording on.
    pub fn take_recorded(&self) -> Vec<Vec<f32>> {
        let mut st = self.lock();
        let n = st.recorded.len();
        std::mem::replace(&mut st.recorded, vec![Vec::new(); n])
    }

    /// Whether decoder steps over this cache run on the host.
    pub fn on_host(&self) -> bool {
        self.lock().mirror.is_none()
    }

    /// Whether decoder steps over this cache can record cross-attention
    /// weights ([`KvCache::record`]): on the host, or a mirror whose ops can.
    pub fn can_record(&self) -> bool {
        self.lock().mirror.as_ref().is_none_or(|m| m.can_record())
    }

    /// Starts one sequence per entry of `windows` (the encoder window each
    /// reads), with no text position filled.
    pub fn start(&self, windows: &[usize]) -> OpResult<()> {
        let mut st = self.lock();
        if let Some(&w) = windows.iter().find(|&&w| w >= st.windows) {
            return Err(param(format!(
                "window {w} was not encoded ({} windows)",
                st.windows
            )));
        }
        let n = windows.len() * st.capacity * st.width;
        let st = &mut *st;
        if st.mirror.is_none() {
            for buf in st.self_k.iter_mut().chain(st.self_v.iter_mut()) {
                buf.resize(n, 0.0);
            }
        }
        st.len = 0;
        st.batch = windows.len();
        st.seq_window.clear();
        st.seq_window.extend_from_slice(windows);
        if let Some(m) = &st.mirror {
            m.start(windows)?;
        }
        Ok(())
    }

    /// New sequence `b` continues old sequence `src[b]`.
    pub fn reorder(&self, src: &[usize]) -> OpResult<()> {
        let mut st = self.lock();
        let st = &mut *st;
        if let Some(&s) = src.iter().find(|&&s| s >= st.batch) {
            return Err(param(format!("sequence {s} of {}", st.batch)));
        }
        st.seq_window = src.iter().map(|&s| st.seq_window[s]).collect();
        st.batch = src.len();
        if let Some(m) = &st.mirror {
            return m.reorder(src, &st.seq_window, st.len);
        }
        let row = st.capacity * st.width;
        for l in 0..st.layers {
            let used = st.len * st.width;
            for buf in [&mut st.self_k[l], &mut st.self_v[l]] {
                st.spare.resize(src.len() * row, 0.0);
                for (b, &s) in src.iter().enumerate() {
                    st.spare[b * row..b * row + used]
                        .copy_from_slice(&buf[s * row..s * row + used]);
                }
                std::mem::swap(buf, &mut st.spare);
            }
        }
        Ok(())
    }

    /// Keeps the cross-attention weights of `heads` (`(layer, head)`) from
    /// now on (`None`: stop keeping them).
    pub fn record(&self, heads: Option<Vec<(usize, usize)>>) -> OpResult<()> {
        let mut st = self.lock();
        if let Some(m) = &st.mirror {
            m.record(heads.as_deref())?;
        }
        st.recorded = vec![Vec::new(); heads.as_ref().map_or(0, |h| h.len())];
        st.record = heads;
        Ok(())
    }

    /// The weights kept since [`KvCache::record`]: per head, `[rows,
    /// frames]` for every query row fed (batch 1).
    pub fn recorded(&self) -> Vec<Vec<f32>> {
        self.lock().recorded.clone()
    }

    /// Takes `other`'s encoder windows (its cross-attention keys and
    /// values, as host copies), for a pass over them with a cache of its own.
    pub fn copy_cross_from(&self, other: &KvCache) -> OpResult<()> {
        let src = other.lock();
        let mut st = self.lock();
        if (st.layers, st.width) != (src.layers, src.width) {
            return Err(param(format!(
                "a cache of {} layers x {} takes the windows of one of {} x {}",
                st.layers, st.width, src.layers, src.width
            )));
        }
        st.cross_k.clone_from(&src.cross_k);
        st.cross_v.clone_from(&src.cross_v);
        (st.windows, st.frames) = (src.windows, src.frames);
        Ok(())
    }

    /// Encoder frames per window.
    pub fn frames(&self) -> usize {
        self.lock().frames
    }
}

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
        if b != self.batch {
            return Err(OpError::Shape(format!(
                "{b} sequences fed, the cache holds {}",
                self.batch
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

/// `row` (scores) as softmax weights, in place.
fn softmax(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for s in row.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    let inv = 1.0 / sum;
    for s in row.iter_mut() {
        *s *= inv;
    }
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
        let past = st.len;
        if past + n > cap {
            return Err(OpError::Shape(format!(
                "{past} + {n} text positions exceed the decoder's {cap}"
            )));
        }
        let (q, k, v) = (contig(inputs[0]), contig(inputs[1]), contig(inputs[2]));
        let (q, k, v) = (
            q.as_slice::<f32>()?,
            k.as_slice::<f32>()?,
            v.as_slice::<f32>()?,
        );
        let row = cap * width;
        let st = &mut *st;
        for s in 0..b {
            let dst = s * row + past * width;
            let src = s * n * width..(s + 1) * n * width;
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
        let w = &mut scratch.one(cap)[..past + n];
        let (kc, vc) = (&st.self_k[layer], &st.self_v[layer]);
        for s in 0..b {
            for i in 0..n {
                let r = (s * n + i) * width;
                for h in 0..self.heads {
                    let o = h * dh;
                    let base = s * row + o;
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
            for s in 0..b {
                let win = st.seq_window[s] * frames * width;
                for i in 0..n {
                    let r = (s * n + i) * width;
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
                        st.recorded[slot].extend_from_slice(&w[..frames]);
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

#[cfg(test)]
mod tests;
