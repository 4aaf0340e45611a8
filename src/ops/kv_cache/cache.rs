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
    /// Per sequence: positions filled (in every layer).
    pub(super) lens: Vec<usize>,
    /// The sequences the next steps feed, row `r` of a step being sequence
    /// `rows[r]` (`None`: every sequence, in order).
    pub(super) rows: Option<Vec<usize>>,
    /// Per layer: `[windows, frames, width]` cross-attention keys and values.
    pub(super) cross_k: Vec<Vec<f32>>,
    pub(super) cross_v: Vec<Vec<f32>>,
    pub(super) windows: usize,
    pub(super) frames: usize,
    /// Per window: set on the mirror alone ([`KvCache::hold_window`]), so
    /// the host's copy of it is stale.
    pub(super) held: Vec<bool>,
    /// The encoder window each sequence reads.
    pub(super) seq_window: Vec<usize>,
    /// Spare buffer for reordering.
    pub(super) spare: Vec<f32>,
    /// When set, cross-attention weights of these `(layer, head)` pairs are
    /// kept, in order, as `[rows, frames]` each.
    pub(super) record: Option<Vec<(usize, usize)>>,
    /// Per sequence, per recorded head: the weights kept.
    pub(super) recorded: Vec<Vec<Vec<f32>>>,
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
                lens: Vec::new(),
                rows: None,
                cross_k: vec![Vec::new(); layers],
                cross_v: vec![Vec::new(); layers],
                windows: 0,
                frames: 0,
                held: Vec::new(),
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

    /// Text positions filled so far (of the first sequence the steps feed;
    /// sequences started together are filled together).
    pub fn len(&self) -> usize {
        let st = self.lock();
        let first = st.fed_lens().next();
        first.unwrap_or(0)
    }

    /// Per row of the next step: its sequence's positions filled.
    pub fn fed_lens(&self) -> Vec<usize> {
        self.lock().fed_lens().collect()
    }

    /// Writes [`KvCache::fed_lens`] into `positions` (the next step's
    /// position of each row; rows past the fed ones left as they are),
    /// allocating nothing.
    pub fn fed_positions(&self, positions: &mut [i64]) {
        let st = self.lock();
        for (p, len) in positions.iter_mut().zip(st.fed_lens()) {
            *p = len as i64;
        }
    }

    /// The positions the last step wrote (`n` new tokens of each sequence
    /// it fed) are now filled; called once the whole decoder ran over them.
    pub fn advance(&self, n: usize) -> OpResult<()> {
        let mut st = self.lock();
        let cap = st.capacity;
        if let Some(len) = st.fed_lens().find(|&len| len + n > cap) {
            return Err(OpError::Shape(format!(
                "{len} + {n} text positions exceed the decoder's {cap}"
            )));
        }
        for r in 0..st.fed_count() {
            let s = st.seq_of(r);
            st.lens[s] += n;
        }
        let st = &mut *st;
        if let Some(m) = st.mirror.clone() {
            m.set_lens(&st.lens)?;
            if let Some(heads) = &st.record {
                // the step kept its scores on the device: rows [fed, n]
                let fed = st.fed_count();
                let raw = m.recorded(heads.len(), fed * n)?;
                let frames = st.frames.max(1);
                for (slot, mut scores) in raw.into_iter().enumerate() {
                    for (r, rows) in scores.chunks_mut(n * frames).enumerate().take(fed) {
                        rows.chunks_mut(frames).for_each(softmax);
                        let s = st.seq_of(r);
                        st.recorded[s][slot].extend_from_slice(rows);
                    }
                }
            }
        }
        Ok(())
    }

    /// The next steps feed `rows` (row `r` is sequence `rows[r]`, each
    /// sequence once), the others kept as they are; `None`: every sequence,
    /// in order. On the host only.
    pub fn select(&self, rows: Option<&[usize]>) -> OpResult<()> {
        let mut st = self.lock();
        if let Some(rows) = rows {
            if let Some(&s) = rows.iter().find(|&&s| s >= st.batch) {
                return Err(param(format!("sequence {s} of {}", st.batch)));
            }
            let mut seen = rows.to_vec();
            seen.sort_unstable();
            if seen.windows(2).any(|w| w[0] == w[1]) {
                return Err(param(format!("rows {rows:?} feed a sequence twice")));
            }
        }
        st.rows = rows.map(<[usize]>::to_vec);
        if let Some(m) = &st.mirror {
            m.set_rows(st.rows.as_deref())?;
        }
        Ok(())
    }

    /// Starts sequence `seq` again over encoded window `window`, nothing
    /// filled, the other sequences kept; a `seq` past the last adds
    /// sequences (the ones between empty, reading `window` too).
    pub fn restart(&self, seq: usize, window: usize) -> OpResult<()> {
        let mut st = self.lock();
        if window >= st.windows {
            return Err(param(format!(
                "window {window} was not encoded ({} windows)",
                st.windows
            )));
        }
        let st = &mut *st;
        if seq >= st.batch {
            let heads = st.record.as_ref().map_or(0, Vec::len);
            st.batch = seq + 1;
            st.lens.resize(st.batch, 0);
            st.seq_window.resize(st.batch, window);
            st.recorded.resize(st.batch, vec![Vec::new(); heads]);
            if st.mirror.is_none() {
                let n = st.batch * st.capacity * st.width;
                for buf in st.self_k.iter_mut().chain(st.self_v.iter_mut()) {
                    buf.resize(n, 0.0);
                }
            }
        }
        st.lens[seq] = 0;
        st.seq_window[seq] = window;
        st.recorded[seq].iter_mut().for_each(Vec::clear);
        if let Some(m) = &st.mirror {
            m.set_windows(&st.seq_window)?;
            m.set_lens(&st.lens)?;
        }
        Ok(())
    }

    /// Keeps `mirror` told of every change from now on.
    pub fn attach(&self, mirror: Arc<dyn CacheMirror>) {
        self.lock().mirror = Some(mirror);
    }

    /// Tells the mirror again where each sequence is: the window it reads
    /// and its positions filled (a mirror attached after they were set: a
    /// larger one, which took the windows from the old one).
    pub fn replay_positions(&self) -> OpResult<()> {
        let st = self.lock();
        let Some(m) = &st.mirror else { return Ok(()) };
        if st.batch > 0 {
            m.set_windows(&st.seq_window)?;
            m.set_lens(&st.lens)?;
        }
        Ok(())
    }

    /// Every window's keys and values were set on the mirror alone (`[windows,
    /// frames, width]` a layer, as [`KvCache::set_cross`] takes them),
    /// without the host's copy: a GPU encoder's outputs, which need not come
    /// to the host, since host ops refuse to run beside a mirror.
    pub fn hold_cross(&self, windows: usize, frames: usize) -> OpResult<()> {
        let mut st = self.lock();
        if st.mirror.is_none() || windows == 0 || frames == 0 {
            return Err(param(format!(
                "{windows} windows of {frames} frames held by a cache's copy it does not have"
            )));
        }
        (st.windows, st.frames) = (windows, frames);
        st.held = vec![true; windows];
        Ok(())
    }

    /// Window `window`'s keys and values were set on the mirror alone, as
    /// [`KvCache::set_window`] takes them (see [`KvCache::hold_cross`]).
    pub fn hold_window(&self, window: usize, frames: usize) -> OpResult<()> {
        let mut st = self.lock();
        if st.mirror.is_none() || frames == 0 || (st.windows > 0 && frames != st.frames) {
            return Err(param(format!(
                "window {window} of {frames} frames held by a cache's copy beside windows of {} (a copy: {})",
                st.frames,
                st.mirror.is_some()
            )));
        }
        st.frames = frames;
        st.windows = st.windows.max(window + 1);
        let windows = st.windows;
        st.held.resize(windows, false);
        st.held[window] = true;
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

    /// Sets encoded window `window`'s cross-attention keys and values, a
    /// key and a value `[1, frames, width]` (f32) per layer, the other
    /// windows kept; a `window` past the last adds windows (the ones
    /// between zero).
    pub fn set_window(&self, window: usize, k: &[&Tensor], v: &[&Tensor]) -> OpResult<()> {
        let mut st = self.lock();
        if k.len() != st.layers || v.len() != st.layers {
            return Err(param(format!(
                "{} keys and {} values for {} layers",
                k.len(),
                v.len(),
                st.layers
            )));
        }
        let frames = k[0].shape().get(1).copied().unwrap_or(0);
        let width = st.width;
        let fits = |t: &Tensor| {
            t.rank() == 3 && t.shape() == [1, frames, width] && t.dtype() == DType::F32
        };
        if frames == 0 || !k.iter().chain(v).all(|t| fits(t)) {
            return Err(OpError::Shape(format!(
                "window keys {:?} are not f32 [1, frames, {width}] in every layer",
                k[0].shape()
            )));
        }
        if st.windows > 0 && frames != st.frames {
            return Err(OpError::Shape(format!(
                "a window of {frames} frames beside windows of {}",
                st.frames
            )));
        }
        let st = &mut *st;
        st.frames = frames;
        st.windows = st.windows.max(window + 1);
        st.held.resize(st.windows, false);
        st.held[window] = false;
        let size = frames * width;
        for l in 0..st.layers {
            for (buf, t) in [(&mut st.cross_k[l], k[l]), (&mut st.cross_v[l], v[l])] {
                buf.resize(st.windows * size, 0.0);
                buf[window * size..(window + 1) * size]
                    .copy_from_slice(contig(t).as_slice::<f32>()?);
            }
            if let Some(m) = &st.mirror {
                m.set_window(l, window, k[l], v[l])?;
            }
        }
        Ok(())
    }

    /// Sequences being decoded.
    pub fn batch(&self) -> usize {
        self.lock().batch
    }

    /// Rows the next step feeds (the sequences [`KvCache::select`] chose,
    /// else all).
    pub fn fed(&self) -> usize {
        self.lock().fed_count()
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
        st.held = vec![false; w];
        st.cross_k[layer].clear();
        st.cross_k[layer].extend_from_slice(k.as_slice::<f32>()?);
        st.cross_v[layer].clear();
        st.cross_v[layer].extend_from_slice(v.as_slice::<f32>()?);
        if let Some(m) = &st.mirror {
            m.set_cross(layer, &k, &v)?;
        }
        Ok(())
    }

    /// Replaces layer `layer`'s cross-attention keys and values of
    /// `window`'s frames `from..` with `k` and `v` (`[1, rows, width]` f32
    /// each): a streamed encoder's new frames, the rest of the window kept.
    pub fn set_cross_rows(
        &self,
        layer: usize,
        window: usize,
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
        if !fits(&k) || !fits(&v) || window >= st.windows || from + rows > st.frames {
            return Err(OpError::Shape(format!(
                "cross rows {:?} and {:?} from frame {from} do not fit window {window} of {} windows of {} frames x {}",
                k.shape(),
                v.shape(),
                st.windows,
                st.frames,
                st.width
            )));
        }
        let at = (window * st.frames + from) * st.width;
        let span = at..at + rows * st.width;
        st.cross_k[layer][span.clone()].copy_from_slice(k.as_slice::<f32>()?);
        st.cross_v[layer][span].copy_from_slice(v.as_slice::<f32>()?);
        if let Some(m) = &st.mirror {
            m.set_cross_rows(layer, window, from, &k, &v)?;
        }
        Ok(())
    }

    /// Forgets every text position from `len` on (of every sequence the
    /// steps feed): a decoding that continues from a shorter prefix,
    /// without feeding it again. A mirror is told the new length: the rows
    /// past it are written again before they are read.
    pub fn truncate(&self, len: usize) -> OpResult<()> {
        let mut st = self.lock();
        if let Some(filled) = st.fed_lens().find(|&f| len > f) {
            return Err(param(format!(
                "cannot keep {len} text positions of {filled}"
            )));
        }
        for r in 0..st.fed_count() {
            let s = st.seq_of(r);
            st.lens[s] = len;
        }
        if let Some(m) = &st.mirror {
            m.set_lens(&st.lens)?;
        }
        Ok(())
    }

    /// Takes the weights kept since [`KvCache::record`] or the last take,
    /// recording on: per head, every sequence's rows in turn.
    pub fn take_recorded(&self) -> Vec<Vec<f32>> {
        let mut st = self.lock();
        let heads = st.record.as_ref().map_or(0, Vec::len);
        let mut all = vec![Vec::new(); heads];
        for seq in st.recorded.iter_mut() {
            for (a, kept) in all.iter_mut().zip(seq.iter_mut()) {
                a.append(kept);
            }
        }
        all
    }

    /// Takes the weights sequence `seq` kept since the last take: per
    /// head, `[rows, frames]`.
    pub fn take_recorded_of(&self, seq: usize) -> Vec<Vec<f32>> {
        let mut st = self.lock();
        let heads = st.record.as_ref().map_or(0, Vec::len);
        st.recorded
            .get_mut(seq)
            .map(|kept| std::mem::replace(kept, vec![Vec::new(); heads]))
            .unwrap_or_default()
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
        st.batch = windows.len();
        st.lens = vec![0; st.batch];
        st.rows = None;
        st.reset_recorded();
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
        let lens: Vec<usize> = src.iter().map(|&s| st.lens[s]).collect();
        st.recorded = src.iter().map(|&s| st.recorded[s].clone()).collect();
        st.batch = src.len();
        st.rows = None;
        if let Some(m) = &st.mirror {
            // beams: every sequence as long as the others
            m.reorder(src, &st.seq_window, lens.first().copied().unwrap_or(0))?;
            st.lens = lens;
            return m.set_lens(&st.lens);
        }
        let row = st.capacity * st.width;
        for l in 0..st.layers {
            for buf in [&mut st.self_k[l], &mut st.self_v[l]] {
                st.spare.resize(src.len() * row, 0.0);
                for (b, &s) in src.iter().enumerate() {
                    let used = st.lens[s] * st.width;
                    st.spare[b * row..b * row + used]
                        .copy_from_slice(&buf[s * row..s * row + used]);
                }
                std::mem::swap(buf, &mut st.spare);
            }
        }
        st.lens = lens;
        Ok(())
    }

    /// Keeps the cross-attention weights of `heads` (`(layer, head)`) from
    /// now on (`None`: stop keeping them).
    pub fn record(&self, heads: Option<Vec<(usize, usize)>>) -> OpResult<()> {
        let mut st = self.lock();
        if let Some(m) = &st.mirror {
            m.record(heads.as_deref())?;
        }
        st.record = heads;
        st.reset_recorded();
        Ok(())
    }

    /// The weights kept since [`KvCache::record`]: per head, `[rows,
    /// frames]` for every query row fed, every sequence's in turn.
    pub fn recorded(&self) -> Vec<Vec<f32>> {
        let st = self.lock();
        let heads = st.record.as_ref().map_or(0, Vec::len);
        (0..heads)
            .map(|h| {
                st.recorded
                    .iter()
                    .flat_map(|seq| seq[h].iter().copied())
                    .collect()
            })
            .collect()
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
        if src.held.contains(&true) {
            return Err(param(
                "the windows to take are held on the device alone".into(),
            ));
        }
        st.cross_k.clone_from(&src.cross_k);
        st.cross_v.clone_from(&src.cross_v);
        (st.windows, st.frames) = (src.windows, src.frames);
        st.held = vec![false; src.windows];
        Ok(())
    }

    /// Encoder frames per window.
    pub fn frames(&self) -> usize {
        self.lock().frames
    }
}

impl CacheState {
    /// Rows the next step feeds.
    pub(super) fn fed_count(&self) -> usize {
        self.rows.as_ref().map_or(self.batch, Vec::len)
    }

    /// The sequence row `row` of a step feeds.
    pub(super) fn seq_of(&self, row: usize) -> usize {
        self.rows.as_ref().map_or(row, |rows| rows[row])
    }

    /// Per row of the next step: its sequence's positions filled.
    fn fed_lens(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.fed_count()).map(|r| self.lens[self.seq_of(r)])
    }

    /// No weight kept, room for every sequence's.
    fn reset_recorded(&mut self) {
        let heads = self.record.as_ref().map_or(0, Vec::len);
        self.recorded = vec![vec![Vec::new(); heads]; self.batch];
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
