//! GPU forms of Conv1d, Conv2d, Stft, LogMel and Log against their CPU ops
//! (ignored by default: run on the GPU machine with `--include-ignored`).
//! Each test returns early, saying so, when no GPU is usable, unless
//! PULSED_REQUIRE_GPU=1, where that is a failure.
#![cfg(feature = "cuda")]

use pulsed::gpu::op::BuildCx;
use pulsed::gpu::test_util::{assert_within, compare_op};
use pulsed::gpu::{GpuDevice, Precision};
use pulsed::ops::conv::{Conv1d, Conv2d, ConvLayout};
use pulsed::ops::mel::{mel_filterbank, Log, LogMel, MelScale};
use pulsed::ops::stft::{Stft, StftOutput};
use pulsed::ops::{checks, DType, Op, Tensor, TypedFact};

fn device() -> Option<GpuDevice> {
    match GpuDevice::open(0) {
        Ok(d) => Some(d),
        Err(e) if std::env::var("PULSED_REQUIRE_GPU").as_deref() != Ok("1") => {
            eprintln!("no usable GPU ({e}); test skipped");
            None
        }
        Err(e) => panic!("PULSED_REQUIRE_GPU=1 but no usable GPU: {e}"),
    }
}

/// Deterministic values in [-scale, scale) (xorshift): never zeros, never all alike.
fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn tensor(shape: &[usize], seed: u64, scale: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(shape.to_vec(), random(n, seed, scale)).expect("shape")
}

/// The tensor as the device stores it in `precision`, back in f32, so that
/// the CPU reference sees the values the kernel reads.
fn stored(t: &Tensor, precision: Precision) -> Tensor {
    match precision {
        Precision::F32 => t.clone(),
        Precision::Bf16 => t.cast(DType::BF16).cast(DType::F32),
    }
}

const BOTH: [Precision; 2] = [Precision::F32, Precision::Bf16];

/// Runs `op` over `steps` in both precisions; `make(step, seed)` gives one
/// step's inputs.
fn check(
    name: &str,
    op: &dyn Op,
    steps: usize,
    consts: &[bool],
    make: impl Fn(u64) -> Vec<Tensor>,
) {
    let Some(dev) = device() else { return };
    for precision in BOTH {
        let data: Vec<Vec<Tensor>> = (0..steps as u64)
            .map(|s| make(s).iter().map(|t| stored(t, precision)).collect())
            .collect();
        let diffs = compare_op(&dev, op, &data, consts, precision)
            .unwrap_or_else(|e| panic!("{name} [{precision:?}]: {e}"));
        assert_within(name, &diffs, precision);
    }
}

fn conv1d(
    stride: usize,
    dilation: usize,
    pad: (usize, usize),
    groups: usize,
    layout: ConvLayout,
) -> Conv1d {
    Conv1d {
        stride,
        dilation,
        pad,
        groups,
        layout,
    }
}

/// Checks a Conv1d on x of `x_shape`, a `[o, c/groups, k]` weight and
/// optionally a bias, over 2 steps of fresh inputs (weights fixed, const).
fn check_conv1d(name: &str, op: Conv1d, x_shape: &[usize], w_shape: &[usize], bias: bool) {
    // outputs of order 1, so that errors are measured against values, not against the floor of 1
    let w = tensor(w_shape, 7, 2.0 / ((w_shape[1] * w_shape[2]) as f32).sqrt());
    let b = tensor(&[w_shape[0]], 11, 0.5);
    let consts = [false, true, true];
    check(name, &op, 2, &consts[..2 + bias as usize], |s| {
        let mut v = vec![tensor(x_shape, 100 + s, 1.0), w.clone()];
        if bias {
            v.push(b.clone());
        }
        v
    });
}

use ConvLayout::{ChannelsFirst, ChannelsLast};

#[test]
#[ignore]
fn conv1d_subsampling_streaming() {
    // the shipped model's two stride-2 convs on one chunk (pulsed: no padding)
    let op = conv1d(2, 1, (0, 0), 1, ChannelsLast);
    check_conv1d("conv1 80->256 T33", op, &[33, 80], &[256, 80, 3], true);
    check_conv1d("conv2 256->256 T17", op, &[17, 256], &[256, 256, 3], true);
}

/// Many streams' chunks at once: im2col and cuBLAS instead of the
/// implicit-GEMM kernel (with padding, as a whole file's convs have).
#[test]
#[ignore]
fn conv1d_subsampling_batched() {
    let op = conv1d(2, 1, (0, 0), 1, ChannelsLast);
    if let Some(dev) = device() {
        let (x, w) = (tensor(&[32, 33, 80], 1, 1.0), tensor(&[256, 80, 3], 2, 0.1));
        let d = built(&dev, &op, &[&x, &w]);
        assert!(d.contains("im2col"), "{d}");
        // 512 output rows of 256 over k = 240: two slices of k
        assert!(d.contains("in 2 slices of k"), "{d}");
    }
    check_conv1d(
        "conv1 80->256 32 x T33",
        op,
        &[32, 33, 80],
        &[256, 80, 3],
        true,
    );
    check_conv1d(
        "conv2 256->256 40 x T17",
        op,
        &[40, 17, 256],
        &[256, 256, 3],
        true,
    );
    let op = conv1d(2, 2, (3, 1), 1, ChannelsLast);
    check_conv1d(
        "dilated padded 3 x T301",
        op,
        &[3, 301, 24],
        &[16, 24, 3],
        false,
    );
}

#[test]
#[ignore]
fn conv1d_subsampling_whole() {
    let op = conv1d(2, 1, (2, 0), 1, ChannelsLast);
    check_conv1d("conv1 80->256 T301", op, &[301, 80], &[256, 80, 3], true);
    check_conv1d("conv2 256->256 T151", op, &[151, 256], &[256, 256, 3], true);
}

#[test]
#[ignore]
fn conv1d_depthwise_time_major() {
    let op = conv1d(1, 1, (0, 0), 256, ChannelsLast);
    check_conv1d("depthwise k15 T22", op, &[22, 256], &[256, 1, 15], true);
    let op = conv1d(1, 1, (14, 0), 256, ChannelsLast);
    check_conv1d(
        "depthwise k15 whole T203",
        op,
        &[203, 256],
        &[256, 1, 15],
        true,
    );
    let op = conv1d(2, 3, (4, 5), 13, ChannelsLast);
    check_conv1d("depthwise odd batch", op, &[3, 29, 13], &[13, 1, 4], false);
}

#[test]
#[ignore]
fn conv1d_silero() {
    // the STFT as a conv: [N, 1, 640] windows through 258 basis rows, hop 128
    let op = conv1d(128, 1, (0, 0), 1, ChannelsFirst);
    check_conv1d(
        "silero stft conv N1",
        op,
        &[1, 1, 640],
        &[258, 1, 256],
        false,
    );
    check_conv1d(
        "silero stft conv N3",
        op,
        &[3, 1, 640],
        &[258, 1, 256],
        false,
    );
    // the encoder's four 3-tap convs
    let layers = [
        (129, 128, 1, 4),
        (128, 64, 2, 4),
        (64, 64, 2, 2),
        (64, 128, 1, 1),
    ];
    for (n, &(cin, cout, stride, t)) in [1usize, 5]
        .iter()
        .flat_map(|n| layers.iter().map(move |l| (*n, l)))
    {
        let op = conv1d(stride, 1, (1, 1), 1, ChannelsFirst);
        let name = format!("silero conv {cin}->{cout} s{stride} T{t} N{n}");
        check_conv1d(&name, op, &[n, cin, t], &[cout, cin, 3], true);
    }
}

#[test]
#[ignore]
fn conv1d_odd_shapes() {
    check_conv1d(
        "grouped dilated batch time-major",
        conv1d(3, 2, (3, 1), 2, ChannelsLast),
        &[2, 13, 6],
        &[10, 3, 4],
        false,
    );
    check_conv1d(
        "rank-2 channels-first",
        conv1d(1, 1, (0, 0), 1, ChannelsFirst),
        &[7, 19],
        &[5, 7, 3],
        false,
    );
    check_conv1d(
        "depthwise channels-first",
        conv1d(2, 2, (4, 4), 12, ChannelsFirst),
        &[2, 12, 30],
        &[12, 1, 5],
        true,
    );
    check_conv1d(
        "channel multiplier (groups = C, O = 2C)",
        conv1d(1, 1, (1, 1), 6, ChannelsLast),
        &[9, 6],
        &[12, 1, 3],
        true,
    );
    check_conv1d(
        "pointwise padded",
        conv1d(1, 1, (2, 3), 1, ChannelsLast),
        &[5, 33],
        &[65, 33, 1],
        true,
    );
    check_conv1d(
        "long kernel, short input",
        conv1d(1, 1, (6, 6), 1, ChannelsFirst),
        &[3, 2],
        &[4, 3, 7],
        true,
    );
    check_conv1d(
        "many taps (K = 1600)",
        conv1d(1, 1, (0, 0), 1, ChannelsLast),
        &[11, 320],
        &[37, 320, 5],
        true,
    );
}

#[test]
#[ignore]
fn conv2d() {
    let op = Conv2d {
        stride: (2, 1),
        dilation: (1, 2),
        pad: [(1, 1), (0, 2)],
        groups: 1,
    };
    let w = tensor(&[4, 3, 3, 2], 5, 0.3);
    let b = tensor(&[4], 6, 0.5);
    check("conv2d batch", &op, 2, &[false, true, true], |s| {
        vec![tensor(&[2, 3, 9, 11], 200 + s, 1.0), w.clone(), b.clone()]
    });
    let op = Conv2d {
        stride: (1, 1),
        dilation: (1, 1),
        pad: [(1, 1), (1, 1)],
        groups: 3,
    };
    let w = tensor(&[6, 1, 3, 3], 8, 0.3);
    check("conv2d grouped rank 3", &op, 2, &[false, true], |s| {
        vec![tensor(&[3, 8, 8], 300 + s, 1.0), w.clone()]
    });
}

fn hann(n: usize) -> Tensor {
    let v: Vec<f32> = (0..n)
        .map(|i| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos()) as f32)
        .collect();
    Tensor::from_slice(&v)
}

/// Audio-like samples: three sines and noise, amplitude about 0.3, with a
/// phase running on from sample `offset`.
fn audio(shape: &[usize], offset: usize, seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let noise = random(n, seed, 0.03);
    let v: Vec<f32> = (0..n)
        .map(|i| {
            let t = (offset + i) as f64 / 16_000.0;
            let tone = 0.15 * (2.0 * std::f64::consts::PI * 220.0 * t).sin()
                + 0.08 * (2.0 * std::f64::consts::PI * 1_375.0 * t + 0.3).sin()
                + 0.05 * (2.0 * std::f64::consts::PI * 4_410.0 * t + 1.1).sin();
            tone as f32 + noise[i]
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), v).expect("shape")
}

fn check_stft(name: &str, op: &Stft, sig_shape: &[usize], steps: usize) {
    // a one-sample Hann window is 0: take a constant one instead
    let win = match op.n_fft() {
        1 => Tensor::from_slice(&[0.7f32]),
        n => hann(n),
    };
    let len = *sig_shape.last().unwrap_or(&0);
    check(name, op, steps, &[false, true], |s| {
        vec![audio(sig_shape, s as usize * len, 40 + s), win.clone()]
    });
}

#[test]
#[ignore]
fn stft_shipped_chunk() {
    // 5360 samples a chunk: 400 - 160 carried over plus 32 hops
    let op = Stft::new(400, 160, false, StftOutput::Power).expect("stft");
    check_stft("stft power chunk [5360]", &op, &[5360], 3);
    check_stft("stft power whole [16000]", &op, &[16_000], 1);
}

#[test]
#[ignore]
fn stft_modes_and_odd_shapes() {
    for output in [
        StftOutput::Magnitude,
        StftOutput::Complex,
        StftOutput::Power,
    ] {
        let op = Stft::new(400, 160, false, output).expect("stft");
        check_stft(&format!("stft {output:?} [2, 1200]"), &op, &[2, 1200], 2);
        let op = Stft::new(256, 100, true, output).expect("stft");
        check_stft(
            &format!("stft centred {output:?} [3, 1000]"),
            &op,
            &[3, 1000],
            2,
        );
    }
    let op = Stft::new(255, 7, true, StftOutput::Complex).expect("stft");
    check_stft("stft odd n_fft 255 centred", &op, &[300], 2);
    let op = Stft::new(64, 64, false, StftOutput::Power).expect("stft");
    check_stft("stft one frame", &op, &[64], 2);
    let op = Stft::new(1, 1, false, StftOutput::Power).expect("stft");
    check_stft("stft n_fft 1", &op, &[5], 2);
}

/// Many frames (batched streams): blocks of four frames each, including a
/// last group cut short; every mode, centred or not, equal to the CPU.
#[test]
#[ignore]
fn stft_many_frames_in_groups() {
    let Some(dev) = device() else { return };
    let cases = [
        (
            Stft::new(400, 160, false, StftOutput::Power),
            vec![9, 20_000],
        ),
        (
            Stft::new(400, 160, false, StftOutput::Complex),
            vec![8, 21_000],
        ),
        (
            Stft::new(512, 128, true, StftOutput::Magnitude),
            vec![3, 48_000],
        ),
    ];
    for (op, shape) in cases {
        let op = op.expect("stft");
        let sig = audio(&shape, 0, 7);
        let win = hann(op.n_fft());
        let built = built(&dev, &op, &[&sig, &win]);
        assert!(built.contains("of 4 frames"), "{shape:?}: {built}");
        check_stft(&format!("stft {:?} {shape:?}", op.output()), &op, &shape, 2);
    }
}

/// Power spectra like the STFT's: nonnegative, many orders of magnitude.
fn power(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    let v: Vec<f32> = random(n, seed, 1.0)
        .iter()
        .map(|u| (u * 9.0).exp() * 0.1)
        .collect();
    Tensor::from_vec(shape.to_vec(), v).expect("shape")
}

#[test]
#[ignore]
fn logmel() {
    let op = LogMel { eps: 1e-6 };
    for (scale, norm) in [(MelScale::Htk, false), (MelScale::Slaney, true)] {
        let fb = mel_filterbank(201, 0.0, 8000.0, 80, 16_000, scale, norm).expect("fb");
        check(
            &format!("logmel [32, 201] {scale:?}"),
            &op,
            2,
            &[false, true],
            |s| vec![power(&[32, 201], 60 + s), fb.clone()],
        );
        check(
            &format!("logmel whole [517, 201] {scale:?}"),
            &op,
            1,
            &[false, true],
            |s| vec![power(&[517, 201], 70 + s), fb.clone()],
        );
    }
    let op = LogMel { eps: 1e-3 };
    let fb = Tensor::from_vec(
        vec![33, 45],
        random(33 * 45, 9, 1.0).iter().map(|v| v.abs()).collect(),
    )
    .expect("fb");
    check(
        "logmel odd [2, 7, 33] x [33, 45]",
        &op,
        2,
        &[false, true],
        |s| vec![power(&[2, 7, 33], 80 + s), fb.clone()],
    );
}

#[test]
#[ignore]
fn log() {
    let op = Log { eps: 1e-5 };
    check("log [5, 37]", &op, 2, &[false], |s| {
        vec![power(&[5, 37], 90 + s)]
    });
    check("log [3]", &op, 2, &[false], |s| vec![power(&[3], 95 + s)]);
}

/// What the builder registered for `op`'s type gives on these inputs, as the
/// translator would ask it (f32, the `is_const` inputs' host values given).
fn build_on(
    dev: &GpuDevice,
    op: &dyn Op,
    inputs: &[&Tensor],
    is_const: &[bool],
) -> Option<Result<Box<dyn pulsed::gpu::op::GpuOp>, pulsed::gpu::GpuError>> {
    let facts = checks::facts_of(inputs);
    let refs: Vec<&TypedFact> = facts.iter().collect();
    let outs = op.output_facts(&refs).expect("CPU facts");
    let consts: Vec<Option<&Tensor>> = inputs
        .iter()
        .zip(is_const.iter().chain(std::iter::repeat(&false)))
        .map(|(t, &c)| c.then_some(*t))
        .collect();
    let cx = BuildCx {
        lib: &dev.lib,
        precision: Precision::F32,
        inputs: &facts,
        outputs: &outs,
        consts: &consts,
    };
    pulsed::gpu::ops::build(op, &cx)
}

/// The description of what the builder makes of `op` (it must build).
fn built(dev: &GpuDevice, op: &dyn Op, inputs: &[&Tensor]) -> String {
    build_on(dev, op, inputs, &[false, true, true])
        .expect("a builder for it")
        .expect("builds")
        .describe()
}

/// What the builder gives for `op` on these inputs: `None` (no builder for
/// its type), `Some(Ok)` or `Some(Err)`, as a word.
fn builder_answer(dev: &GpuDevice, op: &dyn Op, inputs: &[&Tensor]) -> &'static str {
    match build_on(dev, op, inputs, &[]) {
        None => "none",
        Some(Ok(_)) => "ok",
        Some(Err(e)) => {
            eprintln!("{}: refused as expected: {e}", op.name());
            "err"
        }
    }
}

#[test]
#[ignore]
fn unsupported_cases_are_refused() {
    let Some(dev) = device() else { return };
    let f16 = |t: Tensor| t.cast(DType::F16);
    let x = tensor(&[9, 4], 1, 1.0);
    let w = tensor(&[5, 4, 3], 2, 1.0);
    let op = conv1d(1, 1, (0, 0), 1, ChannelsLast);
    assert_eq!(builder_answer(&dev, &op, &[&x, &w]), "ok");
    assert_eq!(
        builder_answer(&dev, &op, &[&f16(x.clone()), &f16(w.clone())]),
        "err",
        "f16 storage has no kernel"
    );
    let big = Stft::new(4096, 512, false, StftOutput::Power).expect("stft");
    let sig = audio(&[8192], 0, 3);
    assert_eq!(
        builder_answer(&dev, &big, &[&sig, &hann(4096)]),
        "err",
        "n_fft above the shared-memory table"
    );
    let op = LogMel { eps: 1e-6 };
    let p = power(&[4, 6], 4);
    let fb = tensor(&[6, 3], 5, 1.0);
    assert_eq!(builder_answer(&dev, &op, &[&p, &fb]), "ok");
    assert_eq!(builder_answer(&dev, &op, &[&f16(p), &f16(fb)]), "err");
    // an op type with no GPU builder at all
    let cast = pulsed::ops::cast::Cast { to: DType::F16 };
    assert_eq!(builder_answer(&dev, &cast, &[&x]), "none");
}
