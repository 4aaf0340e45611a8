//! Range: the positions `offset, offset+1, ...` of an axis, as i64.

use super::checks::input_count;
use super::shape::{param_in_range, Shaped};
use super::{outputs_len, DType, Op, OpError, OpResult, Scratch, Tensor, TypedFact};
use crate::op_common;

/// Input: any tensor, read only for its size `n` on `axis`. Output `[n]`
/// i64 holding `offset .. offset + n`. The whole-utterance source of
/// positions; on a streaming axis the pulsifier replaces it by
/// [`crate::pulse::StreamPosition`], so it has no frame-local form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub axis: usize,
    pub offset: i64,
}

impl Range {
    fn check<S: Shaped>(&self, inputs: &[&S]) -> OpResult<()> {
        input_count(inputs, 1)?;
        param_in_range(self.offset, "range offset")?;
        if self.axis >= inputs[0].ndim() {
            return Err(OpError::Param(format!(
                "range axis {} out of range for rank {}",
                self.axis,
                inputs[0].ndim()
            )));
        }
        Ok(())
    }
}

impl Op for Range {
    op_common!("Range");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        self.check(inputs)?;
        Ok(vec![TypedFact::new(
            DType::I64,
            [inputs[0].shape[self.axis]],
        )])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        self.check(inputs)?;
        let n = inputs[0].shape()[self.axis];
        outputs_len(outputs, 1);
        outputs[0].ensure(DType::I64, &[n]);
        for (k, v) in outputs[0].as_slice_mut::<i64>()?.iter_mut().enumerate() {
            *v = self.offset + k as i64;
        }
        Ok(())
    }

    fn info(&self) -> String {
        format!("axis {} offset {}", self.axis, self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::shape::test_util::*;
    use crate::ops::{eval_op, Dim};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn positions_of_an_axis(shape in prop::collection::vec(0usize..5, 1..4), ax in 0usize..3, offset in -5i64..5,
                                dt in any_dt(), s in 0i64..6) {
            let axis = ax % shape.len();
            let x = rand_tensor(dt, &shape, 1);
            let out = eval_checked(&Range { axis, offset }, &[&x]);
            prop_assert_eq!(out[0].to_vec::<i64>().unwrap(), (0..shape[axis] as i64).map(|k| k + offset).collect::<Vec<_>>());
            let f = TypedFact::new(dt, [Dim::n(2), Dim::affine(2, 1)]);
            let xs = rand_tensor(dt, &[2, 2 * s as usize + 1], 2);
            check_symbolic(&Range { axis: 1, offset }, &[f], s, &[&xs]);
        }
    }

    #[test]
    fn errors_and_reuse() {
        let x = Tensor::zeros(DType::F32, &[3]);
        assert!(matches!(
            eval_op(&Range { axis: 1, offset: 0 }, &[&x]),
            Err(OpError::Param(_))
        ));
        assert!(eval_op(&Range { axis: 0, offset: 0 }, &[&Tensor::scalar(1.0f32)]).is_err());
        assert!(eval_op(&Range { axis: 0, offset: 0 }, &[]).is_err());
        assert!(matches!(
            eval_op(
                &Range {
                    axis: 0,
                    offset: i64::MAX
                },
                &[&x]
            ),
            Err(OpError::Param(_))
        ));
        assert!(Range { axis: 0, offset: 0 }
            .frame_local_axis(&[&TypedFact::of(&x)], &[Some(0)])
            .is_none());
        assert_reuses_buffer(&Range { axis: 0, offset: 4 }, &[&x]);
    }
}
