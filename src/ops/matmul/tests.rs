use super::test_util::{assert_close, tensor};
use super::*;
use crate::ops::checks::facts_of;
use crate::ops::eval_op;
use proptest::prelude::*;

fn facts_then_eval(op: &dyn Op, inputs: &[&Tensor]) -> Vec<Tensor> {
    let facts = facts_of(inputs);
    let refs: Vec<&TypedFact> = facts.iter().collect();
    let want = op.output_facts(&refs).unwrap();
    let out = eval_op(op, inputs).unwrap();
    let got: Vec<TypedFact> = out.iter().map(TypedFact::of).collect();
    assert_eq!(got, want, "output_facts vs eval for {op:?}");
    out
}

/// Naive batched product: (value, sum of |terms|) per output element.
fn naive_matmul(op: &MatMul, a: &Tensor, b: &Tensor) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let (av, bv) = (a.to_f32_vec(), b.to_f32_vec());
    let (sa, sb) = (a.shape(), b.shape());
    let (ra, rb) = (sa.len(), sb.len());
    let ((m, k), (_, n)) = op.mk(sa, sb);
    let r = (ra - 2).max(rb - 2);
    let dim = |s: &[usize], i: usize| {
        if i + s.len() >= r + 2 {
            s[i + s.len() - r - 2]
        } else {
            1
        }
    };
    let batch: Vec<usize> = (0..r).map(|i| dim(sa, i).max(dim(sb, i))).collect();
    let nb: usize = batch.iter().product();
    let (mut val, mut mag) = (vec![], vec![]);
    for bi in 0..nb {
        // batch multi-index, then each operand's flat matrix index
        let mut idx = vec![0; r];
        let mut rem = bi;
        for ax in (0..r).rev() {
            idx[ax] = rem % batch[ax];
            rem /= batch[ax];
        }
        let flat = |s: &[usize]| {
            let lead = r + 2 - s.len();
            let mut f = 0;
            for ax in lead..r {
                let d = s[ax - lead];
                f = f * d + if d == 1 { 0 } else { idx[ax] };
            }
            f
        };
        let (fa, fb) = (flat(sa), flat(sb));
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut g) = (0f64, 0f64);
                for p in 0..k {
                    let x = if op.transpose_a {
                        av[fa * m * k + p * m + i]
                    } else {
                        av[fa * m * k + i * k + p]
                    };
                    let y = if op.transpose_b {
                        bv[fb * k * n + j * k + p]
                    } else {
                        bv[fb * k * n + p * n + j]
                    };
                    s += x as f64 * y as f64;
                    g += (x as f64 * y as f64).abs();
                }
                val.push(s);
                mag.push(g);
            }
        }
    }
    let mut shape = batch;
    shape.extend([m, n]);
    (shape, val, mag)
}

fn float_dtype() -> impl Strategy<Value = DType> {
    prop_oneof![3 => Just(DType::F32), 1 => Just(DType::F16), 1 => Just(DType::BF16)]
}

/// Batch shapes for `a` and `b` that broadcast: each axis is either a
/// shared size or 1 on one side, and either side may drop leading axes.
fn batch_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    (
        0usize..3,
        proptest::collection::vec((1usize..4, 0u8..3), 3),
        0usize..3,
        0usize..3,
    )
        .prop_map(|(r, dims, da, db)| {
            let mut a: Vec<usize> = vec![];
            let mut b: Vec<usize> = vec![];
            for &(d, which) in &dims[..r] {
                a.push(if which == 1 { 1 } else { d });
                b.push(if which == 2 { 1 } else { d });
            }
            (a[da.min(r)..].to_vec(), b[db.min(r)..].to_vec())
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn matmul_matches_naive_and_its_facts(ta: bool, tb: bool, (ba, bb) in batch_pair(),
                                          m in 0usize..7, k in 0usize..9, n in 0usize..7,
                                          dt in float_dtype(), seed: u64) {
        let op = MatMul { transpose_a: ta, transpose_b: tb };
        let mut sa = ba.clone();
        sa.extend(if ta { [k, m] } else { [m, k] });
        let mut sb = bb.clone();
        sb.extend(if tb { [n, k] } else { [k, n] });
        let (a, b) = (tensor(dt, &sa, seed), tensor(dt, &sb, seed ^ 1));
        let out = facts_then_eval(&op, &[&a, &b]);
        let (shape, want, mag) = naive_matmul(&op, &a, &b);
        prop_assert_eq!(out[0].shape(), &shape[..]);
        assert_close(&out[0], &want, &mag);
    }

    #[test]
    fn matmul_symbolic_facts_match_eval(ta: bool, tb: bool, case in 0usize..3, s in 1i64..12,
                                        k in 1usize..6, n in 1usize..6) {
        // S as M of a, as K of both, or as a batch axis of a
        let op = MatMul { transpose_a: ta, transpose_b: tb };
        let sd = Dim::s();
        let kd = Dim::from(k);
        let (fa, fb): (Vec<Dim>, Vec<Dim>) = match case {
            0 => (if ta { vec![kd, sd] } else { vec![sd, kd] }, if tb { vec![n.into(), kd] } else { vec![kd, n.into()] }),
            1 => (if ta { vec![sd, 3.into()] } else { vec![3.into(), sd] }, if tb { vec![n.into(), sd] } else { vec![sd, n.into()] }),
            _ => (if ta { vec![sd, kd, 2.into()] } else { vec![sd, 2.into(), kd] },
                  if tb { vec![1.into(), n.into(), kd] } else { vec![1.into(), kd, n.into()] }),
        };
        let (fa, fb) = (TypedFact::dt_shape(DType::F32, &fa), TypedFact::dt_shape(DType::F32, &fb));
        let facts = op.output_facts(&[&fa, &fb]).unwrap();
        let shape = |f: &TypedFact| f.concretize(s).concrete_shape().unwrap();
        let (a, b) = (tensor(DType::F32, &shape(&fa), 3), tensor(DType::F32, &shape(&fb), 4));
        let out = eval_op(&op, &[&a, &b]).unwrap();
        prop_assert_eq!(TypedFact::of(&out[0]), facts[0].concretize(s));
    }

    #[test]
    fn linear_matches_naive_and_its_facts(lead in proptest::collection::vec(0usize..5, 0..3),
                                          fan_in in 0usize..40, fan_out in 0usize..12, bias: bool,
                                          dt in float_dtype(), seed: u64) {
        let mut sx = lead.clone();
        sx.push(fan_in);
        let x = tensor(dt, &sx, seed);
        let w = tensor(dt, &[fan_out, fan_in], seed ^ 7);
        let b = tensor(dt, &[fan_out], seed ^ 9);
        let inputs: Vec<&Tensor> = if bias { vec![&x, &w, &b] } else { vec![&x, &w] };
        let out = facts_then_eval(&Linear, &inputs);
        let (xv, wv, bv) = (x.to_f32_vec(), w.to_f32_vec(), b.to_f32_vec());
        let rows: usize = lead.iter().product();
        let (mut want, mut mag) = (vec![], vec![]);
        for r in 0..rows {
            for o in 0..fan_out {
                let mut s = if bias { bv[o] as f64 } else { 0.0 };
                let mut g = s.abs();
                for i in 0..fan_in {
                    let t = xv[r * fan_in + i] as f64 * wv[o * fan_in + i] as f64;
                    s += t;
                    g += t.abs();
                }
                want.push(s);
                mag.push(g);
            }
        }
        let mut shape = lead.clone();
        shape.push(fan_out);
        prop_assert_eq!(out[0].shape(), &shape[..]);
        assert_close(&out[0], &want, &mag);
    }

    #[test]
    fn linear_symbolic_facts_match_eval(batched: bool, s in 0i64..20, fan_in in 1usize..8, fan_out in 1usize..8) {
        let sx: Vec<Dim> = if batched { vec![2.into(), Dim::s(), fan_in.into()] } else { vec![Dim::s(), fan_in.into()] };
        let fx = TypedFact::dt_shape(DType::F32, &sx);
        let fw = TypedFact::new(DType::F32, [fan_out, fan_in]);
        let fb = TypedFact::new(DType::F32, [fan_out]);
        let facts = Linear.output_facts(&[&fx, &fw, &fb]).unwrap();
        let x = tensor(DType::F32, &fx.concretize(s).concrete_shape().unwrap(), 1);
        let (w, b) = (tensor(DType::F32, &[fan_out, fan_in], 2), tensor(DType::F32, &[fan_out], 3));
        let out = eval_op(&Linear, &[&x, &w, &b]).unwrap();
        prop_assert_eq!(TypedFact::of(&out[0]), facts[0].concretize(s));
    }
}

#[test]
fn linear_encoder_sized_long_sums() {
    // in = 1024: f32 error of the long dot products stays within 1e-4 of |terms|
    let (x, w, b) = (
        tensor(DType::F32, &[37, 1024], 1),
        tensor(DType::F32, &[96, 1024], 2),
        tensor(DType::F32, &[96], 3),
    );
    let out = facts_then_eval(&Linear, &[&x, &w, &b]);
    let (xv, wv, bv) = (x.to_f32_vec(), w.to_f32_vec(), b.to_f32_vec());
    let (mut want, mut mag) = (vec![], vec![]);
    for r in 0..37 {
        for o in 0..96 {
            let terms = (0..1024).map(|i| xv[r * 1024 + i] as f64 * wv[o * 1024 + i] as f64);
            want.push(terms.clone().sum::<f64>() + bv[o] as f64);
            mag.push(terms.map(f64::abs).sum::<f64>() + (bv[o] as f64).abs());
        }
    }
    assert_close(&out[0], &want, &mag);
}

#[test]
fn many_rows_are_computed_in_place() {
    // >= SWAP_ROWS rows: the product is written row-major directly
    let (x, w, b) = (
        tensor(DType::F32, &[2, 150, 200], 1),
        tensor(DType::F32, &[13, 200], 2),
        tensor(DType::F32, &[13], 3),
    );
    let out = facts_then_eval(&Linear, &[&x, &w, &b]);
    let (xv, wv, bv) = (x.to_f32_vec(), w.to_f32_vec(), b.to_f32_vec());
    let (mut want, mut mag) = (vec![], vec![]);
    for r in 0..300 {
        for o in 0..13 {
            let terms = (0..200).map(|i| xv[r * 200 + i] as f64 * wv[o * 200 + i] as f64);
            want.push(terms.clone().sum::<f64>() + bv[o] as f64);
            mag.push(terms.map(f64::abs).sum::<f64>() + (bv[o] as f64).abs());
        }
    }
    assert_close(&out[0], &want, &mag);
    for (ta, tb) in [(false, false), (false, true), (true, true)] {
        let op = MatMul {
            transpose_a: ta,
            transpose_b: tb,
        };
        let a = tensor(
            DType::F32,
            if ta { &[3, 20, 100] } else { &[3, 100, 20] },
            4,
        );
        let b = tensor(DType::F32, if tb { &[7, 20] } else { &[20, 7] }, 5);
        let out = facts_then_eval(&op, &[&a, &b]);
        let (_, want, mag) = naive_matmul(&op, &a, &b);
        assert_close(&out[0], &want, &mag);
    }
}

#[test]
fn strided_inputs_are_read_in_logical_order() {
    let a = tensor(DType::F32, &[5, 3], 1).transpose(0, 1).unwrap(); // [3, 5] view
    let b = tensor(DType::F32, &[5, 4], 2);
    let op = MatMul::default();
    let out = facts_then_eval(&op, &[&a, &b]);
    let (_, want, mag) = naive_matmul(&op, &a.contiguous(), &b);
    assert_close(&out[0], &want, &mag);
    let w = tensor(DType::F32, &[4, 5], 3);
    let y = eval_op(&Linear, &[&a, &w]).unwrap();
    let y2 = eval_op(&Linear, &[&a.contiguous(), &w]).unwrap();
    assert_eq!(y[0], y2[0]);
}

#[test]
fn repeated_eval_reuses_the_output_buffer() {
    let (x, w, b) = (
        tensor(DType::F32, &[8, 16], 1),
        tensor(DType::F32, &[24, 16], 2),
        tensor(DType::F32, &[24], 3),
    );
    let (mut out, mut scratch) = (Vec::new(), Scratch::default());
    Linear.eval(&[&x, &w, &b], &mut out, &mut scratch).unwrap();
    let p = out[0].as_slice::<f32>().unwrap().as_ptr();
    let first = out[0].clone().contiguous().to_vec::<f32>().unwrap();
    Linear.eval(&[&x, &w, &b], &mut out, &mut scratch).unwrap();
    assert_eq!(out[0].as_slice::<f32>().unwrap().as_ptr(), p);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), first);
}

/// The packed kernel's blocking edges: rows past one 128-row chunk and
/// not a multiple of 16, depth past one 512 chunk (later chunks add to
/// the first), column tails of 1..5, both `a` layouts, accumulation,
/// and a destination column stride larger than `m`; without a pack
/// buffer the same call goes to the `gemm` crate.
#[test]
fn gemm_blocking_edges_match_naive() {
    for (m, n, k) in [
        (1, 1, 1),
        (17, 7, 3),
        (130, 13, 520),
        (300, 6, 1100),
        (16, 11, 512),
        (129, 5, 1),
    ] {
        for (a_rows, accumulate, packed) in (0..8).map(|i| (i & 1 == 0, i & 2 == 0, i & 4 == 0)) {
            let ld = m + 3;
            let a = tensor(DType::F32, &[m * k], 1).to_f32_vec();
            let b = tensor(DType::F32, &[k * n], 2).to_f32_vec();
            let a_s = if a_rows { (k, 1) } else { (1, m) };
            let mut dst = tensor(DType::F32, &[ld * n], 3).to_f32_vec();
            let before = dst.clone();
            let mut pack = vec![f32::NAN; if packed { pack_len(m, k) } else { 0 }];
            gemm_f32(
                m,
                n,
                k,
                &mut dst,
                (1, ld),
                &a,
                a_s,
                &b,
                (1, k),
                accumulate,
                &mut pack,
            )
            .unwrap();
            let (mut want, mut mag) = (vec![], vec![]);
            for j in 0..n {
                for i in 0..m {
                    let terms =
                        (0..k).map(|p| a[i * a_s.0 + p * a_s.1] as f64 * b[p + j * k] as f64);
                    let base = if accumulate {
                        before[j * ld + i] as f64
                    } else {
                        0.0
                    };
                    want.push(base + terms.clone().sum::<f64>());
                    mag.push(base.abs() + terms.map(f64::abs).sum::<f64>());
                }
            }
            let got: Vec<f32> = (0..n)
                .flat_map(|j| dst[j * ld..j * ld + m].to_vec())
                .collect();
            assert_close(
                &Tensor::from_vec(vec![got.len()], got).unwrap(),
                &want,
                &mag,
            );
            // the gaps between columns are untouched
            for j in 0..n {
                assert_eq!(
                    &dst[j * ld + m..(j + 1) * ld],
                    &before[j * ld + m..(j + 1) * ld]
                );
            }
        }
    }
}

#[test]
fn zero_sized_axes_give_empty_or_bias_outputs() {
    // zero rows, zero outputs and zero fan-in, with leading zero axes
    // (which `Tensor::is_contiguous` reports as strided)
    for (lead, fan_in, fan_out) in [
        (vec![0, 0], 0, 0),
        (vec![2, 0], 3, 4),
        (vec![3], 0, 2),
        (vec![0, 2], 0, 2),
    ] {
        let mut sx = lead.clone();
        sx.push(fan_in);
        for dt in [DType::F32, DType::F16] {
            let (x, w, b) = (
                tensor(dt, &sx, 1),
                tensor(dt, &[fan_out, fan_in], 2),
                tensor(dt, &[fan_out], 3),
            );
            let out = facts_then_eval(&Linear, &[&x, &w, &b]);
            let rows: usize = lead.iter().product();
            let want: Vec<f32> = (0..rows).flat_map(|_| b.to_f32_vec()).collect();
            assert_eq!(out[0].to_f32_vec(), want);
        }
    }
    let mm = MatMul::default();
    for (sa, sb) in [
        (vec![0, 2, 3], vec![3, 4]),
        (vec![2, 0], vec![0, 3]),
        (vec![0, 0], vec![0, 0]),
    ] {
        let (a, b) = (tensor(DType::F32, &sa, 1), tensor(DType::F32, &sb, 2));
        let out = facts_then_eval(&mm, &[&a, &b]);
        assert!(out[0].to_f32_vec().iter().all(|&v| v == 0.0));
    }
}

#[test]
fn frame_local_axes() {
    let f = |s: &[Dim]| TypedFact::dt_shape(DType::F32, s);
    let (s, n) = (Dim::s(), |v: usize| Dim::from(v));
    let x = f(&[n(2), s, n(8)]);
    let w = f(&[n(4), n(8)]);
    let b = f(&[n(4)]);
    assert_eq!(
        Linear.frame_local_axis(&[&x, &w, &b], &[Some(1), None, None]),
        Some(1)
    );
    assert_eq!(
        Linear.frame_local_axis(&[&x, &w], &[Some(2), None]),
        None,
        "contracted axis"
    );
    assert_eq!(
        Linear.frame_local_axis(&[&x, &w], &[Some(1), Some(0)]),
        None,
        "streaming weight"
    );

    let mm = MatMul::default();
    let a = f(&[s, n(3), n(5)]);
    let bm = f(&[n(5), n(6)]);
    assert_eq!(
        mm.frame_local_axis(&[&a, &bm], &[Some(0), None]),
        Some(0),
        "batch axis"
    );
    assert_eq!(
        mm.frame_local_axis(&[&a, &bm], &[Some(1), None]),
        Some(1),
        "M axis"
    );
    assert_eq!(
        mm.frame_local_axis(&[&a, &bm], &[Some(2), None]),
        None,
        "K axis"
    );
    assert_eq!(
        mm.frame_local_axis(&[&a, &bm], &[Some(0), Some(0)]),
        None,
        "b streams"
    );
    let b3 = f(&[n(4), n(5), n(6)]);
    assert_eq!(
        mm.frame_local_axis(&[&a, &b3], &[Some(0), None]),
        None,
        "b has a full batch axis there"
    );
    let a2 = f(&[n(3), s]);
    let b4 = f(&[n(2), n(3), n(6)]);
    let mt = MatMul {
        transpose_a: true,
        transpose_b: false,
    };
    assert_eq!(
        mt.frame_local_axis(&[&a2, &b4], &[Some(1), None]),
        Some(1),
        "M of a transposed a"
    );
    assert_eq!(mt.frame_local_axis(&[&a2, &b4], &[Some(0), None]), None);
}

#[test]
fn bad_inputs_are_errors() {
    let t = |dt, s: &[usize]| tensor(dt, s, 1);
    let f32t = |s: &[usize]| t(DType::F32, s);
    let mm = MatMul::default();
    let check = |op: &dyn Op, inputs: &[&Tensor]| {
        let e1 = eval_op(op, inputs).unwrap_err();
        let facts = facts_of(inputs);
        let refs: Vec<&TypedFact> = facts.iter().collect();
        let e2 = op.output_facts(&refs).unwrap_err();
        (e1, e2)
    };
    let (e, _) = check(&mm, &[&f32t(&[3]), &f32t(&[3, 2])]);
    assert!(matches!(e, OpError::Rank { input: 0, .. }), "{e}");
    let (e, _) = check(&mm, &[&f32t(&[2, 3]), &f32t(&[4, 2])]);
    assert!(matches!(e, OpError::Shape(_)), "{e}");
    let (e, _) = check(&mm, &[&f32t(&[2, 2, 3]), &f32t(&[3, 3, 2])]);
    assert!(matches!(e, OpError::Shape(_)), "batch 2 vs 3: {e}");
    let (e, _) = check(&mm, &[&t(DType::I64, &[2, 2]), &t(DType::I64, &[2, 2])]);
    assert!(matches!(e, OpError::DType { input: 0, .. }), "{e}");
    let (e, _) = check(&mm, &[&f32t(&[2, 2]), &t(DType::F16, &[2, 2])]);
    assert!(matches!(e, OpError::DType { input: 1, .. }), "{e}");
    let (e, _) = check(&mm, &[&t(DType::Bool, &[2, 2]), &t(DType::Bool, &[2, 2])]);
    assert!(matches!(e, OpError::DType { .. }), "{e}");
    let (e, _) = check(&mm, &[&f32t(&[2, 2])]);
    assert!(matches!(e, OpError::InputCount { .. }), "{e}");

    let (x, w, b) = (f32t(&[4, 8]), f32t(&[5, 8]), f32t(&[5]));
    let (e, _) = check(&Linear, &[&x, &f32t(&[5, 7])]);
    assert!(matches!(e, OpError::Shape(_)), "{e}");
    let (e, _) = check(&Linear, &[&x, &w, &f32t(&[4])]);
    assert!(matches!(e, OpError::Shape(_)), "{e}");
    let (e, _) = check(&Linear, &[&x, &f32t(&[40])]);
    assert!(matches!(e, OpError::Rank { input: 1, .. }), "{e}");
    let (e, _) = check(&Linear, &[&x, &w, &f32t(&[5, 1])]);
    assert!(matches!(e, OpError::Rank { input: 2, .. }), "{e}");
    let (e, _) = check(&Linear, &[&f32t(&[]), &w]);
    assert!(matches!(e, OpError::Rank { input: 0, .. }), "{e}");
    let (e, _) = check(&Linear, &[&t(DType::I64, &[4, 8]), &t(DType::I64, &[5, 8])]);
    assert!(matches!(e, OpError::DType { .. }), "{e}");
    let (e, _) = check(&Linear, &[&x, &w, &t(DType::BF16, &[5])]);
    assert!(matches!(e, OpError::DType { input: 2, .. }), "{e}");
    let (e, _) = check(&Linear, &[&x, &w, &b, &b]);
    assert!(matches!(e, OpError::InputCount { .. }), "{e}");
    let (e, _) = check(&Linear, &[&f32t(&[1; 9]), &f32t(&[1, 1])]);
    assert!(matches!(e, OpError::Rank { .. }), "{e}");
}
