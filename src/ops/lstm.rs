//! A single-layer, one-direction LSTM over a time-major sequence, with its
//! state passed in and out so that a streaming caller can carry it.

use std::borrow::Cow;

use half::{bf16, f16};

use super::checks::{float, input_count, rank};
use super::{
    contig, outputs_len, DType, Dim, Op, OpError, OpResult, Scratch, StorageElement, Tensor,
    TypedFact,
};
use crate::op_common;

/// LSTM with PyTorch's weight layout and gate order (i, f, g, o).
///
/// Inputs: `x [T, I]`, `w_ih [4H, I]`, `w_hh [4H, H]`, `b_ih [4H]`,
/// `b_hh [4H]`, `h0 [H]`, `c0 [H]`. Outputs: `y [T, H]` (every step's `h`),
/// `h_T [H]` and `c_T [H]` (the state after the last step; `h0`, `c0` when
/// `T = 0`). Outputs have `x`'s dtype; f16/bf16 are computed in f32.
///
/// Per step: `gates = W_ih x_t + b_ih + W_hh h + b_hh`, split in four;
/// `c = sigmoid(f) * c + sigmoid(i) * tanh(g)`, `h = sigmoid(o) * tanh(c)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lstm {
    pub hidden: usize,
}

const NAMES: [&str; 7] = ["x", "w_ih", "w_hh", "b_ih", "b_hh", "h0", "c0"];
const RANKS: [usize; 7] = [2, 2, 2, 1, 1, 1, 1];

impl Lstm {
    fn check_hidden(&self) -> OpResult<usize> {
        if self.hidden == 0 || i64::try_from(4 * self.hidden as u128).is_err() {
            return Err(OpError::Param(format!(
                "LSTM hidden size must be positive, got {}",
                self.hidden
            )));
        }
        Ok(self.hidden)
    }

    /// The shapes every input must have, given the input size `i`.
    fn expected(&self, i: Dim) -> [Option<[Dim; 2]>; 7] {
        let h = Dim::n(self.hidden as i64);
        let h4 = Dim::n(4 * self.hidden as i64);
        [
            None,
            Some([h4, i]),
            Some([h4, h]),
            Some([h4, h4]),
            Some([h4, h4]),
            Some([h, h]),
            Some([h, h]),
        ]
    }
}

impl Op for Lstm {
    op_common!("Lstm");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        self.check_hidden()?;
        input_count(inputs, 7)?;
        for (k, f) in inputs.iter().enumerate() {
            rank(f, k, RANKS[k])?;
            float(f, k)?;
        }
        let (t, i) = (inputs[0].shape[0], inputs[0].shape[1]);
        if i == Dim::n(0) {
            return Err(OpError::Empty("LSTM input x has 0 features".into()));
        }
        for (k, want) in self.expected(i).iter().enumerate() {
            if let Some(want) = want {
                if inputs[k].shape[..] != want[..RANKS[k]] {
                    return Err(OpError::Shape(format!(
                        "LSTM {} is {}, expected {:?} for hidden {}",
                        NAMES[k],
                        inputs[k],
                        &want[..RANKS[k]],
                        self.hidden
                    )));
                }
            }
        }
        let (dt, h) = (inputs[0].dtype, Dim::n(self.hidden as i64));
        Ok(vec![
            TypedFact::new(dt, [t, h]),
            TypedFact::new(dt, [h]),
            TypedFact::new(dt, [h]),
        ])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        let h = self.check_hidden()?;
        input_count(inputs, 7)?;
        for (k, t) in inputs.iter().enumerate() {
            if t.rank() != RANKS[k] {
                return Err(OpError::Rank {
                    input: k,
                    expected: RANKS[k].to_string(),
                    got: t.rank(),
                });
            }
            if !t.dtype().is_float() {
                return Err(OpError::DType {
                    input: k,
                    expected: "a float type".into(),
                    got: t.dtype(),
                });
            }
        }
        let (steps, i) = (inputs[0].shape()[0], inputs[0].shape()[1]);
        if i == 0 {
            return Err(OpError::Empty("LSTM input x has 0 features".into()));
        }
        let want: [[usize; 2]; 7] = [
            [steps, i],
            [4 * h, i],
            [4 * h, h],
            [4 * h, 0],
            [4 * h, 0],
            [h, 0],
            [h, 0],
        ];
        for (k, w) in want.iter().enumerate().skip(1) {
            if inputs[k].shape() != &w[..RANKS[k]] {
                return Err(OpError::Shape(format!(
                    "LSTM {} is {:?}, expected {:?} for hidden {h}",
                    NAMES[k],
                    inputs[k].shape(),
                    &w[..RANKS[k]]
                )));
            }
        }
        let dt = inputs[0].dtype();
        outputs_len(outputs, 3);
        outputs[0].ensure(dt, &[steps, h]);
        outputs[1].ensure(dt, &[h]);
        outputs[2].ensure(dt, &[h]);
        let ins: [Cow<'_, Tensor>; 7] = std::array::from_fn(|k| f32_of(inputs[k]));
        let [x, w_ih, w_hh, b_ih, b_hh, h0, c0] = &ins;
        let p = Params {
            x: x.as_slice()?,
            w_ih: w_ih.as_slice()?,
            w_hh: w_hh.as_slice()?,
            b_ih: b_ih.as_slice()?,
            b_hh: b_hh.as_slice()?,
            h0: h0.as_slice()?,
            c0: c0.as_slice()?,
            i,
            h,
        };
        match dt {
            DType::F32 => run::<f32>(&p, outputs, scratch),
            DType::F16 => run::<f16>(&p, outputs, scratch),
            DType::BF16 => run::<bf16>(&p, outputs, scratch),
            dt => Err(OpError::DType {
                input: 0,
                expected: "a float type".into(),
                got: dt,
            }),
        }
    }

    fn info(&self) -> String {
        format!("hidden {}", self.hidden)
    }
}

fn f32_of(t: &Tensor) -> Cow<'_, Tensor> {
    if t.dtype() == DType::F32 {
        contig(t)
    } else {
        Cow::Owned(t.cast(DType::F32))
    }
}

struct Params<'a> {
    x: &'a [f32],
    w_ih: &'a [f32],
    w_hh: &'a [f32],
    b_ih: &'a [f32],
    b_hh: &'a [f32],
    h0: &'a [f32],
    c0: &'a [f32],
    i: usize,
    h: usize,
}

/// Dot product with independent partial sums, so that it vectorises.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn run<T: StorageElement>(
    p: &Params<'_>,
    outputs: &mut [Tensor],
    scratch: &mut Scratch,
) -> OpResult<()> {
    let (i, h) = (p.i, p.h);
    let (gates, hs, cs) = scratch.three(4 * h, h, h);
    hs.copy_from_slice(p.h0);
    cs.copy_from_slice(p.c0);
    let (y, rest) = outputs.split_at_mut(1);
    let y = y[0].as_slice_mut::<T>()?;
    for (t, yrow) in y.chunks_exact_mut(h).enumerate() {
        let xt = &p.x[t * i..(t + 1) * i];
        for (r, g) in gates.iter_mut().enumerate() {
            *g = p.b_ih[r]
                + p.b_hh[r]
                + dot(&p.w_ih[r * i..(r + 1) * i], xt)
                + dot(&p.w_hh[r * h..(r + 1) * h], hs);
        }
        for u in 0..h {
            let ig = sigmoid(gates[u]);
            let fg = sigmoid(gates[h + u]);
            let gg = gates[2 * h + u].tanh();
            let og = sigmoid(gates[3 * h + u]);
            cs[u] = fg * cs[u] + ig * gg;
            hs[u] = og * cs[u].tanh();
        }
        for (o, &v) in yrow.iter_mut().zip(hs.iter()) {
            *o = T::from_f32(v);
        }
    }
    for (o, &v) in rest[0].as_slice_mut::<T>()?.iter_mut().zip(hs.iter()) {
        *o = T::from_f32(v);
    }
    for (o, &v) in rest[1].as_slice_mut::<T>()?.iter_mut().zip(cs.iter()) {
        *o = T::from_f32(v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::eval_op;
    use proptest::prelude::*;

    fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    /// Random inputs for `t` steps, `i` features, `h` hidden units.
    fn inputs(t: usize, i: usize, h: usize, seed: u64) -> Vec<Tensor> {
        let shapes: [Vec<usize>; 7] = [
            vec![t, i],
            vec![4 * h, i],
            vec![4 * h, h],
            vec![4 * h],
            vec![4 * h],
            vec![h],
            vec![h],
        ];
        shapes
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let n = s.iter().product();
                Tensor::from_vec(s.clone(), rand_vec(n, seed * 10 + k as u64)).unwrap()
            })
            .collect()
    }

    /// The LSTM step written out in f64, PyTorch's gate order i, f, g, o.
    fn reference(ins: &[Tensor], h: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let v: Vec<Vec<f64>> = ins
            .iter()
            .map(|t| t.to_f32_vec().iter().map(|&x| x as f64).collect())
            .collect();
        let (x, w_ih, w_hh, b_ih, b_hh) = (&v[0], &v[1], &v[2], &v[3], &v[4]);
        let (mut hs, mut cs) = (v[5].clone(), v[6].clone());
        let i = ins[0].shape()[1];
        let steps = ins[0].shape()[0];
        let sig = |z: f64| 1.0 / (1.0 + (-z).exp());
        let mut y = Vec::new();
        for t in 0..steps {
            let pre = |r: usize| -> f64 {
                let a: f64 = (0..i).map(|k| w_ih[r * i + k] * x[t * i + k]).sum();
                let b: f64 = (0..h).map(|k| w_hh[r * h + k] * hs[k]).sum();
                a + b_ih[r] + b + b_hh[r]
            };
            let mut nh = vec![0.0; h];
            for u in 0..h {
                let ig = sig(pre(u));
                let fg = sig(pre(h + u));
                let gg = pre(2 * h + u).tanh();
                let og = sig(pre(3 * h + u));
                cs[u] = fg * cs[u] + ig * gg;
                nh[u] = og * cs[u].tanh();
            }
            hs = nh;
            y.extend_from_slice(&hs);
        }
        (y, hs, cs)
    }

    fn assert_close(got: &Tensor, want: &[f64], tol: f64, what: &str) {
        for (k, (g, w)) in got.to_f32_vec().iter().zip(want).enumerate() {
            assert!((*g as f64 - w).abs() <= tol, "{what}[{k}]: {g} vs {w}");
        }
        assert_eq!(got.len(), want.len(), "{what}");
    }

    #[test]
    fn matches_step_formulas() {
        for (t, i, h) in [(7, 5, 3), (1, 1, 1), (12, 19, 9), (0, 4, 2)] {
            let ins = inputs(t, i, h, (t + i + h) as u64);
            let refs: Vec<&Tensor> = ins.iter().collect();
            let out = eval_op(&Lstm { hidden: h }, &refs).unwrap();
            let (y, hf, cf) = reference(&ins, h);
            // f32: gates are short dot products of O(1) values: 1e-5 absolute
            assert_close(&out[0], &y, 1e-5, "y");
            assert_close(&out[1], &hf, 1e-5, "h_T");
            assert_close(&out[2], &cf, 1e-5, "c_T");
        }
    }

    #[test]
    fn half_precision_within_tolerance() {
        let ins = inputs(6, 8, 4, 77);
        for dt in [DType::F16, DType::BF16] {
            let cast: Vec<Tensor> = ins.iter().map(|t| t.cast(dt)).collect();
            let (y, _, cf) = reference(&cast, 4);
            let refs: Vec<&Tensor> = cast.iter().collect();
            let out = eval_op(&Lstm { hidden: 4 }, &refs).unwrap();
            assert_eq!(out[0].dtype(), dt);
            // outputs rounded to f16 / bf16: 1e-2 absolute (|h| < 1, |c| small)
            assert_close(&out[0], &y, 1e-2, "y");
            assert_close(&out[2], &cf, 2e-2, "c_T");
        }
    }

    #[test]
    fn carried_state_streams() {
        let (t, i, h) = (10, 6, 5);
        let ins = inputs(t, i, h, 3);
        let refs: Vec<&Tensor> = ins.iter().collect();
        let whole = eval_op(&Lstm { hidden: h }, &refs).unwrap();
        let op = Lstm { hidden: h };
        let (mut hs, mut cs) = (ins[5].clone(), ins[6].clone());
        let mut ys = Vec::new();
        for (a, n) in [(0, 3), (3, 1), (4, 6)] {
            let x = ins[0].narrow(0, a, n).unwrap();
            let out = eval_op(&op, &[&x, &ins[1], &ins[2], &ins[3], &ins[4], &hs, &cs]).unwrap();
            ys.extend(out[0].to_vec::<f32>().unwrap());
            hs = out[1].clone();
            cs = out[2].clone();
        }
        assert_eq!(ys, whole[0].to_vec::<f32>().unwrap());
        assert_eq!(hs, whole[1]);
        assert_eq!(cs, whole[2]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let (t, i, h) = (3, 4, 2);
        let good = inputs(t, i, h, 1);
        let refs: Vec<&Tensor> = good.iter().collect();
        assert!(eval_op(&Lstm { hidden: h }, &refs).is_ok());
        assert!(eval_op(&Lstm { hidden: 0 }, &refs).is_err());
        assert!(eval_op(&Lstm { hidden: 3 }, &refs).is_err());
        assert!(eval_op(&Lstm { hidden: h }, &refs[..6]).is_err());
        let bad: [(usize, Tensor); 11] = [
            (0, Tensor::zeros(DType::F32, &[t * i])),
            (0, Tensor::zeros(DType::F32, &[t, 0])),
            (0, Tensor::zeros(DType::I64, &[t, i])),
            (1, Tensor::zeros(DType::F32, &[4 * h, i + 1])),
            (1, Tensor::zeros(DType::F32, &[3 * h, i])),
            (2, Tensor::zeros(DType::F32, &[4 * h, h + 1])),
            (2, Tensor::zeros(DType::F32, &[h, 4 * h])),
            (3, Tensor::zeros(DType::F32, &[4 * h + 1])),
            (4, Tensor::zeros(DType::F32, &[1, 4 * h])),
            (5, Tensor::zeros(DType::F32, &[h + 1])),
            (6, Tensor::zeros(DType::Bool, &[h])),
        ];
        let op = Lstm { hidden: h };
        for (k, t) in bad.iter() {
            let mut ins = good.clone();
            ins[*k] = t.clone();
            let refs: Vec<&Tensor> = ins.iter().collect();
            assert!(
                eval_op(&op, &refs).is_err(),
                "eval accepted input {k} = {t:?}"
            );
            let facts: Vec<TypedFact> = ins.iter().map(TypedFact::of).collect();
            let frefs: Vec<&TypedFact> = facts.iter().collect();
            assert!(
                op.output_facts(&frefs).is_err(),
                "output_facts accepted input {k} = {t:?}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn facts_agree_with_eval(t in 0usize..12, i in 1usize..9, h in 1usize..7,
                                 dt in prop_oneof![Just(DType::F32), Just(DType::F16), Just(DType::BF16)]) {
            let ins: Vec<Tensor> = inputs(t, i, h, 5).iter().map(|x| x.cast(dt)).collect();
            let refs: Vec<&Tensor> = ins.iter().collect();
            let op = Lstm { hidden: h };
            let out = eval_op(&op, &refs).unwrap();
            let got: Vec<TypedFact> = out.iter().map(TypedFact::of).collect();
            let mut facts: Vec<TypedFact> = ins.iter().map(TypedFact::of).collect();
            let frefs: Vec<&TypedFact> = facts.iter().collect();
            prop_assert_eq!(op.output_facts(&frefs).unwrap(), got.clone());
            facts[0].shape[0] = Dim::s();
            let frefs: Vec<&TypedFact> = facts.iter().collect();
            let sym = op.output_facts(&frefs).unwrap();
            prop_assert!(sym[0].shape[0].is_symbolic());
            let conc: Vec<TypedFact> = sym.iter().map(|f| f.concretize(t as i64)).collect();
            prop_assert_eq!(conc, got);
        }
    }
}
