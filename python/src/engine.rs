//! `device="auto"|"cpu"|"cuda"` and `precision="f32"|"bf16"|"int8"` as an
//! [`Engine`], as the command line's `--device` and `--precision` choose it.

use pulsed::engine::Engine;

/// The engine `device` names, or the one-line reason it cannot be had:
/// `auto` takes a usable GPU and the CPU otherwise; `cuda` fails without one.
pub fn engine(device: &str, precision: &str, tf32: bool) -> Result<Engine, String> {
    if !matches!(precision, "f32" | "bf16" | "int8") {
        return Err(format!(
            "precision must be \"f32\", \"bf16\" or \"int8\" (got {precision:?})"
        ));
    }
    match device {
        "cpu" => Ok(Engine::Cpu),
        // int8 weights are the CPU's (Whisper): auto takes the CPU for them
        "auto" if precision == "int8" => Ok(Engine::Cpu),
        "cuda" if precision == "int8" => {
            Err("precision=\"int8\" runs on the CPU only: use device=\"cpu\"".into())
        }
        "auto" => Ok(gpu(precision, tf32).unwrap_or(Engine::Cpu)),
        "cuda" => gpu(precision, tf32)
            .map_err(|why| format!("device=\"cuda\": {why}; use device=\"cpu\" or \"auto\"")),
        other => Err(format!(
            "device must be \"auto\", \"cpu\" or \"cuda\" (got {other:?})"
        )),
    }
}

#[cfg(feature = "cuda")]
fn gpu(precision: &str, tf32: bool) -> Result<Engine, String> {
    use pulsed::gpu::{GpuDevice, GpuRunnerOptions, Precision};
    let mut device = GpuDevice::shared().map_err(|e| e.to_string())?;
    if tf32 {
        device = device.lane_with_tf32().map_err(|e| e.to_string())?;
    }
    let precision = match precision {
        "bf16" => Precision::Bf16,
        _ => Precision::F32,
    };
    Ok(Engine::Gpu {
        device,
        options: GpuRunnerOptions::new(precision),
    })
}

#[cfg(not(feature = "cuda"))]
fn gpu(_: &str, _: bool) -> Result<Engine, String> {
    Err("this build of pulsed has no CUDA backend (built without the `cuda` feature)".into())
}
