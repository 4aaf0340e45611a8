//! `--device cpu|cuda|auto` and `--precision f32|bf16|int8`.

use clap::ValueEnum;
use pulsed::engine::Engine;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Device {
    Cpu,
    Cuda,
    Auto,
}

/// How weights (and on the GPU, activations) are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Precision {
    #[default]
    F32,
    /// GPU: bf16 storage, f32 accumulation.
    Bf16,
    /// CPU, Whisper: weight-only int8 linear layers and output projection.
    Int8,
}

impl Precision {
    /// The GPU runner's precision of this choice (int8 has none).
    #[cfg(feature = "cuda")]
    pub fn gpu(self) -> Result<pulsed::gpu::Precision, String> {
        match self {
            Precision::F32 => Ok(pulsed::gpu::Precision::F32),
            Precision::Bf16 => Ok(pulsed::gpu::Precision::Bf16),
            Precision::Int8 => Err("--precision int8 runs on the CPU only".into()),
        }
    }

    /// Whether weights are int8 (the CPU's weight-only int8).
    pub fn int8(self) -> bool {
        self == Precision::Int8
    }
}

#[cfg(feature = "cuda")]
fn gpu_engine(precision: Precision, tf32: bool) -> Result<Engine, String> {
    use pulsed::gpu::{GpuDevice, GpuRunnerOptions};
    let mut device = GpuDevice::shared().map_err(|e| e.to_string())?;
    if tf32 {
        device = device.lane_with_tf32().map_err(|e| e.to_string())?;
    }
    Ok(Engine::Gpu {
        device,
        options: GpuRunnerOptions::new(precision.gpu()?),
    })
}

#[cfg(not(feature = "cuda"))]
fn gpu_engine(_: Precision, _: bool) -> Result<Engine, String> {
    Err("this build of pulsed has no CUDA backend (built without the `cuda` feature)".into())
}

impl Device {
    /// The engine this choice runs on, or the one-line reason it cannot:
    /// `auto` takes the GPU when one is usable (and says so) and the CPU
    /// otherwise; `cuda` fails when there is no usable GPU.
    pub fn engine(self, precision: Precision) -> Result<Engine, String> {
        self.engine_tf32(precision, false)
    }

    /// [`Device::engine`], with f32 GEMMs on TF32 tensor cores when `tf32`
    /// (`--tf32`: faster, products to about 1e-3 relative).
    pub fn engine_tf32(self, precision: Precision, tf32: bool) -> Result<Engine, String> {
        match self {
            Device::Cpu => Ok(Engine::Cpu),
            // int8 is the CPU's: auto takes the CPU rather than refuse
            Device::Auto if precision.int8() => Ok(Engine::Cpu),
            Device::Auto => match gpu_engine(precision, tf32) {
                Ok(e) => {
                    eprintln!("device: {}", describe(&e));
                    Ok(e)
                }
                Err(_) => Ok(Engine::Cpu),
            },
            Device::Cuda => gpu_engine(precision, tf32)
                .map_err(|why| format!("--device cuda: {why}; use --device cpu or auto")),
        }
    }
}

/// One line naming the engine's device.
pub fn describe(e: &Engine) -> String {
    e.describe()
}
