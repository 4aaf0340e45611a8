//! `pulsed bench --model DIR` on a checkpoint that streams its encoder
//! (chunked attention, docs/notes/streaming-whisper.md): the pulsed encoder's
//! chunk step over one 30 s window of the file's features (tiled), timed
//! step by step on the CPU and, with `--device cuda`, captured on the GPU;
//! each against the audio a chunk holds.

use std::time::Instant;

use pulsed::graph::{Runner, StepRunner};
use pulsed::models::whisper::{streaming, WhisperModel};
use pulsed::ops::Tensor;

/// Prints the chunk step's median and slowest time per runner (nothing for
/// a checkpoint that does not stream).
pub fn run(model: &WhisperModel, audio: &[f32], gpu: bool) -> Result<(), String> {
    let cfg = &model.config;
    if cfg.encoder_context.is_none() {
        return Ok(());
    }
    let e = |e: pulsed::Error| e.to_string();
    let pulsed = streaming::pulsed_encoder(cfg, &model.f32_weights).map_err(e)?;
    let pulse = pulsed.input_stream().map_err(e)?.pulse;
    let chunks = stream_chunks(model, audio, pulse)?;
    // a feature frame is 10 ms of audio
    let chunk_ms = pulse as f64 * 10.0;
    println!(
        "  streamed encoder: {} chunk steps of {pulse} feature frames ({chunk_ms:.0} ms of audio), \
         algorithmic latency {:.1} ms:",
        chunks.len(),
        streaming::latency_ms(cfg).map_err(e)?
    );
    let mut cpu = Runner::new(pulsed.graph.clone()).map_err(e)?;
    report("cpu", &time_steps(&mut cpu, &chunks)?, chunk_ms);
    #[cfg(feature = "cuda")]
    if gpu {
        use pulsed::gpu::{GpuDevice, GpuRunner, GpuRunnerOptions, Precision};
        let dev = GpuDevice::shared().map_err(|e| e.to_string())?;
        let opts = GpuRunnerOptions::new(Precision::F32);
        let mut g = GpuRunner::new(dev, pulsed.graph.clone(), None, &opts).map_err(e)?;
        let times = time_steps(&mut g, &chunks)?;
        let (on_gpu, on_cpu) = g.placement_counts();
        report(
            &format!("cuda F32 captured ({on_gpu} nodes on the GPU, {on_cpu} on the CPU)"),
            &times,
            chunk_ms,
        );
    }
    #[cfg(not(feature = "cuda"))]
    let _ = gpu;
    Ok(())
}

/// One window of the file's features (the file tiled to 30 s), in chunks
/// of `pulse` frames `[pulse, n_mels]`.
fn stream_chunks(model: &WhisperModel, audio: &[f32], pulse: usize) -> Result<Vec<Tensor>, String> {
    let cfg = &model.config;
    let (m, frames) = (cfg.num_mel_bins, cfg.window_frames());
    if audio.is_empty() {
        return Err("the file holds no audio".into());
    }
    let tiled: Vec<f32> = audio.iter().copied().cycle().take(frames * 160).collect();
    let mut fs =
        pulsed::models::whisper::features::FeatureStream::new(m).map_err(|e| e.to_string())?;
    fs.push(&tiled).map_err(|e| e.to_string())?;
    let mel = fs.finish().map_err(|e| e.to_string())?;
    let have = mel.len() / m;
    (0..frames / pulse)
        .map(|c| {
            let mut x = vec![0f32; pulse * m];
            for t in 0..pulse {
                let f = (c * pulse + t).min(have - 1);
                for k in 0..m {
                    x[t * m + k] = mel[k * have + f];
                }
            }
            Tensor::from_vec(vec![pulse, m], x).map_err(|e| e.to_string())
        })
        .collect()
}

/// Each chunk step's wall time in milliseconds, the first two left out (a
/// GPU runner's eager first step and its capture).
fn time_steps(r: &mut dyn StepRunner, chunks: &[Tensor]) -> Result<Vec<f64>, String> {
    let mut times = Vec::with_capacity(chunks.len());
    for (i, x) in chunks.iter().enumerate() {
        let t = Instant::now();
        r.step(&[x]).map_err(|e| e.to_string())?;
        if i > 1 {
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    Ok(times)
}

fn report(what: &str, ms: &[f64], chunk_ms: f64) {
    let mut v = ms.to_vec();
    v.sort_by(f64::total_cmp);
    let (Some(&med), Some(&max)) = (v.get(v.len() / 2), v.last()) else {
        return;
    };
    println!(
        "    {what}: median {med:.2} ms, slowest {max:.2} ms a chunk step \
         ({:.1}x and {:.1}x faster than real time)",
        chunk_ms / med,
        chunk_ms / max
    );
}
