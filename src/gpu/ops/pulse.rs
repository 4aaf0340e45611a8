//! Delay and PulsePad over zero-initialised device state (`kernels/pulse.cu`).

use cudarc::driver::CudaFunction;

use crate::gpu::op::{expect_io, launch, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::Dim;
use crate::pulse::{Delay, FrameLayout, PulsePad};

/// A stream end's kernel arguments (`stream_end` in `common.cuh`): whether
/// there is one, then its `Dim` as `(a, b, d, c)`; refused when it divides
/// by a non-positive number, which the kernel's division cannot take.
pub(super) fn end_args(what: &str, end: Option<Dim>) -> Result<[Arg; 5], GpuError> {
    let Some(e) = end else {
        return Ok([
            Arg::I32(0),
            Arg::I64(0),
            Arg::I64(0),
            Arg::I64(1),
            Arg::I64(0),
        ]);
    };
    let (a, b, d, c) = e.parts();
    if d <= 0 {
        return Err(GpuError::refused(
            what,
            format!("end {e} divides by a non-positive number"),
        ));
    }
    Ok([
        Arg::I32(1),
        Arg::I64(a),
        Arg::I64(b),
        Arg::I64(d),
        Arg::I64(c),
    ])
}

fn layout(shape: &[usize], axis: usize) -> Result<FrameLayout, GpuError> {
    FrameLayout::of(shape, axis).map_err(|e| GpuError::refused("pulse layout", e))
}

#[derive(Debug)]
struct DelayGpu {
    f: CudaFunction,
    lay: FrameLayout,
    b: usize,
    pout: usize,
    elem: usize,
}

impl GpuOp for DelayGpu {
    fn describe(&self) -> String {
        format!(
            "delay: 2 rings of {} frames x {} rows x {} values",
            self.b, self.lay.outer, self.lay.inner
        )
    }

    fn state_bytes(&self) -> usize {
        2 * self.lay.outer * self.b * self.lay.inner * self.elem
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("delay", io, 1, 1)?;
        let FrameLayout {
            outer,
            frames: p,
            inner,
        } = self.lay;
        let n = outer * self.pout.max(self.b) * inner;
        if n == 0 {
            return Ok(());
        }
        launch(
            cx,
            &self.f,
            Grid::linear(n),
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(io.state),
                Arg::Ptr(io.outs[0].ptr),
                Arg::Ptr(cx.step),
                Arg::U64(outer as u64),
                Arg::U64(p as u64),
                Arg::U64(inner as u64),
                Arg::U64(self.b as u64),
                Arg::U64(self.pout as u64),
            ],
        )
    }
}

#[derive(Debug)]
struct PulsePadGpu {
    f: CudaFunction,
    lay: FrameLayout,
    op: PulsePad,
    end: [Arg; 5],
}

impl GpuOp for PulsePadGpu {
    fn describe(&self) -> String {
        format!(
            "pulse pad begin {} (step counter on the device)",
            self.op.begin
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("pulse pad", io, 1, 1)?;
        let FrameLayout {
            outer,
            frames: p,
            inner,
        } = self.lay;
        let n = outer * p * inner;
        if n == 0 {
            return Ok(());
        }
        let [has_end, ea, eb, ed, ec] = self.end;
        launch(
            cx,
            &self.f,
            Grid::linear(n),
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(io.outs[0].ptr),
                Arg::Ptr(cx.step),
                Arg::Ptr(cx.stream_len),
                Arg::U64(outer as u64),
                Arg::U64(p as u64),
                Arg::U64(inner as u64),
                Arg::I64(self.op.delay as i64),
                Arg::I64(self.op.begin as i64),
                has_end,
                ea,
                eb,
                ed,
                ec,
                Arg::F32(self.op.value),
            ],
        )
    }
}

pub(super) fn register(r: &mut Builders) {
    r.add::<Delay>(build_delay);
    r.add::<PulsePad>(build_pad);
}

fn build_delay(d: &Delay, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let lay = layout(&cx.shape(0)?, d.axis)?;
    let elem = cx.inputs[0].dtype.size_of();
    if ![1, 2, 4, 8].contains(&elem) {
        return Err(GpuError::refused("delay", format!("{elem}-byte elements")));
    }
    Ok(Box::new(DelayGpu {
        f: cx.lib.function("pulse", &format!("delay_{elem}"))?,
        lay,
        b: d.delay + d.overlap,
        pout: lay.frames + d.overlap,
        elem,
    }))
}

fn build_pad(p: &PulsePad, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let suffix = cx.suffix(0)?;
    let lay = layout(&cx.shape(0)?, p.axis)?;
    Ok(Box::new(PulsePadGpu {
        f: cx.lib.function("pulse", &format!("pulse_pad_{suffix}"))?,
        lay,
        op: p.clone(),
        end: end_args("pulse pad", p.end)?,
    }))
}
