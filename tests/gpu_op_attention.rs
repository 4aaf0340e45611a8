//! GPU attention, right-context copies, LSTM and Unfold against their CPU
//! ops (ignored by default: run on the GPU machine with
//! `--include-ignored`). Each test returns early, saying so, when no GPU is
//! usable, unless PULSED_REQUIRE_GPU=1.
#![cfg(feature = "cuda")]

use pulsed::gpu::test_util::{assert_within, build_for, compare_op, compare_op_ending};
use pulsed::gpu::{GpuDevice, Precision};
use pulsed::ops::attention::Attention;
use pulsed::ops::chunked_attention::ChunkedAttention;
use pulsed::ops::copies_attention::CopiesAttention;
use pulsed::ops::limited_attention::LimitedAttention;
use pulsed::ops::lstm::Lstm;
use pulsed::ops::right_copies::RightCopies;
use pulsed::ops::{DType, Dim, Op, Tensor};
use pulsed::pulse::{
    PulsedChunkedAttention, PulsedCopiesAttention, PulsedLimitedAttention, PulsedLstm,
    PulsedRightCopies, Unfold,
};

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

/// Deterministic values in [-scale, scale) (xorshift): never all zeros.
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

/// The inputs as the device stores them at `precision`: float inputs
/// rounded through bf16 for Bf16, so the CPU reference sees the same values.
fn at(precision: Precision, inputs: &[Tensor]) -> Vec<Tensor> {
    inputs
        .iter()
        .map(|t| match (precision, t.dtype()) {
            (Precision::Bf16, DType::F32) => t.cast(DType::BF16).cast(DType::F32),
            _ => t.clone(),
        })
        .collect()
}

const BOTH: [Precision; 2] = [Precision::F32, Precision::Bf16];

/// Compares `op` over `steps` at both precisions.
fn check(dev: &GpuDevice, name: &str, op: &dyn Op, steps: &[Vec<Tensor>], consts: &[bool]) {
    for p in BOTH {
        let steps: Vec<Vec<Tensor>> = steps.iter().map(|s| at(p, s)).collect();
        let diffs = compare_op(dev, op, &steps, consts, p)
            .unwrap_or_else(|e| panic!("{name} [{p:?}]: {e}"));
        assert_within(name, &diffs, p);
    }
}

/// Asserts whether `op` on the first step's inputs runs as one block per
/// head over the whole tile (`tile`) or one block per query row.
fn expect_tile(dev: &GpuDevice, name: &str, op: &dyn Op, steps: &[Vec<Tensor>], tile: bool) {
    let refs: Vec<&Tensor> = steps[0].iter().collect();
    let g =
        build_for(dev, op, &refs, &[], Precision::F32).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        g.describe().contains("(tile)"),
        tile,
        "{name}: {}",
        g.describe()
    );
}

/// `n` steps of q [rows_q, d], k and v [rows_k, d], fresh values each step.
fn qkv_steps(n: usize, rows_q: usize, rows_k: usize, d: usize, seed: u64) -> Vec<Vec<Tensor>> {
    (0..n as u64)
        .map(|s| {
            let b = seed * 1000 + s * 3;
            vec![
                tensor(&[rows_q, d], b, 1.0),
                tensor(&[rows_k, d], b + 1, 1.0),
                tensor(&[rows_k, d], b + 2, 1.0),
            ]
        })
        .collect()
}

#[test]
#[ignore]
fn pulsed_limited_attention_shipped_shapes() {
    let Some(dev) = device() else { return };
    // conformer: 4 heads of 64, pulse 8, left context 64; 14 steps fill the
    // left context (112 frames > 64) and slide it; delays put the stream start
    // inside a pulse and inside the left context
    for delay in [0, 5, 13, 70] {
        let op = PulsedLimitedAttention {
            attn: LimitedAttention {
                heads: 4,
                left_context: 64,
                scale: None,
            },
            pulse: 8,
            delay,
        };
        let steps = qkv_steps(14, 8, 72, 256, 1 + delay as u64);
        expect_tile(&dev, "shipped shapes", &op, &steps, true);
        check(
            &dev,
            &format!("pulsed attention delay {delay}"),
            &op,
            &steps,
            &[],
        );
    }
}

#[test]
#[ignore]
fn pulsed_limited_attention_odd_shapes() {
    let Some(dev) = device() else { return };
    // the last two windows are too long for one block's shared memory
    // (a block per query row instead)
    for (heads, d, p, lc, delay, scale) in [
        (2, 48, 3, 5, 0, None),
        (2, 48, 3, 5, 4, Some(0.3)),
        (3, 21, 1, 7, 2, None),
        (1, 40, 5, 0, 3, None),
        (2, 128, 8, 400, 3, None),
        (4, 256, 4, 200, 250, None),
    ] {
        let op = PulsedLimitedAttention {
            attn: LimitedAttention {
                heads,
                left_context: lc,
                scale,
            },
            pulse: p,
            delay,
        };
        let steps = qkv_steps(12, p, p + lc, d, (heads * 100 + d + delay) as u64);
        let name = format!("pulsed attention h{heads} d{d} p{p} lc{lc} delay{delay}");
        expect_tile(&dev, &name, &op, &steps, lc < 200);
        check(&dev, &name, &op, &steps, &[]);
    }
}

#[test]
#[ignore]
fn limited_attention_whole_utterance() {
    let Some(dev) = device() else { return };
    for (heads, d, t, lc) in [
        (4, 256, 1000, 64),
        (2, 48, 37, 5),
        (3, 30, 50, 100),
        (1, 8, 1, 0),
    ] {
        let op = LimitedAttention {
            heads,
            left_context: lc,
            scale: None,
        };
        let steps = qkv_steps(2, t, t, d, (t + lc) as u64);
        let name = format!("limited attention h{heads} d{d} t{t} lc{lc}");
        check(&dev, &name, &op, &steps, &[]);
    }
}

/// `steps` with a batch axis of `batch` (each sequence its own values).
fn batched(steps: &[Vec<Tensor>], batch: usize, seed: u64) -> Vec<Vec<Tensor>> {
    steps
        .iter()
        .enumerate()
        .map(|(si, ins)| {
            ins.iter()
                .enumerate()
                .map(|(i, t)| {
                    let mut shape = vec![batch];
                    shape.extend_from_slice(t.shape());
                    tensor(&shape, seed + (si * 3 + i) as u64, 1.0)
                })
                .collect()
        })
        .collect()
}

/// Compares the pulsed `op` over `steps` at both precisions, alone and in a
/// batch of 2, with the stream's length `len` known from step `end_at` on.
fn check_ending(
    dev: &GpuDevice,
    name: &str,
    op: &dyn Op,
    plain: &[Vec<Tensor>],
    (end_at, len): (usize, i64),
    seed: u64,
) {
    for (what, steps) in [
        ("", plain.to_vec()),
        (" batch 2", batched(plain, 2, seed + 7)),
    ] {
        for p in BOTH {
            let steps: Vec<Vec<Tensor>> = steps.iter().map(|s| at(p, s)).collect();
            let diffs = compare_op_ending(dev, op, &steps, &[], p, Some((end_at, len)))
                .unwrap_or_else(|e| panic!("{name}{what} [{p:?}]: {e}"));
            assert_within(&format!("{name}{what}"), &diffs, p);
        }
    }
}

#[test]
#[ignore]
fn pulsed_chunked_attention_streams_and_ends() {
    let Some(dev) = device() else { return };
    // (heads, width, chunk, left, right, pulse, delay): Whisper tiny's
    // student (16 + 8 over a 1500-frame past), chunks a pulse does not
    // divide (the worst-case lag), one-frame chunks, stream starts inside a
    // pulse and inside a chunk
    for (heads, d, chunk, left, right, pulse, delay, steps) in [
        (6, 384, 16, 1500, 8, 16, 3, 4),
        (2, 48, 4, 7, 2, 8, 0, 12),
        (2, 48, 4, 7, 2, 8, 5, 12),
        (3, 30, 3, 5, 0, 4, 2, 12),
        (1, 16, 1, 3, 0, 1, 0, 12),
        (4, 64, 8, 20, 8, 16, 11, 8),
    ] {
        let attn = ChunkedAttention {
            heads,
            chunk,
            left,
            right,
        };
        let lag = PulsedChunkedAttention::lag_for(&attn, pulse, delay);
        let op = PulsedChunkedAttention {
            attn,
            pulse,
            delay,
            lag,
            len: Dim::s(),
        };
        let rows_k = pulse + op.overlap();
        let seed = (heads * 100 + d + delay + chunk) as u64;
        let plain = qkv_steps(steps, pulse, rows_k, d, seed);
        // the stream ends a few frames into the last steps' queries
        let end_at = steps - 2;
        let len = (end_at * pulse) as i64 - (delay + lag) as i64 + 2;
        let name =
            format!("pulsed chunked h{heads} d{d} c{chunk} l{left} r{right} p{pulse} delay{delay}");
        check_ending(&dev, &name, &op, &plain, (end_at, len), seed);
    }
}

#[test]
#[ignore]
fn chunked_attention_whole_window() {
    let Some(dev) = device() else { return };
    for (heads, d, t, chunk, left, right) in [
        (6, 384, 300, 16, 1500, 8),
        (2, 48, 37, 4, 7, 2),
        (3, 30, 50, 5, 0, 0),
        (1, 8, 1, 3, 2, 1),
    ] {
        let op = ChunkedAttention {
            heads,
            chunk,
            left,
            right,
        };
        let steps = qkv_steps(1, t, t, d, (t + chunk) as u64);
        let name = format!("chunked attention h{heads} d{d} t{t} c{chunk} l{left} r{right}");
        check(&dev, &name, &op, &steps, &[]);
        check(
            &dev,
            &format!("{name} batch 3"),
            &op,
            &batched(&steps, 3, 9),
            &[],
        );
    }
}

/// `n` steps of q [rows_q, 2, d], k and v [rows_k, 2, d] (a frame and its
/// copy slot per row), fresh values each step.
fn slotted_qkv_steps(
    n: usize,
    rows_q: usize,
    rows_k: usize,
    d: usize,
    seed: u64,
) -> Vec<Vec<Tensor>> {
    (0..n as u64)
        .map(|s| {
            let b = seed * 1000 + s * 3;
            vec![
                tensor(&[rows_q, 2, d], b, 1.0),
                tensor(&[rows_k, 2, d], b + 1, 1.0),
                tensor(&[rows_k, 2, d], b + 2, 1.0),
            ]
        })
        .collect()
}

#[test]
#[ignore]
fn pulsed_copies_attention_streams_and_ends() {
    let Some(dev) = device() else { return };
    // (heads, width, chunk, left, right, pulse, delay, steps): Whisper
    // tiny's copies context (8 + 6 over a 1500-frame past), pulses of whole
    // chunks and not (the worst-case lag), copies of a whole chunk, none,
    // one-frame chunks, no left context, stream starts inside a pulse and
    // inside a chunk
    for (heads, d, chunk, left, right, pulse, delay, steps) in [
        (6, 384, 8, 1500, 6, 8, 3, 4),
        (2, 48, 4, 7, 2, 8, 0, 12),
        (2, 48, 4, 7, 2, 8, 5, 12),
        (3, 30, 3, 5, 3, 4, 2, 12),
        (1, 16, 1, 3, 1, 1, 0, 12),
        (4, 64, 8, 20, 0, 16, 11, 8),
        (2, 32, 5, 0, 4, 3, 1, 14),
    ] {
        let attn = CopiesAttention {
            heads,
            chunk,
            left,
            right,
        };
        let lag = PulsedCopiesAttention::lag_for(&attn, pulse, delay);
        let op = PulsedCopiesAttention {
            attn,
            pulse,
            delay,
            lag,
            len: Dim::s(),
        };
        let rows_k = pulse + op.overlap();
        let seed = (heads * 100 + d + delay + chunk) as u64;
        let plain = slotted_qkv_steps(steps, pulse, rows_k, d, seed);
        // the stream ends a few frames into the last steps' queries
        let end_at = steps - 2;
        let len = (end_at * pulse) as i64 - (delay + lag) as i64 + 2;
        let name =
            format!("pulsed copies h{heads} d{d} c{chunk} l{left} r{right} p{pulse} delay{delay}");
        check_ending(&dev, &name, &op, &plain, (end_at, len), seed);
    }
}

#[test]
#[ignore]
fn copies_attention_whole_window() {
    let Some(dev) = device() else { return };
    for (heads, d, t, chunk, left, right) in [
        (6, 384, 300, 8, 1500, 6),
        (2, 48, 37, 4, 7, 2),
        (3, 30, 50, 5, 0, 5),
        (2, 16, 23, 6, 4, 0),
        (1, 8, 1, 3, 2, 1),
    ] {
        let op = CopiesAttention {
            heads,
            chunk,
            left,
            right,
        };
        let steps = slotted_qkv_steps(1, t, t, d, (t + chunk) as u64);
        let name = format!("copies attention h{heads} d{d} t{t} c{chunk} l{left} r{right}");
        check(&dev, &name, &op, &steps, &[]);
        check(
            &dev,
            &format!("{name} batch 3"),
            &op,
            &batched(&steps, 3, 9),
            &[],
        );
    }
}

#[test]
#[ignore]
fn pulsed_right_copies_streams_and_ends() {
    let Some(dev) = device() else { return };
    // (chunk, right, pulse, delay, width, steps), as the copies attention's
    for (chunk, right, pulse, delay, d, steps) in [
        (8, 6, 8, 3, 384, 6),
        (4, 2, 8, 0, 5, 12),
        (4, 2, 8, 5, 5, 12),
        (3, 3, 4, 2, 7, 12),
        (1, 1, 1, 0, 3, 12),
        (5, 0, 3, 1, 6, 10),
        (6, 4, 16, 11, 9, 8),
    ] {
        let op = RightCopies { chunk, right };
        // the lag of its pulse rule: a chunk's copies reach `right` past it
        let reach = ChunkedAttention {
            heads: 1,
            chunk,
            left: 0,
            right,
        };
        let lag = PulsedChunkedAttention::lag_for(&reach, pulse, delay);
        let op = PulsedRightCopies {
            op,
            pulse,
            delay,
            lag,
            len: Dim::s(),
        };
        let seed = (chunk * 100 + right * 10 + pulse + delay) as u64;
        let plain: Vec<Vec<Tensor>> = (0..steps as u64)
            .map(|s| vec![tensor(&[pulse + lag, d], seed * 1000 + s, 1.0)])
            .collect();
        // the stream ends a chunk into the last steps' rows: their copies
        // lie past it
        let end_at = steps - 2;
        let len = (end_at * pulse) as i64 - (delay + lag) as i64 + chunk as i64;
        let name = format!("pulsed right copies c{chunk} r{right} p{pulse} delay{delay} d{d}");
        check_ending(&dev, &name, &op, &plain, (end_at, len), seed);
    }
}

#[test]
#[ignore]
fn right_copies_whole() {
    let Some(dev) = device() else { return };
    for (shape, chunk, right) in [
        (vec![37, 48], 4, 2),
        (vec![1, 300, 384], 8, 6),
        (vec![2, 3, 10, 5], 3, 3),
        (vec![9, 4], 5, 0),
        (vec![1, 8], 3, 1),
    ] {
        let op = RightCopies { chunk, right };
        let steps = vec![vec![tensor(&shape, (chunk * 10 + right) as u64, 1.0)]];
        check(
            &dev,
            &format!("right copies {shape:?} c{chunk} r{right}"),
            &op,
            &steps,
            &[],
        );
    }
}

#[test]
#[ignore]
fn sdpa_shapes_and_masks() {
    let Some(dev) = device() else { return };
    let op = Attention { scale: None };
    // bool mask: row 3 masked entirely (zeros), the rest random
    let mut bm: Vec<bool> = random(10 * 12, 5, 1.0).iter().map(|v| *v > -0.3).collect();
    for j in 0..12 {
        bm[3 * 12 + j] = false;
    }
    let bool_mask = Tensor::from_vec(vec![10, 12], bm).expect("mask");
    // float mask with -inf entries, broadcast over the second batch axis
    let mut fm = random(2 * 10 * 12, 6, 2.0);
    for (i, v) in fm.iter_mut().enumerate() {
        if i % 7 == 0 {
            *v = f32::NEG_INFINITY;
        }
    }
    let float_mask = Tensor::from_vec(vec![2, 1, 10, 12], fm).expect("mask");
    let cases: Vec<(&str, Vec<Tensor>)> = vec![
        (
            "plain",
            vec![
                tensor(&[2, 3, 10, 16], 1, 1.0),
                tensor(&[2, 3, 12, 16], 2, 1.0),
                tensor(&[2, 3, 12, 20], 3, 1.0),
            ],
        ),
        (
            "bool mask",
            vec![
                tensor(&[2, 3, 10, 16], 4, 1.0),
                tensor(&[2, 3, 12, 16], 5, 1.0),
                tensor(&[2, 3, 12, 20], 6, 1.0),
                bool_mask,
            ],
        ),
        (
            "float mask, broadcast k and v",
            vec![
                tensor(&[2, 3, 10, 16], 7, 1.0),
                tensor(&[3, 12, 16], 8, 1.0),
                tensor(&[1, 3, 12, 20], 9, 1.0),
                float_mask,
            ],
        ),
        (
            "rank 2, long keys",
            vec![
                tensor(&[33, 64], 10, 1.0),
                tensor(&[700, 64], 11, 1.0),
                tensor(&[700, 24], 12, 1.0),
            ],
        ),
    ];
    for (name, inputs) in cases {
        check(&dev, &format!("sdpa {name}"), &op, &[inputs], &[]);
    }
    // long unmasked rows run as two GEMMs around a softmax; masked ones,
    // and short ones, on the row kernel
    let whisper = vec![
        tensor(&[1, 6, 1500, 64], 16, 1.0),
        tensor(&[1, 6, 1500, 64], 17, 1.0),
        tensor(&[1, 6, 1500, 64], 18, 1.0),
    ];
    let gemm_cases: Vec<(&str, Vec<Tensor>, bool)> = vec![
        ("Whisper's encoder", whisper, true),
        (
            "broadcast k and v over heads",
            vec![
                tensor(&[4, 200, 32], 19, 2.0),
                tensor(&[1, 300, 32], 20, 2.0),
                tensor(&[300, 8], 21, 2.0),
            ],
            true,
        ),
        (
            "short rows",
            vec![
                tensor(&[2, 3, 10, 16], 22, 1.0),
                tensor(&[2, 3, 12, 16], 23, 1.0),
                tensor(&[2, 3, 12, 20], 24, 1.0),
            ],
            false,
        ),
    ];
    for (name, inputs, gemm) in gemm_cases {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let g = build_for(&dev, &op, &refs, &[], Precision::F32)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            g.describe().contains("GEMMs"),
            gemm,
            "{name}: {}",
            g.describe()
        );
        check(&dev, &format!("sdpa {name}"), &op, &[inputs], &[]);
    }
    let scaled = Attention { scale: Some(0.05) };
    let inputs = vec![
        tensor(&[5, 7, 9], 13, 3.0),
        tensor(&[5, 11, 9], 14, 3.0),
        tensor(&[5, 11, 4], 15, 3.0),
    ];
    check(&dev, "sdpa scale 0.05", &scaled, &[inputs], &[]);
}

/// LSTM inputs: x [rows, input], weights (scaled so gates are O(1)) and a
/// non-zero initial state.
fn lstm_inputs(rows: usize, input: usize, hidden: usize, seed: u64) -> Vec<Tensor> {
    let ws = 1.0 / (input.max(hidden) as f32).sqrt();
    vec![
        tensor(&[rows, input], seed, 1.0),
        tensor(&[4 * hidden, input], seed + 1, ws),
        tensor(&[4 * hidden, hidden], seed + 2, ws),
        tensor(&[4 * hidden], seed + 3, 0.5),
        tensor(&[4 * hidden], seed + 4, 0.5),
        tensor(&[hidden], seed + 5, 0.8),
        tensor(&[hidden], seed + 6, 1.5),
    ]
}

/// `n` steps of LSTM inputs: new x each step, the same weights and h0, c0.
fn lstm_steps(n: usize, rows: usize, input: usize, hidden: usize, seed: u64) -> Vec<Vec<Tensor>> {
    let base = lstm_inputs(rows, input, hidden, seed);
    (0..n as u64)
        .map(|s| {
            let mut ins = base.clone();
            ins[0] = tensor(&[rows, input], seed * 100 + s + 50, 1.0);
            ins
        })
        .collect()
}

const LSTM_CONSTS: [bool; 7] = [false, true, true, true, true, true, true];

#[test]
#[ignore]
fn pulsed_lstm_silero_and_odd_shapes() {
    let Some(dev) = device() else { return };
    // Silero: one 128-feature frame per pulse, hidden 128, delay 0
    for (rows, input, hidden, delay, steps) in [
        (1, 128, 128, 0, 8),
        (1, 128, 128, 2, 6),
        (1, 19, 37, 0, 5),
        (4, 7, 20, 6, 6),
        (3, 130, 9, 0, 5),
        (5, 16, 64, 12, 5),
    ] {
        let op = PulsedLstm {
            lstm: Lstm { hidden },
            delay,
        };
        let s = lstm_steps(
            steps,
            rows,
            input,
            hidden,
            (rows * 1000 + hidden + delay) as u64,
        );
        let name = format!("pulsed lstm p{rows} i{input} h{hidden} delay{delay}");
        check(&dev, &name, &op, &s, &LSTM_CONSTS);
    }
}

#[test]
#[ignore]
fn lstm_whole_sequence() {
    let Some(dev) = device() else { return };
    // T = 1 (one fused kernel) and longer sequences (projection + recurrence)
    for (rows, input, hidden) in [(1, 128, 128), (1, 5, 3), (50, 128, 128), (300, 24, 17)] {
        let op = Lstm { hidden };
        let s = lstm_steps(2, rows, input, hidden, (rows + hidden) as u64);
        let name = format!("lstm t{rows} i{input} h{hidden}");
        check(&dev, &name, &op, &s, &LSTM_CONSTS);
    }
}

#[test]
#[ignore]
fn unfold_whole_and_pulsed() {
    let Some(dev) = device() else { return };
    for (t, size, step, pad) in [
        (512 * 5, 576, 512, 64), // Silero, whole utterance
        (576, 576, 512, 0),      // Silero's pulsed form: one window behind a Delay
        (20, 7, 3, 2),
        (9, 3, 4, 0),
    ] {
        let op = Unfold {
            size,
            step,
            pad_before: pad,
        };
        let s: Vec<Vec<Tensor>> = (0..3)
            .map(|k| vec![tensor(&[t], k + t as u64, 1.0)])
            .collect();
        let name = format!("unfold t{t} size{size} step{step} pad{pad}");
        check(&dev, &name, &op, &s, &[]);
    }
}

#[test]
#[ignore]
fn unsupported_params_fall_back() {
    let Some(dev) = device() else { return };
    let expect_err = |name: &str, op: &dyn Op, ins: &[Tensor], p: Precision| {
        let refs: Vec<&Tensor> = ins.iter().collect();
        match build_for(&dev, op, &refs, &[], p) {
            Err(e) => eprintln!("{name}: falls back ({e})"),
            Ok(g) => panic!("{name}: built {}, expected an error", g.describe()),
        }
    };
    // a window of 20001 keys does not fit in shared memory
    let op = LimitedAttention {
        heads: 1,
        left_context: 20_000,
        scale: None,
    };
    let qkv = qkv_steps(1, 20_001, 20_001, 8, 1).remove(0);
    expect_err(
        "limited attention, huge left context",
        &op,
        &qkv,
        Precision::F32,
    );
    // batch axes that do not collapse to two
    let ins = vec![
        tensor(&[2, 3, 4, 5, 8], 1, 1.0),
        tensor(&[2, 1, 4, 6, 8], 2, 1.0),
        tensor(&[2, 3, 4, 6, 8], 3, 1.0),
    ];
    expect_err(
        "sdpa, three batch axes",
        &Attention { scale: None },
        &ins,
        Precision::F32,
    );
    // f16 stays f16 on the device at f32 precision: no kernel
    let h: Vec<Tensor> = lstm_inputs(2, 3, 4, 1)
        .iter()
        .map(|t| t.cast(DType::F16))
        .collect();
    expect_err("lstm f16", &Lstm { hidden: 4 }, &h, Precision::F32);
    // one row whose x does not fit in shared memory
    let wide = lstm_inputs(1, 16_000, 1, 2);
    expect_err(
        "lstm input 16000",
        &Lstm { hidden: 1 },
        &wide,
        Precision::Bf16,
    );
    // the same ops at supported sizes do build
    let ok = lstm_inputs(1, 128, 128, 3);
    let refs: Vec<&Tensor> = ok.iter().collect();
    let g = build_for(
        &dev,
        &Lstm { hidden: 128 },
        &refs,
        &LSTM_CONSTS,
        Precision::F32,
    )
    .expect("lstm builds");
    eprintln!("{}", g.describe());
}
