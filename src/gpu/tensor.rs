//! Device tensors: an address, a dtype and a shape. Every device tensor is
//! contiguous; views that stay contiguous (reshapes, squeezes, leading-axis
//! slices) share their input's memory at an offset, for every dtype.

use crate::ops::{DType, Tensor, TypedFact};

use super::GpuError;

/// A contiguous tensor in device memory, as kernels see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevTensor {
    /// Device address of element 0.
    pub ptr: u64,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl DevTensor {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> usize {
        self.len() * self.dtype.size_of()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The fact this tensor satisfies.
    pub fn fact(&self) -> TypedFact {
        TypedFact::new(self.dtype, self.shape.clone())
    }

    /// Size of `axis`, counting negative axes from the end.
    pub fn dim(&self, axis: isize) -> usize {
        let r = self.shape.len() as isize;
        let a = if axis < 0 { axis + r } else { axis };
        self.shape[a as usize]
    }
}

/// How floating-point values are stored on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// As in the graph (f32).
    #[default]
    F32,
    /// bf16 weights and activations, f32 accumulation in every kernel.
    Bf16,
}

impl Precision {
    /// The device dtype of a value of graph dtype `logical`.
    pub fn storage(self, logical: DType) -> DType {
        match (self, logical) {
            (Precision::Bf16, DType::F32 | DType::F16) => DType::BF16,
            (_, d) => d,
        }
    }

    /// A fact with its dtype mapped to [`Self::storage`].
    pub fn device_fact(self, f: &TypedFact) -> TypedFact {
        let mut f = f.clone();
        f.dtype = self.storage(f.dtype);
        f
    }

    /// Suffix of the kernel variant for float storage.
    pub fn suffix(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

/// A precision name that is neither `f32` nor `bf16`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown precision `{0}` (f32 or bf16)")]
pub struct ParsePrecisionError(pub String);

impl std::str::FromStr for Precision {
    type Err = ParsePrecisionError;
    fn from_str(s: &str) -> Result<Self, ParsePrecisionError> {
        match s {
            "f32" => Ok(Precision::F32),
            "bf16" => Ok(Precision::Bf16),
            _ => Err(ParsePrecisionError(s.to_string())),
        }
    }
}

/// The kernel suffix for a float storage dtype, or an error naming it.
pub fn float_suffix(dtype: DType) -> Result<&'static str, GpuError> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::BF16 => Ok("bf16"),
        d => Err(GpuError::NoFloatKernel { dtype: d }),
    }
}

/// The bytes of `t` converted to `storage` (a host-side cast when they differ).
pub fn host_bytes(t: &Tensor, storage: DType) -> Vec<u8> {
    let t = if t.dtype() == storage {
        t.contiguous()
    } else {
        t.cast(storage)
    };
    macro_rules! bytes {
        ($ty:ty) => {
            bytemuck::cast_slice::<$ty, u8>(t.as_slice::<$ty>().expect("dtype checked")).to_vec()
        };
    }
    match storage {
        DType::F32 => bytes!(f32),
        DType::F16 => bytes!(half::f16),
        DType::BF16 => bytes!(half::bf16),
        DType::I64 => bytes!(i64),
        DType::Bool => t
            .as_slice::<bool>()
            .expect("dtype checked")
            .iter()
            .map(|&b| b as u8)
            .collect(),
    }
}

/// A host tensor of dtype `logical` from device bytes of dtype `storage`.
pub fn tensor_from_bytes(
    bytes: &[u8],
    storage: DType,
    logical: DType,
    shape: &[usize],
) -> Result<Tensor, GpuError> {
    let bad = GpuError::Download;
    macro_rules! t {
        ($ty:ty) => {
            Tensor::from_vec(
                shape.to_vec(),
                bytemuck::pod_collect_to_vec::<u8, $ty>(bytes),
            )
            .map_err(bad)?
        };
    }
    let t = match storage {
        DType::F32 => t!(f32),
        DType::F16 => t!(half::f16),
        DType::BF16 => t!(half::bf16),
        DType::I64 => t!(i64),
        DType::Bool => Tensor::from_vec(shape.to_vec(), bytes.iter().map(|&b| b != 0).collect())
            .map_err(bad)?,
    };
    Ok(if storage == logical {
        t
    } else {
        t.cast(logical)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_names() {
        assert_eq!("bf16".parse(), Ok(Precision::Bf16));
        let e = "f16".parse::<Precision>().unwrap_err();
        assert_eq!(e, ParsePrecisionError("f16".into()));
        assert_eq!(e.to_string(), "unknown precision `f16` (f32 or bf16)");
    }
}
