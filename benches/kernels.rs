//! CPU kernel figures: GFLOP/s of encoder-sized matmuls and convolutions
//! beside the single-core f32 peak measured on this machine.
//!
//! `cargo bench --bench kernels`. One thread throughout: the peak is one
//! core's, and the ops run their kernels without parallelism. Each figure is
//! the median of several timed samples after a warm-up (`best` is the
//! fastest sample, which on a shared machine is the least disturbed one);
//! the peak is the fastest of its samples. `allocs/eval` counts heap
//! allocations per steady-state eval (a counting global allocator).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pulsed::ops::conv::{Conv1d, ConvLayout};
use pulsed::ops::copies_attention::CopiesAttention;
use pulsed::ops::matmul::Linear;
use pulsed::ops::{Op, Scratch, Tensor};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const SAMPLES: usize = 15;
const SAMPLE_TIME: Duration = Duration::from_millis(5);

/// (median, best) of samples.
fn median_best(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() - 1])
}

/// FMAs on independent accumulators: enough of them (12 chains of 8 lanes)
/// to cover FMA latency x issue width on current x86 cores.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_avx2(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let mut acc = [_mm256_set1_ps(1.0); 12];
    for _ in 0..iters {
        // a fixed-size array indexed by constants stays in registers
        acc[0] = _mm256_fmadd_ps(acc[0], a, b);
        acc[1] = _mm256_fmadd_ps(acc[1], a, b);
        acc[2] = _mm256_fmadd_ps(acc[2], a, b);
        acc[3] = _mm256_fmadd_ps(acc[3], a, b);
        acc[4] = _mm256_fmadd_ps(acc[4], a, b);
        acc[5] = _mm256_fmadd_ps(acc[5], a, b);
        acc[6] = _mm256_fmadd_ps(acc[6], a, b);
        acc[7] = _mm256_fmadd_ps(acc[7], a, b);
        acc[8] = _mm256_fmadd_ps(acc[8], a, b);
        acc[9] = _mm256_fmadd_ps(acc[9], a, b);
        acc[10] = _mm256_fmadd_ps(acc[10], a, b);
        acc[11] = _mm256_fmadd_ps(acc[11], a, b);
    }
    let mut sum = _mm256_setzero_ps();
    for v in acc {
        sum = _mm256_add_ps(sum, v);
    }
    let mut out = [0f32; 8];
    _mm256_storeu_ps(out.as_mut_ptr(), sum);
    out.iter().sum()
}

/// Scalar fallback: 8 independent multiply-add chains.
fn fma_scalar(iters: u64) -> f32 {
    let (a, b) = (black_box(0.999_999f32), black_box(1e-7f32));
    let mut acc = [1f32; 8];
    for _ in 0..iters {
        for v in &mut acc {
            *v = *v * a + b;
        }
    }
    acc.iter().sum()
}

/// Single-core f32 peak in GFLOP/s, and how it was measured.
fn peak() -> (f64, &'static str) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        let iters = 4_000_000u64;
        // SAFETY: the features the function enables were just detected.
        black_box(unsafe { fma_avx2(iters / 10) });
        let rates = (0..SAMPLES)
            .map(|_| {
                let t = Instant::now();
                black_box(unsafe { fma_avx2(black_box(iters)) });
                (iters * 12 * 8 * 2) as f64 / t.elapsed().as_secs_f64() / 1e9
            })
            .collect();
        return (median_best(rates).1, "AVX2+FMA, 12 x 8-lane chains");
    }
    let iters = 20_000_000u64;
    let rates = (0..SAMPLES)
        .map(|_| {
            let t = Instant::now();
            black_box(fma_scalar(black_box(iters)));
            (iters * 8 * 2) as f64 / t.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    (median_best(rates).1, "scalar mul+add, 8 chains")
}

fn data(shape: &[usize], seed: u64) -> Tensor {
    let mut s = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let v = (0..shape.iter().product::<usize>())
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), v).expect("shape matches data")
}

/// (median, best) GFLOP/s of `op` on `inputs`, and allocations per
/// steady-state eval.
fn measure(op: &dyn Op, inputs: &[&Tensor], flops: f64) -> ((f64, f64), f64) {
    let (mut out, mut scratch) = (Vec::new(), Scratch::default());
    let mut eval = || {
        op.eval(inputs, &mut out, &mut scratch)
            .expect("bench shapes are valid")
    };
    let t = Instant::now();
    let mut warm = 0;
    while warm < 3 || t.elapsed() < Duration::from_millis(2) {
        eval();
        warm += 1;
    }
    let per = t.elapsed().as_secs_f64() / warm as f64;
    let reps = ((SAMPLE_TIME.as_secs_f64() / per) as usize).max(1);
    let mut rates = Vec::with_capacity(SAMPLES);
    let a0 = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..SAMPLES {
        let t = Instant::now();
        for _ in 0..reps {
            eval();
        }
        rates.push(flops * reps as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    let allocs = (ALLOCS.load(Ordering::Relaxed) - a0) as f64 / (SAMPLES * reps) as f64;
    (median_best(rates), allocs)
}

fn row(name: &str, ((median, best), allocs): ((f64, f64), f64), peak: f64) {
    let pct = |v: f64| 100.0 * v / peak;
    println!(
        "{name:<42} {median:>7.1} {:>6.0}% {best:>7.1} {:>6.0}% {allocs:>6.1}",
        pct(median),
        pct(best)
    );
}

fn main() {
    let start = Instant::now();
    let (peak, how) = peak();
    println!("single-core f32 peak: {peak:.1} GFLOP/s ({how})");
    println!();
    println!(
        "{:<42} {:>7} {:>7} {:>7} {:>7} {:>6}",
        "kernel", "median", "", "best", "", "allocs"
    );
    println!(
        "{:<42} {:>7} {:>7} {:>7} {:>7} {:>6}",
        "", "GFLOP/s", "of peak", "GFLOP/s", "of peak", "/eval"
    );

    for t in [16, 32, 64] {
        for (fan_in, fan_out) in [
            (256, 256),
            (256, 1024),
            (1024, 256),
            (512, 512),
            (1024, 1024),
        ] {
            let (x, w, b) = (
                data(&[t, fan_in], 1),
                data(&[fan_out, fan_in], 2),
                data(&[fan_out], 3),
            );
            let flops = 2.0 * (t * fan_in * fan_out) as f64;
            row(
                &format!("Linear T={t} {fan_in}->{fan_out}"),
                measure(&Linear, &[&x, &w, &b], flops),
                peak,
            );
        }
    }

    // a whole utterance at once, for comparison
    let (t, fan_in, fan_out) = (1024, 256, 1024);
    let (x, w, b) = (
        data(&[t, fan_in], 1),
        data(&[fan_out, fan_in], 2),
        data(&[fan_out], 3),
    );
    let flops = 2.0 * (t * fan_in * fan_out) as f64;
    row(
        &format!("Linear T={t} {fan_in}->{fan_out}"),
        measure(&Linear, &[&x, &w, &b], flops),
        peak,
    );

    let k = 3;
    let dense = Conv1d {
        stride: 2,
        dilation: 1,
        pad: (k - 1, 0),
        groups: 1,
        layout: ConvLayout::ChannelsLast,
    };
    for (c, o) in [(256, 256), (80, 256)] {
        for t in [32, 64] {
            let (x, w, b) = (data(&[t, c], 4), data(&[o, c, k], 5), data(&[o], 6));
            let t_out = (t + k - 1 - dense.extent(k)) / dense.stride + 1;
            let flops = 2.0 * (t_out * o * c * k) as f64;
            let name = format!("Conv1d k=3 s=2 T={t} {c}->{o} (T'={t_out})");
            row(&name, measure(&dense, &[&x, &w, &b], flops), peak);
        }
    }

    let k = 15;
    for c in [256, 512] {
        for t in [32, 64] {
            let dw = Conv1d {
                stride: 1,
                dilation: 1,
                pad: (k - 1, 0),
                groups: c,
                layout: ConvLayout::ChannelsLast,
            };
            let (x, w, b) = (data(&[t, c], 7), data(&[c, 1, k], 8), data(&[c], 9));
            let flops = 2.0 * (t * c * k) as f64;
            row(
                &format!("depthwise k=15 T={t} C={c}"),
                measure(&dw, &[&x, &w, &b], flops),
                peak,
            );
        }
    }

    // whisper-base's self-attention over a 30 s window with right-context
    // copies (the live path's tail; the streamed students' chunks are its
    // rows): the flops of the keys each row sees
    for (chunk, right) in [(16, 14), (8, 6)] {
        let (t, d, heads) = (1500, 512, 8);
        let a = CopiesAttention {
            heads,
            chunk,
            left: 1500,
            right,
        };
        let (q, k, v) = (
            data(&[t, 2, d], 10),
            data(&[t, 2, d], 11),
            data(&[t, 2, d], 12),
        );
        let seen: usize = (0..t as i64)
            .map(|i| {
                let ((lo, hi), (clo, chi)) = a.keys(i, t as i64);
                ((hi - lo + 1).max(0) + (chi - clo + 1).max(0)) as usize
            })
            .sum();
        let flops = 2.0 * 2.0 * 2.0 * (seen * d) as f64;
        row(
            &format!("CopiesAttention T={t} d={d} chunk {chunk} +{right}"),
            measure(&a, &[&q, &k, &v], flops),
            peak,
        );
    }
    println!();
    println!("total {:.1} s", start.elapsed().as_secs_f64());
}
