//! Cast: element type conversion with [`Tensor::cast`]'s rules, written into
//! the op's own output buffer.

use super::checks::input_count;
use super::shape::{elems, elems_mut, with_dtype};
use super::{contig, outputs_len, DType, Op, OpResult, Scratch, StorageElement, Tensor, TypedFact};
use crate::op_common;

/// Converts to `to`: floats round to nearest, floats to i64 truncate,
/// anything to bool is `!= 0`, bool to numbers is 0/1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cast {
    pub to: DType,
}

fn convert<I: StorageElement, O: StorageElement>(x: &[I], out: &mut [O]) {
    for (y, &v) in out.iter_mut().zip(x) {
        // every element type converts through f32, as `Tensor::cast` does
        *y = O::from_f32(v.to_f32());
    }
}

fn cast_into<I: StorageElement>(x: &Tensor, to: DType, out: &mut Tensor) -> OpResult<()> {
    let src = elems::<I>(x)?;
    if to == I::DTYPE {
        elems_mut::<I>(out)?.copy_from_slice(src);
        return Ok(());
    }
    with_dtype!(to, O => convert::<I, O>(src, elems_mut::<O>(out)?));
    Ok(())
}

impl Op for Cast {
    op_common!("Cast");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        Ok(vec![inputs[0].with_dtype(self.to)])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        let x = contig(inputs[0]);
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        out.ensure(self.to, x.shape());
        with_dtype!(x.dtype(), I => cast_into::<I>(&x, self.to, out))
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        axes.first().copied().flatten()
    }

    fn info(&self) -> String {
        format!("to {}", self.to)
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
        fn cast_agrees_with_tensor_cast(shape in prop::collection::vec(0usize..4, 0..4), from in any_dt(), to in any_dt(),
                                        seed in any::<u64>(), s in 0i64..5) {
            let x = rand_tensor(from, &shape, seed);
            let out = eval_checked(&Cast { to }, &[&x]);
            prop_assert_eq!(&out[0], &x.cast(to));
            let f = TypedFact::new(from, [Dim::s(), Dim::n(3)]);
            let xs = rand_tensor(from, &[s as usize, 3], seed);
            check_symbolic(&Cast { to }, &[f], s, &[&xs]);
        }
    }

    #[test]
    fn conversions_and_reuse() {
        let x = Tensor::from_slice(&[-1.7f32, 0.0, 2.5, f32::NAN]);
        let i = eval_op(&Cast { to: DType::I64 }, &[&x]).unwrap();
        assert_eq!(i[0].to_vec::<i64>().unwrap(), vec![-1, 0, 2, 0]);
        let b = eval_op(&Cast { to: DType::Bool }, &[&x]).unwrap();
        assert_eq!(
            b[0].to_vec::<bool>().unwrap(),
            vec![true, false, true, true]
        );
        let big = Tensor::from_slice(&[i64::MAX, -3]);
        assert_eq!(eval_op(&Cast { to: DType::I64 }, &[&big]).unwrap()[0], big);
        // a strided input
        let m = Tensor::from_vec(vec![2, 2], vec![1i64, 2, 3, 4])
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        assert_eq!(
            eval_op(&Cast { to: DType::F32 }, &[&m]).unwrap()[0]
                .to_vec::<f32>()
                .unwrap(),
            vec![1.0, 3.0, 2.0, 4.0]
        );
        for to in ALL_DTYPES {
            assert_reuses_buffer(&Cast { to }, &[&x]);
            assert_eq!(
                Cast { to }.frame_local_axis(&[&TypedFact::of(&x)], &[Some(0)]),
                Some(0)
            );
        }
        assert!(eval_op(&Cast { to: DType::F16 }, &[]).is_err());
    }
}
