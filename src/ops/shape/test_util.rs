//! Helpers shared by the tests of the data-movement and reduction ops.

use super::super::{eval_op, DType, Op, Tensor, TypedFact};
use proptest::prelude::*;

pub const ALL_DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I64, DType::Bool];
pub const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

pub fn any_dt() -> impl Strategy<Value = DType> {
    prop::sample::select(ALL_DTYPES.to_vec())
}

pub fn float_dt() -> impl Strategy<Value = DType> {
    prop::sample::select(FLOATS.to_vec())
}

/// Deterministic values: floats in [-2, 2), i64 in -20..20, bools mixed.
pub fn rand_tensor(dt: DType, shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 33) as f64 / (1u64 << 31) as f64) as f32
    };
    let v: Vec<f32> = (0..n).map(|_| next() * 4.0 - 2.0).collect();
    let shape = shape.to_vec();
    match dt {
        DType::I64 => {
            Tensor::from_vec(shape, v.iter().map(|x| (x * 10.0) as i64).collect()).unwrap()
        }
        DType::Bool => Tensor::from_vec(shape, v.iter().map(|&x| x > 0.0).collect()).unwrap(),
        _ => Tensor::from_vec(shape, v).unwrap().cast(dt),
    }
}

/// Evaluates `op` and checks that `output_facts` on the inputs' facts
/// describes exactly what `eval` produced.
pub fn eval_checked(op: &dyn Op, inputs: &[&Tensor]) -> Vec<Tensor> {
    let facts: Vec<TypedFact> = inputs.iter().map(|t| TypedFact::of(t)).collect();
    let refs: Vec<&TypedFact> = facts.iter().collect();
    let want = op
        .output_facts(&refs)
        .unwrap_or_else(|e| panic!("{op:?} facts of {facts:?}: {e}"));
    let outs = eval_op(op, inputs).unwrap_or_else(|e| panic!("{op:?} eval on {facts:?}: {e}"));
    let got: Vec<TypedFact> = outs.iter().map(TypedFact::of).collect();
    assert_eq!(want, got, "{op:?} on {facts:?}: facts vs eval");
    outs
}

/// Checks that symbolic facts, concretized at `s`, match `eval` on
/// tensors of that size (and returns the outputs).
pub fn check_symbolic(op: &dyn Op, sym: &[TypedFact], s: i64, inputs: &[&Tensor]) -> Vec<Tensor> {
    for (f, t) in sym.iter().zip(inputs) {
        assert_eq!(
            f.concretize(s),
            TypedFact::of(t),
            "test inputs do not fit their facts at S={s}"
        );
    }
    let refs: Vec<&TypedFact> = sym.iter().collect();
    let want = op
        .output_facts(&refs)
        .unwrap_or_else(|e| panic!("{op:?} facts of {sym:?}: {e}"));
    let outs = eval_checked(op, inputs);
    let got: Vec<TypedFact> = outs.iter().map(TypedFact::of).collect();
    let want: Vec<TypedFact> = want.iter().map(|f| f.concretize(s)).collect();
    assert_eq!(want, got, "{op:?} on {sym:?} at S={s}");
    outs
}

/// Row-major multi-index of flat index `i`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for ax in (0..shape.len()).rev() {
        idx[ax] = i % shape[ax].max(1);
        i /= shape[ax].max(1);
    }
    idx
}

pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

/// A second eval with the same shapes writes into the same buffer.
pub fn assert_reuses_buffer(op: &dyn Op, inputs: &[&Tensor]) {
    let mut outs = Vec::new();
    let mut scratch = super::super::Scratch::default();
    op.eval(inputs, &mut outs, &mut scratch).unwrap();
    let before: Vec<*const u8> = outs.iter().map(ptr).collect();
    op.eval(inputs, &mut outs, &mut scratch).unwrap();
    let after: Vec<*const u8> = outs.iter().map(ptr).collect();
    assert_eq!(before, after, "{op:?} reallocated its output");
}

fn ptr(t: &Tensor) -> *const u8 {
    match t.dtype() {
        DType::F32 => t.as_slice::<f32>().unwrap().as_ptr() as *const u8,
        DType::F16 => t.as_slice::<half::f16>().unwrap().as_ptr() as *const u8,
        DType::BF16 => t.as_slice::<half::bf16>().unwrap().as_ptr() as *const u8,
        DType::I64 => t.as_slice::<i64>().unwrap().as_ptr() as *const u8,
        DType::Bool => t.as_slice::<bool>().unwrap().as_ptr() as *const u8,
    }
}
