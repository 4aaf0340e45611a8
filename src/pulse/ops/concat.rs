//! PulsedSameAxisConcat: a constant prefix and/or suffix on the streaming axis.

use crate::op_common;
use crate::ops::{
    checks, outputs_len, DType, Dim, Op, OpError, OpResult, OpState, Scratch, Tensor, TypedFact,
};

use super::frames::FrameLayout;

/// Writes `prefix` over the frames at logical positions `0..c` and `suffix`
/// over `c+len(S) ..`; other frames pass through (the input is the stream
/// already delayed by `c` frames). Its output fact follows the streaming
/// input, never the short constants.
#[derive(Debug, Clone)]
pub struct PulsedSameAxisConcat {
    pub axis: usize,
    pub pulse: usize,
    pub delay: usize,
    pub prefix: Option<Tensor>,
    pub suffix: Option<Tensor>,
    /// Length of the streaming input (without the constants).
    pub input_len: Dim,
}

impl PulsedSameAxisConcat {
    fn prefix_len(&self) -> usize {
        self.prefix.as_ref().map_or(0, |p| p.shape()[self.axis])
    }
}

impl Op for PulsedSameAxisConcat {
    op_common!("PulsedSameAxisConcat");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        checks::input_count(inputs, 1)?;
        let f = inputs[0];
        checks::rank_at_least(f, 0, self.axis + 1)?;
        for c in [&self.prefix, &self.suffix].into_iter().flatten() {
            let cf = TypedFact::of(c);
            checks::same_dtype(f, &cf, 0)?;
            let other_axes_match = cf.rank() == f.rank()
                && (0..f.rank()).all(|a| a == self.axis || cf.shape[a] == f.shape[a]);
            if !other_axes_match {
                return Err(OpError::Shape(format!(
                    "constant {cf} does not fit stream {f}"
                )));
            }
        }
        Ok(vec![f.clone()])
    }

    fn eval(&self, _: &[&Tensor], _: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        Err(OpError::Other(
            "PulsedSameAxisConcat keeps state: run it through its state".into(),
        ))
    }

    fn state(&self) -> Option<Box<dyn OpState>> {
        Some(Box::new(ConcatState {
            op: self.clone(),
            step: 0,
            s: None,
        }))
    }

    fn info(&self) -> String {
        let n = |t: &Option<Tensor>| t.as_ref().map_or(0, |t| t.shape()[self.axis]);
        format!(
            "axis {} prefix {} suffix {} delay {}",
            self.axis,
            n(&self.prefix),
            n(&self.suffix),
            self.delay
        )
    }
}

/// Step counter and known stream length of a [`PulsedSameAxisConcat`].
#[derive(Debug)]
pub struct ConcatState {
    op: PulsedSameAxisConcat,
    step: u64,
    s: Option<i64>,
}

impl OpState for ConcatState {
    fn eval(
        &mut self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        _: &mut Scratch,
    ) -> OpResult<()> {
        checks::input_count(inputs, 1)?;
        let x = inputs[0];
        let lay = FrameLayout::of(x.shape(), self.op.axis)?;
        outputs_len(outputs, 1);
        outputs[0].copy_from(x);
        let first = self.step as i64 * lay.frames as i64 - self.op.delay as i64;
        self.step += 1;
        let c = self.op.prefix_len() as i64;
        let suffix_start = self.s.map(|s| c + self.op.input_len.eval(s));
        let out = &mut outputs[0];
        for k in 0..lay.frames {
            let i = first + k as i64;
            let (src, at) = if i >= 0 && i < c {
                (self.op.prefix.as_ref(), i as usize)
            } else if let (Some(st), Some(suf)) = (suffix_start, self.op.suffix.as_ref()) {
                let j = i - st;
                if j >= 0 && (j as usize) < suf.shape()[self.op.axis] {
                    (Some(suf), j as usize)
                } else {
                    continue;
                }
            } else {
                continue;
            };
            let Some(src) = src else { continue };
            copy_frame(src, at, out, k, lay, self.op.axis)?;
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.step = 0;
    }

    fn set_stream_len(&mut self, s: Option<i64>) {
        self.s = s;
    }
}

fn copy_frame(
    src: &Tensor,
    f: usize,
    out: &mut Tensor,
    k: usize,
    lay: FrameLayout,
    axis: usize,
) -> OpResult<()> {
    let sl = FrameLayout::of(src.shape(), axis)?;
    macro_rules! go {
        ($t:ty) => {{
            let s: &[$t] = src.as_slice()?;
            let o: &mut [$t] = out.as_slice_mut()?;
            for blk in 0..lay.outer {
                let (a, b) = (sl.at(blk, f), lay.at(blk, k));
                o[b..b + lay.inner].copy_from_slice(&s[a..a + lay.inner]);
            }
        }};
    }
    match out.dtype() {
        DType::F32 => go!(f32),
        DType::F16 => go!(half::f16),
        DType::BF16 => go!(half::bf16),
        DType::I64 => go!(i64),
        DType::Bool => go!(bool),
    }
    Ok(())
}
