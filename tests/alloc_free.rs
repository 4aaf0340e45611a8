//! In steady state a pulsed chunk step allocates nothing: a counting global
//! allocator watches the steps after warm-up.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use pulsed::graph::GraphBuilder;
use pulsed::ops::limited_attention::LimitedAttention;
use pulsed::ops::{Binary, DType, Dim, Tensor, TypedFact, Unary};
use pulsed::pulse::{pulsify, StreamingSession};

struct Counting;

// Per thread: the test harness runs tests on parallel threads, and another
// test's allocations must not count against the step being watched.
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    // try_with: the thread-locals may be gone while a thread shuts down
    let _ = COUNTING.try_with(|c| {
        if c.get() {
            let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note();
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Counts allocations made by `f` on this thread.
fn count_allocs(f: impl FnOnce()) -> usize {
    ALLOCS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.with(|a| a.get())
}

#[test]
fn attention_graph_step_allocates_nothing() {
    let c = 16;
    let mut b = GraphBuilder::new();
    let x = b
        .input("x", TypedFact::new(DType::F32, [Dim::s(), Dim::n(c)]))
        .unwrap();
    let two = b.constant("two", Tensor::scalar(2.0f32)).unwrap();
    let q = b.op("q", Binary::Mul, &[x, two]).unwrap();
    let k = b.op("k", Unary::Tanh, &[x]).unwrap();
    let v = b.op("v", Unary::Silu, &[x]).unwrap();
    let a = b
        .op(
            "attn",
            LimitedAttention {
                heads: 2,
                left_context: 6,
                scale: None,
            },
            &[q, k, v],
        )
        .unwrap();
    let y = b.op("res", Binary::Add, &[a, x]).unwrap();
    b.output("y", y);
    let model = pulsify(&b.build().unwrap(), 4).unwrap();
    let mut s = StreamingSession::new(model).unwrap();
    s.push(&vec![0.25f32; 4 * 16 * 3]).unwrap();
    let n = count_allocs(|| {
        for _ in 0..10 {
            s.step_only().unwrap();
        }
    });
    assert_eq!(n, 0, "steady-state steps allocated {n} times");
    // the check itself can fail: a step that must allocate is seen
    let seen = count_allocs(|| drop(std::hint::black_box(vec![1u8; 10])));
    assert!(seen > 0);
}

#[test]
fn shipped_encoder_chunk_step_allocates_nothing() {
    use pulsed::models::conformer::{Head, Taps};
    use pulsed::models::ModelDir;
    let m = ModelDir::open(ModelDir::default_path()).unwrap();
    for head in [Head::Greedy, Head::LogProbs] {
        let g = m
            .graph(Taps {
                head,
                intermediates: false,
            })
            .unwrap();
        let mut s = StreamingSession::new(pulsify(&g, 5120).unwrap()).unwrap();
        let audio: Vec<f32> = (0..5120 * 3)
            .map(|i| (i as f32 * 0.01).sin() * 0.1)
            .collect();
        s.push(&audio).unwrap();
        let n = count_allocs(|| {
            for _ in 0..5 {
                s.step_only().unwrap();
            }
        });
        assert_eq!(
            n, 0,
            "{head:?}: steady-state encoder steps allocated {n} times"
        );
    }
}

/// Right-context copies (a copy slot beside each frame, attention over a
/// chunk's frames and its own copies) step without allocating too: with
/// few keys (attention row by row) and with many (a chunk's rows as matrix
/// products), steps measured while the left context still fills up.
#[test]
fn copies_graph_step_allocates_nothing() {
    for (chunk, left, right) in [(4, 8, 2), (8, 64, 6)] {
        let n = copies_step_allocs(chunk, left, right);
        assert_eq!(
            n, 0,
            "chunk {chunk} left {left}: steady-state steps allocated {n} times"
        );
    }
}

fn copies_step_allocs(chunk: usize, left: usize, right: usize) -> usize {
    use pulsed::ops::copies_attention::CopiesAttention;
    use pulsed::ops::gather::Gather;
    use pulsed::ops::right_copies::RightCopies;
    let c = 8;
    let mut b = GraphBuilder::new();
    let x = b
        .input("x", TypedFact::new(DType::F32, [Dim::s(), Dim::n(c)]))
        .unwrap();
    let x2 = b.op("copies", RightCopies { chunk, right }, &[x]).unwrap();
    let two = b.constant("two", Tensor::scalar(2.0f32)).unwrap();
    let q = b.op("q", Binary::Mul, &[x2, two]).unwrap();
    let k = b.op("k", Unary::Tanh, &[x2]).unwrap();
    let v = b.op("v", Unary::Silu, &[x2]).unwrap();
    let attn = CopiesAttention {
        heads: 2,
        chunk,
        left,
        right,
    };
    let a = b.op("attn", attn, &[q, k, v]).unwrap();
    let frame = b.constant("frame", Tensor::scalar(0i64)).unwrap();
    let y = b.op("frames", Gather { axis: -2 }, &[a, frame]).unwrap();
    b.output("y", y);
    let model = pulsify(&b.build().unwrap(), chunk).unwrap();
    let mut s = StreamingSession::new(model).unwrap();
    // two steps of warm-up; the left context (up to eight chunks) fills
    // during the ten steps counted
    s.push(&vec![0.25f32; chunk * c as usize * 2]).unwrap();
    count_allocs(|| {
        for _ in 0..10 {
            s.step_only().unwrap();
        }
    })
}

/// Whisper tiny.en's CPU decoder step (f32 and int8 weights): after a
/// prompt and a few steps, a step over one new token allocates nothing.
#[test]
fn whisper_decoder_step_allocates_nothing() {
    use pulsed::models::whisper::{CpuWhisper, WhisperBackend, WhisperModel};
    let Ok(model) = WhisperModel::open("whisper-tiny.en") else {
        panic!("whisper-tiny.en is not in the model cache: pulsed fetch whisper-tiny.en");
    };
    for model in [model.clone(), model.with_int8().unwrap()] {
        let mut w = CpuWhisper::new(&model).unwrap();
        let audio = vec![0f32; 16_000];
        let mel = w.log_mel(&audio).unwrap();
        let (m, frames, wf) = (w.n_mels(), mel.len() / w.n_mels(), w.window_frames());
        let mut window = vec![0f32; m * wf];
        for k in 0..m {
            window[k * wf..k * wf + frames.min(wf)]
                .copy_from_slice(&mel[k * frames..k * frames + frames.min(wf)]);
        }
        w.encode(&[&window]).unwrap();
        w.start(&[0]).unwrap();
        let mut logits = Vec::new();
        w.feed(&[50257, 50362], 2, &[1], &mut logits).unwrap();
        let mut token = 1000u32;
        let mut step = |w: &mut CpuWhisper| {
            w.feed(&[token], 1, &[0], &mut logits).unwrap();
            token += 7;
        };
        for _ in 0..3 {
            step(&mut w);
        }
        let n = count_allocs(|| {
            for _ in 0..5 {
                step(&mut w);
            }
        });
        assert_eq!(
            n,
            0,
            "int8 {}: {n} allocations in 5 decoder steps",
            model.is_int8()
        );
    }
}
