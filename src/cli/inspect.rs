//! `pulsed inspect [MODEL] [--pulse N]`.

use std::path::PathBuf;
use std::process::ExitCode;

use pulsed::models::conformer::{Head, Taps};
use pulsed::models::ModelDir;

#[cfg(feature = "cuda")]
use super::device::describe;
use super::device::{Device, Precision};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model folder (default: the shipped model).
    model: Option<PathBuf>,
    /// Pulsify with this many input samples per pulse and show pulsed facts and delays.
    #[arg(long)]
    pulse: Option<usize>,
    /// Output `log_probs` instead of the fused greedy CTC head.
    #[arg(long)]
    log_probs: bool,
    /// With cuda: translate for the GPU and show where each node runs (and why not on the GPU).
    #[arg(long, value_enum, default_value = "cpu")]
    device: Device,
    /// GPU storage precision for --device cuda.
    #[arg(long, value_enum, default_value = "f32")]
    precision: Precision,
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    let engine = a.device.engine(a.precision)?;
    let dir = super::model_dir(a.model);
    let model = ModelDir::open(&dir).map_err(|e| e.to_string())?;
    let head = if a.log_probs {
        Head::LogProbs
    } else {
        Head::Greedy
    };
    let graph = model
        .graph(Taps {
            head,
            intermediates: false,
        })
        .map_err(|e| e.to_string())?;
    let text = match a.pulse {
        None => graph.dump(),
        Some(p) => {
            let pulsed = pulsed::pulse::pulsify(&graph, p).map_err(|e| e.to_string())?;
            let mut text = pulsed.dump();
            let rate = model.config.sample_rate as f64;
            let session =
                pulsed::pulse::StreamingSession::new(pulsed).map_err(|e| e.to_string())?;
            text.push_str(&format!(
                "pulse {p} samples ({:.1} ms); output delay {} frames ({:.1} ms)\n",
                p as f64 * 1000.0 / rate,
                session.delay_frames(0),
                session.delay_ms(0, rate)
            ));
            text
        }
    };
    let text = match &engine {
        pulsed::engine::Engine::Cpu => text,
        #[cfg(feature = "cuda")]
        pulsed::engine::Engine::Gpu { device, options } => {
            let (g, s) = match a.pulse {
                Some(p) => (
                    pulsed::pulse::pulsify(&graph, p)
                        .map_err(|e| e.to_string())?
                        .graph,
                    None,
                ),
                None => (graph, Some(model.config.sample_rate as i64)),
            };
            placement(device.clone(), g, s, options, &describe(&engine))?
        }
    };
    super::print_all(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Where each node runs on the GPU (whole graphs typed for one second of audio).
#[cfg(feature = "cuda")]
fn placement(
    device: std::sync::Arc<pulsed::gpu::GpuDevice>,
    graph: pulsed::graph::Graph,
    s: Option<i64>,
    options: &pulsed::gpu::GpuRunnerOptions,
    device_line: &str,
) -> Result<String, String> {
    use pulsed::gpu::translator::Placement;
    let runner =
        pulsed::gpu::GpuRunner::new(device, graph, s, options).map_err(|e| e.to_string())?;
    let tr = runner.translation();
    let mut out = format!("device: {device_line}\n");
    if s.is_some() {
        out.push_str("whole graph typed for 1 s of audio (S = 16000)\n");
    }
    for (id, node) in runner.graph().nodes.iter().enumerate() {
        if matches!(tr.placements[id], Placement::Const) {
            continue;
        }
        out.push_str(&format!(
            "#{id:<4} {:<36} {:<22} {}\n",
            node.name,
            node.op.name(),
            tr.placements[id]
        ));
    }
    let (gpu, cpu) = runner.placement_counts();
    let m = runner.memory;
    out.push_str(&format!(
        "{gpu} nodes on the GPU, {cpu} on the CPU; device memory: activations {:.1} KiB \
         (arena, {:.1} KiB without reuse), state {:.1} KiB, weights {:.1} MiB, scratch {:.1} KiB\n",
        m.arena as f64 / 1024.0,
        m.unshared as f64 / 1024.0,
        m.state as f64 / 1024.0,
        m.consts as f64 / (1 << 20) as f64,
        m.scratch as f64 / 1024.0
    ));
    Ok(out)
}
