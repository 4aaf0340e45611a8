//! `--device cpu|cuda|auto`.

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Device {
    Cpu,
    Cuda,
    Auto,
}

/// A description of the usable GPU, or the one-line reason there is none.
#[cfg(feature = "cuda")]
fn probe_gpu() -> Result<String, String> {
    pulsed::gpu::probe().map_err(|e| e.to_string())
}

#[cfg(not(feature = "cuda"))]
fn probe_gpu() -> Result<String, String> {
    Err("this build of pulsed has no CUDA backend (built without the `cuda` feature)".into())
}

impl Device {
    /// Resolves the choice to a device this build can run on, or why not.
    /// Until the graph translator exists (issue 6) every run is on the CPU:
    /// `auto` says so when a GPU is there, `cuda` refuses rather than pretend.
    pub fn resolve(self) -> Result<Device, String> {
        match self {
            Device::Cpu => Ok(Device::Cpu),
            Device::Auto => {
                if let Ok(gpu) = probe_gpu() {
                    eprintln!(
                        "device: CUDA {gpu} found; the GPU backend runs only element-wise \
                         kernels so far, so this run uses the CPU"
                    );
                }
                Ok(Device::Cpu)
            }
            Device::Cuda => match probe_gpu() {
                Err(why) => Err(format!("--device cuda: {why}; use --device cpu or auto")),
                Ok(gpu) => Err(format!(
                    "--device cuda: CUDA {gpu} found, but the GPU graph translator is not \
                     built yet (issue 6); use --device cpu or auto"
                )),
            },
        }
    }
}
