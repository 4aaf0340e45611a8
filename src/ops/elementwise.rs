//! Element-wise unary and binary ops, with numpy broadcasting.

use std::borrow::Cow;

use super::broadcast::{
    broadcast_dims, broadcast_shapes, broadcast_strides, for_each_row, MAX_RANK,
};
use super::checks::{input_count, same_dtype};
use super::{
    outputs_len, DType, Op, OpError, OpResult, Scratch, StorageElement, Tensor, TypedFact,
};

use half::{bf16, f16};

/// A contiguous version of `t` (borrowed when it already is).
pub fn contig(t: &Tensor) -> Cow<'_, Tensor> {
    if t.is_contiguous() {
        Cow::Borrowed(t)
    } else {
        Cow::Owned(t.contiguous())
    }
}

/// Two-input element-wise ops. Arithmetic keeps the input dtype; comparisons
/// give bool; `And`/`Or` take bools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
    Pow,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    And,
    Or,
}

impl Binary {
    fn is_comparison(self) -> bool {
        matches!(
            self,
            Binary::Lt | Binary::Le | Binary::Gt | Binary::Ge | Binary::Eq
        )
    }

    fn f(self, a: f32, b: f32) -> f32 {
        match self {
            Binary::Add => a + b,
            Binary::Sub => a - b,
            Binary::Mul => a * b,
            Binary::Div => a / b,
            Binary::Min => a.min(b),
            Binary::Max => a.max(b),
            Binary::Pow => a.powf(b),
            _ => unreachable!("not arithmetic"),
        }
    }

    fn i(self, a: i64, b: i64) -> OpResult<i64> {
        Ok(match self {
            Binary::Add => a.wrapping_add(b),
            Binary::Sub => a.wrapping_sub(b),
            Binary::Mul => a.wrapping_mul(b),
            Binary::Div => {
                if b == 0 {
                    return Err(OpError::Other("integer division by zero".into()));
                }
                a.div_euclid(b)
            }
            Binary::Min => a.min(b),
            Binary::Max => a.max(b),
            Binary::Pow => a.pow(b.clamp(0, 63) as u32),
            _ => unreachable!("not arithmetic"),
        })
    }

    fn cmp<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Binary::Lt => a < b,
            Binary::Le => a <= b,
            Binary::Gt => a > b,
            Binary::Ge => a >= b,
            Binary::Eq => a == b,
            _ => unreachable!("not a comparison"),
        }
    }

    fn out_dtype(self, input: DType) -> OpResult<DType> {
        match self {
            Binary::And | Binary::Or if input == DType::Bool => Ok(DType::Bool),
            Binary::And | Binary::Or => Err(OpError::DType {
                input: 0,
                expected: "bool".into(),
                got: input,
            }),
            b if b.is_comparison() => Ok(DType::Bool),
            _ if input == DType::Bool => Err(OpError::DType {
                input: 0,
                expected: "a number type".into(),
                got: input,
            }),
            _ => Ok(input),
        }
    }
}

fn binary_rows<A: StorageElement, O: StorageElement>(
    a: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
    shape: &[usize],
    mut f: impl FnMut(A, A) -> OpResult<O>,
) -> OpResult<()> {
    let (a, b) = (contig(a), contig(b));
    let (sa, sb) = (
        broadcast_strides(a.shape(), shape),
        broadcast_strides(b.shape(), shape),
    );
    let (av, bv) = (a.as_slice::<A>()?, b.as_slice::<A>()?);
    let ov = out.as_slice_mut::<O>()?;
    let mut err = None;
    for_each_row(shape, &sa, &sb, |o, pa, pb, ia, ib, n| {
        let row = &mut ov[o..o + n];
        if ia == 1 && ib == 1 {
            for ((r, &x), &y) in row.iter_mut().zip(&av[pa..pa + n]).zip(&bv[pb..pb + n]) {
                match f(x, y) {
                    Ok(v) => *r = v,
                    Err(e) => err = Some(e),
                }
            }
        } else {
            for (k, r) in row.iter_mut().enumerate() {
                match f(av[pa + k * ia], bv[pb + k * ib]) {
                    Ok(v) => *r = v,
                    Err(e) => err = Some(e),
                }
            }
        }
    });
    err.map_or(Ok(()), Err)
}

fn float_binary<T: StorageElement>(
    op: Binary,
    a: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
    s: &[usize],
) -> OpResult<()> {
    if op.is_comparison() {
        binary_rows::<T, bool>(a, b, out, s, |x, y| Ok(op.cmp(x.to_f32(), y.to_f32())))
    } else {
        binary_rows::<T, T>(a, b, out, s, |x, y| {
            Ok(T::from_f32(op.f(x.to_f32(), y.to_f32())))
        })
    }
}

impl Op for Binary {
    fn name(&self) -> &'static str {
        "Binary"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn info(&self) -> String {
        format!("{self:?}")
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        broadcast_stream_axis(inputs, axes)
    }

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 2)?;
        same_dtype(inputs[0], inputs[1], 1)?;
        if inputs[0].rank() > MAX_RANK || inputs[1].rank() > MAX_RANK {
            return Err(OpError::Shape(format!("rank above {MAX_RANK}")));
        }
        let shape = broadcast_dims(&inputs[0].shape, &inputs[1].shape)?;
        Ok(vec![TypedFact::dt_shape(
            self.out_dtype(inputs[0].dtype)?,
            &shape,
        )])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 2)?;
        let (a, b) = (inputs[0], inputs[1]);
        if a.dtype() != b.dtype() {
            return Err(OpError::DType {
                input: 1,
                expected: a.dtype().to_string(),
                got: b.dtype(),
            });
        }
        if a.rank() > MAX_RANK || b.rank() > MAX_RANK {
            return Err(OpError::Shape(format!("rank above {MAX_RANK}")));
        }
        let mut shape = [0usize; MAX_RANK];
        let r = broadcast_shapes(a.shape(), b.shape(), &mut shape)?;
        let shape = &shape[..r];
        outputs_len(outputs, 1);
        let out = &mut outputs[0];
        out.ensure(self.out_dtype(a.dtype())?, shape);
        let op = *self;
        match a.dtype() {
            DType::F32 => float_binary::<f32>(op, a, b, out, shape),
            DType::F16 => float_binary::<f16>(op, a, b, out, shape),
            DType::BF16 => float_binary::<bf16>(op, a, b, out, shape),
            DType::I64 if op.is_comparison() => {
                binary_rows::<i64, bool>(a, b, out, shape, |x, y| Ok(op.cmp(x, y)))
            }
            DType::I64 => binary_rows::<i64, i64>(a, b, out, shape, |x, y| op.i(x, y)),
            DType::Bool => match op {
                Binary::And => binary_rows::<bool, bool>(a, b, out, shape, |x, y| Ok(x && y)),
                Binary::Or => binary_rows::<bool, bool>(a, b, out, shape, |x, y| Ok(x || y)),
                Binary::Eq => binary_rows::<bool, bool>(a, b, out, shape, |x, y| Ok(x == y)),
                _ => Err(OpError::DType {
                    input: 0,
                    expected: "a number type".into(),
                    got: DType::Bool,
                }),
            },
        }
    }
}

/// One-input element-wise ops on floats.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unary {
    Sqrt,
    Exp,
    Ln,
    Abs,
    Neg,
    Relu,
    Sigmoid,
    Tanh,
    Silu,
    /// Exact GELU, `x * Phi(x)` with the error function.
    Gelu,
    Recip,
    Square,
    /// Logical not, for bool tensors.
    Not,
}

impl Unary {
    #[inline]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Unary::Sqrt => x.sqrt(),
            Unary::Exp => x.exp(),
            Unary::Ln => x.ln(),
            Unary::Abs => x.abs(),
            Unary::Neg => -x,
            Unary::Relu => x.max(0.0),
            Unary::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Unary::Tanh => x.tanh(),
            Unary::Silu => x / (1.0 + (-x).exp()),
            Unary::Gelu => super::vmath::gelu_scalar(x),
            Unary::Recip => 1.0 / x,
            Unary::Square => x * x,
            Unary::Not => (x == 0.0) as u8 as f32,
        }
    }
}

fn unary_typed<T: StorageElement>(op: Unary, a: &Tensor, out: &mut Tensor) -> OpResult<()> {
    let a = contig(a);
    let av = a.as_slice::<T>()?;
    let ov = out.as_slice_mut::<T>()?;
    for (o, &x) in ov.iter_mut().zip(av) {
        *o = T::from_f32(op.apply(x.to_f32()));
    }
    Ok(())
}

impl Op for Unary {
    fn name(&self) -> &'static str {
        "Unary"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn info(&self) -> String {
        format!("{self:?}")
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        axes.first().copied().flatten()
    }

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        check_unary_dtype(*self, inputs[0].dtype)?;
        Ok(vec![inputs[0].clone()])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        let a = inputs[0];
        check_unary_dtype(*self, a.dtype())?;
        outputs_len(outputs, 1);
        outputs[0].ensure(a.dtype(), a.shape());
        let out = &mut outputs[0];
        match a.dtype() {
            DType::F32 if *self == Unary::Gelu => {
                let a = contig(a);
                super::vmath::gelu(a.as_slice::<f32>()?, out.as_slice_mut::<f32>()?);
                Ok(())
            }
            DType::F32 => unary_typed::<f32>(*self, a, out),
            DType::F16 => unary_typed::<f16>(*self, a, out),
            DType::BF16 => unary_typed::<bf16>(*self, a, out),
            DType::Bool => unary_typed::<bool>(*self, a, out),
            DType::I64 => Err(OpError::DType {
                input: 0,
                expected: "a float type".into(),
                got: DType::I64,
            }),
        }
    }
}

fn check_unary_dtype(op: Unary, dt: DType) -> OpResult<()> {
    let ok = if op == Unary::Not {
        dt == DType::Bool
    } else {
        dt.is_float()
    };
    if !ok {
        let expected = if op == Unary::Not {
            "bool"
        } else {
            "a float type"
        };
        return Err(OpError::DType {
            input: 0,
            expected: expected.into(),
            got: dt,
        });
    }
    Ok(())
}

/// The output streaming axis of a broadcasting op: every streaming input must
/// stream along the same output axis, and every other input must have size 1
/// (or no axis) there.
pub fn broadcast_stream_axis(inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
    let rank = inputs.iter().map(|f| f.rank()).max()?;
    let mut out = None;
    for (f, a) in inputs.iter().zip(axes) {
        if let Some(a) = a {
            let o = a + rank - f.rank();
            if out.is_some_and(|x| x != o) {
                return None;
            }
            out = Some(o);
        }
    }
    let o = out?;
    for (f, a) in inputs.iter().zip(axes) {
        if a.is_none() {
            let lead = rank - f.rank();
            if o >= lead && f.shape[o - lead] != crate::ops::Dim::n(1) {
                return None;
            }
        }
    }
    Some(o)
}
