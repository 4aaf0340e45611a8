//! Each pulse op on its own: outputs against the stream they must produce,
//! facts against the shapes they produce at every step (warm-up included),
//! and `reset()` back to a fresh state.

mod common;

use common::Rng;
use proptest::prelude::*;
use pulsed::ops::{DType, Dim, Op, OpState, Scratch, Tensor, TypedFact};
use pulsed::pulse::{AffineChunkTrim, Delay, PulsePad, PulsedSameAxisConcat, StreamPosition};

/// A stream `[outer, total, inner]` whose frame `t` holds values `t*1000 + o*100 + i + 1`
/// (never zero, so zero padding is visible).
fn stream(outer: usize, total: usize, inner: usize) -> Vec<f32> {
    let mut v = Vec::new();
    for o in 0..outer {
        for t in 0..total {
            for i in 0..inner {
                v.push((t * 1000 + o * 100 + i + 1) as f32);
            }
        }
    }
    v
}

/// Frames `start..start+n` of the stream (zeros outside `0..total`), as a tensor
/// `[outer, n, inner]`.
fn frames(outer: usize, total: usize, inner: usize, start: i64, n: usize) -> Tensor {
    let s = stream(outer, total, inner);
    let mut v = Vec::new();
    for o in 0..outer {
        for k in 0..n {
            let t = start + k as i64;
            for i in 0..inner {
                v.push(if t >= 0 && (t as usize) < total {
                    s[(o * total + t as usize) * inner + i]
                } else {
                    0.0
                });
            }
        }
    }
    Tensor::from_vec(vec![outer, n, inner], v).unwrap()
}

fn run_state(op: &dyn Op, st: &mut Box<dyn OpState>, x: &Tensor) -> Tensor {
    let mut out = Vec::new();
    st.eval(&[x], &mut out, &mut Scratch::default()).unwrap();
    let fact = op.output_facts(&[&TypedFact::of(x)]).unwrap();
    assert_eq!(
        fact[0],
        TypedFact::of(&out[0]),
        "{} fact vs eval",
        op.name()
    );
    out.remove(0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn delay_emits_the_delayed_stream(outer in 1usize..3, inner in 1usize..4, pulse in 1usize..6,
                                      delay in 0usize..9, overlap in 0usize..9, steps in 1usize..8) {
        let total = pulse * steps;
        let op = Delay { axis: 1, delay, overlap };
        for round in 0..2 {
            let mut st = op.state().unwrap();
            if round == 1 { st.reset(); }
            for n in 0..steps {
                let x = frames(outer, total, inner, (n * pulse) as i64, pulse);
                let y = run_state(&op, &mut st, &x);
                let want = frames(outer, total, inner, (n * pulse) as i64 - (delay + overlap) as i64, pulse + overlap);
                prop_assert_eq!(y, want);
            }
        }
    }

    #[test]
    fn pulse_pad_pads_by_position(pulse in 1usize..6, delay in 0usize..7, begin in 0usize..7,
                                  len in 1usize..20, after in 0usize..5, known in proptest::bool::ANY) {
        let op = PulsePad { axis: 0, pulse, delay, begin, end: Some(Dim::s().add_const(begin as i64)), value: -1.0 };
        let mut st = op.state().unwrap();
        st.set_stream_len(if known { Some(len as i64) } else { None });
        let steps = (begin + len + after + delay).div_ceil(pulse);
        for n in 0..steps {
            let x = Tensor::from_vec(vec![pulse, 2], vec![5.0f32; pulse * 2]).unwrap();
            let y = run_state(&op, &mut st, &x).to_vec::<f32>().unwrap();
            for k in 0..pulse {
                let i = (n * pulse + k) as i64 - delay as i64;
                let pad = i < begin as i64 || (known && i >= (begin + len) as i64);
                prop_assert_eq!(y[2 * k], if pad { -1.0 } else { 5.0 }, "frame {}", i);
            }
        }
    }

    #[test]
    fn same_axis_concat_writes_prefix_and_suffix(pulse in 1usize..6, delay in 0usize..5, c in 1usize..5,
                                                 c2 in 0usize..4, len in 1usize..15) {
        let prefix = Tensor::from_vec(vec![c, 1], (0..c).map(|i| -(i as f32) - 1.0).collect()).unwrap();
        let suffix = (c2 > 0).then(|| Tensor::from_vec(vec![c2, 1], (0..c2).map(|i| 100.0 + i as f32).collect()).unwrap());
        let op = PulsedSameAxisConcat { axis: 0, pulse, delay, prefix: Some(prefix), suffix, input_len: Dim::s() };
        let mut st = op.state().unwrap();
        st.set_stream_len(Some(len as i64));
        // the input is the stream already delayed by c frames: logical frame i holds x[i - c]
        let steps = (c + len + c2 + delay).div_ceil(pulse);
        for n in 0..steps {
            let first = (n * pulse) as i64 - delay as i64;
            let x: Vec<f32> = (0..pulse).map(|k| (first + k as i64 - c as i64) as f32 + 0.5).collect();
            let y = run_state(&op, &mut st, &Tensor::from_vec(vec![pulse, 1], x).unwrap()).to_vec::<f32>().unwrap();
            for (k, v) in y.iter().enumerate() {
                let i = first + k as i64;
                let want = if i >= 0 && i < c as i64 {
                    -(i as f32) - 1.0
                } else if i >= (c + len) as i64 && i < (c + len + c2) as i64 {
                    100.0 + (i - (c + len) as i64) as f32
                } else {
                    (i - c as i64) as f32 + 0.5
                };
                prop_assert_eq!(*v, want, "frame {}", i);
            }
        }
    }

    #[test]
    fn stream_position_counts_frames(pulse in 1usize..8, delay in 0usize..9, offset in -5i64..5, steps in 1usize..6) {
        let op = StreamPosition { pulse, delay, offset };
        let mut st = op.state().unwrap();
        for n in 0..steps {
            let y = run_state(&op, &mut st, &Tensor::zeros(DType::F32, &[pulse])).to_vec::<i64>().unwrap();
            let want: Vec<i64> = (0..pulse).map(|k| (n * pulse + k) as i64 - delay as i64 + offset).collect();
            prop_assert_eq!(y, want);
        }
        st.reset();
        let y = run_state(&op, &mut st, &Tensor::zeros(DType::F32, &[pulse])).to_vec::<i64>().unwrap();
        prop_assert_eq!(y[0], offset - delay as i64);
    }
}

#[test]
fn chunk_trim_trims_only_what_is_there() {
    let op = AffineChunkTrim {
        axis: 0,
        drop: 2,
        keep: 3,
    };
    let x5 = Tensor::from_vec(vec![5], vec![1.0f32, 2., 3., 4., 5.]).unwrap();
    let x3 = Tensor::from_vec(vec![3], vec![3.0f32, 4., 5.]).unwrap();
    for x in [&x5, &x3] {
        let y = pulsed::ops::eval_op(&op, &[x]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![3., 4., 5.]);
        assert_eq!(
            op.output_facts(&[&TypedFact::of(x)]).unwrap()[0],
            TypedFact::of(&y[0])
        );
    }
    let x4 = Tensor::zeros(DType::F32, &[4]);
    assert!(pulsed::ops::eval_op(&op, &[&x4]).is_err());
    assert!(op.output_facts(&[&TypedFact::of(&x4)]).is_err());
}

#[test]
fn pulse_ops_work_for_every_dtype() {
    let mut rng = Rng(3);
    for dt in [DType::F32, DType::F16, DType::BF16, DType::I64, DType::Bool] {
        let x = rng.tensor(&[4, 2]).cast(dt);
        let op = Delay {
            axis: 0,
            delay: 1,
            overlap: 2,
        };
        let mut st = op.state().unwrap();
        let y1 = run_state(&op, &mut st, &x);
        let y2 = run_state(&op, &mut st, &x);
        assert_eq!(y1.shape(), &[6, 2]);
        assert_eq!(
            y2.narrow(0, 0, 3).unwrap().contiguous(),
            x.narrow(0, 1, 3).unwrap().contiguous(),
            "{dt}"
        );
        let pad = PulsePad {
            axis: 0,
            pulse: 4,
            delay: 2,
            begin: 0,
            end: None,
            value: 0.0,
        };
        let mut ps = pad.state().unwrap();
        let p = run_state(&pad, &mut ps, &x);
        assert_eq!(
            p.narrow(0, 2, 2).unwrap().contiguous(),
            x.narrow(0, 2, 2).unwrap().contiguous()
        );
    }
}
