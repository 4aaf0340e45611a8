//! Weights from `safetensors` files, looked up by name with dtype and shape checked.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use half::{bf16, f16};
use safetensors::{Dtype as StDtype, SafeTensors};

use crate::ops::matmul::Int8Matrix;
use crate::ops::{DType, Tensor};
use crate::{Error, Result};

/// All tensors of one safetensors file, decoded to host tensors.
#[derive(Debug, Clone, Default)]
pub struct Weights {
    file: String,
    tensors: HashMap<String, Tensor>,
    /// Matrices also held as int8 ([`Weights::with_int8`]): a graph
    /// builder that finds one here multiplies by it instead.
    int8: HashMap<String, Arc<Int8Matrix>>,
}

impl Weights {
    /// The tensor `name`, whatever its shape.
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.tensors.get(name)
    }

    /// Reads and decodes a safetensors file.
    pub fn load(path: impl AsRef<Path>) -> Result<Weights> {
        Weights::load_with(path.as_ref(), |_, t| t)
    }

    /// Reads a safetensors file with every float tensor widened to f32 but
    /// those `keep` names, which stay as stored.
    pub fn load_f32(path: impl AsRef<Path>, keep: &[&str]) -> Result<Weights> {
        Weights::load_with(path.as_ref(), |name, t| {
            match t.dtype().is_float() && !keep.contains(&name) {
                true => t.cast(DType::F32),
                false => t,
            }
        })
    }

    /// Decodes a file through a memory map, one tensor at a time through
    /// `each`: the file's bytes are never copied whole onto the heap (a
    /// base-sized checkpoint held its 145 MB twice while loading), and the
    /// map, the page cache's pages, is gone when this returns.
    fn load_with(path: &Path, each: impl FnMut(&str, Tensor) -> Tensor) -> Result<Weights> {
        let cannot = |e: std::io::Error| Error::File {
            path: path.to_path_buf(),
            reason: format!("cannot read weights: {e}"),
        };
        let file = std::fs::File::open(path).map_err(cannot)?;
        // SAFETY: the map is read only while this call decodes it; a file
        // that another process truncates meanwhile would fault, as a read
        // of a file cut short would fail (the model cache is written by
        // renaming finished files into place)
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(cannot)?;
        Weights::decode(&map, &path.display().to_string(), each).map_err(|e| match e {
            Error::Other(reason) => Error::File {
                path: PathBuf::from(path),
                reason,
            },
            e => e,
        })
    }

    /// Decodes safetensors bytes; `file` names them in errors.
    pub fn from_bytes(bytes: &[u8], file: &str) -> Result<Weights> {
        Weights::decode(bytes, file, |_, t| t)
    }

    /// Decodes safetensors bytes, each tensor passed through `each`.
    fn decode(
        bytes: &[u8],
        file: &str,
        mut each: impl FnMut(&str, Tensor) -> Tensor,
    ) -> Result<Weights> {
        let st = SafeTensors::deserialize(bytes)
            .map_err(|e| Error::Other(format!("not a valid safetensors file: {e}")))?;
        let mut tensors = HashMap::new();
        for (name, view) in st.tensors() {
            let shape = view.shape().to_vec();
            let data = view.data();
            let t = match view.dtype() {
                StDtype::F32 => {
                    Tensor::from_vec(shape, bytemuck::pod_collect_to_vec::<u8, f32>(data))
                }
                StDtype::F16 => {
                    Tensor::from_vec(shape, bytemuck::pod_collect_to_vec::<u8, f16>(data))
                }
                StDtype::BF16 => {
                    Tensor::from_vec(shape, bytemuck::pod_collect_to_vec::<u8, bf16>(data))
                }
                StDtype::I64 => {
                    Tensor::from_vec(shape, bytemuck::pod_collect_to_vec::<u8, i64>(data))
                }
                StDtype::BOOL => {
                    Tensor::from_vec(shape, data.iter().map(|&b| b != 0).collect::<Vec<bool>>())
                }
                other => {
                    return Err(Error::WeightDType {
                        name,
                        expected: "f32, f16, bf16, i64 or bool".into(),
                        found: format!("{other:?}"),
                    })
                }
            }
            .map_err(|e| Error::Other(format!("tensor `{name}`: {e}")))?;
            tensors.insert(name.clone(), each(&name, t));
        }
        Ok(Weights {
            file: file.to_string(),
            tensors,
            int8: HashMap::new(),
        })
    }

    /// Builds a weight set from tensors already in memory.
    pub fn from_tensors(
        file: &str,
        tensors: impl IntoIterator<Item = (String, Tensor)>,
    ) -> Weights {
        Weights {
            file: file.to_string(),
            tensors: tensors.into_iter().collect(),
            int8: HashMap::new(),
        }
    }

    /// The same weights with tensor `name` replaced by (or added as) `t`.
    pub fn with_tensor(&self, name: &str, t: Tensor) -> Weights {
        let mut out = self.clone();
        out.tensors.insert(name.to_string(), t);
        out
    }

    /// The same weights, with every 2-D float tensor whose name `pick`
    /// takes also quantized to int8: a scale per `group` inputs of each
    /// row, or per row where `group` does not divide the row.
    pub fn with_int8(&self, pick: impl Fn(&str) -> bool, group: usize) -> Result<Weights> {
        let mut out = self.clone();
        for (name, t) in &self.tensors {
            if t.rank() == 2 && t.dtype().is_float() && pick(name) {
                let cols = t.shape()[1];
                let g = if group > 0 && cols.is_multiple_of(group) {
                    group
                } else {
                    cols
                };
                let q = Int8Matrix::from_tensor_groups(t, g)?;
                out.int8.insert(name.clone(), Arc::new(q));
            }
        }
        Ok(out)
    }

    /// The int8 form of matrix `name`, when [`Weights::with_int8`] made one.
    pub fn int8(&self, name: &str) -> Option<Arc<Int8Matrix>> {
        self.int8.get(name).cloned()
    }

    /// Names of all tensors, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.tensors.keys().map(|s| s.as_str()).collect();
        v.sort();
        v
    }

    /// The tensor `name` as stored, if its shape is `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let t = self.tensors.get(name).ok_or_else(|| Error::MissingWeight {
            name: name.to_string(),
            file: self.file.clone(),
        })?;
        if t.shape() != shape {
            return Err(Error::WeightShape {
                name: name.to_string(),
                expected: shape.to_vec(),
                found: t.shape().to_vec(),
            });
        }
        Ok(t.clone())
    }

    /// The tensor `name` with shape `shape`, converted to `dtype` (floats only).
    pub fn get_as(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let t = self.get(name, shape)?;
        if !t.dtype().is_float() || !dtype.is_float() {
            if t.dtype() != dtype {
                return Err(Error::WeightDType {
                    name: name.to_string(),
                    expected: dtype.to_string(),
                    found: t.dtype().to_string(),
                });
            }
            return Ok(t);
        }
        Ok(t.cast(dtype))
    }

    /// Shorthand for `get_as(name, shape, F32)`.
    pub fn f32(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.get_as(name, shape, DType::F32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let view = safetensors::tensor::TensorView::new(StDtype::F32, vec![2, 2], &data).unwrap();
        safetensors::serialize([("w", view)], &None).unwrap()
    }

    #[test]
    fn loads_and_checks_shapes() {
        let w = Weights::from_bytes(&sample(), "mem").unwrap();
        assert_eq!(
            w.f32("w", &[2, 2]).unwrap().to_vec::<f32>().unwrap(),
            vec![1., 2., 3., 4.]
        );
        assert!(matches!(w.f32("w", &[4]), Err(Error::WeightShape { .. })));
        assert!(matches!(
            w.f32("nope", &[4]),
            Err(Error::MissingWeight { .. })
        ));
        assert_eq!(
            w.get_as("w", &[2, 2], DType::BF16).unwrap().dtype(),
            DType::BF16
        );
        assert!(matches!(
            w.get_as("w", &[2, 2], DType::I64),
            Err(Error::WeightDType { .. })
        ));
    }

    #[test]
    fn corrupt_bytes_are_an_error() {
        let mut b = sample();
        b.truncate(b.len() - 3);
        assert!(Weights::from_bytes(&b, "mem").is_err());
        assert!(Weights::from_bytes(b"garbage", "mem").is_err());
    }
}
