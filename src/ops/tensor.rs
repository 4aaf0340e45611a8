//! Host tensors: shared contiguous storage plus shape, strides and offset, so
//! reshape, transpose, move-axis and narrow are metadata changes.

use std::fmt;
use std::sync::Arc;

use half::{bf16, f16};

use super::{DType, Element, OpError, OpResult};

/// Element storage, one vector per dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum Storage {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
}

/// Runs `$body` with `$v` bound to the storage's vector, whatever its dtype.
#[macro_export]
macro_rules! dispatch_storage {
    ($s:expr, $v:ident => $body:expr) => {
        match $s {
            $crate::ops::Storage::F32($v) => $body,
            $crate::ops::Storage::F16($v) => $body,
            $crate::ops::Storage::BF16($v) => $body,
            $crate::ops::Storage::I64($v) => $body,
            $crate::ops::Storage::Bool($v) => $body,
        }
    };
}

impl Storage {
    pub fn zeros(dtype: DType, len: usize) -> Storage {
        match dtype {
            DType::F32 => Storage::F32(vec![0.0; len]),
            DType::F16 => Storage::F16(vec![f16::ZERO; len]),
            DType::BF16 => Storage::BF16(vec![bf16::ZERO; len]),
            DType::I64 => Storage::I64(vec![0; len]),
            DType::Bool => Storage::Bool(vec![false; len]),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            Storage::F32(_) => DType::F32,
            Storage::F16(_) => DType::F16,
            Storage::BF16(_) => DType::BF16,
            Storage::I64(_) => DType::I64,
            Storage::Bool(_) => DType::Bool,
        }
    }

    pub fn len(&self) -> usize {
        dispatch_storage!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Access to the storage vector of one element type.
pub trait StorageElement: Element {
    fn slice(s: &Storage) -> Option<&[Self]>;
    fn slice_mut(s: &mut Storage) -> Option<&mut [Self]>;
    fn wrap(v: Vec<Self>) -> Storage;
}

macro_rules! storage_element {
    ($t:ty, $var:ident) => {
        impl StorageElement for $t {
            fn slice(s: &Storage) -> Option<&[Self]> {
                match s {
                    Storage::$var(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(s: &mut Storage) -> Option<&mut [Self]> {
                match s {
                    Storage::$var(v) => Some(v),
                    _ => None,
                }
            }
            fn wrap(v: Vec<Self>) -> Storage {
                Storage::$var(v)
            }
        }
    };
}
storage_element!(f32, F32);
storage_element!(f16, F16);
storage_element!(bf16, BF16);
storage_element!(i64, I64);
storage_element!(bool, Bool);

/// A host tensor.
///
/// ```
/// use pulsed::ops::Tensor;
/// let t = Tensor::from_vec(vec![2, 3], (0..6).map(|v| v as f32).collect()).unwrap();
/// let tt = t.transpose(0, 1).unwrap();            // a view: no copy
/// assert_eq!(tt.shape(), &[3, 2]);
/// assert_eq!(tt.to_vec::<f32>().unwrap(), vec![0., 3., 1., 4., 2., 5.]);
/// ```
#[derive(Clone)]
pub struct Tensor {
    storage: Arc<Storage>,
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

fn contiguous_strides(shape: &[usize], out: &mut Vec<usize>) {
    out.clear();
    out.resize(shape.len(), 1);
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        out[i] = acc;
        acc *= shape[i].max(1);
    }
}

impl Tensor {
    /// A tensor of zeros (false for bool).
    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        let len = shape.iter().product();
        let mut strides = Vec::new();
        contiguous_strides(shape, &mut strides);
        Tensor {
            storage: Arc::new(Storage::zeros(dtype, len)),
            shape: shape.to_vec(),
            strides,
            offset: 0,
        }
    }

    /// An empty placeholder (rank 1, no element) that `ensure` later resizes.
    pub fn empty() -> Tensor {
        Tensor::zeros(DType::F32, &[0])
    }

    /// A tensor owning `data`, laid out row-major in `shape`.
    pub fn from_vec<T: StorageElement>(shape: Vec<usize>, data: Vec<T>) -> OpResult<Tensor> {
        let len: usize = shape.iter().product();
        if len != data.len() {
            return Err(OpError::Shape(format!(
                "shape {:?} holds {} elements, data has {}",
                shape,
                len,
                data.len()
            )));
        }
        let mut strides = Vec::new();
        contiguous_strides(&shape, &mut strides);
        Ok(Tensor {
            storage: Arc::new(T::wrap(data)),
            shape,
            strides,
            offset: 0,
        })
    }

    /// A rank-0 tensor.
    pub fn scalar<T: StorageElement>(v: T) -> Tensor {
        Tensor::from_vec(vec![], vec![v]).expect("one element")
    }

    /// Rank-1 tensor from a slice.
    pub fn from_slice<T: StorageElement>(data: &[T]) -> Tensor {
        Tensor::from_vec(vec![data.len()], data.to_vec()).expect("len matches")
    }

    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// Where this view's values live: its storage's address and its
    /// offset there. Two tensors with the same key, shape and strides hold
    /// the same values for as long as either is alive (clones of one
    /// weight, for instance).
    pub fn storage_key(&self) -> (usize, usize) {
        (Arc::as_ptr(&self.storage) as usize, self.offset)
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when elements are laid out row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        if self.is_empty() {
            return true; // no element to misplace, whatever the strides say
        }
        let mut acc = 1;
        for i in (0..self.shape.len()).rev() {
            if self.shape[i] != 1 && self.strides[i] != acc {
                return false;
            }
            acc *= self.shape[i];
        }
        true
    }

    /// The elements, if contiguous and of type `T`.
    pub fn as_slice<T: StorageElement>(&self) -> OpResult<&[T]> {
        let all = T::slice(&self.storage).ok_or_else(|| dtype_mismatch(T::DTYPE, self.dtype()))?;
        if !self.is_contiguous() {
            return Err(OpError::Other(
                "tensor is a strided view; call contiguous() first".into(),
            ));
        }
        Ok(&all[self.offset..self.offset + self.len()])
    }

    /// Mutable elements; copies the storage first if it is shared or strided.
    pub fn as_slice_mut<T: StorageElement>(&mut self) -> OpResult<&mut [T]> {
        if T::DTYPE != self.dtype() {
            return Err(dtype_mismatch(T::DTYPE, self.dtype()));
        }
        if !self.is_contiguous() {
            *self = self.contiguous();
        }
        let (off, len) = (self.offset, self.len());
        let all = T::slice_mut(Arc::make_mut(&mut self.storage)).expect("dtype checked");
        Ok(&mut all[off..off + len])
    }

    /// Makes this tensor a contiguous tensor of `dtype` and `shape`, keeping
    /// its buffer when it is unshared and already the right size (so a step
    /// that produces the same shapes every time allocates nothing). The
    /// previous contents are unspecified unless the buffer was reallocated,
    /// in which case it is zeroed.
    pub fn ensure(&mut self, dtype: DType, shape: &[usize]) {
        let len: usize = shape.iter().product();
        let reuse = self.dtype() == dtype
            && self.offset == 0
            && self.storage.len() == len
            && Arc::get_mut(&mut self.storage).is_some();
        if !reuse {
            self.storage = Arc::new(Storage::zeros(dtype, len));
            self.offset = 0;
        }
        if self.shape != shape {
            self.shape.clear();
            self.shape.extend_from_slice(shape);
        }
        contiguous_strides(shape, &mut self.strides);
    }

    /// A contiguous copy (or the same storage, if already contiguous).
    pub fn contiguous(&self) -> Tensor {
        if self.is_contiguous() && self.offset == 0 && self.storage.len() == self.len() {
            return self.clone();
        }
        let storage = dispatch_storage!(&*self.storage, v => {
            let mut out = Vec::with_capacity(self.len());
            self.for_each_index(|i| out.push(v[i]));
            StorageElement::wrap(out)
        });
        let mut strides = Vec::new();
        contiguous_strides(&self.shape, &mut strides);
        Tensor {
            storage: Arc::new(storage),
            shape: self.shape.clone(),
            strides,
            offset: 0,
        }
    }

    /// Calls `f` with the storage index of every element, in row-major order.
    fn for_each_index(&self, mut f: impl FnMut(usize)) {
        let n = self.len();
        if n == 0 {
            return;
        }
        let rank = self.rank();
        let mut idx = vec![0usize; rank];
        let mut pos = self.offset;
        for _ in 0..n {
            f(pos);
            for ax in (0..rank).rev() {
                idx[ax] += 1;
                pos += self.strides[ax];
                if idx[ax] < self.shape[ax] {
                    break;
                }
                pos -= self.strides[ax] * self.shape[ax];
                idx[ax] = 0;
            }
        }
    }

    /// The elements in row-major order, whatever the layout.
    pub fn to_vec<T: StorageElement>(&self) -> OpResult<Vec<T>> {
        let all = T::slice(&self.storage).ok_or_else(|| dtype_mismatch(T::DTYPE, self.dtype()))?;
        let mut out = Vec::with_capacity(self.len());
        self.for_each_index(|i| out.push(all[i]));
        Ok(out)
    }

    /// Every element converted to f32 (bool as 0/1, i64 rounded).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.len());
        dispatch_storage!(&*self.storage, v => self.for_each_index(|i| out.push(v[i].to_f32())));
        out
    }

    /// A copy in another element type (floats round to nearest; floats to
    /// i64 truncate; anything to bool is `!= 0`).
    pub fn cast(&self, dtype: DType) -> Tensor {
        if dtype == self.dtype() {
            return self.clone();
        }
        let storage = match (&*self.storage, dtype) {
            (Storage::I64(v), DType::F32) => {
                let mut o = Vec::with_capacity(self.len());
                self.for_each_index(|i| o.push(v[i] as f32));
                Storage::F32(o)
            }
            (_, DType::I64) => {
                let mut o = Vec::with_capacity(self.len());
                dispatch_storage!(&*self.storage, v => self.for_each_index(|i| o.push(cast_i64(v[i]))));
                Storage::I64(o)
            }
            _ => {
                let f = self.to_f32_vec();
                match dtype {
                    DType::F32 => Storage::F32(f),
                    DType::F16 => Storage::F16(f.iter().map(|&x| f16::from_f32(x)).collect()),
                    DType::BF16 => Storage::BF16(f.iter().map(|&x| bf16::from_f32(x)).collect()),
                    DType::Bool => Storage::Bool(f.iter().map(|&x| x != 0.0).collect()),
                    DType::I64 => unreachable!("handled above"),
                }
            }
        };
        let mut strides = Vec::new();
        contiguous_strides(&self.shape, &mut strides);
        Tensor {
            storage: Arc::new(storage),
            shape: self.shape.clone(),
            strides,
            offset: 0,
        }
    }

    /// Same elements, new shape. A view when the layout allows (contiguous
    /// data), a copy otherwise.
    pub fn reshape(&self, shape: &[usize]) -> OpResult<Tensor> {
        let len: usize = shape.iter().product();
        if len != self.len() {
            return Err(OpError::Shape(format!(
                "cannot reshape {:?} ({} elements) to {:?} ({} elements)",
                self.shape,
                self.len(),
                shape,
                len
            )));
        }
        let base = if self.is_contiguous() {
            self.clone()
        } else {
            self.contiguous()
        };
        let mut strides = Vec::new();
        contiguous_strides(shape, &mut strides);
        Ok(Tensor {
            storage: base.storage,
            shape: shape.to_vec(),
            strides,
            offset: base.offset,
        })
    }

    /// Reorders axes (a view).
    pub fn permute(&self, axes: &[usize]) -> OpResult<Tensor> {
        let mut seen = vec![false; self.rank()];
        if axes.len() != self.rank()
            || axes
                .iter()
                .any(|&a| a >= self.rank() || std::mem::replace(&mut seen[a], true))
        {
            return Err(OpError::Param(format!(
                "{axes:?} is not a permutation of {} axes",
                self.rank()
            )));
        }
        Ok(Tensor {
            storage: self.storage.clone(),
            shape: axes.iter().map(|&a| self.shape[a]).collect(),
            strides: axes.iter().map(|&a| self.strides[a]).collect(),
            offset: self.offset,
        })
    }

    /// Swaps two axes (a view).
    pub fn transpose(&self, a: usize, b: usize) -> OpResult<Tensor> {
        let mut axes: Vec<usize> = (0..self.rank()).collect();
        if a >= axes.len() || b >= axes.len() {
            return Err(OpError::Param(format!(
                "axes {a},{b} out of range for rank {}",
                self.rank()
            )));
        }
        axes.swap(a, b);
        self.permute(&axes)
    }

    /// Moves one axis to another position (a view).
    pub fn move_axis(&self, from: usize, to: usize) -> OpResult<Tensor> {
        if from >= self.rank() || to >= self.rank() {
            return Err(OpError::Param(format!(
                "axes {from}->{to} out of range for rank {}",
                self.rank()
            )));
        }
        let mut axes: Vec<usize> = (0..self.rank()).collect();
        let a = axes.remove(from);
        axes.insert(to, a);
        self.permute(&axes)
    }

    /// The sub-range `start..start+len` of one axis (a view).
    pub fn narrow(&self, axis: usize, start: usize, len: usize) -> OpResult<Tensor> {
        if axis >= self.rank() || start + len > self.shape[axis] {
            return Err(OpError::Index(format!(
                "narrow axis {axis} range {start}..{} of shape {:?}",
                start + len,
                self.shape
            )));
        }
        let mut t = self.clone();
        t.offset += start * self.strides[axis];
        t.shape[axis] = len;
        Ok(t)
    }

    /// Copies `src` (any layout) into this tensor, resized to `src`'s dtype
    /// and shape; allocation-free when the buffer already fits.
    pub fn copy_from(&mut self, src: &Tensor) {
        self.ensure(src.dtype(), src.shape());
        let off = self.offset;
        let dst = Arc::get_mut(&mut self.storage).expect("ensure leaves the storage unshared");
        dispatch_storage!(dst, d => {
            let s = same_kind(d, &src.storage).expect("same dtype after ensure");
            if src.is_contiguous() {
                let n = src.len();
                d[off..off + n].copy_from_slice(&s[src.offset..src.offset + n]);
                return;
            }
            let mut k = off;
            src.for_each_index(|i| { d[k] = s[i]; k += 1; });
        });
    }

    /// The length of the whole storage, when no other tensor shares it
    /// (a buffer a runner may hand to another node).
    pub fn unshared_len(&mut self) -> Option<usize> {
        Arc::get_mut(&mut self.storage).map(|s| s.len())
    }

    /// True when both tensors hold the same storage (a view of the other).
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// Largest absolute difference, as f32, between two same-shaped tensors.
    pub fn max_abs_diff(&self, other: &Tensor) -> OpResult<f32> {
        if self.shape != other.shape {
            return Err(OpError::Shape(format!(
                "{:?} vs {:?}",
                self.shape, other.shape
            )));
        }
        let (a, b) = (self.to_f32_vec(), other.to_f32_vec());
        Ok(a.iter()
            .zip(&b)
            .map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() })
            .fold(0.0, f32::max))
    }

    /// Element-wise closeness: `|a-b| <= atol + rtol*|b|` everywhere.
    pub fn close_to(&self, other: &Tensor, atol: f32, rtol: f32) -> bool {
        if self.shape != other.shape {
            return false;
        }
        let (a, b) = (self.to_f32_vec(), other.to_f32_vec());
        a.iter()
            .zip(&b)
            .all(|(x, y)| x == y || (x - y).abs() <= atol + rtol * y.abs())
    }
}

fn same_kind<'a, T: StorageElement>(_like: &[T], s: &'a Storage) -> Option<&'a [T]> {
    T::slice(s)
}

fn cast_i64<T: Element>(v: T) -> i64 {
    v.to_f32() as i64
}

fn dtype_mismatch(want: DType, got: DType) -> OpError {
    OpError::DType {
        input: 0,
        expected: want.to_string(),
        got,
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor<{}>{:?}", self.dtype(), self.shape)?;
        let v = self.to_f32_vec();
        let n = v.len().min(8);
        write!(f, " {:?}{}", &v[..n], if v.len() > n { " .." } else { "" })
    }
}

impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        if self.dtype() != other.dtype() || self.shape != other.shape {
            return false;
        }
        dispatch_storage!(&*self.storage, v => {
            let w = same_kind(v, &other.storage).expect("same dtype");
            let (mut a, mut b) = (Vec::new(), Vec::new());
            self.for_each_index(|i| a.push(v[i]));
            other.for_each_index(|i| b.push(w[i]));
            a == b
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_share_storage_for_every_dtype() {
        for dt in [DType::F32, DType::F16, DType::BF16, DType::I64, DType::Bool] {
            let t = Tensor::zeros(dt, &[2, 3, 4]);
            assert!(
                t.reshape(&[6, 4]).unwrap().shares_storage(&t),
                "{dt} reshape"
            );
            assert!(
                t.transpose(0, 2).unwrap().shares_storage(&t),
                "{dt} transpose"
            );
            assert!(
                t.move_axis(2, 0).unwrap().shares_storage(&t),
                "{dt} move_axis"
            );
            assert!(t.narrow(1, 1, 2).unwrap().shares_storage(&t), "{dt} narrow");
        }
    }

    #[test]
    fn transpose_then_reshape_copies_in_logical_order() {
        let t = Tensor::from_vec(vec![2, 3], (0..6i64).collect()).unwrap();
        let r = t.transpose(0, 1).unwrap().reshape(&[6]).unwrap();
        assert_eq!(r.to_vec::<i64>().unwrap(), vec![0, 3, 1, 4, 2, 5]);
        assert!(!r.shares_storage(&t));
    }

    #[test]
    fn narrow_and_move_axis() {
        let t = Tensor::from_vec(vec![2, 3, 2], (0..12).map(|v| v as f32).collect()).unwrap();
        let n = t.narrow(1, 1, 2).unwrap();
        assert_eq!(
            n.to_vec::<f32>().unwrap(),
            vec![2., 3., 4., 5., 8., 9., 10., 11.]
        );
        let m = t.move_axis(2, 0).unwrap();
        assert_eq!(m.shape(), &[2, 2, 3]);
        assert_eq!(m.to_vec::<f32>().unwrap()[..3], [0., 2., 4.]);
    }

    #[test]
    fn bad_reshape_and_permute_are_errors() {
        let t = Tensor::zeros(DType::BF16, &[2, 3]);
        assert!(t.reshape(&[5]).is_err());
        assert!(t.permute(&[0, 0]).is_err());
        assert!(t.narrow(1, 2, 2).is_err());
        assert!(Tensor::from_vec(vec![2, 2], vec![1.0f32; 3]).is_err());
    }

    #[test]
    fn ensure_reuses_unshared_buffer() {
        let mut t = Tensor::zeros(DType::F32, &[4, 4]);
        t.as_slice_mut::<f32>().unwrap()[0] = 7.0;
        t.ensure(DType::F32, &[2, 8]);
        assert_eq!(t.as_slice::<f32>().unwrap()[0], 7.0);
        let keep = t.clone();
        t.ensure(DType::F32, &[16]);
        assert!(!t.shares_storage(&keep));
    }

    #[test]
    fn casts_round_trip() {
        let t = Tensor::from_slice(&[1.5f32, -2.0, 0.0]);
        assert_eq!(t.cast(DType::BF16).cast(DType::F32), t);
        assert_eq!(t.cast(DType::I64).to_vec::<i64>().unwrap(), vec![1, -2, 0]);
        assert_eq!(
            t.cast(DType::Bool).to_vec::<bool>().unwrap(),
            vec![true, true, false]
        );
    }
}
