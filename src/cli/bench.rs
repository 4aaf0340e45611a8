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
    /// With cuda: also time GPU f32 with TF32 matrix products (Whisper).
    #[arg(long)]
    tf32: bool,
}

/// `--model whisper-*`: one thread, the parts of a 30 s window's work
/// timed apart (front end, encoder, a decoder step for 1 and 5 sequences,
/// the output projection included), medians of `--reps`, in f32 and with
/// int8 weights side by side, then the encoder's
/// time per op kind. With `--device cuda`, the same on the GPU in f32 and
/// bf16, side by side with the CPU. A checkpoint that streams its encoder
/// also gets its chunk step timed (`bench_streamed`).
fn whisper(a: &Args) -> Result<ExitCode, String> {
    use pulsed::models::whisper::{CpuWhisper, WhisperBackend, WhisperModel};
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
        super::transcribe_bench::cpu_model()
    );
    let window = whisper_times("cpu", &mut w, &audio.samples, a.reps)?;
    let int8 = model.clone().with_int8().map_err(|e| e.to_string())?;
    let mut q = CpuWhisper::new(&int8).map_err(|e| e.to_string())?;
    whisper_times("cpu int8 weights", &mut q, &audio.samples, a.reps)?;
    for (label, net) in [("f32", &mut w), ("int8", &mut q)] {
        net.time_nodes();
        step_ms(net, 5, 1)?;
        println!("  cpu decoder step (5 sequences, {label}) by op kind, 40 steps:");
        for (_, op, t) in net
            .node_times()
            .into_iter()
            .filter(|x| x.0 == "step")
            .take(6)
        {
            println!("    {op:<20} {:8.2} ms", t.as_secs_f64() * 1000.0);
        }
    }
    drop((q, int8));
    use super::device::Precision as P;
    let mut gpus = match a.device {
        super::device::Device::Cpu => vec![],
        _ => vec![(P::F32, false), (P::Bf16, false)],
    };
    if a.tf32 && !gpus.is_empty() {
        gpus.push((P::F32, true));
    }
    for &(p, tf32) in &gpus {
        let engine = super::device::Device::Cuda.engine_tf32(p, tf32)?;
        let mut g = pulsed::models::whisper::network(&model, &engine).map_err(|e| e.to_string())?;
        let tf = if tf32 { " TF32" } else { "" };
        whisper_times(&format!("cuda {p:?}{tf}"), &mut *g, &audio.samples, a.reps)?;
    }
    #[cfg(feature = "cuda")]
    if !gpus.is_empty() {
        whisper_gpu_detail(&model, &window, a.reps)?;
    }
    super::bench_streamed::run(&model, &audio.samples, !gpus.is_empty())?;
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

/// Device-to-device copy bandwidth of the H100 here, bytes read plus
/// written (/work/.library/device/KINDS.md): the floor's rate.
#[cfg(feature = "cuda")]
const H100_COPY_BYTES_PER_S: f64 = 3.0e12;

/// The GPU's decoder step captured against eager at 1, 5 and 32
/// sequences, beside its floor (bytes a step must read at the card's copy
/// bandwidth), then where an eager encoder pass and step spend their time.
#[cfg(feature = "cuda")]
fn whisper_gpu_detail(
    model: &pulsed::models::whisper::WhisperModel,
    window: &[f32],
    reps: usize,
) -> Result<(), String> {
    use pulsed::gpu::{GpuDevice, GpuRunnerOptions, Launches, Precision};
    use pulsed::models::whisper::{GpuWhisper, WhisperBackend};
    let e = |e: pulsed::Error| e.to_string();
    let dev = GpuDevice::shared().map_err(|e| e.to_string())?;
    let captured = GpuRunnerOptions::new(Precision::F32);
    let eager = GpuRunnerOptions {
        launches: Launches::Eager,
        ..captured.clone()
    };
    let mut nets = Vec::new();
    for o in [&captured, &eager] {
        let mut n = GpuWhisper::on_gpu(model, dev.clone(), o).map_err(e)?;
        n.encode(&[window]).map_err(e)?;
        nets.push(n);
    }
    let c = &model.config;
    let f32s = |n: usize| 4.0 * n as f64;
    let embedding = f32s(c.vocab_size * c.d_model);
    let layers = c.decoder_layers as f64;
    // per layer: self q, k, v, o; cross q, o; two MLP matrices; their
    // biases and norms are a rounding error
    let weights = layers
        * (f32s(6 * c.d_model * c.d_model) + f32s(2 * c.d_model * c.decoder_ffn_dim))
        + embedding;
    let cross_window = layers * 2.0 * f32s(c.max_source_positions * c.d_model);
    println!(
        "  cuda F32 decoder step, captured vs eager (20 steps after a 2-token prompt; floor: \
         weights {:.1} MB + cached keys and values read, at {:.1} TB/s):",
        weights / 1e6,
        H100_COPY_BYTES_PER_S / 1e12
    );
    for batch in [1usize, 5, 32] {
        let cap = step_ms(&mut nets[0], batch, reps)?;
        let eag = step_ms(&mut nets[1], batch, reps)?;
        // self-attention rows at mid-run (12 of the 22 positions), and the
        // one window beams share or a window per sequence (batched files)
        let self_kv = batch as f64 * layers * 2.0 * f32s(12 * c.d_model);
        let floor =
            |windows: f64| (weights + self_kv + windows * cross_window) / H100_COPY_BYTES_PER_S;
        println!(
            "    {batch:>2} sequences: captured {cap:7.3} ms, eager {eag:7.3} ms; floor {:.1} us \
             (one window), {:.1} us (a window each)",
            floor(1.0) * 1e6,
            floor(batch as f64) * 1e6
        );
    }
    for batch in [1usize, 32] {
        let times = nets[1].profile(window, batch).map_err(e)?;
        if batch == 1 {
            print_profile("cuda F32 profile, encoder, one window", &times, "encoder");
        }
        let what = format!("cuda F32 profile, decoder step, {batch} sequences");
        print_profile(&what, &times, "step");
    }
    let bf16 = GpuRunnerOptions {
        launches: Launches::Eager,
        ..GpuRunnerOptions::new(Precision::Bf16)
    };
    let times = GpuWhisper::on_gpu(model, dev, &bf16)
        .and_then(|mut n| n.profile(window, 1))
        .map_err(e)?;
    print_profile("cuda Bf16 profile, encoder, one window", &times, "encoder");
    Ok(())
}

/// The `graph` part of a profile, by op kind, then its slowest nodes.
#[cfg(feature = "cuda")]
fn print_profile(what: &str, times: &[pulsed::models::whisper::NodeTime], graph: &str) {
    let mine: Vec<_> = times.iter().filter(|t| t.graph == graph).collect();
    let mut by_kind: std::collections::BTreeMap<(&str, bool), (f64, usize)> = Default::default();
    for t in &mine {
        let k = by_kind.entry((t.op, t.on_gpu)).or_default();
        k.0 += t.seconds;
        k.1 += 1;
    }
    let total: f64 = mine.iter().map(|t| t.seconds).sum();
    let mut v: Vec<_> = by_kind.into_iter().collect();
    v.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    println!(
        "  {what} (eager, node by node; {:.3} ms in all):",
        total * 1e3
    );
    for ((kind, gpu), (t, n)) in v.iter().take(10) {
        let place = if *gpu { "gpu" } else { "cpu" };
        println!("    {kind:<24} {place} {n:>4} nodes {:>9.3} ms", t * 1e3);
    }
    let mut slow = mine.clone();
    slow.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    for t in slow.iter().take(4) {
        println!(
            "    slowest: {:<36} {:<20} {:>9.1} us",
            t.node,
            t.op,
            t.seconds * 1e6
        );
    }
}

/// Times `w`'s front end, encoder and decoder steps on `audio` (medians of
/// `reps` after a warm-up), prints them under `label` and returns the
/// encoder window it used.
fn whisper_times(
    label: &str,
    w: &mut dyn pulsed::models::whisper::WhisperBackend,
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
    let t_step1 = step_ms(w, 1, reps)?;
    let t_step5 = step_ms(w, 5, reps)?;
    println!("  {label}:");
    println!("    front end:          {t_mel:8.2} ms for the file");
    println!("    encoder:            {t_enc:8.2} ms per 30 s window");
    println!("    decoder step, 1:    {t_step1:8.2} ms per token");
    println!("    decoder step, 5:    {t_step5:8.2} ms per token (5 beams)");
    Ok(window)
}

/// Median milliseconds of a decoder step of `beams` sequences on window
/// 0: a prompt, then 20 steps, `reps` times after a warm-up.
fn step_ms(
    w: &mut dyn pulsed::models::whisper::WhisperBackend,
    beams: usize,
    reps: usize,
) -> Result<f64, String> {
    let e = |e: pulsed::Error| e.to_string();
    let mut logits = Vec::new();
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
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    // a Whisper checkpoint's internals are timed and compared apart
    if let Ok(pulsed::asr::Family::Whisper) = pulsed::asr::Family::of(a.model.as_deref(), false) {
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
            for (id, t, _) in times {
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
        for (id, t, _) in slowest.iter().take(6) {
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
