//! Short-time Fourier transform of real signals, time-major, one-sided.

use std::fmt;
use std::sync::Arc;

use half::{bf16, f16};
use rustfft::num_complex::Complex;
use rustfft::{Fft, FftPlanner};

use super::checks::{float, input_count};
use super::{
    contig, outputs_len, DType, Dim, Op, OpError, OpResult, Scratch, StorageElement, Tensor,
    TypedFact,
};
use crate::op_common;

/// What each frequency bin of the STFT gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StftOutput {
    /// Real and imaginary parts on an extra last axis of size 2.
    Complex,
    /// `sqrt(re^2 + im^2)`.
    Magnitude,
    /// `re^2 + im^2`.
    Power,
}

/// STFT of a real signal `[S]` or `[B, S]` with a window `[n_fft]`.
///
/// Output `[T, bins]` (or `[B, T, bins]`), `bins = n_fft/2 + 1`, with a
/// trailing axis of 2 (re, im) for [`StftOutput::Complex`]. With `center`,
/// the signal is first reflect-padded by `n_fft/2` on both sides, as
/// `torch.stft(center=True, pad_mode="reflect")`. Frames start every `hop`
/// samples: `T = floor((S' - n_fft) / hop) + 1` for a (padded) length `S'`.
/// The output has the signal's dtype; f16/bf16 are computed in f32.
///
/// ```
/// use pulsed::ops::stft::{Stft, StftOutput};
/// use pulsed::ops::{eval_op, Tensor};
/// let op = Stft::new(4, 2, false, StftOutput::Power).unwrap();
/// let x = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0]);
/// let w = Tensor::from_slice(&[1.0f32; 4]);
/// let y = eval_op(&op, &[&x, &w]).unwrap();
/// assert_eq!(y[0].shape(), &[2, 3]);
/// ```
#[derive(Clone)]
pub struct Stft {
    n_fft: usize,
    hop: usize,
    center: bool,
    output: StftOutput,
    // planned once: running a plan allocates nothing given scratch
    fft: Arc<dyn Fft<f32>>,
}

impl fmt::Debug for Stft {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stft")
            .field("n_fft", &self.n_fft)
            .field("hop", &self.hop)
            .field("center", &self.center)
            .field("output", &self.output)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Stft {
    fn eq(&self, o: &Stft) -> bool {
        (self.n_fft, self.hop, self.center, self.output) == (o.n_fft, o.hop, o.center, o.output)
    }
}

impl Stft {
    /// Plans the FFT; errors when `n_fft` or `hop` is 0.
    pub fn new(n_fft: usize, hop: usize, center: bool, output: StftOutput) -> OpResult<Stft> {
        if n_fft == 0 || hop == 0 {
            return Err(OpError::Param(format!(
                "STFT needs n_fft > 0 and hop > 0, got n_fft {n_fft} hop {hop}"
            )));
        }
        if i64::try_from(n_fft).is_err() || i64::try_from(hop).is_err() {
            return Err(OpError::Param(format!(
                "STFT sizes too large: n_fft {n_fft} hop {hop}"
            )));
        }
        let fft = FftPlanner::<f32>::new().plan_fft_forward(n_fft);
        Ok(Stft {
            n_fft,
            hop,
            center,
            output,
            fft,
        })
    }

    /// Frame length (and FFT size).
    pub fn n_fft(&self) -> usize {
        self.n_fft
    }

    /// Samples between frame starts.
    pub fn hop(&self) -> usize {
        self.hop
    }

    /// Whether the signal is reflect-padded by `n_fft/2` on both sides.
    pub fn center(&self) -> bool {
        self.center
    }

    /// What each bin gives.
    pub fn output(&self) -> StftOutput {
        self.output
    }

    /// Number of one-sided frequency bins, `n_fft/2 + 1`.
    pub fn bins(&self) -> usize {
        self.n_fft / 2 + 1
    }

    fn pad(&self) -> usize {
        if self.center {
            self.n_fft / 2
        } else {
            0
        }
    }

    /// Checks a concrete signal length; returns the number of frames.
    fn frames(&self, s: usize) -> OpResult<usize> {
        if self.center && s <= self.pad() {
            return Err(OpError::Shape(format!(
                "centered STFT reflect-pads by {} and needs a signal longer than that, got {s} samples",
                self.pad()
            )));
        }
        let padded = s + 2 * self.pad();
        if padded < self.n_fft {
            return Err(OpError::Shape(format!(
                "STFT needs at least n_fft = {} samples, got {padded}{}",
                self.n_fft,
                if self.center { " after padding" } else { "" }
            )));
        }
        Ok((padded - self.n_fft) / self.hop + 1)
    }

    fn out_shape(&self, lead: &[usize], frames: usize, out: &mut [usize; 4]) -> usize {
        let mut r = 0;
        for &d in lead {
            out[r] = d;
            r += 1;
        }
        out[r] = frames;
        out[r + 1] = self.bins();
        r += 2;
        if self.output == StftOutput::Complex {
            out[r] = 2;
            r += 1;
        }
        r
    }
}

fn check_rank(rank: usize, input: usize, want: &str, ok: bool) -> OpResult<()> {
    if !ok {
        return Err(OpError::Rank {
            input,
            expected: want.into(),
            got: rank,
        });
    }
    Ok(())
}

impl Op for Stft {
    op_common!("Stft");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 2)?;
        let (sig, win) = (inputs[0], inputs[1]);
        check_rank(sig.rank(), 0, "1 or 2", matches!(sig.rank(), 1 | 2))?;
        check_rank(win.rank(), 1, "1", win.rank() == 1)?;
        float(sig, 0)?;
        float(win, 1)?;
        if win.shape[0] != Dim::n(self.n_fft as i64) {
            return Err(OpError::Shape(format!(
                "window {win} does not have n_fft = {} samples",
                self.n_fft
            )));
        }
        let s = *sig.shape.last().expect("rank checked");
        if let Some(v) = s.as_const() {
            self.frames(
                usize::try_from(v)
                    .map_err(|_| OpError::Shape(format!("negative signal length {v}")))?,
            )?;
        }
        let padded = s.add_const(2 * self.pad() as i64);
        let frames = padded
            .add_const(self.hop as i64 - self.n_fft as i64)
            .div_floor(self.hop as i64)
            .ok_or_else(|| OpError::Dim(format!("STFT frames of {padded}")))?;
        let mut shape: Vec<Dim> = sig.shape[..sig.rank() - 1].to_vec();
        shape.push(frames);
        shape.push(Dim::n(self.bins() as i64));
        if self.output == StftOutput::Complex {
            shape.push(Dim::n(2));
        }
        Ok(vec![TypedFact::dt_shape(sig.dtype, &shape)])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        input_count(inputs, 2)?;
        let (sig, win) = (inputs[0], inputs[1]);
        check_rank(sig.rank(), 0, "1 or 2", matches!(sig.rank(), 1 | 2))?;
        check_rank(win.rank(), 1, "1", win.rank() == 1)?;
        for (i, t) in [sig, win].iter().enumerate() {
            if !t.dtype().is_float() {
                return Err(OpError::DType {
                    input: i,
                    expected: "a float type".into(),
                    got: t.dtype(),
                });
            }
        }
        if win.shape()[0] != self.n_fft {
            return Err(OpError::Shape(format!(
                "window of {} samples does not have n_fft = {} samples",
                win.shape()[0],
                self.n_fft
            )));
        }
        let s = sig.shape()[sig.rank() - 1];
        let frames = self.frames(s)?;
        let mut shape = [0usize; 4];
        let r = self.out_shape(&sig.shape()[..sig.rank() - 1], frames, &mut shape);
        outputs_len(outputs, 1);
        outputs[0].ensure(sig.dtype(), &shape[..r]);
        let (sig, win) = (contig(sig), contig(win));
        let out = &mut outputs[0];
        match sig.dtype() {
            DType::F32 => self.run::<f32>(&sig, &win, out, scratch),
            DType::F16 => self.run::<f16>(&sig, &win, out, scratch),
            DType::BF16 => self.run::<bf16>(&sig, &win, out, scratch),
            dt => Err(OpError::DType {
                input: 0,
                expected: "a float type".into(),
                got: dt,
            }),
        }
    }

    fn info(&self) -> String {
        format!(
            "n_fft {} hop {} center {} {:?}",
            self.n_fft, self.hop, self.center, self.output
        )
    }
}

impl Stft {
    fn run<T: StorageElement>(
        &self,
        sig: &Tensor,
        win: &Tensor,
        out: &mut Tensor,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        let n = self.n_fft;
        let s = sig.shape()[sig.rank() - 1];
        let frames = self.frames(s)?;
        let bins = self.bins();
        let x = sig.as_slice::<T>()?;
        let batch = x.len().checked_div(s).unwrap_or(0);
        let scratch_len = self.fft.get_inplace_scratch_len();
        let (buf, fft_scratch, win_f32) = scratch.three(2 * n, 2 * scratch_len, n);
        read_window(win, win_f32)?;
        let buf: &mut [Complex<f32>] = bytemuck::try_cast_slice_mut(buf).map_err(cast_err)?;
        let fft_scratch: &mut [Complex<f32>] =
            bytemuck::try_cast_slice_mut(fft_scratch).map_err(cast_err)?;
        let o = out.as_slice_mut::<T>()?;
        let per_bin = if self.output == StftOutput::Complex {
            2
        } else {
            1
        };
        let pad = self.pad() as isize;
        let last = s as isize - 1;
        for b in 0..batch {
            let xb = &x[b * s..(b + 1) * s];
            for t in 0..frames {
                let start = (t * self.hop) as isize - pad;
                for (k, (c, &w)) in buf.iter_mut().zip(win_f32.iter()).enumerate() {
                    // reflect padding, computed in place: one reflection suffices as pad < s
                    let mut i = start + k as isize;
                    if i < 0 {
                        i = -i;
                    } else if i > last {
                        i = 2 * last - i;
                    }
                    *c = Complex::new(xb[i as usize].to_f32() * w, 0.0);
                }
                self.fft.process_with_scratch(buf, fft_scratch);
                let row = &mut o
                    [(b * frames + t) * bins * per_bin..(b * frames + t + 1) * bins * per_bin];
                match self.output {
                    StftOutput::Complex => {
                        for (r, c) in row.chunks_exact_mut(2).zip(buf.iter()) {
                            r[0] = T::from_f32(c.re);
                            r[1] = T::from_f32(c.im);
                        }
                    }
                    StftOutput::Power => {
                        for (r, c) in row.iter_mut().zip(buf.iter()) {
                            *r = T::from_f32(c.norm_sqr());
                        }
                    }
                    StftOutput::Magnitude => {
                        for (r, c) in row.iter_mut().zip(buf.iter()) {
                            *r = T::from_f32(c.norm_sqr().sqrt());
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn read_window(win: &Tensor, out: &mut [f32]) -> OpResult<()> {
    fn copy<T: StorageElement>(w: &Tensor, out: &mut [f32]) -> OpResult<()> {
        for (o, &v) in out.iter_mut().zip(w.as_slice::<T>()?) {
            *o = v.to_f32();
        }
        Ok(())
    }
    match win.dtype() {
        DType::F32 => copy::<f32>(win, out),
        DType::F16 => copy::<f16>(win, out),
        DType::BF16 => copy::<bf16>(win, out),
        dt => Err(OpError::DType {
            input: 1,
            expected: "a float type".into(),
            got: dt,
        }),
    }
}

fn cast_err(e: bytemuck::PodCastError) -> OpError {
    OpError::Other(format!("FFT buffer reinterpretation failed: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{eval_op, Scratch};
    use proptest::prelude::*;

    fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn hann(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos())
            .map(|v| v as f32)
            .collect()
    }

    /// One frame's bins (re, im) and the sum of its |windowed samples|.
    type RefFrame = (Vec<(f64, f64)>, f64);

    /// Direct DFT of every frame, in f64: `[B][T][bin] -> (re, im)`, plus the
    /// sum of |windowed samples| of each frame (a bound on every |X_k|).
    fn reference(x: &[f32], b: usize, w: &[f32], hop: usize, center: bool) -> Vec<Vec<RefFrame>> {
        let n = w.len();
        let s = x.len() / b;
        let pad = if center { n / 2 } else { 0 };
        (0..b)
            .map(|bi| {
                let xb = &x[bi * s..(bi + 1) * s];
                // reflect pad written as torch does: mirror without repeating the edge
                let mut p = Vec::new();
                for i in (1..=pad).rev() {
                    p.push(xb[i]);
                }
                p.extend_from_slice(xb);
                for i in 0..pad {
                    p.push(xb[s - 2 - i]);
                }
                let frames = (p.len() - n) / hop + 1;
                (0..frames)
                    .map(|t| {
                        let fr: Vec<f64> = (0..n)
                            .map(|k| p[t * hop + k] as f64 * w[k] as f64)
                            .collect();
                        let scale = fr.iter().map(|v| v.abs()).sum::<f64>();
                        let bins = (0..n / 2 + 1)
                            .map(|f| {
                                let (mut re, mut im) = (0.0, 0.0);
                                for (k, v) in fr.iter().enumerate() {
                                    let a = -2.0 * std::f64::consts::PI * ((f * k) % n) as f64
                                        / n as f64;
                                    re += v * a.cos();
                                    im += v * a.sin();
                                }
                                (re, im)
                            })
                            .collect();
                        (bins, scale)
                    })
                    .collect()
            })
            .collect()
    }

    /// f32 FFT error grows like log(n) * eps * sum|x|; 1e-5 relative to the
    /// frame's sum |x| is a comfortable bound for n <= 512.
    const F32_TOL: f64 = 1e-5;

    fn check_against_dft(n: usize, hop: usize, center: bool, b: usize, s: usize) {
        let x = rand_vec(b * s, (n * 31 + hop * 7 + s) as u64);
        let w = hann(n);
        let r = reference(&x, b, &w, hop, center);
        let sig = if b == 1 {
            Tensor::from_vec(vec![s], x.clone()).unwrap()
        } else {
            Tensor::from_vec(vec![b, s], x.clone()).unwrap()
        };
        let win = Tensor::from_slice(&w);
        let bins = n / 2 + 1;
        for kind in [
            StftOutput::Complex,
            StftOutput::Magnitude,
            StftOutput::Power,
        ] {
            let op = Stft::new(n, hop, center, kind).unwrap();
            let y = eval_op(&op, &[&sig, &win]).unwrap();
            let y = y[0].to_vec::<f32>().unwrap();
            let frames = r[0].len();
            let per = if kind == StftOutput::Complex { 2 } else { 1 };
            assert_eq!(y.len(), b * frames * bins * per);
            for (bi, rb) in r.iter().enumerate() {
                for (t, (rbins, scale)) in rb.iter().enumerate() {
                    let tol = F32_TOL * scale.max(1.0);
                    for (f, &(re, im)) in rbins.iter().enumerate() {
                        let at = ((bi * frames + t) * bins + f) * per;
                        let mag = (re * re + im * im).sqrt();
                        let ok = match kind {
                            StftOutput::Complex => {
                                (y[at] as f64 - re).abs() <= tol
                                    && (y[at + 1] as f64 - im).abs() <= tol
                            }
                            StftOutput::Magnitude => (y[at] as f64 - mag).abs() <= tol,
                            // d(m^2) = 2 m dm
                            StftOutput::Power => {
                                (y[at] as f64 - mag * mag).abs() <= tol * (2.0 * mag + tol)
                            }
                        };
                        assert!(ok, "{kind:?} n {n} hop {hop} center {center} b {bi} t {t} f {f}: {} vs ({re}, {im})", y[at]);
                    }
                }
            }
        }
    }

    #[test]
    fn matches_direct_dft() {
        check_against_dft(400, 160, false, 1, 1600);
        check_against_dft(400, 160, true, 2, 1000);
        check_against_dft(16, 4, true, 3, 37);
        check_against_dft(15, 5, false, 2, 15);
        check_against_dft(15, 7, true, 1, 8);
        check_against_dft(1, 1, false, 1, 5);
        check_against_dft(2, 3, true, 1, 2);
    }

    #[test]
    fn f16_and_bf16_match_f32_within_their_rounding() {
        let (n, hop, s) = (64, 16, 300);
        let x = rand_vec(s, 5);
        let w = hann(n);
        let op = Stft::new(n, hop, true, StftOutput::Magnitude).unwrap();
        let win = Tensor::from_slice(&w);
        let exact = eval_op(&op, &[&Tensor::from_slice(&x), &win]).unwrap();
        let peak = exact[0].to_f32_vec().iter().cloned().fold(0.0, f32::max);
        for dt in [DType::F16, DType::BF16] {
            let sig = Tensor::from_slice(&x).cast(dt);
            let y = eval_op(&op, &[&sig, &win.cast(dt)]).unwrap();
            assert_eq!(y[0].dtype(), dt);
            // inputs and outputs rounded to 8 (bf16) or 11 (f16) bits: 1e-2 of the peak
            let d = y[0].max_abs_diff(&exact[0]).unwrap();
            assert!(d <= 1e-2 * peak, "{dt}: {d} vs peak {peak}");
        }
    }

    #[test]
    fn frame_count_formula() {
        let op = Stft::new(400, 160, false, StftOutput::Power).unwrap();
        assert_eq!(op.frames(400).unwrap(), 1);
        assert_eq!(op.frames(559).unwrap(), 1);
        assert_eq!(op.frames(560).unwrap(), 2);
        let c = Stft::new(400, 160, true, StftOutput::Power).unwrap();
        // torch.stft(center=True): 1 + S // hop frames
        for s in [201, 399, 400, 16000, 16159] {
            assert_eq!(c.frames(s).unwrap(), 1 + s / 160);
        }
        assert_eq!(op.n_fft(), 400);
        assert_eq!(op.hop(), 160);
        assert!(!op.center());
        assert_eq!(op.output(), StftOutput::Power);
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(Stft::new(0, 1, false, StftOutput::Power).is_err());
        assert!(Stft::new(4, 0, false, StftOutput::Power).is_err());
        let op = Stft::new(8, 2, false, StftOutput::Power).unwrap();
        let centered = Stft::new(8, 2, true, StftOutput::Power).unwrap();
        let w = Tensor::zeros(DType::F32, &[8]);
        let x = Tensor::zeros(DType::F32, &[20]);
        let cases: Vec<(&Stft, Vec<Tensor>)> = vec![
            (&op, vec![x.clone()]),
            (&op, vec![Tensor::zeros(DType::F32, &[2, 2, 20]), w.clone()]),
            (&op, vec![Tensor::scalar(1.0f32), w.clone()]),
            (&op, vec![x.clone(), Tensor::zeros(DType::F32, &[7])]),
            (&op, vec![x.clone(), Tensor::zeros(DType::F32, &[1, 8])]),
            (&op, vec![Tensor::zeros(DType::F32, &[7]), w.clone()]),
            (&op, vec![Tensor::zeros(DType::F32, &[3, 0]), w.clone()]),
            (&centered, vec![Tensor::zeros(DType::F32, &[4]), w.clone()]),
            (&centered, vec![Tensor::zeros(DType::F32, &[0]), w.clone()]),
            (&op, vec![Tensor::zeros(DType::I64, &[20]), w.clone()]),
            (&op, vec![x.clone(), Tensor::zeros(DType::Bool, &[8])]),
        ];
        for (o, ins) in &cases {
            let refs: Vec<&Tensor> = ins.iter().collect();
            assert!(eval_op(*o, &refs).is_err(), "eval accepted {ins:?}");
            let facts: Vec<TypedFact> = ins.iter().map(TypedFact::of).collect();
            let frefs: Vec<&TypedFact> = facts.iter().collect();
            assert!(
                o.output_facts(&frefs).is_err(),
                "output_facts accepted {facts:?}"
            );
        }
        let e = eval_op(&op, &[&Tensor::zeros(DType::F32, &[7]), &w]).unwrap_err();
        assert!(matches!(e, OpError::Shape(_)), "{e}");
    }

    #[test]
    fn steady_state_reuses_output_buffer() {
        let op = Stft::new(400, 160, true, StftOutput::Complex).unwrap();
        let x = Tensor::from_vec(vec![2, 1000], rand_vec(2000, 1)).unwrap();
        let w = Tensor::from_slice(&hann(400));
        let (mut outs, mut scratch) = (Vec::new(), Scratch::default());
        op.eval(&[&x, &w], &mut outs, &mut scratch).unwrap();
        let first = outs[0].clone();
        let ptr = outs[0].as_slice::<f32>().unwrap().as_ptr();
        drop(first);
        op.eval(&[&x, &w], &mut outs, &mut scratch).unwrap();
        assert_eq!(outs[0].as_slice::<f32>().unwrap().as_ptr(), ptr);
    }

    fn kind() -> impl Strategy<Value = StftOutput> {
        prop_oneof![
            Just(StftOutput::Complex),
            Just(StftOutput::Magnitude),
            Just(StftOutput::Power)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn facts_agree_with_eval(n in 1usize..40, hop in 1usize..20, center: bool, out in kind(),
                                 batch in proptest::option::of(1usize..4), extra in 0usize..60,
                                 dt in prop_oneof![Just(DType::F32), Just(DType::F16), Just(DType::BF16)]) {
            let op = Stft::new(n, hop, center, out).unwrap();
            let s = if center { n / 2 + 1 + extra } else { n + extra };
            let lead: Vec<usize> = batch.into_iter().collect();
            let mut shape = lead.clone();
            shape.push(s);
            let x = Tensor::from_vec(shape, rand_vec(lead.iter().product::<usize>() * s, s as u64)).unwrap().cast(dt);
            let w = Tensor::from_slice(&hann(n));
            let y = eval_op(&op, &[&x, &w]).unwrap();
            let concrete = op.output_facts(&[&TypedFact::of(&x), &TypedFact::of(&w)]).unwrap();
            prop_assert_eq!(&concrete[0], &TypedFact::of(&y[0]));
            // symbolic S on the time axis
            let mut sym: Vec<Dim> = lead.iter().map(|&d| Dim::n(d as i64)).collect();
            sym.push(Dim::s());
            let sf = TypedFact::dt_shape(dt, &sym);
            let facts = op.output_facts(&[&sf, &TypedFact::of(&w)]).unwrap();
            prop_assert!(facts[0].shape[lead.len()].is_symbolic());
            prop_assert_eq!(facts[0].concretize(s as i64), TypedFact::of(&y[0]));
        }
    }
}
