//! [`WhisperBackend`] on the CPU: the engine graphs run by the CPU runner,
//! the decoder's cache shared by its prompt and step graphs, and logits
//! computed only at the positions decoding asks for.

use std::path::{Path, PathBuf};

use super::backend::{AlignmentSource, WhisperBackend};
use super::features::FeatureStream;
use super::graphs::{self, DecoderShape};
use super::projection::Projection;
use super::{folder, WhisperConfig};
use crate::graph::Runner;
use crate::ops::kv_cache::KvCache;
use crate::ops::{DType, OpError, Tensor};
use crate::weights::Weights;
use crate::{Error, Result};

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
        let weights = Weights::load(dir.join("model.safetensors"))?;
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
        })
    }
}

/// The CPU backend of one model; one per thread of work (it holds the
/// decoder's cache).
pub struct CpuWhisper {
    cfg: WhisperConfig,
    encoder: Runner,
    prompt: Runner,
    step: Runner,
    cache: KvCache,
    /// The output projection (the token embedding, as stored).
    projection: Projection,
    /// Encoded windows.
    windows: usize,
    rows: Vec<f32>,
}

fn internal(what: String) -> Error {
    Error::Op(OpError::Other(what))
}

impl CpuWhisper {
    /// Builds the graphs of `model`.
    pub fn new(model: &WhisperModel) -> Result<CpuWhisper> {
        let (cfg, w) = (&model.config, &model.f32_weights);
        let cache = KvCache::new(cfg.decoder_layers, cfg.d_model, cfg.max_target_positions);
        let projection = Projection::new(&model.weights.get(
            "model.decoder.embed_tokens.weight",
            &[cfg.vocab_size, cfg.d_model],
        )?)?;
        Ok(CpuWhisper {
            cfg: cfg.clone(),
            encoder: Runner::new(graphs::encoder(cfg, w)?)?,
            prompt: Runner::new(graphs::decoder(cfg, w, &cache, DecoderShape::Prompt)?)?,
            step: Runner::new(graphs::decoder(cfg, w, &cache, DecoderShape::Step)?)?,
            cache,
            projection,
            windows: 0,
            rows: Vec::new(),
        })
    }

    /// The encoder output of the last [`WhisperBackend::encode`] call,
    /// `[windows, 1500, d]` (for comparisons with the reference).
    pub fn encoder_output(&self) -> &Tensor {
        self.encoder.output(0)
    }

    /// Starts timing every node of every graph (see [`CpuWhisper::node_times`]).
    pub fn time_nodes(&mut self) {
        for r in self.runners_mut() {
            r.time_nodes();
        }
    }

    /// Time per op kind since [`CpuWhisper::time_nodes`], per graph
    /// (`encoder`, `prompt`, `step`), largest first.
    pub fn node_times(&self) -> Vec<(&'static str, &'static str, std::time::Duration)> {
        let mut out = Vec::new();
        let graphs = [
            ("encoder", &self.encoder),
            ("prompt", &self.prompt),
            ("step", &self.step),
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

    fn runners_mut(&mut self) -> [&mut Runner; 3] {
        [&mut self.encoder, &mut self.prompt, &mut self.step]
    }

    /// Runs one decoder graph over `n` tokens of each of `batch` sequences.
    fn run_decoder(&mut self, tokens: &[u32], batch: usize, n: usize) -> Result<()> {
        let past = self.cache.len() as i64;
        let ids: Vec<i64> = tokens.iter().map(|&t| t as i64).collect();
        let (runner, shape) = if n == 1 {
            (&mut self.step, vec![batch, 1])
        } else {
            (&mut self.prompt, vec![1, n])
        };
        let tokens = Tensor::from_vec(shape, ids)?;
        let positions = Tensor::from_vec(vec![n], (past..past + n as i64).collect::<Vec<_>>())?;
        runner.step(&[&tokens, &positions])
    }

    /// The decoder's last output, `[batch, n, d]`.
    fn hidden(&self, n: usize) -> &Tensor {
        if n == 1 {
            self.step.output(0)
        } else {
            self.prompt.output(0)
        }
    }
}

impl WhisperBackend for CpuWhisper {
    fn n_mels(&self) -> usize {
        self.cfg.num_mel_bins
    }

    fn window_frames(&self) -> usize {
        self.cfg.window_frames()
    }

    fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }

    fn max_text_positions(&self) -> usize {
        self.cfg.max_target_positions
    }

    fn log_mel(&mut self, audio: &[f32]) -> Result<Vec<f32>> {
        let mut s = FeatureStream::new(self.cfg.num_mel_bins)?;
        for piece in audio.chunks(1 << 16) {
            s.push(piece)?;
        }
        s.finish()
    }

    fn encode(&mut self, windows: &[&[f32]]) -> Result<()> {
        let (m, f) = (self.cfg.num_mel_bins, self.cfg.window_frames());
        if windows.is_empty() {
            return Err(internal("no window to encode".into()));
        }
        if let Some(w) = windows.iter().find(|w| w.len() != m * f) {
            return Err(Error::Input {
                name: "mel".into(),
                reason: format!("a window has {} values, not {m} x {f}", w.len()),
            });
        }
        let mel = Tensor::from_vec(vec![windows.len(), m, f], windows.concat())?;
        self.encoder.step(&[&mel])?;
        for l in 0..self.cfg.decoder_layers {
            let (k, v) = (
                self.encoder.output(1 + 2 * l),
                self.encoder.output(2 + 2 * l),
            );
            self.cache.set_cross(l, k, v)?;
        }
        self.windows = windows.len();
        Ok(())
    }

    fn start(&mut self, windows: &[usize]) -> Result<()> {
        Ok(self.cache.start(windows)?)
    }

    fn feed(
        &mut self,
        tokens: &[u32],
        n: usize,
        positions: &[usize],
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        let batch = self.cache.batch();
        if n == 0 || tokens.len() != batch * n {
            return Err(Error::Input {
                name: "tokens".into(),
                reason: format!("{} tokens for {batch} sequences of {n}", tokens.len()),
            });
        }
        if let Some(p) = positions.iter().find(|&&p| p >= n) {
            return Err(internal(format!("position {p} of {n} new tokens")));
        }
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return Err(Error::Input {
                name: "tokens".into(),
                reason: format!(
                    "token id {t} is outside the vocabulary ({})",
                    self.cfg.vocab_size
                ),
            });
        }
        let d = self.cfg.d_model;
        if n > 1 && batch > 1 {
            // the prompt graph takes one sequence: feed the others' tokens
            // one position at a time (same numbers, slower); only the rows
            // asked for are kept
            let mut kept = vec![0f32; batch * positions.len() * d];
            for i in 0..n {
                let col: Vec<u32> = (0..batch).map(|b| tokens[b * n + i]).collect();
                self.run_decoder(&col, batch, 1)?;
                let h = self.hidden(1).to_f32_vec();
                for (pi, _) in positions.iter().enumerate().filter(|(_, &p)| p == i) {
                    for b in 0..batch {
                        let dst = (b * positions.len() + pi) * d;
                        kept[dst..dst + d].copy_from_slice(&h[b * d..(b + 1) * d]);
                    }
                }
            }
            self.rows = kept;
        } else {
            self.run_decoder(tokens, batch, n)?;
            let h = if n == 1 {
                self.step.output(0)
            } else {
                self.prompt.output(0)
            };
            let h = h.as_slice::<f32>()?;
            self.rows.clear();
            for b in 0..batch {
                for &p in positions {
                    let r = (b * n + p) * d;
                    self.rows.extend_from_slice(&h[r..r + d]);
                }
            }
        }
        self.projection.logits(&self.rows, logits);
        Ok(())
    }

    fn reorder(&mut self, src: &[usize]) -> Result<()> {
        Ok(self.cache.reorder(src)?)
    }
}

impl AlignmentSource for CpuWhisper {
    fn cross_attention(
        &mut self,
        window: usize,
        tokens: &[u32],
        heads: &[(usize, usize)],
    ) -> Result<Vec<f32>> {
        if let Some(&(l, h)) = heads
            .iter()
            .find(|(l, h)| *l >= self.cfg.decoder_layers || *h >= self.cfg.decoder_attention_heads)
        {
            return Err(internal(format!(
                "alignment head ({l}, {h}) is not in the decoder"
            )));
        }
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        self.cache.start(&[window])?;
        self.cache.record(Some(heads.to_vec()));
        let mut logits = Vec::new();
        let r = self.feed(tokens, tokens.len(), &[tokens.len() - 1], &mut logits);
        let rec = self.cache.recorded();
        self.cache.record(None);
        r?;
        Ok(rec.concat())
    }
}
