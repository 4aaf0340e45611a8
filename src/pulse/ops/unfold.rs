//! Overlapping windows of a signal (`Unfold`). Its pulse rule
//! (`pulse/rules/unfold.rs`): a Delay gives each pulse the past samples its
//! windows overlap with.
//!
//! Silero VAD's official chunk protocol is one: each 512-sample chunk is
//! fed with the 64 samples before it, zeros at the start.

use crate::op_common;
use crate::ops::checks::{input_count, rank};
use crate::ops::{
    outputs_len, DType, Dim, Element, Op, OpError, OpResult, Scratch, StorageElement, Tensor,
    TypedFact,
};

/// Windows of `size` samples every `step` samples: `x [T]` -> `[N, size]`,
/// window `n` holding `x[n*step - pad_before ..][..size]`, with zeros
/// before the signal's start; `N = floor((T + pad_before - size) / step) + 1`
/// (an input shorter than one window is an error). Float dtypes.
///
/// ```
/// use pulsed::ops::{eval_op, Tensor};
/// use pulsed::pulse::Unfold;
/// let x = Tensor::from_vec(vec![4], vec![1f32, 2., 3., 4.]).unwrap();
/// let y = eval_op(&Unfold { size: 3, step: 2, pad_before: 1 }, &[&x]).unwrap();
/// assert_eq!(y[0].shape(), &[2, 3]);
/// assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![0., 1., 2., 2., 3., 4.]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unfold {
    pub size: usize,
    pub step: usize,
    /// Zero samples before the signal.
    pub pad_before: usize,
}

impl Unfold {
    fn check_params(&self) -> OpResult<()> {
        if self.size == 0 || self.step == 0 {
            return Err(OpError::Param(format!(
                "Unfold size {} and step {} must be positive",
                self.size, self.step
            )));
        }
        if self.pad_before >= self.size
            || self.size > i32::MAX as usize
            || self.step > i32::MAX as usize
        {
            return Err(OpError::Param(format!(
                "Unfold pad_before {} must be below the window size {} (both below 2^31)",
                self.pad_before, self.size
            )));
        }
        Ok(())
    }

    fn too_short(&self, t: i64) -> OpError {
        OpError::Shape(format!(
            "Unfold: {t} samples (+{} padding) are fewer than one window of {}",
            self.pad_before, self.size
        ))
    }
}

impl Op for Unfold {
    op_common!("Unfold");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        self.check_params()?;
        let x = inputs[0];
        rank(x, 0, 1)?;
        if !x.dtype.is_float() {
            return Err(OpError::DType {
                input: 0,
                expected: "a float type".into(),
                got: x.dtype,
            });
        }
        let t = x.shape[0];
        if let Some(n) = t.as_const() {
            if n + (self.pad_before as i64) < self.size as i64 {
                return Err(self.too_short(n));
            }
        }
        let n = t
            .add_const(self.pad_before as i64 + self.step as i64 - self.size as i64)
            .div_floor(self.step as i64)
            .ok_or_else(|| {
                OpError::Dim(format!(
                    "({t} + {} - {}) / {} + 1",
                    self.pad_before, self.size, self.step
                ))
            })?;
        Ok(vec![TypedFact::new(x.dtype, [n, Dim::from(self.size)])])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        self.check_params()?;
        let x = inputs[0];
        if x.rank() != 1 {
            return Err(OpError::Rank {
                input: 0,
                expected: "1".into(),
                got: x.rank(),
            });
        }
        let t = x.shape()[0];
        if t + self.pad_before < self.size {
            return Err(self.too_short(t as i64));
        }
        let n = (t + self.pad_before - self.size) / self.step + 1;
        let dt = x.dtype();
        outputs_len(outputs, 1);
        outputs[0].ensure(dt, &[n, self.size]);
        let x = crate::ops::contig(x);
        let out = &mut outputs[0];
        match dt {
            DType::F32 => self.run::<f32>(x.as_slice()?, out.as_slice_mut()?),
            DType::F16 => self.run::<half::f16>(x.as_slice()?, out.as_slice_mut()?),
            DType::BF16 => self.run::<half::bf16>(x.as_slice()?, out.as_slice_mut()?),
            dt => {
                return Err(OpError::DType {
                    input: 0,
                    expected: "a float type".into(),
                    got: dt,
                })
            }
        }
        Ok(())
    }

    fn info(&self) -> String {
        format!(
            "size {} step {} pad_before {}",
            self.size, self.step, self.pad_before
        )
    }
}

impl Unfold {
    fn run<T: StorageElement + Element>(&self, x: &[T], out: &mut [T]) {
        for (n, w) in out.chunks_exact_mut(self.size).enumerate() {
            let start = (n * self.step) as i64 - self.pad_before as i64;
            let zeros = (-start).max(0) as usize;
            w[..zeros].fill(T::default());
            let from = start.max(0) as usize;
            w[zeros..].copy_from_slice(&x[from..from + self.size - zeros]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::eval_op;
    use proptest::prelude::*;

    fn naive(x: &[f32], op: Unfold) -> Vec<Vec<f32>> {
        let mut out = Vec::new();
        let mut n = 0i64;
        loop {
            let start = n * op.step as i64 - op.pad_before as i64;
            if start + op.size as i64 > x.len() as i64 {
                break;
            }
            out.push(
                (0..op.size as i64)
                    .map(|k| {
                        if start + k < 0 {
                            0.0
                        } else {
                            x[(start + k) as usize]
                        }
                    })
                    .collect(),
            );
            n += 1;
        }
        out
    }

    proptest! {
        #[test]
        fn facts_agree_and_values_match(size in 1usize..20, step in 1usize..20, pad in 0usize..20, t in 0usize..80) {
            let op = Unfold { size, step, pad_before: pad.min(size - 1) };
            let x: Vec<f32> = (0..t).map(|i| i as f32 * 0.5 - 3.0).collect();
            let xt = Tensor::from_vec(vec![t], x.clone()).unwrap();
            let facts = op.output_facts(&[&TypedFact::of(&xt)]);
            let out = eval_op(&op, &[&xt]);
            match (facts, out) {
                (Ok(f), Ok(o)) => {
                    prop_assert_eq!(&f[0], &TypedFact::of(&o[0]));
                    let want: Vec<f32> = naive(&x, op).concat();
                    prop_assert_eq!(o[0].to_vec::<f32>().unwrap(), want);
                    let sym = op.output_facts(&[&TypedFact::new(DType::F32, [Dim::s()])]).unwrap();
                    prop_assert_eq!(sym[0].concretize(t as i64), f[0].clone());
                }
                (Err(_), Err(_)) => {}
                (f, o) => prop_assert!(false, "facts {:?} vs eval {:?}", f, o.map(|o| o[0].shape().to_vec())),
            }
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::from_vec(vec![4], vec![1f32; 4]).unwrap();
        assert!(eval_op(
            &Unfold {
                size: 0,
                step: 1,
                pad_before: 0
            },
            &[&x]
        )
        .is_err());
        assert!(eval_op(
            &Unfold {
                size: 2,
                step: 0,
                pad_before: 0
            },
            &[&x]
        )
        .is_err());
        assert!(eval_op(
            &Unfold {
                size: 2,
                step: 1,
                pad_before: 2
            },
            &[&x]
        )
        .is_err());
        assert!(eval_op(
            &Unfold {
                size: 6,
                step: 1,
                pad_before: 1
            },
            &[&x]
        )
        .is_err());
        let m = Tensor::from_vec(vec![2, 2], vec![1f32; 4]).unwrap();
        assert!(eval_op(
            &Unfold {
                size: 2,
                step: 1,
                pad_before: 0
            },
            &[&m]
        )
        .is_err());
        let i = Tensor::from_vec(vec![4], vec![1i64; 4]).unwrap();
        assert!(eval_op(
            &Unfold {
                size: 2,
                step: 1,
                pad_before: 0
            },
            &[&i]
        )
        .is_err());
    }
}
