//! Attention (`kernels/attention.cu`): LimitedAttention, its pulsed form and
//! scaled dot-product attention, each one fused kernel with a block per
//! (query row, head or batch) and the row's scores in shared memory; long
//! unmasked rows of the last as GEMMs instead (`attention_gemm.rs`).

use cudarc::driver::CudaFunction;

use super::attention_gemm::{Geometry, SdpaGemm};
use crate::gpu::op::{
    expect_io, int, launch, long, max_threads_per_block, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx,
    MAX_SHARED,
};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::attention::Attention;
use crate::ops::limited_attention::LimitedAttention;
use crate::ops::DType;
use crate::pulse::PulsedLimitedAttention;

/// Threads per block: eight warps share a row's keys (fewer keys per warp, shorter chains).
pub(super) const THREADS: u32 = 256;
/// Threads per block of the tile kernel: a whole head's tile per block, so
/// as many threads as a block can have, each with a short chain.
const TILE_THREADS: u32 = 1024;
/// Largest grid y (heads or batch).
const MAX_GRID_Y: usize = 65_535;

/// Shared bytes for a row of width `d` and `keys` scores, or why not.
pub(super) fn shared_bytes(what: &str, d: usize, keys: usize) -> Result<u32, GpuError> {
    let bytes = (32 + d + keys) * 4;
    if bytes > MAX_SHARED {
        return Err(GpuError::refused(
            what,
            format!(
                "a row of width {d} with {keys} keys needs {bytes} bytes of shared memory \
             (at most {MAX_SHARED})"
            ),
        ));
    }
    Ok(bytes as u32)
}

/// A limited attention's GPU form. The rewrites (`gpu::rewrite`) fuse into
/// a pulsed one the Delays of its keys and values ([`LimitedGpu::with_delays`]):
/// inputs 1 and 2 are then the new frames, and the rings are its state.
#[derive(Debug, Clone)]
pub(crate) struct LimitedGpu {
    f: CudaFunction,
    grid: Grid,
    /// Query rows per block of `limited_attention_tile` (one block per head
    /// and row group), or `None` for one block per query row.
    tile_rows: Option<i32>,
    /// The ring frames of the K and V Delays fused into it.
    rings: Option<usize>,
    elem: usize,
    pulsed: bool,
    heads: usize,
    batch: usize,
    tq: i32,
    tk: i64,
    width: i32,
    dh: i32,
    lc: i64,
    scale: f32,
    pulse: i64,
    delay: i64,
}

impl LimitedGpu {
    /// With the K and V Delays (no delay, `ring` frames of overlap) kept in
    /// its state: the tiled pulsed kernel only, whose window is the ring
    /// and this pulse's frames.
    pub(crate) fn with_delays(&self, ring: usize) -> Option<LimitedGpu> {
        let fits = self.tile_rows.is_some()
            && self.pulsed
            && ring as i64 + self.tq as i64 == self.tk
            && self.rings.is_none();
        fits.then(|| LimitedGpu {
            rings: Some(ring),
            ..self.clone()
        })
    }
}

impl GpuOp for LimitedGpu {
    fn describe(&self) -> String {
        format!(
            "{}limited_attention{} {}x{} keys, {} heads of {}, left context {}",
            if self.pulsed { "pulsed " } else { "" },
            match (self.tile_rows, self.rings) {
                (Some(_), Some(_)) => " (tile, K and V delays fused)",
                (Some(_), None) => " (tile)",
                _ => "",
            },
            self.tq,
            self.tk,
            self.heads,
            self.dh,
            self.lc
        )
    }

    fn state_bytes(&self) -> usize {
        // two rings (this step's and the next's) each of K and V
        self.rings.map_or(0, |ring| {
            4 * self.batch * ring * self.width as usize * self.elem
        })
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("limited attention", io, 3, 1)?;
        if self.tq == 0 || self.batch == 0 {
            return Ok(());
        }
        let [q, k, v, out] = [io.ins[0].ptr, io.ins[1].ptr, io.ins[2].ptr, io.outs[0].ptr];
        let step = if self.pulsed { cx.step } else { 0 };
        let rest = [
            Arg::I64(self.tk),
            Arg::I32(self.width),
            Arg::I32(self.dh),
            Arg::I64(self.lc),
            Arg::F32(self.scale),
            Arg::I64(self.pulse),
            Arg::I64(self.delay),
        ];
        let Some(rpb) = self.tile_rows else {
            let mut args = [Arg::U64(0); 12];
            args[..5].copy_from_slice(&[q, k, v, out, step].map(Arg::Ptr));
            args[5..].copy_from_slice(&rest);
            return launch(cx, &self.f, self.grid, &args);
        };
        // fused delays: k and v are the new frames, the rings are state
        let ring = self.rings.unwrap_or(0) as i64;
        let mut args = [Arg::U64(0); 16];
        args[..5].copy_from_slice(&[q, k, v, out, step].map(Arg::Ptr));
        args[5] = Arg::I32(self.tq);
        args[6] = Arg::I32(rpb);
        args[7..14].copy_from_slice(&rest);
        args[14] = Arg::Ptr(io.state);
        args[15] = Arg::I64(ring);
        launch(cx, &self.f, self.grid, &args)
    }
}

pub(super) fn register(r: &mut Builders) {
    r.add::<PulsedLimitedAttention>(|p, cx| build_limited(&p.attn, Some((p.pulse, p.delay)), cx));
    r.add::<LimitedAttention>(|a, cx| build_limited(a, None, cx));
    r.add::<Attention>(build_sdpa);
}

/// `pulsed`: `(pulse, delay)` of a [`PulsedLimitedAttention`].
fn build_limited(
    op: &LimitedAttention,
    pulsed: Option<(usize, usize)>,
    cx: &BuildCx,
) -> Result<Box<dyn GpuOp>, GpuError> {
    let what = "limited attention";
    let SelfAttentionIo {
        suffix,
        dtype: dt,
        batch,
        tq,
        tk,
        width,
        dh,
    } = self_attention_io(what, op.heads, cx)?;
    let (q, k) = (cx.shape(0)?, cx.shape(1)?);
    let lc = op.left_context;
    match pulsed {
        Some((p, _)) if tq != p || Some(tk) != p.checked_add(lc) => {
            return Err(GpuError::refused(
                what,
                format!(
                    "pulse {p} and left context {lc} need q of {p} rows and k of {} rows, \
                 got {q:?} and {k:?}",
                    p.saturating_add(lc)
                ),
            ))
        }
        None if tq != tk => {
            return Err(GpuError::refused(
                what,
                format!("q {q:?} and k {k:?} differ in length"),
            ))
        }
        _ => {}
    }
    let (pulse, delay) = pulsed.unwrap_or((0, 0));
    // a chunk step's tile (every query row and its keys, per head) fits in
    // shared memory: one block per head; otherwise one per query row, which
    // holds at most lc + 1 scores
    let tile_f = cx
        .lib
        .function("attention", &format!("limited_attention_tile_{suffix}"))?;
    // a kernel whose registers leave no room for TILE_THREADS cannot launch
    let tile_fits = max_threads_per_block(&tile_f).is_ok_and(|max| max >= TILE_THREADS);
    let tile = tile_rows(tq, op.heads.saturating_mul(batch))
        .filter(|_| tile_fits)
        .and_then(|(rpb, groups)| Some((rpb, groups, tile_shared_bytes(rpb, tk, dh)?)));
    let (f, grid) = match tile {
        Some((_, groups, bytes)) => (
            tile_f,
            Grid {
                grid: (op.heads as u32, groups as u32, batch as u32),
                block: (TILE_THREADS, 1, 1),
                shared_bytes: bytes,
            },
        ),
        None => (
            cx.lib
                .function("attention", &format!("limited_attention_{suffix}"))?,
            Grid {
                grid: (
                    (int("query rows", tq)? as u32).max(1),
                    op.heads as u32,
                    batch as u32,
                ),
                block: (THREADS, 1, 1),
                shared_bytes: shared_bytes(what, dh, lc.saturating_add(1).min(tk))?,
            },
        ),
    };
    Ok(Box::new(LimitedGpu {
        f,
        grid,
        tile_rows: tile.map(|t| t.0 as i32),
        rings: None,
        elem: dt.size_of(),
        pulsed: pulsed.is_some(),
        heads: op.heads,
        batch,
        tq: int("query rows", tq)?,
        tk: long("keys", tk)?,
        width: int("width", width)?,
        dh: int("head width", dh)?,
        lc: long("left context", lc)?,
        scale: op.scale.unwrap_or(1.0 / (dh as f32).sqrt()),
        pulse: long("pulse", pulse)?,
        delay: long("delay", delay)?,
    }))
}

/// The facts a self-attention's kernel needs: q `[(b,) tq, width]`, k and v
/// `[(b,) tk, width]`, out like q, one float type, `heads` dividing the width.
pub(super) struct SelfAttentionIo {
    pub suffix: &'static str,
    pub dtype: DType,
    pub batch: usize,
    pub tq: usize,
    pub tk: usize,
    pub width: usize,
    /// One head's width.
    pub dh: usize,
}

/// Checks `cx` as [`SelfAttentionIo`] describes, or why not.
pub(super) fn self_attention_io(
    what: &str,
    heads: usize,
    cx: &BuildCx,
) -> Result<SelfAttentionIo, GpuError> {
    if cx.inputs.len() != 3 || cx.outputs.len() != 1 {
        return Err(GpuError::arity(
            what,
            "3 and 1",
            cx.inputs.len(),
            cx.outputs.len(),
        ));
    }
    let suffix = cx.suffix(0)?;
    let dtype = cx.inputs[0].dtype;
    if cx.inputs.iter().any(|f| f.dtype != dtype) || cx.outputs[0].dtype != dtype {
        return Err(GpuError::mixed_dtypes(what));
    }
    let (q, k, v, out) = (cx.shape(0)?, cx.shape(1)?, cx.shape(2)?, cx.out_shape(0)?);
    let r = q.len();
    if !(r == 2 || r == 3)
        || k.len() != r
        || k != v
        || out != q
        || k[r - 1] != q[r - 1]
        || k[..r - 2] != q[..r - 2]
    {
        return Err(GpuError::refused(what, format!(
            "q {q:?}, k {k:?}, v {v:?}, out {out:?} are not [(b,) tq, d], [(b,) tk, d], [(b,) tk, d], [(b,) tq, d]"
        )));
    }
    let batch = if r == 3 { q[0] } else { 1 };
    if batch > MAX_GRID_Y {
        return Err(GpuError::refused(
            what,
            format!("a batch of {batch} (at most {MAX_GRID_Y})"),
        ));
    }
    let (tq, tk, width) = (q[r - 2], k[r - 2], q[r - 1]);
    if heads == 0 || width % heads != 0 || heads > MAX_GRID_Y {
        return Err(GpuError::refused(
            what,
            format!("width {width} in {heads} heads (at most {MAX_GRID_Y})"),
        ));
    }
    Ok(SelfAttentionIo {
        suffix,
        dtype,
        batch,
        tq,
        tk,
        width,
        dh: width / heads,
    })
}

/// Blocks the tile kernel should at least fill: about the SMs of an H100
/// (132); a single stream's few heads alone would leave most of them idle.
const TILE_SPREAD: usize = 128;

/// (query rows per block, row groups) of the tile kernel for `tq` rows and
/// `blocks` (heads x batch) blocks per row group.
fn tile_rows(tq: usize, blocks: usize) -> Option<(usize, usize)> {
    if tq == 0 || blocks == 0 {
        return None;
    }
    let groups = TILE_SPREAD.div_ceil(blocks).clamp(1, tq);
    let rpb = tq.div_ceil(groups);
    Some((rpb, tq.div_ceil(rpb)))
}

/// Shared bytes of `limited_attention_tile` for `rpb` query rows per block
/// (K padded by a column, V, q and the scores, all f32), if they fit in a
/// block's default share and a head's columns in a block's threads.
fn tile_shared_bytes(rpb: usize, tk: usize, dh: usize) -> Option<u32> {
    if dh == 0 || dh > TILE_THREADS as usize {
        return None;
    }
    let floats = tk
        .checked_mul(2 * dh + 1)?
        .checked_add(rpb.checked_mul(dh + tk)?)?;
    let bytes = floats.checked_mul(4)?;
    (rpb > 0 && bytes <= MAX_SHARED).then_some(bytes as u32)
}

#[derive(Debug)]
struct SdpaGpu {
    f: CudaFunction,
    grid: Grid,
    /// 0 none, 1 bool, 2 float.
    mask_kind: i32,
    tq: i32,
    tk: i64,
    d: i32,
    dv: i32,
    inner: i64,
    /// Outer and inner batch strides of q, k, v (matrices) and the mask (elements).
    strides: [[i64; 2]; 4],
    /// Mask element strides along the query and key axes.
    smq: i64,
    smk: i64,
    scale: f32,
    empty: bool,
}

impl GpuOp for SdpaGpu {
    fn describe(&self) -> String {
        format!(
            "sdpa {}x{} keys, width {}/{}, {} batches{}",
            self.tq,
            self.tk,
            self.d,
            self.dv,
            self.grid.grid.1,
            ["", ", bool mask", ", float mask"][self.mask_kind as usize]
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        let n_in = if self.mask_kind > 0 { 4 } else { 3 };
        expect_io("sdpa", io, n_in, 1)?;
        if self.empty {
            return Ok(());
        }
        let mask = if self.mask_kind > 0 { io.ins[3].ptr } else { 0 };
        let [sq, sk, sv, sm] = self.strides;
        launch(
            cx,
            &self.f,
            self.grid,
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(io.ins[1].ptr),
                Arg::Ptr(io.ins[2].ptr),
                Arg::Ptr(mask),
                Arg::Ptr(io.outs[0].ptr),
                Arg::I32(self.tq),
                Arg::I64(self.tk),
                Arg::I32(self.d),
                Arg::I32(self.dv),
                Arg::I64(self.inner),
                Arg::I64(sq[0]),
                Arg::I64(sq[1]),
                Arg::I64(sk[0]),
                Arg::I64(sk[1]),
                Arg::I64(sv[0]),
                Arg::I64(sv[1]),
                Arg::I64(sm[0]),
                Arg::I64(sm[1]),
                Arg::I64(self.smq),
                Arg::I64(self.smk),
                Arg::F32(self.scale),
                Arg::I32(self.mask_kind),
            ],
        )
    }
}

/// Strides (in units of `unit` elements per index) with which an operand of
/// shape `shape` is read at every index of `full`, right-aligned; 0 where it
/// broadcasts. `None` when it does not broadcast to `full`.
fn broadcast_strides(shape: &[usize], full: &[usize]) -> Option<Vec<usize>> {
    if shape.len() > full.len() {
        return None;
    }
    let lead = full.len() - shape.len();
    let mut strides = vec![0; full.len()];
    let mut acc = 1usize;
    for (a, &s) in shape.iter().enumerate().rev() {
        let f = full[lead + a];
        if s == f && s != 1 {
            strides[lead + a] = acc;
        } else if s != 1 {
            return None;
        }
        acc = acc.checked_mul(s)?;
    }
    Some(strides)
}

/// Batch axes of `dims` with each operand's strides, without size-1 axes and
/// with adjacent axes merged where every operand allows it: (dims, strides
/// per operand), outermost first.
fn collapse(dims: &[usize], strides: &[Vec<usize>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut out_dims: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<usize>> = vec![Vec::new(); strides.len()];
    for a in (0..dims.len()).rev() {
        if dims[a] == 1 {
            continue;
        }
        // merge into the axis inside it (the last one pushed) when contiguous over it
        let merge = out_dims.last().is_some_and(|&inner| {
            strides
                .iter()
                .zip(&out_strides)
                .all(|(s, o)| s[a] == o.last().copied().unwrap_or(0) * inner)
        });
        if merge {
            if let Some(inner) = out_dims.last_mut() {
                *inner *= dims[a];
            }
        } else {
            out_dims.push(dims[a]);
            for (o, s) in out_strides.iter_mut().zip(strides) {
                o.push(s[a]);
            }
        }
    }
    out_dims.reverse();
    for o in &mut out_strides {
        o.reverse();
    }
    (out_dims, out_strides)
}

fn build_sdpa(op: &Attention, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let what = "sdpa";
    let n_in = cx.inputs.len();
    if !(3..=4).contains(&n_in) || cx.outputs.len() != 1 {
        return Err(GpuError::arity(
            what,
            "3 or 4 and 1",
            n_in,
            cx.outputs.len(),
        ));
    }
    let suffix = cx.suffix(0)?;
    let dt = cx.inputs[0].dtype;
    if cx.inputs[..3].iter().any(|f| f.dtype != dt) || cx.outputs[0].dtype != dt {
        return Err(GpuError::mixed_dtypes(what));
    }
    let mask_kind = match cx.inputs.get(3).map(|f| f.dtype) {
        None => 0,
        Some(DType::Bool) => 1,
        Some(m) if m == dt => 2,
        Some(m) => {
            return Err(GpuError::refused(
                what,
                format!("mask of {m} with {dt} inputs (bool or the inputs' dtype)"),
            ))
        }
    };
    let (q, k, v, out) = (cx.shape(0)?, cx.shape(1)?, cx.shape(2)?, cx.out_shape(0)?);
    let (rq, rk, rv, ro) = (q.len(), k.len(), v.len(), out.len());
    if rq < 2 || rk < 2 || rv < 2 || ro < 2 {
        return Err(GpuError::refused(what, "ranks below 2"));
    }
    let (tq, d, tk, dv) = (q[rq - 2], q[rq - 1], k[rk - 2], v[rv - 1]);
    if k[rk - 1] != d || v[rv - 2] != tk || out[ro - 2] != tq || out[ro - 1] != dv {
        return Err(GpuError::refused(
            what,
            format!("q {q:?}, k {k:?}, v {v:?}, out {out:?} do not fit"),
        ));
    }
    let batch = &out[..ro - 2];
    let bad = |name: &str, s: &[usize]| {
        GpuError::refused(what, format!("{name} {s:?} does not broadcast to {out:?}"))
    };
    let mut strides = Vec::new();
    for (name, s) in [("q", &q), ("k", &k), ("v", &v)] {
        strides.push(broadcast_strides(&s[..s.len() - 2], batch).ok_or_else(|| bad(name, s))?);
    }
    let (mut smq, mut smk) = (0, 0);
    if mask_kind > 0 {
        let m = cx.shape(3)?;
        let mut full = batch.to_vec();
        full.extend([tq, tk]);
        let ms = broadcast_strides(&m, &full).ok_or_else(|| bad("mask", &m))?;
        smq = ms[ms.len() - 2];
        smk = ms[ms.len() - 1];
        strides.push(ms[..ms.len() - 2].to_vec());
    } else {
        strides.push(vec![0; batch.len()]);
    }
    let (dims, strides) = collapse(batch, &strides);
    if dims.len() > 2 {
        return Err(GpuError::refused(
            what,
            format!("batch axes {batch:?} broadcast in a way that does not collapse to two"),
        ));
    }
    let pad = 2 - dims.len();
    let inner = dims.last().copied().unwrap_or(1);
    let n_batch: usize = dims.iter().product();
    if n_batch > MAX_GRID_Y {
        return Err(GpuError::refused(
            what,
            format!("{n_batch} batch matrices (at most {MAX_GRID_Y})"),
        ));
    }
    let mut st = [[0i64; 2]; 4];
    for (o, s) in st.iter_mut().zip(&strides) {
        for (a, &v) in s.iter().enumerate() {
            o[pad + a] = long("stride", v)?;
        }
    }
    let scale = op.scale.unwrap_or(1.0 / (d as f32).sqrt());
    if !scale.is_finite() {
        return Err(GpuError::refused(
            what,
            format!("scale {scale} is not finite"),
        ));
    }
    if mask_kind == 0 && dims.len() <= 1 {
        // one stride per operand: long rows go to the GEMM form
        let per = |o: usize| strides[o].last().copied().unwrap_or(0);
        let g = Geometry {
            dtype: dt,
            batch: n_batch,
            tq,
            tk,
            d,
            dv,
            stride_q: per(0) * tq * d,
            stride_k: per(1) * tk * d,
            stride_v: per(2) * tk * dv,
            scale,
        };
        let softmax = cx
            .lib
            .function("attention", &format!("softmax_rows_{suffix}"))?;
        if let Some(op) = SdpaGemm::new(g, softmax) {
            return Ok(Box::new(op));
        }
    }
    let shared = shared_bytes(what, d, tk)?;
    let tq_i = int("query rows", tq)?;
    Ok(Box::new(SdpaGpu {
        f: cx.lib.function("attention", &format!("sdpa_{suffix}"))?,
        grid: Grid {
            grid: ((tq_i as u32).max(1), (n_batch as u32).max(1), 1),
            block: (THREADS, 1, 1),
            shared_bytes: shared,
        },
        mask_kind,
        tq: tq_i,
        tk: long("keys", tk)?,
        d: int("width", d)?,
        dv: int("value width", dv)?,
        inner: long("batch", inner)?,
        strides: st,
        smq: long("stride", smq)?,
        smk: long("stride", smk)?,
        scale,
        empty: out.iter().product::<usize>() == 0,
    }))
}

#[cfg(test)]
mod tests {
    use super::{broadcast_strides, collapse, tile_rows, tile_shared_bytes};

    #[test]
    fn strides_broadcast_right_aligned() {
        assert_eq!(broadcast_strides(&[2, 3], &[2, 3]), Some(vec![3, 1]));
        assert_eq!(broadcast_strides(&[3], &[2, 3]), Some(vec![0, 1]));
        assert_eq!(broadcast_strides(&[1, 3], &[2, 3]), Some(vec![0, 1]));
        assert_eq!(broadcast_strides(&[2, 1], &[2, 3]), Some(vec![1, 0]));
        assert_eq!(broadcast_strides(&[], &[2, 3]), Some(vec![0, 0]));
        assert_eq!(broadcast_strides(&[4], &[2, 3]), None);
        assert_eq!(broadcast_strides(&[1, 2, 3], &[2, 3]), None);
    }

    #[test]
    fn batch_axes_collapse() {
        // q, k, v [2, 3, ..] and a mask [2, 1, ..]: two axes stay
        let s = vec![vec![3, 1], vec![3, 1], vec![3, 1], vec![1, 0]];
        assert_eq!(collapse(&[2, 3], &s).0, vec![2, 3]);
        // all full: one axis
        let s = vec![vec![3, 1]; 4];
        assert_eq!(collapse(&[2, 3], &s), (vec![6], vec![vec![1]; 4]));
        // q and k broadcast along the outer axis only: no merge
        let s = vec![vec![0, 1], vec![0, 1], vec![0, 0], vec![0, 0]];
        assert_eq!(collapse(&[2, 3], &s).0, vec![2, 3]);
        // size-1 axes drop
        let s = vec![vec![3, 3, 1]; 4];
        assert_eq!(collapse(&[2, 1, 3], &s), (vec![6], vec![vec![1]; 4]));
        assert_eq!(
            collapse(&[], &[vec![], vec![]]),
            (vec![], vec![vec![], vec![]])
        );
    }

    #[test]
    fn tile_taken_when_a_heads_tile_fits_one_block() {
        // the shipped model's step: 8 rows, 64 + 8 keys, heads of 64
        assert_eq!(
            tile_shared_bytes(8, 72, 64),
            Some((72 * 129 + 8 * (64 + 72)) * 4)
        );
        assert_eq!(tile_shared_bytes(8, 408, 64), None, "too many keys");
        assert_eq!(
            tile_shared_bytes(1, 2, 2000),
            None,
            "more columns than threads"
        );
        assert_eq!(tile_shared_bytes(0, 8, 64), None, "no rows");
        assert_eq!(tile_shared_bytes(usize::MAX, 8, 64), None, "overflow");
    }

    #[test]
    fn tile_rows_spread_a_stream_and_not_a_batch() {
        // one stream, 4 heads: a row per block, 32 blocks
        assert_eq!(tile_rows(8, 4), Some((1, 8)));
        // 32 streams of 4 heads fill the GPU already: one group
        assert_eq!(tile_rows(8, 128), Some((8, 1)));
        // 8 streams: 32 blocks per group, 4 groups of 2 rows
        assert_eq!(tile_rows(8, 32), Some((2, 4)));
        // uneven: 5 rows over 3 groups of 2 (the last holds 1)
        assert_eq!(tile_rows(5, 40), Some((2, 3)));
        assert_eq!(tile_rows(0, 4), None);
    }
}
