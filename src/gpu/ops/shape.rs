//! Shape ops. Reshapes, squeezes and slices that stay contiguous are views
//! (the planner aliases the memory, for every dtype); other slices,
//! permutations and concatenations are one strided copy (`kernels/copy.cu`).

use cudarc::driver::CudaFunction;

use crate::gpu::op::{expect_io, launch, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::concat::Concat;
use crate::ops::pad::{Pad, PadMode};
use crate::ops::shape::{MoveAxis, Permute, Reshape, Slice, Squeeze, Unsqueeze};

const MAX_RANK: usize = 6;

/// A view of input 0 at a byte offset.
#[derive(Debug)]
struct View {
    offset: usize,
    input: usize,
}

impl GpuOp for View {
    fn describe(&self) -> String {
        format!("view (offset {} bytes, no kernel)", self.offset)
    }

    fn launch(&self, _: &LaunchCx, _: &Io) -> Result<(), GpuError> {
        Ok(())
    }

    fn alias(&self) -> Option<(usize, usize)> {
        Some((self.input, self.offset))
    }
}

/// A view of a node's input `input` (no kernel).
pub fn view_of(input: usize) -> Box<dyn GpuOp> {
    Box::new(View { offset: 0, input })
}

/// One strided copy: `dims` walked in order, source and destination strides
/// in elements, plus element offsets.
#[derive(Debug, Clone)]
struct Copy {
    dims: Vec<usize>,
    src: Vec<i64>,
    dst: Vec<i64>,
    src_offset: usize,
    dst_offset: usize,
}

/// Strided copies (one per input for a concat).
#[derive(Debug)]
struct CopyGpu {
    f: CudaFunction,
    elem: usize,
    copies: Vec<(usize, Copy)>,
}

fn contiguous_strides(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        s[a] = s[a + 1] * shape[a + 1] as i64;
    }
    s
}

impl GpuOp for CopyGpu {
    fn describe(&self) -> String {
        format!("strided copy x{}", self.copies.len())
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("copy", io, 1, 1)?;
        for (input, c) in &self.copies {
            let n: usize = c.dims.iter().product();
            if n == 0 {
                continue;
            }
            let src = io.ins.get(*input).ok_or_else(|| GpuError::MissingInput {
                op: "copy".into(),
                index: *input,
            })?;
            let mut args = [Arg::U64(0); 4 + 3 * MAX_RANK];
            args[0] = Arg::Ptr(src.ptr + (c.src_offset * self.elem) as u64);
            args[1] = Arg::Ptr(io.outs[0].ptr + (c.dst_offset * self.elem) as u64);
            args[2] = Arg::U64(n as u64);
            args[3] = Arg::I32(c.dims.len() as i32);
            for a in 0..MAX_RANK {
                args[4 + a] = Arg::U64(c.dims.get(a).copied().unwrap_or(1) as u64);
                args[4 + MAX_RANK + a] = Arg::I64(c.src.get(a).copied().unwrap_or(0));
                args[4 + 2 * MAX_RANK + a] = Arg::I64(c.dst.get(a).copied().unwrap_or(0));
            }
            launch(cx, &self.f, Grid::linear(n), &args)?;
        }
        Ok(())
    }
}

pub(super) fn register(r: &mut Builders) {
    // metadata only: output 0 is input 0's memory
    r.add::<Reshape>(|_, _| Ok(view_of(0)));
    r.add::<Squeeze>(|_, _| Ok(view_of(0)));
    r.add::<Unsqueeze>(|_, _| Ok(view_of(0)));
    r.add::<Slice>(build_slice);
    r.add::<Permute>(|p, cx| build_permute(&p.axes, cx));
    r.add::<MoveAxis>(|m, cx| build_permute(&move_axis_perm(m, cx)?, cx));
    r.add::<Concat>(build_concat);
    r.add::<Pad>(build_pad);
}

/// Constant or reflect padding of float tensors.
#[derive(Debug)]
struct PadGpu {
    f: CudaFunction,
    out: Vec<usize>,
    input: Vec<usize>,
    before: Vec<usize>,
    reflect: bool,
    value: f32,
}

impl GpuOp for PadGpu {
    fn describe(&self) -> String {
        format!(
            "pad {:?} -> {:?} ({})",
            self.input,
            self.out,
            if self.reflect { "reflect" } else { "constant" }
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("pad", io, 1, 1)?;
        let n: usize = self.out.iter().product();
        if n == 0 {
            return Ok(());
        }
        let mut args = [Arg::U64(1); 6 + 3 * MAX_RANK];
        args[0] = Arg::Ptr(io.ins[0].ptr);
        args[1] = Arg::Ptr(io.outs[0].ptr);
        args[2] = Arg::U64(n as u64);
        args[3] = Arg::I32(self.out.len() as i32);
        for a in 0..MAX_RANK {
            args[4 + a] = Arg::U64(self.out.get(a).copied().unwrap_or(1) as u64);
            args[4 + MAX_RANK + a] = Arg::U64(self.input.get(a).copied().unwrap_or(1) as u64);
            args[4 + 2 * MAX_RANK + a] = Arg::U64(self.before.get(a).copied().unwrap_or(0) as u64);
        }
        args[4 + 3 * MAX_RANK] = Arg::I32(self.reflect as i32);
        args[5 + 3 * MAX_RANK] = Arg::F32(self.value);
        launch(cx, &self.f, Grid::linear(n), &args)
    }
}

fn build_pad(p: &Pad, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let suffix = cx.suffix(0)?;
    let input = cx.shape(0)?;
    let out = cx.out_shape(0)?;
    if input.len() > MAX_RANK || p.pads.len() != input.len() {
        return Err(GpuError::refused("pad", format!("rank {}", input.len())));
    }
    let (reflect, value) = match p.mode {
        PadMode::Constant(v) => (false, v),
        PadMode::Reflect => {
            if p.pads
                .iter()
                .zip(&input)
                .any(|(&(b, a), &n)| b >= n.max(1) || a >= n.max(1))
            {
                return Err(GpuError::refused(
                    "pad",
                    "reflect pad not smaller than its axis",
                ));
            }
            (true, 0.0)
        }
    };
    Ok(Box::new(PadGpu {
        f: cx.lib.function("copy", &format!("pad_{suffix}"))?,
        out,
        input,
        before: p.pads.iter().map(|&(b, _)| b).collect(),
        reflect,
        value,
    }))
}

fn copier(cx: &BuildCx, copies: Vec<(usize, Copy)>) -> Result<Box<dyn GpuOp>, GpuError> {
    let elem = cx.inputs[0].dtype.size_of();
    if let Some((_, c)) = copies.iter().find(|(_, c)| c.dims.len() > MAX_RANK) {
        return Err(GpuError::too_large("copy: rank", c.dims.len(), MAX_RANK));
    }
    Ok(Box::new(CopyGpu {
        f: cx.lib.function("copy", &format!("strided_copy_{elem}"))?,
        elem,
        copies,
    }))
}

fn build_slice(s: &Slice, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let x = cx.shape(0)?;
    let out = cx.out_shape(0)?;
    let axis = s.axis;
    if axis >= x.len() || out.len() != x.len() {
        return Err(GpuError::refused("slice", format!("axis {axis} of {x:?}")));
    }
    // the start the CPU op resolves to, from the output length
    let n = x[axis] as i64;
    let start = if s.start < 0 {
        (s.start + n).max(0)
    } else {
        s.start.min(n)
    } as usize;
    if start + out[axis] > x[axis] {
        return Err(GpuError::refused(
            "slice",
            format!("{start}+{} beyond {}", out[axis], x[axis]),
        ));
    }
    let inner: usize = x[axis + 1..].iter().product();
    let elem = cx.inputs[0].dtype.size_of();
    if x[..axis].iter().all(|&d| d == 1) {
        return Ok(Box::new(View {
            offset: start * inner * elem,
            input: 0,
        }));
    }
    let copy = Copy {
        src: contiguous_strides(&x),
        dst: contiguous_strides(&out),
        dims: out.clone(),
        src_offset: start * inner,
        dst_offset: 0,
    };
    copier(cx, vec![(0, copy)])
}

fn build_permute(axes: &[usize], cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let x = cx.shape(0)?;
    let out = cx.out_shape(0)?;
    if axes.len() != x.len() || axes.iter().any(|&a| a >= x.len()) {
        return Err(GpuError::refused("permute", format!("{axes:?} of {x:?}")));
    }
    let xs = contiguous_strides(&x);
    let copy = Copy {
        src: axes.iter().map(|&a| xs[a]).collect(),
        dst: contiguous_strides(&out),
        dims: out.clone(),
        src_offset: 0,
        dst_offset: 0,
    };
    copier(cx, vec![(0, copy)])
}

fn move_axis_perm(m: &MoveAxis, cx: &BuildCx) -> Result<Vec<usize>, GpuError> {
    let r = cx.shape(0)?.len();
    if m.from >= r || m.to >= r {
        return Err(GpuError::refused(
            "move axis",
            format!("{} -> {} of rank {r}", m.from, m.to),
        ));
    }
    let mut axes: Vec<usize> = (0..r).filter(|&a| a != m.from).collect();
    axes.insert(m.to, m.from);
    Ok(axes)
}

fn build_concat(c: &Concat, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let out = cx.out_shape(0)?;
    let r = out.len() as isize;
    let axis = if c.axis < 0 { c.axis + r } else { c.axis };
    if axis < 0 || axis >= r {
        return Err(GpuError::refused(
            "concat",
            format!("axis {} of rank {r}", c.axis),
        ));
    }
    let axis = axis as usize;
    if cx.inputs.iter().any(|f| f.dtype != cx.outputs[0].dtype) {
        return Err(GpuError::mixed_dtypes("concat"));
    }
    let os = contiguous_strides(&out);
    let mut at = 0usize;
    let mut copies = Vec::new();
    for i in 0..cx.inputs.len() {
        let x = cx.shape(i)?;
        copies.push((
            i,
            Copy {
                src: contiguous_strides(&x),
                dst: os.clone(),
                dims: x.clone(),
                src_offset: 0,
                dst_offset: at * os[axis] as usize,
            },
        ));
        at += x[axis];
    }
    copier(cx, copies)
}
