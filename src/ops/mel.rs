//! Mel filterbanks (as torchaudio builds them) and the log-mel projection.

use std::borrow::Cow;

use half::{bf16, f16};

use super::checks::{float, input_count, rank, rank_at_least};
use super::{
    contig, outputs_len, DType, Op, OpError, OpResult, Scratch, StorageElement, Tensor, TypedFact,
};
use crate::op_common;

/// The Hz <-> mel mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MelScale {
    /// `2595 * log10(1 + f / 700)`.
    Htk,
    /// Linear below 1 kHz, logarithmic above (Slaney's Auditory Toolbox).
    Slaney,
}

const SLANEY_F_SP: f64 = 200.0 / 3.0;
const SLANEY_MIN_LOG_HZ: f64 = 1000.0;
const SLANEY_MIN_LOG_MEL: f64 = SLANEY_MIN_LOG_HZ / SLANEY_F_SP;

fn slaney_logstep() -> f64 {
    6.4f64.ln() / 27.0
}

impl MelScale {
    /// Frequency in Hz to mels.
    pub fn hz_to_mel(self, f: f64) -> f64 {
        match self {
            MelScale::Htk => 2595.0 * (1.0 + f / 700.0).log10(),
            MelScale::Slaney if f >= SLANEY_MIN_LOG_HZ => {
                SLANEY_MIN_LOG_MEL + (f / SLANEY_MIN_LOG_HZ).ln() / slaney_logstep()
            }
            MelScale::Slaney => f / SLANEY_F_SP,
        }
    }

    /// Mels to frequency in Hz.
    pub fn mel_to_hz(self, m: f64) -> f64 {
        match self {
            MelScale::Htk => 700.0 * (10f64.powf(m / 2595.0) - 1.0),
            MelScale::Slaney if m >= SLANEY_MIN_LOG_MEL => {
                SLANEY_MIN_LOG_HZ * (slaney_logstep() * (m - SLANEY_MIN_LOG_MEL)).exp()
            }
            MelScale::Slaney => SLANEY_F_SP * m,
        }
    }
}

/// `linspace(lo, hi, n)` as torch computes it: from both ends towards the middle.
fn linspace(lo: f64, hi: f64, n: usize, i: usize) -> f64 {
    if n <= 1 {
        return lo;
    }
    let step = (hi - lo) / (n - 1) as f64;
    if i < n / 2 {
        lo + step * i as f64
    } else {
        hi - step * (n - 1 - i) as f64
    }
}

/// A `[n_freqs, n_mels]` f32 triangular filterbank, the same as
/// `torchaudio.functional.melscale_fbanks(n_freqs, f_min, f_max, n_mels,
/// sample_rate, norm="slaney" if slaney_norm else None, mel_scale=scale)`.
///
/// Bin `k` is at `k * (sample_rate / 2) / (n_freqs - 1)` Hz (integer
/// `sample_rate / 2`, as torchaudio); the `n_mels + 2` filter edges are
/// equally spaced in mels from `f_min` to `f_max`. With `slaney_norm` each
/// triangle is scaled by `2 / (its width in Hz)` (equal area).
///
/// ```
/// use pulsed::ops::mel::{mel_filterbank, MelScale};
/// let fb = mel_filterbank(201, 0.0, 8000.0, 80, 16000, MelScale::Htk, false).unwrap();
/// assert_eq!(fb.shape(), &[201, 80]);
/// ```
pub fn mel_filterbank(
    n_freqs: usize,
    f_min: f32,
    f_max: f32,
    n_mels: usize,
    sample_rate: u32,
    scale: MelScale,
    slaney_norm: bool,
) -> OpResult<Tensor> {
    if n_freqs == 0 || n_mels == 0 || sample_rate == 0 {
        return Err(OpError::Param(format!(
            "mel filterbank needs n_freqs, n_mels and sample_rate > 0, got {n_freqs}, {n_mels}, {sample_rate}"
        )));
    }
    if !(f_min.is_finite() && f_max.is_finite() && f_min >= 0.0 && f_min < f_max) {
        return Err(OpError::Param(format!(
            "mel filterbank needs 0 <= f_min < f_max, got {f_min} and {f_max}"
        )));
    }
    let nyquist = (sample_rate / 2) as f64;
    let (m_min, m_max) = (scale.hz_to_mel(f_min as f64), scale.hz_to_mel(f_max as f64));
    let f_pts: Vec<f64> = (0..n_mels + 2)
        .map(|i| scale.mel_to_hz(linspace(m_min, m_max, n_mels + 2, i)))
        .collect();
    let mut fb = vec![0f32; n_freqs * n_mels];
    for k in 0..n_freqs {
        let f = linspace(0.0, nyquist, n_freqs, k);
        for m in 0..n_mels {
            let (lo, mid, hi) = (f_pts[m], f_pts[m + 1], f_pts[m + 2]);
            let down = (f - lo) / (mid - lo);
            let up = (hi - f) / (hi - mid);
            let mut v = down.min(up).max(0.0);
            if slaney_norm {
                v *= 2.0 / (hi - lo);
            }
            fb[k * n_mels + m] = v as f32;
        }
    }
    Tensor::from_vec(vec![n_freqs, n_mels], fb)
}

fn check_eps(eps: f32) -> OpResult<()> {
    if !eps.is_finite() {
        return Err(OpError::Param(format!(
            "log epsilon must be finite, got {eps}"
        )));
    }
    Ok(())
}

/// `ln(power @ fb + eps)`: power spectra `[..., bins]` through a filterbank
/// `[bins, mels]` to log-mel features `[..., mels]`, in the power's dtype
/// (f16/bf16 computed in f32). Frame-local on every axis but the last.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogMel {
    pub eps: f32,
}

impl Op for LogMel {
    op_common!("LogMel");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        check_eps(self.eps)?;
        input_count(inputs, 2)?;
        let (p, fb) = (inputs[0], inputs[1]);
        rank_at_least(p, 0, 1)?;
        rank(fb, 1, 2)?;
        float(p, 0)?;
        float(fb, 1)?;
        if fb.shape.contains(&super::Dim::n(0)) {
            return Err(OpError::Empty(format!("filterbank {fb}")));
        }
        if p.shape[p.rank() - 1] != fb.shape[0] {
            return Err(OpError::Shape(format!(
                "power {p} has not the filterbank's {} bins ({fb})",
                fb.shape[0]
            )));
        }
        let mut shape = p.shape.clone();
        *shape.last_mut().expect("rank checked") = fb.shape[1];
        Ok(vec![TypedFact::dt_shape(p.dtype, &shape)])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        check_eps(self.eps)?;
        input_count(inputs, 2)?;
        let (p, fb) = (inputs[0], inputs[1]);
        if p.rank() < 1 {
            return Err(OpError::Rank {
                input: 0,
                expected: ">= 1".into(),
                got: p.rank(),
            });
        }
        if fb.rank() != 2 {
            return Err(OpError::Rank {
                input: 1,
                expected: "2".into(),
                got: fb.rank(),
            });
        }
        for (i, t) in [p, fb].iter().enumerate() {
            if !t.dtype().is_float() {
                return Err(OpError::DType {
                    input: i,
                    expected: "a float type".into(),
                    got: t.dtype(),
                });
            }
        }
        let (bins, mels) = (fb.shape()[0], fb.shape()[1]);
        if bins == 0 || mels == 0 {
            return Err(OpError::Empty(format!("filterbank {:?}", fb.shape())));
        }
        if p.shape()[p.rank() - 1] != bins {
            return Err(OpError::Shape(format!(
                "power {:?} has not the filterbank's {bins} bins ({:?})",
                p.shape(),
                fb.shape()
            )));
        }
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        let mut shape = [0usize; super::broadcast::MAX_RANK];
        let r = p.rank();
        if r > shape.len() {
            return Err(OpError::Shape(format!("rank above {}", shape.len())));
        }
        shape[..r].copy_from_slice(p.shape());
        shape[r - 1] = mels;
        out.ensure(p.dtype(), &shape[..r]);
        if p.is_empty() {
            // nothing to compute (and empty views may not read as contiguous)
            return Ok(());
        }
        let fb = f32_of(fb);
        let fbv = fb.as_slice::<f32>()?;
        let p = contig(p);
        let acc = scratch.one(mels);
        match p.dtype() {
            DType::F32 => log_mel::<f32>(self.eps, &p, fbv, bins, mels, out, acc),
            DType::F16 => log_mel::<f16>(self.eps, &p, fbv, bins, mels, out, acc),
            DType::BF16 => log_mel::<bf16>(self.eps, &p, fbv, bins, mels, out, acc),
            dt => Err(OpError::DType {
                input: 0,
                expected: "a float type".into(),
                got: dt,
            }),
        }
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        // any axis of the power but the bins; the filterbank must not stream
        match (inputs.first(), axes) {
            (Some(p), [Some(a), None]) if *a + 1 < p.rank() => Some(*a),
            _ => None,
        }
    }

    fn info(&self) -> String {
        format!("eps {}", self.eps)
    }
}

fn f32_of(t: &Tensor) -> Cow<'_, Tensor> {
    if t.dtype() == DType::F32 {
        contig(t)
    } else {
        Cow::Owned(t.cast(DType::F32))
    }
}

fn log_mel<T: StorageElement>(
    eps: f32,
    p: &Tensor,
    fb: &[f32],
    bins: usize,
    mels: usize,
    out: &mut Tensor,
    acc: &mut [f32],
) -> OpResult<()> {
    let pv = p.as_slice::<T>()?;
    let ov = out.as_slice_mut::<T>()?;
    for (r, orow) in ov.chunks_exact_mut(mels).enumerate() {
        acc.fill(0.0);
        let prow = &pv[r * bins..(r + 1) * bins];
        for (k, &pk) in prow.iter().enumerate() {
            let pk = pk.to_f32();
            for (a, &w) in acc.iter_mut().zip(&fb[k * mels..(k + 1) * mels]) {
                *a += pk * w;
            }
        }
        for (o, &a) in orow.iter_mut().zip(acc.iter()) {
            *o = T::from_f32((a + eps).ln());
        }
    }
    Ok(())
}

/// `ln(x + eps)` element-wise on floats; frame-local on every axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Log {
    pub eps: f32,
}

fn log_typed<T: StorageElement>(eps: f32, x: &Tensor, out: &mut Tensor) -> OpResult<()> {
    let xv = x.as_slice::<T>()?;
    for (o, &v) in out.as_slice_mut::<T>()?.iter_mut().zip(xv) {
        *o = T::from_f32((v.to_f32() + eps).ln());
    }
    Ok(())
}

impl Op for Log {
    op_common!("Log");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        check_eps(self.eps)?;
        input_count(inputs, 1)?;
        float(inputs[0], 0)?;
        Ok(vec![inputs[0].clone()])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        check_eps(self.eps)?;
        input_count(inputs, 1)?;
        let x = contig(inputs[0]);
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        match x.dtype() {
            DType::F32 | DType::F16 | DType::BF16 => out.ensure(x.dtype(), x.shape()),
            dt => {
                return Err(OpError::DType {
                    input: 0,
                    expected: "a float type".into(),
                    got: dt,
                })
            }
        }
        if x.is_empty() {
            return Ok(());
        }
        match x.dtype() {
            DType::F32 => log_typed::<f32>(self.eps, &x, out),
            DType::F16 => log_typed::<f16>(self.eps, &x, out),
            _ => log_typed::<bf16>(self.eps, &x, out),
        }
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        axes.first().copied().flatten()
    }

    fn info(&self) -> String {
        format!("eps {}", self.eps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{eval_op, Dim};
    use proptest::prelude::*;

    fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32
            })
            .collect()
    }

    #[test]
    fn filterbank_matches_the_shipped_torchaudio_one() {
        let w = crate::weights::Weights::load(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/models/pulsed-en-ctc/model.safetensors"
        ))
        .unwrap();
        let want = w.f32("frontend.mel_fb", &[201, 80]).unwrap();
        let got = mel_filterbank(201, 0.0, 8000.0, 80, 16000, MelScale::Htk, false).unwrap();
        // stored as f16: values in [0, 1] are rounded by at most 2^-12 (plus f32 noise)
        let d = got.max_abs_diff(&want).unwrap();
        assert!(d <= 1e-3, "max abs diff {d}");
        assert!(
            want.to_f32_vec().iter().any(|&v| v > 0.5),
            "the reference is not trivial"
        );
    }

    #[test]
    fn filterbank_triangles_and_slaney_area() {
        let fb = mel_filterbank(257, 0.0, 8000.0, 40, 16000, MelScale::Slaney, true).unwrap();
        let v = fb.to_vec::<f32>().unwrap();
        // equal-area: each triangle (2/width in Hz high) integrates to ~1 over Hz
        let df = 8000.0 / 256.0;
        for m in 5..40 {
            let area: f32 = (0..257).map(|k| v[k * 40 + m] * df).sum();
            assert!((area - 1.0).abs() < 0.05, "filter {m} area {area}");
        }
        assert!(v.iter().all(|&x| x >= 0.0));
        // mel scales invert each other
        for s in [MelScale::Htk, MelScale::Slaney] {
            for f in [0.0, 300.0, 999.0, 1000.0, 4321.0, 8000.0] {
                assert!((s.mel_to_hz(s.hz_to_mel(f)) - f).abs() < 1e-6 * (1.0 + f));
            }
        }
        assert!((MelScale::Slaney.hz_to_mel(1000.0) - 15.0).abs() < 1e-12);
    }

    #[test]
    fn bad_filterbank_params_are_errors() {
        assert!(mel_filterbank(0, 0.0, 8000.0, 80, 16000, MelScale::Htk, false).is_err());
        assert!(mel_filterbank(201, 0.0, 8000.0, 0, 16000, MelScale::Htk, false).is_err());
        assert!(mel_filterbank(201, 0.0, 8000.0, 80, 0, MelScale::Htk, false).is_err());
        assert!(mel_filterbank(201, 8000.0, 8000.0, 80, 16000, MelScale::Htk, false).is_err());
        assert!(mel_filterbank(201, -1.0, 8000.0, 80, 16000, MelScale::Htk, false).is_err());
        assert!(mel_filterbank(201, 0.0, f32::NAN, 80, 16000, MelScale::Htk, false).is_err());
    }

    /// `ln(sum_k p[r,k] fb[k,m] + eps)` in f64.
    fn naive_log_mel(p: &[f32], fb: &[f32], bins: usize, mels: usize, eps: f32) -> Vec<f64> {
        let rows = p.len() / bins;
        let mut out = Vec::new();
        for r in 0..rows {
            for m in 0..mels {
                let s: f64 = (0..bins)
                    .map(|k| p[r * bins + k] as f64 * fb[k * mels + m] as f64)
                    .sum();
                out.push((s + eps as f64).ln());
            }
        }
        out
    }

    #[test]
    fn log_mel_matches_naive_projection() {
        let fb = mel_filterbank(201, 0.0, 8000.0, 80, 16000, MelScale::Htk, false).unwrap();
        let p = Tensor::from_vec(
            vec![2, 7, 201],
            rand_vec(2 * 7 * 201, 3)
                .iter()
                .map(|v| v * v * 10.0)
                .collect(),
        )
        .unwrap();
        let want = naive_log_mel(&p.to_vec().unwrap(), &fb.to_vec().unwrap(), 201, 80, 1e-6);
        let got = eval_op(&LogMel { eps: 1e-6 }, &[&p, &fb]).unwrap();
        assert_eq!(got[0].shape(), &[2, 7, 80]);
        // f32: sums of positive terms, then ln: 1e-5 absolute on the log
        for (g, w) in got[0].to_vec::<f32>().unwrap().iter().zip(&want) {
            assert!(
                (*g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{g} vs {w}"
            );
        }
        // f16 and bf16 inputs: 1e-2 relative on the log
        for dt in [DType::F16, DType::BF16] {
            let pc = p.cast(dt);
            let want = naive_log_mel(&pc.to_f32_vec(), &fb.to_vec().unwrap(), 201, 80, 1e-6);
            let got = eval_op(&LogMel { eps: 1e-6 }, &[&pc, &fb.cast(dt)]).unwrap();
            assert_eq!(got[0].dtype(), dt);
            for (g, w) in got[0].to_f32_vec().iter().zip(&want) {
                assert!(
                    (*g as f64 - w).abs() <= 1e-2 * (1.0 + w.abs()),
                    "{dt}: {g} vs {w}"
                );
            }
        }
        let x = Tensor::from_slice(&[0.0f32, 1.0, 2.5]);
        let y = eval_op(&Log { eps: 0.5 }, &[&x]).unwrap();
        let want = [0.5f32.ln(), 1.5f32.ln(), 3.0f32.ln()];
        assert!(y[0].close_to(&Tensor::from_slice(&want), 1e-6, 1e-6));
    }

    #[test]
    fn bad_inputs_are_errors() {
        let p = Tensor::zeros(DType::F32, &[4, 6]);
        let fb = Tensor::zeros(DType::F32, &[6, 3]);
        let lm = LogMel { eps: 1e-6 };
        let cases: Vec<Vec<Tensor>> = vec![
            vec![p.clone()],
            vec![Tensor::scalar(1.0f32), fb.clone()],
            vec![p.clone(), Tensor::zeros(DType::F32, &[6])],
            vec![p.clone(), Tensor::zeros(DType::F32, &[5, 3])],
            vec![p.clone(), Tensor::zeros(DType::F32, &[6, 0])],
            vec![p.cast(DType::I64), fb.clone()],
            vec![p.clone(), fb.cast(DType::Bool)],
        ];
        for ins in &cases {
            let refs: Vec<&Tensor> = ins.iter().collect();
            assert!(eval_op(&lm, &refs).is_err(), "eval accepted {ins:?}");
            let facts: Vec<TypedFact> = ins.iter().map(TypedFact::of).collect();
            let frefs: Vec<&TypedFact> = facts.iter().collect();
            assert!(
                lm.output_facts(&frefs).is_err(),
                "output_facts accepted {facts:?}"
            );
        }
        assert!(eval_op(&LogMel { eps: f32::NAN }, &[&p, &fb]).is_err());
        assert!(eval_op(&Log { eps: 0.0 }, &[&p.cast(DType::I64)]).is_err());
        assert!(Log { eps: 0.0 }
            .output_facts(&[&TypedFact::new(DType::Bool, [3])])
            .is_err());
        assert!(eval_op(&Log { eps: f32::INFINITY }, &[&p]).is_err());
        assert!(eval_op(&Log { eps: 0.0 }, &[&p, &p]).is_err());
    }

    #[test]
    fn frame_local_axes() {
        let p = TypedFact::new(DType::F32, [Dim::n(2), Dim::s(), Dim::n(201)]);
        let fb = TypedFact::new(DType::F32, [201, 80]);
        let lm = LogMel { eps: 1e-6 };
        assert_eq!(lm.frame_local_axis(&[&p, &fb], &[Some(1), None]), Some(1));
        assert_eq!(lm.frame_local_axis(&[&p, &fb], &[Some(2), None]), None);
        assert_eq!(lm.frame_local_axis(&[&p, &fb], &[Some(1), Some(0)]), None);
        assert_eq!(
            Log { eps: 0.0 }.frame_local_axis(&[&p], &[Some(2)]),
            Some(2)
        );
    }

    fn float_dt() -> impl Strategy<Value = DType> {
        prop_oneof![Just(DType::F32), Just(DType::F16), Just(DType::BF16)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn facts_agree_with_eval(lead in proptest::collection::vec(1usize..4, 0..3), s in 0usize..20,
                                 bins in 1usize..12, mels in 1usize..9, dt in float_dt()) {
            let mut shape = lead.clone();
            shape.push(s);
            shape.push(bins);
            let n: usize = shape.iter().product();
            let p = Tensor::from_vec(shape, rand_vec(n, n as u64)).unwrap().cast(dt);
            let fb = Tensor::from_vec(vec![bins, mels], rand_vec(bins * mels, 9)).unwrap();
            let y = eval_op(&LogMel { eps: 1e-3 }, &[&p, &fb]).unwrap();
            let f = LogMel { eps: 1e-3 }.output_facts(&[&TypedFact::of(&p), &TypedFact::of(&fb)]).unwrap();
            prop_assert_eq!(&f[0], &TypedFact::of(&y[0]));
            let mut sym: Vec<Dim> = lead.iter().map(|&d| Dim::n(d as i64)).collect();
            sym.push(Dim::s());
            sym.push(Dim::n(bins as i64));
            let sf = TypedFact::dt_shape(dt, &sym);
            let f = LogMel { eps: 1e-3 }.output_facts(&[&sf, &TypedFact::of(&fb)]).unwrap();
            prop_assert_eq!(f[0].concretize(s as i64), TypedFact::of(&y[0]));

            let y = eval_op(&Log { eps: 1e-3 }, &[&p]).unwrap();
            let f = Log { eps: 1e-3 }.output_facts(&[&sf]).unwrap();
            prop_assert_eq!(f[0].concretize(s as i64), TypedFact::of(&y[0]));
        }
    }
}
