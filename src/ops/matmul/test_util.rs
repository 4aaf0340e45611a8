//! Helpers shared by the matmul and conv tests: seeded data and closeness
//! checks against f64 references.

use crate::ops::{DType, Tensor};

/// Values in [-1, 1) from a seeded LCG, stored as `dt` (rounded).
pub fn tensor(dt: DType, shape: &[usize], seed: u64) -> Tensor {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let v: Vec<f32> = (0..shape.iter().product::<usize>())
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), v).unwrap().cast(dt)
}

/// Relative tolerance against the sum of absolute terms of each output:
/// f32 1e-4 (long sums in a different order than the f64 reference),
/// f16/bf16 2e-2 (the output is rounded to the narrow type).
pub fn rtol(dt: DType) -> f64 {
    if dt == DType::F32 {
        1e-4
    } else {
        2e-2
    }
}

/// `got` (any float dtype) against `want`, where `mag[i]` is the sum of
/// the absolute values of the terms that make `want[i]`.
pub fn assert_close(got: &Tensor, want: &[f64], mag: &[f64]) {
    let g = got.to_f32_vec();
    assert_eq!(g.len(), want.len(), "element count");
    let tol = rtol(got.dtype());
    for (i, ((&g, &w), &m)) in g.iter().zip(want).zip(mag).enumerate() {
        let err = (g as f64 - w).abs();
        assert!(
            err <= tol * m + 1e-6,
            "element {i}: got {g}, want {w} (|terms| {m}, {})",
            got.dtype()
        );
    }
}
