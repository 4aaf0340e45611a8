//! ChunkedAttention and its pulsed form on the GPU (`chunked_attention` in
//! `kernels/attention.cu`): one block per (query row, head, sequence) with
//! the row's window of scores in shared memory, so a streamed Whisper
//! encoder's chunk step runs, and is captured, on the device. Its state
//! (the step counter and the stream's end) is the runner's: the keys'
//! Delays stay separate nodes. `copies_attention.rs` launches its kernel
//! through the same form.

use cudarc::driver::CudaFunction;

use super::attention::{self_attention_io, shared_bytes, SelfAttentionIo, THREADS};
use crate::gpu::op::{expect_io, int, launch, long, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::chunked_attention::ChunkedAttention;
use crate::ops::Dim;
use crate::pulse::PulsedChunkedAttention;

pub(super) fn register(r: &mut Builders) {
    r.add::<PulsedChunkedAttention>(|p, cx| build(&p.attn, Some(p), cx));
    r.add::<ChunkedAttention>(|a, cx| build(a, None, cx));
}

/// A kernel with `chunked_attention`'s arguments: that one, or
/// `copies_attention` (whose `attn.right` is its copies).
#[derive(Debug)]
pub(super) struct ChunkedGpu {
    pub(super) f: CudaFunction,
    /// The kernel's name, for `describe`.
    pub(super) kernel: &'static str,
    pub(super) grid: Grid,
    pub(super) attn: ChunkedAttention,
    pub(super) tk: i64,
    pub(super) width: i32,
    pub(super) dh: i32,
    pub(super) scale: f32,
    /// `(pulse, delay, overlap, lag)` of the pulsed form.
    pub(super) pulsed: Option<[i64; 4]>,
    /// The stream's end ([`super::pulse::end_args`]; none in the whole form).
    pub(super) end: [Arg; 5],
}

/// The `pulsed` and `end` of a [`ChunkedGpu`] from a pulsed form's
/// `(pulse, delay, overlap, lag)` and stream length.
pub(super) fn stream_args(
    what: &str,
    pulsed: Option<([usize; 4], Dim)>,
) -> Result<(Option<[i64; 4]>, [Arg; 5]), GpuError> {
    let end = super::pulse::end_args(what, pulsed.map(|(_, len)| len))?;
    let Some(([pulse, delay, overlap, lag], _)) = pulsed else {
        return Ok((None, end));
    };
    let args = [
        long("pulse", pulse)?,
        long("delay", delay)?,
        long("overlap", overlap)?,
        long("lag", lag)?,
    ];
    Ok((Some(args), end))
}

impl GpuOp for ChunkedGpu {
    fn describe(&self) -> String {
        format!(
            "{}{} {}x{} keys, {} heads of {}, chunk {} left {} right {}",
            if self.pulsed.is_some() { "pulsed " } else { "" },
            self.kernel,
            self.grid.grid.0,
            self.tk,
            self.attn.heads,
            self.dh,
            self.attn.chunk,
            self.attn.left,
            self.attn.right
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io(self.kernel, io, 3, 1)?;
        if self.grid.grid.0 == 0 || self.grid.grid.2 == 0 {
            return Ok(());
        }
        let [q, k, v, out] = [io.ins[0].ptr, io.ins[1].ptr, io.ins[2].ptr, io.outs[0].ptr];
        // a null step pointer selects the whole form in the kernel
        let (step, [pulse, delay, overlap, lag]) = match self.pulsed {
            Some(p) => (cx.step, p),
            None => (0, [0; 4]),
        };
        let [has_end, ea, eb, ed, ec] = self.end;
        let frames = |v: usize| Arg::I64(v as i64);
        launch(
            cx,
            &self.f,
            self.grid,
            &[
                Arg::Ptr(q),
                Arg::Ptr(k),
                Arg::Ptr(v),
                Arg::Ptr(out),
                Arg::Ptr(step),
                Arg::Ptr(cx.stream_len),
                Arg::I64(self.tk),
                Arg::I32(self.width),
                Arg::I32(self.dh),
                frames(self.attn.chunk),
                frames(self.attn.left),
                frames(self.attn.right),
                Arg::F32(self.scale),
                Arg::I64(pulse),
                Arg::I64(delay),
                Arg::I64(overlap),
                Arg::I64(lag),
                has_end,
                ea,
                eb,
                ed,
                ec,
            ],
        )
    }
}

fn build(
    op: &ChunkedAttention,
    pulsed: Option<&PulsedChunkedAttention>,
    cx: &BuildCx,
) -> Result<Box<dyn GpuOp>, GpuError> {
    let what = "chunked attention";
    if op.chunk == 0 {
        return Err(GpuError::refused(what, "a chunk of 0 frames"));
    }
    let SelfAttentionIo {
        suffix,
        batch,
        tq,
        tk,
        width,
        dh,
        ..
    } = self_attention_io(what, op.heads, cx)?;
    let rows = match pulsed {
        Some(p) => (p.pulse, p.pulse.saturating_add(p.overlap())),
        None => (tk, tk),
    };
    if (tq, tk) != rows {
        return Err(GpuError::refused(
            what,
            format!(
                "expected {} query rows and {} key rows, got {tq} and {tk}",
                rows.0, rows.1
            ),
        ));
    }
    let keys = op
        .chunk
        .saturating_add(op.left)
        .saturating_add(op.right)
        .min(tk);
    let grid = Grid {
        grid: (int("query rows", tq)? as u32, op.heads as u32, batch as u32),
        block: (THREADS, 1, 1),
        shared_bytes: shared_bytes(what, dh, keys)?,
    };
    let (pulsed, end) = stream_args(
        what,
        pulsed.map(|p| ([p.pulse, p.delay, p.overlap(), p.lag], p.len)),
    )?;
    Ok(Box::new(ChunkedGpu {
        f: cx
            .lib
            .function("attention", &format!("chunked_attention_{suffix}"))?,
        kernel: "chunked_attention",
        grid,
        attn: op.clone(),
        tk: long("keys", tk)?,
        width: int("width", width)?,
        dh: int("head width", dh)?,
        scale: 1.0 / (dh as f32).sqrt(),
        pulsed,
        end,
    }))
}
