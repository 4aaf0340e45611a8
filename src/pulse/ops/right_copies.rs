//! The pulsed form of [`RightCopies`]: each pulse's frames with the
//! frames one chunk later beside the first `right` of each chunk, held
//! back (`lag`) until those have arrived; the rows before the pulse come
//! from a Delay (`lag` rows of overlap).

use crate::op_common;
use crate::ops::right_copies::RightCopies;
use crate::ops::{
    contig, outputs_len, DType, Dim, Op, OpError, OpResult, OpState, Scratch, Tensor, TypedFact,
};

/// Input `x [P + lag, d]`: the `lag` frames before the pulse, then the
/// pulse (a leading batch axis allowed). Output `[P, 2, d]`, the frames
/// `lag` behind the input's end. `delay`: the input stream's delay; `len`:
/// its length.
#[derive(Debug, Clone, PartialEq)]
pub struct PulsedRightCopies {
    pub op: RightCopies,
    pub pulse: usize,
    pub delay: usize,
    pub lag: usize,
    pub len: Dim,
}

impl Op for PulsedRightCopies {
    op_common!("PulsedRightCopies");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        let mut out = self.op.output_facts(inputs)?;
        let t = inputs[0].rank() - 2;
        if inputs[0].shape[t].as_const() != Some((self.pulse + self.lag) as i64) {
            return Err(OpError::Shape(format!(
                "expected {} rows, got {}",
                self.pulse + self.lag,
                inputs[0]
            )));
        }
        out[0].shape[t] = Dim::n(self.pulse as i64);
        Ok(out)
    }

    fn eval(&self, _: &[&Tensor], _: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        Err(OpError::Other(
            "PulsedRightCopies keeps state: run it through its state".into(),
        ))
    }

    fn state(&self) -> Option<Box<dyn OpState>> {
        Some(Box::new(CopiesState {
            op: self.clone(),
            step: 0,
            end: None,
        }))
    }

    fn info(&self) -> String {
        format!(
            "{} pulse {} delay {} lag {}",
            self.op.info(),
            self.pulse,
            self.delay,
            self.lag
        )
    }
}

impl CopiesState {
    /// `out [.., P, 2, d]` from f32 `x [.., P + lag, d]`.
    fn fill(&self, x: &Tensor, out: &mut Tensor, first: i64, end: i64) -> OpResult<()> {
        let (p, lag) = (self.op.pulse, self.op.lag);
        let r = x.rank();
        let d = x.shape()[r - 1];
        let mut shape = [p, 2, d, 0];
        let rank = if r == 3 {
            shape = [x.shape()[0], p, 2, d];
            4
        } else {
            3
        };
        out.ensure(DType::F32, &shape[..rank]);
        let x = contig(x);
        let (xs, os) = (x.as_slice::<f32>()?, out.as_slice_mut::<f32>()?);
        let (xn, on) = ((p + lag) * d, 2 * p * d);
        for b in 0..os.len().checked_div(on).unwrap_or(0) {
            let (xb, ob) = (&xs[b * xn..(b + 1) * xn], &mut os[b * on..(b + 1) * on]);
            self.op.op.fill(xb, ob, d, first, end);
        }
        Ok(())
    }
}

/// Step counter and known stream end of a [`PulsedRightCopies`].
#[derive(Debug)]
struct CopiesState {
    op: PulsedRightCopies,
    step: u64,
    end: Option<i64>,
}

impl OpState for CopiesState {
    fn eval(
        &mut self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        _: &mut Scratch,
    ) -> OpResult<()> {
        let (p, lag) = (self.op.pulse, self.op.lag);
        let x = inputs.first().ok_or_else(|| OpError::InputCount {
            expected: "1".into(),
            got: 0,
        })?;
        let r = x.rank();
        if !(2..=3).contains(&r) || x.shape()[r - 2] != p + lag {
            return Err(OpError::Shape(format!(
                "expected [.., {}, d], got {:?}",
                p + lag,
                x.shape()
            )));
        }
        // input row r holds the frame at first + r; output row r is that frame
        let first = self.step as i64 * p as i64 - self.op.delay as i64 - lag as i64;
        self.step += 1;
        let end = self.end.unwrap_or(i64::MAX);
        if x.dtype() != DType::F32 {
            let mut tmp = Tensor::empty();
            self.fill(&x.cast(DType::F32), &mut tmp, first, end)?;
            outputs_len(outputs, 1);
            outputs[0] = tmp.cast(x.dtype());
            return Ok(());
        }
        outputs_len(outputs, 1);
        self.fill(x, &mut outputs[0], first, end)
    }

    fn reset(&mut self) {
        self.step = 0;
        self.end = None;
    }

    fn set_stream_len(&mut self, s: Option<i64>) {
        self.end = s.map(|s| self.op.len.eval(s).max(0));
    }
}
