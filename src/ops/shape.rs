//! Layout ops on one tensor (Slice, Reshape, Permute, MoveAxis, Unsqueeze,
//! Squeeze), plus the pieces the other data-movement ops share: one set of
//! input checks for facts and tensors, stack-held shapes and a strided copy
//! that allocates nothing.
//!
//! Every op here copies into its output buffer (views would make the
//! runner's buffers alias), for every dtype alike.

use super::broadcast::MAX_RANK;
use super::checks::input_count;
use super::{
    contig, outputs_len, DType, Dim, Op, OpError, OpResult, Scratch, StorageElement, Tensor,
    TypedFact,
};
use crate::op_common;

/// Runs `$body` with the type alias `$T` bound to the Rust element type of `$dt`.
macro_rules! with_dtype {
    ($dt:expr, $T:ident => $body:expr) => {
        match $dt {
            $crate::ops::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::ops::DType::F16 => {
                type $T = ::half::f16;
                $body
            }
            $crate::ops::DType::BF16 => {
                type $T = ::half::bf16;
                $body
            }
            $crate::ops::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::ops::DType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}
pub(crate) use with_dtype;

/// What input checks need from a fact or a tensor, so that `output_facts`
/// and `eval` share their validation and `eval` checks without allocating.
pub(crate) trait Shaped {
    fn elem(&self) -> DType;
    fn ndim(&self) -> usize;
    fn dim(&self, i: usize) -> Dim;
}

impl Shaped for TypedFact {
    fn elem(&self) -> DType {
        self.dtype
    }
    fn ndim(&self) -> usize {
        self.shape.len()
    }
    fn dim(&self, i: usize) -> Dim {
        self.shape[i]
    }
}

impl Shaped for Tensor {
    fn elem(&self) -> DType {
        self.dtype()
    }
    fn ndim(&self) -> usize {
        self.rank()
    }
    fn dim(&self, i: usize) -> Dim {
        Dim::n(self.shape()[i] as i64)
    }
}

/// Rank at most [`MAX_RANK`] (kernels keep indices in stack arrays).
pub(crate) fn max_rank<S: Shaped>(x: &S, input: usize) -> OpResult<()> {
    if x.ndim() > MAX_RANK {
        return Err(OpError::Rank {
            input,
            expected: format!("<= {MAX_RANK}"),
            got: x.ndim(),
        });
    }
    Ok(())
}

/// Rank in `lo..=MAX_RANK`.
pub(crate) fn rank_in<S: Shaped>(x: &S, input: usize, lo: usize) -> OpResult<()> {
    if x.ndim() < lo || x.ndim() > MAX_RANK {
        return Err(OpError::Rank {
            input,
            expected: format!("{lo}..={MAX_RANK}"),
            got: x.ndim(),
        });
    }
    Ok(())
}

pub(crate) fn exact_rank<S: Shaped>(x: &S, input: usize, r: usize) -> OpResult<()> {
    if x.ndim() != r {
        return Err(OpError::Rank {
            input,
            expected: r.to_string(),
            got: x.ndim(),
        });
    }
    Ok(())
}

pub(crate) fn float_dtype<S: Shaped>(x: &S, input: usize) -> OpResult<()> {
    if !x.elem().is_float() {
        return Err(OpError::DType {
            input,
            expected: "a float type".into(),
            got: x.elem(),
        });
    }
    Ok(())
}

pub(crate) fn exact_dtype<S: Shaped>(x: &S, input: usize, dt: DType) -> OpResult<()> {
    if x.elem() != dt {
        return Err(OpError::DType {
            input,
            expected: dt.to_string(),
            got: x.elem(),
        });
    }
    Ok(())
}

/// Largest size, pad or bound an op parameter may give, so that sums and
/// products of parameters never overflow.
pub(crate) const MAX_PARAM: i64 = 1 << 48;

/// Checks that a parameter lies within `-MAX_PARAM..=MAX_PARAM`.
pub(crate) fn param_in_range(v: i64, what: &str) -> OpResult<()> {
    if !(-MAX_PARAM..=MAX_PARAM).contains(&v) {
        return Err(OpError::Param(format!("{what} {v} is out of range")));
    }
    Ok(())
}

/// Resolves a possibly negative axis; unlike `checks::axis`, rank 0 has no axis.
pub(crate) fn resolve_axis(axis: isize, rank: usize) -> OpResult<usize> {
    if rank == 0 {
        return Err(OpError::Param(format!(
            "axis {axis} given for a rank-0 tensor"
        )));
    }
    super::checks::axis(axis, rank)
}

/// The elements of a contiguous tensor; empty tensors give an empty slice
/// whatever their strides (`Tensor::is_contiguous` rejects some empty shapes).
pub(crate) fn elems<T: StorageElement>(t: &Tensor) -> OpResult<&[T]> {
    if t.is_empty() && t.dtype() == T::DTYPE {
        return Ok(&[]);
    }
    t.as_slice()
}

/// The elements of an output buffer (see [`elems`]).
pub(crate) fn elems_mut<T: StorageElement>(t: &mut Tensor) -> OpResult<&mut [T]> {
    if t.is_empty() && t.dtype() == T::DTYPE {
        return Ok(&mut []);
    }
    t.as_slice_mut()
}

/// A shape of rank at most [`MAX_RANK`], held on the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape8 {
    dims: [usize; MAX_RANK],
    rank: usize,
}

impl Shape8 {
    pub(crate) fn new() -> Shape8 {
        Shape8 {
            dims: [0; MAX_RANK],
            rank: 0,
        }
    }

    pub(crate) fn from_slice(s: &[usize]) -> OpResult<Shape8> {
        let mut out = Shape8::new();
        for &d in s {
            out.push(d)?;
        }
        Ok(out)
    }

    pub(crate) fn push(&mut self, d: usize) -> OpResult<()> {
        if self.rank == MAX_RANK {
            return Err(OpError::Shape(format!("output rank above {MAX_RANK}")));
        }
        self.dims[self.rank] = d;
        self.rank += 1;
        Ok(())
    }

    pub(crate) fn as_slice(&self) -> &[usize] {
        &self.dims[..self.rank]
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [usize] {
        &mut self.dims[..self.rank]
    }

    pub(crate) fn len(&self) -> usize {
        self.as_slice().iter().product()
    }

    /// The element count, or an error when it overflows.
    pub(crate) fn checked_len(&self) -> OpResult<usize> {
        self.as_slice()
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| OpError::Shape(format!("{:?} has too many elements", self.as_slice())))
    }

    /// Row-major strides of this shape.
    pub(crate) fn strides(&self) -> [usize; MAX_RANK] {
        let mut st = [0usize; MAX_RANK];
        let mut acc = 1;
        for i in (0..self.rank).rev() {
            st[i] = acc;
            acc *= self.dims[i];
        }
        st
    }
}

/// Copies a block of `shape` elements: element `i` (a multi-index) goes
/// from `src[src_off + i.src_st]` to `dst[dst_off + i.dst_st]`. The caller
/// guarantees that both ranges fit and that `shape.len() <= MAX_RANK`.
pub(crate) fn copy_strided<T: Copy>(
    src: &[T],
    src_off: usize,
    src_st: &[usize],
    dst: &mut [T],
    dst_off: usize,
    dst_st: &[usize],
    shape: &[usize],
) {
    let r = shape.len();
    if shape.contains(&0) {
        return;
    }
    if r == 0 {
        dst[dst_off] = src[src_off];
        return;
    }
    let n = shape[r - 1];
    let (si, di) = (src_st[r - 1], dst_st[r - 1]);
    let rows: usize = shape[..r - 1].iter().product();
    let mut idx = [0usize; MAX_RANK];
    let (mut s, mut d) = (src_off, dst_off);
    for _ in 0..rows {
        if si == 1 && di == 1 {
            dst[d..d + n].copy_from_slice(&src[s..s + n]);
        } else {
            for k in 0..n {
                dst[d + k * di] = src[s + k * si];
            }
        }
        for ax in (0..r - 1).rev() {
            idx[ax] += 1;
            s += src_st[ax];
            d += dst_st[ax];
            if idx[ax] < shape[ax] {
                break;
            }
            s -= src_st[ax] * shape[ax];
            d -= dst_st[ax] * shape[ax];
            idx[ax] = 0;
        }
    }
}

/// Writes the view `(offset, strides, shape)` of `x` (read row-major from
/// its contiguous elements) into `out`, sized to `shape`.
fn write_view(
    x: &Tensor,
    out: &mut Tensor,
    offset: usize,
    strides: &[usize],
    shape: &Shape8,
) -> OpResult<()> {
    out.ensure(x.dtype(), shape.as_slice());
    let x = contig(x);
    let dst_st = shape.strides();
    with_dtype!(x.dtype(), T => {
        let src = elems::<T>(&x)?;
        let dst = elems_mut::<T>(out)?;
        copy_strided(src, offset, strides, dst, 0, &dst_st[..shape.rank], shape.as_slice());
    });
    Ok(())
}

/// Copies `x`'s elements in row-major order into `out`, shaped `shape`.
fn write_reshaped(x: &Tensor, out: &mut Tensor, shape: &Shape8) -> OpResult<()> {
    out.ensure(x.dtype(), shape.as_slice());
    let x = contig(x);
    with_dtype!(x.dtype(), T => copy_all::<T>(&x, out))
}

fn copy_all<T: StorageElement>(x: &Tensor, out: &mut Tensor) -> OpResult<()> {
    elems_mut::<T>(out)?.copy_from_slice(elems::<T>(x)?);
    Ok(())
}

/// The shape of a tensor with the rank checked.
fn shape_of(x: &Tensor, input: usize) -> OpResult<Shape8> {
    max_rank(x, input)?;
    Shape8::from_slice(x.shape())
}

/// `x` with its streaming axis (if any) set to `S`: lets layout ops reuse
/// their fact logic to see where a pulsed axis goes.
fn with_stream_symbol(x: &TypedFact, axis: usize) -> Option<TypedFact> {
    let mut f = x.clone();
    *f.shape.get_mut(axis)? = Dim::s();
    Some(f)
}

// ---------------------------------------------------------------- Slice

/// `x[start:end]` along one axis, Python semantics (negative bounds count
/// from the end, out-of-range bounds clamp, step 1; `end: None` runs to the
/// end). On a symbolic axis the facts assume the axis holds the bounds
/// (`S >= start` etc.), as a streaming graph does once `S` is large enough.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub axis: usize,
    pub start: i64,
    pub end: Option<i64>,
}

fn clamp_bound(v: i64, n: i64) -> i64 {
    if v < 0 {
        (v + n).max(0)
    } else {
        v.min(n)
    }
}

impl Slice {
    /// Concrete `(start, len)` on an axis of size `n`.
    fn bounds(&self, n: usize) -> (usize, usize) {
        let n = n as i64;
        let s = clamp_bound(self.start, n);
        let e = self.end.map_or(n, |e| clamp_bound(e, n));
        (s as usize, (e - s).max(0) as usize)
    }

    fn len_dim(&self, n: Dim) -> OpResult<Dim> {
        if let Some(v) = n.as_const() {
            let v = usize::try_from(v).map_err(|_| OpError::Shape(format!("negative size {v}")))?;
            return Ok(Dim::n(self.bounds(v).1 as i64));
        }
        let (s, e) = (self.start, self.end);
        match (s >= 0, e) {
            (true, None) => Ok(n.add_const(-s)),
            (true, Some(e)) if e < 0 => Ok(n.add_const(e - s)),
            (true, Some(e)) => Ok(Dim::n((e - s).max(0))),
            (false, None) => Ok(Dim::n(-s)),
            (false, Some(e)) if e < 0 => Ok(Dim::n((e - s).max(0))),
            (false, Some(e)) => Err(OpError::Dim(format!(
                "slice {s}..{e} of an axis of size {n}"
            ))),
        }
    }

    fn check<S: Shaped>(&self, x: &S) -> OpResult<()> {
        max_rank(x, 0)?;
        param_in_range(self.start, "slice start")?;
        if let Some(e) = self.end {
            param_in_range(e, "slice end")?;
        }
        if self.axis >= x.ndim() {
            return Err(OpError::Param(format!(
                "slice axis {} out of range for rank {}",
                self.axis,
                x.ndim()
            )));
        }
        Ok(())
    }
}

impl Op for Slice {
    op_common!("Slice");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        self.check(x)?;
        let mut out = x.clone();
        out.shape[self.axis] = self.len_dim(x.shape[self.axis])?;
        Ok(vec![out])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        self.check(x)?;
        let mut shape = shape_of(x, 0)?;
        let (start, len) = self.bounds(x.shape()[self.axis]);
        shape.as_mut_slice()[self.axis] = len;
        let st = Shape8::from_slice(x.shape())?.strides();
        outputs_len(outputs, 1);
        write_view(
            x,
            &mut outputs[0],
            start * st[self.axis],
            &st[..shape.rank],
            &shape,
        )
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        axes.first().copied().flatten().filter(|&a| a != self.axis)
    }

    fn info(&self) -> String {
        let e = self.end.map_or(String::new(), |e| e.to_string());
        format!("axis {} [{}:{e}]", self.axis, self.start)
    }
}

// ---------------------------------------------------------------- Reshape

/// Reshape with ONNX semantics: `0` copies the input size at that index,
/// one `-1` is inferred from the element count. On symbolic sizes the
/// result must be an exact [`Dim`] (else `OpError::Dim`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reshape {
    pub shape: Vec<i64>,
}

/// Product of sizes, when it stays in the `Dim` family.
pub(crate) fn dim_product(dims: impl IntoIterator<Item = Dim>) -> Option<Dim> {
    dims.into_iter()
        .try_fold(Dim::n(1), |acc, d| acc.mul_dim(&d))
}

/// `total / known` when it is an exact `Dim` for every `S`.
fn dim_quotient(total: Dim, known: Dim) -> Option<Dim> {
    if total == known {
        return Some(Dim::n(1));
    }
    match known.as_const() {
        Some(1) => Some(total),
        Some(k) => total.div_exact(k),
        None => {
            let (tk, kk) = (total.coef()?, known.coef()?);
            if tk % kk != 0 {
                return None;
            }
            let q = tk / kk;
            (known.mul(q) == Some(total)).then_some(Dim::n(q))
        }
    }
}

impl Reshape {
    fn check_params(&self, rank: usize) -> OpResult<Option<usize>> {
        if self.shape.len() > MAX_RANK {
            return Err(OpError::Param(format!(
                "reshape to rank {} above {MAX_RANK}",
                self.shape.len()
            )));
        }
        for &v in &self.shape {
            param_in_range(v, "reshape size")?;
        }
        let mut sizes = self.shape.iter().filter(|&&v| v > 0);
        if sizes
            .try_fold(1i64, |acc, &v| {
                acc.checked_mul(v).filter(|p| *p <= MAX_PARAM)
            })
            .is_none()
        {
            return Err(OpError::Param(format!(
                "reshape {:?} has too many elements",
                self.shape
            )));
        }
        let mut infer = None;
        for (i, &v) in self.shape.iter().enumerate() {
            match v {
                0 if i >= rank => {
                    return Err(OpError::Param(format!(
                        "reshape {:?}: 0 at index {i} of a rank-{rank} input",
                        self.shape
                    )))
                }
                -1 if infer.is_some() => {
                    return Err(OpError::Param(format!(
                        "reshape {:?} has more than one -1",
                        self.shape
                    )))
                }
                -1 => infer = Some(i),
                v if v < -1 => {
                    return Err(OpError::Param(format!(
                        "reshape {:?}: invalid size {v}",
                        self.shape
                    )))
                }
                _ => {}
            }
        }
        Ok(infer)
    }

    fn out_dims(&self, x: &TypedFact) -> OpResult<Vec<Dim>> {
        let infer = self.check_params(x.rank())?;
        let mut out: Vec<Dim> = self
            .shape
            .iter()
            .enumerate()
            .map(|(i, &v)| if v == 0 { x.shape[i] } else { Dim::n(v.max(1)) })
            .collect();
        let unrepresentable =
            |what: &str| OpError::Dim(format!("reshape {x} to {:?}: {what}", self.shape));
        let total =
            dim_product(x.shape.iter().copied()).ok_or_else(|| unrepresentable("element count"))?;
        let known =
            dim_product(out.iter().copied()).ok_or_else(|| unrepresentable("element count"))?;
        match infer {
            Some(i) => {
                if known == Dim::n(0) {
                    return Err(OpError::Shape(format!(
                        "reshape {x} to {:?}: cannot infer -1 next to a 0 size",
                        self.shape
                    )));
                }
                out[i] =
                    dim_quotient(total, known).ok_or_else(|| unrepresentable("the -1 size"))?;
            }
            None if known != total => {
                return Err(OpError::Shape(format!(
                    "cannot reshape {x} to {:?}",
                    self.shape
                )));
            }
            None => {}
        }
        Ok(out)
    }

    fn out_shape(&self, x: &Tensor) -> OpResult<Shape8> {
        let infer = self.check_params(x.rank())?;
        let mut out = Shape8::new();
        for (i, &v) in self.shape.iter().enumerate() {
            out.push(if v == 0 {
                x.shape()[i]
            } else {
                v.max(1) as usize
            })?;
        }
        let known = out.checked_len()?;
        match infer {
            Some(i) => {
                if known == 0 || !x.len().is_multiple_of(known) {
                    return Err(OpError::Shape(format!(
                        "cannot reshape {:?} to {:?}",
                        x.shape(),
                        self.shape
                    )));
                }
                out.as_mut_slice()[i] = x.len() / known;
            }
            None if known != x.len() => {
                return Err(OpError::Shape(format!(
                    "cannot reshape {:?} to {:?}",
                    x.shape(),
                    self.shape
                )));
            }
            None => {}
        }
        Ok(out)
    }
}

impl Op for Reshape {
    op_common!("Reshape");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        Ok(vec![TypedFact {
            dtype: x.dtype,
            shape: self.out_dims(x)?,
        }])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        let shape = self.out_shape(inputs[0])?;
        outputs_len(outputs, 1);
        write_reshaped(inputs[0], &mut outputs[0], &shape)
    }

    /// Frame-local when the frames keep their place in row-major order: the
    /// output has `S` on one axis with the same element counts before and
    /// after it as the input has around its streaming axis.
    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        let x = with_stream_symbol(inputs.first()?, a)?;
        let out = self.out_dims(&x).ok()?;
        let o = out.iter().position(|d| d.is_symbolic())?;
        let before = |dims: &[Dim]| dim_product(dims.iter().copied()).and_then(|d| d.as_const());
        (out[o] == Dim::s() && before(&out[..o])? == before(&x.shape[..a])?).then_some(o)
    }

    fn info(&self) -> String {
        format!("{:?}", self.shape)
    }
}

// ---------------------------------------------------------------- Permute, MoveAxis

/// Reorders axes: output axis `i` is input axis `axes[i]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permute {
    pub axes: Vec<usize>,
}

fn check_permutation(axes: &[usize], rank: usize) -> OpResult<()> {
    let mut seen = [false; MAX_RANK];
    let bad = axes.len() != rank
        || rank > MAX_RANK
        || axes
            .iter()
            .any(|&a| a >= rank || std::mem::replace(&mut seen[a], true));
    if bad {
        return Err(OpError::Param(format!(
            "{axes:?} is not a permutation of {rank} axes"
        )));
    }
    Ok(())
}

/// Writes `x` permuted by `perm` (output axis `i` = input axis `perm[i]`).
fn write_permuted(x: &Tensor, perm: &[usize], out: &mut Tensor) -> OpResult<()> {
    let ins = shape_of(x, 0)?;
    let in_st = ins.strides();
    let (mut shape, mut st) = (Shape8::new(), [0usize; MAX_RANK]);
    for (i, &p) in perm.iter().enumerate() {
        shape.push(ins.as_slice()[p])?;
        st[i] = in_st[p];
    }
    write_view(x, out, 0, &st[..shape.rank], &shape)
}

impl Op for Permute {
    op_common!("Permute");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        check_permutation(&self.axes, x.rank())?;
        Ok(vec![TypedFact {
            dtype: x.dtype,
            shape: self.axes.iter().map(|&a| x.shape[a]).collect(),
        }])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        check_permutation(&self.axes, inputs[0].rank())?;
        outputs_len(outputs, 1);
        write_permuted(inputs[0], &self.axes, &mut outputs[0])
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        self.axes.iter().position(|&p| p == a)
    }

    fn info(&self) -> String {
        format!("{:?}", self.axes)
    }
}

/// Moves axis `from` to position `to`, keeping the others in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveAxis {
    pub from: usize,
    pub to: usize,
}

impl MoveAxis {
    fn perm(&self, rank: usize) -> OpResult<([usize; MAX_RANK], usize)> {
        if self.from >= rank || self.to >= rank || rank > MAX_RANK {
            return Err(OpError::Param(format!(
                "move axis {} -> {} out of range for rank {rank}",
                self.from, self.to
            )));
        }
        let mut perm = [0usize; MAX_RANK];
        let mut k = 0;
        for i in 0..rank {
            if k == self.to {
                perm[k] = self.from;
                k += 1;
            }
            if i != self.from {
                perm[k] = i;
                k += 1;
            }
        }
        if k == self.to {
            perm[k] = self.from;
        }
        Ok((perm, rank))
    }
}

impl Op for MoveAxis {
    op_common!("MoveAxis");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        let (perm, r) = self.perm(x.rank())?;
        Ok(vec![TypedFact {
            dtype: x.dtype,
            shape: perm[..r].iter().map(|&a| x.shape[a]).collect(),
        }])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        let (perm, r) = self.perm(inputs[0].rank())?;
        outputs_len(outputs, 1);
        write_permuted(inputs[0], &perm[..r], &mut outputs[0])
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        let (perm, r) = self.perm(inputs.first()?.rank()).ok()?;
        perm[..r].iter().position(|&p| p == a)
    }

    fn info(&self) -> String {
        format!("{} -> {}", self.from, self.to)
    }
}

// ---------------------------------------------------------------- Unsqueeze, Squeeze

/// Inserts a size-1 axis at `axis` (`0..=rank`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsqueeze {
    pub axis: usize,
}

impl Unsqueeze {
    fn check<S: Shaped>(&self, x: &S) -> OpResult<()> {
        if self.axis > x.ndim() {
            return Err(OpError::Param(format!(
                "unsqueeze axis {} out of range for rank {}",
                self.axis,
                x.ndim()
            )));
        }
        if x.ndim() >= MAX_RANK {
            return Err(OpError::Rank {
                input: 0,
                expected: format!("< {MAX_RANK}"),
                got: x.ndim(),
            });
        }
        Ok(())
    }
}

impl Op for Unsqueeze {
    op_common!("Unsqueeze");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        self.check(inputs[0])?;
        let mut out = inputs[0].clone();
        out.shape.insert(self.axis, Dim::n(1));
        Ok(vec![out])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        self.check(x)?;
        let mut shape = Shape8::new();
        for (i, &d) in x.shape().iter().enumerate() {
            if i == self.axis {
                shape.push(1)?;
            }
            shape.push(d)?;
        }
        if self.axis == x.rank() {
            shape.push(1)?;
        }
        outputs_len(outputs, 1);
        write_reshaped(x, &mut outputs[0], &shape)
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        Some(if a >= self.axis { a + 1 } else { a })
    }

    fn info(&self) -> String {
        format!("axis {}", self.axis)
    }
}

/// Removes axis `axis`, which must have size 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Squeeze {
    pub axis: usize,
}

impl Squeeze {
    fn check<S: Shaped>(&self, x: &S) -> OpResult<()> {
        max_rank(x, 0)?;
        if self.axis >= x.ndim() {
            return Err(OpError::Param(format!(
                "squeeze axis {} out of range for rank {}",
                self.axis,
                x.ndim()
            )));
        }
        if x.dim(self.axis) != Dim::n(1) {
            return Err(OpError::Shape(format!(
                "squeeze axis {} has size {}, not 1",
                self.axis,
                x.dim(self.axis)
            )));
        }
        Ok(())
    }
}

impl Op for Squeeze {
    op_common!("Squeeze");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 1)?;
        self.check(inputs[0])?;
        let mut out = inputs[0].clone();
        out.shape.remove(self.axis);
        Ok(vec![out])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        input_count(inputs, 1)?;
        let x = inputs[0];
        self.check(x)?;
        let mut shape = Shape8::new();
        for (i, &d) in x.shape().iter().enumerate() {
            if i != self.axis {
                shape.push(d)?;
            }
        }
        outputs_len(outputs, 1);
        write_reshaped(x, &mut outputs[0], &shape)
    }

    fn frame_local_axis(&self, _: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        let a = axes.first().copied().flatten()?;
        match a.cmp(&self.axis) {
            std::cmp::Ordering::Less => Some(a),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => Some(a - 1),
        }
    }

    fn info(&self) -> String {
        format!("axis {}", self.axis)
    }
}

/// Helpers shared by the tests of the data-movement and reduction ops.
#[cfg(test)]
pub(crate) mod testutil {
    use super::super::{eval_op, DType, Op, Tensor, TypedFact};
    use proptest::prelude::*;

    pub const ALL_DTYPES: [DType; 5] =
        [DType::F32, DType::F16, DType::BF16, DType::I64, DType::Bool];
    pub const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    pub fn any_dt() -> impl Strategy<Value = DType> {
        prop::sample::select(ALL_DTYPES.to_vec())
    }

    pub fn float_dt() -> impl Strategy<Value = DType> {
        prop::sample::select(FLOATS.to_vec())
    }

    /// Deterministic values: floats in [-2, 2), i64 in -20..20, bools mixed.
    pub fn rand_tensor(dt: DType, shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) as f32
        };
        let v: Vec<f32> = (0..n).map(|_| next() * 4.0 - 2.0).collect();
        let shape = shape.to_vec();
        match dt {
            DType::I64 => {
                Tensor::from_vec(shape, v.iter().map(|x| (x * 10.0) as i64).collect()).unwrap()
            }
            DType::Bool => Tensor::from_vec(shape, v.iter().map(|&x| x > 0.0).collect()).unwrap(),
            _ => Tensor::from_vec(shape, v).unwrap().cast(dt),
        }
    }

    /// Evaluates `op` and checks that `output_facts` on the inputs' facts
    /// describes exactly what `eval` produced.
    pub fn eval_checked(op: &dyn Op, inputs: &[&Tensor]) -> Vec<Tensor> {
        let facts: Vec<TypedFact> = inputs.iter().map(|t| TypedFact::of(t)).collect();
        let refs: Vec<&TypedFact> = facts.iter().collect();
        let want = op
            .output_facts(&refs)
            .unwrap_or_else(|e| panic!("{op:?} facts of {facts:?}: {e}"));
        let outs = eval_op(op, inputs).unwrap_or_else(|e| panic!("{op:?} eval on {facts:?}: {e}"));
        let got: Vec<TypedFact> = outs.iter().map(TypedFact::of).collect();
        assert_eq!(want, got, "{op:?} on {facts:?}: facts vs eval");
        outs
    }

    /// Checks that symbolic facts, concretized at `s`, match `eval` on
    /// tensors of that size (and returns the outputs).
    pub fn check_symbolic(
        op: &dyn Op,
        sym: &[TypedFact],
        s: i64,
        inputs: &[&Tensor],
    ) -> Vec<Tensor> {
        for (f, t) in sym.iter().zip(inputs) {
            assert_eq!(
                f.concretize(s),
                TypedFact::of(t),
                "test inputs do not fit their facts at S={s}"
            );
        }
        let refs: Vec<&TypedFact> = sym.iter().collect();
        let want = op
            .output_facts(&refs)
            .unwrap_or_else(|e| panic!("{op:?} facts of {sym:?}: {e}"));
        let outs = eval_checked(op, inputs);
        let got: Vec<TypedFact> = outs.iter().map(TypedFact::of).collect();
        let want: Vec<TypedFact> = want.iter().map(|f| f.concretize(s)).collect();
        assert_eq!(want, got, "{op:?} on {sym:?} at S={s}");
        outs
    }

    /// Row-major multi-index of flat index `i`.
    pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; shape.len()];
        for ax in (0..shape.len()).rev() {
            idx[ax] = i % shape[ax].max(1);
            i /= shape[ax].max(1);
        }
        idx
    }

    pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
        idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
    }

    /// A second eval with the same shapes writes into the same buffer.
    pub fn assert_reuses_buffer(op: &dyn Op, inputs: &[&Tensor]) {
        let mut outs = Vec::new();
        let mut scratch = super::super::Scratch::default();
        op.eval(inputs, &mut outs, &mut scratch).unwrap();
        let before: Vec<*const u8> = outs.iter().map(ptr).collect();
        op.eval(inputs, &mut outs, &mut scratch).unwrap();
        let after: Vec<*const u8> = outs.iter().map(ptr).collect();
        assert_eq!(before, after, "{op:?} reallocated its output");
    }

    fn ptr(t: &Tensor) -> *const u8 {
        match t.dtype() {
            DType::F32 => t.as_slice::<f32>().unwrap().as_ptr() as *const u8,
            DType::F16 => t.as_slice::<half::f16>().unwrap().as_ptr() as *const u8,
            DType::BF16 => t.as_slice::<half::bf16>().unwrap().as_ptr() as *const u8,
            DType::I64 => t.as_slice::<i64>().unwrap().as_ptr() as *const u8,
            DType::Bool => t.as_slice::<bool>().unwrap().as_ptr() as *const u8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use crate::ops::eval_op;
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
}
