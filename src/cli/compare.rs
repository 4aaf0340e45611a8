//! `pulsed compare`: the shipped (or any) model on the CPU and on the GPU
//! side by side, every node after every chunk.

use std::path::PathBuf;
use std::process::ExitCode;

use super::device::Precision;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// WAV file to stream (default: the shipped fixture).
    file: Option<PathBuf>,
    /// Model folder (default: the shipped model).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Input samples per pulse.
    #[arg(long, default_value_t = 5120)]
    pulse: usize,
    /// GPU storage precision.
    #[arg(long, visible_alias = "dtype", value_enum, default_value = "f32")]
    precision: Precision,
    /// Feed every GPU node the CPU's inputs (pins the wrong op) instead of
    /// letting the GPU run on its own outputs (shows drift).
    #[arg(long)]
    reseed: bool,
    /// Largest error allowed, relative to each chunk's largest CPU value
    /// (at least 1) [default: 1e-4 for f32, 1e-2 for bf16].
    #[arg(long)]
    tolerance: Option<f32>,
    /// bf16: a node may also be off by this many times what rounding every
    /// value to bf16 costs it on the CPU at that step (a CPU run that
    /// stores bf16 as the GPU does); 0: the tolerance alone.
    #[arg(long, default_value_t = 4.0)]
    bf16_budget: f32,
    /// One JSON object per node, then a summary object.
    #[arg(long)]
    json: bool,
    /// Also write the CPU's per-node, per-chunk outputs here (safetensors,
    /// tensors named `NODE#CHUNK`), for later `--reference` runs.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Compare the GPU with this saved reference instead of the live CPU.
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Draw the error of every node across chunks into this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Whisper: decoder steps compared after the prompt (fed the CPU's
    /// greedy tokens; fewer when the text ends).
    #[arg(long, default_value_t = 24)]
    steps: usize,
}

#[cfg(feature = "cuda")]
impl Args {
    /// The GPU precision, the tolerance (its default per precision), the
    /// bf16 budget and the mode asked for.
    fn settings(&self) -> Result<Settings, String> {
        use pulsed::gpu::compare::CompareMode;
        use pulsed::gpu::Precision as P;
        let p = self.precision.gpu()?;
        let tol = self.tolerance.unwrap_or(match p {
            P::F32 => 1e-4,
            P::Bf16 => 1e-2,
        });
        let budget = (p == P::Bf16 && self.bf16_budget > 0.0).then_some(self.bf16_budget);
        let mode = if self.reseed {
            CompareMode::Reseeded
        } else {
            CompareMode::Cumulative
        };
        Ok(Settings {
            p,
            tol,
            budget,
            mode,
        })
    }
}

#[cfg(feature = "cuda")]
struct Settings {
    p: pulsed::gpu::Precision,
    tol: f32,
    budget: Option<f32>,
    mode: pulsed::gpu::compare::CompareMode,
}

#[cfg(feature = "cuda")]
impl Settings {
    /// "tolerance 1e-2 or 4x bf16's own drift", for the verdict lines.
    fn tolerance(&self) -> String {
        match self.budget {
            Some(f) => format!("tolerance {:e} or {f}x bf16's own drift", self.tol),
            None => format!("tolerance {:e}", self.tol),
        }
    }
}

#[cfg(not(feature = "cuda"))]
pub fn run(_: Args) -> Result<ExitCode, String> {
    Err("compare needs the CUDA backend (this build has no `cuda` feature)".into())
}

#[cfg(feature = "cuda")]
pub fn run(a: Args) -> Result<ExitCode, String> {
    // a Whisper checkpoint's internals are timed and compared apart
    if let Ok(pulsed::asr::Family::Whisper) = pulsed::asr::Family::of(a.model.as_deref(), false) {
        return whisper(&a);
    }
    let settings = a.settings()?;
    let Settings {
        p,
        tol,
        budget,
        mode,
    } = settings;
    use pulsed::gpu::compare::{compare_steps_with, svg, Reference};
    use pulsed::gpu::{GpuDevice, GpuRunner, GpuRunnerOptions};
    use pulsed::models::conformer::{Head, Taps};
    use pulsed::models::ModelDir;

    let device = GpuDevice::shared().map_err(|e| format!("no usable GPU: {e}"))?;
    let dir = super::model_dir(a.model);
    let model = ModelDir::open(&dir).map_err(|e| e.to_string())?;
    let file = a.file.unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/asr/hello.wav"
        ))
    });
    let audio =
        pulsed::audio::load_wav(&file, model.config.sample_rate).map_err(|e| e.to_string())?;
    let graph = model
        .graph(Taps {
            head: Head::LogProbs,
            intermediates: false,
        })
        .map_err(|e| e.to_string())?;
    let pulsed = pulsed::pulse::pulsify(&graph, a.pulse).map_err(|e| e.to_string())?;
    let mut opts = GpuRunnerOptions::new(p);
    opts.keep_values = true;
    opts.launches = pulsed::gpu::Launches::Eager;
    let mut gpu =
        GpuRunner::new(device, pulsed.graph.clone(), None, &opts).map_err(|e| e.to_string())?;
    let reference = match &a.reference {
        Some(p) => Some(Reference::load(p).map_err(|e| e.to_string())?),
        None => None,
    };
    let mut record = a.save.as_ref().map(|_| Reference::default());
    let c = compare_steps_with(
        &pulsed,
        &mut gpu,
        &audio.samples,
        2,
        tol,
        budget,
        mode,
        reference.as_ref(),
        record.as_mut(),
    )
    .map_err(|e| e.to_string())?;
    if let (Some(path), Some(r)) = (&a.save, &record) {
        r.save(path).map_err(|e| e.to_string())?;
        eprintln!("saved {} node outputs to {}", r.len(), path.display());
    }
    if let Some(path) = &a.plot {
        std::fs::write(path, svg(&c)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if reference.is_some() && c.nodes.iter().all(|n| n.total == 0) {
        return Err("the reference holds none of this model's nodes and chunks".into());
    }
    let mut out = String::new();
    for n in &c.nodes {
        let share = n.beyond as f64 / n.total.max(1) as f64;
        let first = n.first_bad;
        if a.json {
            let v = serde_json::json!({
                "node": n.name, "op": n.op, "max_abs": n.max_abs, "max_rel": n.max_rel,
                "allowed": n.allowed, "beyond_share": share, "first_bad_chunk": first.map(|f| f.0),
                "first_bad_index": first.map(|f| f.1),
            });
            out.push_str(&format!("{v}\n"));
        } else {
            out.push_str(&format!(
                "{:<40} {:<22} max abs {:>9.3e} rel {:>9.3e} allowed {:>9.3e} beyond {:>6.2}%{}\n",
                n.name,
                n.op,
                n.max_abs,
                n.max_rel,
                n.allowed,
                share * 100.0,
                first.map_or(String::new(), |f| format!(
                    "  first at chunk {} index {}",
                    f.0, f.1
                ))
            ));
        }
    }
    let bad = c.failures();
    let worst = c.worst();
    let (gpu_nodes, cpu_nodes) = gpu.placement_counts();
    if a.json {
        let v = serde_json::json!({
            "summary": true, "mode": format!("{mode:?}"), "precision": format!("{p:?}"),
            "chunks": c.chunks, "nodes": c.nodes.len(), "gpu_nodes": gpu_nodes,
            "cpu_nodes": cpu_nodes, "tolerance": tol, "bf16_budget": budget,
            "nodes_beyond": bad.len(),
            "first_bad": bad.first().map(|n| &n.name),
            "first_bad_chunk": bad.first().and_then(|n| n.first_bad.map(|f| f.0)),
            "worst": worst.map(|n| &n.name), "worst_rel": worst.map(|n| n.max_rel),
        });
        out.push_str(&format!("{v}\n"));
    } else {
        out.push_str(&format!(
            "{mode:?} {p:?}: {} chunks, {} nodes ({gpu_nodes} on the GPU, {cpu_nodes} on the CPU), {}: {}\n",
            c.chunks,
            c.nodes.len(),
            settings.tolerance(),
            verdict(&c, "chunk")
        ));
    }
    super::print_all(&out)?;
    Ok(if bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `--model whisper-*`: the encoder over the file's first window, then
/// `--steps` decoder steps fed the CPU's greedy tokens, CPU against GPU;
/// for a checkpoint that streams, also its pulsed encoder a chunk a step.
#[cfg(feature = "cuda")]
fn whisper(a: &Args) -> Result<ExitCode, String> {
    use pulsed::gpu::compare::Comparison;
    use pulsed::gpu::GpuDevice;
    use pulsed::models::whisper::compare::{compare, WhisperCompare};
    use pulsed::models::whisper::features::FeatureStream;
    use pulsed::models::whisper::{GenerationConfig, Task, WhisperModel, WhisperTokenizer};

    if a.save.is_some() || a.reference.is_some() || a.plot.is_some() {
        return Err("--save, --reference and --plot are for pulsed models, not Whisper".into());
    }
    let e = |e: pulsed::Error| e.to_string();
    let spec = a
        .model
        .as_deref()
        .and_then(|m| m.to_str())
        .unwrap_or_default();
    let model = WhisperModel::open(spec).map_err(e)?;
    let tok = WhisperTokenizer::from_file(&model.dir.join("tokenizer.json"))
        .map_err(|e| e.to_string())?;
    let device = GpuDevice::shared().map_err(|e| format!("no usable GPU: {e}"))?;
    let file = a.file.clone().unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/whisper/librivox_dev00.wav"
        ))
    });
    let audio = pulsed::audio::load_wav(&file, 16_000).map_err(|e| e.to_string())?;
    let cfg = &model.config;
    let mut fs = FeatureStream::new(cfg.num_mel_bins).map_err(e)?;
    fs.push(&audio.samples).map_err(e)?;
    let mel = fs.finish().map_err(e)?;
    // the first 30 s window, padded as decoding pads it for this checkpoint
    let (m, wf) = (cfg.num_mel_bins, cfg.window_frames());
    let frames = mel.len() / m;
    let keep = frames.saturating_sub(1).min(wf);
    let pad = cfg.padding().value(&mel);
    let mut window = vec![pad; m * wf];
    for k in 0..m {
        window[k * wf..k * wf + keep].copy_from_slice(&mel[k * frames..k * frames + keep]);
    }
    let sp = *tok.special();
    let gen = GenerationConfig::load(&model.dir).map_err(|e| e.to_string())?;
    let multilingual = gen.is_multilingual;
    let mut prompt = tok
        .sot_sequence(multilingual, "en", Task::Transcribe)
        .map_err(|e| e.to_string())?;
    prompt.push(sp.no_timestamps);
    let settings = a.settings()?;
    let Settings {
        p,
        tol,
        budget,
        mode,
    } = settings;
    let what = WhisperCompare {
        window: &window,
        frames: keep,
        prompt: &prompt,
        steps: a.steps,
        end_of_text: sp.eot,
        options: pulsed::gpu::GpuRunnerOptions::new(p),
        tolerance: tol,
        bf16_budget: budget,
        mode,
    };
    let c = compare(&model, device, &what).map_err(e)?;
    let mut out = String::new();
    let text = tok.decode(&c.tokens[prompt.len()..]).unwrap_or_default();
    let mut parts: Vec<(&str, &Comparison)> = vec![("encoder", &c.encoder)];
    if let Some((streamed, _)) = &c.streamed {
        parts.push(("streamed encoder", streamed));
    }
    parts.push(("decoder", &c.decoder));
    let mut failed = false;
    for (part, cmp) in parts {
        let bad = cmp.failures();
        failed |= !bad.is_empty();
        let worst = cmp.worst();
        if a.json {
            for n in &cmp.nodes {
                let v = serde_json::json!({
                    "graph": part, "node": n.name, "op": n.op, "max_abs": n.max_abs,
                    "max_rel": n.max_rel, "allowed": n.allowed,
                    "beyond_share": n.beyond as f64 / n.total.max(1) as f64,
                    "first_bad_step": n.first_bad.map(|f| f.0),
                });
                out.push_str(&format!("{v}\n"));
            }
            let v = serde_json::json!({
                "summary": true, "graph": part, "mode": format!("{mode:?}"),
                "precision": format!("{p:?}"), "steps": cmp.chunks, "nodes": cmp.nodes.len(),
                "tolerance": tol, "bf16_budget": budget, "nodes_beyond": bad.len(),
                "first_bad": bad.first().map(|n| &n.name),
                "worst": worst.map(|n| &n.name), "worst_rel": worst.map(|n| n.max_rel),
            });
            out.push_str(&format!("{v}\n"));
            continue;
        }
        let mut by_err: Vec<_> = cmp.nodes.iter().collect();
        by_err.sort_by(|a, b| b.max_rel.total_cmp(&a.max_rel));
        for n in by_err.iter().take(5) {
            out.push_str(&format!(
                "  {part} {:<40} {:<20} max abs {:>9.3e} rel {:>9.3e} allowed {:>9.3e}\n",
                n.name, n.op, n.max_abs, n.max_rel, n.allowed
            ));
        }
        out.push_str(&format!(
            "{part} ({mode:?} {p:?}): {} steps, {} nodes, {}: {}\n",
            cmp.chunks,
            cmp.nodes.len(),
            settings.tolerance(),
            verdict(cmp, "step")
        ));
    }
    if !a.json {
        if let Some((_, (g, cpu))) = c.streamed {
            out.push_str(&format!(
                "streamed encoder: {g} nodes of its chunk step on the GPU, {cpu} on the CPU\n"
            ));
        }
        let (g, cpu) = c.step_placement;
        let step = match c.decoder_chooses {
            true => "the step choosing its tokens",
            false => "the logits step",
        };
        out.push_str(&format!(
            "decoder fed {} tokens, {step} ({g} nodes on the GPU, {cpu} on the CPU): {text:?}\n",
            c.tokens.len()
        ));
    }
    super::print_all(&out)?;
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// "all within; worst ..." or "N nodes beyond, first ... at `unit` K".
#[cfg(feature = "cuda")]
fn verdict(c: &pulsed::gpu::compare::Comparison, unit: &str) -> String {
    let worst = c.worst();
    match c.failures().first() {
        None => format!(
            "all within; worst {} rel {:.3e}",
            worst.map_or("-", |n| &n.name),
            worst.map_or(0.0, |n| n.max_rel)
        ),
        Some(n) => format!(
            "{} nodes beyond, first {} ({}) at {unit} {}",
            c.failures().len(),
            n.name,
            n.op,
            n.first_bad.map_or(0, |f| f.0)
        ),
    }
}
