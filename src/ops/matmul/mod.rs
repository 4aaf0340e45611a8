//! Matrix products: a batched `MatMul` with numpy broadcasting, and the
//! PyTorch-layout `Linear` that speech encoders spend most of their time in.
//!
//! Both run in f32 on one thread (the caller decides how work is spread over
//! cores): an AVX-512 or AVX2 + FMA kernel that packs into `Scratch` and
//! allocates nothing, or the `gemm` crate on CPUs without those. f16 and
//! bf16 are widened into `Scratch` too. `PULSED_NO_AVX512=1` keeps the
//! AVX2 kernel on CPUs with AVX-512 (to compare the two).
//!
//! The kernels are in `avx512` and `avx2`, `Linear`'s op in `linear`;
//! `MatMul` and the product and conversion helpers the other ops share are
//! here.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use super::broadcast::{broadcast_dims, broadcast_shapes, broadcast_strides, MAX_RANK};
use super::checks::{float, input_count, rank_at_least, same_dtype};
use super::vmath::Simd;
use super::{contig, outputs_len, DType, Dim, Op, OpError, OpResult, Scratch, Tensor, TypedFact};
use crate::op_common;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod int8;
mod linear;

pub use int8::{Int8Linear, Int8Matrix};

/// `a · b` over the last two axes, leading (batch) axes broadcast numpy-style.
///
/// Inputs `a [..., M, K]` (`[..., K, M]` when `transpose_a`) and
/// `b [..., K, N]` (`[..., N, K]` when `transpose_b`), both of one float
/// dtype and rank >= 2; output `[..., M, N]` of that dtype.
///
/// ```
/// use pulsed::ops::{eval_op, matmul::MatMul, Tensor};
/// let a = Tensor::from_vec(vec![1, 2], vec![1f32, 2.]).unwrap();
/// let b = Tensor::from_vec(vec![3, 2], vec![1f32, 0., 0., 1., 1., 1.]).unwrap();
/// let y = eval_op(&MatMul { transpose_a: false, transpose_b: true }, &[&a, &b]).unwrap();
/// assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![1., 2., 3.]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MatMul {
    pub transpose_a: bool,
    pub transpose_b: bool,
}

/// `y = x · wᵀ + bias` with `w` in PyTorch layout.
///
/// Inputs `x [..., in]`, `w [out, in]` and optionally `bias [out]`, all of one
/// float dtype; output `[..., out]`. Every axis of `x` but the last is
/// frame-local.
///
/// ```
/// use pulsed::ops::{eval_op, matmul::Linear, Tensor};
/// let x = Tensor::from_vec(vec![1, 2], vec![1f32, 2.]).unwrap();
/// let w = Tensor::from_vec(vec![2, 2], vec![1f32, 1., 0., 1.]).unwrap();
/// let b = Tensor::from_slice(&[0.5f32, 0.]);
/// let y = eval_op(&Linear, &[&x, &w, &b]).unwrap();
/// assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![3.5, 2.]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Linear;

/// A linear's streaming axis: `x`'s (input 0) when it is one of its
/// leading axes and no other input streams.
fn rows_axis(inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
    let x = inputs.first()?;
    match axes {
        [Some(a), rest @ ..] if rest.iter().all(Option::is_none) && a + 1 < x.rank() => Some(*a),
        _ => None,
    }
}

/// Strides (row, column) of a matrix inside a slice, in elements.
pub(crate) type Strides = (usize, usize);

fn fits(len: usize, rows: usize, cols: usize, (rs, cs): Strides) -> bool {
    rows == 0 || cols == 0 || (rows - 1) * rs + (cols - 1) * cs < len
}

/// AVX2's rows of `a` per packed block (two AVX vectors) and columns of `b`
/// per microkernel call: 12 accumulators, 2 `a` vectors and a broadcast
/// fill 15 of the 16 AVX registers.
const MR: usize = 16;
const NR: usize = 6;
/// Rows and depth of one packed chunk of `a` (128 x 512 f32 = 256 KiB, L2),
/// for both kernels.
const MC: usize = 128;
const KC: usize = 512;
/// The taller of the two kernels' blocks, so that scratch sized by
/// `pack_len` fits whichever runs.
#[cfg(target_arch = "x86_64")]
const PACK_MR: usize = if avx512::MR > MR { avx512::MR } else { MR };
#[cfg(not(target_arch = "x86_64"))]
const PACK_MR: usize = MR;

/// Scratch that `gemm_f32` needs for an `m x k` left operand.
pub(crate) fn pack_len(m: usize, k: usize) -> usize {
    m.min(MC).div_ceil(PACK_MR) * PACK_MR * k.min(KC)
}

/// Which product `gemm_f32` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) enum Kernel {
    Avx512,
    Avx2,
    /// The `gemm` crate.
    Crate,
}

/// The kernel for the vectors `vmath::simd` picked: AVX-512, else AVX2 +
/// FMA, else the `gemm` crate (`PULSED_NO_AVX512=1` skips AVX-512).
pub(crate) fn kernel() -> Kernel {
    match super::vmath::simd() {
        Simd::Avx512 => Kernel::Avx512,
        Simd::Avx2 => Kernel::Avx2,
        Simd::None => Kernel::Crate,
    }
}

/// Scratch that `gemm_rows` needs: the column-major product plus `pack_len`.
pub(crate) fn rows_work_len(m: usize, n: usize, k: usize) -> usize {
    if m >= SWAP_ROWS {
        pack_len(n, k)
    } else {
        m * n + pack_len(m, k)
    }
}

/// From this many rows on, `gemm_rows` packs `b` instead of `a` and writes
/// the row-major output in place: packing `b` (a weight, say) costs
/// `n * k` copies, small against `2 * m * n * k` flops, while the transpose
/// of an `m x n` product that no longer fits in L2 costs more (measured:
/// equal at 256 rows, 20-40% better at 1024).
const SWAP_ROWS: usize = 256;

/// `dst = a · b` (or `dst += a · b` when `accumulate`), with `a` `m×k`,
/// `b` `k×n`, `dst` `m×n`, each a slice plus its (row, column) strides.
///
/// With AVX-512 or AVX2 + FMA and a column-major `dst` (row stride 1) this
/// runs our own kernel, which packs `a` into `pack` (at least
/// `pack_len(m, k)`) and allocates nothing; otherwise the `gemm` crate,
/// which allocates a little on every call. The extents are checked against
/// the slices here, so the unsafe calls below never reach outside them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_f32(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    ds: Strides,
    a: &[f32],
    as_: Strides,
    b: &[f32],
    bs: Strides,
    accumulate: bool,
    pack: &mut [f32],
) -> OpResult<()> {
    let operands = (dst, ds, a, as_, b, bs);
    gemm_f32_on(kernel(), (m, n, k), operands, accumulate, pack)
}

/// `dst`, `a` and `b` with their strides.
type Operands<'a> = (
    &'a mut [f32],
    Strides,
    &'a [f32],
    Strides,
    &'a [f32],
    Strides,
);

/// `gemm_f32` on a given kernel (asserted to be one this CPU runs).
pub(crate) fn gemm_f32_on(
    kernel: Kernel,
    (m, n, k): (usize, usize, usize),
    (dst, ds, a, as_, b, bs): Operands<'_>,
    accumulate: bool,
    pack: &mut [f32],
) -> OpResult<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    if !fits(dst.len(), m, n, ds) || !fits(a.len(), m, k, as_) || !fits(b.len(), k, n, bs) {
        return Err(OpError::Other(format!(
            "internal: gemm {m}x{k}x{n} operands exceed their buffers ({}, {}, {})",
            dst.len(),
            a.len(),
            b.len()
        )));
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    dst[i * ds.0 + j * ds.1] = 0.0;
                }
            }
        }
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if ds.0 == 1 && pack.len() >= pack_len(m, k) && kernel == Kernel::Avx512 {
        assert!(is_x86_feature_detected!("avx512f"));
        // SAFETY: the CPU feature was just checked; `fits` bounds every
        // index of `dst`, `a` and `b` (row stride 1 for `dst`), `pack` is
        // long enough, and `dst` is a unique borrow, so nothing aliases.
        unsafe {
            avx512::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                ds.1,
                a.as_ptr(),
                as_,
                b.as_ptr(),
                bs,
                accumulate,
                pack.as_mut_ptr(),
            )
        };
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if ds.0 == 1 && pack.len() >= pack_len(m, k) && kernel == Kernel::Avx2 {
        assert!(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"));
        // SAFETY: as above.
        unsafe {
            avx2::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                ds.1,
                a.as_ptr(),
                as_,
                b.as_ptr(),
                bs,
                accumulate,
                pack.as_mut_ptr(),
            )
        };
        return Ok(());
    }
    // only the gemm crate off x86_64
    #[cfg(not(target_arch = "x86_64"))]
    let _ = kernel;
    // SAFETY: as above; gemm reads and writes exactly the checked extents.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            ds.1 as isize,
            ds.0 as isize,
            accumulate,
            a.as_ptr(),
            as_.1 as isize,
            as_.0 as isize,
            b.as_ptr(),
            bs.1 as isize,
            bs.0 as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    Ok(())
}

/// `out = a · b`, plus `bias[j]` on every column `j` when given, into a
/// row-major `out` whose rows start `ld` elements apart.
///
/// Both kernels want a column-major destination. Below `SWAP_ROWS` rows the
/// product goes column-major into the front of `work` (at least
/// `rows_work_len(m, n, k)` long; the rest packs `a`) and is transposed into
/// `out`: `m * n` copies against `2 * m * n * k` flops, where packing all of
/// `b` would cost `n * k` (the `gemm` crate, given a row-major destination
/// and a PyTorch-layout weight, does that on every call: 2-4x slower at 16
/// rows). From `SWAP_ROWS` on, `out` is computed in place as `bᵀ · aᵀ`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_rows(
    (m, n, k): (usize, usize, usize),
    out: &mut [f32],
    ld: usize,
    a: &[f32],
    as_: Strides,
    b: &[f32],
    bs: Strides,
    bias: Option<&[f32]>,
    work: &mut [f32],
) -> OpResult<()> {
    gemm_rows_on(
        kernel(),
        (m, n, k),
        (out, ld),
        (a, as_),
        (b, bs),
        bias,
        work,
    )
}

/// `gemm_rows` on a given kernel (asserted to be one this CPU runs).
pub(crate) fn gemm_rows_on(
    kernel: Kernel,
    (m, n, k): (usize, usize, usize),
    (out, ld): (&mut [f32], usize),
    (a, as_): (&[f32], Strides),
    (b, bs): (&[f32], Strides),
    bias: Option<&[f32]>,
    work: &mut [f32],
) -> OpResult<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    if !fits(out.len(), m, n, (ld, 1)) || bias.is_some_and(|b| b.len() < n) {
        return Err(OpError::Other(format!(
            "internal: {m}x{n} rows exceed their buffer"
        )));
    }
    if m >= SWAP_ROWS {
        // out viewed column-major is outᵀ = bᵀ · aᵀ
        if let Some(bias) = bias {
            for i in 0..m {
                out[i * ld..i * ld + n].copy_from_slice(&bias[..n]);
            }
        }
        let (at, bt) = ((as_.1, as_.0), (bs.1, bs.0));
        let operands = (out, (1, ld), b, bt, a, at);
        return gemm_f32_on(kernel, (n, m, k), operands, bias.is_some(), work);
    }
    if work.len() < m * n {
        return Err(OpError::Other(format!(
            "internal: no room for a {m}x{n} product"
        )));
    }
    let (tmp, pack) = work.split_at_mut(m * n);
    gemm_f32_on(kernel, (m, n, k), (tmp, (1, m), a, as_, b, bs), false, pack)?;
    // blocks of 16 columns keep the 16 source runs in cache while rows advance
    for j0 in (0..n).step_by(16) {
        let j1 = (j0 + 16).min(n);
        for i in 0..m {
            let row = &mut out[i * ld + j0..i * ld + j1];
            match bias {
                Some(bias) => {
                    for (jj, (o, &bv)) in row.iter_mut().zip(&bias[j0..j1]).enumerate() {
                        *o = tmp[(j0 + jj) * m + i] + bv;
                    }
                }
                None => {
                    for (jj, o) in row.iter_mut().enumerate() {
                        *o = tmp[(j0 + jj) * m + i];
                    }
                }
            }
        }
    }
    Ok(())
}

/// The elements of a contiguous f32 tensor. Empty tensors give `&[]`
/// whatever their strides (`Tensor::is_contiguous` says no to some shapes
/// with a zero-sized axis).
pub(crate) fn f32s(t: &Tensor) -> OpResult<&[f32]> {
    if t.is_empty() {
        return Ok(&[]);
    }
    t.as_slice()
}

/// Copies a float tensor's elements (row-major) into `buf`, widened to f32.
pub(crate) fn load_f32(t: &Tensor, buf: &mut [f32], input: usize) -> OpResult<()> {
    if buf.len() != t.len() {
        return Err(OpError::Other(format!(
            "internal: {} elements into a buffer of {}",
            t.len(),
            buf.len()
        )));
    }
    if t.is_empty() {
        return Ok(());
    }
    let t = contig(t);
    match t.dtype() {
        DType::F32 => buf.copy_from_slice(t.as_slice::<f32>()?),
        DType::F16 => t.as_slice::<f16>()?.convert_to_f32_slice(buf),
        DType::BF16 => t.as_slice::<bf16>()?.convert_to_f32_slice(buf),
        got => {
            return Err(OpError::DType {
                input,
                expected: "a float type".into(),
                got,
            })
        }
    }
    Ok(())
}

/// Writes f32 values into an already-sized float output, narrowing them.
pub(crate) fn store_f32(src: &[f32], out: &mut Tensor) -> OpResult<()> {
    match out.dtype() {
        DType::F32 => out.as_slice_mut::<f32>()?.copy_from_slice(src),
        DType::F16 => out.as_slice_mut::<f16>()?.convert_from_f32_slice(src),
        DType::BF16 => out.as_slice_mut::<bf16>()?.convert_from_f32_slice(src),
        got => {
            return Err(OpError::DType {
                input: 0,
                expected: "a float type".into(),
                got,
            })
        }
    }
    Ok(())
}

/// A float dtype shared by every input (the error names the first that differs).
pub(crate) fn common_float_dtype(inputs: &[&Tensor]) -> OpResult<DType> {
    let dt = inputs[0].dtype();
    if !dt.is_float() {
        return Err(OpError::DType {
            input: 0,
            expected: "a float type".into(),
            got: dt,
        });
    }
    if let Some((i, t)) = inputs.iter().enumerate().find(|(_, t)| t.dtype() != dt) {
        return Err(OpError::DType {
            input: i,
            expected: dt.to_string(),
            got: t.dtype(),
        });
    }
    Ok(dt)
}

/// The same check on facts.
pub(crate) fn common_float_fact_dtype(inputs: &[&TypedFact]) -> OpResult<DType> {
    float(inputs[0], 0)?;
    for (i, f) in inputs.iter().enumerate().skip(1) {
        same_dtype(inputs[0], f, i)?;
    }
    Ok(inputs[0].dtype)
}

impl MatMul {
    /// `(M, K)` of `a` and `(K, N)` of `b`, by position in the last two axes.
    fn mk<T: Copy>(&self, a: &[T], b: &[T]) -> ((T, T), (T, T)) {
        let (ra, rb) = (a.len(), b.len());
        let (a0, a1) = (a[ra - 2], a[ra - 1]);
        let (b0, b1) = (b[rb - 2], b[rb - 1]);
        let am = if self.transpose_a { (a1, a0) } else { (a0, a1) };
        let bn = if self.transpose_b { (b1, b0) } else { (b0, b1) };
        (am, bn)
    }

    /// One product per batch index; batches fold into `M` when `b` is
    /// shared by all of them and `a` is stored row-major.
    #[allow(clippy::too_many_arguments)]
    fn run_f32(
        &self,
        a: &[f32],
        a_batch: &[usize],
        b: &[f32],
        b_batch: &[usize],
        batch: &[usize],
        (m, k, n): (usize, usize, usize),
        out: &mut [f32],
        work: &mut [f32],
    ) -> OpResult<()> {
        let nb: usize = batch.iter().product();
        if nb == 0 || m == 0 || n == 0 {
            return Ok(());
        }
        let a_s = if self.transpose_a { (1, m) } else { (k, 1) };
        let b_s = if self.transpose_b { (1, k) } else { (n, 1) };
        let (a_n, b_n): (usize, usize) = (a_batch.iter().product(), b_batch.iter().product());
        if b_n == 1 && a_n == nb && !self.transpose_a {
            return gemm_rows((nb * m, n, k), out, n, a, a_s, b, b_s, None, work);
        }
        let (sa, sb) = (
            broadcast_strides(a_batch, batch),
            broadcast_strides(b_batch, batch),
        );
        let r = batch.len();
        let mut idx = [0usize; MAX_RANK];
        let (mut oa, mut ob) = (0usize, 0usize);
        for i in 0..nb {
            let dst = &mut out[i * m * n..(i + 1) * m * n];
            let (a, b) = (&a[oa * m * k..], &b[ob * k * n..]);
            gemm_rows((m, n, k), dst, n, a, a_s, b, b_s, None, work)?;
            for ax in (0..r).rev() {
                idx[ax] += 1;
                oa += sa[ax];
                ob += sb[ax];
                if idx[ax] < batch[ax] {
                    break;
                }
                oa -= sa[ax] * batch[ax];
                ob -= sb[ax] * batch[ax];
                idx[ax] = 0;
            }
        }
        Ok(())
    }
}

impl Op for MatMul {
    op_common!("MatMul");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count(inputs, 2)?;
        let dt = common_float_fact_dtype(inputs)?;
        let (a, b) = (inputs[0], inputs[1]);
        rank_at_least(a, 0, 2)?;
        rank_at_least(b, 1, 2)?;
        if a.rank() - 2 > MAX_RANK || b.rank() - 2 > MAX_RANK {
            return Err(OpError::Shape(format!(
                "more than {MAX_RANK} batch axes in {a} x {b}"
            )));
        }
        let ((m, ka), (kb, n)) = self.mk(&a.shape, &b.shape);
        if ka != kb {
            return Err(OpError::Shape(format!(
                "contracted sizes differ: {a} x {b} ({ka} vs {kb}) in {self:?}"
            )));
        }
        let mut shape = broadcast_dims(&a.shape[..a.rank() - 2], &b.shape[..b.rank() - 2])?;
        shape.push(m);
        shape.push(n);
        Ok(vec![TypedFact::dt_shape(dt, &shape)])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        input_count(inputs, 2)?;
        let dt = common_float_dtype(inputs)?;
        let (a, b) = (inputs[0], inputs[1]);
        for (i, t) in [a, b].iter().enumerate() {
            if t.rank() < 2 {
                return Err(OpError::Rank {
                    input: i,
                    expected: ">= 2".into(),
                    got: t.rank(),
                });
            }
        }
        let ((m, ka), (kb, n)) = self.mk(a.shape(), b.shape());
        if ka != kb {
            return Err(OpError::Shape(format!(
                "contracted sizes differ: {:?} x {:?} ({ka} vs {kb}) in {self:?}",
                a.shape(),
                b.shape()
            )));
        }
        let (a_batch, b_batch) = (&a.shape()[..a.rank() - 2], &b.shape()[..b.rank() - 2]);
        let mut batch = [0usize; MAX_RANK];
        let r = broadcast_shapes(a_batch, b_batch, &mut batch)?;
        let mut shape = [0usize; MAX_RANK + 2];
        shape[..r].copy_from_slice(&batch[..r]);
        shape[r] = m;
        shape[r + 1] = n;
        let shape = &shape[..r + 2];
        let batch = &shape[..r];
        outputs_len(outputs, 1);
        outputs[0].ensure(dt, shape);
        if outputs[0].is_empty() {
            return Ok(());
        }
        if dt == DType::F32 {
            let (a, b) = (contig(a), contig(b));
            let out = outputs[0].as_slice_mut::<f32>()?;
            // batches run folded into one product or one at a time
            let tmp = scratch.one(rows_work_len(out.len() / n, n, ka).max(rows_work_len(m, n, ka)));
            let (a, b) = (f32s(&a)?, f32s(&b)?);
            return self.run_f32(a, a_batch, b, b_batch, batch, (m, ka, n), out, tmp);
        }
        let len = outputs[0].len();
        let work = rows_work_len(len / n, n, ka).max(rows_work_len(m, n, ka));
        let (ab, bb, ob, tmp) = scratch.four(a.len(), b.len(), len, work);
        load_f32(a, ab, 0)?;
        load_f32(b, bb, 1)?;
        self.run_f32(ab, a_batch, bb, b_batch, batch, (m, ka, n), ob, tmp)?;
        store_f32(ob, &mut outputs[0])
    }

    fn frame_local_axis(&self, inputs: &[&TypedFact], axes: &[Option<usize>]) -> Option<usize> {
        // Only `a` may stream, along a batch axis or M; b's matching batch
        // axis must then be absent or broadcast (size 1).
        let (&[fa, fb], &[Some(ax), None]) = (inputs, axes) else {
            return None;
        };
        let (ra, rb) = (fa.rank(), fb.rank());
        if ra < 2 || rb < 2 || ax >= ra {
            return None;
        }
        let r = ra.max(rb);
        if ax < ra - 2 {
            let o = ax + (r - ra);
            let lead_b = r - rb;
            if o >= lead_b && fb.shape[o - lead_b] != Dim::n(1) {
                return None;
            }
            return Some(o);
        }
        let m_axis = if self.transpose_a { ra - 1 } else { ra - 2 };
        (ax == m_axis).then_some(r - 2)
    }

    fn info(&self) -> String {
        format!(
            "transpose_a {} transpose_b {}",
            self.transpose_a, self.transpose_b
        )
    }
}

#[cfg(test)]
pub(crate) mod test_util;
#[cfg(test)]
mod tests;
