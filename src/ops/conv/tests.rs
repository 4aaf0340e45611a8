use super::depthwise::{depthwise_last_rows, dw_stride, Unfused};
use super::*;
use crate::ops::checks::facts_of;
use crate::ops::matmul::test_util::{assert_close, tensor};
use crate::ops::{eval_op, Op, TypedFact};
use proptest::prelude::*;

type Reference = (Vec<usize>, Vec<f64>, Vec<f64>);

/// Nested-loop Conv1d in f64: output shape, values and sums of |terms|;
/// `None` when the padded input is shorter than the kernel extent.
fn naive_conv1d(op: &Conv1d, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Option<Reference> {
    let (xv, wv) = (x.to_f32_vec(), w.to_f32_vec());
    let bv = b.map(|b| b.to_f32_vec());
    let last = op.layout == ConvLayout::ChannelsLast;
    let xs = x.shape();
    let n = if xs.len() == 3 { xs[0] } else { 1 };
    let (c, t) = if last {
        (xs[xs.len() - 1], xs[xs.len() - 2])
    } else {
        (xs[xs.len() - 2], xs[xs.len() - 1])
    };
    let (o, cg, k) = (w.shape()[0], w.shape()[1], w.shape()[2]);
    let og = o / op.groups;
    let ext = op.dilation * (k - 1) + 1;
    let padded = t + op.pad.0 + op.pad.1;
    if padded < ext {
        return None;
    }
    let t_out = (padded - ext) / op.stride + 1;
    let xat = |ni: usize, ci: usize, ti: usize| {
        if last {
            xv[(ni * t + ti) * c + ci]
        } else {
            xv[(ni * c + ci) * t + ti]
        }
    };
    let mut val = vec![0f64; n * o * t_out];
    let mut mag = vec![0f64; n * o * t_out];
    for ni in 0..n {
        for oo in 0..o {
            let g = oo / og;
            for to in 0..t_out {
                let (mut s, mut m) = (0f64, 0f64);
                if let Some(bv) = &bv {
                    s = bv[oo] as f64;
                    m = s.abs();
                }
                for ci in 0..cg {
                    for j in 0..k {
                        let ti = (to * op.stride + j * op.dilation) as i64 - op.pad.0 as i64;
                        if ti < 0 || ti >= t as i64 {
                            continue;
                        }
                        let p = xat(ni, g * cg + ci, ti as usize) as f64
                            * wv[(oo * cg + ci) * k + j] as f64;
                        s += p;
                        m += p.abs();
                    }
                }
                let at = if last {
                    (ni * t_out + to) * o + oo
                } else {
                    (ni * o + oo) * t_out + to
                };
                val[at] = s;
                mag[at] = m;
            }
        }
    }
    let mut shape = if last { vec![t_out, o] } else { vec![o, t_out] };
    if xs.len() == 3 {
        shape.insert(0, n);
    }
    Some((shape, val, mag))
}

/// Nested-loop Conv2d in f64, as `naive_conv1d`.
fn naive_conv2d(op: &Conv2d, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Option<Reference> {
    let (xv, wv) = (x.to_f32_vec(), w.to_f32_vec());
    let bv = b.map(|b| b.to_f32_vec());
    let xs = x.shape();
    let r = xs.len();
    let n = if r == 4 { xs[0] } else { 1 };
    let (c, h, wd) = (xs[r - 3], xs[r - 2], xs[r - 1]);
    let (o, cg, kh, kw) = (w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]);
    let og = o / op.groups;
    let size = |len: usize, pad: (usize, usize), k: usize, d: usize, s: usize| {
        let (p, e) = (len + pad.0 + pad.1, d * (k - 1) + 1);
        (p >= e).then(|| (p - e) / s + 1)
    };
    let ho = size(h, op.pad[0], kh, op.dilation.0, op.stride.0)?;
    let wo = size(wd, op.pad[1], kw, op.dilation.1, op.stride.1)?;
    let (mut val, mut mag) = (vec![], vec![]);
    for ni in 0..n {
        for oo in 0..o {
            let g = oo / og;
            for y in 0..ho {
                for z in 0..wo {
                    let (mut s, mut m) = (0f64, 0f64);
                    if let Some(bv) = &bv {
                        s = bv[oo] as f64;
                        m = s.abs();
                    }
                    for ci in 0..cg {
                        for i in 0..kh {
                            for j in 0..kw {
                                let yi = (y * op.stride.0 + i * op.dilation.0) as i64
                                    - op.pad[0].0 as i64;
                                let zi = (z * op.stride.1 + j * op.dilation.1) as i64
                                    - op.pad[1].0 as i64;
                                if yi < 0 || zi < 0 || yi >= h as i64 || zi >= wd as i64 {
                                    continue;
                                }
                                let xi =
                                    ((ni * c + g * cg + ci) * h + yi as usize) * wd + zi as usize;
                                let p =
                                    xv[xi] as f64 * wv[((oo * cg + ci) * kh + i) * kw + j] as f64;
                                s += p;
                                m += p.abs();
                            }
                        }
                    }
                    val.push(s);
                    mag.push(m);
                }
            }
        }
    }
    let mut shape = vec![o, ho, wo];
    if r == 4 {
        shape.insert(0, n);
    }
    Some((shape, val, mag))
}

/// Evaluates and checks the output against `output_facts` and the
/// reference; a `None` reference means both must refuse the input.
fn check_against(op: &dyn Op, inputs: &[&Tensor], want: Option<Reference>) {
    let facts = facts_of(inputs);
    let refs: Vec<&TypedFact> = facts.iter().collect();
    let (facts, out) = (op.output_facts(&refs), eval_op(op, inputs));
    let Some((shape, val, mag)) = want else {
        assert!(matches!(out, Err(OpError::Shape(_))), "{op:?}: {out:?}");
        assert!(matches!(facts, Err(OpError::Shape(_))), "{op:?}: {facts:?}");
        return;
    };
    let (facts, out) = (facts.unwrap(), out.unwrap());
    assert_eq!(vec![TypedFact::of(&out[0])], facts, "{op:?}");
    assert_eq!(out[0].shape(), &shape[..], "{op:?}");
    assert_close(&out[0], &val, &mag);
}

fn float_dtype() -> impl Strategy<Value = DType> {
    prop_oneof![3 => Just(DType::F32), 1 => Just(DType::F16), 1 => Just(DType::BF16)]
}

fn layout() -> impl Strategy<Value = ConvLayout> {
    prop_oneof![
        Just(ConvLayout::ChannelsFirst),
        Just(ConvLayout::ChannelsLast)
    ]
}

/// x, w and bias shapes of a Conv1d for `t` frames.
fn shapes1(
    op: &Conv1d,
    batch: Option<usize>,
    c: usize,
    t: usize,
    o: usize,
    k: usize,
) -> (Vec<usize>, Vec<usize>) {
    let mut xs = if op.layout == ConvLayout::ChannelsLast {
        vec![t, c]
    } else {
        vec![c, t]
    };
    if let Some(n) = batch {
        xs.insert(0, n);
    }
    (xs, vec![o, c / op.groups, k])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn conv1d_matches_naive_and_its_facts(layout in layout(), batch in proptest::option::of(0usize..3),
                                          groups in 1usize..4, cg in 0usize..4, og in 1usize..4, depthwise: bool,
                                          k in 1usize..6, stride in 1usize..4, dilation in 1usize..4,
                                          pad in (0usize..5, 0usize..4), t in 0usize..14, bias: bool,
                                          dt in float_dtype(), seed: u64) {
        let (cg, og) = if depthwise { (1, 1) } else { (cg, og) };
        let op = Conv1d { stride, dilation, pad, groups, layout };
        let (xs, ws) = shapes1(&op, batch, groups * cg, t, groups * og, k);
        let (x, w, b) = (tensor(dt, &xs, seed), tensor(dt, &ws, seed ^ 1), tensor(dt, &[groups * og], seed ^ 2));
        let inputs: Vec<&Tensor> = if bias { vec![&x, &w, &b] } else { vec![&x, &w] };
        check_against(&op, &inputs, naive_conv1d(&op, &x, &w, bias.then_some(&b)));
    }

    #[test]
    fn conv1d_symbolic_time_facts_match_eval(layout in layout(), batched: bool, groups in 1usize..3, k in 1usize..6,
                                             stride in 1usize..4, dilation in 1usize..3, pad in (0usize..5, 0usize..4)) {
        let op = Conv1d { stride, dilation, pad, groups, layout };
        let (c, o) = (2 * groups, 3 * groups);
        let (xs, ws) = shapes1(&op, batched.then_some(2), c, 0, o, k);
        let (c_ax, t_ax) = op.axes(xs.len());
        let mut sym: Vec<Dim> = xs.iter().map(|&d| Dim::from(d)).collect();
        sym[t_ax] = Dim::s();
        let (fx, fw) = (TypedFact::dt_shape(DType::F32, &sym), TypedFact::new(DType::F32, ws.clone()));
        let fb = TypedFact::new(DType::F32, [o]);
        let facts = op.output_facts(&[&fx, &fw, &fb]).unwrap();
        prop_assert!(facts[0].shape[t_ax].is_symbolic());
        prop_assert_eq!(facts[0].shape[c_ax], Dim::from(o));
        let (w, b) = (tensor(DType::F32, &ws, 1), tensor(DType::F32, &[o], 2));
        for s in 0..24i64 {
            let x = tensor(DType::F32, &fx.concretize(s).concrete_shape().unwrap(), s as u64);
            match eval_op(&op, &[&x, &w, &b]) {
                Ok(out) => prop_assert_eq!(TypedFact::of(&out[0]), facts[0].concretize(s)),
                // too short: the symbolic size is no positive length either
                Err(_) => prop_assert!(facts[0].shape[t_ax].eval(s) <= 0, "s={} {:?}", s, facts[0]),
            }
        }
    }

    #[test]
    fn conv2d_matches_naive_and_its_facts(batch in proptest::option::of(0usize..3), groups in 1usize..3,
                                          cg in 1usize..3, og in 1usize..3, kh in 1usize..4, kw in 1usize..4,
                                          stride in (1usize..3, 1usize..4), dilation in (1usize..3, 1usize..3),
                                          ph in (0usize..3, 0usize..3), pw in (0usize..3, 0usize..3),
                                          h in 0usize..8, wd in 0usize..9, bias: bool, dt in float_dtype(), seed: u64) {
        let op = Conv2d { stride, dilation, pad: [ph, pw], groups };
        let mut xs = vec![groups * cg, h, wd];
        if let Some(n) = batch {
            xs.insert(0, n);
        }
        let (x, w) = (tensor(dt, &xs, seed), tensor(dt, &[groups * og, cg, kh, kw], seed ^ 1));
        let b = tensor(dt, &[groups * og], seed ^ 2);
        let inputs: Vec<&Tensor> = if bias { vec![&x, &w, &b] } else { vec![&x, &w] };
        check_against(&op, &inputs, naive_conv2d(&op, &x, &w, bias.then_some(&b)));
    }

    #[test]
    fn conv2d_symbolic_facts_match_eval(sym_h: bool, kh in 1usize..4, kw in 1usize..4, stride in (1usize..3, 1usize..3),
                                        pad in (0usize..3, 0usize..3)) {
        let op = Conv2d { stride, dilation: (1, 2), pad: [pad, (pad.1, pad.0)], groups: 1 };
        let (ax, other) = if sym_h { (1, 2) } else { (2, 1) };
        let mut sym = vec![Dim::from(2), Dim::from(5), Dim::from(5)];
        sym[ax] = Dim::s();
        let fx = TypedFact::dt_shape(DType::F32, &sym);
        let fw = TypedFact::new(DType::F32, [3, 2, kh, kw]);
        let Ok(facts) = op.output_facts(&[&fx, &fw]) else {
            // the fixed axis alone is too short: eval refuses every length too
            let x = tensor(DType::F32, &fx.concretize(30).concrete_shape().unwrap(), 0);
            prop_assert!(eval_op(&op, &[&x, &tensor(DType::F32, &[3, 2, kh, kw], 1)]).is_err());
            return Ok(());
        };
        prop_assert!(facts[0].shape[ax].is_symbolic() && !facts[0].shape[other].is_symbolic());
        let w = tensor(DType::F32, &[3, 2, kh, kw], 1);
        for s in 0..16i64 {
            let x = tensor(DType::F32, &fx.concretize(s).concrete_shape().unwrap(), s as u64);
            match eval_op(&op, &[&x, &w]) {
                Ok(out) => prop_assert_eq!(TypedFact::of(&out[0]), facts[0].concretize(s)),
                Err(_) => prop_assert!(facts[0].shape[ax].eval(s) <= 0),
            }
        }
    }
}

#[test]
fn encoder_shapes_match_naive() {
    // long sums (k*C up to 768 terms): f32 within 1e-4 of the sum of |terms|
    let (cl, cf) = (ConvLayout::ChannelsLast, ConvLayout::ChannelsFirst);
    let conv = |stride, dilation, pad, groups, layout| Conv1d {
        stride,
        dilation,
        pad,
        groups,
        layout,
    };
    // (op, channels in, out, k, T)
    let cases = [
        (conv(1, 1, (14, 0), 256, cl), 256, 256, 15, 40),
        (conv(1, 1, (14, 0), 100, cl), 100, 100, 15, 37),
        (conv(2, 1, (2, 0), 1, cl), 80, 256, 3, 64),
        (conv(2, 1, (2, 0), 1, cl), 256, 256, 3, 33),
        (conv(1, 1, (0, 0), 1, cl), 96, 64, 1, 20),
        (conv(3, 2, (7, 7), 64, cf), 64, 64, 15, 50),
        (conv(1, 1, (1, 1), 1, cf), 40, 48, 3, 50),
        // packed-kernel edges: depth 600 > 512, 150 rows > 128, groups
        (conv(1, 1, (1, 1), 1, cf), 200, 20, 3, 150),
        (conv(1, 1, (1, 1), 2, cl), 400, 22, 3, 150),
        (conv(2, 1, (2, 0), 1, cl), 24, 40, 3, 600),
    ];
    for (op, c, o, k, t) in cases {
        let (xs, ws) = shapes1(&op, None, c, t, o, k);
        let (x, w, b) = (
            tensor(DType::F32, &xs, 1),
            tensor(DType::F32, &ws, 2),
            tensor(DType::F32, &[o], 3),
        );
        check_against(&op, &[&x, &w, &b], naive_conv1d(&op, &x, &w, Some(&b)));
    }
    let op = Conv2d {
        stride: (2, 2),
        dilation: (1, 1),
        pad: [(1, 1), (1, 1)],
        groups: 1,
    };
    let (x, w) = (
        tensor(DType::F32, &[16, 20, 24], 4),
        tensor(DType::F32, &[32, 16, 3, 3], 5),
    );
    check_against(&op, &[&x, &w], naive_conv2d(&op, &x, &w, None));
}

#[test]
fn portable_depthwise_matches_the_simd_one() {
    // the portable loop runs on CPUs without AVX2/FMA; check it here too
    for (c, k, stride, dilation, pad, t) in [
        (37, 5, 1, 1, (4, 0), 9),
        (16, 3, 2, 2, (1, 3), 11),
        (300, 15, 1, 1, (14, 0), 20),
    ] {
        let op = Conv1d {
            stride,
            dilation,
            pad,
            groups: c,
            layout: ConvLayout::ChannelsLast,
        };
        let (x, w, b) = (
            tensor(DType::F32, &[t, c], 1),
            tensor(DType::F32, &[c, 1, k], 2),
            tensor(DType::F32, &[c], 3),
        );
        let simd = eval_op(&op, &[&x, &w, &b]).unwrap();
        let g = op.geometry(&[&x, &w, &b]).unwrap();
        let mut work = vec![f32::NAN; op.work_len(&g)];
        // fills the padded copies, then runs whichever kernel the CPU has
        let mut out = vec![0f32; g.t_out * c];
        let (xv, wv, bv) = (x.to_f32_vec(), w.to_f32_vec(), b.to_f32_vec());
        op.depthwise_last(&g, &xv, &wv, Some(&bv), &mut out, &mut work);
        let (_, xp) = work.split_at(k * dw_stride(c));
        let mut portable = vec![0f32; g.t_out * c];
        depthwise_last_rows::<Unfused>(
            &op,
            &g,
            xp,
            &work[..k * dw_stride(c)],
            Some(&bv),
            &mut portable,
        );
        let want = naive_conv1d(&op, &x, &w, Some(&b)).unwrap();
        assert_close(
            &Tensor::from_vec(vec![portable.len()], portable).unwrap(),
            &want.1,
            &want.2,
        );
        assert_eq!(simd[0].to_f32_vec(), out);
    }
}

#[test]
fn strided_input_and_repeated_eval() {
    let op = Conv1d {
        stride: 2,
        dilation: 1,
        pad: (2, 0),
        groups: 1,
        layout: ConvLayout::ChannelsLast,
    };
    let x = tensor(DType::F32, &[8, 20], 1).transpose(0, 1).unwrap(); // [20, 8] view
    let (w, b) = (
        tensor(DType::F32, &[6, 8, 3], 2),
        tensor(DType::F32, &[6], 3),
    );
    let want = eval_op(&op, &[&x.contiguous(), &w, &b]).unwrap();
    let (mut out, mut scratch) = (Vec::new(), Scratch::default());
    op.eval(&[&x, &w, &b], &mut out, &mut scratch).unwrap();
    assert_eq!(out[0], want[0]);
    let p = out[0].as_slice::<f32>().unwrap().as_ptr();
    op.eval(&[&x, &w, &b], &mut out, &mut scratch).unwrap();
    assert_eq!(
        out[0].as_slice::<f32>().unwrap().as_ptr(),
        p,
        "output buffer reused"
    );
    assert_eq!(out[0], want[0]);
}

#[test]
fn extent_and_output_length() {
    let op = Conv1d {
        stride: 2,
        dilation: 3,
        pad: (4, 1),
        groups: 1,
        layout: ConvLayout::ChannelsLast,
    };
    assert_eq!(op.extent(5), 13);
    assert_eq!(op.extent(1), 1);
    let fx = TypedFact::new(DType::F32, [Dim::s(), Dim::from(2)]);
    let fw = TypedFact::new(DType::F32, [3, 2, 5]);
    let out = op.output_facts(&[&fx, &fw]).unwrap();
    assert_eq!(
        out[0].shape[0],
        Dim::s().add_const(5 - 13 + 2).div_floor(2).unwrap()
    );
}

/// An op, its inputs, and the error kind both `eval` and `output_facts` must give.
type BadCase<O> = (O, Vec<Tensor>, fn(&OpError) -> bool);

#[test]
fn bad_inputs_are_errors() {
    let f = |s: &[usize]| tensor(DType::F32, s, 1);
    let cl = Conv1d {
        stride: 1,
        dilation: 1,
        pad: (0, 0),
        groups: 1,
        layout: ConvLayout::ChannelsLast,
    };
    let both = |op: &dyn Op, inputs: &[&Tensor]| -> (OpError, OpError) {
        let facts = facts_of(inputs);
        let refs: Vec<&TypedFact> = facts.iter().collect();
        (
            eval_op(op, inputs).unwrap_err(),
            op.output_facts(&refs).unwrap_err(),
        )
    };
    let (x, w, b) = (f(&[10, 4]), f(&[6, 4, 3]), f(&[6]));
    let mut checks: Vec<BadCase<Conv1d>> = vec![
        (cl, vec![f(&[10]), w.clone()], |e| {
            matches!(e, OpError::Rank { input: 0, .. })
        }),
        (cl, vec![f(&[1, 1, 10, 4]), w.clone()], |e| {
            matches!(e, OpError::Rank { input: 0, .. })
        }),
        (cl, vec![x.clone(), f(&[6, 12])], |e| {
            matches!(e, OpError::Rank { input: 1, .. })
        }),
        (cl, vec![x.clone(), f(&[6, 3, 3])], |e| {
            matches!(e, OpError::Shape(_))
        }),
        (
            Conv1d { groups: 3, ..cl },
            vec![x.clone(), f(&[6, 1, 3])],
            |e| matches!(e, OpError::Param(_)),
        ),
        (
            Conv1d { groups: 4, ..cl },
            vec![x.clone(), f(&[6, 1, 3])],
            |e| matches!(e, OpError::Param(_)),
        ),
        (
            Conv1d { groups: 0, ..cl },
            vec![x.clone(), w.clone()],
            |e| matches!(e, OpError::Param(_)),
        ),
        (
            Conv1d { stride: 0, ..cl },
            vec![x.clone(), w.clone()],
            |e| matches!(e, OpError::Param(_)),
        ),
        (
            Conv1d { dilation: 0, ..cl },
            vec![x.clone(), w.clone()],
            |e| matches!(e, OpError::Param(_)),
        ),
        (
            Conv1d {
                pad: (usize::MAX, 0),
                ..cl
            },
            vec![x.clone(), w.clone()],
            |e| matches!(e, OpError::Param(_)),
        ),
        (cl, vec![f(&[2, 4]), w.clone()], |e| {
            matches!(e, OpError::Shape(_))
        }),
        (
            Conv1d {
                dilation: 6,
                pad: (1, 0),
                ..cl
            },
            vec![x.clone(), w.clone()],
            |e| matches!(e, OpError::Shape(_)),
        ),
        (cl, vec![x.clone(), f(&[6, 4, 0])], |e| {
            matches!(e, OpError::Shape(_))
        }),
        (cl, vec![x.clone(), w.clone(), f(&[5])], |e| {
            matches!(e, OpError::Shape(_))
        }),
        (cl, vec![x.clone(), w.clone(), f(&[6, 1])], |e| {
            matches!(e, OpError::Rank { input: 2, .. })
        }),
        (cl, vec![x.clone()], |e| {
            matches!(e, OpError::InputCount { .. })
        }),
        (cl, vec![x.clone(), w.clone(), b.clone(), b.clone()], |e| {
            matches!(e, OpError::InputCount { .. })
        }),
        (cl, vec![x.cast(DType::I64), w.cast(DType::I64)], |e| {
            matches!(e, OpError::DType { input: 0, .. })
        }),
        (cl, vec![x.cast(DType::Bool), w.cast(DType::Bool)], |e| {
            matches!(e, OpError::DType { input: 0, .. })
        }),
        (cl, vec![x.clone(), w.cast(DType::F16)], |e| {
            matches!(e, OpError::DType { input: 1, .. })
        }),
        (cl, vec![x.clone(), w.clone(), b.cast(DType::I64)], |e| {
            matches!(e, OpError::DType { input: 2, .. })
        }),
    ];
    for (op, inputs, ok) in checks.drain(..) {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let (e1, e2) = both(&op, &refs);
        assert!(
            ok(&e1) && ok(&e2),
            "{op:?} {:?}: eval {e1}, facts {e2}",
            inputs
                .iter()
                .map(|t| t.shape().to_vec())
                .collect::<Vec<_>>()
        );
    }
    // a symbolic channel axis cannot meet the weight's fixed channels
    let fx = TypedFact::new(DType::F32, [Dim::from(10), Dim::s()]);
    assert!(cl.output_facts(&[&fx, &TypedFact::of(&w)]).is_err());

    let c2 = Conv2d {
        stride: (1, 1),
        dilation: (1, 1),
        pad: [(0, 0); 2],
        groups: 1,
    };
    let (x2, w2) = (f(&[4, 6, 6]), f(&[5, 4, 3, 3]));
    let mut checks2: Vec<BadCase<Conv2d>> = vec![
        (c2, vec![f(&[6, 6]), w2.clone()], |e| {
            matches!(e, OpError::Rank { input: 0, .. })
        }),
        (c2, vec![x2.clone(), f(&[5, 4, 3])], |e| {
            matches!(e, OpError::Rank { input: 1, .. })
        }),
        (c2, vec![x2.clone(), f(&[5, 3, 3, 3])], |e| {
            matches!(e, OpError::Shape(_))
        }),
        (
            Conv2d { groups: 3, ..c2 },
            vec![x2.clone(), f(&[6, 1, 3, 3])],
            |e| matches!(e, OpError::Param(_)),
        ),
        (
            Conv2d {
                stride: (1, 0),
                ..c2
            },
            vec![x2.clone(), w2.clone()],
            |e| matches!(e, OpError::Param(_)),
        ),
        (
            Conv2d {
                dilation: (0, 1),
                ..c2
            },
            vec![x2.clone(), w2.clone()],
            |e| matches!(e, OpError::Param(_)),
        ),
        (c2, vec![f(&[4, 2, 6]), w2.clone()], |e| {
            matches!(e, OpError::Shape(_))
        }),
        (c2, vec![x2.clone(), f(&[5, 4, 3, 7])], |e| {
            matches!(e, OpError::Shape(_))
        }),
        (c2, vec![x2.clone(), w2.clone(), f(&[4])], |e| {
            matches!(e, OpError::Shape(_))
        }),
        (c2, vec![x2.cast(DType::I64), w2.cast(DType::I64)], |e| {
            matches!(e, OpError::DType { .. })
        }),
        (c2, vec![x2.cast(DType::BF16), w2.clone()], |e| {
            matches!(e, OpError::DType { input: 1, .. })
        }),
    ];
    for (op, inputs, ok) in checks2.drain(..) {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let (e1, e2) = both(&op, &refs);
        assert!(ok(&e1) && ok(&e2), "{op:?}: eval {e1}, facts {e2}");
    }
}
