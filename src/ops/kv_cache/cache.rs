//! The cache's bookkeeping and storage, driven from outside the graph
//! (starts, reorders, cross-attention windows) and read by the ops.

use std::sync::{Arc, Mutex, MutexGuard};

use super::{param, CacheMirror};
use crate::ops::{contig, DType, OpError, OpResult, Tensor};

/// The shared cache of one decoder (all layers).
#[derive(Debug, Clone)]
pub struct KvCache {
    inner: Arc<Mutex<CacheState>>,
}

#[derive(Debug)]
pub(super) struct CacheState {
    pub(super) layers: usize,
    pub(super) width: usize,
    pub(super) capacity: usize,
    /// Sequences being decoded.
    pub(super) batch: usize,
    /// Per layer: `[batch, capacity, width]` keys and values.
    pub(super) self_k: Vec<Vec<f32>>,
    pub(super) self_v: Vec<Vec<f32>>,
    /// Positions filled (in every layer).
    pub(super) len: usize,
    /// Per layer: `[windows, frames, width]` cross-attention keys and values.
    pub(super) cross_k: Vec<Vec<f32>>,
    pub(super) cross_v: Vec<Vec<f32>>,
    pub(super) windows: usize,
    pub(super) frames: usize,
    /// The encoder window each sequence reads.
    pub(super) seq_window: Vec<usize>,
    /// Spare buffer for reordering.
    pub(super) spare: Vec<f32>,
    /// When set, cross-attention weights of these `(layer, head)` pairs are
    /// kept, in order, as `[rows, frames]` each.
    pub(super) record: Option<Vec<(usize, usize)>>,
    pub(super) recorded: Vec<Vec<f32>>,
    /// Told of every change from outside the graph; while set, the host
    /// keeps the bookkeeping and the windows (for alignment passes), not
    /// the self-attention rows, and host ops refuse to run.
    pub(super) mirror: Option<Arc<dyn CacheMirror>>,
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

    pub(super) fn lock(&self) -> MutexGuard<'_, CacheState> {
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
