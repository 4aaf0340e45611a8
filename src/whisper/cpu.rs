//! A loaded checkpoint, and the Whisper network on the CPU: its three
//! graphs run by the CPU runner, which takes any batch or prompt length.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::graphs::{self, DecoderShape};
use super::net::{NetRunners, WhisperNet};
use super::projection::Projection;
use super::{folder, WhisperConfig};
use crate::graph::{Runner, StepRunner};
use crate::ops::kv_cache::KvCache;
use crate::ops::{DType, Tensor};
use crate::weights::Weights;
use crate::Result;

/// A checkpoint folder, loaded: its sizes and weights.
#[derive(Debug, Clone)]
pub struct WhisperModel {
    pub dir: PathBuf,
    pub config: WhisperConfig,
    /// As stored (f16 for the fetched checkpoints).
    pub weights: Weights,
    /// Every float tensor widened to f32 once, shared by the graphs of all
    /// workers (their constants point into it).
    pub f32_weights: Weights,
    /// `f32_weights` with the linear layers also as int8, when
    /// [`WhisperModel::with_int8`] made them: what CPU graphs build on.
    int8: Option<Weights>,
    /// The output projection networks share, made on first use.
    projection: Arc<OnceLock<Arc<Projection>>>,
}

impl WhisperModel {
    /// Loads the folder `spec` names (a path, or a short name in the model
    /// cache; see [`folder::resolve`]).
    pub fn open(spec: &str) -> Result<WhisperModel> {
        let dir = folder::resolve(spec)?;
        WhisperModel::open_dir(&dir)
    }

    /// Loads a folder (which must hold [`folder::REQUIRED`]).
    pub fn open_dir(dir: &Path) -> Result<WhisperModel> {
        folder::check_files(dir)?;
        let config = WhisperConfig::load(&dir.join("config.json"))?;
        let weights =
            Weights::load(dir.join("model.safetensors")).map_err(|e| refetch_hint(e, dir))?;
        let f32_weights = Weights::from_tensors(
            &dir.join("model.safetensors").display().to_string(),
            weights.names().into_iter().filter_map(|n| {
                let t = weights.tensor(n)?;
                let t = if t.dtype().is_float() {
                    t.cast(DType::F32)
                } else {
                    t.clone()
                };
                Some((n.to_string(), t))
            }),
        );
        Ok(WhisperModel {
            dir: dir.to_path_buf(),
            config,
            weights,
            f32_weights,
            int8: None,
            projection: Arc::default(),
        })
    }

    /// The same checkpoint with weight-only int8 on the CPU: every linear
    /// layer and the output projection (a scale per output row). A GPU
    /// network of it is refused.
    pub fn with_int8(mut self) -> Result<WhisperModel> {
        let linear = |n: &str| {
            n.ends_with("_proj.weight") || n.ends_with("fc1.weight") || n.ends_with("fc2.weight")
        };
        self.int8 = Some(self.f32_weights.with_int8(linear)?);
        self.projection = Arc::default();
        Ok(self)
    }

    /// Whether CPU networks of it run on int8 weights.
    pub fn is_int8(&self) -> bool {
        self.int8.is_some()
    }

    /// The weights CPU graphs are built from (int8 linears when set).
    pub fn cpu_weights(&self) -> &Weights {
        self.int8.as_ref().unwrap_or(&self.f32_weights)
    }

    /// The weights graphs on `engine` are built from.
    pub fn weights_for(&self, engine: &crate::engine::Engine) -> &Weights {
        match engine {
            crate::engine::Engine::Cpu => self.cpu_weights(),
            #[allow(unreachable_patterns)]
            _ => &self.f32_weights,
        }
    }

    /// The output projection every network of this model shares: the
    /// embedding as stored, or int8 with [`WhisperModel::with_int8`].
    pub(super) fn projection(&self) -> Result<Arc<Projection>> {
        if let Some(p) = self.projection.get() {
            return Ok(p.clone());
        }
        let e = self.embedding()?;
        let p = Arc::new(match self.int8 {
            Some(_) => Projection::int8(&e)?,
            None => Projection::new(&e)?,
        });
        Ok(self.projection.get_or_init(|| p).clone())
    }

    /// The token embedding as stored, `[vocab, d]`: the output projection.
    pub fn embedding(&self) -> Result<Tensor> {
        let c = &self.config;
        self.weights.get(
            "model.decoder.embed_tokens.weight",
            &[c.vocab_size, c.d_model],
        )
    }
}

/// The encoder, prompt and step graphs, each in one CPU runner.
pub struct CpuRunners {
    encoder: Runner,
    cross: Runner,
    prompt: Runner,
    step: Runner,
}

impl NetRunners for CpuRunners {
    fn encoder(&mut self, _windows: usize) -> Result<&mut dyn StepRunner> {
        Ok(&mut self.encoder)
    }

    fn cross(&mut self, _windows: usize) -> Result<&mut dyn StepRunner> {
        Ok(&mut self.cross)
    }

    fn decoder(&mut self, shape: DecoderShape, _s: usize) -> Result<&mut dyn StepRunner> {
        Ok(match shape {
            DecoderShape::Prompt => &mut self.prompt,
            DecoderShape::Step => &mut self.step,
        })
    }

    fn last_decoder(&self, shape: DecoderShape) -> Option<&dyn StepRunner> {
        Some(match shape {
            DecoderShape::Prompt => &self.prompt,
            DecoderShape::Step => &self.step,
        })
    }
}

/// The CPU backend of one model; one per thread of work (it holds the
/// decoder's cache).
pub type CpuWhisper = WhisperNet<CpuRunners>;

impl WhisperNet<CpuRunners> {
    /// Builds the graphs of `model`.
    pub fn new(model: &WhisperModel) -> Result<CpuWhisper> {
        let (cfg, w) = (&model.config, model.cpu_weights());
        let cache = KvCache::new(cfg.decoder_layers, cfg.d_model, cfg.max_target_positions);
        let runners = CpuRunners {
            encoder: Runner::new(graphs::encoder(cfg, w)?)?,
            cross: Runner::new(graphs::cross_kv(cfg, w)?)?,
            prompt: Runner::new(graphs::decoder(cfg, w, &cache, DecoderShape::Prompt)?)?,
            step: Runner::new(graphs::decoder(cfg, w, &cache, DecoderShape::Step)?)?,
        };
        let rows = Runner::new(graphs::cross_kv_rows(cfg, w)?)?;
        Ok(WhisperNet::from_parts(cfg, runners, cache, model.projection()?)?.with_cross_rows(rows))
    }

    /// The encoder output of the last [`WhisperBackend::encode`] call,
    /// `[windows, 1500, d]` (for comparisons with the reference).
    ///
    /// [`WhisperBackend::encode`]: super::WhisperBackend::encode
    pub fn encoder_output(&self) -> &Tensor {
        self.runners.encoder.output(0)
    }

    /// Starts timing every node of every graph (see [`CpuWhisper::node_times`]).
    pub fn time_nodes(&mut self) {
        let r = &mut self.runners;
        for r in [&mut r.encoder, &mut r.prompt, &mut r.step] {
            r.time_nodes();
        }
    }

    /// Time per op kind since [`CpuWhisper::time_nodes`], per graph
    /// (`encoder`, `prompt`, `step`), largest first.
    pub fn node_times(&self) -> Vec<(&'static str, &'static str, std::time::Duration)> {
        let mut out = Vec::new();
        let r = &self.runners;
        let graphs = [
            ("encoder", &r.encoder),
            ("prompt", &r.prompt),
            ("step", &r.step),
        ];
        for (g, r) in graphs {
            let Some(times) = r.node_times() else {
                continue;
            };
            let mut by_op: Vec<(&'static str, std::time::Duration)> = Vec::new();
            for (node, t) in r.graph().nodes.iter().zip(times) {
                match by_op.iter_mut().find(|(op, _)| *op == node.op.name()) {
                    Some(e) => e.1 += *t,
                    None => by_op.push((node.op.name(), *t)),
                }
            }
            out.extend(by_op.into_iter().map(|(op, t)| (g, op, t)));
        }
        out.sort_by_key(|e| std::cmp::Reverse(e.2));
        out
    }
}

/// A weights file that does not parse is almost always a cut download: the
/// error says how to fetch it again (the script checks and rebuilds the cache).
fn refetch_hint(e: crate::Error, dir: &Path) -> crate::Error {
    match e {
        crate::Error::File { path, reason } if reason.starts_with("not a valid safetensors") => {
            let name = dir
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            crate::Error::File {
                path,
                reason: format!(
                    "{reason}: the file is damaged or cut short; fetch it again with `bash scripts/fetch_whisper.sh {name}` (it checks the cache and rebuilds it)"
                ),
            }
        }
        e => e,
    }
}
