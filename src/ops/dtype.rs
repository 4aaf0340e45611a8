//! Element types a tensor can hold.

use std::fmt;

use half::{bf16, f16};

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    I64,
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size_of(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I64 => 8,
            DType::Bool => 1,
        }
    }

    /// True for f32, f16 and bf16.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Parses the names `Display` prints (`f32`, `f16`, `bf16`, `i64`, `bool`).
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "f32" => DType::F32,
            "f16" => DType::F16,
            "bf16" => DType::BF16,
            "i64" => DType::I64,
            "bool" => DType::Bool,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I64 => "i64",
            DType::Bool => "bool",
        })
    }
}

/// A Rust type that can be a tensor element.
pub trait Element: Copy + Default + Send + Sync + fmt::Debug + PartialEq + 'static {
    const DTYPE: DType;
    fn to_f32(self) -> f32;
    fn from_f32(v: f32) -> Self;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

impl Element for i64 {
    const DTYPE: DType = DType::I64;
    fn to_f32(self) -> f32 {
        self as f32
    }
    fn from_f32(v: f32) -> Self {
        v as i64
    }
}

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_f32(self) -> f32 {
        if self {
            1.0
        } else {
            0.0
        }
    }
    fn from_f32(v: f32) -> Self {
        v != 0.0
    }
}
