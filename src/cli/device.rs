//! `--device cpu|cuda|auto`.

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Device {
    Cpu,
    Cuda,
    Auto,
}

impl Device {
    /// Resolves the choice to a device this build can run on, or why not.
    pub fn resolve(self) -> Result<Device, String> {
        match self {
            Device::Cpu | Device::Auto => Ok(Device::Cpu),
            Device::Cuda => Err(
                "--device cuda: this build of pulsed has no CUDA backend yet; use --device cpu"
                    .into(),
            ),
        }
    }
}
