//! `pulsed bench`: real-time factor of the shipped model on the CPU, streamed
//! and whole, and the streaming session's own overhead, side by side.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use pulsed::asr::{Decoding, Mode, Recognizer, RecognizerOptions};
use pulsed::models::ModelDir;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// WAV file to run (default: the shipped fixture).
    file: Option<PathBuf>,
    #[arg(long)]
    model: Option<PathBuf>,
    /// Input samples per pulse.
    #[arg(long, default_value_t = 5120)]
    pulse: usize,
    /// Timed repetitions (the median is printed).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// With cuda: also time the GPU (per-chunk latency eager vs captured, f32 vs
    /// bf16, whole-file throughput) side by side with the CPU.
    #[arg(long, value_enum, default_value = "cpu")]
    device: super::device::Device,
}

/// `--model whisper-*`: one thread, the parts of a 30 s window's work
/// timed apart (front end, encoder, a decoder step for 1 and 5 sequences,
/// the output projection included), medians of `--reps`, then the encoder's
/// time per op kind. With `--device cuda`, the same on the GPU in f32 and
/// bf16, side by side with the CPU.
fn whisper(a: &Args) -> Result<ExitCode, String> {
    use pulsed::whisper::{CpuWhisper, WhisperBackend, WhisperModel};
    let spec = a
        .model
        .as_deref()
        .and_then(|m| m.to_str())
        .unwrap_or_default();
    let model = WhisperModel::open(spec).map_err(|e| e.to_string())?;
    let mut w = CpuWhisper::new(&model).map_err(|e| e.to_string())?;
    let file = a.file.clone().unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/whisper/librivox_dev00.wav"
        ))
    });
    let audio = pulsed::audio::load_wav(&file, 16_000).map_err(|e| e.to_string())?;
    println!(
        "model {} ({} + {} layers, d {}), file {} ({:.2} s), one thread, {}",
        model.dir.display(),
        model.config.encoder_layers,
        model.config.decoder_layers,
        model.config.d_model,
        file.display(),
        audio.duration_s,
        super::transcribe::cpu_model()
    );
    let window = whisper_times("cpu", &mut w, &audio.samples, a.reps)?;
    let gpus: &[super::device::Precision] = match a.device {
        super::device::Device::Cpu => &[],
        _ => &[
            super::device::Precision::F32,
            super::device::Precision::Bf16,
        ],
    };
    for &p in gpus {
        let engine = super::device::Device::Cuda.engine(p)?;
        let mut g = pulsed::whisper::network(&model, &engine).map_err(|e| e.to_string())?;
        whisper_times(&format!("cuda {p:?}"), &mut *g, &audio.samples, a.reps)?;
    }
    w.time_nodes();
    w.encode(&[&window]).map_err(|e| e.to_string())?;
    println!("  cpu encoder by op kind (one window):");
    for (g, op, t) in w
        .node_times()
        .into_iter()
        .filter(|x| x.0 == "encoder")
        .take(8)
    {
        println!("    {g} {op:<20} {:8.2} ms", t.as_secs_f64() * 1000.0);
    }
    Ok(ExitCode::SUCCESS)
}

/// Times `w`'s front end, encoder and decoder steps on `audio` (medians of
/// `reps` after a warm-up), prints them under `label` and returns the
/// encoder window it used.
fn whisper_times(
    label: &str,
    w: &mut dyn pulsed::whisper::WhisperBackend,
    audio: &[f32],
    reps: usize,
) -> Result<Vec<f32>, String> {
    let reps = reps.max(1);
    let e = |e: pulsed::Error| e.to_string();
    let time = |f: &mut dyn FnMut() -> Result<(), String>| -> Result<f64, String> {
        f()?; // warm-up
        let mut v = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            f()?;
            v.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(median(v))
    };
    let mut mel = Vec::new();
    let t_mel = time(&mut || {
        mel = w.log_mel(audio).map_err(e)?;
        Ok(())
    })?;
    let (m, frames) = (w.n_mels(), mel.len() / w.n_mels());
    let wf = w.window_frames();
    let mut window = vec![0f32; m * wf];
    let keep = frames.saturating_sub(1).min(wf);
    for k in 0..m {
        window[k * wf..k * wf + keep].copy_from_slice(&mel[k * frames..k * frames + keep]);
    }
    let t_enc = time(&mut || w.encode(&[&window]).map_err(e))?;
    let mut logits = Vec::new();
    let mut steps =
        |w: &mut dyn pulsed::whisper::WhisperBackend, beams: usize| -> Result<f64, String> {
            // a prompt, then 20 steps; the time per step
            let mut v = Vec::with_capacity(reps);
            for _ in 0..=reps {
                w.start(&[0]).map_err(e)?;
                w.feed(&[50257, 50362], 2, &[1], &mut logits).map_err(e)?;
                w.reorder(&vec![0; beams]).map_err(e)?;
                let t = Instant::now();
                for i in 0..20u32 {
                    let toks: Vec<u32> = (0..beams as u32).map(|b| 1000 + 7 * i + b).collect();
                    w.feed(&toks, 1, &[0], &mut logits).map_err(e)?;
                }
                v.push(t.elapsed().as_secs_f64() * 1000.0 / 20.0);
            }
            Ok(median(v[1..].to_vec()))
        };
    let t_step1 = steps(w, 1)?;
    let t_step5 = steps(w, 5)?;
    println!("  {label}:");
    println!("    front end:          {t_mel:8.2} ms for the file");
    println!("    encoder:            {t_enc:8.2} ms per 30 s window");
    println!("    decoder step, 1:    {t_step1:8.2} ms per token");
    println!("    decoder step, 5:    {t_step5:8.2} ms per token (5 beams)");
    Ok(window)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    if super::whisper::is_whisper(a.model.as_deref()) {
        return whisper(&a);
    }
    let gpu = a.device != super::device::Device::Cpu;
    let dir = super::model_dir(a.model.clone());
    let file = a.file.unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/asr/hello.wav"
        ))
    });
    let model = ModelDir::open(&dir).map_err(|e| e.to_string())?;
    let audio =
        pulsed::audio::load_wav(&file, model.config.sample_rate).map_err(|e| e.to_string())?;
    let dur = audio.duration_s;
    let reps = a.reps.max(1);
    println!(
        "file {} ({dur:.2} s), model {}, pulse {} samples, one thread",
        file.display(),
        dir.display(),
        a.pulse
    );
    for (label, mode) in [
        ("streamed", Mode::Streamed { pulse: a.pulse }),
        ("whole", Mode::Whole),
    ] {
        let rec = Recognizer::new(
            model.clone(),
            RecognizerOptions {
                mode,
                decoding: Decoding::Greedy,
            },
        )
        .map_err(|e| e.to_string())?;
        rec.transcribe(&audio.samples).map_err(|e| e.to_string())?; // warm-up
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            rec.transcribe(&audio.samples).map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64());
        }
        let t = median(times);
        println!(
            "{label:>9}: {:8.2} ms per file, real-time factor {:.4}",
            t * 1000.0,
            t / dur
        );
    }
    // session overhead: push() (buffering, state, collecting outputs) vs the bare steps
    let rec = Recognizer::new(
        model,
        RecognizerOptions {
            mode: Mode::Streamed { pulse: a.pulse },
            decoding: Decoding::Greedy,
        },
    )
    .map_err(|e| e.to_string())?;
    let pm = rec.pulsed_model().ok_or("no pulsed model")?.clone();
    let mut s = pulsed::pulse::StreamingSession::new(pm).map_err(|e| e.to_string())?;
    let pulses = audio.samples.len() / a.pulse;
    if pulses == 0 {
        return Err(format!("{} is shorter than one pulse", file.display()));
    }
    let body = &audio.samples[..pulses * a.pulse];
    let (mut pushed, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        s.reset();
        let t = Instant::now();
        s.push(body).map_err(|e| e.to_string())?;
        pushed.push(t.elapsed().as_secs_f64());
        s.reset();
        s.push(&body[..a.pulse - 1]).map_err(|e| e.to_string())?;
        let t = Instant::now();
        for _ in 0..pulses {
            s.step_only().map_err(|e| e.to_string())?;
        }
        bare.push(t.elapsed().as_secs_f64());
    }
    let (p, b) = (median(pushed), median(bare));
    println!(
        "  session: {:.3} ms per chunk step, {:.3} ms per push()-driven step, overhead {:+.2}%",
        b * 1000.0 / pulses as f64,
        p * 1000.0 / pulses as f64,
        (p - b) / b * 100.0
    );
    if gpu {
        #[cfg(feature = "cuda")]
        gpu_bench(&rec, &audio.samples, dur, reps)?;
        #[cfg(not(feature = "cuda"))]
        return Err("this build has no CUDA backend".into());
    }
    Ok(ExitCode::SUCCESS)
}

/// Per-chunk latency (eager vs captured, f32 vs bf16) and whole-file
/// throughput on the GPU. A chunk step is timed from the pulse's copy in to
/// its outputs back on the host (the host waits for the GPU every step).
#[cfg(feature = "cuda")]
fn gpu_bench(rec: &Recognizer, samples: &[f32], dur: f64, reps: usize) -> Result<(), String> {
    use pulsed::engine::Engine;
    use pulsed::gpu::{GpuDevice, GpuRunnerOptions, Launches, Precision};
    let device = GpuDevice::shared().map_err(|e| format!("--device cuda: {e}"))?;
    println!(
        "GPU: {} ({})",
        device.ctx.describe().map_err(|e| e.to_string())?,
        device.lib.describe_load()
    );
    let pm = rec.pulsed_model().ok_or("no pulsed model")?.clone();
    let pulse = pm.input_stream().map_err(|e| e.to_string())?.pulse;
    const STEPS: usize = 200;
    let mut captured_f32 = 0.0;
    // programmatic dependent launch off and on, side by side, where the
    // device has it (sm_90+); it stays on for everything after
    let pdl = device.ctx.pdl();
    let mut runs = vec![(Precision::F32, false)];
    if pdl {
        runs.push((Precision::F32, true));
    }
    runs.push((Precision::Bf16, pdl));
    for (precision, with_pdl) in runs {
        device.ctx.set_pdl(with_pdl).map_err(|e| e.to_string())?;
        let mut line = Vec::new();
        for launches in [Launches::Eager, Launches::Captured] {
            let mut options = GpuRunnerOptions::new(precision);
            options.launches = launches;
            let engine = Engine::Gpu {
                device: device.clone(),
                options,
            };
            let mut s = engine.session(pm.clone()).map_err(|e| e.to_string())?;
            s.push(&samples[..pulse.min(samples.len()) - 1])
                .map_err(|e| e.to_string())?;
            for _ in 0..20 {
                s.step_only().map_err(|e| e.to_string())?; // warm-up, capture, clocks up
            }
            let mut times = Vec::with_capacity(STEPS);
            for _ in 0..STEPS {
                let t = Instant::now();
                s.step_only().map_err(|e| e.to_string())?;
                times.push(t.elapsed().as_secs_f64());
            }
            let t = median(times);
            if precision == Precision::F32 && launches == Launches::Captured && with_pdl == pdl {
                captured_f32 = t;
            }
            line.push((launches, t));
        }
        let (eager, captured) = (line[0].1, line[1].1);
        println!(
            "  {precision:?} chunk step, PDL {} (median of {STEPS}): eager {:.3} ms, captured {:.3} ms ({:.2}x)",
            if with_pdl { "on " } else { "off" },
            eager * 1e3,
            captured * 1e3,
            eager / captured
        );
        if with_pdl != pdl {
            continue;
        }
        let r = Recognizer::new(rec.model().clone(), rec.options())
            .map_err(|e| e.to_string())?
            .with_engine(Engine::Gpu {
                device: device.clone(),
                options: GpuRunnerOptions::new(precision),
            });
        r.transcribe(samples).map_err(|e| e.to_string())?;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            r.transcribe(samples).map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64());
        }
        let t = median(times);
        println!(
            "  {precision:?} streamed file: {:.2} ms, {:.0} audio seconds per second (one stream)",
            t * 1e3,
            dur / t
        );
    }
    println!(
        "  one stream's captured f32 chunk step: {:.3} ms for {:.0} ms of audio",
        captured_f32 * 1e3,
        pulse as f64 * 1000.0 / rec.sample_rate() as f64
    );
    let x = pulsed::ops::Tensor::from_slice(&samples[..pulse.min(samples.len())]);
    if x.len() == pulse {
        launch_floor(&device, &pm, &x, captured_f32)?;
    }
    batched_bench(rec, &device)?;
    // where an eager f32 step spends its GPU time, node by node
    let mut r = pulsed::gpu::GpuRunner::new(
        device.clone(),
        pm.graph.clone(),
        None,
        &GpuRunnerOptions::new(Precision::F32),
    )
    .map_err(|e| e.to_string())?;
    if x.len() == pulse {
        let mut by_kind: std::collections::BTreeMap<&str, (f64, usize)> = Default::default();
        let mut total = 0.0;
        let mut slowest = Vec::new();
        for rep in 0..5 {
            let times = r.profile_step(&[&x]).map_err(|e| e.to_string())?;
            if rep < 4 {
                continue; // warm-up
            }
            slowest = times.clone();
            for (id, t) in times {
                let e = by_kind.entry(pm.graph.nodes[id].op.name()).or_default();
                e.0 += t;
                e.1 += 1;
                total += t;
            }
        }
        let mut v: Vec<_> = by_kind.into_iter().collect();
        v.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
        println!(
            "  profile (f32, eager, GPU time between events around each node; {:.3} ms in all):",
            total * 1e3
        );
        for (kind, (t, n)) in v {
            println!("    {kind:<24} {n:>4} nodes {:>8.3} ms", t * 1e3);
        }
        slowest.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (id, t) in slowest.iter().take(6) {
            let n = &pm.graph.nodes[*id];
            println!(
                "    slowest: {:<32} {:<22} {:>7.1} us",
                n.name,
                n.op.name(),
                t * 1e6
            );
        }
    }
    Ok(())
}

/// As many empty kernels as the captured f32 step has graph nodes, eager
/// and as a graph: how much of the step is launch cost, and the most that
/// capture can gain over eager launches at this kernel count.
#[cfg(feature = "cuda")]
fn launch_floor(
    device: &std::sync::Arc<pulsed::gpu::GpuDevice>,
    pm: &pulsed::pulse::PulsedModel,
    x: &pulsed::ops::Tensor,
    captured: f64,
) -> Result<(), String> {
    use pulsed::gpu::{GpuRunner, GpuRunnerOptions, Precision};
    let options = GpuRunnerOptions::new(Precision::F32);
    let mut r = GpuRunner::new(device.clone(), pm.graph.clone(), None, &options)
        .map_err(|e| e.to_string())?;
    // an eager warm-up step, then the one that captures
    for _ in 0..2 {
        pulsed::graph::StepRunner::step(&mut r, &[x]).map_err(|e| e.to_string())?;
    }
    let n = r.graph_nodes().map_err(|e| e.to_string())?;
    if n == 0 {
        return Ok(()); // nothing captured
    }
    let f = pulsed::gpu::floor::launch_floor(device, n, 200).map_err(|e| e.to_string())?;
    println!(
        "  launch floor, {n} empty kernels (the captured step's graph nodes), PDL {}: eager {:.3} ms, graph {:.3} ms ({:.2}x, the most capture gains at {n} kernels); the rest of the captured step (kernels' work, copies in and out) {:.3} ms",
        if device.ctx.pdl() { "on" } else { "off" },
        f.eager_s * 1e3,
        f.graph_s * 1e3,
        f.eager_s / f.graph_s,
        (captured - f.graph_s) * 1e3
    );
    Ok(())
}

/// Captured f32 chunk steps of batched sessions (B streams per step), side
/// by side: latency per step and audio seconds per second over all streams.
#[cfg(feature = "cuda")]
fn batched_bench(
    rec: &Recognizer,
    device: &std::sync::Arc<pulsed::gpu::GpuDevice>,
) -> Result<(), String> {
    use pulsed::gpu::{GpuRunner, GpuRunnerOptions, Precision};
    use pulsed::models::conformer::{Head, Taps};
    const STEPS: usize = 100;
    let pulse = match rec.options().mode {
        pulsed::asr::Mode::Streamed { pulse } => pulse,
        pulsed::asr::Mode::Whole => return Ok(()),
    };
    let pulse_s = pulse as f64 / rec.sample_rate() as f64;
    let taps = Taps {
        head: Head::LogProbs,
        intermediates: false,
    };
    println!("  batched streams (one captured f32 step for B streams, median of {STEPS}):");
    for batch in [1usize, 2, 4, 8, 16, 32, 64, 128] {
        let g = rec
            .model()
            .batched_graph(taps, batch)
            .map_err(|e| e.to_string())?;
        let pm = pulsed::pulse::pulsify(&g, pulse).map_err(|e| e.to_string())?;
        let mut r = GpuRunner::new(
            device.clone(),
            pm.graph.clone(),
            None,
            &GpuRunnerOptions::new(Precision::F32),
        )
        .map_err(|e| e.to_string())?;
        // speech-like levels, never zeros
        let x: Vec<f32> = (0..batch * pulse)
            .map(|i| ((i as f32 * 0.013).sin() * 0.3) + ((i * 7919 % 1000) as f32 - 500.0) * 1e-4)
            .collect();
        let x = pulsed::ops::Tensor::from_vec(vec![batch, pulse], x).map_err(|e| e.to_string())?;
        for _ in 0..20 {
            pulsed::graph::StepRunner::step(&mut r, &[&x]).map_err(|e| e.to_string())?;
        }
        let mut times = Vec::with_capacity(STEPS);
        for _ in 0..STEPS {
            let t = Instant::now();
            pulsed::graph::StepRunner::step(&mut r, &[&x]).map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64());
        }
        let t = median(times);
        println!(
            "    B {batch:>3}: {:.3} ms per step ({:.3} ms per stream), {:.0} audio s/s{}",
            t * 1e3,
            t * 1e3 / batch as f64,
            batch as f64 * pulse_s / t,
            if r.capture_failed() {
                " (capture failed: eager)"
            } else {
                ""
            }
        );
    }
    Ok(())
}
