//! The `Op` trait: every operator answers its output facts and evaluates.

use std::any::Any;
use std::fmt;

use super::{OpResult, Tensor, TypedFact};

/// Per-node reusable buffers, so a steady-state step allocates nothing.
#[derive(Default, Debug)]
pub struct Scratch {
    bufs: [Vec<f32>; 4],
}

impl Scratch {
    /// One f32 buffer of `n` elements (contents unspecified).
    pub fn one(&mut self, n: usize) -> &mut [f32] {
        grow(&mut self.bufs[0], n)
    }

    /// Two disjoint f32 buffers.
    pub fn two(&mut self, a: usize, b: usize) -> (&mut [f32], &mut [f32]) {
        let [x, y, ..] = &mut self.bufs;
        (grow(x, a), grow(y, b))
    }

    /// Three disjoint f32 buffers.
    pub fn three(&mut self, a: usize, b: usize, c: usize) -> (&mut [f32], &mut [f32], &mut [f32]) {
        let [x, y, z, _] = &mut self.bufs;
        (grow(x, a), grow(y, b), grow(z, c))
    }

    /// Four disjoint f32 buffers.
    pub fn four(
        &mut self,
        a: usize,
        b: usize,
        c: usize,
        d: usize,
    ) -> (&mut [f32], &mut [f32], &mut [f32], &mut [f32]) {
        let [x, y, z, w] = &mut self.bufs;
        (grow(x, a), grow(y, b), grow(z, c), grow(w, d))
    }
}

fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// An operator.
///
/// `output_facts` and `eval` are written independently: `eval` computes its
/// output shapes from the tensors it is given and sizes `outputs` itself
/// (with [`Tensor::ensure`], which keeps buffers whose size did not change),
/// and the property tests check that the two always agree.
pub trait Op: fmt::Debug + Send + Sync + Any {
    /// The op kind, e.g. `"Conv1d"`.
    fn name(&self) -> &'static str;

    /// The output facts for these input facts, or why the inputs do not fit.
    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>>;

    /// Evaluates on concrete tensors into `outputs` (resized by the op).
    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()>;

    /// A fresh state for ops that remember across calls (pulse ops). `None`
    /// for pure ops.
    fn state(&self) -> Option<Box<dyn OpState>> {
        None
    }

    /// For the pulsifier: when each output frame along a streaming axis
    /// depends only on the same frame of the inputs (element-wise ops, norms
    /// and linears over other axes), the output's streaming axis. `axes`
    /// gives each input's streaming axis (`None` for inputs that do not
    /// stream). `None`, the default, means the op needs a dedicated pulse rule.
    fn frame_local_axis(&self, _inputs: &[&TypedFact], _axes: &[Option<usize>]) -> Option<usize> {
        None
    }

    /// Parameters, for `inspect` dumps.
    fn info(&self) -> String {
        String::new()
    }

    fn as_any(&self) -> &dyn Any;
}

/// Per-session state of a stateful op.
pub trait OpState: fmt::Debug + Send {
    fn eval(
        &mut self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()>;
    /// Back to the state of a fresh session (zeros).
    fn reset(&mut self);
    /// The total input length `S`, once the stream's end is known (ops that
    /// pad or append at the stream's end need it).
    fn set_stream_len(&mut self, _s: Option<i64>) {}
}

/// Evaluates an op once on fresh outputs (tests, one-off use).
pub fn eval_op(op: &dyn Op, inputs: &[&Tensor]) -> OpResult<Vec<Tensor>> {
    let mut outputs = Vec::new();
    let mut scratch = Scratch::default();
    match op.state() {
        Some(mut st) => st.eval(inputs, &mut outputs, &mut scratch)?,
        None => op.eval(inputs, &mut outputs, &mut scratch)?,
    }
    Ok(outputs)
}

/// Makes `outputs` hold exactly `n` tensors.
pub fn outputs_len(outputs: &mut Vec<Tensor>, n: usize) {
    if outputs.len() != n {
        outputs.resize_with(n, Tensor::empty);
    }
}

/// Implements `name` and `as_any` for an op type.
#[macro_export]
macro_rules! op_common {
    ($name:literal) => {
        fn name(&self) -> &'static str {
            $name
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    };
}
