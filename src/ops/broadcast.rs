//! Numpy-style broadcasting of shapes, facts and strided iteration.

use super::{Dim, OpError, OpResult};

/// The broadcast of two symbolic shapes.
pub fn broadcast_dims(a: &[Dim], b: &[Dim]) -> OpResult<Vec<Dim>> {
    let r = a.len().max(b.len());
    let mut out = Vec::with_capacity(r);
    for i in 0..r {
        let da = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            Dim::n(1)
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            Dim::n(1)
        };
        out.push(if da == db || db == Dim::n(1) {
            da
        } else if da == Dim::n(1) {
            db
        } else {
            return Err(OpError::Shape(format!("cannot broadcast {a:?} with {b:?}")));
        });
    }
    Ok(out)
}

/// The broadcast of two concrete shapes, into a stack array (no allocation);
/// returns the rank.
pub fn broadcast_shapes(a: &[usize], b: &[usize], out: &mut [usize; MAX_RANK]) -> OpResult<usize> {
    let r = a.len().max(b.len());
    if r > MAX_RANK {
        return Err(OpError::Shape(format!("rank above {MAX_RANK}")));
    }
    for i in 0..r {
        let da = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(OpError::Shape(format!("cannot broadcast {a:?} with {b:?}")));
        };
    }
    Ok(r)
}

/// Strides (in elements) of a contiguous `shape` seen through the broadcast
/// to `out` (0 on broadcast axes), padded on the left to `out`'s rank.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> [usize; 8] {
    let mut st = [0usize; 8];
    let off = out.len() - shape.len();
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        st[i + off] = if shape[i] == 1 && out[i + off] != 1 {
            0
        } else {
            acc
        };
        acc *= shape[i];
    }
    st
}

/// Calls `f(out_row_start, a_offset, b_offset, a_inner_stride, b_inner_stride, inner_len)`
/// for each row of the last axis of `out`.
pub fn for_each_row(
    out: &[usize],
    sa: &[usize; 8],
    sb: &[usize; 8],
    mut f: impl FnMut(usize, usize, usize, usize, usize, usize),
) {
    let r = out.len();
    if r == 0 {
        f(0, 0, 0, 0, 0, 1);
        return;
    }
    let inner = out[r - 1];
    let rows: usize = out[..r - 1].iter().product();
    let mut idx = [0usize; 8];
    let (mut oa, mut ob) = (0usize, 0usize);
    for row in 0..rows {
        f(row * inner, oa, ob, sa[r - 1], sb[r - 1], inner);
        for ax in (0..r - 1).rev() {
            idx[ax] += 1;
            oa += sa[ax];
            ob += sb[ax];
            if idx[ax] < out[ax] {
                break;
            }
            oa -= sa[ax] * out[ax];
            ob -= sb[ax] * out[ax];
            idx[ax] = 0;
        }
    }
}

pub const MAX_RANK: usize = 8;
