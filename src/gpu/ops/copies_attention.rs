//! CopiesAttention and its pulsed form on the GPU (`copies_attention` in
//! `kernels/attention.cu`): a chunked attention's kernel over rows of a
//! frame and its copy slot, with the chunk's copies as a second span of
//! keys. One block per (query row and slot, head, sequence); the state (the
//! step counter and the stream's end) is the runner's, as for
//! `chunked_attention.rs`, whose form launches it.

use super::attention::{self_attention_io, shared_bytes, SelfAttentionIo, THREADS};
use super::chunked_attention::{stream_args, ChunkedGpu};
use crate::gpu::op::{int, long, BuildCx, GpuOp, Grid};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::chunked_attention::ChunkedAttention;
use crate::ops::copies_attention::CopiesAttention;
use crate::ops::TypedFact;
use crate::pulse::PulsedCopiesAttention;

pub(super) fn register(r: &mut Builders) {
    r.add::<PulsedCopiesAttention>(|p, cx| build(&p.attn, Some(p), cx));
    r.add::<CopiesAttention>(|a, cx| build(a, None, cx));
}

/// `facts` without their slot axis (second from the end, of 2).
fn without_slot(what: &str, facts: &[TypedFact]) -> Result<Vec<TypedFact>, GpuError> {
    facts
        .iter()
        .map(|f| {
            let r = f.rank();
            if r < 3 || f.shape[r - 2].as_const() != Some(2) {
                return Err(GpuError::refused(
                    what,
                    format!("{f} has no slot axis of 2"),
                ));
            }
            let mut g = f.clone();
            g.shape.remove(r - 2);
            Ok(g)
        })
        .collect()
}

fn build(
    op: &CopiesAttention,
    pulsed: Option<&PulsedCopiesAttention>,
    cx: &BuildCx,
) -> Result<Box<dyn GpuOp>, GpuError> {
    let what = "copies attention";
    if op.chunk == 0 {
        return Err(GpuError::refused(what, "a chunk of 0 frames"));
    }
    // the slot axis taken out, the inputs are a plain self-attention's
    let (inputs, outputs) = (
        without_slot(what, cx.inputs)?,
        without_slot(what, cx.outputs)?,
    );
    let flat = BuildCx {
        inputs: &inputs,
        outputs: &outputs,
        ..*cx
    };
    let SelfAttentionIo {
        suffix,
        batch,
        tq,
        tk,
        width,
        dh,
        ..
    } = self_attention_io(what, op.heads, &flat)?;
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
    let keys = (op.chunk.saturating_add(op.left).min(tk)).saturating_add(op.right.min(tk));
    let grid = Grid {
        grid: (
            int("query rows", tq.saturating_mul(2))? as u32,
            op.heads as u32,
            batch as u32,
        ),
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
            .function("attention", &format!("copies_attention_{suffix}"))?,
        kernel: "copies_attention",
        grid,
        attn: ChunkedAttention {
            right: op.right,
            ..op.frames()
        },
        tk: long("keys", tk)?,
        width: int("width", width)?,
        dh: int("head width", dh)?,
        scale: 1.0 / (dh as f32).sqrt(),
        pulsed,
        end,
    }))
}
