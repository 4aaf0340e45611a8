//! Vectorised `exp` for softmax rows and exact GELU: a Whisper window's
//! attention takes 54 M exponentials and its MLPs 9 M GELUs, and the scalar
//! functions one at a time cost more than the matrix products around them.
//!
//! `exp` is Cephes' `expf` (range reduction by ln 2 in two parts, a
//! degree-6 polynomial, 2^n put into the exponent bits): within 2 ulp of
//! `f32::exp` over the range, 0 below it.
//!
//! GELU is `x Φ(x)` with `Φ(x) = 1 - h(t)` for `x > 0` and `h(t)` otherwise,
//! `t = |x| / √2`, `h(t) = erfc(t) / 2 = e^(-t²) s P(s)`, `s = 1 / (1 + t
//! 3/8)`: the form of Abramowitz and Stegun 7.1.26, but with our own
//! degree-8 `P`, fitted (Lawson's iteration on Chebyshev nodes) for 1.1e-8
//! relative error in `h` over `t` in [0, 9.5], below which `e^(-t²)`
//! underflows. Evaluated in f32 it stays within about 3 ulp of `h`
//! everywhere.
//!
//! AVX-512 or AVX2 + FMA where the CPU has them (the same operations, so
//! the same value for each element), the scalar `f32::exp` and `libm::erff`
//! elsewhere. `simd` is also what picks the matrix product kernel.

/// The widest vectors in use, detected once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) enum Simd {
    /// AVX-512F (with AVX2 and FMA).
    Avx512,
    /// AVX2 and FMA.
    Avx2,
    None,
}

/// AVX-512 where the CPU has it, unless `PULSED_NO_AVX512=1` (to compare
/// the two on one machine), else AVX2 + FMA, else none.
pub(crate) fn simd() -> Simd {
    static SIMD: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
    *SIMD.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            let no_512 = std::env::var_os("PULSED_NO_AVX512").is_some_and(|v| v == "1");
            if !no_512 && is_x86_feature_detected!("avx512f") {
                return Simd::Avx512;
            }
            return Simd::Avx2;
        }
        Simd::None
    })
}

/// `x[i] = exp(x[i] * scale - shift)` for every element, the product
/// rounded before the subtraction (the numbers of a row scaled first);
/// returns their sum.
pub fn exp_shifted_sum(x: &mut [f32], scale: f32, shift: f32) -> f32 {
    // SAFETY: `simd` names only features the CPU has.
    #[cfg(target_arch = "x86_64")]
    match simd() {
        Simd::Avx512 => return unsafe { avx512::exp_shifted_sum(x, scale, shift) },
        Simd::Avx2 => return unsafe { avx2::exp_shifted_sum(x, scale, shift) },
        Simd::None => {}
    }
    scalar(x, scale, shift)
}

/// The largest element, NaN skipped as `f32::max` does; -inf when empty.
pub fn max(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd() != Simd::None {
        // SAFETY: `simd` names only features the CPU has.
        return unsafe { avx2::max(x) };
    }
    x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

/// `out[i] = gelu(x[i])`, exact GELU (with the error function), for the
/// first `min(x.len(), out.len())` elements.
pub fn gelu(x: &[f32], out: &mut [f32]) {
    // SAFETY: `simd` names only features the CPU has.
    #[cfg(target_arch = "x86_64")]
    match simd() {
        Simd::Avx512 => return unsafe { avx512::gelu(x, out) },
        Simd::Avx2 => return unsafe { avx2::gelu(x, out) },
        Simd::None => {}
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = gelu_scalar(v);
    }
}

/// The scalar reference: `0.5 x (1 + erf(x / √2))`.
#[inline]
pub fn gelu_scalar(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
}

fn scalar(x: &mut [f32], scale: f32, shift: f32) -> f32 {
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v * scale - shift).exp();
        sum += *v;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    pub(super) const LOG2E: f32 = std::f32::consts::LOG2_E;
    pub(super) const LN2_HI: f32 = 0.693_359_4;
    pub(super) const LN2_LO: f32 = -2.121_944_4e-4;
    /// Below this `exp` is under f32's smallest normal: the result is 0.
    pub(super) const LOW: f32 = -87.336_55;
    /// Above this (past ln f32::MAX = 88.72) the result is inf.
    pub(super) const HIGH: f32 = 88.8;
    pub(super) const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        5.0e-1,
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
        // 2^n through the exponent field, in two factors as n may be 128
        let bias = _mm256_set1_epi32(127);
        let n = _mm256_cvtps_epi32(n);
        let n1 = _mm256_min_epi32(n, bias);
        let e1 = _mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23);
        let e2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(n, n1), bias), 23);
        let y = _mm256_mul_ps(
            _mm256_mul_ps(y, _mm256_castsi256_ps(e1)),
            _mm256_castsi256_ps(e2),
        );
        _mm256_andnot_ps(under, y)
    }

    /// `s = 1 / (1 + GELU_P t)`; 3/8 is exact in f32.
    pub(super) const GELU_P: f32 = 0.375;
    /// `P(s)` from degree 0 up (see the module doc).
    pub(super) const GELU_C: [f32; 9] = [
        0.105_807_21,
        0.105_316_74,
        0.102_715_23,
        0.060_519_39,
        0.137_422_28,
        -0.115_538_52,
        0.216_947_17,
        -0.144_037_83,
        0.030_848_334,
    ];

    #[target_feature(enable = "avx2,fma")]
    unsafe fn gelu8(x: __m256) -> __m256 {
        let one = _mm256_set1_ps(1.0);
        let ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0), x);
        // the same rounded t as the scalar `erff(x / √2)`
        let t = _mm256_mul_ps(ax, _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
        let s = _mm256_div_ps(one, _mm256_fmadd_ps(t, _mm256_set1_ps(GELU_P), one));
        let mut p = _mm256_set1_ps(GELU_C[8]);
        for c in GELU_C[..8].iter().rev() {
            p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(*c));
        }
        // e^(-t²) with t² = t2 + lo split exactly, e^(-lo) ~ 1 - lo
        // (past 10, e^(-t²) is 0 and t² may overflow)
        let tc = _mm256_min_ps(t, _mm256_set1_ps(10.0));
        let t2 = _mm256_mul_ps(tc, tc);
        let lo = _mm256_fmsub_ps(tc, tc, t2);
        let e = unsafe { exp8(_mm256_sub_ps(_mm256_setzero_ps(), t2)) };
        let e = _mm256_fnmadd_ps(e, lo, e);
        let h = _mm256_mul_ps(_mm256_mul_ps(e, s), p);
        let pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
        let phi = _mm256_blendv_ps(h, _mm256_sub_ps(one, h), pos);
        _mm256_mul_ps(x, phi)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gelu(x: &[f32], out: &mut [f32]) {
        let n = x.len().min(out.len());
        let (x, out) = (&x[..n], &mut out[..n]);
        let mut xs = x.chunks_exact(8);
        let mut os = out.chunks_exact_mut(8);
        for (xc, oc) in (&mut xs).zip(&mut os) {
            // SAFETY: both chunks hold exactly 8 floats.
            unsafe { _mm256_storeu_ps(oc.as_mut_ptr(), gelu8(_mm256_loadu_ps(xc.as_ptr()))) };
        }
        // the tail through the same lanes, so no element depends on its position
        let (xr, or) = (xs.remainder(), os.into_remainder());
        if !xr.is_empty() {
            let mut lanes = [0f32; 8];
            lanes[..xr.len()].copy_from_slice(xr);
            // SAFETY: lanes holds 8 floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), gelu8(_mm256_loadu_ps(lanes.as_ptr()))) };
            or.copy_from_slice(&lanes[..or.len()]);
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_shifted_sum(x: &mut [f32], scale: f32, shift: f32) -> f32 {
        let (k, s) = (_mm256_set1_ps(scale), _mm256_set1_ps(shift));
        let mut acc = _mm256_setzero_ps();
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: c holds exactly 8 floats.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
            let y = unsafe { exp8(_mm256_sub_ps(_mm256_mul_ps(v, k), s)) };
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), y) };
            acc = _mm256_add_ps(acc, y);
        }
        let mut lanes = [0f32; 8];
        // SAFETY: lanes holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
        let mut sum: f32 = lanes.iter().sum();
        sum += super::scalar(chunks.into_remainder(), scale, shift);
        sum
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn max(x: &[f32]) -> f32 {
        // four chains: max has a latency of several cycles
        let mut m = [_mm256_set1_ps(f32::NEG_INFINITY); 4];
        let mut chunks = x.chunks_exact(32);
        for c in &mut chunks {
            for (i, m) in m.iter_mut().enumerate() {
                // SAFETY: c holds 32 floats; max_ps(v, m) keeps m where v is NaN
                *m = _mm256_max_ps(unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * i)) }, *m);
            }
        }
        let m = _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3]));
        let mut lanes = [0f32; 8];
        // SAFETY: lanes holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), m) };
        let rest = chunks.remainder().iter().chain(&lanes);
        rest.fold(f32::NEG_INFINITY, |m, &v| m.max(v))
    }
}

/// `avx2`'s functions on 16 lanes, operation for operation.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::avx2::{GELU_C, GELU_P, HIGH, LN2_HI, LN2_LO, LOG2E, LOW, P};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f,avx2,fma")]
    fn exp16(x: __m512) -> __m512 {
        let under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(LOW), _CMP_LT_OQ);
        let x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(LOW)), _mm512_set1_ps(HIGH));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
        );
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
        let mut p = _mm512_set1_ps(P[0]);
        for c in &P[1..] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
        }
        let r2 = _mm512_mul_ps(r, r);
        let y = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0)));
        let bias = _mm512_set1_epi32(127);
        let n = _mm512_cvtps_epi32(n);
        let n1 = _mm512_min_epi32(n, bias);
        let e1 = _mm512_slli_epi32::<23>(_mm512_add_epi32(n1, bias));
        let e2 = _mm512_slli_epi32::<23>(_mm512_add_epi32(_mm512_sub_epi32(n, n1), bias));
        let y = _mm512_mul_ps(
            _mm512_mul_ps(y, _mm512_castsi512_ps(e1)),
            _mm512_castsi512_ps(e2),
        );
        _mm512_maskz_mov_ps(!under, y)
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn exp_shifted_sum(x: &mut [f32], scale: f32, shift: f32) -> f32 {
        let (k, s) = (_mm512_set1_ps(scale), _mm512_set1_ps(shift));
        let mut acc = _mm512_setzero_ps();
        let mut chunks = x.chunks_exact_mut(16);
        for c in &mut chunks {
            // SAFETY: c holds exactly 16 floats.
            let v = unsafe { _mm512_loadu_ps(c.as_ptr()) };
            let y = exp16(_mm512_sub_ps(_mm512_mul_ps(v, k), s));
            unsafe { _mm512_storeu_ps(c.as_mut_ptr(), y) };
            acc = _mm512_add_ps(acc, y);
        }
        // the rest as `avx2` has it: 8 lanes, then one at a time
        let rest = unsafe { super::avx2::exp_shifted_sum(chunks.into_remainder(), scale, shift) };
        _mm512_reduce_add_ps(acc) + rest
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    fn gelu16(x: __m512) -> __m512 {
        let one = _mm512_set1_ps(1.0);
        let t = _mm512_mul_ps(
            _mm512_abs_ps(x),
            _mm512_set1_ps(std::f32::consts::FRAC_1_SQRT_2),
        );
        let s = _mm512_div_ps(one, _mm512_fmadd_ps(t, _mm512_set1_ps(GELU_P), one));
        let mut p = _mm512_set1_ps(GELU_C[8]);
        for c in GELU_C[..8].iter().rev() {
            p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(*c));
        }
        let tc = _mm512_min_ps(t, _mm512_set1_ps(10.0));
        let t2 = _mm512_mul_ps(tc, tc);
        let lo = _mm512_fmsub_ps(tc, tc, t2);
        let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), t2));
        let e = _mm512_fnmadd_ps(e, lo, e);
        let h = _mm512_mul_ps(_mm512_mul_ps(e, s), p);
        let pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
        let phi = _mm512_mask_blend_ps(pos, h, _mm512_sub_ps(one, h));
        _mm512_mul_ps(x, phi)
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn gelu(x: &[f32], out: &mut [f32]) {
        let n = x.len().min(out.len());
        for i in (0..n).step_by(16) {
            let mask = ((1u32 << (n - i).min(16)) - 1) as __mmask16;
            // SAFETY: the mask keeps every lane inside both slices.
            unsafe {
                let v = _mm512_maskz_loadu_ps(mask, x.as_ptr().add(i));
                _mm512_mask_storeu_ps(out.as_mut_ptr().add(i), mask, gelu16(v));
            }
        }
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
        exp_shifted_sum(&mut got, 1.0, 1.5);
        for ((g, w), x) in got.iter().zip(&want).zip(&xs) {
            let tol = 3.0 * f32::EPSILON * w.abs() + f32::MIN_POSITIVE;
            assert!(g == w || (g - w).abs() <= tol, "exp({x} - 1.5): {g} vs {w}");
        }
        // the sum overflows with the largest: check it below them
        let mut sub: Vec<f32> = xs.iter().copied().filter(|&x| x < 40.0).collect();
        let sum = exp_shifted_sum(&mut sub, 1.0, 1.5);
        let total: f64 = xs
            .iter()
            .filter(|&&x| x < 40.0)
            .map(|&x| (x as f64 - 1.5).exp())
            .sum();
        assert!(((sum as f64) - total).abs() <= 1e-5 * total);
    }

    /// Scaling inside equals scaling the row first, bit for bit.
    #[test]
    fn scaled_exp_equals_scaling_first() {
        let xs: Vec<f32> = (0..1003)
            .map(|i| ((i * 37) % 1000) as f32 * 0.0173 - 9.0)
            .collect();
        let scale = 0.353_553_38;
        let mut scaled: Vec<f32> = xs.iter().map(|x| x * scale).collect();
        let shift = max(&scaled);
        assert_eq!(shift, max(&xs) * scale);
        let want = exp_shifted_sum(&mut scaled, 1.0, shift);
        let mut got = xs.clone();
        assert_eq!(exp_shifted_sum(&mut got, scale, shift), want);
        assert_eq!(got, scaled);
    }

    #[test]
    fn max_skips_nan() {
        for len in [0, 1, 7, 32, 45, 100] {
            let mut xs: Vec<f32> = (0..len).map(|i| ((i * 13) % 17) as f32 - 20.0).collect();
            let want = xs.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            assert_eq!(max(&xs), want);
            xs.iter_mut().step_by(3).for_each(|v| *v = f32::NAN);
            let want = xs.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            assert_eq!(max(&xs).to_bits(), want.to_bits(), "len {len}");
        }
    }

    /// The AVX-512 lanes give the AVX2 lanes' value for every element.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_equals_avx2() {
        if simd() != Simd::Avx512 {
            return;
        }
        let xs = gelu_inputs();
        let (mut g16, mut g8) = (vec![0f32; xs.len()], vec![0f32; xs.len()]);
        // SAFETY: `simd` found AVX-512F, AVX2 and FMA.
        unsafe {
            avx512::gelu(&xs, &mut g16);
            avx2::gelu(&xs, &mut g8);
        }
        for ((x, a), b) in xs.iter().zip(&g16).zip(&g8) {
            assert_eq!(a.to_bits(), b.to_bits(), "gelu({x})");
        }
        for len in [1003, 16, 15, 7] {
            let xs: Vec<f32> = (0..len)
                .map(|i| ((i * 37) % 1000) as f32 * 0.18 - 100.0)
                .collect();
            let (mut e16, mut e8) = (xs.clone(), xs.clone());
            // SAFETY: as above.
            let (s16, s8) = unsafe {
                let s16 = avx512::exp_shifted_sum(&mut e16, 0.9, 1.5);
                (s16, avx2::exp_shifted_sum(&mut e8, 0.9, 1.5))
            };
            for ((x, a), b) in xs.iter().zip(&e16).zip(&e8) {
                assert_eq!(a.to_bits(), b.to_bits(), "exp({x} * 0.9 - 1.5)");
            }
            // the sums differ in order only
            assert!((s16 - s8).abs() <= 1e-6 * s8, "{s16} vs {s8}");
        }
    }

    /// Every 1/64 from -16 to 16 and a thousand points per unit on [-6, 6],
    /// odd lengths for the tail, and the special values.
    fn gelu_inputs() -> Vec<f32> {
        let mut xs: Vec<f32> = (-1024..=1024).map(|i| i as f32 / 64.0).collect();
        xs.extend((-6000..=6000).map(|i| i as f32 * 1e-3 + 1.7e-4));
        xs.extend([
            0.0, -0.0, 1e-30, -1e-30, 1e-7, -1e-7, 30.0, -30.0, 1e30, -1e30,
        ]);
        xs.extend([
            f32::MIN_POSITIVE,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ]);
        xs
    }

    #[test]
    fn gelu_matches_erff() {
        let xs = gelu_inputs();
        for len in [xs.len(), xs.len() - 1, 7, 3] {
            let x = &xs[xs.len() - len..];
            let mut got = vec![0f32; len];
            gelu(x, &mut got);
            for (&x, &g) in x.iter().zip(&got) {
                let w = gelu_scalar(x);
                if w.is_nan() {
                    assert!(g.is_nan(), "gelu({x}) = {g}, want NaN");
                    continue;
                }
                let tol = 4e-7 * x.abs().max(1.0);
                if g != w {
                    eprintln!("DIFF {x} {:e}", (g - w).abs() / x.abs().max(1.0));
                }
                assert!(
                    g == w || (g - w).abs() <= tol,
                    "gelu({x}): {g} vs erff's {w}"
                );
            }
        }
    }

    /// Against GELU in f64 (libm's `erfc`, no cancellation in the tail)
    /// at the same f32-rounded `t = |x| / √2` as `erff` gets: the
    /// rounding of `t` alone moves `e^(-t²)` by up to `t²` half-ulp.
    #[test]
    fn gelu_relative_error() {
        let xs: Vec<f32> = gelu_inputs()
            .into_iter()
            .filter(|x| x.abs() <= 13.0)
            .collect();
        let mut got = vec![0f32; xs.len()];
        gelu(&xs, &mut got);
        let mut worst = 0f64;
        for (&x, &g) in xs.iter().zip(&got) {
            let t = (x.abs() * std::f32::consts::FRAC_1_SQRT_2) as f64;
            let w = 0.5 * x as f64 * libm::erfc(if x > 0.0 { -t } else { t });
            if w.abs() < 1e-36 {
                continue;
            }
            worst = worst.max((g as f64 - w).abs() / w.abs());
        }
        assert!(
            worst <= 4.0 * f32::EPSILON as f64,
            "worst relative error {worst:e}"
        );
    }
}
