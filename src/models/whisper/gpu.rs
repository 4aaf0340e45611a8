//! The Whisper network on the GPU: the same three graphs as on the CPU, run
//! by the GPU runner, which places each node on the GPU or, when it has no
//! kernel there (the token lookup, the decoder's cached attentions), on the
//! CPU with explicit copies.
//!
//! A GPU runner is planned for concrete sizes, so each graph keeps one
//! runner per size it has run at: per window count for the encoder, per
//! batch for the decoder step (both captured as CUDA graphs after their
//! first run) and per prompt length for the prompt (launched eagerly: a
//! prompt length rarely repeats). Runners of one graph share its weights on
//! the device.
//!
//! The decoder's key/value cache lives on the device
//! ([`DeviceKvCache`], made at its largest so captured steps stay valid),
//! so a decoder step runs on the GPU but for the token lookup, its logits
//! included (the step graph projects onto the vocabulary there). Word
//! alignment and the streaming decoder read cross-attention weights: the
//! GPU kernel writes the asked-for heads' scores beside its output
//! ([`KvCache::record`]), so they need no pass of their own.

use std::sync::Arc;

use super::graphs::{self, DecoderShape};
use super::net::{CrossFrom, NetRunners, WhisperNet};
use super::WhisperModel;
use crate::gpu::ops::kv_cache::{DeviceKvCache, DeviceKvShape};
use crate::gpu::{timing, GpuDevice, GpuRunner, GpuRunnerOptions, Launches};
use crate::graph::{Graph, StepRunner};
use crate::ops::kv_cache::KvCache;
use crate::ops::DType;
use crate::Result;

/// Prompt runners kept: beyond this, the least recently used is dropped.
const PROMPT_RUNNERS: usize = 8;
/// Step runners kept: every size of `step_rows` up to 128 rows (16
/// windows' beams of 5 and their tails), so lock-step decoding of a batch
/// whose searches end one by one plans and captures each size once, and
/// 256, 512 and 1024 (a shared decoder's streams).
const STEP_RUNNERS: usize = 27;
/// Encoder runners kept: the window counts of a worker's groups of files
/// (8, then 4, 2 and 1 at the end of a run) and single windows.
const ENCODER_RUNNERS: usize = 4;
/// Cross-row runners kept: the powers of two up to a window (1,500
/// frames), each planned once.
const ROWS_RUNNERS: usize = 12;
/// Candidates the choosing step keeps a row: beam search takes twice its
/// width, so beams up to 8 choose on the device.
pub(crate) const CHOOSE_K: usize = 16;
/// Sequences a device cache holds at first (beam search's 5, or a few
/// windows' beams decoded together); it grows when more are reserved.
/// A live stream needs one: at 32 a server holds 352 MB a stream (base)
/// and ran out of memory at 256 streams. At 1, `gpu_transcripts_equal_the_cpu`
/// failed: one window's search (`generate`) did not reserve its beams; it
/// does now, but 1 is not yet tested on a GPU.
const SEQUENCES: usize = 32;

/// One graph and its runners by size, least recently used first.
struct Sized {
    /// For set-up timing.
    name: &'static str,
    graph: Arc<Graph>,
    options: GpuRunnerOptions,
    runners: Vec<(usize, GpuRunner)>,
    keep: usize,
    /// Outputs from this one on that stay on the device where they are
    /// made there in this dtype (cross-attention keys and values, which
    /// go from the runner to the device cache).
    on_device: Option<(usize, DType)>,
}

impl Sized {
    fn new(name: &'static str, graph: Graph, options: GpuRunnerOptions, keep: usize) -> Sized {
        Sized {
            name,
            graph: Arc::new(graph),
            options,
            runners: Vec::new(),
            keep,
            on_device: None,
        }
    }

    /// Its runners leave outputs `first..` on the device where each is
    /// made there in `dtype`.
    fn keeping(mut self, first: usize, dtype: DType) -> Sized {
        self.on_device = Some((first, dtype));
        self
    }

    /// The runner for size `s`, planned on first use, now the most recent.
    fn get(&mut self, dev: &Arc<GpuDevice>, s: usize) -> Result<&mut GpuRunner> {
        match self.runners.iter().position(|(n, _)| *n == s) {
            Some(i) => {
                let r = self.runners.remove(i);
                self.runners.push(r);
            }
            None => {
                let t0 = std::time::Instant::now();
                let mut r = GpuRunner::new(
                    dev.clone(),
                    self.graph.clone(),
                    Some(s as i64),
                    &self.options,
                )?;
                if let Some((first, dtype)) = self.on_device {
                    let n = r.graph().outputs.len();
                    if (first..n).all(|i| r.device_output(i).is_some_and(|t| t.dtype == dtype)) {
                        r.keep_on_device(first..n);
                    }
                }
                timing::report(|| format!("{} runner for {s} planned", self.name), t0);
                if self.runners.len() >= self.keep {
                    self.runners.remove(0);
                }
                self.runners.push((s, r));
            }
        }
        Ok(&mut self.runners.last_mut().expect("pushed").1)
    }

    fn last(&self) -> Option<&GpuRunner> {
        self.runners.last().map(|(_, r)| r)
    }
}

/// The decoder nodes kept in f32 at bf16: the logits, the choice made from
/// them and the running scores it ranks by. Rounding the logits alone to
/// bf16 flips near-tied words at beam 5 (`docs/notes/gpu-notes.md` §17).
pub(crate) const F32_HEAD: [&str; 3] = ["model.decoder.logit*", "model.decoder.choice", "scores"];

/// `options` for a decoder graph: [`F32_HEAD`] kept in f32.
pub(crate) fn decoder_options(options: &GpuRunnerOptions) -> GpuRunnerOptions {
    let mut o = options.clone();
    o.translate.keep_f32 = o.translate.keep_f32.clone().with(&F32_HEAD);
    o
}

/// The encoder, prompt and step graphs with their GPU runners.
pub struct GpuRunners {
    dev: Arc<GpuDevice>,
    encoder: Sized,
    /// Cross-attention keys and values over a streamed encoder's frames.
    cross: Sized,
    prompt: Sized,
    step: Sized,
    /// The step that chooses its rows' next tokens on the device
    /// ([`graphs::decoder_choosing`]), from f32 logits and scores at either
    /// precision ([`F32_HEAD`]).
    choose: Option<Sized>,
    /// Cross-attention keys and values of a streamed encoder's new frames,
    /// by row count.
    rows: Sized,
    /// The decoder graphs' cache, its device copy and that copy's shape.
    cache: KvCache,
    device: Arc<DeviceKvCache>,
    kv: DeviceKvShape,
    kv_dtype: DType,
}

impl GpuRunners {
    /// A device cache for at least `windows` encoder windows: a new one
    /// (and new decoder runners, whose captured steps point into the old)
    /// when the current one holds fewer.
    fn ensure_windows(&mut self, windows: usize) -> Result<()> {
        if windows <= self.kv.windows {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        self.kv.windows = windows;
        self.clear_decoders();
        self.device = DeviceKvCache::attach(&self.cache, self.dev.clone(), self.kv, self.kv_dtype)?;
        timing::report(|| format!("cache for {windows} windows made"), t0);
        Ok(())
    }
}

impl GpuRunners {
    /// Drops the decoder runners, whose captured steps point into the cache.
    fn clear_decoders(&mut self) {
        self.prompt.runners.clear();
        self.step.runners.clear();
        if let Some(c) = &mut self.choose {
            c.runners.clear();
        }
    }

    /// A device cache for at least `sequences` (a power of two, so a
    /// stream of batch sizes makes few), as [`GpuRunners::ensure_windows`].
    fn ensure_sequences(&mut self, sequences: usize) -> Result<()> {
        if sequences <= self.kv.sequences {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        self.kv.sequences = sequences.next_power_of_two();
        self.clear_decoders();
        let old = self.device.clone();
        self.device = DeviceKvCache::attach(&self.cache, self.dev.clone(), self.kv, self.kv_dtype)?;
        // the windows encoded already, into the new cache
        self.device.copy_cross_from(&old)?;
        self.cache.replay_positions()?;
        timing::report(
            || format!("cache for {} sequences made", self.kv.sequences),
            t0,
        );
        Ok(())
    }
}

impl NetRunners for GpuRunners {
    fn encoder(&mut self, windows: usize) -> Result<&mut dyn StepRunner> {
        self.ensure_windows(windows)?;
        Ok(self.encoder.get(&self.dev, windows)?)
    }

    fn cross(&mut self, windows: usize) -> Result<&mut dyn StepRunner> {
        self.ensure_windows(windows)?;
        Ok(self.cross.get(&self.dev, windows)?)
    }

    fn cross_rows_size(&self, rows: usize) -> Option<usize> {
        Some(rows.next_power_of_two())
    }

    fn cross_rows(&mut self, size: usize) -> Result<&mut dyn StepRunner> {
        Ok(self.rows.get(&self.dev, size)?)
    }

    fn decoder(&mut self, shape: DecoderShape, s: usize) -> Result<&mut dyn StepRunner> {
        let g = match shape {
            DecoderShape::Prompt => &mut self.prompt,
            DecoderShape::Step => &mut self.step,
        };
        Ok(g.get(&self.dev, s)?)
    }

    fn last_decoder(&self, shape: DecoderShape) -> Option<&dyn StepRunner> {
        let g = match shape {
            DecoderShape::Prompt => &self.prompt,
            DecoderShape::Step => &self.step,
        };
        g.last().map(|r| r as &dyn StepRunner)
    }

    fn step_logits(&self) -> bool {
        true
    }

    fn chooser(&mut self, s: usize) -> Option<Result<(&mut dyn StepRunner, usize)>> {
        let c = self.choose.as_mut()?;
        Some(
            c.get(&self.dev, s)
                .map(|r| (r as &mut dyn StepRunner, CHOOSE_K)),
        )
    }

    fn reserve_sequences(&mut self, sequences: usize) -> Result<()> {
        self.ensure_sequences(sequences)
    }

    /// Up to 8 rows as asked (one window's beams), then multiples of 8:
    /// decoded together, windows leave the batch one search at a time, and
    /// a runner per size would be planned and captured again and again.
    /// Past 128 (a shared decoder's streams), powers of two. The cache's
    /// sequences, a power of two from 32, hold the padding.
    fn step_rows(&self, batch: usize) -> usize {
        match batch {
            0..=8 => batch,
            9..=128 => batch.div_ceil(8) * 8,
            _ => batch.next_power_of_two(),
        }
    }

    /// Powers of two: a prompt's runner is planned once per size, and the
    /// eight kept cover every length up to the decoder's 448 positions.
    fn prompt_len(&self, n: usize) -> usize {
        n.next_power_of_two()
    }

    fn reserve_windows(&mut self, windows: usize) -> Result<()> {
        self.ensure_windows(windows)
    }

    fn cross_on_device(&mut self, from: CrossFrom, window: Option<usize>) -> Result<bool> {
        let (sized, first) = match from {
            CrossFrom::Encoder => (&self.encoder, 1),
            CrossFrom::Frames => (&self.cross, 0),
        };
        let Some(r) = sized.last() else {
            return Ok(false);
        };
        if !r.kept_on_device(first) {
            return Ok(false);
        }
        let (mut windows, mut frames) = (0, 0);
        for l in 0..self.kv.layers {
            let (Some(k), Some(v)) = (
                r.device_output(first + 2 * l),
                r.device_output(first + 2 * l + 1),
            ) else {
                return Err(crate::Error::Other(format!(
                    "{}: layer {l}'s cross keys are not on the device",
                    sized.name
                )));
            };
            (windows, frames) = (k.shape[0], k.shape[1]);
            self.device.set_cross_on_device(l, window, k, v)?;
        }
        match window {
            Some(w) => self.cache.hold_window(w, frames)?,
            None => self.cache.hold_cross(windows, frames)?,
        }
        Ok(true)
    }

    fn rows_on_device(&mut self, parts: &[(usize, usize, usize)]) -> Result<bool> {
        let Some(r) = self.rows.last() else {
            return Ok(false);
        };
        if !r.kept_on_device(0) {
            return Ok(false);
        }
        for l in 0..self.kv.layers {
            let (Some(k), Some(v)) = (r.device_output(2 * l), r.device_output(2 * l + 1)) else {
                return Err(crate::Error::Other(format!(
                    "cross rows: layer {l}'s keys are not on the device"
                )));
            };
            let mut at = 0;
            for &(window, from, n) in parts {
                self.device
                    .set_rows_on_device(l, window, from, k, v, at, n)?;
                at += n;
            }
        }
        for &(window, _, _) in parts {
            self.cache.hold_window(window, self.kv.frames)?;
        }
        Ok(true)
    }
}

/// The GPU backend of one model; one per thread of work (it holds the
/// decoder's cache and its runners).
pub type GpuWhisper = WhisperNet<GpuRunners>;

impl WhisperNet<GpuRunners> {
    /// Builds the graphs of `model` for `dev`; runners are planned as sizes
    /// come (`options`: precision and launches of the encoder and step).
    pub fn on_gpu(
        model: &WhisperModel,
        dev: Arc<GpuDevice>,
        options: &GpuRunnerOptions,
    ) -> Result<GpuWhisper> {
        if model.is_int8() {
            return Err(crate::Error::Other(
                "int8 weights run on the CPU only: use --device cpu, or f32/bf16 on the GPU".into(),
            ));
        }
        let (cfg, w) = (&model.config, model.wide_weights()?);
        // a stream of its own, so networks on other threads run concurrently
        let dev = dev.lane()?;
        let cache = KvCache::new(cfg.decoder_layers, cfg.d_model, cfg.max_target_positions);
        let decoder = decoder_options(options);
        let eager = GpuRunnerOptions {
            launches: Launches::Eager,
            ..decoder.clone()
        };
        let kv = DeviceKvShape {
            layers: cfg.decoder_layers,
            width: cfg.d_model,
            capacity: cfg.max_target_positions,
            sequences: SEQUENCES,
            windows: 1,
            frames: cfg.max_source_positions,
        };
        let kv_dtype = options.translate.precision.storage(DType::F32);
        let device = DeviceKvCache::attach(&cache, dev.clone(), kv, kv_dtype)?;
        // PULSED_HOST_CROSS=1: the encoders' keys and values go to the
        // device cache through the host (the path before, kept for
        // side-by-side timing)
        let on_device = std::env::var_os("PULSED_HOST_CROSS").is_none();
        let keeping = |s: Sized, first: usize| match on_device {
            true => s.keeping(first, kv_dtype),
            false => s,
        };
        let runners = GpuRunners {
            cache: cache.clone(),
            device,
            kv,
            kv_dtype,
            dev,
            encoder: keeping(
                Sized::new(
                    "encoder",
                    graphs::encoder(cfg, w)?,
                    options.clone(),
                    ENCODER_RUNNERS,
                ),
                // the frames too: nothing on the host reads them
                0,
            ),
            cross: keeping(
                Sized::new(
                    "cross",
                    graphs::cross_kv(cfg, w)?,
                    options.clone(),
                    ENCODER_RUNNERS,
                ),
                0,
            ),
            rows: keeping(
                Sized::new(
                    "cross rows",
                    graphs::cross_kv_rows(cfg, w)?,
                    options.clone(),
                    ROWS_RUNNERS,
                ),
                0,
            ),
            prompt: Sized::new(
                "prompt",
                graphs::decoder(cfg, w, &cache, DecoderShape::Prompt)?,
                eager,
                PROMPT_RUNNERS,
            ),
            step: Sized::new(
                "step",
                graphs::decoder_with_logits(cfg, w, &cache, DecoderShape::Step)?,
                decoder.clone(),
                STEP_RUNNERS,
            ),
            // PULSED_HOST_CHOICE=1: steps hand back logits and the host
            // chooses (the path before, kept for side-by-side timing)
            choose: match std::env::var_os("PULSED_HOST_CHOICE") {
                None => Some(Sized::new(
                    "choosing step",
                    graphs::decoder_choosing(cfg, w, &cache, CHOOSE_K)?,
                    decoder.clone(),
                    STEP_RUNNERS,
                )),
                Some(_) => None,
            },
        };
        WhisperNet::from_parts(cfg, runners, cache, model.projection()?)
    }

    /// Where the nodes of the decoder step run: `(gpu, cpu)` counts, once a
    /// step has run.
    pub fn step_placement(&self) -> Option<(usize, usize)> {
        self.runners.step.last().map(GpuRunner::placement_counts)
    }

    /// [`Self::step_placement`] of the step that chooses on the device.
    pub fn choice_placement(&self) -> Option<(usize, usize)> {
        self.runners
            .choose
            .as_ref()?
            .last()
            .map(GpuRunner::placement_counts)
    }
}

/// One node's time in a profiled pass ([`GpuWhisper::profile`]).
#[derive(Debug, Clone)]
pub struct NodeTime {
    /// `encoder` or `step`.
    pub graph: &'static str,
    pub node: String,
    pub op: &'static str,
    /// GPU time between events around its launches (wall time on the CPU).
    pub seconds: f64,
    pub on_gpu: bool,
}

impl WhisperNet<GpuRunners> {
    /// Where the time of an encoder pass over `window` and of a decoder
    /// step of `batch` sequences (after a two-token prompt) goes, node by
    /// node, launched one by one ([`GpuRunner::profile_step`]).
    pub fn profile(&mut self, window: &[f32], batch: usize) -> Result<Vec<NodeTime>> {
        use super::WhisperBackend;
        use crate::ops::Tensor;
        self.encode(&[window])?;
        self.reserve(batch)?;
        let dev = self.runners.dev.clone();
        let mel = Tensor::from_vec(
            vec![1, self.cfg.num_mel_bins, self.cfg.window_frames()],
            window.to_vec(),
        )?;
        let mut out = Vec::new();
        let mut keep = |graph: &'static str, g: &Graph, times: Vec<(usize, f64, bool)>| {
            for (id, seconds, on_gpu) in times {
                out.push(NodeTime {
                    graph,
                    node: g.nodes[id].name.clone(),
                    op: g.nodes[id].op.name(),
                    seconds,
                    on_gpu,
                });
            }
        };
        let g = self.runners.encoder.graph.clone();
        let r = self.runners.encoder.get(&dev, 1)?;
        let times = r.profile_step(&[&mel])?;
        keep("encoder", &g, times);
        self.start(&[0])?;
        let mut logits = Vec::new();
        self.feed(&[50257, 50362], 2, &[1], &mut logits)?;
        self.reorder(&vec![0; batch])?;
        let tokens = Tensor::from_vec(vec![batch, 1], vec![1000i64; batch])?;
        let positions = Tensor::from_vec(vec![batch, 1], vec![self.cache.len() as i64; batch])?;
        let g = self.runners.step.graph.clone();
        let r = self.runners.step.get(&dev, batch)?;
        let times = r.profile_step(&[&tokens, &positions])?;
        keep("step", &g, times);
        self.cache.advance(1)?;
        Ok(out)
    }
}
