//! Normalisations and reductions along axes (`kernels/norm.cu`): LayerNorm,
//! BatchNorm, Softmax / LogSoftmax, Reduce and ArgMax.
//!
//! Every one of them sees its input as `(outer, n, inner)` around the axis
//! it works along. Rows along the last axis (`inner == 1`) of at least 32
//! values get a warp each, or a whole block when long; otherwise one thread
//! takes each `(outer, inner)` lane (the last axis of a 29-token vocabulary,
//! or any other axis), walking it in the CPU's order.

use cudarc::driver::CudaFunction;

use crate::gpu::op::{expect_io, launch, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx};
use crate::gpu::ops::Builders;
use crate::gpu::tensor::float_suffix;
use crate::gpu::GpuError;
use crate::ops::norm::{split_at_axis, BatchNorm, LayerNorm};
use crate::ops::reduce::{ArgMax, Reduce, ReduceOp};
use crate::ops::shape::resolve_axis;
use crate::ops::softmax::{LogSoftmax, Softmax};
use crate::ops::DType;

/// Threads per block of every kernel here.
const BLOCK: u32 = 256;
/// Rows longer than this get a block each instead of a warp.
const WIDE_FROM: usize = 1024;
/// The largest grid the kernels are launched with (CUDA's x limit).
const MAX_BLOCKS: usize = i32::MAX as usize;

/// How the kernel's threads cover the `(outer, n, inner)` split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// `*_rows` kernels: a warp (or a block when `wide`) per row of `n`.
    Rows { wide: bool },
    /// `*_cols` kernels: a thread per `(outer, inner)` lane.
    Cols,
    /// One thread per element (BatchNorm).
    Elements,
}

/// One launch of a `kernels/norm.cu` kernel; the arguments are the op's
/// inputs (`nulls` null pointers after the first `ins`), its output, the
/// split, `extra` and, for row kernels, whether rows are block-wide.
#[derive(Debug, Clone)]
pub(crate) struct AxisGpu {
    what: String,
    f: CudaFunction,
    ins: usize,
    nulls: usize,
    outer: usize,
    n: usize,
    inner: usize,
    walk: Walk,
    extra: Option<Arg>,
    /// For kernels that take one (layer norm), the fused activation's
    /// unary code, -1 for none.
    act: Option<i32>,
}

impl AxisGpu {
    fn grid(&self) -> Grid {
        match self.walk {
            Walk::Rows { wide: true } => Grid::blocks(self.outer as u32, BLOCK),
            Walk::Rows { wide: false } => {
                Grid::blocks(self.outer.div_ceil(BLOCK as usize / 32) as u32, BLOCK)
            }
            Walk::Cols => Grid::linear(self.outer * self.inner),
            Walk::Elements => Grid::linear(self.outer * self.n * self.inner),
        }
    }
}

impl GpuOp for AxisGpu {
    fn describe(&self) -> String {
        let walk = match self.walk {
            Walk::Rows { wide: true } => "a block per row",
            Walk::Rows { wide: false } => "a warp per row",
            Walk::Cols => "a thread per lane",
            Walk::Elements => "a thread per element",
        };
        let act = match self.act {
            Some(a) if a >= 0 => " + fused activation",
            _ => "",
        };
        format!(
            "{} (outer {}, n {}, inner {}; {walk}){act}",
            self.what, self.outer, self.n, self.inner
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io(&self.what, io, self.ins, 1)?;
        if io.outs[0].is_empty() {
            return Ok(());
        }
        let mut args = [Arg::U64(0); 13];
        let mut k = 0;
        let ptrs = io.ins[..self.ins].iter().map(|t| t.ptr);
        let ptrs = ptrs.chain(std::iter::repeat_n(0, self.nulls));
        for p in ptrs.chain([io.outs[0].ptr]) {
            args[k] = Arg::Ptr(p);
            k += 1;
        }
        let (outer, n, inner) = (self.outer as u64, self.n as u64, self.inner as u64);
        let tail: [Option<Arg>; 4] = match self.walk {
            Walk::Rows { wide } => [
                Some(Arg::U64(outer)),
                Some(Arg::U64(n)),
                self.extra,
                Some(Arg::I32(wide as i32)),
            ],
            Walk::Cols | Walk::Elements => [
                Some(Arg::U64(outer)),
                Some(Arg::U64(n)),
                Some(Arg::U64(inner)),
                self.extra,
            ],
        };
        for a in tail.into_iter().flatten().chain(self.act.map(Arg::I32)) {
            args[k] = a;
            k += 1;
        }
        launch(cx, &self.f, self.grid(), &args[..k])
    }
}

impl AxisGpu {
    /// With an activation after it (an `elementwise.cu` unary code), for
    /// the kernels that take one (layer norm); the rewrites fuse it.
    pub(crate) fn with_activation(&self, code: i32) -> Option<AxisGpu> {
        (self.act == Some(-1)).then(|| AxisGpu {
            act: Some(code),
            ..self.clone()
        })
    }
}

/// The kernel walk for a split: rows when the axis is the last and long
/// enough to keep a warp busy, lanes otherwise.
fn walk_of(n: usize, inner: usize) -> Walk {
    if inner == 1 && n >= 32 {
        Walk::Rows {
            wide: n > WIDE_FROM,
        }
    } else {
        Walk::Cols
    }
}

/// `{base}_{rows|cols}_{suffix}` (`{base}_{suffix}` for element kernels).
fn kernel_name(base: &str, walk: Walk, suffix: &str) -> String {
    match walk {
        Walk::Rows { .. } => format!("{base}_rows_{suffix}"),
        Walk::Cols => format!("{base}_cols_{suffix}"),
        Walk::Elements => format!("{base}_{suffix}"),
    }
}

fn err(what: &str, why: impl std::fmt::Display) -> GpuError {
    GpuError::refused(what, why)
}

/// The float kernel suffix when inputs `0..ins` share one float storage
/// dtype and output 0 has `out` (`None`: that same dtype).
fn float_io(
    cx: &BuildCx,
    what: &str,
    ins: usize,
    out: Option<DType>,
) -> Result<&'static str, GpuError> {
    if cx.inputs.len() != ins || cx.outputs.len() != 1 {
        return Err(err(
            what,
            format!(
                "{} inputs and {} outputs (expected {ins} and 1)",
                cx.inputs.len(),
                cx.outputs.len()
            ),
        ));
    }
    let dt = cx.inputs[0].dtype;
    let suffix = float_suffix(dt).map_err(|_| err(what, format!("no float kernel for {dt}")))?;
    if let Some(i) = (1..ins).find(|&i| cx.inputs[i].dtype != dt) {
        return Err(err(
            what,
            format!("input {i} is {}, input 0 {dt}", cx.inputs[i].dtype),
        ));
    }
    let want = out.unwrap_or(dt);
    if cx.outputs[0].dtype != want {
        return Err(err(
            what,
            format!("output is {}, expected {want}", cx.outputs[0].dtype),
        ));
    }
    Ok(suffix)
}

/// `(outer, n, inner)` around `axis` of input 0.
fn split(cx: &BuildCx, what: &str, axis: isize) -> Result<(usize, usize, usize), GpuError> {
    let shape = cx.shape(0)?;
    let a = resolve_axis(axis, shape.len()).map_err(|e| err(what, e))?;
    Ok(split_at_axis(&shape, a))
}

/// [`axis_op`], boxed.
#[allow(clippy::too_many_arguments)]
fn axis_gpu(
    cx: &BuildCx,
    what: String,
    kernel: String,
    ins: usize,
    nulls: usize,
    (outer, n, inner): (usize, usize, usize),
    walk: Walk,
    extra: Option<Arg>,
) -> Result<Box<dyn GpuOp>, GpuError> {
    Ok(Box::new(axis_op(
        cx,
        what,
        kernel,
        ins,
        nulls,
        (outer, n, inner),
        walk,
        extra,
    )?))
}

/// Checks that `(outer, n, inner)` fits a launch and makes the op.
#[allow(clippy::too_many_arguments)]
fn axis_op(
    cx: &BuildCx,
    what: String,
    kernel: String,
    ins: usize,
    nulls: usize,
    (outer, n, inner): (usize, usize, usize),
    walk: Walk,
    extra: Option<Arg>,
) -> Result<AxisGpu, GpuError> {
    if matches!(walk, Walk::Rows { .. }) && outer > MAX_BLOCKS {
        return Err(err(&what, format!("{outer} rows (at most {MAX_BLOCKS})")));
    }
    let f = cx.lib.function("norm", &kernel)?;
    Ok(AxisGpu {
        what,
        f,
        ins,
        nulls,
        outer,
        n,
        inner,
        walk,
        extra,
        act: None,
    })
}

fn build_layer_norm(op: &LayerNorm, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let ins = cx.inputs.len();
    if ins != 1 && ins != 3 {
        return Err(err("LayerNorm", format!("{ins} inputs (expected 1 or 3)")));
    }
    let suffix = float_io(cx, "LayerNorm", ins, None)?;
    let dims = split(cx, "LayerNorm", op.axis)?;
    for i in 1..ins {
        if cx.shape(i)? != [dims.1] {
            return Err(err(
                "LayerNorm",
                format!("parameter {i} is not [{}]: {}", dims.1, cx.inputs[i]),
            ));
        }
    }
    let walk = walk_of(dims.1, dims.2);
    let mut g = axis_op(
        cx,
        format!("layer_norm axis {} eps {}", op.axis, op.eps),
        kernel_name("layer_norm", walk, suffix),
        ins,
        if ins == 1 { 2 } else { 0 },
        dims,
        walk,
        Some(Arg::F32(op.eps)),
    )?;
    g.act = Some(-1);
    Ok(Box::new(g))
}

fn build_batch_norm(op: &BatchNorm, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let suffix = float_io(cx, "BatchNorm", 5, None)?;
    let dims = split(cx, "BatchNorm", op.axis)?;
    for i in 1..5 {
        if cx.shape(i)? != [dims.1] {
            return Err(err(
                "BatchNorm",
                format!("parameter {i} is not [{}]: {}", dims.1, cx.inputs[i]),
            ));
        }
    }
    axis_gpu(
        cx,
        format!("batch_norm axis {} eps {}", op.axis, op.eps),
        kernel_name("batch_norm", Walk::Elements, suffix),
        5,
        0,
        dims,
        Walk::Elements,
        Some(Arg::F32(op.eps)),
    )
}

fn build_softmax(axis: isize, log: bool, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let what = if log { "LogSoftmax" } else { "Softmax" };
    let suffix = float_io(cx, what, 1, None)?;
    let dims = split(cx, what, axis)?;
    let walk = walk_of(dims.1, dims.2);
    axis_gpu(
        cx,
        format!("{} axis {axis}", what.to_lowercase()),
        kernel_name("softmax", walk, suffix),
        1,
        0,
        dims,
        walk,
        Some(Arg::I32(log as i32)),
    )
}

/// `(outer, n, inner)` when the reduced axes, size-1 axes aside, form one
/// run of consecutive axes (so the reduced elements of each output lie `inner`
/// apart); `None` when kept axes come between them.
fn reduce_split(shape: &[usize], mask: &[bool]) -> Option<(usize, usize, usize)> {
    let prod = |s: &[usize]| s.iter().product::<usize>();
    let reduced: Vec<usize> = (0..shape.len())
        .filter(|&i| mask[i] && shape[i] != 1)
        .collect();
    let (Some(&lo), Some(&hi)) = (reduced.first(), reduced.last()) else {
        return Some((prod(shape), 1, 1));
    };
    if (lo..=hi).any(|i| !mask[i] && shape[i] != 1) {
        return None;
    }
    Some((
        prod(&shape[..lo]),
        prod(&shape[lo..=hi]),
        prod(&shape[hi + 1..]),
    ))
}

fn build_reduce(op: &Reduce, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let what = format!("reduce {:?} axes {:?}", op.op, op.axes);
    let shape = cx.shape(0)?;
    let mut mask = vec![op.axes.is_empty(); shape.len()];
    for &a in &op.axes {
        let i = resolve_axis(a, shape.len()).map_err(|e| err(&what, e))?;
        if std::mem::replace(&mut mask[i], true) {
            return Err(err(&what, format!("axis {a} appears twice")));
        }
    }
    let dims = reduce_split(&shape, &mask).ok_or_else(|| {
        err(
            &what,
            format!("the reduced axes of {shape:?} are not consecutive"),
        )
    })?;
    let code = match op.op {
        ReduceOp::Sum => 0,
        ReduceOp::Mean => 1,
        ReduceOp::Max => 2,
    };
    if op.op != ReduceOp::Sum && dims.1 == 0 {
        return Err(err(&what, "an empty reduction"));
    }
    let (kernel, walk) = if cx.inputs.first().map(|f| f.dtype) == Some(DType::I64) {
        if op.op == ReduceOp::Mean {
            return Err(err(&what, "mean of i64"));
        }
        let outs: Vec<DType> = cx.outputs.iter().map(|f| f.dtype).collect();
        if cx.inputs.len() != 1 || outs != [DType::I64] {
            return Err(err(&what, "expected one i64 input and one i64 output"));
        }
        ("reduce_i64".to_string(), Walk::Cols)
    } else {
        let suffix = float_io(cx, &what, 1, None)?;
        let walk = walk_of(dims.1, dims.2);
        (kernel_name("reduce", walk, suffix), walk)
    };
    axis_gpu(cx, what, kernel, 1, 0, dims, walk, Some(Arg::I32(code)))
}

fn build_argmax(op: &ArgMax, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let suffix = float_io(cx, "ArgMax", 1, Some(DType::I64))?;
    let dims = split(cx, "ArgMax", op.axis)?;
    if dims.1 == 0 {
        return Err(err("ArgMax", "an empty axis"));
    }
    let walk = walk_of(dims.1, dims.2);
    axis_gpu(
        cx,
        format!("argmax axis {}", op.axis),
        kernel_name("argmax", walk, suffix),
        1,
        0,
        dims,
        walk,
        None,
    )
}

pub(super) fn register(r: &mut Builders) {
    r.add::<LayerNorm>(build_layer_norm);
    r.add::<BatchNorm>(build_batch_norm);
    r.add::<Softmax>(|op, cx| build_softmax(op.axis, false, cx));
    r.add::<LogSoftmax>(|op, cx| build_softmax(op.axis, true, cx));
    r.add::<Reduce>(build_reduce);
    r.add::<ArgMax>(build_argmax);
}

#[cfg(test)]
mod tests {
    use super::{reduce_split, walk_of, Walk};

    #[test]
    fn reduced_axes_split_into_one_run() {
        assert_eq!(reduce_split(&[8, 256], &[false, true]), Some((8, 256, 1)));
        assert_eq!(reduce_split(&[8, 256], &[true, false]), Some((1, 8, 256)));
        assert_eq!(reduce_split(&[8, 256], &[true, true]), Some((1, 2048, 1)));
        assert_eq!(
            reduce_split(&[2, 3, 4, 5], &[false, true, true, false]),
            Some((2, 12, 5))
        );
        // size-1 axes between reduced ones do not break the run
        assert_eq!(
            reduce_split(&[2, 3, 1, 4], &[false, true, false, true]),
            Some((2, 12, 1))
        );
        assert_eq!(reduce_split(&[2, 3, 4], &[true, false, true]), None);
        assert_eq!(
            reduce_split(&[2, 1, 4], &[false, true, false]),
            Some((8, 1, 1))
        );
        assert_eq!(reduce_split(&[], &[]), Some((1, 1, 1)));
        assert_eq!(reduce_split(&[3, 0], &[false, true]), Some((3, 0, 1)));
    }

    #[test]
    fn walks() {
        assert_eq!(walk_of(256, 1), Walk::Rows { wide: false });
        assert_eq!(walk_of(4096, 1), Walk::Rows { wide: true });
        assert_eq!(walk_of(29, 1), Walk::Cols);
        assert_eq!(walk_of(256, 3), Walk::Cols);
    }
}
