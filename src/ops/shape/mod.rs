//! Layout ops on one tensor (Slice, Reshape, Permute, MoveAxis, Unsqueeze,
//! Squeeze), plus the pieces the other data-movement ops share: one set of
//! input checks for facts and tensors, stack-held shapes and a strided copy
//! that allocates nothing.
//!
//! Every op here copies into its output buffer (views would make the
//! runner's buffers alias), for every dtype alike.
//!
//! Each op family has a file of its own (`slice`, `reshape`, `permute`,
//! `squeeze`); the shared pieces are here.

use super::broadcast::MAX_RANK;
use super::{contig, DType, Dim, OpError, OpResult, StorageElement, Tensor, TypedFact};

mod permute;
mod reshape;
mod slice;
mod squeeze;

pub use permute::{MoveAxis, Permute};
pub use reshape::Reshape;
pub use slice::Slice;
pub use squeeze::{Squeeze, Unsqueeze};

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

/// Product of sizes, when it stays in the `Dim` family.
pub(crate) fn dim_product(dims: impl IntoIterator<Item = Dim>) -> Option<Dim> {
    dims.into_iter()
        .try_fold(Dim::n(1), |acc, d| acc.mul_dim(&d))
}

#[cfg(test)]
pub(crate) mod test_util;
#[cfg(test)]
mod tests;
