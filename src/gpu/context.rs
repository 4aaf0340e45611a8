//! Opening a CUDA device without ever panicking.
//!
//! cudarc loads libcuda lazily and panics when it is missing, so every entry
//! point checks for the library first and turns "no driver" and "no device"
//! into a [`GpuError`]; a `catch_unwind` backs that up for driver libraries
//! that lack a symbol cudarc expects.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaModule, CudaStream};

use super::compile::{kernel_source, nvrtc_available, nvrtc_version, Compiled};
use super::kernel_cache::{compile_cached, compile_fresh, KernelCache};
use crate::ops::{DType, OpError, TypedFact};

/// Why the GPU cannot be used, or why a node's GPU form cannot be built or
/// launched (then the node runs on the CPU, or the step fails with this).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpuError {
    /// libcuda cannot be opened.
    #[error("no CUDA driver (libcuda.so could not be opened)")]
    NoDriver,
    /// The driver is there but sees no device (or not this ordinal).
    #[error("no CUDA device{0}")]
    NoDevice(String),
    /// libnvrtc cannot be opened, so no kernel can be compiled.
    #[error("NVRTC missing (libnvrtc.so.13 could not be opened; put it on LD_LIBRARY_PATH)")]
    NoNvrtc,
    /// NVRTC failed; holds the compiler's log.
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(String),
    /// A GPU form does not take these facts or parameters (`op` names the
    /// form: `conv1d`, `LayerNorm`, ...); the node runs on the CPU.
    #[error("GPU kernel: {op}: {why}")]
    Refused { op: String, why: String },
    /// Input and output counts a GPU form does not take.
    #[error(
        "GPU kernel: {op}: {got_inputs} inputs and {got_outputs} outputs, expected {expected}"
    )]
    Arity {
        op: String,
        /// What it takes, e.g. `3 and 1`, `2 or 3 and 1`.
        expected: String,
        got_inputs: usize,
        got_outputs: usize,
    },
    /// Inputs and outputs of several dtypes where the kernel takes one.
    #[error("GPU kernel: {op}: mixed dtypes")]
    MixedDtypes { op: String },
    /// A storage dtype that has no float kernel.
    #[error("GPU kernel: no float kernel for {dtype}")]
    NoFloatKernel { dtype: DType },
    /// A size beyond what the kernel's arithmetic or memory holds.
    #[error("GPU kernel: {what} {got} is beyond {limit}")]
    TooLarge {
        what: String,
        got: usize,
        limit: String,
    },
    /// A fact that must be concrete (`what`: input or output `index`).
    #[error("GPU kernel: {what} {index} is not concrete: {fact}")]
    NotConcrete {
        what: &'static str,
        index: usize,
        fact: TypedFact,
    },
    /// A graph node whose shape still depends on the stream length.
    #[error("GPU kernel: node `{node}` has a symbolic shape {fact}: give the stream length")]
    SymbolicShape { node: String, fact: TypedFact },
    /// No shipped kernel module of that name.
    #[error("GPU kernel: no kernel module named {module}")]
    NoModule { module: String },
    /// A module without the kernel asked for.
    #[error("GPU kernel: {module}.cu has no kernel {function}: {why}")]
    NoFunction {
        module: String,
        function: String,
        why: String,
    },
    /// More kernel arguments than a launch passes.
    #[error("GPU kernel: {got} kernel arguments (at most {max})")]
    TooManyArgs { got: usize, max: usize },
    /// A launch given other tensors than its GPU form was built for.
    #[error(
        "GPU kernel: {op}: launched with {got_inputs} inputs and {got_outputs} outputs, built for {inputs} and {outputs}"
    )]
    Launch {
        op: String,
        inputs: usize,
        outputs: usize,
        got_inputs: usize,
        got_outputs: usize,
    },
    /// A fused GPU form launched without one of the inputs it took on.
    #[error("GPU kernel: {op}: fused input {index} missing")]
    MissingInput { op: String, index: usize },
    /// A graph value a GPU node reads is not on the device.
    #[error("GPU kernel: input {input} is not on the device")]
    NotOnDevice { input: String },
    /// Device bytes that do not make the tensor asked for.
    #[error("GPU kernel: download: {0}")]
    Download(OpError),
    /// The CPU form of an op failed where the GPU path runs it (tests,
    /// fallback nodes).
    #[error("CPU {op}: {source}")]
    Cpu { op: &'static str, source: OpError },
}

impl GpuError {
    /// `op` does not take these facts, because `why`.
    pub fn refused(op: impl Into<String>, why: impl std::fmt::Display) -> GpuError {
        GpuError::Refused {
            op: op.into(),
            why: why.to_string(),
        }
    }

    /// `op`'s inputs and outputs are not of one dtype.
    pub fn mixed_dtypes(op: impl Into<String>) -> GpuError {
        GpuError::MixedDtypes { op: op.into() }
    }

    /// `op` got `inputs` and `outputs` and takes `expected`.
    pub fn arity(
        op: impl Into<String>,
        expected: impl Into<String>,
        inputs: usize,
        outputs: usize,
    ) -> GpuError {
        GpuError::Arity {
            op: op.into(),
            expected: expected.into(),
            got_inputs: inputs,
            got_outputs: outputs,
        }
    }

    /// `what` is `got`, beyond `limit`.
    pub fn too_large(
        what: impl Into<String>,
        got: usize,
        limit: impl std::fmt::Display,
    ) -> GpuError {
        GpuError::TooLarge {
            what: what.into(),
            got,
            limit: limit.to_string(),
        }
    }
}

impl From<cudarc::driver::DriverError> for GpuError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        GpuError::Driver(format!("{e}"))
    }
}

/// Runs `f`, turning a cudarc panic into a driver error.
pub(crate) fn no_panic<T>(f: impl FnOnce() -> Result<T, GpuError>) -> Result<T, GpuError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(GpuError::Driver(format!("cudarc panicked: {msg}")))
        }
    }
}

/// Whether libcuda can be opened.
pub fn driver_available() -> bool {
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The number of CUDA devices (0 without a driver).
pub fn device_count() -> Result<usize, GpuError> {
    if !driver_available() {
        return Err(GpuError::NoDriver);
    }
    no_panic(|| match CudaContext::device_count() {
        Ok(n) => Ok(n.max(0) as usize),
        // CUDA_ERROR_NO_DEVICE comes from cuInit when the driver sees nothing
        Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE => Ok(0),
        Err(e) => Err(e.into()),
    })
}

/// One device: its context and the non-default stream all work goes on
/// (the legacy default stream cannot be captured into a CUDA graph).
#[derive(Debug)]
pub struct GpuContext {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Launch our kernels with programmatic dependent launch (sm_90+).
    pdl: std::sync::atomic::AtomicBool,
}

/// Environment variable: `0` turns programmatic dependent launch off.
pub const PDL_ENV: &str = "PULSED_PDL";

/// Environment variable: how a thread waits for the GPU (`spin`, `yield`
/// or `block`); unset, the driver decides (it spins while the process has
/// no more contexts than cores).
pub const WAIT_ENV: &str = "PULSED_GPU_WAIT";

/// Sets the primary context's wait policy from [`WAIT_ENV`] before the
/// context is first made (the driver takes it then, for the process).
fn set_wait_policy(ordinal: usize) -> Result<(), GpuError> {
    use cudarc::driver::sys::CUctx_flags as F;
    let flags = match std::env::var(WAIT_ENV).as_deref() {
        Ok("spin") => F::CU_CTX_SCHED_SPIN,
        Ok("yield") => F::CU_CTX_SCHED_YIELD,
        Ok("block") => F::CU_CTX_SCHED_BLOCKING_SYNC,
        Ok(other) => {
            return Err(GpuError::Driver(format!(
                "{WAIT_ENV}={other}: expected spin, yield or block"
            )))
        }
        Err(_) => return Ok(()),
    };
    cudarc::driver::result::init()?;
    let dev = cudarc::driver::result::device::get(ordinal as i32)?;
    // SAFETY: a valid device handle; flags are a CUctx_flags value
    unsafe { cudarc::driver::sys::cuDevicePrimaryCtxSetFlags_v2(dev, flags as u32) }.result()?;
    Ok(())
}

impl GpuContext {
    /// Opens device `ordinal`, or says why not; never panics.
    pub fn new(ordinal: usize) -> Result<GpuContext, GpuError> {
        let n = device_count()?;
        if n == 0 {
            return Err(GpuError::NoDevice(String::new()));
        }
        if ordinal >= n {
            return Err(GpuError::NoDevice(format!(
                " with ordinal {ordinal} ({n} found)"
            )));
        }
        no_panic(|| {
            set_wait_policy(ordinal)?;
            let ctx = CudaContext::new(ordinal)?;
            // cudarc's automatic cross-stream events are not capture-safe
            unsafe { ctx.disable_event_tracking() };
            let stream = ctx.new_stream()?;
            // Hopper lets a kernel launch while its predecessor still runs
            // (it waits in `pdl_enter` before touching memory), hiding the
            // launch gap between the many small kernels of a chunk step.
            let pdl = ctx.compute_capability()?.0 >= 9
                && std::env::var(PDL_ENV).map_or(true, |v| v != "0");
            Ok(GpuContext {
                ctx,
                stream,
                pdl: pdl.into(),
            })
        })
    }

    /// The same device and context with a stream of its own, so work on it
    /// runs concurrently with this one's (one per concurrent stream of audio).
    pub fn with_new_stream(&self) -> Result<GpuContext, GpuError> {
        no_panic(|| {
            Ok(GpuContext {
                ctx: self.ctx.clone(),
                stream: self.ctx.new_stream()?,
                pdl: self.pdl().into(),
            })
        })
    }

    /// Makes this context current on the calling thread (raw driver calls
    /// need it; cudarc's own calls do it themselves).
    pub fn bind(&self) -> Result<(), GpuError> {
        no_panic(|| Ok(self.ctx.bind_to_thread()?))
    }

    /// The cudarc context.
    pub fn ctx(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream every launch and copy goes on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Whether kernels launch with programmatic dependent launch.
    pub fn pdl(&self) -> bool {
        self.pdl.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Turns programmatic dependent launch on or off for later launches
    /// (and captures); it stays off on devices older than sm_90.
    pub fn set_pdl(&self, on: bool) -> Result<(), GpuError> {
        let on = on && self.compute_capability()?.0 >= 9;
        self.pdl.store(on, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// The device's name.
    pub fn name(&self) -> Result<String, GpuError> {
        no_panic(|| Ok(self.ctx.name()?))
    }

    /// (major, minor) compute capability.
    pub fn compute_capability(&self) -> Result<(i32, i32), GpuError> {
        no_panic(|| Ok(self.ctx.compute_capability()?))
    }

    /// Total device memory in bytes.
    pub fn total_mem(&self) -> Result<usize, GpuError> {
        no_panic(|| Ok(self.ctx.total_mem()?))
    }

    /// One line: name, compute capability, memory.
    pub fn describe(&self) -> Result<String, GpuError> {
        let (maj, min) = self.compute_capability()?;
        Ok(format!(
            "{} (sm_{maj}{min}, {:.1} GiB)",
            self.name()?,
            self.total_mem()? as f64 / (1u64 << 30) as f64
        ))
    }

    /// Compiles the shipped module `name` for this device (CUBIN, else PTX),
    /// or reads it from the kernel cache, and loads it.
    pub fn load_module(&self, name: &str) -> Result<(Arc<CudaModule>, Compiled), GpuError> {
        let src = kernel_source(name).ok_or_else(|| GpuError::NoModule {
            module: name.to_string(),
        })?;
        self.load_source(name, src)
    }

    /// Compiles `src` for this device, or reads it from the kernel cache
    /// ([`KernelCache::from_env`]), and loads it.
    pub fn load_source(
        &self,
        name: &str,
        src: &str,
    ) -> Result<(Arc<CudaModule>, Compiled), GpuError> {
        let cache = KernelCache::from_env();
        let compiled = compile_cached(name, src, self.compute_capability()?, cache.as_ref())?;
        self.load_compiled(name, src, compiled, cache.as_ref())
    }

    /// Loads `compiled`, made from `src`. A cached image the driver refuses
    /// (one made by an NVRTC newer than the driver, say) is compiled afresh,
    /// replaced in `cache` and loaded, once.
    pub fn load_compiled(
        &self,
        name: &str,
        src: &str,
        compiled: Compiled,
        cache: Option<&KernelCache>,
    ) -> Result<(Arc<CudaModule>, Compiled), GpuError> {
        match self.load_image(&compiled) {
            Ok(module) => Ok((module, compiled)),
            Err(_) if compiled.cached => {
                let fresh = compile_fresh(name, src, self.compute_capability()?, cache)?;
                Ok((self.load_image(&fresh)?, fresh))
            }
            Err(e) => Err(e),
        }
    }

    fn load_image(&self, compiled: &Compiled) -> Result<Arc<CudaModule>, GpuError> {
        no_panic(|| Ok(self.ctx.load_module(compiled.to_cudarc())?))
    }

    /// Waits for everything queued on the stream.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        no_panic(|| Ok(self.stream.synchronize()?))
    }
}

/// Describes the first device if the GPU backend could run on it (driver,
/// device and NVRTC all present), or says why not.
pub fn probe() -> Result<String, GpuError> {
    let gpu = GpuContext::new(0)?;
    if !nvrtc_available() {
        return Err(GpuError::NoNvrtc);
    }
    let (maj, min) = nvrtc_version()?;
    Ok(format!("{}, NVRTC {maj}.{min}", gpu.describe()?))
}
