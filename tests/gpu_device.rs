//! GPU-only tests (ignored by default): run on the GPU machine with
//! `--include-ignored`. Each returns early, saying so, when no GPU is usable,
//! unless PULSED_REQUIRE_GPU=1, where that is a failure.
#![cfg(feature = "cuda")]

use half::bf16;
use pulsed::gpu::{probe, Elementwise, GpuContext};
use pulsed::ops::{eval_op, Binary, Op, Tensor, Unary};

fn gpu() -> Option<GpuContext> {
    match GpuContext::new(0) {
        Ok(g) => Some(g),
        Err(e) if std::env::var("PULSED_REQUIRE_GPU").as_deref() != Ok("1") => {
            eprintln!("no usable GPU ({e}); test skipped");
            None
        }
        Err(e) => panic!("PULSED_REQUIRE_GPU=1 but no usable GPU: {e}"),
    }
}

/// Deterministic values in [-lo, hi) (xorshift): never zeros, never all alike.
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

fn cpu(op: &dyn Op, inputs: &[&Tensor]) -> Tensor {
    eval_op(op, inputs).expect("CPU op").remove(0)
}

fn assert_close(name: &str, got: &[f32], want: &[f32], rtol: f32, atol: f32) {
    assert_eq!(got.len(), want.len(), "{name}: lengths");
    let mut worst = (0.0f32, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        assert!(
            err <= atol + rtol * w.abs(),
            "{name}[{i}]: GPU {g} vs CPU {w} (err {err})"
        );
        if err > worst.0 {
            worst = (err, i);
        }
    }
    eprintln!("{name}: {} values, max abs err {:e}", got.len(), worst.0);
}

// (shape of a, shape of b) pairs: same shape, trailing vector, scalar.
const CASES: &[(&[usize], &[usize])] = &[
    (&[3, 7, 129], &[3, 7, 129]),
    (&[3, 7, 129], &[129]),
    (&[2, 5, 4, 33], &[4, 33]),
    (&[1000], &[1]),
    (&[1, 1], &[1]),
    (&[4096, 257], &[257]),
];

#[test]
#[ignore]
fn probe_describes_the_device() {
    let Some(_g) = gpu() else { return };
    let d = probe().expect("probe");
    eprintln!("probe: {d}");
    assert!(d.contains("sm_"), "{d}");
}

#[test]
#[ignore]
fn elementwise_f32_equals_cpu() {
    let Some(g) = gpu() else { return };
    let t = std::time::Instant::now();
    let ew = Elementwise::load(&g).expect("load elementwise");
    eprintln!(
        "elementwise: compiled for {} ({}) in {:.1} ms, loaded in {:.1} ms total",
        ew.compiled.arch,
        match ew.compiled.image {
            pulsed::gpu::Image::Cubin(_) => "CUBIN",
            pulsed::gpu::Image::Ptx(_) => "PTX",
        },
        ew.compiled.millis,
        t.elapsed().as_secs_f64() * 1e3
    );
    for (k, (sa, sb)) in CASES.iter().enumerate() {
        let na: usize = sa.iter().product();
        let nb: usize = sb.iter().product();
        let a = random(na, 2 * k as u64 + 1, 4.0);
        let b = random(nb, 2 * k as u64 + 2, 4.0);
        let (ta, tb) = (
            Tensor::from_vec(sa.to_vec(), a.clone()).unwrap(),
            Tensor::from_vec(sb.to_vec(), b.clone()).unwrap(),
        );
        for op in [Binary::Add, Binary::Mul] {
            let got = ew.binary_host(&g, op, &a, &b).expect("GPU binary");
            let want = cpu(&op, &[&ta, &tb]);
            assert_eq!(want.shape(), *sa);
            assert_close(
                &format!("{op:?} f32 {sa:?}x{sb:?}"),
                &got,
                &want.to_f32_vec(),
                1e-5,
                1e-30,
            );
        }
        for op in [Unary::Sigmoid, Unary::Silu] {
            let x = random(na, 3 * k as u64 + 7, 12.0);
            let tx = Tensor::from_vec(sa.to_vec(), x.clone()).unwrap();
            let got = ew.unary_host(&g, op, &x).expect("GPU unary");
            let want = cpu(&op, &[&tx]);
            assert_close(
                &format!("{op:?} f32 {sa:?}"),
                &got,
                &want.to_f32_vec(),
                1e-5,
                1e-30,
            );
        }
    }
}

#[test]
#[ignore]
fn elementwise_bf16_equals_cpu() {
    let Some(g) = gpu() else { return };
    let ew = Elementwise::load(&g).expect("load elementwise");
    for (k, (sa, sb)) in CASES.iter().enumerate() {
        let na: usize = sa.iter().product();
        let nb: usize = sb.iter().product();
        let a: Vec<bf16> = random(na, 5 * k as u64 + 1, 4.0)
            .into_iter()
            .map(bf16::from_f32)
            .collect();
        let b: Vec<bf16> = random(nb, 5 * k as u64 + 2, 4.0)
            .into_iter()
            .map(bf16::from_f32)
            .collect();
        let (ta, tb) = (
            Tensor::from_vec(sa.to_vec(), a.clone()).unwrap(),
            Tensor::from_vec(sb.to_vec(), b.clone()).unwrap(),
        );
        for op in [Binary::Add, Binary::Mul] {
            let got: Vec<f32> = ew
                .binary_host(&g, op, &a, &b)
                .expect("GPU")
                .iter()
                .map(|v| v.to_f32())
                .collect();
            let want = cpu(&op, &[&ta, &tb]);
            assert_close(
                &format!("{op:?} bf16 {sa:?}x{sb:?}"),
                &got,
                &want.to_f32_vec(),
                1e-2,
                1e-6,
            );
        }
        for op in [Unary::Sigmoid, Unary::Silu] {
            let x: Vec<bf16> = random(na, 7 * k as u64 + 3, 12.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let tx = Tensor::from_vec(sa.to_vec(), x.clone()).unwrap();
            let got: Vec<f32> = ew
                .unary_host(&g, op, &x)
                .expect("GPU")
                .iter()
                .map(|v| v.to_f32())
                .collect();
            let want = cpu(&op, &[&tx]);
            assert_close(
                &format!("{op:?} bf16 {sa:?}"),
                &got,
                &want.to_f32_vec(),
                1e-2,
                1e-6,
            );
        }
    }
}

#[test]
#[ignore]
fn elementwise_rejects_bad_shapes_without_panicking() {
    let Some(g) = gpu() else { return };
    let ew = Elementwise::load(&g).expect("load elementwise");
    let a = random(10, 1, 1.0);
    let b = random(3, 2, 1.0);
    assert!(
        ew.binary_host(&g, Binary::Add, &a, &b).is_err(),
        "3 does not divide 10"
    );
    assert!(
        ew.binary_host(&g, Binary::Sub, &a, &a).is_err(),
        "no Sub kernel yet"
    );
    assert!(
        ew.unary_host(&g, Unary::Exp, &a).is_err(),
        "no Exp kernel yet"
    );
    assert!(GpuContext::new(1 << 20).is_err(), "ordinal out of range");
    assert_eq!(
        ew.binary_host(&g, Binary::Add, &[] as &[f32], &[] as &[f32])
            .unwrap(),
        Vec::<f32>::new()
    );
}
