//! The fused CTC head: linear + log-softmax that returns, per frame, the best
//! token and its log-probability (greedy decoding) or the log-probability of
//! given target tokens (scoring), without materialising `[T, V]` logits.

use super::checks::{dtype, float, input_count, input_count_range, rank};
use super::{contig, outputs_len, DType, Op, OpError, OpResult, Scratch, Tensor, TypedFact};
use crate::op_common;

/// What the head returns per frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtcHeadMode {
    /// Outputs `best_id [T] i64` and `best_logp [T]`.
    Greedy,
    /// Takes a 4th input `targets [T] i64`; outputs `logp [T]` of each target.
    Score,
}

/// Inputs `x [T, d]`, `w [V, d]` (Linear layout), `b [V]`, and in `Score`
/// mode `targets [T]`. Log-probabilities come out in `x`'s float dtype (as
/// every other float op's outputs, so a bf16 graph stays bf16); the sums
/// are f32 whatever the storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtcHead {
    pub mode: CtcHeadMode,
}

impl CtcHead {
    fn check(&self, inputs: &[&TypedFact]) -> OpResult<()> {
        match self.mode {
            CtcHeadMode::Greedy => input_count(inputs, 3)?,
            CtcHeadMode::Score => input_count(inputs, 4)?,
        }
        rank(inputs[0], 0, 2)?;
        rank(inputs[1], 1, 2)?;
        rank(inputs[2], 2, 1)?;
        for (i, f) in inputs.iter().take(3).enumerate() {
            float(f, i)?;
        }
        if inputs[1].shape[1] != inputs[0].shape[1] {
            return Err(OpError::Shape(format!(
                "weight {} does not match features {}",
                inputs[1], inputs[0]
            )));
        }
        if inputs[2].shape[0] != inputs[1].shape[0] {
            return Err(OpError::Shape(format!(
                "bias {} does not match weight {}",
                inputs[2], inputs[1]
            )));
        }
        if self.mode == CtcHeadMode::Score {
            rank(inputs[3], 3, 1)?;
            dtype(inputs[3], 3, DType::I64)?;
            if inputs[3].shape[0] != inputs[0].shape[0] {
                return Err(OpError::Shape(format!(
                    "targets {} vs frames {}",
                    inputs[3], inputs[0]
                )));
            }
        }
        Ok(())
    }
}

impl CtcHead {
    /// The same checks as `check`, on concrete tensors and without allocating.
    fn check_tensors(&self, inputs: &[&Tensor]) -> OpResult<()> {
        let n = if self.mode == CtcHeadMode::Score {
            4
        } else {
            3
        };
        input_count(inputs, n)?;
        let ranks = [2, 2, 1, 1];
        for (i, t) in inputs.iter().enumerate() {
            if t.rank() != ranks[i] {
                return Err(OpError::Rank {
                    input: i,
                    expected: ranks[i].to_string(),
                    got: t.rank(),
                });
            }
            let want_float = i < 3;
            if want_float != t.dtype().is_float() || (!want_float && t.dtype() != DType::I64) {
                let expected = if want_float { "a float type" } else { "i64" };
                return Err(OpError::DType {
                    input: i,
                    expected: expected.into(),
                    got: t.dtype(),
                });
            }
        }
        let (x, w, b) = (inputs[0].shape(), inputs[1].shape(), inputs[2].shape());
        if w[1] != x[1] || b[0] != w[0] || (n == 4 && inputs[3].shape()[0] != x[0]) {
            return Err(OpError::Shape(format!(
                "features {x:?}, weight {w:?}, bias {b:?} do not fit a [T, d] x [V, d] head"
            )));
        }
        Ok(())
    }
}

fn as_f32(t: &Tensor) -> std::borrow::Cow<'_, Tensor> {
    if t.dtype() == DType::F32 {
        contig(t)
    } else {
        std::borrow::Cow::Owned(t.cast(DType::F32))
    }
}

impl Op for CtcHead {
    op_common!("CtcHead");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count_range(inputs, 3, 4)?;
        self.check(inputs)?;
        let (t, dt) = (inputs[0].shape[0], inputs[0].dtype);
        Ok(match self.mode {
            CtcHeadMode::Greedy => vec![TypedFact::new(DType::I64, [t]), TypedFact::new(dt, [t])],
            CtcHeadMode::Score => vec![TypedFact::new(dt, [t])],
        })
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        // frames are independent; weights and bias must not stream
        match axes {
            [Some(0), None, None] | [Some(0), None, None, Some(0)] => Some(0),
            _ => None,
        }
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count_range(inputs, 3, 4)?;
        self.check_tensors(inputs)?;
        let (x, w, b) = (as_f32(inputs[0]), as_f32(inputs[1]), as_f32(inputs[2]));
        let (x, w, b) = (
            x.as_slice::<f32>()?,
            w.as_slice::<f32>()?,
            b.as_slice::<f32>()?,
        );
        let (t, d, v) = (
            inputs[0].shape()[0],
            inputs[0].shape()[1],
            inputs[1].shape()[0],
        );
        if v == 0 {
            return Err(OpError::Empty("vocabulary of 0 tokens".into()));
        }
        let targets = match self.mode {
            CtcHeadMode::Score => {
                let tg = inputs[3].as_slice::<i64>()?;
                if let Some((i, &bad)) = tg
                    .iter()
                    .enumerate()
                    .find(|(_, &id)| id < 0 || id as usize >= v)
                {
                    return Err(OpError::Index(format!(
                        "target id {bad} at frame {i} is outside 0..{v}"
                    )));
                }
                Some(tg)
            }
            CtcHeadMode::Greedy => None,
        };
        let logit = |f: usize, k: usize| -> f32 {
            let xr = &x[f * d..(f + 1) * d];
            let wr = &w[k * d..(k + 1) * d];
            xr.iter().zip(wr).map(|(a, c)| a * c).sum::<f32>() + b[k]
        };
        match self.mode {
            CtcHeadMode::Greedy => {
                outputs_len(outputs, 2);
                outputs[0].ensure(DType::I64, &[t]);
                outputs[1].ensure(DType::F32, &[t]);
                let (ids, lps) = outputs.split_at_mut(1);
                let (ids, lps) = (ids[0].as_slice_mut::<i64>()?, lps[0].as_slice_mut::<f32>()?);
                for f in 0..t {
                    // online log-sum-exp with argmax, one logit at a time
                    let (mut m, mut s, mut best, mut best_l) =
                        (f32::NEG_INFINITY, 0f32, 0usize, f32::NEG_INFINITY);
                    for k in 0..v {
                        let l = logit(f, k);
                        if l > best_l {
                            best_l = l;
                            best = k;
                        }
                        if l > m {
                            s = s * (m - l).exp() + 1.0;
                            m = l;
                        } else {
                            s += (l - m).exp();
                        }
                    }
                    ids[f] = best as i64;
                    lps[f] = best_l - (m + s.ln());
                }
            }
            CtcHeadMode::Score => {
                let tg = targets.expect("score mode has targets");
                outputs_len(outputs, 1);
                outputs[0].ensure(DType::F32, &[t]);
                let lps = outputs[0].as_slice_mut::<f32>()?;
                for f in 0..t {
                    let (mut m, mut s) = (f32::NEG_INFINITY, 0f32);
                    for k in 0..v {
                        let l = logit(f, k);
                        if l > m {
                            s = s * (m - l).exp() + 1.0;
                            m = l;
                        } else {
                            s += (l - m).exp();
                        }
                    }
                    lps[f] = logit(f, tg[f] as usize) - (m + s.ln());
                }
            }
        }
        let dt = inputs[0].dtype();
        if let Some(lp) = outputs.last_mut().filter(|_| dt != DType::F32) {
            *lp = lp.cast(dt);
        }
        Ok(())
    }

    fn info(&self) -> String {
        format!("{:?}", self.mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::eval_op;

    fn reference(x: &[f32], w: &[f32], b: &[f32], t: usize, d: usize, v: usize) -> Vec<Vec<f64>> {
        (0..t)
            .map(|f| {
                let l: Vec<f64> = (0..v)
                    .map(|k| {
                        (0..d)
                            .map(|i| x[f * d + i] as f64 * w[k * d + i] as f64)
                            .sum::<f64>()
                            + b[k] as f64
                    })
                    .collect();
                let m = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z = m + l.iter().map(|a| (a - m).exp()).sum::<f64>().ln();
                l.iter().map(|a| a - z).collect()
            })
            .collect()
    }

    fn data(t: usize, d: usize, v: usize) -> (Tensor, Tensor, Tensor) {
        let mut seed = 12345u32;
        let mut r = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1 << 24) as f32 * 4.0 - 2.0
        };
        let x = Tensor::from_vec(vec![t, d], (0..t * d).map(|_| r()).collect()).unwrap();
        let w = Tensor::from_vec(vec![v, d], (0..v * d).map(|_| r()).collect()).unwrap();
        let b = Tensor::from_vec(vec![v], (0..v).map(|_| r()).collect()).unwrap();
        (x, w, b)
    }

    #[test]
    fn greedy_and_score_match_full_log_softmax() {
        let (t, d, v) = (9, 7, 29);
        let (x, w, b) = data(t, d, v);
        let r = reference(
            &x.to_vec().unwrap(),
            &w.to_vec().unwrap(),
            &b.to_vec().unwrap(),
            t,
            d,
            v,
        );
        let out = eval_op(
            &CtcHead {
                mode: CtcHeadMode::Greedy,
            },
            &[&x, &w, &b],
        )
        .unwrap();
        let (ids, lps) = (
            out[0].to_vec::<i64>().unwrap(),
            out[1].to_vec::<f32>().unwrap(),
        );
        for f in 0..t {
            let (best, bl) = r[f]
                .iter()
                .enumerate()
                .fold(
                    (0, f64::NEG_INFINITY),
                    |a, (k, &l)| if l > a.1 { (k, l) } else { a },
                );
            assert_eq!(ids[f] as usize, best);
            assert!((lps[f] as f64 - bl).abs() < 1e-5, "{} vs {bl}", lps[f]);
        }
        let targets =
            Tensor::from_vec(vec![t], (0..t as i64).map(|i| (i * 5) % v as i64).collect()).unwrap();
        let out = eval_op(
            &CtcHead {
                mode: CtcHeadMode::Score,
            },
            &[&x, &w, &b, &targets],
        )
        .unwrap();
        for (f, lp) in out[0].to_vec::<f32>().unwrap().iter().enumerate() {
            assert!((*lp as f64 - r[f][(f * 5) % v]).abs() < 1e-5);
        }
    }

    #[test]
    fn log_probs_come_out_in_the_features_dtype() {
        let (t, d, v) = (5, 4, 6);
        let (x, w, b) = data(t, d, v);
        let want = eval_op(
            &CtcHead {
                mode: CtcHeadMode::Greedy,
            },
            &[&x, &w, &b],
        )
        .unwrap();
        for dt in [DType::BF16, DType::F16] {
            let (xh, wh, bh) = (x.cast(dt), w.cast(dt), b.cast(dt));
            let head = CtcHead {
                mode: CtcHeadMode::Greedy,
            };
            let facts = head
                .output_facts(&[
                    &TypedFact::of(&xh),
                    &TypedFact::of(&wh),
                    &TypedFact::of(&bh),
                ])
                .unwrap();
            let out = eval_op(&head, &[&xh, &wh, &bh]).unwrap();
            assert_eq!(facts[1].dtype, dt);
            for (o, f) in out.iter().zip(&facts) {
                assert_eq!(o.dtype(), f.dtype);
                assert_eq!(o.shape(), &f.concrete_shape().unwrap()[..]);
            }
            let got = out[1].cast(DType::F32).to_vec::<f32>().unwrap();
            let exp = want[1].to_vec::<f32>().unwrap();
            for (g, e) in got.iter().zip(&exp) {
                assert!((g - e).abs() <= 0.05 * (1.0 + e.abs()), "{dt}: {g} vs {e}");
            }
        }
    }

    #[test]
    fn out_of_range_targets_and_bad_shapes_are_errors() {
        let (x, w, b) = data(4, 3, 5);
        let bad = Tensor::from_vec(vec![4], vec![0i64, 1, 5, 2]).unwrap();
        let e = eval_op(
            &CtcHead {
                mode: CtcHeadMode::Score,
            },
            &[&x, &w, &b, &bad],
        )
        .unwrap_err();
        assert!(matches!(e, OpError::Index(_)), "{e}");
        let neg = Tensor::from_vec(vec![4], vec![0i64, -1, 0, 2]).unwrap();
        assert!(eval_op(
            &CtcHead {
                mode: CtcHeadMode::Score
            },
            &[&x, &w, &b, &neg]
        )
        .is_err());
        let w2 = Tensor::zeros(DType::F32, &[5, 4]);
        assert!(eval_op(
            &CtcHead {
                mode: CtcHeadMode::Greedy
            },
            &[&x, &w2, &b]
        )
        .is_err());
        assert!(eval_op(
            &CtcHead {
                mode: CtcHeadMode::Greedy
            },
            &[&x, &w]
        )
        .is_err());
        let short = Tensor::zeros(DType::I64, &[3]);
        assert!(eval_op(
            &CtcHead {
                mode: CtcHeadMode::Score
            },
            &[&x, &w, &b, &short]
        )
        .is_err());
    }
}
