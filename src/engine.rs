//! Where graphs run: the CPU, or a GPU through the `cuda` feature's runner.
//! Sessions, recognisers and the CLI take an [`Engine`] and never see which.

use std::sync::Arc;

use crate::graph::{Graph, Runner, StepRunner};
use crate::pulse::{PulsedModel, StreamingSession};
use crate::Result;

/// A device to run graphs on.
#[derive(Clone, Default)]
pub enum Engine {
    /// The CPU runner.
    #[default]
    Cpu,
    /// A GPU, with the precision and launch mode of its runners.
    #[cfg(feature = "cuda")]
    Gpu {
        device: Arc<crate::gpu::GpuDevice>,
        options: crate::gpu::GpuRunnerOptions,
    },
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Engine {
    /// The first GPU when one is usable (f32, captured chunk steps), the CPU
    /// otherwise; never an error.
    pub fn auto() -> Engine {
        #[cfg(feature = "cuda")]
        if let Ok(device) = crate::gpu::GpuDevice::shared() {
            return Engine::Gpu {
                device,
                options: crate::gpu::GpuRunnerOptions::new(crate::gpu::Precision::F32),
            };
        }
        Engine::Cpu
    }

    /// `"cpu"` or `"cuda"`.
    pub fn name(&self) -> &'static str {
        match self {
            Engine::Cpu => "cpu",
            #[cfg(feature = "cuda")]
            Engine::Gpu { .. } => "cuda",
        }
    }

    /// The device in one line, for messages: "CPU", or the GPU's name,
    /// precision and kernel library.
    pub fn describe(&self) -> String {
        match self {
            Engine::Cpu => "CPU".into(),
            #[cfg(feature = "cuda")]
            Engine::Gpu { device, options } => format!(
                "CUDA {} ({:?}{}, {})",
                device.ctx.describe().unwrap_or_else(|e| e.to_string()),
                options.translate.precision,
                if device.blas.tf32 { ", TF32 GEMMs" } else { "" },
                device.lib.describe_load()
            ),
        }
    }

    /// A runner for `graph`: its facts concrete (a pulsed graph), or made
    /// concrete for a whole input of `s` frames.
    pub fn runner(&self, graph: Arc<Graph>, s: Option<i64>) -> Result<Box<dyn StepRunner>> {
        match self {
            Engine::Cpu => {
                let _ = s;
                Ok(Box::new(Runner::new(graph)?))
            }
            #[cfg(feature = "cuda")]
            Engine::Gpu { device, options } => Ok(Box::new(crate::gpu::GpuRunner::new(
                device.clone(),
                graph,
                s,
                options,
            )?)),
        }
    }

    /// The same engine for one more concurrent stream of work: on a GPU, a
    /// lane with its own CUDA stream ([`crate::gpu::GpuDevice::lane`]), so
    /// sessions on different threads run side by side; the CPU as is.
    pub fn lane(&self) -> Result<Engine> {
        match self {
            Engine::Cpu => Ok(Engine::Cpu),
            #[cfg(feature = "cuda")]
            Engine::Gpu { device, options } => Ok(Engine::Gpu {
                device: device.lane()?,
                options: options.clone(),
            }),
        }
    }

    /// A streaming session over `model` on this engine.
    pub fn session(&self, model: Arc<PulsedModel>) -> Result<StreamingSession> {
        let runner = self.runner(model.graph.clone().into(), None)?;
        StreamingSession::with_runner(model, runner)
    }
}
