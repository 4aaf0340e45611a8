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

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testutil;
