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
#[cfg(test)]
use crate::ops::matmul::Int8Matrix;
use crate::ops::Tensor;
use crate::weights::Weights;
use crate::Result;

/// Inputs per int8 scale in the linear layers: chosen on sets outside
/// realdev (tiny.en, beam 5): a scale per row read realall 5.23 % and
/// spont 28.53 % against f32's 5.12 and 26.99 %; per 64 inputs 5.12 and
/// 27.66 %, per 32 5.16 and 27.86 % (docs/whisper.md).
pub const INT8_GROUP: usize = 64;

/// The token embedding's name.
const EMBEDDING: &str = "model.decoder.embed_tokens.weight";

/// A checkpoint folder, loaded: its sizes and weights, once per process:
/// every network built from it (each worker's, each live stream's) shares
/// them, its graphs' constants pointing into `f32_weights`.
#[derive(Debug, Clone)]
pub struct WhisperModel {
    pub dir: PathBuf,
    pub config: WhisperConfig,
    /// Every float tensor widened to f32 once, shared by the graphs of all
    /// workers (their constants point into it), but the token embedding:
    /// that stays as stored (f16 for the fetched checkpoints), read by the
    /// output projection and the token lookup, which widens the rows it
    /// takes. An f32 copy of it was 80 MB for tiny.en, 106 MB for base.
    pub f32_weights: Weights,
    /// `f32_weights` with the embedding widened too, made on first use:
    /// what GPU networks build on (their step graphs project the logits).
    wide: Arc<OnceLock<Weights>>,
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
        let f32_weights = Weights::load_f32(dir.join("model.safetensors"), &[EMBEDDING])
            .map_err(|e| refetch_hint(e, dir))?;
        Ok(WhisperModel {
            dir: dir.to_path_buf(),
            config,
            f32_weights,
            wide: Arc::default(),
            int8: None,
            projection: Arc::default(),
        })
    }

    /// Every float tensor in f32, the embedding too (widened once, on
    /// first use, and shared): what GPU graphs are built from.
    pub fn wide_weights(&self) -> Result<&Weights> {
        if let Some(w) = self.wide.get() {
            return Ok(w);
        }
        let c = &self.config;
        let e = self
            .f32_weights
            .f32(EMBEDDING, &[c.vocab_size, c.d_model])?;
        let w = self.f32_weights.with_tensor(EMBEDDING, e);
        Ok(self.wide.get_or_init(|| w))
    }

    /// The same checkpoint with weight-only int8 on the CPU: every linear
    /// layer (a scale per [`INT8_GROUP`] inputs of a row) and the output
    /// projection. A GPU network of it is refused.
    pub fn with_int8(mut self) -> Result<WhisperModel> {
        let linear = |n: &str| {
            n.ends_with("_proj.weight") || n.ends_with("fc1.weight") || n.ends_with("fc2.weight")
        };
        self.int8 = Some(self.f32_weights.with_int8(linear, INT8_GROUP)?);
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
        self.f32_weights.get(EMBEDDING, &[c.vocab_size, c.d_model])
    }
}

/// The encoder, prompt and step graphs, each in one CPU runner.
pub struct CpuRunners {
    encoder: Runner,
    cross: Runner,
    rows: Runner,
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

    fn cross_rows_size(&self, rows: usize) -> Option<usize> {
        Some(rows)
    }

    fn cross_rows(&mut self, _size: usize) -> Result<&mut dyn StepRunner> {
        Ok(&mut self.rows)
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
        // a worker's runners hold the values alive at once and one scratch
        // each: every node's outputs and packed weights were 360 MB a
        // tiny.en worker (peak RSS, -j 1 against -j 2 on two files)
        let run = |g| Ok::<_, crate::Error>(Runner::new(g)?.recycle_buffers());
        let runners = CpuRunners {
            encoder: run(graphs::encoder(cfg, w)?)?,
            cross: run(graphs::cross_kv(cfg, w)?)?,
            rows: run(graphs::cross_kv_rows(cfg, w)?)?,
            prompt: run(graphs::decoder(cfg, w, &cache, DecoderShape::Prompt)?)?,
            step: run(graphs::decoder(cfg, w, &cache, DecoderShape::Step)?)?,
        };
        WhisperNet::from_parts(cfg, runners, cache, model.projection()?)
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
                    "{reason}: the file is damaged or cut short; fetch it again with `pulsed fetch {name}` (it checks the cache and rebuilds it)"
                ),
            }
        }
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::matmul::Int8Linear;
    use crate::ops::Const;

    /// The value of graph constant `name` and the int8 matrix of linear
    /// node `name`, where `runner`'s graph has them.
    fn weight_of(runner: &Runner, name: &str) -> (Option<Tensor>, Option<Arc<Int8Matrix>>) {
        let g = runner.graph();
        let Some(node) = g.node_by_name(name).map(|i| &g.nodes[i]) else {
            return (None, None);
        };
        let op = node.op.as_any();
        (
            op.downcast_ref::<Const>().map(|c| c.value.clone()),
            op.downcast_ref::<Int8Linear>().map(|l| l.w.clone()),
        )
    }

    /// int8 linears carry a scale per [`INT8_GROUP`] inputs of a row (a
    /// scale per row read spontaneous speech worse), and the f32 weights
    /// stay beside them.
    #[test]
    fn int8_linears_keep_a_scale_per_group_of_inputs() {
        let Ok(model) = WhisperModel::open("whisper-tiny.en") else {
            panic!("whisper-tiny.en is not in the model cache: pulsed fetch whisper-tiny.en");
        };
        let model = model.with_int8().unwrap();
        let name = "model.decoder.layers.0.fc1.weight";
        let (rows, cols) = (1536, 384);
        let w = model.cpu_weights().int8(name).expect("fc1 as int8");
        assert_eq!((w.rows(), w.cols()), (rows, cols));
        assert_eq!(w.bytes(), rows * cols + 4 * rows * cols / INT8_GROUP);
        assert!(model.f32_weights.tensor(name).is_some());
    }

    /// Two networks of one model (two workers) hold the model's weights,
    /// not copies: every graph constant, int8 matrix and the projection
    /// are the same allocations.
    #[test]
    fn networks_of_one_model_share_its_weights() {
        let Ok(model) = WhisperModel::open("whisper-tiny.en") else {
            panic!("whisper-tiny.en is not in the model cache: pulsed fetch whisper-tiny.en");
        };
        for model in [model.clone(), model.with_int8().unwrap()] {
            let (a, b) = (
                CpuWhisper::new(&model).unwrap(),
                CpuWhisper::new(&model).unwrap(),
            );
            assert!(Arc::ptr_eq(&a.projection, &b.projection));
            let stored = model.embedding().unwrap();
            assert!(
                a.projection.shares(&stored),
                "the projection copies the embedding"
            );
            let (mut consts, mut int8) = (0, 0);
            let (ra, rb) = (&a.runners, &b.runners);
            for (x, y) in [(&ra.encoder, &rb.encoder), (&ra.prompt, &rb.prompt)] {
                for node in &x.graph().nodes {
                    match (weight_of(x, &node.name), weight_of(y, &node.name)) {
                        ((Some(p), _), (Some(q), _)) if p.len() > 1024 => {
                            assert_eq!(p.storage_key(), q.storage_key(), "{}", node.name);
                            if let Some(w) = model.f32_weights.tensor(&node.name) {
                                assert!(w.shares_storage(&p), "{} is a copy", node.name);
                                consts += 1;
                            }
                        }
                        ((_, Some(p)), (_, Some(q))) => {
                            assert!(Arc::ptr_eq(&p, &q), "{}", node.name);
                            let name = format!("{}.weight", node.name);
                            if let Some(w) = model.cpu_weights().int8(&name) {
                                assert!(Arc::ptr_eq(&p, &w), "{} is a copy", node.name);
                                int8 += 1;
                            }
                        }
                        _ => {}
                    }
                }
            }
            // tiny.en: 4 + 4 layers, 6 linears (self-attention q, k, v, out
            // and fc1, fc2) a layer plus the decoder's cross-attention q
            // and out, at least
            match model.is_int8() {
                true => assert!(int8 >= 4 * 6 + 4 * 8, "{int8} int8 matrices"),
                // f32: those and the embedding, at least
                false => assert!(consts > 4 * 6 + 4 * 8, "{consts} weights"),
            }
        }
    }
}
