//! Delay: keeps the last frames of a stream in a zero-initialised ring
//! buffer, to delay the stream and to give windowed ops their past frames.

use crate::op_common;
use crate::ops::{
    checks, outputs_len, DType, Dim, Op, OpError, OpResult, OpState, Scratch, StorageElement,
    Tensor, TypedFact,
};

use super::frames::FrameLayout;

/// Delays a stream by `delay` frames and prepends `overlap` further past
/// frames to each pulse: with input frames `t0 .. t0+P`, the output holds
/// `t0-delay-overlap .. t0+P-delay` (`P + overlap` frames). Frames before the
/// stream start come out as zeros.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delay {
    pub axis: usize,
    pub delay: usize,
    pub overlap: usize,
}

impl Op for Delay {
    op_common!("Delay");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        checks::input_count(inputs, 1)?;
        let f = inputs[0];
        checks::rank_at_least(f, 0, self.axis + 1)?;
        let mut out = f.clone();
        out.shape[self.axis] = f.shape[self.axis]
            .add(&Dim::n(self.overlap as i64))
            .expect("adding a number");
        Ok(vec![out])
    }

    fn eval(&self, _: &[&Tensor], _: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        Err(OpError::Other(
            "Delay keeps state: run it through its state".into(),
        ))
    }

    fn state(&self) -> Option<Box<dyn OpState>> {
        Some(Box::new(DelayState {
            op: self.clone(),
            ring: None,
            pos: 0,
        }))
    }

    fn info(&self) -> String {
        format!(
            "axis {} delay {} overlap {}",
            self.axis, self.delay, self.overlap
        )
    }
}

/// The ring buffer of a [`Delay`]: `[outer, delay+overlap, inner]` frames,
/// `pos` the oldest.
#[derive(Debug)]
pub struct DelayState {
    op: Delay,
    ring: Option<Tensor>,
    pos: usize,
}

impl OpState for DelayState {
    fn eval(
        &mut self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        _: &mut Scratch,
    ) -> OpResult<()> {
        checks::input_count(inputs, 1)?;
        let x = inputs[0];
        let lay = FrameLayout::of(x.shape(), self.op.axis)?;
        let b = self.op.delay + self.op.overlap;
        let ring_shape_ok = self
            .ring
            .as_ref()
            .is_some_and(|r| r.dtype() == x.dtype() && r.shape() == [lay.outer, b, lay.inner]);
        if !ring_shape_ok {
            // first step, or a different pulse shape: start from silence
            self.ring = Some(Tensor::zeros(x.dtype(), &[lay.outer, b, lay.inner]));
            self.pos = 0;
        }
        let ring = self.ring.as_mut().expect("set above");
        let mut shape = [0usize; 8];
        let r = x.rank();
        if r > 8 {
            return Err(OpError::Shape("rank above 8".into()));
        }
        shape[..r].copy_from_slice(x.shape());
        shape[self.op.axis] = lay.frames + self.op.overlap;
        outputs_len(outputs, 1);
        outputs[0].ensure(x.dtype(), &shape[..r]);
        let x = crate::ops::contig(x);
        let out = &mut outputs[0];
        self.pos = delay_step(&x, ring, out, lay, b, self.op.overlap, self.pos)?;
        Ok(())
    }

    fn reset(&mut self) {
        self.ring = None;
        self.pos = 0;
    }
}

fn delay_step(
    x: &Tensor,
    ring: &mut Tensor,
    out: &mut Tensor,
    lay: FrameLayout,
    b: usize,
    overlap: usize,
    pos: usize,
) -> OpResult<usize> {
    macro_rules! go {
        ($t:ty) => {
            run::<$t>(
                x.as_slice()?,
                ring.as_slice_mut()?,
                out.as_slice_mut()?,
                lay,
                b,
                overlap,
                pos,
            )
        };
    }
    Ok(match x.dtype() {
        DType::F32 => go!(f32),
        DType::F16 => go!(half::f16),
        DType::BF16 => go!(half::bf16),
        DType::I64 => go!(i64),
        DType::Bool => go!(bool),
    })
}

/// One step over typed slices; returns the new oldest position.
fn run<T: StorageElement>(
    x: &[T],
    ring: &mut [T],
    out: &mut [T],
    lay: FrameLayout,
    b: usize,
    overlap: usize,
    pos: usize,
) -> usize {
    let (p, inner) = (lay.frames, lay.inner);
    let pout = p + overlap;
    let ring_lay = FrameLayout {
        outer: lay.outer,
        frames: b,
        inner,
    };
    let out_lay = FrameLayout {
        outer: lay.outer,
        frames: pout,
        inner,
    };
    for o in 0..lay.outer {
        // output = (ring, oldest first) ++ input, first `pout` frames
        for k in 0..pout {
            let dst = out_lay.at(o, k);
            if k < b {
                let src = ring_lay.at(o, (pos + k) % b);
                out[dst..dst + inner].copy_from_slice(&ring[src..src + inner]);
            } else {
                let src = lay.at(o, k - b);
                out[dst..dst + inner].copy_from_slice(&x[src..src + inner]);
            }
        }
        // the newest `b` frames of (ring ++ input) become the ring
        if b > 0 {
            for k in 0..p.min(b) {
                let f = p - p.min(b) + k;
                let dst = ring_lay.at(o, (pos + k) % b);
                let src = lay.at(o, f);
                ring[dst..dst + inner].copy_from_slice(&x[src..src + inner]);
            }
        }
    }
    if b == 0 {
        0
    } else {
        (pos + p.min(b)) % b
    }
}
