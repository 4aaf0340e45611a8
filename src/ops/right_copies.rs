//! Right-context copies along a stream (Emformer's right context): beside
//! every frame, a slot that holds, for the first `right` frames of each
//! chunk, the frame one chunk later. So a chunk's slots hold copies of the
//! `right` frames after it, which [`super::copies_attention::CopiesAttention`]
//! lets that chunk alone see, in every layer, at the latency of one
//! look-ahead. Its pulse rule: `pulse/rules/copies.rs`.

use super::checks::{float, input_count, rank_at_least};
use super::{contig, outputs_len, DType, Dim, Op, OpError, OpResult, Scratch, Tensor, TypedFact};
use crate::op_common;

/// Input `x [.., T, d]` (time on the second axis from the end); output
/// `[.., T, 2, d]`: `[i, 0]` is frame `i`, `[i, 1]` frame `i + chunk` when
/// `i` is among the first `right` frames of its chunk and that frame
/// exists, else zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RightCopies {
    /// Frames per chunk.
    pub chunk: usize,
    /// Frames a chunk looks past its end (at most `chunk`).
    pub right: usize,
}

impl RightCopies {
    fn check_params(&self) -> OpResult<()> {
        if self.chunk == 0 || self.right > self.chunk {
            return Err(OpError::Param(format!(
                "right-context copies need 1 <= right {} <= chunk {}",
                self.right, self.chunk
            )));
        }
        Ok(())
    }

    /// Whether the slot of the frame at `pos` holds a copy (of `pos + chunk`).
    pub fn copies_at(&self, pos: i64) -> bool {
        (pos.rem_euclid(self.chunk as i64) as usize) < self.right
    }

    /// Fills `out [rows, 2, d]` from `x [rows + extra, d]`, whose row `r`
    /// is the frame at `first + r`; slots of frames whose copy is not in
    /// `x` or lies at or past `end` are zeros.
    pub(crate) fn fill(&self, x: &[f32], out: &mut [f32], d: usize, first: i64, end: i64) {
        let rows = out.len() / (2 * d);
        let have = x.len() / d;
        for r in 0..rows {
            let pos = first + r as i64;
            let (frame, slot) = out[2 * r * d..(2 * r + 2) * d].split_at_mut(d);
            frame.copy_from_slice(&x[r * d..(r + 1) * d]);
            let src = r + self.chunk;
            if self.copies_at(pos) && src < have && pos + (self.chunk as i64) < end {
                slot.copy_from_slice(&x[src * d..(src + 1) * d]);
            } else {
                slot.fill(0.0);
            }
        }
    }
}

impl Op for RightCopies {
    op_common!("RightCopies");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        self.check_params()?;
        input_count(inputs, 1)?;
        rank_at_least(inputs[0], 0, 2)?;
        float(inputs[0], 0)?;
        let mut shape = inputs[0].shape.clone();
        shape.insert(shape.len() - 1, Dim::n(2));
        Ok(vec![TypedFact::new(inputs[0].dtype, shape)])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        let facts = [TypedFact::of(inputs[0])];
        self.output_facts(&[&facts[0]])?;
        let x = contig(inputs[0]).cast(DType::F32);
        let shape = x.shape().to_vec();
        let (t, d) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        let mut out_shape = shape.clone();
        out_shape.insert(shape.len() - 1, 2);
        let mut out = Tensor::zeros(DType::F32, &out_shape);
        let xs = x.as_slice::<f32>()?;
        let os = out.as_slice_mut::<f32>()?;
        let seqs = xs.len().checked_div(t * d).unwrap_or(0);
        for b in 0..seqs {
            let xb = &xs[b * t * d..(b + 1) * t * d];
            let ob = &mut os[2 * b * t * d..2 * (b + 1) * t * d];
            self.fill(xb, ob, d, 0, t as i64);
        }
        outputs_len(outputs, 1);
        outputs[0] = out.cast(inputs[0].dtype());
        Ok(())
    }

    fn info(&self) -> String {
        format!("chunk {} right {}", self.chunk, self.right)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::eval_op;

    #[test]
    fn a_chunks_first_slots_copy_the_next_chunk() {
        let x = Tensor::from_vec(vec![7, 1], (0..7).map(|v| v as f32 + 1.0).collect()).unwrap();
        let y = eval_op(&RightCopies { chunk: 3, right: 2 }, &[&x]).unwrap();
        assert_eq!(y[0].shape(), &[7, 2, 1]);
        // frame i, then frame i + 3 for the first two of each chunk (frames
        // 0, 1, 3, 4, 6), zeros past the end
        let want = [1., 4., 2., 5., 3., 0., 4., 7., 5., 0., 6., 0., 7., 0.];
        assert_eq!(y[0].to_vec::<f32>().unwrap(), want);
    }

    #[test]
    fn batches_are_copied_apart() {
        let x = Tensor::from_vec(vec![2, 2, 1], vec![1f32, 2., 3., 4.]).unwrap();
        let y = eval_op(&RightCopies { chunk: 1, right: 1 }, &[&x]).unwrap();
        assert_eq!(
            y[0].to_vec::<f32>().unwrap(),
            vec![1., 2., 2., 0., 3., 4., 4., 0.]
        );
    }

    #[test]
    fn a_look_ahead_past_the_chunk_is_refused() {
        let f = TypedFact::new(DType::F32, [Dim::s(), Dim::n(4)]);
        let op = RightCopies { chunk: 2, right: 3 };
        assert!(matches!(op.output_facts(&[&f]), Err(OpError::Param(_))));
        let op = RightCopies { chunk: 2, right: 2 };
        let out = op.output_facts(&[&f]).unwrap();
        assert_eq!(out[0].shape, vec![Dim::s(), Dim::n(2), Dim::n(4)]);
    }
}
