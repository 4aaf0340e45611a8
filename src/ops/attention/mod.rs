//! Scaled dot-product attention with broadcast batch axes and an optional mask.

use std::borrow::Cow;

use half::{bf16, f16};

use super::broadcast::{broadcast_dims, broadcast_shapes, broadcast_strides, MAX_RANK};
use super::checks::{float, input_count_range, rank_at_least, same_dtype};
use super::{
    contig, outputs_len, DType, Dim, Op, OpError, OpResult, Scratch, StorageElement, Tensor,
    TypedFact,
};
use crate::op_common;

/// `softmax(q k^T * scale + mask) v`.
///
/// Inputs `q [..., Tq, d]`, `k [..., Tk, d]`, `v [..., Tk, dv]` (one float
/// dtype), and optionally a mask that broadcasts to `[..., Tq, Tk]`: bool
/// (`true` = may attend) or float (added to the scores). The leading axes of
/// `q`, `k` and `v` broadcast against each other. Output `[..., Tq, dv]` in
/// `q`'s dtype (f16/bf16 computed in f32).
///
/// A query row whose keys are all masked out (all `false`, or all scores
/// `-inf`), or that has no key at all (`Tk = 0`), gives zeros rather than NaN.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attention {
    /// Score scale; `None` means `1/sqrt(d)`.
    pub scale: Option<f32>,
}

impl Attention {
    fn check_scale(&self) -> OpResult<()> {
        match self.scale {
            Some(s) if !s.is_finite() => Err(OpError::Param(format!(
                "attention scale must be finite, got {s}"
            ))),
            _ => Ok(()),
        }
    }
}

fn empty_err(what: &str, input: usize) -> OpError {
    OpError::Empty(format!("attention {what} of input {input} has size 0"))
}

impl Op for Attention {
    op_common!("Attention");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        self.check_scale()?;
        input_count_range(inputs, 3, 4)?;
        let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
        for (i, f) in [q, k, v].iter().enumerate() {
            rank_at_least(f, i, 2)?;
            float(f, i)?;
            same_dtype(q, f, i)?;
        }
        let (rq, rk, rv) = (q.rank(), k.rank(), v.rank());
        let (tq, d, tk, dv) = (
            q.shape[rq - 2],
            q.shape[rq - 1],
            k.shape[rk - 2],
            v.shape[rv - 1],
        );
        if k.shape[rk - 1] != d {
            return Err(OpError::Shape(format!("q {q} and k {k} differ in width")));
        }
        if v.shape[rv - 2] != tk {
            return Err(OpError::Shape(format!("k {k} and v {v} differ in length")));
        }
        if d == Dim::n(0) {
            return Err(empty_err("width", 0));
        }
        if dv == Dim::n(0) {
            return Err(empty_err("width", 2));
        }
        let batch = broadcast_dims(&q.shape[..rq - 2], &k.shape[..rk - 2])?;
        let batch = broadcast_dims(&batch, &v.shape[..rv - 2])?;
        if batch.len() + 2 > MAX_RANK {
            return Err(OpError::Shape(format!("attention rank above {MAX_RANK}")));
        }
        if let Some(m) = inputs.get(3) {
            if m.dtype != DType::Bool && !m.dtype.is_float() {
                return Err(OpError::DType {
                    input: 3,
                    expected: "bool or a float type".into(),
                    got: m.dtype,
                });
            }
            let mut scores = batch.clone();
            scores.push(tq);
            scores.push(tk);
            if m.rank() > scores.len()
                || broadcast_dims(&scores, &m.shape).ok().as_ref() != Some(&scores)
            {
                return Err(OpError::Shape(format!(
                    "mask {m} does not broadcast to the scores {}",
                    TypedFact::dt_shape(m.dtype, &scores)
                )));
            }
        }
        let mut shape = batch;
        shape.push(tq);
        shape.push(dv);
        Ok(vec![TypedFact::dt_shape(q.dtype, &shape)])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        self.check_scale()?;
        input_count_range(inputs, 3, 4)?;
        let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
        let dt = q.dtype();
        for (i, t) in [q, k, v].iter().enumerate() {
            if t.rank() < 2 {
                return Err(OpError::Rank {
                    input: i,
                    expected: ">= 2".into(),
                    got: t.rank(),
                });
            }
            if !t.dtype().is_float() || t.dtype() != dt {
                return Err(OpError::DType {
                    input: i,
                    expected: format!("a float type, as q ({dt})"),
                    got: t.dtype(),
                });
            }
            if t.rank() > MAX_RANK {
                return Err(OpError::Shape(format!("attention rank above {MAX_RANK}")));
            }
        }
        let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
        let (rq, rk, rv) = (qs.len(), ks.len(), vs.len());
        let (tq, d, tk, dv) = (qs[rq - 2], qs[rq - 1], ks[rk - 2], vs[rv - 1]);
        if ks[rk - 1] != d || vs[rv - 2] != tk {
            return Err(OpError::Shape(format!(
                "q {qs:?}, k {ks:?}, v {vs:?} do not fit [.., Tq, d], [.., Tk, d], [.., Tk, dv]"
            )));
        }
        if d == 0 {
            return Err(empty_err("width", 0));
        }
        if dv == 0 {
            return Err(empty_err("width", 2));
        }
        let mut b1 = [0usize; MAX_RANK];
        let r1 = broadcast_shapes(&qs[..rq - 2], &ks[..rk - 2], &mut b1)?;
        let mut b2 = [0usize; MAX_RANK];
        let nb = broadcast_shapes(&b1[..r1], &vs[..rv - 2], &mut b2)?;
        if nb + 2 > MAX_RANK {
            return Err(OpError::Shape(format!("attention rank above {MAX_RANK}")));
        }
        // full score shape [batch.., Tq, Tk], then the output shape [batch.., Tq, dv]
        let mut full = b2;
        full[nb] = tq;
        full[nb + 1] = tk;
        let full = &full[..nb + 2];
        let mask = inputs.get(3).copied();
        if let Some(m) = mask {
            if m.dtype() != DType::Bool && !m.dtype().is_float() {
                return Err(OpError::DType {
                    input: 3,
                    expected: "bool or a float type".into(),
                    got: m.dtype(),
                });
            }
            let mut mb = [0usize; MAX_RANK];
            let ok = m.rank() <= full.len()
                && broadcast_shapes(full, m.shape(), &mut mb).is_ok_and(|r| &mb[..r] == full);
            if !ok {
                return Err(OpError::Shape(format!(
                    "mask {:?} does not broadcast to the scores {full:?}",
                    m.shape()
                )));
            }
        }
        let mut oshape = b2;
        oshape[nb] = tq;
        oshape[nb + 1] = dv;
        let oshape = &oshape[..nb + 2];
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        out.ensure(dt, oshape);
        if out.is_empty() {
            return Ok(());
        }
        let geo = Geometry {
            batch: &b2[..nb],
            sq: broadcast_strides(&qs[..rq - 2], &b2[..nb]),
            sk: broadcast_strides(&ks[..rk - 2], &b2[..nb]),
            sv: broadcast_strides(&vs[..rv - 2], &b2[..nb]),
            sm: mask
                .map(|m| broadcast_strides(m.shape(), full))
                .unwrap_or([0; 8]),
            tq,
            tk,
            d,
            dv,
            scale: self.scale.unwrap_or(1.0 / (d as f32).sqrt()),
        };
        // with no key, only zeros come out: k, v and mask are never read (and
        // empty views may not read as contiguous)
        let (mask, k, v) = if tk == 0 {
            (None, None, None)
        } else {
            (mask, Some(k), Some(v))
        };
        let (q, k, v) = (f32_of(q), k.map(f32_of), v.map(f32_of));
        let mask_t = mask.map(|m| {
            if m.dtype() == DType::Bool {
                contig(m)
            } else {
                f32_of(m)
            }
        });
        let mask = match &mask_t {
            None => Mask::None,
            Some(m) if m.dtype() == DType::Bool => Mask::Bool(m.as_slice()?),
            Some(m) => Mask::Float(m.as_slice()?),
        };
        let q = q.as_slice()?;
        let k = k.as_ref().map_or(Ok(&[][..]), |t| t.as_slice())?;
        let v = v.as_ref().map_or(Ok(&[][..]), |t| t.as_slice())?;
        if geo.blocked() {
            let bufs = geo.block_buffers(scratch);
            return match dt {
                DType::F32 => geo.run_blocked::<f32>(q, k, v, mask, out, bufs),
                DType::F16 => geo.run_blocked::<f16>(q, k, v, mask, out, bufs),
                DType::BF16 => geo.run_blocked::<bf16>(q, k, v, mask, out, bufs),
                dt => Err(OpError::DType {
                    input: 0,
                    expected: "a float type".into(),
                    got: dt,
                }),
            };
        }
        let (scores, acc) = scratch.two(tk, dv);
        match dt {
            DType::F32 => geo.run::<f32>(q, k, v, mask, out, scores, acc),
            DType::F16 => geo.run::<f16>(q, k, v, mask, out, scores, acc),
            DType::BF16 => geo.run::<bf16>(q, k, v, mask, out, scores, acc),
            dt => Err(OpError::DType {
                input: 0,
                expected: "a float type".into(),
                got: dt,
            }),
        }
    }

    fn info(&self) -> String {
        match self.scale {
            Some(s) => format!("scale {s}"),
            None => "scale 1/sqrt(d)".into(),
        }
    }
}

fn f32_of(t: &Tensor) -> Cow<'_, Tensor> {
    if t.dtype() == DType::F32 {
        contig(t)
    } else {
        Cow::Owned(t.cast(DType::F32))
    }
}

#[derive(Clone, Copy)]
pub(super) enum Mask<'a> {
    None,
    Bool(&'a [bool]),
    Float(&'a [f32]),
}

/// Sizes and broadcast strides: `sq`, `sk`, `sv` count whole matrices per
/// batch axis, `sm` counts mask elements over `[batch.., Tq, Tk]`.
pub(super) struct Geometry<'a> {
    batch: &'a [usize],
    sq: [usize; 8],
    sk: [usize; 8],
    sv: [usize; 8],
    sm: [usize; 8],
    tq: usize,
    tk: usize,
    d: usize,
    dv: usize,
    scale: f32,
}

impl Geometry<'_> {
    #[allow(clippy::too_many_arguments)]
    fn run<T: StorageElement>(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        mask: Mask<'_>,
        out: &mut Tensor,
        scores: &mut [f32],
        acc: &mut [f32],
    ) -> OpResult<()> {
        let (tq, tk, d, dv, nb) = (self.tq, self.tk, self.d, self.dv, self.batch.len());
        let o = out.as_slice_mut::<T>()?;
        for (b, (bq, bk, bv, bm)) in self.offsets().enumerate() {
            for i in 0..tq {
                let qi = &q[(bq * tq + i) * d..(bq * tq + i + 1) * d];
                let mrow = bm + i * self.sm[nb];
                let mut max = f32::NEG_INFINITY;
                for (j, s) in scores.iter_mut().enumerate() {
                    let m = mrow + j * self.sm[nb + 1];
                    let add = blocked::mask_add(mask, m);
                    *s = if add == f32::NEG_INFINITY {
                        add
                    } else {
                        let kj = &k[(bk * tk + j) * d..(bk * tk + j + 1) * d];
                        qi.iter().zip(kj).map(|(a, c)| a * c).sum::<f32>() * self.scale + add
                    };
                    max = max.max(*s);
                }
                acc.fill(0.0);
                // no key left to attend to: zeros, not 0/0
                if max != f32::NEG_INFINITY {
                    let mut sum = 0.0;
                    for (j, s) in scores.iter().enumerate() {
                        let w = (s - max).exp();
                        sum += w;
                        let vj = &v[(bv * tk + j) * dv..(bv * tk + j + 1) * dv];
                        for (a, x) in acc.iter_mut().zip(vj) {
                            *a += w * x;
                        }
                    }
                    let inv = 1.0 / sum;
                    for a in acc.iter_mut() {
                        *a *= inv;
                    }
                }
                let orow = &mut o[(b * tq + i) * dv..(b * tq + i + 1) * dv];
                for (r, &a) in orow.iter_mut().zip(acc.iter()) {
                    *r = T::from_f32(a);
                }
            }
        }
        Ok(())
    }
}

mod blocked;

#[cfg(test)]
mod tests;
