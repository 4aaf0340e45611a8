//! The GPU form of an op: built once per node by the translator (with the
//! node's device-side facts), launched every step with device addresses.

use std::any::Any;
use std::fmt;

use cudarc::driver::{result, CudaFunction};

use super::blas::Blas;
use super::library::KernelLibrary;
use super::tensor::{DevTensor, Precision};
use super::{GpuContext, GpuError};
use crate::ops::{Tensor, TypedFact};

/// What a GPU op is built from: the node's device-side facts (concrete
/// shapes, storage dtypes) and the host values of its constant inputs.
pub struct BuildCx<'a> {
    pub lib: &'a KernelLibrary,
    pub precision: Precision,
    /// Device-side facts of the inputs.
    pub inputs: &'a [TypedFact],
    /// Device-side facts the outputs must have.
    pub outputs: &'a [TypedFact],
    /// For each input, its host value when it is a constant.
    pub consts: &'a [Option<&'a Tensor>],
}

impl BuildCx<'_> {
    /// The float kernel variant (`"f32"` / `"bf16"`) of input `i`'s dtype.
    pub fn suffix(&self, i: usize) -> Result<&'static str, GpuError> {
        super::tensor::float_suffix(self.inputs[i].dtype)
    }

    /// Concrete shape of input `i`.
    pub fn shape(&self, i: usize) -> Result<Vec<usize>, GpuError> {
        self.inputs[i]
            .concrete_shape()
            .ok_or_else(|| GpuError::NotConcrete {
                what: "input",
                index: i,
                fact: self.inputs[i].clone(),
            })
    }

    /// Concrete shape of output `i`.
    pub fn out_shape(&self, i: usize) -> Result<Vec<usize>, GpuError> {
        self.outputs[i]
            .concrete_shape()
            .ok_or_else(|| GpuError::NotConcrete {
                what: "output",
                index: i,
                fact: self.outputs[i].clone(),
            })
    }
}

/// What a launch gets besides its tensors.
pub struct LaunchCx<'a> {
    pub gpu: &'a GpuContext,
    pub blas: &'a Blas,
    /// Device address of the plan's step counter (`u64`): steps completed
    /// before this one. Kernels read it; only the plan advances it, with a
    /// kernel at the end of each step, so a captured graph stays valid.
    pub step: u64,
    /// Device address of the known stream length (`i64`, -1 while unknown).
    pub stream_len: u64,
}

/// The device memory of one launch.
pub struct Io<'a> {
    pub ins: &'a [DevTensor],
    pub outs: &'a [DevTensor],
    /// The op's zero-initialised persistent state ([`GpuOp::state_bytes`]), 0 if none.
    pub state: u64,
    /// The op's scratch ([`GpuOp::scratch_bytes`]), 0 if none; contents unspecified.
    pub scratch: u64,
}

/// `Any` for every GPU op, so that a rewrite (`gpu::rewrite`) can read the
/// GPU forms it fuses; use [`downcast`].
pub trait AsAny {
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `op` as its concrete type `T`, when it is one.
pub fn downcast<T: 'static>(op: &dyn GpuOp) -> Option<&T> {
    // through the trait object's vtable: a `Box` or reference around it
    // would be an `Any` of its own
    AsAny::as_any(op).downcast_ref()
}

/// An op's GPU implementation for one node.
pub trait GpuOp: fmt::Debug + Send + AsAny {
    /// A short description (the kernel names), for `inspect --device cuda`.
    fn describe(&self) -> String;

    /// Queues the op's kernels on the stream. Must not allocate device
    /// memory or synchronise: it may be running inside a graph capture.
    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError>;

    /// Bytes of persistent state (ring buffers); zeroed at start and on reset.
    fn state_bytes(&self) -> usize {
        0
    }

    /// Bytes of scratch used within one launch.
    fn scratch_bytes(&self) -> usize {
        0
    }

    /// `Some((input, byte_offset))` when output 0 is a view of that input's
    /// memory (a reshape): no launch, the planner aliases the buffers.
    fn alias(&self) -> Option<(usize, usize)> {
        None
    }

    /// Whether it writes outputs wider than its operands (f32 products of
    /// bf16 operands): only such a form may run a node kept in f32 whose
    /// inputs are not ([`TranslateOptions::keep_f32`](super::translator::TranslateOptions)).
    fn widens(&self) -> bool {
        false
    }
}

/// One kernel argument. Each is passed by address from a 64-bit slot, which
/// holds any of these (the driver reads only the parameter's own size, and
/// the slot is little-endian).
#[derive(Debug, Clone, Copy)]
pub enum Arg {
    /// A device address (`T*` in the kernel).
    Ptr(u64),
    U64(u64),
    I64(i64),
    I32(i32),
    U32(u32),
    F32(f32),
}

impl Arg {
    fn slot(self) -> u64 {
        match self {
            Arg::Ptr(p) | Arg::U64(p) => p,
            Arg::I64(v) => v as u64,
            Arg::I32(v) => v as u32 as u64,
            Arg::U32(v) => v as u64,
            Arg::F32(v) => v.to_bits() as u64,
        }
    }
}

const MAX_ARGS: usize = 32;

/// Dynamic shared memory a block may use without an opt-in.
pub const MAX_SHARED: usize = 48 * 1024;

/// A launch geometry.
#[derive(Debug, Clone, Copy)]
pub struct Grid {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
}

impl Grid {
    /// 1-D grid-stride geometry for `n` elements.
    pub fn linear(n: usize) -> Grid {
        const BLOCK: u32 = 256;
        let blocks = (n as u64).div_ceil(BLOCK as u64).clamp(1, 65_535) as u32;
        Grid {
            grid: (blocks, 1, 1),
            block: (BLOCK, 1, 1),
            shared_bytes: 0,
        }
    }

    /// `blocks` blocks of `threads` threads.
    pub fn blocks(blocks: u32, threads: u32) -> Grid {
        Grid {
            grid: (blocks.max(1), 1, 1),
            block: (threads, 1, 1),
            shared_bytes: 0,
        }
    }

    pub fn with_shared(mut self, bytes: u32) -> Grid {
        self.shared_bytes = bytes;
        self
    }
}

/// How many threads a block of `f` may have: fewer than the device's limit
/// when the kernel's registers do not fit that many.
pub fn max_threads_per_block(f: &CudaFunction) -> Result<u32, GpuError> {
    let n = super::context::no_panic(|| Ok(f.max_threads_per_block()?))?;
    Ok(n.max(0) as u32)
}

/// Launches `f` on the context's stream; allocation-free.
pub fn launch(cx: &LaunchCx, f: &CudaFunction, grid: Grid, args: &[Arg]) -> Result<(), GpuError> {
    if args.len() > MAX_ARGS {
        return Err(GpuError::TooManyArgs {
            got: args.len(),
            max: MAX_ARGS,
        });
    }
    let mut slots = [0u64; MAX_ARGS];
    for (s, a) in slots.iter_mut().zip(args) {
        *s = a.slot();
    }
    let mut ptrs = [std::ptr::null_mut::<std::ffi::c_void>(); MAX_ARGS];
    for (p, s) in ptrs.iter_mut().zip(slots.iter_mut()) {
        *p = (s as *mut u64).cast();
    }
    if cx.gpu.pdl() {
        return launch_pdl(cx, f, grid, &mut ptrs[..args.len()]);
    }
    unsafe {
        result::launch_kernel(
            f.cu_function(),
            grid.grid,
            grid.block,
            grid.shared_bytes,
            cx.gpu.stream().cu_stream(),
            &mut ptrs[..args.len()],
        )
    }
    .map_err(|e| GpuError::Driver(format!("launch: {e}")))
}

/// Launches with programmatic stream serialisation: the kernel may start
/// while the one before it still runs, and waits for it in `pdl_enter`.
fn launch_pdl(
    cx: &LaunchCx,
    f: &CudaFunction,
    grid: Grid,
    params: &mut [*mut std::ffi::c_void],
) -> Result<(), GpuError> {
    use cudarc::driver::sys;
    // SAFETY: the union is plain data; zeroed, then one field set
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: grid.grid.0,
        gridDimY: grid.grid.1,
        gridDimZ: grid.grid.2,
        blockDimX: grid.block.0,
        blockDimY: grid.block.1,
        blockDimZ: grid.block.2,
        sharedMemBytes: grid.shared_bytes,
        hStream: cx.gpu.stream().cu_stream(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: `params` points at live argument slots matching the kernel's
    // parameters, as for `launch_kernel`
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            f.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .map_err(|e| GpuError::Driver(format!("launch: {e}")))
}

/// `v` as a kernel's `int`, or the error naming `what`.
pub fn int(what: &str, v: usize) -> Result<i32, GpuError> {
    i32::try_from(v).map_err(|_| GpuError::too_large(what, v, "i32"))
}

/// `v` as a kernel's `long long`, or the error naming `what`.
pub fn long(what: &str, v: usize) -> Result<i64, GpuError> {
    i64::try_from(v).map_err(|_| GpuError::too_large(what, v, "i64"))
}

/// Checks a launch got the tensors it was built for.
pub fn expect_io(what: &str, io: &Io, ins: usize, outs: usize) -> Result<(), GpuError> {
    if io.ins.len() < ins || io.outs.len() != outs {
        return Err(GpuError::Launch {
            op: what.to_string(),
            inputs: ins,
            outputs: outs,
            got_inputs: io.ins.len(),
            got_outputs: io.outs.len(),
        });
    }
    Ok(())
}
