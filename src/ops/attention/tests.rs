use super::*;
use crate::ops::eval_op;
use proptest::prelude::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        self.next() as usize % n
    }
    fn unit(&mut self) -> f32 {
        (self.next() % (1 << 24)) as f32 / (1 << 24) as f32 * 2.0 - 1.0
    }
    fn tensor(&mut self, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), (0..n).map(|_| self.unit()).collect()).unwrap()
    }
}

/// Row-major element of `v` (shape `shape`) at the index `idx` of a
/// larger broadcast shape (aligned right; size-1 axes repeat).
fn at(v: &[f64], shape: &[usize], idx: &[usize]) -> f64 {
    let off = idx.len() - shape.len();
    let mut flat = 0;
    for (a, &n) in shape.iter().enumerate() {
        flat = flat * n + if n == 1 { 0 } else { idx[off + a] };
    }
    v[flat]
}

/// Plain `softmax(q k^T * scale + mask) v` over every broadcast batch
/// index, in f64; rows with no key left give zeros.
fn naive(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> (Vec<usize>, Vec<f64>) {
    let f = |t: &Tensor| -> Vec<f64> { t.to_f32_vec().iter().map(|&x| x as f64).collect() };
    let (qv, kv, vv) = (f(q), f(k), f(v));
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let rb = [qs.len(), ks.len(), vs.len()].iter().max().unwrap() - 2;
    let batch: Vec<usize> = (0..rb)
        .map(|a| {
            [qs, ks, vs]
                .iter()
                .map(|s| {
                    if a + s.len() >= rb + 2 {
                        s[a + s.len() - rb - 2]
                    } else {
                        1
                    }
                })
                .max()
                .unwrap()
        })
        .collect();
    let (tq, d, tk, dv) = (
        qs[qs.len() - 2],
        qs[qs.len() - 1],
        ks[ks.len() - 2],
        vs[vs.len() - 1],
    );
    let mut out = Vec::new();
    let nb: usize = batch.iter().product();
    for b in 0..nb {
        let mut idx = vec![0; rb + 2];
        let mut r = b;
        for a in (0..rb).rev() {
            idx[a] = r % batch[a];
            r /= batch[a];
        }
        for i in 0..tq {
            let mut e = vec![0.0; tk];
            for (j, ej) in e.iter_mut().enumerate() {
                let mut dot = 0.0;
                for c in 0..d {
                    idx[rb] = i;
                    idx[rb + 1] = c;
                    let a = at(&qv, qs, &idx);
                    idx[rb] = j;
                    dot += a * at(&kv, ks, &idx);
                }
                let mut s = dot * scale;
                if let Some(m) = mask {
                    idx[rb] = i;
                    idx[rb + 1] = j;
                    let mv = at(&f(m), m.shape(), &idx);
                    s = if m.dtype() == DType::Bool {
                        if mv != 0.0 {
                            s
                        } else {
                            f64::NEG_INFINITY
                        }
                    } else {
                        s + mv
                    };
                }
                *ej = s.exp();
            }
            let sum: f64 = e.iter().sum();
            for c in 0..dv {
                let mut o = 0.0;
                if sum > 0.0 {
                    for (j, ej) in e.iter().enumerate() {
                        idx[rb] = j;
                        idx[rb + 1] = c;
                        o += ej / sum * at(&vv, vs, &idx);
                    }
                }
                out.push(o);
            }
        }
    }
    let mut shape = batch;
    shape.extend([tq, dv]);
    (shape, out)
}

/// A shape that broadcasts to `full`: a suffix of it, with some axes 1.
fn broadcastable(rng: &mut Rng, full: &[usize], keep_last: usize) -> Vec<usize> {
    let drop = rng.below(full.len() - keep_last + 1);
    full[drop..]
        .iter()
        .enumerate()
        .map(|(a, &n)| {
            if a + drop + keep_last < full.len() && rng.below(3) == 0 {
                1
            } else {
                n
            }
        })
        .collect()
}

fn check_case(
    seed: u64,
    dt: DType,
    with_mask: u8,
    scale: Option<f32>,
) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let batch: Vec<usize> = (0..rng.below(3)).map(|_| 1 + rng.below(3)).collect();
    let (tq, tk, d, dv) = (
        1 + rng.below(5),
        rng.below(6),
        1 + rng.below(6),
        1 + rng.below(4),
    );
    let with = |t: usize, w: usize| -> Vec<usize> { batch.iter().copied().chain([t, w]).collect() };
    let qs = broadcastable(&mut rng, &with(tq, d), 2);
    let q = rng.tensor(&qs).cast(dt);
    let ks = broadcastable(&mut rng, &with(tk, d), 2);
    let k = rng.tensor(&ks).cast(dt);
    let vs = broadcastable(&mut rng, &with(tk, dv), 2);
    let v = rng.tensor(&vs).cast(dt);
    let mut ins = vec![q, k, v];
    // the batch the three actually span (axes may all have been dropped or set to 1)
    let out_batch = {
        let facts: Vec<TypedFact> = ins.iter().map(TypedFact::of).collect();
        let r: Vec<&TypedFact> = facts.iter().collect();
        Attention { scale }.output_facts(&r).unwrap()[0]
            .concrete_shape()
            .unwrap()
    };
    let nb = out_batch.len() - 2;
    let mut full = out_batch[..nb].to_vec();
    full.extend([tq, tk]);
    match with_mask {
        1 => {
            let ms = broadcastable(&mut rng, &full, 0);
            let n = ms.iter().product();
            ins.push(Tensor::from_vec(ms, (0..n).map(|_| rng.below(4) != 0).collect()).unwrap());
        }
        2 => {
            let ms = broadcastable(&mut rng, &full, 0);
            let n = ms.iter().product();
            let vals = (0..n)
                .map(|_| {
                    if rng.below(5) == 0 {
                        f32::NEG_INFINITY
                    } else {
                        rng.unit()
                    }
                })
                .collect();
            ins.push(Tensor::from_vec(ms, vals).unwrap());
        }
        _ => {}
    }
    let op = Attention { scale };
    let refs: Vec<&Tensor> = ins.iter().collect();
    let out = eval_op(&op, &refs).unwrap();
    let facts: Vec<TypedFact> = ins.iter().map(TypedFact::of).collect();
    let frefs: Vec<&TypedFact> = facts.iter().collect();
    prop_assert_eq!(
        op.output_facts(&frefs).unwrap(),
        vec![TypedFact::of(&out[0])]
    );
    let s = scale.map_or(1.0 / (d as f64).sqrt(), |s| s as f64);
    let (shape, want) = naive(&ins[0], &ins[1], &ins[2], ins.get(3), s);
    prop_assert_eq!(out[0].shape(), &shape[..]);
    // f32: 1e-5 (values and weights are O(1)); f16/bf16: rounding of the output, 1e-2
    let tol = if dt == DType::F32 { 1e-5 } else { 1e-2 };
    for (g, w) in out[0].to_f32_vec().iter().zip(&want) {
        prop_assert!(
            (*g as f64 - w).abs() <= tol * (1.0 + w.abs()),
            "{} vs {}",
            g,
            w
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn matches_naive_softmax_and_facts(seed: u64, mask in 0u8..3, scale in proptest::option::of(0.1f32..2.0),
                                       dt in prop_oneof![Just(DType::F32), Just(DType::F16), Just(DType::BF16)]) {
        check_case(seed, dt, mask, scale)?;
    }

    #[test]
    fn symbolic_time_facts(seed: u64, s in 1usize..9, heads in 1usize..4, mask: bool) {
        let mut rng = Rng(seed);
        let (d, dv) = (1 + rng.below(5), 1 + rng.below(5));
        let q = rng.tensor(&[heads, s, d]);
        let k = rng.tensor(&[heads, s, d]);
        let v = rng.tensor(&[1, s, dv]);
        let m = Tensor::from_vec(vec![s, s], (0..s * s).map(|i| i % (s + 1) == 0 || rng.below(2) == 0).collect()).unwrap();
        let mut ins = vec![q, k, v];
        let mut facts = vec![
            TypedFact::new(DType::F32, [Dim::n(heads as i64), Dim::s(), Dim::n(d as i64)]),
            TypedFact::new(DType::F32, [Dim::n(heads as i64), Dim::s(), Dim::n(d as i64)]),
            TypedFact::new(DType::F32, [Dim::n(1), Dim::s(), Dim::n(dv as i64)]),
        ];
        if mask {
            ins.push(m);
            facts.push(TypedFact::new(DType::Bool, [Dim::s(), Dim::s()]));
        }
        let refs: Vec<&Tensor> = ins.iter().collect();
        let out = eval_op(&Attention { scale: None }, &refs).unwrap();
        let frefs: Vec<&TypedFact> = facts.iter().collect();
        let f = Attention { scale: None }.output_facts(&frefs).unwrap();
        prop_assert!(f[0].shape[1].is_symbolic());
        prop_assert_eq!(f[0].concretize(s as i64), TypedFact::of(&out[0]));
    }
}

#[test]
fn fully_masked_rows_and_no_keys_give_zeros() {
    let mut rng = Rng(1);
    let (q, k, v) = (
        rng.tensor(&[2, 3]),
        rng.tensor(&[4, 3]),
        rng.tensor(&[4, 5]),
    );
    let m = Tensor::from_vec(
        vec![2, 4],
        vec![false, false, false, false, true, false, true, false],
    )
    .unwrap();
    let y = eval_op(&Attention { scale: None }, &[&q, &k, &v, &m]).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    assert!(y[..5].iter().all(|&x| x == 0.0));
    assert!(y[5..].iter().all(|x| x.is_finite()) && y[5..].iter().any(|&x| x != 0.0));
    let fm = Tensor::from_vec(vec![4], vec![f32::NEG_INFINITY; 4]).unwrap();
    let y = eval_op(&Attention { scale: None }, &[&q, &k, &v, &fm]).unwrap();
    assert!(y[0].to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
    let (k0, v0) = (
        Tensor::zeros(DType::F32, &[2, 0, 3]),
        Tensor::zeros(DType::F32, &[2, 0, 5]),
    );
    let y = eval_op(&Attention { scale: None }, &[&q, &k0, &v0]).unwrap();
    assert_eq!(y[0].shape(), &[2, 2, 5]);
    assert!(y[0].to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
}

#[test]
fn large_scores_stay_finite() {
    let q = Tensor::from_vec(vec![1, 2], vec![100.0f32, 100.0]).unwrap();
    let k = Tensor::from_vec(vec![2, 2], vec![100.0f32, 100.0, 99.0, 99.0]).unwrap();
    let v = Tensor::from_vec(vec![2, 1], vec![1.0f32, 2.0]).unwrap();
    let y = eval_op(&Attention { scale: Some(1.0) }, &[&q, &k, &v]).unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![1.0]);
}

#[test]
fn bad_inputs_are_errors() {
    let f = |s: &[usize]| Tensor::zeros(DType::F32, s);
    let (q, k, v) = (f(&[2, 3, 4]), f(&[2, 5, 4]), f(&[2, 5, 6]));
    let op = Attention { scale: None };
    let cases: Vec<Vec<Tensor>> = vec![
        vec![q.clone(), k.clone()],
        vec![f(&[4]), k.clone(), v.clone()],
        vec![q.clone(), f(&[2, 5, 3]), v.clone()],
        vec![q.clone(), k.clone(), f(&[2, 4, 6])],
        vec![q.clone(), f(&[3, 5, 4]), v.clone()],
        vec![q.clone(), k.clone(), v.cast(DType::F16)],
        vec![q.cast(DType::I64), k.cast(DType::I64), v.cast(DType::I64)],
        vec![f(&[2, 3, 0]), f(&[2, 5, 0]), v.clone()],
        vec![q.clone(), k.clone(), f(&[2, 5, 0])],
        vec![q.clone(), k.clone(), v.clone(), f(&[3, 4])],
        vec![q.clone(), k.clone(), v.clone(), f(&[3, 3, 5])],
        vec![q.clone(), k.clone(), v.clone(), f(&[1, 2, 3, 5])],
        vec![
            q.clone(),
            k.clone(),
            v.clone(),
            Tensor::zeros(DType::I64, &[3, 5]),
        ],
        vec![q.clone(), k.clone(), v.clone(), f(&[3, 5]), f(&[3, 5])],
    ];
    for ins in &cases {
        let refs: Vec<&Tensor> = ins.iter().collect();
        assert!(eval_op(&op, &refs).is_err(), "eval accepted {ins:?}");
        let facts: Vec<TypedFact> = ins.iter().map(TypedFact::of).collect();
        let frefs: Vec<&TypedFact> = facts.iter().collect();
        assert!(
            op.output_facts(&frefs).is_err(),
            "output_facts accepted {facts:?}"
        );
    }
    assert!(eval_op(
        &Attention {
            scale: Some(f32::NAN)
        },
        &[&q, &k, &v]
    )
    .is_err());
    assert!(eval_op(&op, &[&q, &k, &v, &f(&[3, 1])]).is_ok());
}
