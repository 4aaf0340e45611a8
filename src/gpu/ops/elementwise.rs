//! Binary and unary element-wise ops (`kernels/elementwise.cu`).

use cudarc::driver::CudaFunction;

use crate::gpu::op::{expect_io, launch, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::{Binary, Unary};

/// The kernel's code for a binary op, if it has one.
pub fn binary_code(op: Binary) -> Option<i32> {
    Some(match op {
        Binary::Add => 0,
        Binary::Sub => 1,
        Binary::Mul => 2,
        Binary::Div => 3,
        Binary::Min => 4,
        Binary::Max => 5,
        Binary::Pow => 6,
        _ => return None,
    })
}

/// The kernel's code for a unary op, if it has one.
pub fn unary_code(op: Unary) -> Option<i32> {
    Some(match op {
        Unary::Sqrt => 0,
        Unary::Exp => 1,
        Unary::Ln => 2,
        Unary::Abs => 3,
        Unary::Neg => 4,
        Unary::Relu => 5,
        Unary::Sigmoid => 6,
        Unary::Tanh => 7,
        Unary::Silu => 8,
        Unary::Gelu => 9,
        Unary::Recip => 10,
        Unary::Square => 11,
        Unary::Not => return None,
    })
}

#[derive(Debug)]
struct BinaryGpu {
    op: Binary,
    code: i32,
    f: CudaFunction,
    n: usize,
    na: usize,
    nb: usize,
}

impl GpuOp for BinaryGpu {
    fn describe(&self) -> String {
        format!("binary {:?} ({} elements)", self.op, self.n)
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("binary", io, 2, 1)?;
        if self.n == 0 {
            return Ok(());
        }
        launch(
            cx,
            &self.f,
            Grid::linear(self.n),
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(io.ins[1].ptr),
                Arg::Ptr(io.outs[0].ptr),
                Arg::U64(self.n as u64),
                Arg::U64(self.na as u64),
                Arg::U64(self.nb as u64),
                Arg::I32(self.code),
            ],
        )
    }
}

/// How many trailing elements of `shape` repeat to fill `out`: the input
/// must equal the output's trailing axes after dropping leading 1s.
fn trailing_block(shape: &[usize], out: &[usize]) -> Option<usize> {
    let lead = shape.iter().take_while(|&&d| d == 1).count();
    let tail = &shape[lead..];
    if tail.len() > out.len() || out[out.len() - tail.len()..] != *tail {
        return None;
    }
    Some(tail.iter().product::<usize>().max(1))
}

#[derive(Debug)]
struct UnaryGpu {
    op: Unary,
    code: i32,
    f: CudaFunction,
    n: usize,
}

impl GpuOp for UnaryGpu {
    fn describe(&self) -> String {
        format!("unary {:?} ({} elements)", self.op, self.n)
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("unary", io, 1, 1)?;
        if self.n == 0 {
            return Ok(());
        }
        launch(
            cx,
            &self.f,
            Grid::linear(self.n),
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(io.outs[0].ptr),
                Arg::U64(self.n as u64),
                Arg::I32(self.code),
            ],
        )
    }
}

pub(super) fn register(r: &mut Builders) {
    r.add::<Binary>(|&b, cx| build_binary(b, cx));
    r.add::<Unary>(|&u, cx| build_unary(u, cx));
}

fn build_binary(op: Binary, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let code = binary_code(op)
        .ok_or_else(|| GpuError::refused("binary", format!("no GPU kernel for {op:?}")))?;
    let suffix = cx.suffix(0)?;
    if cx.inputs[1].dtype != cx.inputs[0].dtype || cx.outputs[0].dtype != cx.inputs[0].dtype {
        return Err(GpuError::mixed_dtypes("binary"));
    }
    let out = cx.out_shape(0)?;
    let n: usize = out.iter().product();
    let block = |i: usize| -> Result<usize, GpuError> {
        let s = cx.shape(i)?;
        trailing_block(&s, &out).ok_or_else(|| {
            GpuError::refused(
                "binary",
                format!("input {i} {s:?} does not broadcast as a trailing block of {out:?}"),
            )
        })
    };
    let (na, nb) = (block(0)?, block(1)?);
    Ok(Box::new(BinaryGpu {
        op,
        code,
        f: cx
            .lib
            .function("elementwise", &format!("binary_{suffix}"))?,
        n,
        na,
        nb,
    }))
}

fn build_unary(op: Unary, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let code = unary_code(op)
        .ok_or_else(|| GpuError::refused("unary", format!("no GPU kernel for {op:?}")))?;
    let suffix = cx.suffix(0)?;
    let n = cx.shape(0)?.iter().product();
    Ok(Box::new(UnaryGpu {
        op,
        code,
        f: cx.lib.function("elementwise", &format!("unary_{suffix}"))?,
        n,
    }))
}

#[cfg(test)]
mod tests {
    use super::trailing_block;

    #[test]
    fn trailing_blocks() {
        assert_eq!(trailing_block(&[8, 256], &[8, 256]), Some(2048));
        assert_eq!(trailing_block(&[256], &[8, 256]), Some(256));
        assert_eq!(trailing_block(&[1, 256], &[8, 256]), Some(256));
        assert_eq!(trailing_block(&[], &[8, 256]), Some(1));
        assert_eq!(trailing_block(&[8, 1], &[8, 256]), None);
    }
}
