//! GPU forms of the graph's ops, one file per op family. Each file
//! registers a builder per op type it handles (its `register`); the
//! translator looks a node's op type up in [`build`]. One builder per op
//! type.

pub mod attention;
mod attention_gemm;
pub mod chunked_attention;
pub mod conv;
pub mod copies_attention;
pub mod ctc;
pub mod elementwise;
pub mod gather;
pub mod kv_cache;
pub mod linear;
pub mod linear_fused;
mod linear_launch;
pub mod lstm;
pub mod norm;
pub mod pulse;
pub mod right_copies;
pub mod shape;
pub mod stft;
pub mod top_tokens;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::OnceLock;

use super::op::{BuildCx, GpuOp};
use super::GpuError;
use crate::ops::Op;

/// Builds the GPU form of an op of type `T` for the node's device-side facts
/// ([`BuildCx`]); an error when it cannot take these facts (the node then
/// runs on the CPU).
pub type Build<T> = fn(&T, &BuildCx) -> Result<Box<dyn GpuOp>, GpuError>;

type Erased = Box<dyn Fn(&dyn Op, &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> + Send + Sync>;

/// GPU builders by op type.
#[derive(Default)]
pub struct Builders(HashMap<TypeId, Erased>);

impl Builders {
    /// Registers `build` for the ops of type `T`; a second builder for the
    /// same type is a programming error.
    pub fn add<T: Op>(&mut self, build: Build<T>) {
        let erased: Erased = Box::new(move |op, cx| {
            let op = op
                .as_any()
                .downcast_ref::<T>()
                .expect("builders are looked up by the op's type");
            build(op, cx)
        });
        let twice = self.0.insert(TypeId::of::<T>(), erased).is_some();
        assert!(
            !twice,
            "two GPU builders for {}",
            std::any::type_name::<T>()
        );
    }
}

/// Every registered builder: one line per op file.
fn builders() -> &'static Builders {
    static BUILDERS: OnceLock<Builders> = OnceLock::new();
    BUILDERS.get_or_init(|| {
        let mut r = Builders::default();
        attention::register(&mut r);
        chunked_attention::register(&mut r);
        conv::register(&mut r);
        copies_attention::register(&mut r);
        ctc::register(&mut r);
        elementwise::register(&mut r);
        gather::register(&mut r);
        kv_cache::register(&mut r);
        linear::register(&mut r);
        lstm::register(&mut r);
        norm::register(&mut r);
        pulse::register(&mut r);
        right_copies::register(&mut r);
        shape::register(&mut r);
        stft::register(&mut r);
        top_tokens::register(&mut r);
        r
    })
}

/// The GPU form of `op`: `None` when its type has no GPU builder,
/// `Some(Err)` when the builder does not take these facts.
pub fn build(op: &dyn Op, cx: &BuildCx) -> Option<Result<Box<dyn GpuOp>, GpuError>> {
    let b = builders().0.get(&<dyn Any>::type_id(op.as_any()))?;
    Some(b(op, cx))
}
