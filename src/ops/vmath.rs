//! Vectorised `exp` for softmax rows: a Whisper window's attention takes
//! 54 M exponentials, and `f32::exp` one at a time costs more than the
//! matrix products around it.
//!
//! Cephes' `expf` (range reduction by ln 2 in two parts, a degree-6
//! polynomial, 2^n put into the exponent bits): within 2 ulp of `f32::exp`
//! over the range, 0 below it. AVX2 + FMA where the CPU has them, the
//! scalar `f32::exp` elsewhere.

/// `x[i] = exp(x[i] - shift)` for every element; returns their sum.
pub fn exp_shifted_sum(x: &mut [f32], shift: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the features were just detected.
            return unsafe { avx2::exp_shifted_sum(x, shift) };
        }
    }
    scalar(x, shift)
}

fn scalar(x: &mut [f32], shift: f32) -> f32 {
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - shift).exp();
        sum += *v;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    /// Below this `exp` is under f32's smallest normal: the result is 0.
    const LOW: f32 = -87.336_55;
    const HIGH: f32 = 88.376_26;
    const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        5.000_000_1e-1,
    ];

    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp8(x: __m256) -> __m256 {
        let under = _mm256_cmp_ps(x, _mm256_set1_ps(LOW), _CMP_LT_OQ);
        let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(LOW)), _mm256_set1_ps(HIGH));
        let n = _mm256_round_ps(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
        let mut p = _mm256_set1_ps(P[0]);
        for c in &P[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
        }
        let r2 = _mm256_mul_ps(r, r);
        let y = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0)));
        // 2^n through the exponent field
        let e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        let y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
        _mm256_andnot_ps(under, y)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_shifted_sum(x: &mut [f32], shift: f32) -> f32 {
        let s = _mm256_set1_ps(shift);
        let mut acc = _mm256_setzero_ps();
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: c holds exactly 8 floats.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
            let y = unsafe { exp8(_mm256_sub_ps(v, s)) };
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), y) };
            acc = _mm256_add_ps(acc, y);
        }
        let mut lanes = [0f32; 8];
        // SAFETY: lanes holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
        let mut sum: f32 = lanes.iter().sum();
        sum += super::scalar(chunks.into_remainder(), shift);
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_std_exp() {
        let mut xs: Vec<f32> = (-2000..2000).map(|i| i as f32 * 0.05).collect();
        xs.extend([f32::NEG_INFINITY, -1e30, -88.0, -87.0, 0.0, 88.0]);
        let want: Vec<f32> = xs.iter().map(|x| (x - 1.5).exp()).collect();
        let mut got = xs.clone();
        let sum = exp_shifted_sum(&mut got, 1.5);
        for ((g, w), x) in got.iter().zip(&want).zip(&xs) {
            let tol = 3.0 * f32::EPSILON * w.abs() + f32::MIN_POSITIVE;
            assert!((g - w).abs() <= tol, "exp({x} - 1.5): {g} vs {w}");
        }
        let total: f64 = want.iter().map(|&w| w as f64).sum();
        assert!(((sum as f64) - total).abs() <= 1e-5 * total);
    }
}
