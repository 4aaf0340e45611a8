//! Typed facts: what a graph knows about a tensor before it runs.

use std::fmt;

use super::{DType, Dim, Tensor};

/// Element type plus a shape whose sizes may depend on the streaming symbol `S`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TypedFact {
    pub dtype: DType,
    pub shape: Vec<Dim>,
}

impl TypedFact {
    pub fn new(dtype: DType, shape: impl IntoIterator<Item = impl Into<Dim>>) -> TypedFact {
        TypedFact {
            dtype,
            shape: shape.into_iter().map(Into::into).collect(),
        }
    }

    pub fn dt_shape(dtype: DType, shape: &[Dim]) -> TypedFact {
        TypedFact {
            dtype,
            shape: shape.to_vec(),
        }
    }

    /// The fact of a concrete tensor.
    pub fn of(t: &Tensor) -> TypedFact {
        TypedFact {
            dtype: t.dtype(),
            shape: t.shape().iter().map(|&d| Dim::n(d as i64)).collect(),
        }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Concrete sizes, if none depends on `S`.
    pub fn concrete_shape(&self) -> Option<Vec<usize>> {
        self.shape
            .iter()
            .map(|d| d.as_const().and_then(|v| usize::try_from(v).ok()))
            .collect()
    }

    /// Sizes for a given stream length.
    pub fn eval_shape(&self, s: i64) -> Vec<i64> {
        self.shape.iter().map(|d| d.eval(s)).collect()
    }

    /// Number of elements, when concrete.
    pub fn volume(&self) -> Option<usize> {
        self.concrete_shape().map(|s| s.iter().product())
    }

    /// Same shape, other element type.
    pub fn with_dtype(&self, dtype: DType) -> TypedFact {
        TypedFact {
            dtype,
            shape: self.shape.clone(),
        }
    }

    /// The fact with every `S` replaced by a number.
    pub fn concretize(&self, s: i64) -> TypedFact {
        TypedFact {
            dtype: self.dtype,
            shape: self.shape.iter().map(|d| Dim::n(d.eval(s))).collect(),
        }
    }
}

impl fmt::Display for TypedFact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

impl fmt::Debug for TypedFact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
