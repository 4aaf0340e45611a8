//! GPU forms of LayerNorm, BatchNorm, Softmax / LogSoftmax, Reduce, ArgMax
//! and the fused CtcHead against their CPU ops (ignored by default: run on
//! the GPU machine with `--include-ignored`). Each test returns early, saying
//! so, when no GPU is usable, unless PULSED_REQUIRE_GPU=1, where that fails.
#![cfg(feature = "cuda")]

use pulsed::gpu::test_util::{assert_within, build_for, compare_op};
use pulsed::gpu::{GpuDevice, GpuError, Precision};
use pulsed::ops::ctc_head::{CtcHead, CtcHeadMode};
use pulsed::ops::norm::{BatchNorm, LayerNorm};
use pulsed::ops::reduce::{ArgMax, Reduce, ReduceOp};
use pulsed::ops::softmax::{LogSoftmax, Softmax};
use pulsed::ops::{DType, Op, Tensor};

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

/// Deterministic values in [offset - scale, offset + scale) (xorshift).
fn random(n: usize, seed: u64, scale: f32, offset: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale + offset
        })
        .collect()
}

fn tensor(shape: &[usize], seed: u64, scale: f32, offset: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(shape.to_vec(), random(n, seed, scale, offset)).expect("tensor")
}

/// Float tensors rounded to bf16 and back, so that a bf16 comparison
/// measures the kernel, not the rounding of its inputs.
fn rounded(steps: &[Vec<Tensor>]) -> Vec<Vec<Tensor>> {
    steps
        .iter()
        .map(|ins| {
            ins.iter()
                .map(|t| {
                    if t.dtype() == DType::F32 {
                        t.cast(DType::BF16).cast(DType::F32)
                    } else {
                        t.clone()
                    }
                })
                .collect()
        })
        .collect()
}

/// Compares `op` over `steps` in f32 and in bf16.
fn check(dev: &GpuDevice, name: &str, op: &dyn Op, steps: &[Vec<Tensor>], consts: &[bool]) {
    for p in [Precision::F32, Precision::Bf16] {
        let steps = match p {
            Precision::F32 => steps.to_vec(),
            Precision::Bf16 => rounded(steps),
        };
        let diffs = compare_op(dev, op, &steps, consts, p)
            .unwrap_or_else(|e| panic!("{name} [{p:?}]: {e}"));
        assert_within(name, &diffs, p);
    }
}

/// Three steps of inputs: `make(step)` for each.
fn steps(make: impl Fn(u64) -> Vec<Tensor>) -> Vec<Vec<Tensor>> {
    (0..3).map(make).collect()
}

/// `build_for` fails with a message naming `what` (the builder's own Err,
/// not a missing GPU form), for every precision.
fn assert_build_err(dev: &GpuDevice, op: &dyn Op, inputs: &[&Tensor], consts: &[bool], what: &str) {
    for p in [Precision::F32, Precision::Bf16] {
        match build_for(dev, op, inputs, consts, p) {
            Ok(g) => panic!(
                "{} [{p:?}]: expected an Err, built {}",
                op.name(),
                g.describe()
            ),
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(what),
                    "{} [{p:?}]: unexpected error {msg}",
                    op.name()
                );
                eprintln!("{} [{p:?}] falls back: {msg}", op.name());
            }
        }
    }
}

const ROW_SHAPES: &[&[usize]] = &[
    &[8, 256],
    &[1, 256],
    &[300, 256],
    &[5, 77],
    &[300, 29],
    &[3, 3000],
    &[2, 3, 40],
];

#[test]
#[ignore]
fn layer_norm_matches_cpu() {
    let Some(dev) = device() else { return };
    for &shape in ROW_SHAPES {
        let c = *shape.last().unwrap();
        let op = LayerNorm {
            eps: 1e-5,
            axis: -1,
        };
        let name = format!("LayerNorm {shape:?}");
        let affine = steps(|s| {
            vec![
                tensor(shape, 10 + s, 2.0, 0.7),
                tensor(&[c], 1, 0.5, 1.0),
                tensor(&[c], 2, 0.3, 0.0),
            ]
        });
        check(&dev, &name, &op, &affine, &[false, true, true]);
        let plain = steps(|s| vec![tensor(shape, 20 + s, 3.0, -1.0)]);
        check(&dev, &format!("{name} no affine"), &op, &plain, &[false]);
    }
    // other axes than the last: a thread per lane
    for (shape, axis) in [
        (&[6usize, 5, 7][..], 0isize),
        (&[6, 5, 7], 1),
        (&[300, 256], 0),
    ] {
        let c = shape[axis as usize];
        let op = LayerNorm { eps: 1e-3, axis };
        let st = steps(|s| {
            vec![
                tensor(shape, 30 + s, 2.0, 0.5),
                tensor(&[c], 3, 0.5, 1.0),
                tensor(&[c], 4, 0.3, 0.0),
            ]
        });
        check(
            &dev,
            &format!("LayerNorm {shape:?} axis {axis}"),
            &op,
            &st,
            &[false, true, true],
        );
    }
    // constant rows normalise to beta (variance 0 + eps)
    let flat = Tensor::from_vec(vec![4, 256], vec![3.0f32; 1024]).unwrap();
    let op = LayerNorm {
        eps: 1e-5,
        axis: -1,
    };
    let st = vec![vec![
        flat,
        tensor(&[256], 5, 0.5, 1.0),
        tensor(&[256], 6, 0.3, 0.0),
    ]];
    check(
        &dev,
        "LayerNorm constant rows",
        &op,
        &st,
        &[false, true, true],
    );
}

#[test]
#[ignore]
fn batch_norm_matches_cpu() {
    let Some(dev) = device() else { return };
    for (shape, axis) in [
        (&[8usize, 256][..], -1isize),
        (&[300, 256], 1),
        (&[2, 64, 37], 1),
        (&[5, 77], 0),
    ] {
        let c = shape[axis.rem_euclid(shape.len() as isize) as usize];
        let op = BatchNorm { eps: 1e-5, axis };
        let st = steps(|s| {
            vec![
                tensor(shape, 40 + s, 2.0, 0.3),
                tensor(&[c], 7, 0.5, 1.0),
                tensor(&[c], 8, 0.3, 0.0),
                tensor(&[c], 9, 1.0, 0.0),
                tensor(&[c], 10, 0.4, 0.6),
            ]
        });
        let consts = [false, true, true, true, true];
        check(
            &dev,
            &format!("BatchNorm {shape:?} axis {axis}"),
            &op,
            &st,
            &consts,
        );
    }
}

#[test]
#[ignore]
fn softmax_and_log_softmax_match_cpu() {
    let Some(dev) = device() else { return };
    let cases = ROW_SHAPES.iter().map(|&s| (s, -1isize)).chain([
        (&[7usize, 5, 3][..], 0isize),
        (&[7, 5, 3], 1),
        (&[300, 29], 0),
    ]);
    for (shape, axis) in cases {
        let st = steps(|s| vec![tensor(shape, 50 + s, 4.0, 0.0)]);
        check(
            &dev,
            &format!("Softmax {shape:?} axis {axis}"),
            &Softmax { axis },
            &st,
            &[false],
        );
        let op = LogSoftmax { axis };
        check(
            &dev,
            &format!("LogSoftmax {shape:?} axis {axis}"),
            &op,
            &st,
            &[false],
        );
    }
    // large logits: the max is subtracted before exp
    let st = steps(|s| vec![tensor(&[8, 256], 60 + s, 30.0, 1000.0)]);
    check(&dev, "Softmax large", &Softmax { axis: -1 }, &st, &[false]);
}

#[test]
#[ignore]
fn reductions_match_cpu() {
    let Some(dev) = device() else { return };
    let cases: &[(&[usize], &[isize])] = &[
        (&[8, 256], &[-1]),
        (&[1, 256], &[1]),
        (&[300, 256], &[-1]),
        (&[5, 77], &[-1]),
        (&[300, 29], &[-1]),
        (&[2, 5000], &[-1]),
        (&[5, 77], &[0]),
        (&[3, 4, 5, 6], &[-2, -1]),
        (&[3, 4, 5, 6], &[1, 2]),
        (&[3, 1, 5, 6], &[1, 2]),
        (&[5, 77], &[]),
        (&[7], &[0]),
    ];
    for &(shape, axes) in cases {
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max] {
            for keep_dims in [false, true] {
                let r = Reduce {
                    op,
                    axes: axes.to_vec(),
                    keep_dims,
                };
                let st = steps(|s| vec![tensor(shape, 70 + s, 2.0, 0.2)]);
                let name = format!("Reduce {op:?} {shape:?} axes {axes:?} keep {keep_dims}");
                check(&dev, &name, &r, &st, &[false]);
            }
        }
    }
    // i64: wrapping sum and max, exact
    for (shape, axes) in [(&[8usize, 256][..], &[-1isize][..]), (&[5, 77], &[0])] {
        for op in [ReduceOp::Sum, ReduceOp::Max] {
            let r = Reduce {
                op,
                axes: axes.to_vec(),
                keep_dims: false,
            };
            let st = steps(|s| {
                let n = shape.iter().product();
                let v = random(n, 80 + s, 1000.0, 0.0)
                    .iter()
                    .map(|&a| a as i64)
                    .collect();
                vec![Tensor::from_vec(shape.to_vec(), v).unwrap()]
            });
            check(
                &dev,
                &format!("Reduce i64 {op:?} {shape:?} {axes:?}"),
                &r,
                &st,
                &[false],
            );
        }
    }
}

#[test]
#[ignore]
fn argmax_matches_cpu_first_max_on_ties() {
    let Some(dev) = device() else { return };
    let cases = ROW_SHAPES
        .iter()
        .map(|&s| (s, -1isize))
        .chain([(&[5usize, 77][..], 0isize), (&[7, 5, 3], 1)]);
    for (shape, axis) in cases {
        for keep_dims in [false, true] {
            let op = ArgMax { axis, keep_dims };
            // few distinct values (exact in bf16): ties are everywhere
            let st = steps(|s| {
                let n = shape.iter().product();
                let v = random(n, 90 + s, 4.0, 0.0)
                    .iter()
                    .map(|a| a.round())
                    .collect();
                vec![Tensor::from_vec(shape.to_vec(), v).unwrap()]
            });
            check(
                &dev,
                &format!("ArgMax ties {shape:?} axis {axis}"),
                &op,
                &st,
                &[false],
            );
            let st = steps(|s| vec![tensor(shape, 100 + s, 3.0, 0.0)]);
            check(
                &dev,
                &format!("ArgMax {shape:?} axis {axis}"),
                &op,
                &st,
                &[false],
            );
        }
    }
}

/// A head's weights `[v, d]` and bias `[v]`.
fn head(d: usize, v: usize, seed: u64) -> (Tensor, Tensor) {
    (
        tensor(&[v, d], seed, 0.25, 0.0),
        tensor(&[v], seed + 1, 1.0, 0.0),
    )
}

#[test]
#[ignore]
fn ctc_head_matches_cpu() {
    let Some(dev) = device() else { return };
    let d = 256;
    for v in [29, 1000] {
        for t in [8, 300, 5] {
            let (w, b) = head(d, v, 200 + v as u64);
            let greedy = CtcHead {
                mode: CtcHeadMode::Greedy,
            };
            let st = steps(|s| vec![tensor(&[t, d], 300 + s, 1.0, 0.0), w.clone(), b.clone()]);
            let name = format!("CtcHead greedy T {t} V {v}");
            check(&dev, &name, &greedy, &st, &[false, true, true]);

            let score = CtcHead {
                mode: CtcHeadMode::Score,
            };
            let ids: Vec<i64> = (0..t as i64).map(|i| (i * 7 + 3) % v as i64).collect();
            let targets = Tensor::from_vec(vec![t], ids).unwrap();
            let st = steps(|s| {
                vec![
                    tensor(&[t, d], 400 + s, 1.0, 0.0),
                    w.clone(),
                    b.clone(),
                    targets.clone(),
                ]
            });
            let name = format!("CtcHead score T {t} V {v}");
            check(&dev, &name, &score, &st, &[false, true, true, true]);
        }
    }
    // odd feature sizes
    let (w, b) = head(77, 29, 5);
    let st = steps(|s| vec![tensor(&[9, 77], 500 + s, 1.0, 0.0), w.clone(), b.clone()]);
    let greedy = CtcHead {
        mode: CtcHeadMode::Greedy,
    };
    check(
        &dev,
        "CtcHead greedy d 77",
        &greedy,
        &st,
        &[false, true, true],
    );
}

#[test]
#[ignore]
fn ctc_head_ties_pick_the_first_token() {
    let Some(dev) = device() else { return };
    let (d, v) = (256, 29);
    let (w, b) = head(d, v, 600);
    // tokens 3, 11 (same warp) and 17 (another warp) share a row and a bias
    // far above the rest: every frame is a three-way tie, won by token 3
    let mut wv = w.to_vec::<f32>().unwrap();
    let row: Vec<f32> = wv[3 * d..4 * d].to_vec();
    for k in [11, 17] {
        wv[k * d..(k + 1) * d].copy_from_slice(&row);
    }
    let mut bv = b.to_vec::<f32>().unwrap();
    for k in [3, 11, 17] {
        bv[k] = 40.0;
    }
    let w = Tensor::from_vec(vec![v, d], wv).unwrap();
    let b = Tensor::from_vec(vec![v], bv).unwrap();
    let greedy = CtcHead {
        mode: CtcHeadMode::Greedy,
    };
    let st = steps(|s| vec![tensor(&[8, d], 700 + s, 1.0, 0.0), w.clone(), b.clone()]);
    check(&dev, "CtcHead ties", &greedy, &st, &[false, true, true]);
    let ids = pulsed::ops::eval_op(&greedy, &[&st[0][0], &w, &b]).unwrap();
    assert!(ids[0].to_vec::<i64>().unwrap().iter().all(|&i| i == 3));
}

#[test]
#[ignore]
fn unsupported_params_fall_back() {
    let Some(dev) = device() else { return };
    let (d, v, t) = (256, 29, 8);
    let (w, b) = head(d, v, 800);
    let x = tensor(&[t, d], 801, 1.0, 0.0);
    let score = CtcHead {
        mode: CtcHeadMode::Score,
    };
    let targets = Tensor::from_vec(vec![t], vec![0i64, 1, 2, 3, 4, 5, 6, 7]).unwrap();
    // runtime targets: only the CPU op checks them
    assert_build_err(
        &dev,
        &score,
        &[&x, &w, &b, &targets],
        &[false, true, true, false],
        "ctc_head",
    );
    // a constant target outside the vocabulary
    let bad = Tensor::from_vec(vec![t], vec![0i64, 1, 2, 29, 4, 5, 6, 7]).unwrap();
    assert_build_err(
        &dev,
        &score,
        &[&x, &w, &b, &bad],
        &[false, true, true, true],
        "target id 29",
    );
    let neg = Tensor::from_vec(vec![t], vec![0i64, -1, 2, 3, 4, 5, 6, 7]).unwrap();
    assert_build_err(
        &dev,
        &score,
        &[&x, &w, &b, &neg],
        &[false, true, true, true],
        "target id -1",
    );
    // features too wide for the staged frames
    let (w2, b2) = head(4096, v, 802);
    let x2 = tensor(&[t, 4096], 803, 1.0, 0.0);
    let greedy = CtcHead {
        mode: CtcHeadMode::Greedy,
    };
    assert_build_err(
        &dev,
        &greedy,
        &[&x2, &w2, &b2],
        &[false, true, true],
        "shared memory",
    );
    // reduced axes with a kept axis between them
    let x3 = tensor(&[3, 4, 5], 804, 1.0, 0.0);
    let r = Reduce {
        op: ReduceOp::Sum,
        axes: vec![0, 2],
        keep_dims: false,
    };
    assert_build_err(&dev, &r, &[&x3], &[false], "not consecutive");
    // arg-max of integers
    let xi = Tensor::from_vec(vec![2, 3], vec![1i64, 5, 2, 7, 7, 0]).unwrap();
    assert_build_err(
        &dev,
        &ArgMax {
            axis: -1,
            keep_dims: false,
        },
        &[&xi],
        &[false],
        "ArgMax",
    );
    // f16 storage (f32 precision keeps it) has no kernel
    let xh = tensor(&[8, 256], 805, 1.0, 0.0).cast(DType::F16);
    match build_for(
        &dev,
        &Softmax { axis: -1 },
        &[&xh],
        &[false],
        Precision::F32,
    ) {
        Ok(g) => panic!("f16 softmax built {}", g.describe()),
        Err(e) => assert!(
            matches!(&e, GpuError::Refused { why, .. } if why.contains("no float kernel")),
            "{e}"
        ),
    }
    // mixed parameter dtypes in f32 precision
    let g16 = tensor(&[256], 806, 1.0, 0.0).cast(DType::F16);
    let b32 = tensor(&[256], 807, 1.0, 0.0);
    let xf = tensor(&[8, 256], 808, 1.0, 0.0);
    let ln = LayerNorm {
        eps: 1e-5,
        axis: -1,
    };
    match build_for(
        &dev,
        &ln,
        &[&xf, &g16, &b32],
        &[false, true, true],
        Precision::F32,
    ) {
        Ok(g) => panic!("mixed-dtype layer norm built {}", g.describe()),
        Err(e) => assert!(
            matches!(&e, GpuError::Refused { op, .. } if op == "LayerNorm"),
            "{e}"
        ),
    }
}

/// A decoder step's choice of tokens on the device (TopTokens) against the
/// CPU op, over Whisper's vocabulary: rows with no rule, the first-step
/// list, timestamp ranges with the probability check both ways, the
/// no-speech probability, running scores and sampled rows (a draw by the
/// caller's uniform); the same ids, scores within f32 rounding. bf16
/// storage is refused (the node then runs on the CPU).
#[test]
#[ignore]
fn top_tokens_choose_as_the_cpu() {
    use pulsed::ops::top_tokens::{RowRules, TopTokens, ROW_PARAMS};
    let Some(dev) = device() else { return };
    let (vocab, ts_begin, eot) = (51_864usize, 50_364u32, 50_256u32);
    let mut rows = vec![RowRules::NONE; 8];
    rows[0].no_speech = Some(50_361);
    rows[1].begin = true;
    rows[2].ranges[0] = (0, ts_begin - 1); // only timestamps
    rows[3].check = Some((ts_begin, vocab as u32 - 1)); // timestamps may win
    rows[4].check = Some((ts_begin, vocab as u32 - 1));
    rows[4].ranges[0] = (ts_begin, ts_begin + 40);
    rows[5].ranges = [
        (0, eot - 1),
        (50_362, 50_362),
        (ts_begin, ts_begin + 3),
        (1, 0),
    ];
    rows[5].check = Some((ts_begin, vocab as u32 - 1));
    rows[6].ranges[0] = (ts_begin, vocab as u32 - 1); // text only
    rows[7].sample = Some((0.7, 0.37)); // a draw, as the fallback's samples
    rows.push(RowRules {
        sample: Some((1.0, 0.999)),
        ..rows[3]
    });
    let n = rows.len();
    for (k, seed) in [(10, 1u64), (1, 2), (3, 3)] {
        let mut logits = random(n * vocab, seed, 6.0, -2.0);
        // a few likely text tokens, and timestamps that together outweigh
        // them in row 3 (not in row 4, whose best ones are disabled)
        for r in 0..n {
            logits[r * vocab + 13 + r] = 9.0;
        }
        for j in 0..60 {
            logits[3 * vocab + ts_begin as usize + j] = 7.5;
            logits[4 * vocab + ts_begin as usize + j] = 7.5;
        }
        let rules: Vec<i64> = rows.iter().flat_map(|r| r.encode()).collect();
        let cum: Vec<f32> = (0..n).map(|r| -(r as f32) * 1.7).collect();
        let mut masks = vec![false; 2 * vocab];
        for id in [1usize, 2, 7, 50_257, 50_362] {
            masks[id] = true;
        }
        for id in [220usize, eot as usize] {
            masks[vocab + id] = true;
        }
        let inputs = vec![
            Tensor::from_vec(vec![n, vocab], logits).unwrap(),
            Tensor::from_vec(vec![n, ROW_PARAMS], rules).unwrap(),
            Tensor::from_vec(vec![n], cum).unwrap(),
            Tensor::from_vec(vec![2, vocab], masks).unwrap(),
        ];
        let op = TopTokens { k };
        let diffs = compare_op(
            &dev,
            &op,
            std::slice::from_ref(&inputs),
            &[],
            Precision::F32,
        )
        .unwrap_or_else(|e| panic!("k {k}: {e}"));
        for d in &diffs {
            eprintln!(
                "top tokens k {k}: output {} max abs {:e} (values up to {})",
                d.output, d.max_abs, d.scale
            );
        }
        assert_eq!(diffs[0].max_abs, 0.0, "k {k}: other ids");
        assert!(diffs[1].relative() < 1e-5, "k {k}: scores {:?}", diffs[1]);
        assert!(
            diffs[2].relative() < 1e-5,
            "k {k}: no-speech {:?}",
            diffs[2]
        );
        let refs: Vec<&Tensor> = inputs.iter().collect();
        match build_for(&dev, &op, &refs, &[], Precision::Bf16) {
            Ok(g) => panic!("bf16 top tokens built {}", g.describe()),
            Err(e) => eprintln!("bf16 top tokens fall back: {e}"),
        }
    }
}
