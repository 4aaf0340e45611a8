//! Whisper on the CPU and on the GPU side by side, node by node: the
//! encoder over one window, then decoder steps fed the CPU's own greedy
//! tokens (`pulsed compare --model whisper-*`), and for a checkpoint that
//! streams (chunked attention) its pulsed encoder chunk by chunk. The
//! decoder step is the one decoding runs: at f32 the step that chooses its
//! tokens on the device (logits, then
//! [`TopTokens`](crate::ops::top_tokens::TopTokens)); at bf16 the same
//! step up to its logits, which both keep in f32.
//!
//! The two decoders need caches of their own (the GPU's is mirrored on the
//! device, and host ops refuse a mirrored cache), so each side builds its
//! step graph over its cache; the graphs are built the same way, so their
//! node ids match. Both caches take the CPU encoder's keys and values, so
//! the decoder comparison starts from the same window.

use std::sync::Arc;

use super::graphs::{self, DecoderShape};
use super::{streaming, WhisperModel};
use crate::gpu::compare::{compare_steps_with, CompareMode, Comparer, Comparison};
use crate::gpu::ops::kv_cache::{DeviceKvCache, DeviceKvShape};
use crate::gpu::{GpuDevice, GpuRunner, GpuRunnerOptions, Launches};
use crate::graph::{Graph, Runner};
use crate::ops::kv_cache::KvCache;
use crate::ops::top_tokens::{RowRules, ROW_PARAMS};
use crate::ops::{DType, Tensor};
use crate::Result;

/// What to compare.
#[derive(Debug, Clone)]
pub struct WhisperCompare<'a> {
    /// One encoder window, `[n_mels, window_frames]` row-major.
    pub window: &'a [f32],
    /// The window's frames that hold audio: a streamed encoder runs over
    /// these, and its stream ends there.
    pub frames: usize,
    /// The prompt the decoder starts from (`<|startoftranscript|>` ...).
    pub prompt: &'a [u32],
    /// Decoder steps after the prompt at most (fewer when the CPU's greedy
    /// choice ends the text).
    pub steps: usize,
    pub end_of_text: u32,
    /// The GPU runners' options (precision, a fault hook in tests); they
    /// run eagerly and keep every value whatever is asked.
    pub options: GpuRunnerOptions,
    pub tolerance: f32,
    /// bf16: each node may also be off by this many times what rounding
    /// every value to bf16 costs on the CPU ([`Comparer::with_budget`]).
    pub bf16_budget: Option<f32>,
    pub mode: CompareMode,
}

/// The encoder's and the decoder steps' comparisons, and where the step's
/// nodes ran (GPU, CPU).
#[derive(Debug, Clone)]
pub struct WhisperComparison {
    pub encoder: Comparison,
    /// The pulsed encoder, one chunk a step, when the checkpoint streams;
    /// with where its nodes ran (GPU, CPU).
    pub streamed: Option<(Comparison, (usize, usize))>,
    pub decoder: Comparison,
    /// The decoder step ends in the device's token choice (f32).
    pub decoder_chooses: bool,
    /// The tokens fed, prompt included.
    pub tokens: Vec<u32>,
    pub step_placement: (usize, usize),
}

/// Runs `what` on the CPU and on `dev` and compares every node.
pub fn compare(
    model: &WhisperModel,
    dev: Arc<GpuDevice>,
    what: &WhisperCompare,
) -> Result<WhisperComparison> {
    let (cfg, w) = (&model.config, model.wide_weights()?);
    let opts = GpuRunnerOptions {
        launches: Launches::Eager,
        keep_values: true,
        ..what.options.clone()
    };
    let mel = Tensor::from_vec(
        vec![1, cfg.num_mel_bins, cfg.window_frames()],
        what.window.to_vec(),
    )?;
    let enc = Arc::new(graphs::encoder(cfg, w)?);
    let mut cpu = Runner::new(enc.clone())?;
    let mut gpu = GpuRunner::new(dev.clone(), enc.clone(), Some(1), &opts)?;
    let mut cmp = budgeted(
        Comparer::new(&enc, what.tolerance, what.mode),
        (*enc).clone(),
        what,
    )?;
    cmp.step(&mut cpu, &mut gpu, &[&mel])?;
    let encoder = cmp.finish();
    let streamed = match cfg.encoder_context {
        Some(_) => Some(compare_streamed(model, dev.clone(), what, &opts)?),
        None => None,
    };

    let new_cache = || KvCache::new(cfg.decoder_layers, cfg.d_model, cfg.max_target_positions);
    // the bf16 budget's decoder reads the keys and values as the GPU's
    // cache stores them: the CPU's, rounded to bf16
    let (host, mirrored, rounded) = (new_cache(), new_cache(), new_cache());
    let shape = DeviceKvShape {
        layers: cfg.decoder_layers,
        width: cfg.d_model,
        capacity: cfg.max_target_positions,
        sequences: 1,
        windows: 1,
        frames: cfg.max_source_positions,
    };
    let dtype = opts.translate.precision.storage(DType::F32);
    DeviceKvCache::attach(&mirrored, dev.clone(), shape, dtype)?;
    for l in 0..cfg.decoder_layers {
        let (k, v) = (cpu.output(1 + 2 * l), cpu.output(2 + 2 * l));
        host.set_cross(l, k, v)?;
        mirrored.set_cross(l, k, v)?;
        let bf16 = |t: &Tensor| t.cast(DType::BF16).cast(DType::F32);
        rounded.set_cross(l, &bf16(k), &bf16(v))?;
    }
    for c in [&host, &mirrored, &rounded] {
        c.start(&[0])?;
    }
    // at bf16 the choice is decoding's (from f32 logits, F32_HEAD), but the
    // CPU that judges bf16 rounds every value, its logits too, so the ids
    // it would choose are no criterion: bf16 compares the logits step
    let chooses = dtype == DType::F32;
    let step = |cache: &KvCache| match chooses {
        true => graphs::decoder_choosing(cfg, w, cache, super::gpu::CHOOSE_K),
        false => graphs::decoder_with_logits(cfg, w, cache, DecoderShape::Step),
    };
    let on_cpu = Arc::new(step(&host)?);
    let on_gpu = step(&mirrored)?;
    let mut cpu = Runner::new(on_cpu.clone())?;
    let mut gpu = GpuRunner::new(dev, on_gpu, Some(1), &super::gpu::decoder_options(&opts))?;
    let on_rounded = step(&rounded)?;
    let mut cmp = budgeted(
        Comparer::new(&on_cpu, what.tolerance, what.mode),
        on_rounded,
        what,
    )?;
    // a greedy row with no rule: the best token, as the CPU picks it
    let rules = Tensor::from_vec(vec![1, ROW_PARAMS], RowRules::NONE.encode().to_vec())?;
    let cum = Tensor::from_vec(vec![1], vec![0f32])?;
    let masks = Tensor::from_vec(vec![2, cfg.vocab_size], vec![false; 2 * cfg.vocab_size])?;
    let mut tokens = what.prompt.to_vec();
    let limit = (what.prompt.len() + what.steps).min(cfg.max_target_positions);
    let mut i = 0;
    while i < tokens.len() && i < limit {
        let ids = Tensor::from_vec(vec![1, 1], vec![tokens[i] as i64])?;
        let positions = Tensor::from_vec(vec![1, 1], vec![i as i64])?;
        let mut inputs = vec![&ids, &positions];
        if chooses {
            inputs.extend([&rules, &cum, &masks]);
        }
        cmp.step(&mut cpu, &mut gpu, &inputs)?;
        for c in [&host, &mirrored, &rounded] {
            c.advance(1)?;
        }
        if i + 1 == tokens.len() && tokens.len() < limit {
            let next = match chooses {
                true => cpu.output(1).as_slice::<i64>()?[0] as u32,
                false => crate::ops::top_tokens::argmax(&cpu.output(1).to_f32_vec()).0,
            };
            if next == what.end_of_text {
                break;
            }
            tokens.push(next);
        }
        i += 1;
    }
    Ok(WhisperComparison {
        encoder,
        streamed,
        decoder: cmp.finish(),
        decoder_chooses: chooses,
        tokens,
        step_placement: gpu.placement_counts(),
    })
}

/// The streamed encoder over the window's first `what.frames` feature
/// frames, a chunk a step, on the CPU and on `dev`, with a few silent steps
/// after the stream's end so that its last frames come out.
fn compare_streamed(
    model: &WhisperModel,
    dev: Arc<GpuDevice>,
    what: &WhisperCompare,
    opts: &GpuRunnerOptions,
) -> Result<(Comparison, (usize, usize))> {
    let (cfg, w) = (&model.config, &model.f32_weights);
    let pulsed = streaming::pulsed_encoder(cfg, w)?;
    let (m, wf) = (cfg.num_mel_bins, cfg.window_frames());
    let frames = what.frames.min(wf);
    let mut stream = vec![0f32; frames * m];
    for (t, row) in stream.chunks_exact_mut(m).enumerate() {
        for (k, v) in row.iter_mut().enumerate() {
            *v = what.window[k * wf + t];
        }
    }
    let mut gpu = GpuRunner::new(dev, pulsed.graph.clone(), None, opts)?;
    let tail = pulsed
        .output_stream(0)
        .map_or(1, |s| s.delay.div_ceil(s.pulse.max(1)) + 1);
    let c = compare_steps_with(
        &pulsed,
        &mut gpu,
        &stream,
        tail,
        what.tolerance,
        what.bf16_budget,
        what.mode,
        None,
        None,
    )?;
    Ok((c, gpu.placement_counts()))
}

/// `cmp` with the bf16 budget `what` asks for, judged by a rounding CPU
/// runner of `graph` (built as the compared graph, over a cache of its own).
fn budgeted<'g>(cmp: Comparer<'g>, graph: Graph, what: &WhisperCompare) -> Result<Comparer<'g>> {
    let Some(factor) = what.bf16_budget else {
        return Ok(cmp);
    };
    let mut r = Runner::new(graph)?;
    r.round_to_bf16();
    Ok(cmp.with_budget(r, factor))
}
