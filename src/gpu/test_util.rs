//! Test support: runs one op's GPU form next to its CPU form, step by step,
//! for the tests that check every GPU op against the CPU (f32 within 1e-5,
//! bf16 within 1e-2, relative to the reference's scale), and injects faults
//! into a translation ([`fault`]) for the tests of the comparison tool.

use std::sync::Arc;

use cudarc::driver::CudaModule;

use super::device::GpuDevice;
use super::library::module_function;
use super::memory::{copy_to_device, copy_to_host, DeviceBuffer};
use super::op::{BuildCx, GpuOp, Io, LaunchCx};
use super::tensor::{host_bytes, tensor_from_bytes, DevTensor, Precision};
use super::translator::WrapGpuOp;
use super::GpuError;
use crate::ops::{checks, Op, OpState, Scratch, Tensor, TypedFact};

/// The GPU form of `op` for these host inputs, from the builder registered
/// for its type. `consts[i]` says whether input `i` is a constant (its value is
/// shown to the builder, as the translator does for `Const` nodes).
pub fn build_for(
    dev: &GpuDevice,
    op: &dyn Op,
    inputs: &[&Tensor],
    consts: &[bool],
    precision: Precision,
) -> Result<Box<dyn GpuOp>, GpuError> {
    let facts = checks::facts_of(inputs);
    let refs: Vec<&TypedFact> = facts.iter().collect();
    let out_facts = op.output_facts(&refs).map_err(|source| GpuError::Cpu {
        op: op.name(),
        source,
    })?;
    let dev_in: Vec<TypedFact> = facts.iter().map(|f| precision.device_fact(f)).collect();
    let dev_out: Vec<TypedFact> = out_facts.iter().map(|f| precision.device_fact(f)).collect();
    let const_vals: Vec<Option<&Tensor>> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| consts.get(i).copied().unwrap_or(false).then_some(*t))
        .collect();
    let cx = BuildCx {
        lib: &dev.lib,
        precision,
        inputs: &dev_in,
        outputs: &dev_out,
        consts: &const_vals,
    };
    super::ops::build(op, &cx).unwrap_or_else(|| Err(GpuError::refused(op.name(), "no GPU form")))
}

/// The largest error of one output of one step.
#[derive(Debug, Clone, Copy)]
pub struct Diff {
    pub step: usize,
    pub output: usize,
    pub max_abs: f32,
    /// Largest |CPU value| of that output (at least 1 when used as a scale).
    pub scale: f32,
}

impl Diff {
    /// `max_abs / max(1, scale)`.
    pub fn relative(&self) -> f32 {
        self.max_abs / self.scale.max(1.0)
    }
}

/// Runs `op` over `steps` (each a list of inputs) on the CPU (its state
/// carried across steps) and on the GPU (its state and step counter likewise),
/// and returns, per step and output, the largest difference.
pub fn compare_op(
    dev: &GpuDevice,
    op: &dyn Op,
    steps: &[Vec<Tensor>],
    consts: &[bool],
    precision: Precision,
) -> Result<Vec<Diff>, GpuError> {
    compare_op_ending(dev, op, steps, consts, precision, None)
}

/// [`compare_op`] with the stream's length made known to both sides
/// (`set_stream_len` on the CPU state, the length on the device) before
/// step `ends.0`, as a session does once the input has ended.
pub fn compare_op_ending(
    dev: &GpuDevice,
    op: &dyn Op,
    steps: &[Vec<Tensor>],
    consts: &[bool],
    precision: Precision,
    ends: Option<(usize, i64)>,
) -> Result<Vec<Diff>, GpuError> {
    let Some(first) = steps.first() else {
        return Ok(Vec::new());
    };
    let refs: Vec<&Tensor> = first.iter().collect();
    let gop = build_for(dev, op, &refs, consts, precision)?;
    let gpu = &dev.ctx;
    let state = DeviceBuffer::alloc(gpu, gop.state_bytes())?;
    let scratch = DeviceBuffer::alloc(gpu, gop.scratch_bytes())?;
    let step_buf = DeviceBuffer::alloc(gpu, 8)?;
    let len_buf = DeviceBuffer::from_bytes(gpu, &(-1i64).to_le_bytes())?;
    let mut cpu_state: Option<Box<dyn OpState>> = op.state();
    let mut diffs = Vec::new();
    for (si, inputs) in steps.iter().enumerate() {
        if let Some((_, len)) = ends.filter(|&(at, _)| at == si) {
            if let Some(s) = &mut cpu_state {
                s.set_stream_len(Some(len));
            }
            copy_to_device(gpu, &len.to_le_bytes(), len_buf.ptr())?;
        }
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let mut want = Vec::new();
        let mut sc = Scratch::default();
        match &mut cpu_state {
            Some(s) => s.eval(&refs, &mut want, &mut sc),
            None => op.eval(&refs, &mut want, &mut sc),
        }
        .map_err(|source| GpuError::Cpu {
            op: op.name(),
            source,
        })?;
        // inputs in, outputs allocated at the CPU's shapes
        let mut keep = Vec::new();
        let mut ins = Vec::new();
        for t in inputs {
            let dt = precision.storage(t.dtype());
            let buf = DeviceBuffer::from_bytes(gpu, &host_bytes(t, dt))?;
            ins.push(DevTensor {
                ptr: buf.ptr(),
                dtype: dt,
                shape: t.shape().to_vec(),
            });
            keep.push(buf);
        }
        let mut outs = Vec::new();
        if let Some((i, offset)) = gop.alias() {
            // a view: its output is the input's memory
            let w = &want[0];
            outs.push(DevTensor {
                ptr: ins[i].ptr + offset as u64,
                dtype: precision.storage(w.dtype()),
                shape: w.shape().to_vec(),
            });
        }
        for w in want.iter().skip(outs.len()) {
            let dt = precision.storage(w.dtype());
            let buf = DeviceBuffer::alloc(gpu, w.len() * dt.size_of())?;
            outs.push(DevTensor {
                ptr: buf.ptr(),
                dtype: dt,
                shape: w.shape().to_vec(),
            });
            keep.push(buf);
        }
        copy_to_device(gpu, &(si as u64).to_le_bytes(), step_buf.ptr())?;
        let cx = LaunchCx {
            gpu,
            blas: &dev.blas,
            step: step_buf.ptr(),
            stream_len: len_buf.ptr(),
        };
        let io = Io {
            ins: &ins,
            outs: &outs,
            state: if gop.state_bytes() > 0 {
                state.ptr()
            } else {
                0
            },
            scratch: if gop.scratch_bytes() > 0 {
                scratch.ptr()
            } else {
                0
            },
        };
        gop.launch(&cx, &io)?;
        gpu.synchronize()?;
        for (oi, (w, d)) in want.iter().zip(&outs).enumerate() {
            let mut bytes = vec![0u8; d.bytes()];
            copy_to_host(gpu, d.ptr, &mut bytes)?;
            let got = tensor_from_bytes(&bytes, d.dtype, w.dtype(), &d.shape)?;
            let (g, wv) = (got.to_f32_vec(), w.to_f32_vec());
            let mut max_abs = 0f32;
            for (a, b) in g.iter().zip(&wv) {
                // equal infinities (an empty slot on both sides) are no error
                let e = if a == b { 0.0 } else { (a - b).abs() };
                if e.is_nan() || e > max_abs {
                    max_abs = if e.is_nan() { f32::INFINITY } else { e };
                }
            }
            let scale = wv.iter().fold(0f32, |m, v| m.max(v.abs()));
            diffs.push(Diff {
                step: si,
                output: oi,
                max_abs,
                scale,
            });
        }
    }
    Ok(diffs)
}

/// The tolerance of a precision: f32 1e-5, bf16 1e-2 (relative to scale).
pub fn tolerance(precision: Precision) -> f32 {
    match precision {
        Precision::F32 => 1e-5,
        Precision::Bf16 => 1e-2,
    }
}

/// Panics (for tests) with every step and output beyond tolerance.
pub fn assert_within(name: &str, diffs: &[Diff], precision: Precision) {
    let tol = tolerance(precision);
    let worst = diffs.iter().fold(0f32, |m, d| m.max(d.relative()));
    // NaN errors count as beyond tolerance
    let bad: Vec<&Diff> = diffs
        .iter()
        .filter(|d| d.relative().is_nan() || d.relative() > tol)
        .collect();
    eprintln!(
        "{name} [{precision:?}]: {} step-outputs, worst relative error {worst:e} (tolerance {tol:e})",
        diffs.len()
    );
    assert!(
        bad.is_empty(),
        "{name} [{precision:?}] beyond {tol:e}: {bad:?}"
    );
}

/// The module of the fault kernels ([`fault`]): (name, source).
const FAULT_MODULE: (&str, &str) = ("test_fault", include_str!("kernels/test_fault.cu"));

/// Kernel modules only these helpers load, never the kernel library, so no
/// production run compiles them: (name, source), compiled after the same
/// prelude as [`super::KERNEL_SOURCES`] (tests/gpu_nvrtc.rs compiles both).
pub const TEST_KERNEL_SOURCES: &[(&str, &str)] = &[FAULT_MODULE];

/// A translation hook ([`TranslateOptions::wrap`](super::translator::TranslateOptions))
/// that corrupts the GPU output of the node named `node` from chunk step
/// `from` on: shows that comparisons catch a wrong kernel and pin it. Loads
/// the fault kernels on `dev`.
pub fn fault(dev: &GpuDevice, node: &str, from: u64) -> Result<WrapGpuOp, GpuError> {
    let (module, _) = dev.ctx.load_source(FAULT_MODULE.0, FAULT_MODULE.1)?;
    let node = node.to_string();
    Ok(WrapGpuOp(Arc::new(move |name, op, cx| {
        if name == node {
            faulty(op, cx, &module, from)
        } else {
            Ok(op)
        }
    })))
}

/// The op, followed by a kernel that corrupts its first output from step
/// `from` on.
#[derive(Debug)]
struct Faulty {
    inner: Box<dyn GpuOp>,
    f: cudarc::driver::CudaFunction,
    from: u64,
}

fn faulty(
    inner: Box<dyn GpuOp>,
    cx: &BuildCx,
    module: &Arc<CudaModule>,
    from: u64,
) -> Result<Box<dyn GpuOp>, GpuError> {
    let suffix = super::tensor::float_suffix(cx.outputs[0].dtype)?;
    if inner.alias().is_some() {
        return Err(GpuError::refused("fault", "cannot corrupt a view"));
    }
    Ok(Box::new(Faulty {
        inner,
        f: module_function(FAULT_MODULE.0, module, &format!("fault_{suffix}"))?,
        from,
    }))
}

impl GpuOp for Faulty {
    fn describe(&self) -> String {
        format!("{} + FAULT from chunk {}", self.inner.describe(), self.from)
    }

    fn launch(&self, cx: &super::op::LaunchCx, io: &super::op::Io) -> Result<(), GpuError> {
        use super::op::{launch, Arg, Grid};
        self.inner.launch(cx, io)?;
        let out = &io.outs[0];
        if out.is_empty() {
            return Ok(());
        }
        launch(
            cx,
            &self.f,
            Grid::linear(out.len()),
            &[
                Arg::Ptr(out.ptr),
                Arg::U64(out.len() as u64),
                Arg::Ptr(cx.step),
                Arg::U64(self.from),
            ],
        )
    }

    fn state_bytes(&self) -> usize {
        self.inner.state_bytes()
    }

    fn scratch_bytes(&self) -> usize {
        self.inner.scratch_bytes()
    }
}
