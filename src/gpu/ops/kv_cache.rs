//! A text decoder's key/value cache on the GPU, and the GPU forms of the
//! two attentions that read it (`kernels/attention.cu`, `kv_*`).
//!
//! The cache's data lives in device buffers made once, at their largest
//! (sequences x the model's text positions), so a captured decoder step
//! bakes in addresses that never change; the filled length and each
//! sequence's encoder window live in device memory, written by the host
//! between steps. The host's [`KvCache`] keeps the bookkeeping and tells
//! this mirror of every change ([`CacheMirror`]); the ops are built on the
//! GPU only for a cache that has one.

use std::any::Any;
use std::sync::Arc;

use cudarc::driver::CudaFunction;

use crate::gpu::memory::{copy_device, copy_to_device, DeviceBuffer};
use crate::gpu::op::{expect_io, int, launch, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx};
use crate::gpu::ops::Builders;
use crate::gpu::tensor::{float_suffix, host_bytes, DevTensor};
use crate::gpu::{GpuDevice, GpuError};
use crate::ops::kv_cache::{CacheMirror, CachedSelfAttention, CrossAttention, KvCache};
use crate::ops::{DType, OpError, OpResult, Tensor};

/// Threads per attention block (a query row of one head).
const THREADS: u32 = 128;

/// Sizes of a device cache.
#[derive(Debug, Clone, Copy)]
pub struct DeviceKvShape {
    pub layers: usize,
    pub width: usize,
    /// Text positions per sequence.
    pub capacity: usize,
    /// Sequences decoded at once, at most.
    pub sequences: usize,
    /// Encoder windows, at most, and their frames.
    pub windows: usize,
    pub frames: usize,
}

/// The device copy of one decoder's cache.
#[derive(Debug)]
pub struct DeviceKvCache {
    dev: Arc<GpuDevice>,
    shape: DeviceKvShape,
    /// Storage dtype of keys and values (the precision's).
    dtype: DType,
    self_k: Vec<DeviceBuffer>,
    self_v: Vec<DeviceBuffer>,
    cross_k: Vec<DeviceBuffer>,
    cross_v: Vec<DeviceBuffer>,
    /// One layer's self rows, for reordering.
    spare: DeviceBuffer,
    /// `i64 [sequences]`: each sequence's positions filled.
    len: DeviceBuffer,
    /// `i32 [sequences]`: the sequence each row of a step feeds (rows past
    /// the host's choice feed the last sequence, which no decoding holds
    /// when rows are chosen: a captured step pads its rows).
    row_seq: DeviceBuffer,
    /// `i32 [sequences]`: the window each sequence reads.
    seq_window: DeviceBuffer,
    /// `i32 [sequences]`: a reorder's sources.
    index: DeviceBuffer,
    gather: CudaFunction,
    /// `i32 [layers, MAX_HEADS]`: the slot of `rec` each head's
    /// cross-attention scores go to, -1 for none.
    rec_slot: DeviceBuffer,
    /// `u64`: the address of `rec` (0 before one is made), read by the
    /// captured steps, so that `rec` can be made after them.
    rec_at: DeviceBuffer,
    /// `f32 [slots, rec_rows, frames]`: the recorded heads' scores of the
    /// last step's query rows, made at the first recording.
    rec: std::sync::Mutex<Option<(usize, DeviceBuffer)>>,
}

/// Most heads a layer has for recording (Whisper's largest has 20).
const MAX_HEADS: usize = 64;

fn op_err(e: GpuError) -> OpError {
    OpError::Other(format!("GPU cache: {e}"))
}

fn i32_bytes(v: &[usize]) -> Vec<u8> {
    v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect()
}

/// Row `r` feeds sequence `r`.
fn identity(sequences: usize) -> Vec<u8> {
    i32_bytes(&(0..sequences).collect::<Vec<_>>())
}

/// A slot map that records no head.
fn no_slots(layers: usize) -> Vec<u8> {
    (-1i32)
        .to_le_bytes()
        .into_iter()
        .cycle()
        .take(layers * MAX_HEADS * 4)
        .collect()
}

impl DeviceKvCache {
    /// Allocates a zeroed cache of `shape` on `dev` (a lane: the decoder's
    /// runners must run on the same one) in `dtype` (f32 or bf16).
    pub fn new(
        dev: Arc<GpuDevice>,
        shape: DeviceKvShape,
        dtype: DType,
    ) -> Result<DeviceKvCache, GpuError> {
        let gpu = &dev.ctx;
        let e = dtype.size_of();
        let rows = shape.sequences * shape.capacity * shape.width * e;
        let cross = shape.windows * shape.frames * shape.width * e;
        // zeroed on the device: a cache of 64 sequences is ~400 MB, whose
        // upload from host zeros took 0.5-0.7 s per worker
        let zeroed = |bytes: usize| DeviceBuffer::alloc(gpu, bytes);
        let many = |bytes: usize| -> Result<Vec<DeviceBuffer>, GpuError> {
            (0..shape.layers).map(|_| zeroed(bytes)).collect()
        };
        let gather = dev
            .lib
            .function("attention", &format!("kv_gather_{}", float_suffix(dtype)?))?;
        Ok(DeviceKvCache {
            self_k: many(rows)?,
            self_v: many(rows)?,
            cross_k: many(cross)?,
            cross_v: many(cross)?,
            spare: zeroed(rows)?,
            len: zeroed(shape.sequences * 8)?,
            row_seq: DeviceBuffer::from_bytes(gpu, &identity(shape.sequences))?,
            seq_window: zeroed(shape.sequences * 4)?,
            index: zeroed(shape.sequences * 4)?,
            gather,
            rec_slot: DeviceBuffer::from_bytes(gpu, &no_slots(shape.layers))?,
            rec_at: zeroed(8)?,
            rec: std::sync::Mutex::new(None),
            shape,
            dtype,
            dev,
        })
    }

    /// Makes a device copy for `cache` on `dev` and attaches it.
    pub fn attach(
        cache: &KvCache,
        dev: Arc<GpuDevice>,
        shape: DeviceKvShape,
        dtype: DType,
    ) -> Result<Arc<DeviceKvCache>, GpuError> {
        let kv = Arc::new(DeviceKvCache::new(dev, shape, dtype)?);
        cache.attach(kv.clone());
        Ok(kv)
    }

    /// Query rows a step's recorded scores hold: a prompt's positions, or
    /// a step's sequences.
    fn rec_rows(&self) -> usize {
        self.shape.capacity.max(self.shape.sequences)
    }

    /// Sizes it was made for.
    pub fn shape(&self) -> DeviceKvShape {
        self.shape
    }

    /// Sets layer `layer`'s cross-attention keys and values from device
    /// tensors in this cache's dtype: `[windows, frames, width]` from
    /// window 0 (`window` `None`), or one window's `[1, frames, width]`
    /// (the others kept); stream-ordered, no copy through the host. The
    /// host's [`KvCache`] is told with [`KvCache::hold_cross`] or
    /// [`KvCache::hold_window`].
    pub fn set_cross_on_device(
        &self,
        layer: usize,
        window: Option<usize>,
        k: &DevTensor,
        v: &DevTensor,
    ) -> OpResult<()> {
        let s = &self.shape;
        let windows = k.shape.first().copied().unwrap_or(0);
        let at = window.unwrap_or(0);
        let fits = |t: &DevTensor| {
            t.dtype == self.dtype && t.shape.len() == 3 && t.shape[1..] == [s.frames, s.width]
        };
        if layer >= s.layers
            || !fits(k)
            || k.shape != v.shape
            || (window.is_some() && windows != 1)
            || at + windows > s.windows
        {
            return Err(OpError::Param(format!(
                "layer {layer}: {:?} {} keys into window {at}; the GPU cache holds {} layers of {} windows of {} frames of {} ({})",
                k.shape, k.dtype, s.layers, s.windows, s.frames, s.width, self.dtype
            )));
        }
        let gpu = &self.dev.ctx;
        let bytes = windows * s.frames * s.width * self.dtype.size_of();
        let offset = (at * s.frames * s.width * self.dtype.size_of()) as u64;
        for (t, dst) in [(k, &self.cross_k[layer]), (v, &self.cross_v[layer])] {
            copy_device(gpu, t.ptr, dst.ptr() + offset, bytes).map_err(op_err)?;
        }
        Ok(())
    }

    /// Sets layer `layer`'s cross-attention keys and values of window
    /// `window`'s frames `from..from + n` from rows `at..at + n` of `k`
    /// and `v` (`[1, rows, width]` device tensors in this cache's dtype),
    /// stream-ordered; the host's [`KvCache`] is told with
    /// [`KvCache::hold_window`].
    #[allow(clippy::too_many_arguments)]
    pub fn set_rows_on_device(
        &self,
        layer: usize,
        window: usize,
        from: usize,
        k: &DevTensor,
        v: &DevTensor,
        at: usize,
        n: usize,
    ) -> OpResult<()> {
        let s = &self.shape;
        let rows = k.shape.get(1).copied().unwrap_or(0);
        let fits = |t: &DevTensor| t.dtype == self.dtype && t.shape == [1, rows, s.width];
        if layer >= s.layers
            || !fits(k)
            || !fits(v)
            || at + n > rows
            || window >= s.windows
            || from + n > s.frames
        {
            return Err(OpError::Param(format!(
                "layer {layer}: rows {at}..{} of {:?} {} keys into frames {from}.. of window {window}; the GPU cache holds {} layers of {} windows of {} frames of {} ({})",
                at + n, k.shape, k.dtype, s.layers, s.windows, s.frames, s.width, self.dtype
            )));
        }
        let e = self.dtype.size_of();
        let (src, dst) = (
            (at * s.width * e) as u64,
            ((window * s.frames + from) * s.width * e) as u64,
        );
        let gpu = &self.dev.ctx;
        for (t, buf) in [(k, &self.cross_k[layer]), (v, &self.cross_v[layer])] {
            copy_device(gpu, t.ptr + src, buf.ptr() + dst, n * s.width * e).map_err(op_err)?;
        }
        Ok(())
    }

    /// Takes `old`'s cross-attention keys and values, device to device
    /// (a larger cache made for more sequences, whose windows are the
    /// old one's).
    pub fn copy_cross_from(&self, old: &DeviceKvCache) -> OpResult<()> {
        let (s, o) = (&self.shape, &old.shape);
        if (s.layers, s.frames, s.width, self.dtype) != (o.layers, o.frames, o.width, old.dtype) {
            return Err(OpError::Param(format!(
                "a GPU cache of {} layers of {} frames of {} ({}) takes the windows of one of {} of {} of {} ({})",
                s.layers, s.frames, s.width, self.dtype, o.layers, o.frames, o.width, old.dtype
            )));
        }
        let bytes = s.windows.min(o.windows) * s.frames * s.width * self.dtype.size_of();
        let gpu = &self.dev.ctx;
        for l in 0..s.layers {
            copy_device(gpu, old.cross_k[l].ptr(), self.cross_k[l].ptr(), bytes).map_err(op_err)?;
            copy_device(gpu, old.cross_v[l].ptr(), self.cross_v[l].ptr(), bytes).map_err(op_err)?;
        }
        Ok(())
    }

    fn check_sequences(&self, n: usize) -> OpResult<()> {
        if n > self.shape.sequences {
            return Err(OpError::Param(format!(
                "{n} sequences at once; the GPU cache holds {}",
                self.shape.sequences
            )));
        }
        Ok(())
    }
}

impl CacheMirror for DeviceKvCache {
    fn start(&self, windows: &[usize]) -> OpResult<()> {
        self.check_sequences(windows.len())?;
        let gpu = &self.dev.ctx;
        copy_to_device(gpu, &i32_bytes(windows), self.seq_window.ptr()).map_err(op_err)?;
        let zeros = vec![0u8; self.shape.sequences * 8];
        copy_to_device(gpu, &zeros, self.len.ptr()).map_err(op_err)?;
        copy_to_device(gpu, &identity(self.shape.sequences), self.row_seq.ptr()).map_err(op_err)
    }

    fn reorder(&self, src: &[usize], windows: &[usize], len: usize) -> OpResult<()> {
        self.check_sequences(src.len())?;
        let gpu = &self.dev.ctx;
        let s = &self.shape;
        copy_to_device(gpu, &identity(s.sequences), self.row_seq.ptr()).map_err(op_err)?;
        copy_to_device(gpu, &i32_bytes(src), self.index.ptr()).map_err(op_err)?;
        copy_to_device(gpu, &i32_bytes(windows), self.seq_window.ptr()).map_err(op_err)?;
        let total = src.len() * len * s.width;
        if total == 0 {
            return Ok(());
        }
        let cx = LaunchCx {
            gpu,
            blas: &self.dev.blas,
            step: 0,
            stream_len: 0,
        };
        let bytes = src.len() * s.capacity * s.width * self.dtype.size_of();
        for buf in self.self_k.iter().chain(&self.self_v) {
            launch(
                &cx,
                &self.gather,
                Grid::linear(total),
                &[
                    Arg::Ptr(buf.ptr()),
                    Arg::Ptr(self.spare.ptr()),
                    Arg::Ptr(self.index.ptr()),
                    Arg::I64(len as i64),
                    Arg::I32(s.width as i32),
                    Arg::I64(s.capacity as i64),
                    Arg::I64(total as i64),
                ],
            )
            .map_err(op_err)?;
            copy_device(gpu, self.spare.ptr(), buf.ptr(), bytes).map_err(op_err)?;
        }
        Ok(())
    }

    fn set_cross(&self, layer: usize, k: &Tensor, v: &Tensor) -> OpResult<()> {
        let s = &self.shape;
        let (w, f) = (k.shape()[0], k.shape()[1]);
        if layer >= s.layers || w > s.windows || f != s.frames || k.shape()[2] != s.width {
            return Err(OpError::Param(format!(
                "layer {layer}: {w} windows of {f} frames of {}; the GPU cache holds {} layers of {} windows of {} frames of {}",
                k.shape()[2],
                s.layers,
                s.windows,
                s.frames,
                s.width
            )));
        }
        let gpu = &self.dev.ctx;
        for (t, dst) in [(k, &self.cross_k[layer]), (v, &self.cross_v[layer])] {
            // f32 storage takes the host values as they are (no copy of a
            // window's megabytes); bf16 needs the cast
            match self.dtype {
                DType::F32 => {
                    copy_to_device(gpu, bytemuck::cast_slice(t.as_slice::<f32>()?), dst.ptr())
                }
                _ => copy_to_device(gpu, &host_bytes(t, self.dtype), dst.ptr()),
            }
            .map_err(op_err)?;
        }
        Ok(())
    }

    fn set_cross_rows(
        &self,
        layer: usize,
        window: usize,
        from: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> OpResult<()> {
        let s = &self.shape;
        let rows = k.shape().get(1).copied().unwrap_or(0);
        if layer >= s.layers || from + rows > s.frames || window >= s.windows {
            return Err(OpError::Param(format!(
                "layer {layer}: frames {from}..{} of window {window} of a GPU cache of {} layers of {} windows of {} frames",
                from + rows,
                s.layers,
                s.windows,
                s.frames
            )));
        }
        let gpu = &self.dev.ctx;
        let at = ((window * s.frames + from) * s.width * self.dtype.size_of()) as u64;
        for (t, dst) in [(k, &self.cross_k[layer]), (v, &self.cross_v[layer])] {
            copy_to_device(gpu, &host_bytes(t, self.dtype), dst.ptr() + at).map_err(op_err)?;
        }
        Ok(())
    }

    fn set_window(&self, layer: usize, window: usize, k: &Tensor, v: &Tensor) -> OpResult<()> {
        let s = &self.shape;
        if layer >= s.layers || window >= s.windows || k.shape() != [1, s.frames, s.width] {
            return Err(OpError::Param(format!(
                "layer {layer}: window {window} {:?}; the GPU cache holds {} layers of {} windows of {} frames of {}",
                k.shape(),
                s.layers,
                s.windows,
                s.frames,
                s.width
            )));
        }
        let gpu = &self.dev.ctx;
        let at = (window * s.frames * s.width * self.dtype.size_of()) as u64;
        for (t, dst) in [(k, &self.cross_k[layer]), (v, &self.cross_v[layer])] {
            // as set_cross: f32 goes as it is, not through a copy of the window
            match (self.dtype, t.is_contiguous()) {
                (DType::F32, true) => copy_to_device(
                    gpu,
                    bytemuck::cast_slice(t.as_slice::<f32>()?),
                    dst.ptr() + at,
                ),
                _ => copy_to_device(gpu, &host_bytes(t, self.dtype), dst.ptr() + at),
            }
            .map_err(op_err)?;
        }
        Ok(())
    }

    fn set_windows(&self, windows: &[usize]) -> OpResult<()> {
        self.check_sequences(windows.len())?;
        if let Some(&w) = windows.iter().find(|&&w| w >= self.shape.windows) {
            return Err(OpError::Param(format!(
                "window {w}; the GPU cache holds {}",
                self.shape.windows
            )));
        }
        copy_to_device(&self.dev.ctx, &i32_bytes(windows), self.seq_window.ptr()).map_err(op_err)
    }

    fn set_rows(&self, rows: Option<&[usize]>) -> OpResult<()> {
        let n = self.shape.sequences;
        let map = match rows {
            None => (0..n).collect::<Vec<_>>(),
            Some(rows) => {
                // the last sequence takes the padding rows: a decoding there
                // would have its rows overwritten
                if rows.len() >= n || rows.iter().any(|&r| r + 1 >= n) {
                    return Err(OpError::Param(format!(
                        "rows {rows:?}: a GPU cache of {n} sequences feeds at most {} chosen, \
                         sequences 0..{}",
                        n - 1,
                        n - 1
                    )));
                }
                let mut m = rows.to_vec();
                m.resize(n, n - 1);
                m
            }
        };
        copy_to_device(&self.dev.ctx, &i32_bytes(&map), self.row_seq.ptr()).map_err(op_err)
    }

    fn can_record(&self) -> bool {
        true
    }

    fn record(&self, heads: Option<&[(usize, usize)]>) -> OpResult<()> {
        let s = &self.shape;
        let gpu = &self.dev.ctx;
        let mut map = vec![usize::MAX; s.layers * MAX_HEADS];
        let slots = heads.map_or(0, <[_]>::len);
        for (slot, &(l, h)) in heads.unwrap_or(&[]).iter().enumerate() {
            if l >= s.layers || h >= MAX_HEADS {
                return Err(OpError::Param(format!(
                    "head ({l}, {h}) is not in a GPU cache of {} layers",
                    s.layers
                )));
            }
            map[l * MAX_HEADS + h] = slot;
        }
        let mut rec = self.rec.lock().unwrap_or_else(|p| p.into_inner());
        if slots > rec.as_ref().map_or(0, |r| r.0) {
            let buf =
                DeviceBuffer::alloc(gpu, slots * self.rec_rows() * s.frames * 4).map_err(op_err)?;
            copy_to_device(gpu, &buf.ptr().to_le_bytes(), self.rec_at.ptr()).map_err(op_err)?;
            // the old buffer may still be read by queued work: freed after it
            gpu.synchronize().map_err(op_err)?;
            *rec = Some((slots, buf));
        }
        let bytes: Vec<u8> = map
            .iter()
            .flat_map(|&m| if m == usize::MAX { -1i32 } else { m as i32 }.to_le_bytes())
            .collect();
        copy_to_device(gpu, &bytes, self.rec_slot.ptr()).map_err(op_err)
    }

    fn recorded(&self, slots: usize, rows: usize) -> OpResult<Vec<Vec<f32>>> {
        let s = &self.shape;
        let rec = self.rec.lock().unwrap_or_else(|p| p.into_inner());
        let Some((held, buf)) = rec.as_ref() else {
            return Ok(Vec::new());
        };
        if slots > *held || rows > self.rec_rows() {
            return Err(OpError::Param(format!(
                "{slots} heads of {rows} rows recorded; the GPU cache keeps {held} of {}",
                self.rec_rows()
            )));
        }
        let gpu = &self.dev.ctx;
        (0..slots)
            .map(|slot| {
                let mut out = vec![0f32; rows * s.frames];
                let at = (slot * self.rec_rows() * s.frames * 4) as u64;
                crate::gpu::memory::copy_to_host(
                    gpu,
                    buf.ptr() + at,
                    bytemuck::cast_slice_mut(&mut out),
                )
                .map_err(op_err)?;
                Ok(out)
            })
            .collect()
    }

    fn set_lens(&self, lens: &[usize]) -> OpResult<()> {
        self.check_sequences(lens.len())?;
        let bytes: Vec<u8> = lens
            .iter()
            .flat_map(|&l| (l as i64).to_le_bytes())
            .collect();
        copy_to_device(&self.dev.ctx, &bytes, self.len.ptr()).map_err(op_err)
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// The device cache `cache` mirrors to, when its storage is `dtype`.
fn device_cache(cache: &KvCache, dtype: DType, what: &str) -> Result<Arc<DeviceKvCache>, GpuError> {
    let kv = cache
        .mirror()
        .ok_or_else(|| GpuError::refused(what, "its cache has no GPU copy"))?
        .into_any()
        .downcast::<DeviceKvCache>()
        .map_err(|_| GpuError::refused(what, "its cache is mirrored elsewhere"))?;
    if kv.dtype != dtype {
        return Err(GpuError::refused(
            what,
            format!("the GPU cache holds {}, the inputs are {dtype}", kv.dtype),
        ));
    }
    Ok(kv)
}

/// `(batch, rows, width)` of a `[B, n, width]` input, checked against the cache.
fn query_dims(cx: &BuildCx, kv: &DeviceKvCache, what: &str) -> Result<(usize, usize), GpuError> {
    let q = cx.shape(0)?;
    let (&[b, n, w], s) = (&q[..], &kv.shape) else {
        return Err(GpuError::refused(
            what,
            format!("query {q:?} is not [B, n, width]"),
        ));
    };
    if w != s.width || b > s.sequences || n > s.capacity {
        return Err(GpuError::refused(
            what,
            format!(
                "query {q:?} does not fit a cache of {} sequences x {} positions x {}",
                s.sequences, s.capacity, s.width
            ),
        ));
    }
    if cx
        .inputs
        .iter()
        .chain(cx.outputs)
        .any(|f| f.dtype != kv.dtype)
    {
        return Err(GpuError::mixed_dtypes(what));
    }
    Ok((b, n))
}

#[derive(Debug)]
struct CachedSelfGpu {
    kv: Arc<DeviceKvCache>,
    layer: usize,
    heads: usize,
    b: usize,
    n: usize,
    append: CudaFunction,
    attend: CudaFunction,
}

impl GpuOp for CachedSelfGpu {
    fn describe(&self) -> String {
        format!(
            "kv_append + kv_self_attention (layer {}, {} heads, {} x {} rows)",
            self.layer, self.heads, self.b, self.n
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("kv_self_attention", io, 3, 1)?;
        let s = &self.kv.shape;
        let (ck, cv) = (
            self.kv.self_k[self.layer].ptr(),
            self.kv.self_v[self.layer].ptr(),
        );
        let total = self.b * self.n * s.width;
        launch(
            cx,
            &self.append,
            Grid::linear(total),
            &[
                Arg::Ptr(io.ins[1].ptr),
                Arg::Ptr(io.ins[2].ptr),
                Arg::Ptr(ck),
                Arg::Ptr(cv),
                Arg::Ptr(self.kv.len.ptr()),
                Arg::Ptr(self.kv.row_seq.ptr()),
                Arg::I32(int("rows", self.n)?),
                Arg::I32(int("width", s.width)?),
                Arg::I64(s.capacity as i64),
                Arg::I64(total as i64),
            ],
        )?;
        let dh = s.width / self.heads;
        let shared = ((32 + dh + s.capacity) * 4) as u32;
        launch(
            cx,
            &self.attend,
            Grid {
                grid: (self.heads as u32, self.n as u32, self.b as u32),
                block: (THREADS, 1, 1),
                shared_bytes: shared,
            },
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(ck),
                Arg::Ptr(cv),
                Arg::Ptr(io.outs[0].ptr),
                Arg::Ptr(self.kv.len.ptr()),
                Arg::Ptr(self.kv.row_seq.ptr()),
                Arg::I32(self.n as i32),
                Arg::I32(s.width as i32),
                Arg::I32(dh as i32),
                Arg::I64(s.capacity as i64),
                Arg::F32(1.0 / (dh as f32).sqrt()),
            ],
        )
    }
}

#[derive(Debug)]
struct CrossGpu {
    kv: Arc<DeviceKvCache>,
    layer: usize,
    heads: usize,
    b: usize,
    n: usize,
    partial: CudaFunction,
    combine: CudaFunction,
}

/// Encoder frames per block of the cross-attention's first kernel: small
/// enough that a step's few rows fill the GPU (1,500 frames: 24 slices per
/// head), large enough that the join stays cheap.
const CROSS_CHUNK: usize = 64;

impl CrossGpu {
    /// (frames per slice, slices).
    fn slices(&self) -> (usize, usize) {
        let frames = self.kv.shape.frames.max(1);
        let slices = frames.div_ceil(CROSS_CHUNK);
        (frames.div_ceil(slices), slices)
    }
}

impl GpuOp for CrossGpu {
    fn describe(&self) -> String {
        format!(
            "kv_cross_attention (layer {}, {} heads, {} x {} rows, {} slices of frames)",
            self.layer,
            self.heads,
            self.b,
            self.n,
            self.slices().1
        )
    }

    fn scratch_bytes(&self) -> usize {
        let dh = self.kv.shape.width / self.heads;
        self.b * self.n * self.heads * self.slices().1 * (dh + 2) * 4
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("kv_cross_attention", io, 1, 1)?;
        let s = &self.kv.shape;
        let dh = s.width / self.heads;
        let (chunk, slices) = self.slices();
        let rows = (self.n as u32, self.b as u32);
        launch(
            cx,
            &self.partial,
            Grid {
                grid: ((self.heads * slices) as u32, rows.0, rows.1),
                block: (THREADS, 1, 1),
                shared_bytes: ((32 + dh + chunk) * 4) as u32,
            },
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(self.kv.cross_k[self.layer].ptr()),
                Arg::Ptr(self.kv.cross_v[self.layer].ptr()),
                Arg::Ptr(self.kv.seq_window.ptr()),
                Arg::Ptr(self.kv.row_seq.ptr()),
                Arg::Ptr(io.scratch),
                Arg::I32(self.n as i32),
                Arg::I32(s.width as i32),
                Arg::I32(dh as i32),
                Arg::I64(s.frames as i64),
                Arg::F32(1.0 / (dh as f32).sqrt()),
                Arg::I32(chunk as i32),
                Arg::I32(slices as i32),
                Arg::Ptr(self.kv.rec_slot.ptr() + (self.layer * MAX_HEADS * 4) as u64),
                Arg::Ptr(self.kv.rec_at.ptr()),
                Arg::I32(self.kv.rec_rows() as i32),
            ],
        )?;
        launch(
            cx,
            &self.combine,
            Grid {
                grid: (self.heads as u32, rows.0, rows.1),
                block: ((dh as u32).next_multiple_of(32).min(1024), 1, 1),
                shared_bytes: 0,
            },
            &[
                Arg::Ptr(io.scratch),
                Arg::Ptr(io.outs[0].ptr),
                Arg::I32(self.n as i32),
                Arg::I32(s.width as i32),
                Arg::I32(dh as i32),
                Arg::I32(slices as i32),
            ],
        )
    }
}

/// Checks what both attentions share and returns the cache and the shapes.
fn build_common(
    cache: &KvCache,
    layer: usize,
    heads: usize,
    cx: &BuildCx,
    what: &str,
) -> Result<(Arc<DeviceKvCache>, usize, usize), GpuError> {
    let dt = cx.inputs[0].dtype;
    let kv = device_cache(cache, dt, what)?;
    let s = &kv.shape;
    if layer >= s.layers || heads == 0 || !s.width.is_multiple_of(heads) {
        return Err(GpuError::refused(
            what,
            format!(
                "layer {layer} of {}, {heads} heads over {}",
                s.layers, s.width
            ),
        ));
    }
    let dh = s.width / heads;
    let keys = s.capacity.max(s.frames);
    if (32 + dh + keys) * 4 > crate::gpu::op::MAX_SHARED {
        return Err(GpuError::refused(
            what,
            format!("{keys} keys exceed a block's shared memory"),
        ));
    }
    let (b, n) = query_dims(cx, &kv, what)?;
    Ok((kv, b, n))
}

fn build_self(op: &CachedSelfAttention, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let what = "kv_self_attention";
    if cx.inputs.len() != 3 || cx.outputs.len() != 1 {
        return Err(GpuError::arity(
            what,
            "3 and 1",
            cx.inputs.len(),
            cx.outputs.len(),
        ));
    }
    let (kv, b, n) = build_common(&op.cache, op.layer, op.heads, cx, what)?;
    if cx.shape(1)? != [b, n, kv.shape.width] || cx.shape(2)? != [b, n, kv.shape.width] {
        return Err(GpuError::refused(
            what,
            "keys and values are not shaped as the queries",
        ));
    }
    let sfx = float_suffix(kv.dtype)?;
    Ok(Box::new(CachedSelfGpu {
        append: cx.lib.function("attention", &format!("kv_append_{sfx}"))?,
        attend: cx
            .lib
            .function("attention", &format!("kv_self_attention_{sfx}"))?,
        layer: op.layer,
        heads: op.heads,
        b,
        n,
        kv,
    }))
}

fn build_cross(op: &CrossAttention, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let what = "kv_cross_attention";
    if cx.inputs.len() != 1 || cx.outputs.len() != 1 {
        return Err(GpuError::arity(
            what,
            "1 and 1",
            cx.inputs.len(),
            cx.outputs.len(),
        ));
    }
    let (kv, b, n) = build_common(&op.cache, op.layer, op.heads, cx, what)?;
    if op.heads > MAX_HEADS {
        return Err(GpuError::refused(
            what,
            format!("{} heads; at most {MAX_HEADS} are recorded", op.heads),
        ));
    }
    let sfx = float_suffix(kv.dtype)?;
    Ok(Box::new(CrossGpu {
        partial: cx
            .lib
            .function("attention", &format!("kv_cross_partial_{sfx}"))?,
        combine: cx
            .lib
            .function("attention", &format!("kv_cross_combine_{sfx}"))?,
        layer: op.layer,
        heads: op.heads,
        b,
        n,
        kv,
    }))
}

pub(super) fn register(r: &mut Builders) {
    r.add::<CachedSelfAttention>(build_self);
    r.add::<CrossAttention>(build_cross);
}
