//! The shipped streaming conformer-CTC encoder, written with the graph
//! builder from `config.json` and `model.safetensors` (models/ARCHITECTURE.md
//! is the contract with the PyTorch side). Time-major throughout: `[T, C]`.

use crate::graph::{Graph, GraphBuilder, OutletId};
use crate::ops::conv::{Conv1d, ConvLayout};
use crate::ops::ctc_head::{CtcHead, CtcHeadMode};
use crate::ops::limited_attention::LimitedAttention;
use crate::ops::matmul::Linear;
use crate::ops::mel::LogMel;
use crate::ops::norm::LayerNorm;
use crate::ops::pad::{Pad, PadMode};
use crate::ops::shape::Slice;
use crate::ops::softmax::LogSoftmax;
use crate::ops::stft::{Stft, StftOutput};
use crate::ops::{Binary, DType, Dim, Tensor, TypedFact, Unary};
use crate::weights::Weights;
use crate::Result;

use super::ConformerConfig;

/// What the CTC head outputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Head {
    /// `best_id [T]` i64 and `best_logp [T]` f32 from the fused head, with no
    /// `[T, vocab]` logits (greedy decoding).
    #[default]
    Greedy,
    /// `log_probs [T, vocab]` (beam search, scoring, comparisons).
    LogProbs,
}

/// Which tensors the graph exposes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Taps {
    pub head: Head,
    /// Also output `features` (normalised log-mel), `subsample` and `encoder`.
    pub intermediates: bool,
}

/// Builds the whole-utterance graph: input `audio` `[S]` f32 at the model's
/// sample rate; outputs as chosen by `taps` (the head's first).
pub fn build(cfg: &ConformerConfig, w: &Weights, taps: Taps) -> Result<Graph> {
    build_with_batch(cfg, w, taps, None)
}

/// The same graph over `batch` utterances of one length side by side: input
/// `audio` `[B, S]`, every tensor with a leading batch axis. Pulsified, it
/// runs `B` streams in one step, so a GPU reads each weight once for all of
/// them. The fused greedy head has no batch axis; take [`Head::LogProbs`].
pub fn build_batched(
    cfg: &ConformerConfig,
    w: &Weights,
    taps: Taps,
    batch: usize,
) -> Result<Graph> {
    if taps.head == Head::Greedy {
        return Err(crate::Error::Graph(
            "a batched graph outputs log-probs: the fused greedy CTC head has no batch axis".into(),
        ));
    }
    if batch == 0 {
        return Err(crate::Error::Graph("a batch of 0 streams".into()));
    }
    build_with_batch(cfg, w, taps, Some(batch))
}

fn build_with_batch(
    cfg: &ConformerConfig,
    w: &Weights,
    taps: Taps,
    batch: Option<usize>,
) -> Result<Graph> {
    let mut gb = GraphBuilder::new();
    let batched = batch.is_some();
    let mut m = Builder {
        b: &mut gb,
        w,
        cfg,
        batched,
    };
    let shape: Vec<Dim> = match batch {
        Some(b) => vec![Dim::n(b as i64), Dim::s()],
        None => vec![Dim::s()],
    };
    let audio = m.b.input("audio", TypedFact::new(DType::F32, shape))?;
    let feats = m.b.scoped("frontend", |b| {
        Builder { b, w, cfg, batched }.frontend(audio)
    })?;
    let mut x = m.b.scoped("subsample", |b| {
        Builder { b, w, cfg, batched }.subsample(feats)
    })?;
    let sub = x;
    for i in 0..cfg.n_blocks {
        x = m.b.scoped(&format!("blocks.{i}"), |b| {
            Builder { b, w, cfg, batched }.block(x)
        })?;
    }
    match taps.head {
        Head::LogProbs => {
            let logits = m.b.scoped("ctc", |b| {
                Builder { b, w, cfg, batched }.linear("", x, cfg.d_model, cfg.vocab_size)
            })?;
            let logp = m.b.op("log_probs", LogSoftmax { axis: -1 }, &[logits])?;
            m.b.output("log_probs", logp);
        }
        Head::Greedy => {
            let cw = m.weight("ctc.weight", &[cfg.vocab_size, cfg.d_model])?;
            let cb = m.weight("ctc.bias", &[cfg.vocab_size])?;
            let outs = m.b.op_multi(
                "ctc_head",
                CtcHead {
                    mode: CtcHeadMode::Greedy,
                },
                &[x, cw, cb],
            )?;
            m.b.output("best_id", outs[0]);
            m.b.output("best_logp", outs[1]);
        }
    }
    if taps.intermediates {
        m.b.output("features", feats);
        m.b.output("subsample", sub);
        m.b.output("encoder", x);
    }
    gb.build()
}

/// Scoped builder state: weights are looked up relative to the scope.
struct Builder<'a, 'w> {
    b: &'a mut GraphBuilder,
    w: &'w Weights,
    cfg: &'w ConformerConfig,
    /// A leading batch axis on every activation.
    batched: bool,
}

impl Builder<'_, '_> {
    fn weight(&mut self, name: &str, shape: &[usize]) -> Result<OutletId> {
        let full = self.b.scoped_name(name);
        let t: Tensor = self.w.f32(&full, shape)?;
        self.b.constant(name, t)
    }

    fn frontend(&mut self, audio: OutletId) -> Result<OutletId> {
        let c = self.cfg;
        let bins = c.n_fft / 2 + 1;
        let padded = self.b.op(
            "pad",
            Pad {
                pads: if self.batched {
                    vec![(0, 0), (c.n_fft - c.hop, 0)]
                } else {
                    vec![(c.n_fft - c.hop, 0)]
                },
                mode: PadMode::Constant(0.0),
            },
            &[audio],
        )?;
        let window = self.weight("window", &[c.n_fft])?;
        let stft = Stft::new(c.n_fft, c.hop, false, StftOutput::Power)?;
        let power = self.b.op("stft", stft, &[padded, window])?;
        let fb = self.weight("mel_fb", &[bins, c.n_mels])?;
        let logmel = self
            .b
            .op("logmel", LogMel { eps: c.log_eps }, &[power, fb])?;
        let mean = self.weight("mean", &[c.n_mels])?;
        let inv_std = self.weight("inv_std", &[c.n_mels])?;
        let centred = self.b.op("centre", Binary::Sub, &[logmel, mean])?;
        self.b.op("features", Binary::Mul, &[centred, inv_std])
    }

    fn subsample(&mut self, x: OutletId) -> Result<OutletId> {
        let c = self.cfg;
        let k = c.subsample_kernel;
        let conv = |stride| Conv1d {
            stride,
            dilation: 1,
            pad: (k - 1, 0),
            groups: 1,
            layout: ConvLayout::ChannelsLast,
        };
        let w1 = self.weight("conv1.weight", &[c.subsample_channels, c.n_mels, k])?;
        let b1 = self.weight("conv1.bias", &[c.subsample_channels])?;
        let y = self.b.op("conv1", conv(2), &[x, w1, b1])?;
        let y = self.b.op("act1", Unary::Silu, &[y])?;
        let w2 = self.weight("conv2.weight", &[c.d_model, c.subsample_channels, k])?;
        let b2 = self.weight("conv2.bias", &[c.d_model])?;
        let y = self.b.op("conv2", conv(2), &[y, w2, b2])?;
        self.b.op("act2", Unary::Silu, &[y])
    }

    fn linear(
        &mut self,
        name: &str,
        x: OutletId,
        fan_in: usize,
        fan_out: usize,
    ) -> Result<OutletId> {
        let p = |s: &str| {
            if name.is_empty() {
                s.to_string()
            } else {
                format!("{name}.{s}")
            }
        };
        let w = self.weight(&p("weight"), &[fan_out, fan_in])?;
        let b = self.weight(&p("bias"), &[fan_out])?;
        let out = if name.is_empty() {
            "linear".to_string()
        } else {
            name.to_string()
        };
        self.b.op(&out, Linear, &[x, w, b])
    }

    fn layer_norm(&mut self, name: &str, x: OutletId) -> Result<OutletId> {
        let d = self.cfg.d_model;
        let g = self.weight(&format!("{name}.weight"), &[d])?;
        let b = self.weight(&format!("{name}.bias"), &[d])?;
        self.b.op(
            name,
            LayerNorm {
                eps: self.cfg.layer_norm_eps,
                axis: -1,
            },
            &[x, g, b],
        )
    }

    fn feed_forward(&mut self, x: OutletId) -> Result<OutletId> {
        let (d, f) = (self.cfg.d_model, self.cfg.ff_dim);
        let y = self.layer_norm("norm", x)?;
        let y = self.linear("linear1", y, d, f)?;
        let y = self.b.op("act", Unary::Silu, &[y])?;
        self.linear("linear2", y, f, d)
    }

    fn attention(&mut self, x: OutletId) -> Result<OutletId> {
        let d = self.cfg.d_model;
        let y = self.layer_norm("norm", x)?;
        let q = self.linear("q", y, d, d)?;
        let k = self.linear("k", y, d, d)?;
        let v = self.linear("v", y, d, d)?;
        let attn = LimitedAttention {
            heads: self.cfg.n_heads,
            left_context: self.cfg.left_context,
            scale: None,
        };
        let a = self.b.op("mhsa", attn, &[q, k, v])?;
        self.linear("out", a, d, d)
    }

    fn conv_module(&mut self, x: OutletId) -> Result<OutletId> {
        let (d, k) = (self.cfg.d_model, self.cfg.conv_kernel);
        let channels = if self.batched { 2 } else { 1 };
        let y = self.layer_norm("norm", x)?;
        let y = self.linear("pointwise1", y, d, 2 * d)?;
        let a = self.b.op(
            "glu_a",
            Slice {
                axis: channels,
                start: 0,
                end: Some(d as i64),
            },
            &[y],
        )?;
        let g = self.b.op(
            "glu_b",
            Slice {
                axis: channels,
                start: d as i64,
                end: Some(2 * d as i64),
            },
            &[y],
        )?;
        let g = self.b.op("glu_gate", Unary::Sigmoid, &[g])?;
        let y = self.b.op("glu", Binary::Mul, &[a, g])?;
        let dw = Conv1d {
            stride: 1,
            dilation: 1,
            pad: (k - 1, 0),
            groups: d,
            layout: ConvLayout::ChannelsLast,
        };
        let w = self.weight("depthwise.weight", &[d, 1, k])?;
        let b = self.weight("depthwise.bias", &[d])?;
        let y = self.b.op("depthwise", dw, &[y, w, b])?;
        let y = self.layer_norm("dw_norm", y)?;
        let y = self.b.op("act", Unary::Silu, &[y])?;
        self.linear("pointwise2", y, d, d)
    }

    fn half_residual(&mut self, x: OutletId, y: OutletId, name: &str) -> Result<OutletId> {
        let half = self
            .b
            .constant(&format!("{name}.half"), Tensor::scalar(0.5f32))?;
        let y = self
            .b
            .op(&format!("{name}.scaled"), Binary::Mul, &[y, half])?;
        self.b.op(&format!("{name}.residual"), Binary::Add, &[x, y])
    }

    fn block(&mut self, x: OutletId) -> Result<OutletId> {
        let (w, cfg, batched) = (self.w, self.cfg, self.batched);
        let y = self
            .b
            .scoped("ff1", |b| Builder { b, w, cfg, batched }.feed_forward(x))?;
        let x = self.half_residual(x, y, "ff1")?;
        let y = self
            .b
            .scoped("attn", |b| Builder { b, w, cfg, batched }.attention(x))?;
        let x = self.b.op("attn.residual", Binary::Add, &[x, y])?;
        let y = self
            .b
            .scoped("conv", |b| Builder { b, w, cfg, batched }.conv_module(x))?;
        let x = self.b.op("conv.residual", Binary::Add, &[x, y])?;
        let y = self
            .b
            .scoped("ff2", |b| Builder { b, w, cfg, batched }.feed_forward(x))?;
        let x = self.half_residual(x, y, "ff2")?;
        self.layer_norm("norm_out", x)
    }
}
