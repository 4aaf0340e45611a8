use super::test_util::*;
use super::*;
use crate::ops::{eval_op, Op};
use proptest::prelude::*;

fn shape_strategy(max_rank: usize, max_dim: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..=max_dim, 1..=max_rank)
}

/// Python's `range(n)[start:end]` bounds, written from the definition.
fn py_slice(n: usize, start: i64, end: Option<i64>) -> Vec<usize> {
    let n = n as i64;
    let norm = |v: i64| if v < 0 { v + n } else { v };
    let (s, e) = (norm(start), end.map_or(n, norm));
    (0..n)
        .filter(|&i| i >= s && i < e)
        .map(|i| i as usize)
        .collect()
}

proptest! {
    #[test]
    fn slice_matches_python(shape in shape_strategy(4, 5), ax in 0usize..4, start in -7i64..7,
                            end in prop::option::of(-7i64..7), dt in any_dt(), seed in any::<u64>()) {
        let axis = ax % shape.len();
        let x = rand_tensor(dt, &shape, seed);
        let op = Slice { axis, start, end };
        let out = eval_checked(&op, &[&x]);
        let keep = py_slice(shape[axis], start, end);
        let xv = x.to_f32_vec();
        let want: Vec<f32> = xv.iter().enumerate()
            .filter(|(i, _)| keep.contains(&unravel(*i, &shape)[axis]))
            .map(|(_, &v)| v)
            .collect();
        prop_assert_eq!(out[0].to_f32_vec(), want);
    }

    #[test]
    fn slice_symbolic(a in 1i64..3, b in 0i64..4, start in 0i64..5, end in prop::option::of(-4i64..0),
                      other in any::<bool>(), s in 9i64..20, dt in any_dt()) {
        let fact = TypedFact::new(dt, [Dim::affine(a, b), Dim::n(3)]);
        let x = rand_tensor(dt, &[(a * s + b) as usize, 3], s as u64);
        let op = if other { Slice { axis: 1, start: 1, end } } else { Slice { axis: 0, start, end } };
        check_symbolic(&op, &[fact], s, &[&x]);
    }

    #[test]
    fn reshape_regroups(atoms in prop::collection::vec(1usize..4, 1..6), cuts_in in any::<u32>(),
                        cuts_out in any::<u32>(), infer in any::<u8>(), zeros in any::<bool>(),
                        dt in any_dt(), seed in any::<u64>()) {
        let group = |cuts: u32| -> Vec<usize> {
            let mut g = vec![atoms[0]];
            for (k, &a) in atoms.iter().enumerate().skip(1) {
                if cuts >> k & 1 == 1 { g.push(a) } else { *g.last_mut().unwrap() *= a }
            }
            g
        };
        let (ins, outs) = (group(cuts_in), group(cuts_out));
        let mut target: Vec<i64> = outs.iter().map(|&d| d as i64).collect();
        if zeros {
            for (i, t) in target.iter_mut().enumerate() {
                if ins.get(i) == Some(&(*t as usize)) { *t = 0 }
            }
        }
        if infer % 2 == 0 {
            let k = infer as usize / 2 % target.len();
            target[k] = -1;
        }
        let x = rand_tensor(dt, &ins, seed);
        let out = eval_checked(&Reshape { shape: target.clone() }, &[&x]);
        prop_assert_eq!(out[0].shape(), &outs[..]);
        prop_assert_eq!(&out[0], &x.reshape(&outs).unwrap());

        // the same with the first atom standing for S
        let s = 2 * atoms[0] as i64 + 3;
        let sym_in: Vec<Dim> = ins.iter().enumerate()
            .map(|(i, &d)| if i == 0 { Dim::s().mul((d / atoms[0]) as i64).unwrap() } else { Dim::n(d as i64) })
            .collect();
        let conc = |d: &[usize]| -> Vec<usize> {
            d.iter().enumerate().map(|(i, &v)| if i == 0 { v / atoms[0] * s as usize } else { v }).collect()
        };
        let mut target_s = target.clone();
        if target_s[0] > 0 { target_s[0] = -1 }; // S cannot be written as a number
        if target_s.iter().filter(|&&t| t == -1).count() > 1 {
            let k = target.iter().position(|&t| t == -1).unwrap();
            target_s[k] = outs[k] as i64;
        }
        let xs = rand_tensor(dt, &conc(&ins), seed);
        let out = check_symbolic(&Reshape { shape: target_s }, &[TypedFact::dt_shape(dt, &sym_in)], s, &[&xs]);
        prop_assert_eq!(out[0].shape(), &conc(&outs)[..]);
    }

    #[test]
    fn permute_and_move_axis_match_views(shape in shape_strategy(4, 4), perm_seed in any::<u64>(),
                                         from in 0usize..4, to in 0usize..4, dt in any_dt(),
                                         seed in any::<u64>()) {
        let r = shape.len();
        let x = rand_tensor(dt, &shape, seed);
        let mut perm: Vec<usize> = (0..r).collect();
        let mut k = perm_seed;
        for i in (1..r).rev() {
            perm.swap(i, (k % (i as u64 + 1)) as usize);
            k /= 7;
        }
        let out = eval_checked(&Permute { axes: perm.clone() }, &[&x]);
        prop_assert_eq!(&out[0], &x.permute(&perm).unwrap().contiguous());
        let (from, to) = (from % r, to % r);
        let out = eval_checked(&MoveAxis { from, to }, &[&x]);
        prop_assert_eq!(&out[0], &x.move_axis(from, to).unwrap().contiguous());
        let sym: Vec<Dim> = shape.iter().enumerate()
            .map(|(i, &d)| if i == 0 { Dim::s() } else { Dim::n(d as i64) }).collect();
        let xs = rand_tensor(dt, &[&[5], &shape[1..]].concat(), seed);
        check_symbolic(&MoveAxis { from, to }, &[TypedFact::dt_shape(dt, &sym)], 5, &[&xs]);
        check_symbolic(&Permute { axes: perm }, &[TypedFact::dt_shape(dt, &sym)], 5, &[&xs]);
    }

    #[test]
    fn unsqueeze_squeeze_round_trip(shape in shape_strategy(4, 4), ax in 0usize..5, dt in any_dt(),
                                    seed in any::<u64>()) {
        let axis = ax % (shape.len() + 1);
        let x = rand_tensor(dt, &shape, seed);
        let u = eval_checked(&Unsqueeze { axis }, &[&x]);
        prop_assert_eq!(u[0].shape()[axis], 1);
        let back = eval_checked(&Squeeze { axis }, &[&u[0]]);
        prop_assert_eq!(&back[0], &x);
        let sym: Vec<Dim> = shape.iter().enumerate()
            .map(|(i, &d)| if i == 0 { Dim::affine(2, 1) } else { Dim::n(d as i64) }).collect();
        let xs = rand_tensor(dt, &[&[9], &shape[1..]].concat(), seed);
        check_symbolic(&Unsqueeze { axis }, &[TypedFact::dt_shape(dt, &sym)], 4, &[&xs]);
    }
}

#[test]
fn slice_symbolic_sizes() {
    let f = TypedFact::new(DType::F32, [Dim::affine(2, 3), Dim::n(8)]);
    let len = |start, end| {
        Slice {
            axis: 0,
            start,
            end,
        }
        .output_facts(&[&f])
        .map(|o| o[0].shape[0])
    };
    assert_eq!(len(0, None), Ok(Dim::affine(2, 3)));
    assert_eq!(len(2, Some(-1)), Ok(Dim::affine(2, 0)));
    assert_eq!(len(-4, None), Ok(Dim::n(4)));
    assert_eq!(len(1, Some(5)), Ok(Dim::n(4)));
    assert!(matches!(len(-4, Some(3)), Err(OpError::Dim(_))));
    let glu = Slice {
        axis: 1,
        start: 4,
        end: Some(8),
    }
    .output_facts(&[&f])
    .unwrap();
    assert_eq!(glu[0].shape, vec![Dim::affine(2, 3), Dim::n(4)]);
}

#[test]
fn reshape_symbolic_examples() {
    let f = TypedFact::new(DType::BF16, [Dim::s(), Dim::n(256)]);
    let out = |shape: Vec<i64>| {
        Reshape { shape }
            .output_facts(&[&f])
            .map(|o| o[0].shape.clone())
    };
    assert_eq!(
        out(vec![0, 4, 64]),
        Ok(vec![Dim::s(), Dim::n(4), Dim::n(64)])
    );
    assert_eq!(
        out(vec![-1, 64]),
        Ok(vec![Dim::s().mul(4).unwrap(), Dim::n(64)])
    );
    assert_eq!(
        out(vec![0, -1, 16]),
        Ok(vec![Dim::s(), Dim::n(16), Dim::n(16)])
    );
    assert_eq!(out(vec![-1]), Ok(vec![Dim::s().mul(256).unwrap()]));
    assert!(matches!(out(vec![-1, 512]), Err(OpError::Dim(_))));
    assert!(matches!(out(vec![0, 3, -1]), Err(OpError::Dim(_))));
    assert!(matches!(out(vec![0, 128]), Err(OpError::Shape(_))));
    let g = TypedFact::new(DType::F32, [Dim::affine(2, 3), Dim::n(4)]);
    let r = Reshape { shape: vec![-1] }.output_facts(&[&g]).unwrap();
    assert_eq!(r[0].shape, vec![Dim::affine(8, 12)]);
    let two = TypedFact::new(DType::F32, [Dim::s(), Dim::s()]);
    assert!(matches!(
        Reshape { shape: vec![-1] }.output_facts(&[&two]),
        Err(OpError::Dim(_))
    ));
}

#[test]
fn every_dtype_moves_exactly() {
    for dt in ALL_DTYPES {
        let x = rand_tensor(dt, &[2, 3, 4], 7);
        let s = eval_checked(
            &Slice {
                axis: 2,
                start: 1,
                end: Some(-1),
            },
            &[&x],
        );
        assert_eq!(s[0], x.narrow(2, 1, 2).unwrap().contiguous(), "{dt}");
        let p = eval_checked(
            &Permute {
                axes: vec![2, 0, 1],
            },
            &[&x],
        );
        assert_eq!(
            p[0].to_f32_vec(),
            x.permute(&[2, 0, 1]).unwrap().to_f32_vec(),
            "{dt}"
        );
        let r = eval_checked(&Reshape { shape: vec![0, -1] }, &[&x]);
        assert_eq!(r[0], x.reshape(&[2, 12]).unwrap(), "{dt}");
        // a strided view as input
        let view = x.transpose(0, 2).unwrap();
        let r = eval_checked(&Reshape { shape: vec![-1] }, &[&view]);
        assert_eq!(r[0].to_f32_vec(), view.to_f32_vec(), "{dt}");
        let s = eval_checked(
            &Slice {
                axis: 0,
                start: 1,
                end: None,
            },
            &[&view],
        );
        assert_eq!(s[0], view.narrow(0, 1, 3).unwrap().contiguous(), "{dt}");
        for op in [
            &Slice {
                axis: 1,
                start: 0,
                end: Some(2),
            } as &dyn Op,
            &Reshape { shape: vec![4, -1] },
            &Permute {
                axes: vec![1, 2, 0],
            },
            &MoveAxis { from: 0, to: 2 },
            &Unsqueeze { axis: 1 },
        ] {
            assert_reuses_buffer(op, &[&x]);
        }
    }
}

#[test]
fn frame_local_axes() {
    let f = TypedFact::new(DType::F32, [Dim::n(1), Dim::n(4), Dim::n(6)]);
    let fl = |op: &dyn Op, a: usize| op.frame_local_axis(&[&f], &[Some(a)]);
    assert_eq!(
        fl(
            &Slice {
                axis: 2,
                start: 0,
                end: Some(3)
            },
            1
        ),
        Some(1)
    );
    assert_eq!(
        fl(
            &Slice {
                axis: 1,
                start: 0,
                end: Some(3)
            },
            1
        ),
        None
    );
    assert_eq!(
        fl(
            &Reshape {
                shape: vec![0, 0, 2, 3]
            },
            1
        ),
        Some(1)
    );
    assert_eq!(fl(&Reshape { shape: vec![-1, 6] }, 1), Some(0));
    assert_eq!(
        fl(
            &Reshape {
                shape: vec![1, -1, 3]
            },
            1
        ),
        None
    );
    assert_eq!(
        fl(
            &Reshape {
                shape: vec![1, 4, 6]
            },
            1
        ),
        None
    );
    assert_eq!(fl(&Reshape { shape: vec![0, -1] }, 1), None);
    assert_eq!(
        fl(
            &Permute {
                axes: vec![2, 0, 1]
            },
            1
        ),
        Some(2)
    );
    assert_eq!(fl(&MoveAxis { from: 1, to: 2 }, 1), Some(2));
    assert_eq!(fl(&MoveAxis { from: 2, to: 0 }, 1), Some(2));
    assert_eq!(fl(&Unsqueeze { axis: 1 }, 1), Some(2));
    assert_eq!(fl(&Unsqueeze { axis: 2 }, 1), Some(1));
    assert_eq!(fl(&Squeeze { axis: 0 }, 1), Some(0));
    assert_eq!(fl(&Squeeze { axis: 0 }, 0), None);
    assert_eq!(
        Permute {
            axes: vec![0, 1, 2]
        }
        .frame_local_axis(&[&f], &[None]),
        None
    );
}

#[test]
fn bad_inputs_are_errors() {
    let x = Tensor::zeros(DType::F16, &[2, 3]);
    let e = |op: &dyn Op| {
        let f = TypedFact::of(&x);
        assert!(op.output_facts(&[&f]).is_err(), "{op:?} facts");
        eval_op(op, &[&x]).unwrap_err()
    };
    assert!(matches!(
        e(&Slice {
            axis: 2,
            start: 0,
            end: None
        }),
        OpError::Param(_)
    ));
    assert!(matches!(
        e(&Reshape {
            shape: vec![-1, -1]
        }),
        OpError::Param(_)
    ));
    assert!(matches!(
        e(&Reshape { shape: vec![4, 2] }),
        OpError::Shape(_)
    ));
    assert!(matches!(
        e(&Reshape {
            shape: vec![0, 0, 0]
        }),
        OpError::Param(_)
    ));
    assert!(matches!(
        e(&Reshape { shape: vec![-2, 3] }),
        OpError::Param(_)
    ));
    assert!(matches!(
        e(&Reshape { shape: vec![4, -1] }),
        OpError::Shape(_)
    ));
    assert!(matches!(
        e(&Reshape { shape: vec![1; 9] }),
        OpError::Param(_)
    ));
    assert!(matches!(
        e(&Permute { axes: vec![0, 0] }),
        OpError::Param(_)
    ));
    assert!(matches!(e(&Permute { axes: vec![1] }), OpError::Param(_)));
    assert!(matches!(e(&MoveAxis { from: 0, to: 2 }), OpError::Param(_)));
    assert!(matches!(e(&Unsqueeze { axis: 3 }), OpError::Param(_)));
    assert!(matches!(e(&Squeeze { axis: 1 }), OpError::Shape(_)));
    assert!(matches!(e(&Squeeze { axis: 5 }), OpError::Param(_)));
    let zero = Tensor::zeros(DType::F32, &[0, 3]);
    // -1 next to a 0 size is ambiguous; next to non-zero sizes it is 0
    assert!(matches!(
        eval_op(&Reshape { shape: vec![0, -1] }, &[&zero]),
        Err(OpError::Shape(_))
    ));
    assert_eq!(
        eval_checked(&Reshape { shape: vec![-1, 0] }, &[&zero])[0].shape(),
        &[0, 3]
    );
    // absurd parameters are refused, not overflowed
    assert!(matches!(
        e(&Slice {
            axis: 0,
            start: i64::MIN,
            end: None
        }),
        OpError::Param(_)
    ));
    assert!(matches!(
        e(&Slice {
            axis: 0,
            start: 0,
            end: Some(i64::MAX)
        }),
        OpError::Param(_)
    ));
    assert!(matches!(
        e(&Reshape {
            shape: vec![i64::MAX, 2]
        }),
        OpError::Param(_)
    ));
    assert!(matches!(
        e(&Reshape {
            shape: vec![1 << 40, 1 << 40, -1]
        }),
        OpError::Param(_)
    ));
    let deep = Tensor::zeros(DType::F32, &[1; 9]);
    assert!(eval_op(
        &Slice {
            axis: 0,
            start: 0,
            end: None
        },
        &[&deep]
    )
    .is_err());
    assert!(eval_op(
        &Unsqueeze { axis: 0 },
        &[&Tensor::zeros(DType::F32, &[1; 8])]
    )
    .is_err());
    assert!(eval_op(
        &Slice {
            axis: 0,
            start: 0,
            end: None
        },
        &[]
    )
    .is_err());
    assert!(eval_op(&Squeeze { axis: 0 }, &[&x, &x]).is_err());
}
