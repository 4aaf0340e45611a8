//! Gather on the GPU (`gather_rows_N` in `kernels/copy.cu`, by element
//! size) when its indices are a constant: a window's right-context copies
//! (a fixed row table). Indices computed while the graph runs (a decoder's
//! tokens, a stream's positions) stay on the CPU, whose op reports an index
//! out of range as an error where a kernel could only read past the data.

use cudarc::driver::CudaFunction;

use crate::gpu::op::{expect_io, launch, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::gather::Gather;
use crate::ops::DType;

pub(super) fn register(r: &mut Builders) {
    r.add::<Gather>(build);
}

#[derive(Debug)]
struct GatherGpu {
    f: CudaFunction,
    /// `data [outer, n, inner]` to `out [outer, m, inner]`.
    outer: usize,
    n: usize,
    m: usize,
    inner: usize,
}

impl GpuOp for GatherGpu {
    fn describe(&self) -> String {
        format!(
            "gather {} of {} rows ({}x{} elements)",
            self.m, self.n, self.outer, self.inner
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("gather", io, 2, 1)?;
        let total = self.outer * self.m * self.inner;
        if total == 0 {
            return Ok(());
        }
        let size = |v: usize| Arg::U64(v as u64);
        launch(
            cx,
            &self.f,
            Grid::linear(total),
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(io.ins[1].ptr),
                Arg::Ptr(io.outs[0].ptr),
                size(self.outer),
                size(self.n),
                size(self.m),
                size(self.inner),
            ],
        )
    }
}

fn build(op: &Gather, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let what = "gather";
    if cx.inputs.len() != 2 || cx.outputs.len() != 1 {
        return Err(GpuError::arity(
            what,
            "2 and 1",
            cx.inputs.len(),
            cx.outputs.len(),
        ));
    }
    let Some(idx) = cx.consts.get(1).copied().flatten() else {
        return Err(GpuError::refused(
            what,
            "indices computed at run time (checked on the CPU)",
        ));
    };
    let (data, out) = (cx.shape(0)?, cx.out_shape(0)?);
    let rank = data.len() as isize;
    if rank == 0 || op.axis < -rank || op.axis >= rank {
        return Err(GpuError::refused(
            what,
            format!("axis {} of rank {rank}", op.axis),
        ));
    }
    let axis = op.axis.rem_euclid(rank) as usize;
    let n = data[axis];
    let iv = match (idx.dtype(), idx.to_vec::<i64>()) {
        (DType::I64, Ok(v)) => v,
        _ => return Err(GpuError::refused(what, "indices that are not i64")),
    };
    if let Some(bad) = iv.iter().find(|&&i| i < -(n as i64) || i >= n as i64) {
        return Err(GpuError::refused(
            what,
            format!("index {bad} out of range for {n} rows"),
        ));
    }
    let want: Vec<usize> = data[..axis]
        .iter()
        .chain(idx.shape())
        .chain(&data[axis + 1..])
        .copied()
        .collect();
    if out != want {
        return Err(GpuError::refused(
            what,
            format!("data {data:?} to {out:?}: expected {want:?}"),
        ));
    }
    let dtype = cx.inputs[0].dtype;
    if cx.outputs[0].dtype != dtype || cx.inputs[1].dtype != DType::I64 {
        return Err(GpuError::mixed_dtypes(what));
    }
    let elem = dtype.size_of();
    if ![1, 2, 4, 8].contains(&elem) {
        return Err(GpuError::refused(what, format!("{elem}-byte elements")));
    }
    Ok(Box::new(GatherGpu {
        f: cx.lib.function("copy", &format!("gather_rows_{elem}"))?,
        outer: data[..axis].iter().product(),
        n,
        m: iv.len(),
        inner: data[axis + 1..].iter().product(),
    }))
}
