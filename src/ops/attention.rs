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
enum Mask<'a> {
    None,
    Bool(&'a [bool]),
    Float(&'a [f32]),
}

/// Sizes and broadcast strides: `sq`, `sk`, `sv` count whole matrices per
/// batch axis, `sm` counts mask elements over `[batch.., Tq, Tk]`.
struct Geometry<'a> {
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
        let n_batch: usize = self.batch.iter().product();
        let mut idx = [0usize; MAX_RANK];
        let (mut bq, mut bk, mut bv, mut bm) = (0usize, 0usize, 0usize, 0usize);
        for b in 0..n_batch {
            for i in 0..tq {
                let qi = &q[(bq * tq + i) * d..(bq * tq + i + 1) * d];
                let mrow = bm + i * self.sm[nb];
                let mut max = f32::NEG_INFINITY;
                for (j, s) in scores.iter_mut().enumerate() {
                    let m = mrow + j * self.sm[nb + 1];
                    let add = match mask {
                        Mask::None => 0.0,
                        Mask::Bool(mv) if mv[m] => 0.0,
                        Mask::Bool(_) => f32::NEG_INFINITY,
                        Mask::Float(mv) => mv[m],
                    };
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
            // next batch index, moving every operand's offset along
            for ax in (0..nb).rev() {
                idx[ax] += 1;
                bq += self.sq[ax];
                bk += self.sk[ax];
                bv += self.sv[ax];
                bm += self.sm[ax];
                if idx[ax] < self.batch[ax] {
                    break;
                }
                bq -= self.sq[ax] * self.batch[ax];
                bk -= self.sk[ax] * self.batch[ax];
                bv -= self.sv[ax] * self.batch[ax];
                bm -= self.sm[ax] * self.batch[ax];
                idx[ax] = 0;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::eval_op;
    use proptest::prelude::*;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn below(&mut self, n: usize) -> usize {
            self.next() as usize % n
        }
        fn unit(&mut self) -> f32 {
            (self.next() % (1 << 24)) as f32 / (1 << 24) as f32 * 2.0 - 1.0
        }
        fn tensor(&mut self, shape: &[usize]) -> Tensor {
            let n = shape.iter().product();
            Tensor::from_vec(shape.to_vec(), (0..n).map(|_| self.unit()).collect()).unwrap()
        }
    }

    /// Row-major element of `v` (shape `shape`) at the index `idx` of a
    /// larger broadcast shape (aligned right; size-1 axes repeat).
    fn at(v: &[f64], shape: &[usize], idx: &[usize]) -> f64 {
        let off = idx.len() - shape.len();
        let mut flat = 0;
        for (a, &n) in shape.iter().enumerate() {
            flat = flat * n + if n == 1 { 0 } else { idx[off + a] };
        }
        v[flat]
    }

    /// Plain `softmax(q k^T * scale + mask) v` over every broadcast batch
    /// index, in f64; rows with no key left give zeros.
    fn naive(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        scale: f64,
    ) -> (Vec<usize>, Vec<f64>) {
        let f = |t: &Tensor| -> Vec<f64> { t.to_f32_vec().iter().map(|&x| x as f64).collect() };
        let (qv, kv, vv) = (f(q), f(k), f(v));
        let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
        let rb = [qs.len(), ks.len(), vs.len()].iter().max().unwrap() - 2;
        let batch: Vec<usize> = (0..rb)
            .map(|a| {
                [qs, ks, vs]
                    .iter()
                    .map(|s| {
                        if a + s.len() >= rb + 2 {
                            s[a + s.len() - rb - 2]
                        } else {
                            1
                        }
                    })
                    .max()
                    .unwrap()
            })
            .collect();
        let (tq, d, tk, dv) = (
            qs[qs.len() - 2],
            qs[qs.len() - 1],
            ks[ks.len() - 2],
            vs[vs.len() - 1],
        );
        let mut out = Vec::new();
        let nb: usize = batch.iter().product();
        for b in 0..nb {
            let mut idx = vec![0; rb + 2];
            let mut r = b;
            for a in (0..rb).rev() {
                idx[a] = r % batch[a];
                r /= batch[a];
            }
            for i in 0..tq {
                let mut e = vec![0.0; tk];
                for (j, ej) in e.iter_mut().enumerate() {
                    let mut dot = 0.0;
                    for c in 0..d {
                        idx[rb] = i;
                        idx[rb + 1] = c;
                        let a = at(&qv, qs, &idx);
                        idx[rb] = j;
                        dot += a * at(&kv, ks, &idx);
                    }
                    let mut s = dot * scale;
                    if let Some(m) = mask {
                        idx[rb] = i;
                        idx[rb + 1] = j;
                        let mv = at(&f(m), m.shape(), &idx);
                        s = if m.dtype() == DType::Bool {
                            if mv != 0.0 {
                                s
                            } else {
                                f64::NEG_INFINITY
                            }
                        } else {
                            s + mv
                        };
                    }
                    *ej = s.exp();
                }
                let sum: f64 = e.iter().sum();
                for c in 0..dv {
                    let mut o = 0.0;
                    if sum > 0.0 {
                        for (j, ej) in e.iter().enumerate() {
                            idx[rb] = j;
                            idx[rb + 1] = c;
                            o += ej / sum * at(&vv, vs, &idx);
                        }
                    }
                    out.push(o);
                }
            }
        }
        let mut shape = batch;
        shape.extend([tq, dv]);
        (shape, out)
    }

    /// A shape that broadcasts to `full`: a suffix of it, with some axes 1.
    fn broadcastable(rng: &mut Rng, full: &[usize], keep_last: usize) -> Vec<usize> {
        let drop = rng.below(full.len() - keep_last + 1);
        full[drop..]
            .iter()
            .enumerate()
            .map(|(a, &n)| {
                if a + drop + keep_last < full.len() && rng.below(3) == 0 {
                    1
                } else {
                    n
                }
            })
            .collect()
    }

    fn check_case(
        seed: u64,
        dt: DType,
        with_mask: u8,
        scale: Option<f32>,
    ) -> Result<(), TestCaseError> {
        let mut rng = Rng(seed);
        let batch: Vec<usize> = (0..rng.below(3)).map(|_| 1 + rng.below(3)).collect();
        let (tq, tk, d, dv) = (
            1 + rng.below(5),
            rng.below(6),
            1 + rng.below(6),
            1 + rng.below(4),
        );
        let with =
            |t: usize, w: usize| -> Vec<usize> { batch.iter().copied().chain([t, w]).collect() };
        let qs = broadcastable(&mut rng, &with(tq, d), 2);
        let q = rng.tensor(&qs).cast(dt);
        let ks = broadcastable(&mut rng, &with(tk, d), 2);
        let k = rng.tensor(&ks).cast(dt);
        let vs = broadcastable(&mut rng, &with(tk, dv), 2);
        let v = rng.tensor(&vs).cast(dt);
        let mut ins = vec![q, k, v];
        // the batch the three actually span (axes may all have been dropped or set to 1)
        let out_batch = {
            let facts: Vec<TypedFact> = ins.iter().map(TypedFact::of).collect();
            let r: Vec<&TypedFact> = facts.iter().collect();
            Attention { scale }.output_facts(&r).unwrap()[0]
                .concrete_shape()
                .unwrap()
        };
        let nb = out_batch.len() - 2;
        let mut full = out_batch[..nb].to_vec();
        full.extend([tq, tk]);
        match with_mask {
            1 => {
                let ms = broadcastable(&mut rng, &full, 0);
                let n = ms.iter().product();
                ins.push(
                    Tensor::from_vec(ms, (0..n).map(|_| rng.below(4) != 0).collect()).unwrap(),
                );
            }
            2 => {
                let ms = broadcastable(&mut rng, &full, 0);
                let n = ms.iter().product();
                let vals = (0..n)
                    .map(|_| {
                        if rng.below(5) == 0 {
                            f32::NEG_INFINITY
                        } else {
                            rng.unit()
                        }
                    })
                    .collect();
                ins.push(Tensor::from_vec(ms, vals).unwrap());
            }
            _ => {}
        }
        let op = Attention { scale };
        let refs: Vec<&Tensor> = ins.iter().collect();
        let out = eval_op(&op, &refs).unwrap();
        let facts: Vec<TypedFact> = ins.iter().map(TypedFact::of).collect();
        let frefs: Vec<&TypedFact> = facts.iter().collect();
        prop_assert_eq!(
            op.output_facts(&frefs).unwrap(),
            vec![TypedFact::of(&out[0])]
        );
        let s = scale.map_or(1.0 / (d as f64).sqrt(), |s| s as f64);
        let (shape, want) = naive(&ins[0], &ins[1], &ins[2], ins.get(3), s);
        prop_assert_eq!(out[0].shape(), &shape[..]);
        // f32: 1e-5 (values and weights are O(1)); f16/bf16: rounding of the output, 1e-2
        let tol = if dt == DType::F32 { 1e-5 } else { 1e-2 };
        for (g, w) in out[0].to_f32_vec().iter().zip(&want) {
            prop_assert!(
                (*g as f64 - w).abs() <= tol * (1.0 + w.abs()),
                "{} vs {}",
                g,
                w
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn matches_naive_softmax_and_facts(seed: u64, mask in 0u8..3, scale in proptest::option::of(0.1f32..2.0),
                                           dt in prop_oneof![Just(DType::F32), Just(DType::F16), Just(DType::BF16)]) {
            check_case(seed, dt, mask, scale)?;
        }

        #[test]
        fn symbolic_time_facts(seed: u64, s in 1usize..9, heads in 1usize..4, mask: bool) {
            let mut rng = Rng(seed);
            let (d, dv) = (1 + rng.below(5), 1 + rng.below(5));
            let q = rng.tensor(&[heads, s, d]);
            let k = rng.tensor(&[heads, s, d]);
            let v = rng.tensor(&[1, s, dv]);
            let m = Tensor::from_vec(vec![s, s], (0..s * s).map(|i| i % (s + 1) == 0 || rng.below(2) == 0).collect()).unwrap();
            let mut ins = vec![q, k, v];
            let mut facts = vec![
                TypedFact::new(DType::F32, [Dim::n(heads as i64), Dim::s(), Dim::n(d as i64)]),
                TypedFact::new(DType::F32, [Dim::n(heads as i64), Dim::s(), Dim::n(d as i64)]),
                TypedFact::new(DType::F32, [Dim::n(1), Dim::s(), Dim::n(dv as i64)]),
            ];
            if mask {
                ins.push(m);
                facts.push(TypedFact::new(DType::Bool, [Dim::s(), Dim::s()]));
            }
            let refs: Vec<&Tensor> = ins.iter().collect();
            let out = eval_op(&Attention { scale: None }, &refs).unwrap();
            let frefs: Vec<&TypedFact> = facts.iter().collect();
            let f = Attention { scale: None }.output_facts(&frefs).unwrap();
            prop_assert!(f[0].shape[1].is_symbolic());
            prop_assert_eq!(f[0].concretize(s as i64), TypedFact::of(&out[0]));
        }
    }

    #[test]
    fn fully_masked_rows_and_no_keys_give_zeros() {
        let mut rng = Rng(1);
        let (q, k, v) = (
            rng.tensor(&[2, 3]),
            rng.tensor(&[4, 3]),
            rng.tensor(&[4, 5]),
        );
        let m = Tensor::from_vec(
            vec![2, 4],
            vec![false, false, false, false, true, false, true, false],
        )
        .unwrap();
        let y = eval_op(&Attention { scale: None }, &[&q, &k, &v, &m]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap();
        assert!(y[..5].iter().all(|&x| x == 0.0));
        assert!(y[5..].iter().all(|x| x.is_finite()) && y[5..].iter().any(|&x| x != 0.0));
        let fm = Tensor::from_vec(vec![4], vec![f32::NEG_INFINITY; 4]).unwrap();
        let y = eval_op(&Attention { scale: None }, &[&q, &k, &v, &fm]).unwrap();
        assert!(y[0].to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
        let (k0, v0) = (
            Tensor::zeros(DType::F32, &[2, 0, 3]),
            Tensor::zeros(DType::F32, &[2, 0, 5]),
        );
        let y = eval_op(&Attention { scale: None }, &[&q, &k0, &v0]).unwrap();
        assert_eq!(y[0].shape(), &[2, 2, 5]);
        assert!(y[0].to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
    }

    #[test]
    fn large_scores_stay_finite() {
        let q = Tensor::from_vec(vec![1, 2], vec![100.0f32, 100.0]).unwrap();
        let k = Tensor::from_vec(vec![2, 2], vec![100.0f32, 100.0, 99.0, 99.0]).unwrap();
        let v = Tensor::from_vec(vec![2, 1], vec![1.0f32, 2.0]).unwrap();
        let y = eval_op(&Attention { scale: Some(1.0) }, &[&q, &k, &v]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![1.0]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let f = |s: &[usize]| Tensor::zeros(DType::F32, s);
        let (q, k, v) = (f(&[2, 3, 4]), f(&[2, 5, 4]), f(&[2, 5, 6]));
        let op = Attention { scale: None };
        let cases: Vec<Vec<Tensor>> = vec![
            vec![q.clone(), k.clone()],
            vec![f(&[4]), k.clone(), v.clone()],
            vec![q.clone(), f(&[2, 5, 3]), v.clone()],
            vec![q.clone(), k.clone(), f(&[2, 4, 6])],
            vec![q.clone(), f(&[3, 5, 4]), v.clone()],
            vec![q.clone(), k.clone(), v.cast(DType::F16)],
            vec![q.cast(DType::I64), k.cast(DType::I64), v.cast(DType::I64)],
            vec![f(&[2, 3, 0]), f(&[2, 5, 0]), v.clone()],
            vec![q.clone(), k.clone(), f(&[2, 5, 0])],
            vec![q.clone(), k.clone(), v.clone(), f(&[3, 4])],
            vec![q.clone(), k.clone(), v.clone(), f(&[3, 3, 5])],
            vec![q.clone(), k.clone(), v.clone(), f(&[1, 2, 3, 5])],
            vec![
                q.clone(),
                k.clone(),
                v.clone(),
                Tensor::zeros(DType::I64, &[3, 5]),
            ],
            vec![q.clone(), k.clone(), v.clone(), f(&[3, 5]), f(&[3, 5])],
        ];
        for ins in &cases {
            let refs: Vec<&Tensor> = ins.iter().collect();
            assert!(eval_op(&op, &refs).is_err(), "eval accepted {ins:?}");
            let facts: Vec<TypedFact> = ins.iter().map(TypedFact::of).collect();
            let frefs: Vec<&TypedFact> = facts.iter().collect();
            assert!(
                op.output_facts(&frefs).is_err(),
                "output_facts accepted {facts:?}"
            );
        }
        assert!(eval_op(
            &Attention {
                scale: Some(f32::NAN)
            },
            &[&q, &k, &v]
        )
        .is_err());
        assert!(eval_op(&op, &[&q, &k, &v, &f(&[3, 1])]).is_ok());
    }
}
