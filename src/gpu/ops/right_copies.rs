//! RightCopies and its pulsed form on the GPU (`right_copies_N` in
//! `kernels/copy.cu`, by element size): one copy whose phase within a
//! chunk, in the pulsed form, comes from the device step counter, so a
//! captured chunk step replays it unchanged. The rows before the pulse come
//! from the Delay in front of it, a separate node.

use cudarc::driver::CudaFunction;

use crate::gpu::op::{expect_io, launch, long, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::right_copies::RightCopies;
use crate::pulse::PulsedRightCopies;

pub(super) fn register(r: &mut Builders) {
    r.add::<PulsedRightCopies>(|p, cx| build(&p.op, Some(p), cx));
    r.add::<RightCopies>(|op, cx| build(op, None, cx));
}

#[derive(Debug)]
struct RightCopiesGpu {
    f: CudaFunction,
    op: RightCopies,
    /// Sequences, output rows, input rows and width: `x [outer, have, d]`
    /// to `out [outer, rows, 2, d]`.
    outer: usize,
    rows: usize,
    have: usize,
    d: usize,
    /// `(pulse, delay + lag)` of the pulsed form.
    pulsed: Option<[i64; 2]>,
    /// The stream's end ([`super::pulse::end_args`]; none in the whole form).
    end: [Arg; 5],
}

impl GpuOp for RightCopiesGpu {
    fn describe(&self) -> String {
        format!(
            "{}right_copies {}x{} rows of {}, chunk {} right {}",
            if self.pulsed.is_some() { "pulsed " } else { "" },
            self.outer,
            self.rows,
            self.d,
            self.op.chunk,
            self.op.right
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("right copies", io, 1, 1)?;
        let n = self.outer * self.rows * 2 * self.d;
        if n == 0 {
            return Ok(());
        }
        // a null step pointer selects the whole form in the kernel
        let (step, [pulse, back]) = match self.pulsed {
            Some(p) => (cx.step, p),
            None => (0, [0; 2]),
        };
        let [has_end, ea, eb, ed, ec] = self.end;
        let size = |v: usize| Arg::U64(v as u64);
        let frames = |v: usize| Arg::I64(v as i64);
        launch(
            cx,
            &self.f,
            Grid::linear(n),
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(io.outs[0].ptr),
                Arg::Ptr(step),
                Arg::Ptr(cx.stream_len),
                size(self.outer),
                size(self.rows),
                size(self.have),
                size(self.d),
                frames(self.op.chunk),
                frames(self.op.right),
                Arg::I64(pulse),
                Arg::I64(back),
                has_end,
                ea,
                eb,
                ed,
                ec,
            ],
        )
    }
}

fn build(
    op: &RightCopies,
    pulsed: Option<&PulsedRightCopies>,
    cx: &BuildCx,
) -> Result<Box<dyn GpuOp>, GpuError> {
    let what = "right copies";
    if cx.inputs.len() != 1 || cx.outputs.len() != 1 {
        return Err(GpuError::arity(
            what,
            "1 and 1",
            cx.inputs.len(),
            cx.outputs.len(),
        ));
    }
    if op.chunk == 0 || op.right > op.chunk {
        return Err(GpuError::refused(
            what,
            format!("chunk {} right {}", op.chunk, op.right),
        ));
    }
    let dtype = cx.inputs[0].dtype;
    if cx.outputs[0].dtype != dtype {
        return Err(GpuError::mixed_dtypes(what));
    }
    let elem = dtype.size_of();
    if ![2, 4, 8].contains(&elem) {
        return Err(GpuError::refused(what, format!("{elem}-byte elements")));
    }
    let (x, out) = (cx.shape(0)?, cx.out_shape(0)?);
    let r = x.len();
    if r < 2 {
        return Err(GpuError::refused(what, format!("x {x:?} has no time axis")));
    }
    let (have, d) = (x[r - 2], x[r - 1]);
    let rows = match pulsed {
        Some(p) => p.pulse,
        None => have,
    };
    let mut want = x[..r - 2].to_vec();
    want.extend([rows, 2, d]);
    let rows_in = pulsed.map_or(have, |p| p.pulse.saturating_add(p.lag));
    if out != want || have != rows_in {
        return Err(GpuError::refused(
            what,
            format!("x {x:?} to {out:?}: expected {rows_in} rows to {want:?}"),
        ));
    }
    let end = super::pulse::end_args(what, pulsed.map(|p| p.len))?;
    let pulsed = match pulsed {
        Some(p) => Some([
            long("pulse", p.pulse)?,
            long("delay and lag", p.delay.saturating_add(p.lag))?,
        ]),
        None => None,
    };
    Ok(Box::new(RightCopiesGpu {
        f: cx.lib.function("copy", &format!("right_copies_{elem}"))?,
        op: *op,
        outer: x[..r - 2].iter().product(),
        rows,
        have,
        d,
        pulsed,
        end,
    }))
}
