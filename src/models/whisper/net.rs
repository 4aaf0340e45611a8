//! [`WhisperBackend`] over any engine: the encoder and decoder graphs run
//! by whatever [`NetRunners`] gives them (the CPU runner, or the GPU runner
//! with per-node CPU fallback), the decoder's cache shared by its prompt
//! and step graphs, and logits computed only at the positions decoding
//! asks for.

use super::backend::{AlignmentSource, Chosen, WhisperBackend};
use super::decode::WindowPadding;
use super::features;
use super::graphs::DecoderShape;
use super::projection::Projection;
use super::WhisperConfig;
use crate::graph::StepRunner;
use crate::ops::kv_cache::KvCache;
use crate::ops::top_tokens::{RowRules, ROW_PARAMS};
use crate::ops::{DType, OpError, Tensor};
use crate::{Error, Result};

/// The runners of one network's graphs, for the sizes decoding asks for.
/// A CPU runner takes any size of its graph's symbol; a GPU runner is
/// planned for one, so the GPU side keeps one per size.
pub trait NetRunners: Send {
    /// The encoder over `windows` windows.
    fn encoder(&mut self, windows: usize) -> Result<&mut dyn StepRunner>;
    /// The cross-attention keys and values over `windows` windows of
    /// encoder frames ([`super::graphs::cross_kv`]), where this engine has
    /// that graph.
    fn cross(&mut self, windows: usize) -> Result<&mut dyn StepRunner> {
        let _ = windows;
        Err(Error::Whisper(super::WhisperError::NoFrameInput))
    }
    /// The rows [`NetRunners::cross_rows`] runs for `rows` encoder frames
    /// (a GPU runner is planned per size, so the GPU rounds up to a power
    /// of two; the caller pads with zero rows and reads the first `rows`);
    /// `None` where this engine has no such graph.
    fn cross_rows_size(&self, rows: usize) -> Option<usize> {
        let _ = rows;
        None
    }
    /// The cross-attention keys and values of `size` encoder frames
    /// ([`super::graphs::cross_kv_rows`]).
    fn cross_rows(&mut self, size: usize) -> Result<&mut dyn StepRunner> {
        let _ = size;
        Err(Error::Whisper(super::WhisperError::NoFrameInput))
    }
    /// A decoder graph: `Prompt` over `s` tokens of one sequence, `Step`
    /// over one token of `s` sequences.
    fn decoder(&mut self, shape: DecoderShape, s: usize) -> Result<&mut dyn StepRunner>;
    /// The runner of the last [`NetRunners::decoder`] call of `shape`.
    fn last_decoder(&self, shape: DecoderShape) -> Option<&dyn StepRunner>;
    /// Whether the step graph's second output is the logits of every
    /// sequence (else they are projected on the host from `hidden`).
    fn step_logits(&self) -> bool {
        false
    }
    /// The decoder step that also chooses each row's next tokens
    /// ([`super::graphs::decoder_choosing`], `k` a row) over `s` sequences;
    /// `None` when this engine's steps hand back logits instead.
    fn chooser(&mut self, s: usize) -> Option<Result<(&mut dyn StepRunner, usize)>> {
        let _ = s;
        None
    }
    /// Rows the step graph runs for `batch` sequences: a GPU runner is
    /// planned and captured per size, so the GPU pads to a few sizes (the
    /// extra rows compute on whatever the cache holds there and are not
    /// read); a CPU runner takes any size.
    fn step_rows(&self, batch: usize) -> usize {
        batch
    }
    /// Positions the prompt graph runs for a prompt of `n` tokens: a GPU
    /// runner is planned per length, and prompts (the previous text and
    /// the committed tokens) come in every length, so the GPU pads to a few
    /// (the extra positions are written past the sequence's end, never
    /// read, and written again by the next tokens); a CPU runner takes any.
    fn prompt_len(&self, n: usize) -> usize {
        n
    }
    /// Gives the cache the cross-attention keys and values that the last
    /// run of [`NetRunners::encoder`] or [`NetRunners::cross`] (`from`)
    /// left on the device, for window `window` alone or every window
    /// (`None`); false where they came to the host instead (the caller
    /// reads them from the runner's outputs).
    fn cross_on_device(&mut self, from: CrossFrom, window: Option<usize>) -> Result<bool> {
        let _ = (from, window);
        Ok(false)
    }
    /// [`NetRunners::cross_on_device`] for the last run of
    /// [`NetRunners::cross_rows`]: its rows in order, `n` of them into
    /// window `window` from frame `from` for each `(window, from, n)`.
    fn rows_on_device(&mut self, parts: &[(usize, usize, usize)]) -> Result<bool> {
        let _ = parts;
        Ok(false)
    }
    /// Room for `sequences` decoded at once (see [`WhisperBackend::reserve`]).
    fn reserve_sequences(&mut self, sequences: usize) -> Result<()> {
        let _ = sequences;
        Ok(())
    }
    /// Room for `windows` encoder windows at once (a shared decoder's
    /// streams, a window each).
    fn reserve_windows(&mut self, windows: usize) -> Result<()> {
        let _ = windows;
        Ok(())
    }
}

/// Which graph made the cross-attention keys and values
/// [`NetRunners::cross_on_device`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrossFrom {
    /// The encoder (from mel windows).
    Encoder,
    /// The cross graph (from encoder frames).
    Frames,
}

/// A Whisper network on one engine; one per thread of work (it holds the
/// decoder's cache).
pub struct WhisperNet<R: NetRunners> {
    pub(super) cfg: WhisperConfig,
    pub(super) runners: R,
    pub(super) cache: KvCache,
    /// The output projection (the token embedding), shared by the model's
    /// networks.
    pub(super) projection: std::sync::Arc<Projection>,
    rows: Vec<f32>,
    /// The decoder's token ids and positions, rewritten each call.
    inputs: (Tensor, Tensor),
}

fn internal(what: String) -> Error {
    Error::Op(OpError::Other(what))
}

/// `windows` (each `[rows, cols]` row-major) as one `[windows, rows, cols]`
/// input named `name`.
fn stack(windows: &[&[f32]], name: &str, (rows, cols): (usize, usize)) -> Result<Tensor> {
    if windows.is_empty() {
        return Err(internal(format!("no {name} window to encode")));
    }
    if let Some(w) = windows.iter().find(|w| w.len() != rows * cols) {
        return Err(Error::Input {
            name: name.into(),
            reason: format!("a window has {} values, not {rows} x {cols}", w.len()),
        });
    }
    Ok(Tensor::from_vec(
        vec![windows.len(), rows, cols],
        windows.concat(),
    )?)
}

/// Gives `cache` each of `layers` decoder layers' cross-attention keys and
/// values, `runner`'s outputs from `first` on (a key and a value a layer).
fn keep_cross(cache: &KvCache, layers: usize, runner: &dyn StepRunner, first: usize) -> Result<()> {
    for l in 0..layers {
        let (k, v) = (
            runner.output(first + 2 * l),
            runner.output(first + 1 + 2 * l),
        );
        cache.set_cross(l, k, v)?;
    }
    Ok(())
}

impl<R: NetRunners> WhisperNet<R> {
    /// A network of `cfg` whose graphs `runners` runs; `cache` is the one
    /// their decoder graphs were built over.
    pub(super) fn from_parts(
        cfg: &WhisperConfig,
        runners: R,
        cache: KvCache,
        projection: std::sync::Arc<Projection>,
    ) -> Result<WhisperNet<R>> {
        Ok(WhisperNet {
            cfg: cfg.clone(),
            runners,
            cache,
            projection,
            rows: Vec::new(),
            inputs: (Tensor::empty(), Tensor::empty()),
        })
    }

    /// Runs one decoder graph over `n` tokens of each of `batch` sequences.
    /// Its inputs are written into tensors kept from the last call, so that
    /// a step allocates nothing.
    fn run_decoder(&mut self, tokens: &[u32], batch: usize, n: usize) -> Result<()> {
        let (shape, s, dims) = if n == 1 {
            let rows = self.runners.step_rows(batch);
            (DecoderShape::Step, rows, [rows, 1])
        } else {
            let padded = self.runners.prompt_len(n);
            // the padding must fit the positions left
            let s = match self.cache.len() + padded <= self.cache.capacity() {
                true => padded,
                false => n,
            };
            (DecoderShape::Prompt, s, [1, s])
        };
        let (ids, positions) = &mut self.inputs;
        ids.ensure(DType::I64, &dims);
        let v = ids.as_slice_mut::<i64>()?;
        v.fill(0);
        for (d, &t) in v.iter_mut().zip(tokens) {
            *d = t as i64;
        }
        match shape {
            DecoderShape::Prompt => {
                let from = self.cache.len() as i64;
                positions.ensure(DType::I64, &[s]);
                for (i, p) in positions.as_slice_mut::<i64>()?.iter_mut().enumerate() {
                    *p = from + i as i64;
                }
            }
            DecoderShape::Step => {
                // padding rows read position 0; their outputs are not read
                positions.ensure(DType::I64, &[s, 1]);
                let v = positions.as_slice_mut::<i64>()?;
                v.fill(0);
                self.cache.fed_positions(v);
            }
        }
        self.runners.decoder(shape, s)?.step(&[ids, positions])?;
        Ok(self.cache.advance(n)?)
    }

    /// Replaces window `window`'s frames `from..` with `rows` (`[n, d]`
    /// row-major); `Ok(false)`, having changed nothing, where this engine
    /// has no graph for rows alone (it takes whole windows).
    pub fn set_window_rows(&mut self, window: usize, from: usize, rows: &[f32]) -> Result<bool> {
        self.set_windows_rows(&[(window, from, rows)])
    }

    /// [`WhisperNet::set_window_rows`] for several windows at once, the
    /// rows of all in one pass of the rows graph (a row's keys and values
    /// are its own: the pass is row by row); `Ok(false)` as there.
    pub fn set_windows_rows(&mut self, parts: &[(usize, usize, &[f32])]) -> Result<bool> {
        let d = self.cfg.d_model;
        if let Some((_, _, rows)) = parts.iter().find(|p| !p.2.len().is_multiple_of(d)) {
            return Err(Error::Input {
                name: "encoder".into(),
                reason: format!("{} values are not rows of {d}", rows.len()),
            });
        }
        let total: usize = parts.iter().map(|p| p.2.len() / d).sum();
        let Some(size) = self.runners.cross_rows_size(total) else {
            return Ok(false);
        };
        if total == 0 {
            return Ok(true);
        }
        let mut stacked = Vec::with_capacity(size * d);
        for (_, _, rows) in parts {
            stacked.extend_from_slice(rows);
        }
        stacked.resize(size * d, 0.0);
        self.runners
            .cross_rows(size)?
            .step(&[&Tensor::from_vec(vec![1, size, d], stacked)?])?;
        let places: Vec<(usize, usize, usize)> = parts
            .iter()
            .map(|&(w, from, r)| (w, from, r.len() / d))
            .collect();
        if self.runners.rows_on_device(&places)? {
            return Ok(true);
        }
        let runner = self.runners.cross_rows(size)?;
        let mut at = 0;
        for &(window, from, rows) in parts {
            let n = rows.len() / d;
            // this part's rows of output `i`
            let part = |i: usize| -> Result<Tensor> {
                let o = crate::ops::contig(runner.output(i));
                let rows = &o.as_slice::<f32>()?[at * d..(at + n) * d];
                Ok(Tensor::from_vec(vec![1, n, d], rows.to_vec())?)
            };
            for l in 0..self.cfg.decoder_layers {
                let (k, v) = (part(2 * l)?, part(2 * l + 1)?);
                self.cache.set_cross_rows(l, window, from, &k, &v)?;
            }
            at += n;
        }
        Ok(true)
    }

    /// Refuses a token id outside the vocabulary.
    fn check_vocabulary(&self, tokens: &[u32]) -> Result<()> {
        let vocab = self.cfg.vocab_size;
        match tokens.iter().find(|&&t| t as usize >= vocab) {
            Some(t) => Err(Error::Input {
                name: "tokens".into(),
                reason: format!("token id {t} is outside the vocabulary ({vocab})"),
            }),
            None => Ok(()),
        }
    }

    /// The decoder's last output, `[batch, n, d]`.
    fn hidden(&self, n: usize) -> Result<&Tensor> {
        let shape = if n == 1 {
            DecoderShape::Step
        } else {
            DecoderShape::Prompt
        };
        self.runners
            .last_decoder(shape)
            .map(|r| r.output(0))
            .ok_or_else(|| internal("no decoder step has run".into()))
    }
}

impl<R: NetRunners> WhisperBackend for WhisperNet<R> {
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

    fn window_padding(&self) -> WindowPadding {
        self.cfg.padding()
    }

    fn log_mel(&mut self, audio: &[f32]) -> Result<Vec<f32>> {
        features::log_mel(self.cfg.num_mel_bins, audio)
    }

    fn encode(&mut self, windows: &[&[f32]]) -> Result<()> {
        let size = (self.cfg.num_mel_bins, self.cfg.window_frames());
        let mel = stack(windows, "mel", size)?;
        self.runners.encoder(windows.len())?.step(&[&mel])?;
        if self.runners.cross_on_device(CrossFrom::Encoder, None)? {
            return Ok(());
        }
        let encoder = self.runners.encoder(windows.len())?;
        // output 0 is the encoder's frames, then each layer's keys and values
        keep_cross(&self.cache, self.cfg.decoder_layers, encoder, 1)
    }

    fn encode_frames(&mut self, frames: &[&[f32]]) -> Result<()> {
        let size = (self.cfg.max_source_positions, self.cfg.d_model);
        let enc = stack(frames, "encoder", size)?;
        self.runners.cross(frames.len())?.step(&[&enc])?;
        if self.runners.cross_on_device(CrossFrom::Frames, None)? {
            return Ok(());
        }
        let cross = self.runners.cross(frames.len())?;
        keep_cross(&self.cache, self.cfg.decoder_layers, cross, 0)
    }

    fn encode_frame_rows(&mut self, from: usize, rows: &[f32]) -> Result<bool> {
        self.set_window_rows(0, from, rows)
    }

    fn rewind(&mut self, len: usize) -> Result<bool> {
        self.cache.truncate(len)?;
        Ok(true)
    }

    fn reserve(&mut self, sequences: usize) -> Result<()> {
        self.runners.reserve_sequences(sequences)
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
        let batch = self.cache.fed();
        if n == 0 || tokens.len() != batch * n {
            return Err(Error::Input {
                name: "tokens".into(),
                reason: format!("{} tokens for {batch} sequences of {n}", tokens.len()),
            });
        }
        if let Some(p) = positions.iter().find(|&&p| p >= n) {
            return Err(internal(format!("position {p} of {n} new tokens")));
        }
        self.check_vocabulary(tokens)?;
        let d = self.cfg.d_model;
        if n > 1 && batch > 1 {
            // the prompt graph takes one sequence: feed the others' tokens
            // one position at a time (same numbers, slower); only the rows
            // asked for are kept
            let mut kept = vec![0f32; batch * positions.len() * d];
            for i in 0..n {
                let col: Vec<u32> = (0..batch).map(|b| tokens[b * n + i]).collect();
                self.run_decoder(&col, batch, 1)?;
                let h = self.hidden(1)?.to_f32_vec();
                for (pi, _) in positions.iter().enumerate().filter(|(_, &p)| p == i) {
                    for b in 0..batch {
                        let dst = (b * positions.len() + pi) * d;
                        kept[dst..dst + d].copy_from_slice(&h[b * d..(b + 1) * d]);
                    }
                }
            }
            self.rows = kept;
        } else if n > 1 && batch == 1 && positions == [n - 1] && self.runners.step_logits() {
            // a prompt whose last token's logits are asked for: its last
            // token runs as a step, whose graph projects onto the
            // vocabulary on the device (the host's projection of one row
            // reads the whole embedding matrix)
            let head = &tokens[..n - 1];
            self.run_decoder(head, 1, head.len())?;
            return self.feed(&tokens[n - 1..], 1, &[0], logits);
        } else if n == 1 && self.runners.step_logits() {
            self.run_decoder(tokens, batch, n)?;
            let step = self.runners.last_decoder(DecoderShape::Step);
            let all = step
                .ok_or_else(|| internal("no decoder step has run".into()))?
                .output(1)
                .as_slice::<f32>()?;
            // n = 1: every listed position is the new token's
            let vocab = self.cfg.vocab_size;
            logits.clear();
            for b in 0..batch {
                for _ in positions {
                    logits.extend_from_slice(&all[b * vocab..(b + 1) * vocab]);
                }
            }
            return Ok(());
        } else {
            self.run_decoder(tokens, batch, n)?;
            let mut rows = std::mem::take(&mut self.rows);
            rows.clear();
            let h = self.hidden(n)?.as_slice::<f32>()?;
            for b in 0..batch {
                for &p in positions {
                    let r = (b * n + p) * d;
                    rows.extend_from_slice(&h[r..r + d]);
                }
            }
            self.rows = rows;
        }
        self.projection.logits(&self.rows, logits);
        Ok(())
    }

    fn feed_choose(
        &mut self,
        tokens: &[u32],
        rules: &[RowRules],
        cum: &[f32],
        masks: &Tensor,
        k: usize,
    ) -> Result<Option<Chosen>> {
        let batch = self.cache.fed();
        if tokens.len() != batch || rules.len() != batch || cum.len() != batch {
            return Err(Error::Input {
                name: "tokens".into(),
                reason: format!(
                    "{} tokens, {} rules and {} scores for {batch} sequences",
                    tokens.len(),
                    rules.len(),
                    cum.len()
                ),
            });
        }
        self.check_vocabulary(tokens)?;
        let s = self.runners.step_rows(batch);
        let mut past = vec![0i64; s];
        self.cache.fed_positions(&mut past);
        let Some(runner) = self.runners.chooser(s) else {
            return Ok(None);
        };
        let (runner, stride) = runner?;
        if k > stride {
            return Ok(None);
        }
        // padding rows: token 0, no rule; their choices are not read
        let mut ids: Vec<i64> = tokens.iter().map(|&t| t as i64).collect();
        ids.resize(s, 0);
        let padding = std::iter::repeat_n(&RowRules::NONE, s - batch);
        let row_params: Vec<i64> = rules
            .iter()
            .chain(padding)
            .flat_map(|r| r.encode())
            .collect();
        let mut scores = cum.to_vec();
        scores.resize(s, 0.0);
        runner.step(&[
            &Tensor::from_vec(vec![s, 1], ids)?,
            &Tensor::from_vec(vec![s, 1], past)?,
            &Tensor::from_vec(vec![s, ROW_PARAMS], row_params)?,
            &Tensor::from_vec(vec![s], scores)?,
            masks,
        ])?;
        let ids = runner.output(1).as_slice::<i64>()?;
        let chosen = Chosen {
            stride,
            ids: ids[..batch * stride].iter().map(|&i| i as u32).collect(),
            scores: runner.output(2).as_slice::<f32>()?[..batch * stride].to_vec(),
            no_speech: runner.output(3).as_slice::<f32>()?[..batch].to_vec(),
        };
        self.cache.advance(1)?;
        Ok(Some(chosen))
    }

    fn reorder(&mut self, src: &[usize]) -> Result<()> {
        Ok(self.cache.reorder(src)?)
    }
}

impl<R: NetRunners> AlignmentSource for WhisperNet<R> {
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
        if !self.cache.can_record() {
            return Err(internal("this engine's decoder keeps no attention".into()));
        }
        self.cache.start(&[window])?;
        self.cache.record(Some(heads.to_vec()))?;
        // the weights are wanted, not the logits
        let mut logits = Vec::new();
        let r = self.feed(tokens, tokens.len(), &[], &mut logits);
        let rec = self.cache.recorded();
        self.cache.record(None)?;
        r?;
        Ok(rec.concat())
    }

    fn record_attention(&mut self, heads: Option<&[(usize, usize)]>) -> bool {
        self.cache.can_record() && self.cache.record(heads.map(<[_]>::to_vec)).is_ok()
    }

    fn take_attention(&mut self) -> Vec<Vec<f32>> {
        self.cache.take_recorded()
    }
}

/// The network of `model` on `engine`: the CPU runner, or the GPU runner
/// with per-node CPU fallback.
pub fn network(
    model: &super::WhisperModel,
    engine: &crate::engine::Engine,
) -> Result<Box<dyn super::decode::AlignedBackend + Send>> {
    use crate::engine::Engine;
    match engine {
        Engine::Cpu => Ok(Box::new(super::CpuWhisper::new(model)?)),
        #[cfg(feature = "cuda")]
        Engine::Gpu { device, options } => Ok(Box::new(super::GpuWhisper::on_gpu(
            model,
            device.clone(),
            options,
        )?)),
    }
}
