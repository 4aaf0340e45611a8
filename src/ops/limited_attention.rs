//! Multi-head self-attention over a limited left context, with no look-ahead:
//! the attention of streaming encoders, written so that its whole-utterance
//! and pulsed forms share one kernel.

use super::checks::{float, input_count, rank, same_dtype};
use super::{contig, outputs_len, DType, Op, OpError, OpResult, Scratch, Tensor, TypedFact};
use crate::op_common;

/// Query frame `i` attends to key frames `i - left_context ..= i` (and never
/// before frame 0). Inputs `q, k, v` are time-major `[T, heads * head_dim]`
/// (heads side by side, as a Linear produces them), or `[B, T, heads *
/// head_dim]` for a batch of independent sequences; output shaped like `q`.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitedAttention {
    pub heads: usize,
    pub left_context: usize,
    /// Score scale; `None` means `1/sqrt(head_dim)`.
    pub scale: Option<f32>,
}

impl LimitedAttention {
    /// Checks the inputs; gives the width and the time axis (0, or 1 after
    /// a batch axis).
    pub(crate) fn check(&self, inputs: &[&TypedFact]) -> OpResult<(usize, usize)> {
        check_qkv(self.heads, inputs)
    }
}

/// Checks self-attention inputs `q, k, v` for `heads` heads; gives the width
/// and the time axis (0, or 1 after a batch axis).
pub(crate) fn check_qkv(heads: usize, inputs: &[&TypedFact]) -> OpResult<(usize, usize)> {
    input_count(inputs, 3)?;
    let r = inputs[0].rank();
    if r != 2 && r != 3 {
        return Err(OpError::Rank {
            input: 0,
            expected: "2 or 3".into(),
            got: r,
        });
    }
    for (i, f) in inputs.iter().enumerate() {
        rank(f, i, r)?;
        float(f, i)?;
        same_dtype(inputs[0], f, i)?;
    }
    let t = r - 2;
    if r == 3
        && (inputs[1].shape[0] != inputs[0].shape[0] || inputs[2].shape[0] != inputs[0].shape[0])
    {
        return Err(OpError::Shape(format!(
            "q, k, v batches differ: {} {} {}",
            inputs[0], inputs[1], inputs[2]
        )));
    }
    let d = inputs[0].shape[t + 1];
    if inputs[1].shape[t + 1] != d || inputs[2].shape[t + 1] != d {
        return Err(OpError::Shape(format!(
            "q, k, v widths differ: {} {} {}",
            inputs[0], inputs[1], inputs[2]
        )));
    }
    if inputs[1].shape[t] != inputs[2].shape[t] {
        return Err(OpError::Shape(format!(
            "k and v lengths differ: {} vs {}",
            inputs[1], inputs[2]
        )));
    }
    let d = super::checks::concrete(&d, "model width")?;
    if heads == 0 || d % heads != 0 {
        return Err(OpError::Param(format!(
            "width {d} is not a multiple of {} heads",
            heads
        )));
    }
    Ok((d, t))
}

impl Op for LimitedAttention {
    op_common!("LimitedAttention");

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
        let lc = self.left_context as i64;
        eval_windowed(
            self,
            self.heads,
            self.scale,
            inputs,
            outputs,
            scratch,
            |i| ((i - lc).max(0), i),
        )
    }

    fn info(&self) -> String {
        format!("heads {} left_context {}", self.heads, self.left_context)
    }
}

/// The output facts of a self-attention whose inputs `check_qkv` passed:
/// `q`'s, once `q` and `k` are of one length on the time axis `t`.
pub(crate) fn self_attention_facts(inputs: &[&TypedFact], t: usize) -> OpResult<Vec<TypedFact>> {
    if inputs[0].shape[t] != inputs[1].shape[t] {
        return Err(OpError::Shape(format!(
            "self-attention needs q and k of one length: {} vs {}",
            inputs[0], inputs[1]
        )));
    }
    Ok(vec![inputs[0].clone()])
}

/// Whole-utterance evaluation of a self-attention `op` whose query frame
/// `i` sees the key range `window(i)` (clipped to the keys there are).
pub(crate) fn eval_windowed(
    op: &dyn Op,
    heads: usize,
    scale: Option<f32>,
    inputs: &[&Tensor],
    outputs: &mut Vec<Tensor>,
    scratch: &mut Scratch,
    window: impl Fn(i64) -> (i64, i64),
) -> OpResult<()> {
    let facts: Vec<TypedFact> = inputs.iter().map(|t| TypedFact::of(t)).collect();
    let refs: Vec<&TypedFact> = facts.iter().collect();
    op.output_facts(&refs)?;
    let t = inputs[0].shape()[inputs[0].rank() - 2];
    attend(
        heads,
        scale,
        inputs,
        outputs,
        scratch,
        |i| window(i as i64),
        t,
    )
}

/// Runs attention for `tq` queries (per batch entry, for rank-3 inputs).
/// `window(i)` gives, for query row `i`, the inclusive range of key rows it
/// sees (empty when `lo > hi`: output zeros).
pub(crate) fn attend(
    heads: usize,
    scale: Option<f32>,
    inputs: &[&Tensor],
    outputs: &mut Vec<Tensor>,
    scratch: &mut Scratch,
    window: impl Fn(usize) -> (i64, i64),
    tq: usize,
) -> OpResult<()> {
    let dt = inputs[0].dtype();
    if dt != DType::F32 {
        let c: Vec<Tensor> = inputs.iter().map(|t| t.cast(DType::F32)).collect();
        let refs: Vec<&Tensor> = c.iter().collect();
        let mut tmp = Vec::new();
        attend(heads, scale, &refs, &mut tmp, scratch, window, tq)?;
        outputs_len(outputs, 1);
        outputs[0] = tmp[0].cast(dt);
        return Ok(());
    }
    let r = inputs[0].rank();
    let batch = if r == 3 { inputs[0].shape()[0] } else { 1 };
    let d = inputs[0].shape()[r - 1];
    let tk = inputs[1].shape()[r - 2];
    let dh = d / heads;
    let scale = scale.unwrap_or(1.0 / (dh as f32).sqrt());
    let (q, k, v) = (contig(inputs[0]), contig(inputs[1]), contig(inputs[2]));
    let (q, k, v) = (
        q.as_slice::<f32>()?,
        k.as_slice::<f32>()?,
        v.as_slice::<f32>()?,
    );
    outputs_len(outputs, 1);
    let shape: &[usize] = if r == 3 { &[batch, tq, d] } else { &[tq, d] };
    outputs[0].ensure(DType::F32, shape);
    let out_all = outputs[0].as_slice_mut::<f32>()?;
    out_all.fill(0.0);
    let scores = scratch.one(tk.max(1));
    for bi in 0..batch {
        let q = &q[bi * tq * d..(bi + 1) * tq * d];
        let k = &k[bi * tk * d..(bi + 1) * tk * d];
        let v = &v[bi * tk * d..(bi + 1) * tk * d];
        let out = &mut out_all[bi * tq * d..(bi + 1) * tq * d];
        attend_one(heads, scale, (q, k, v), out, scores, &window, tq, tk, d, dh);
    }
    Ok(())
}

/// One sequence of [`attend`]: `q [tq, d]`, `k, v [tk, d]` into `out [tq, d]`.
#[allow(clippy::too_many_arguments)]
fn attend_one(
    heads: usize,
    scale: f32,
    (q, k, v): (&[f32], &[f32], &[f32]),
    out: &mut [f32],
    scores: &mut [f32],
    window: &impl Fn(usize) -> (i64, i64),
    tq: usize,
    tk: usize,
    d: usize,
    dh: usize,
) {
    for i in 0..tq {
        let (lo, hi) = window(i);
        let lo = lo.max(0) as usize;
        if hi < lo as i64 || hi < 0 {
            continue;
        }
        let hi = (hi as usize).min(tk.saturating_sub(1));
        if tk == 0 || hi < lo {
            continue;
        }
        for h in 0..heads {
            let qi = &q[i * d + h * dh..i * d + (h + 1) * dh];
            let mut max = f32::NEG_INFINITY;
            for j in lo..=hi {
                let kj = &k[j * d + h * dh..j * d + (h + 1) * dh];
                let s = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * scale;
                scores[j] = s;
                max = max.max(s);
            }
            let mut sum = 0.0;
            for s in &mut scores[lo..=hi] {
                *s = (*s - max).exp();
                sum += *s;
            }
            let o = &mut out[i * d + h * dh..i * d + (h + 1) * dh];
            for j in lo..=hi {
                let w = scores[j] / sum;
                let vj = &v[j * d + h * dh..j * d + (h + 1) * dh];
                for (a, b) in o.iter_mut().zip(vj) {
                    *a += w * b;
                }
            }
        }
    }
}
