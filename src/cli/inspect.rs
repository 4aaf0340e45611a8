//! `pulsed inspect [MODEL] [--pulse N]`.

use std::path::PathBuf;
use std::process::ExitCode;

use pulsed::models::conformer::{Head, Taps};
use pulsed::models::ModelDir;

use super::device::Device;

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
    /// Where nodes would run.
    #[arg(long, value_enum, default_value = "cpu")]
    device: Device,
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    a.device.resolve()?;
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
    super::print_all(&text)?;
    Ok(ExitCode::SUCCESS)
}
