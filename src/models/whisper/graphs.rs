//! Whisper as engine graphs: the log-mel front end, the encoder over
//! 30 s windows (with every decoder layer's cross-attention keys and
//! values), and the decoder over new tokens with its key/value cache.

use std::f64::consts::PI;

use super::layers::{Net, SelfAttention};
use super::WhisperConfig;
use crate::graph::{Graph, GraphBuilder, OutletId};
use crate::ops::cast::Cast;
use crate::ops::gather::Gather;
use crate::ops::kv_cache::KvCache;
use crate::ops::matmul::Linear;
use crate::ops::mel::{mel_filterbank, LogMel, MelScale};
use crate::ops::pad::{Pad, PadMode};
use crate::ops::reduce::{Reduce, ReduceOp};
use crate::ops::shape::{Permute, Slice, Squeeze};
use crate::ops::stft::{Stft, StftOutput};
use crate::ops::top_tokens::{TopTokens, ROW_PARAMS};
use crate::ops::{Binary, DType, Dim, Tensor, TypedFact};
use crate::weights::Weights;
use crate::Result;

/// Sample rate the checkpoints were trained at.
pub const SAMPLE_RATE: u32 = 16_000;
/// STFT size and hop of the reference front end (25 ms, 10 ms).
pub const N_FFT: usize = 400;
pub const HOP: usize = 160;

/// Floored log10 mel power of every STFT frame: input `audio` `[S]` f32 at
/// 16 kHz, output `log10_mel` `[S / 160 + 1, n_mels]` (time-major).
///
/// The frame-local part of the reference front end: a centred
/// (reflect-padded) STFT with a periodic Hann window, power through Slaney
/// mel filters, `log10` of at least 1e-10. It pulsifies, so a recording is
/// streamed through it (see [`super::features`]).
pub fn log_mel_frames(n_mels: usize) -> Result<Graph> {
    let mut b = GraphBuilder::new();
    let audio = b.input("audio", TypedFact::new(DType::F32, [Dim::s()]))?;
    let window: Vec<f32> = (0..N_FFT)
        .map(|n| (0.5 - 0.5 * (2.0 * PI * n as f64 / N_FFT as f64).cos()) as f32)
        .collect();
    let window = b.constant("window", Tensor::from_slice(&window))?;
    // centring as its own reflect Pad, which the pulsifier streams
    let centre = Pad {
        pads: vec![(N_FFT / 2, N_FFT / 2)],
        mode: PadMode::Reflect,
    };
    let centred = b.op("centre", centre, &[audio])?;
    let stft = Stft::new(N_FFT, HOP, false, StftOutput::Power)?;
    let power = b.op("stft", stft, &[centred, window])?;
    let nyquist = (SAMPLE_RATE / 2) as f32;
    let fb = mel_filterbank(
        N_FFT / 2 + 1,
        0.0,
        nyquist,
        n_mels,
        SAMPLE_RATE,
        MelScale::Slaney,
        true,
    )?;
    let fb = b.constant("mel_filters", fb)?;
    // ln then a clamp equals ln of the clamped power: ln is monotonic
    let ln = b.op("ln_mel", LogMel { eps: 0.0 }, &[power, fb])?;
    let floor = b.constant("ln_floor_value", Tensor::scalar(1e-10f32.ln()))?;
    let ln = b.op("ln_floor", Binary::Max, &[ln, floor])?;
    let inv_ln10 = b.constant("inv_ln10", Tensor::scalar(std::f32::consts::LOG10_E))?;
    let log10 = b.op("log10_mel", Binary::Mul, &[ln, inv_ln10])?;
    b.output("log10_mel", log10);
    b.build()
}

/// The reference's log-mel features of a whole recording in one graph:
/// input `audio` `[S]`, output `features` `[n_mels, S / 160 + 1]`.
///
/// As faster-whisper computes them: 160 zeros appended, [`log_mel_frames`]
/// with the last frame dropped, clamped to 8 below the recording's
/// maximum, then `(x + 4) / 4`. [`super::features::FeatureStream`] gives
/// the same values streaming (bounded intermediates); this graph is the
/// reference it is tested against.
pub fn frontend(n_mels: usize) -> Result<Graph> {
    let frames = log_mel_frames(n_mels)?;
    let mut b = GraphBuilder::new();
    let audio = b.input("audio", TypedFact::new(DType::F32, [Dim::s()]))?;
    let pad = Pad {
        pads: vec![(0, HOP)],
        mode: PadMode::Constant(0.0),
    };
    let padded = b.op("pad", pad, &[audio])?;
    // the frame graph's nodes, fed the padded audio
    let mut map = std::collections::HashMap::new();
    for (id, node) in frames.nodes.iter().enumerate() {
        let out = if frames.inputs.contains(&id) {
            padded
        } else {
            let ins: Vec<_> = node.inputs.iter().map(|o| map[&o.node]).collect();
            b.op_arc(&node.name, node.op.clone(), &ins)?[0]
        };
        map.insert(id, out);
    }
    let log10 = map[&frames.outputs[0].1.node];
    let log10 = b.op(
        "drop_last",
        Slice {
            axis: 0,
            start: 0,
            end: Some(-1),
        },
        &[log10],
    )?;
    let max = Reduce {
        op: ReduceOp::Max,
        axes: vec![0, 1],
        keep_dims: false,
    };
    let top = b.op("max", max, &[log10])?;
    let eight = b.constant("eight", Tensor::scalar(8f32))?;
    let low = b.op("max_minus_8", Binary::Sub, &[top, eight])?;
    let x = b.op("clamp", Binary::Max, &[log10, low])?;
    let four = b.constant("four", Tensor::scalar(4f32))?;
    let x = b.op("plus_4", Binary::Add, &[x, four])?;
    let quarter = b.constant("quarter", Tensor::scalar(0.25f32))?;
    let x = b.op("div_4", Binary::Mul, &[x, quarter])?;
    let x = b.op("features", Permute { axes: vec![1, 0] }, &[x])?;
    b.output("features", x);
    b.build()
}

/// The encoder over `B` windows: input `mel` `[B, n_mels, 3000]` (`B` the
/// stream symbol); outputs `encoder` `[B, 1500, d]`, then each decoder
/// layer's cross-attention keys and values (`cross_k.L`, `cross_v.L`,
/// `[B, 1500, d]`).
pub fn encoder(cfg: &WhisperConfig, w: &Weights) -> Result<Graph> {
    let (d, m) = (cfg.d_model, cfg.num_mel_bins);
    let mut b = GraphBuilder::new();
    let mel = b.input(
        "mel",
        TypedFact::new(
            DType::F32,
            [
                Dim::s(),
                Dim::n(m as i64),
                Dim::n(cfg.window_frames() as i64),
            ],
        ),
    )?;
    let mut n = Net { b: &mut b, w, d };
    let x = n.b.op(
        "time_major",
        Permute {
            axes: vec![0, 2, 1],
        },
        &[mel],
    )?;
    let x = n.conv_stem(x, m)?;
    let pos = n.weight(
        "model.encoder.embed_positions.weight",
        &[cfg.max_source_positions, d],
    )?;
    let x = n.b.op("model.encoder.positions", Binary::Add, &[x, pos])?;
    let enc = n.encoder_blocks(x, cfg, Some(cfg.max_source_positions))?;
    let cross = cross_outputs(&mut n, enc, cfg)?;
    b.output("encoder", enc);
    for (name, o) in cross {
        b.output(&name, o);
    }
    b.build()
}

/// Every decoder layer's cross-attention keys and values over `enc`.
fn cross_outputs(
    n: &mut Net,
    enc: OutletId,
    cfg: &WhisperConfig,
) -> Result<Vec<(String, OutletId)>> {
    let d = cfg.d_model;
    let mut outputs = Vec::new();
    for l in 0..cfg.decoder_layers {
        let p = format!("model.decoder.layers.{l}.encoder_attn");
        let k = n.linear(&format!("{p}.k_proj"), enc, (d, d), false)?;
        let v = n.linear(&format!("{p}.v_proj"), enc, (d, d), true)?;
        outputs.push((format!("cross_k.{l}"), k));
        outputs.push((format!("cross_v.{l}"), v));
    }
    Ok(outputs)
}

/// The cross-attention keys and values over encoder frames computed
/// elsewhere (a streamed encoder's): input `encoder` `[B, 1500, d]`;
/// outputs as [`encoder`]'s after its first (`cross_k.L`, `cross_v.L`).
pub fn cross_kv(cfg: &WhisperConfig, w: &Weights) -> Result<Graph> {
    let frames = Dim::n(cfg.max_source_positions as i64);
    cross_graph(cfg, w, [Dim::s(), frames])
}

/// As [`cross_kv`] over some frames of one window (`[1, S, d]`): the rows
/// a streamed encoder's new frames change, so that a pulse costs its own
/// frames, not the window's.
pub fn cross_kv_rows(cfg: &WhisperConfig, w: &Weights) -> Result<Graph> {
    cross_graph(cfg, w, [Dim::n(1), Dim::s()])
}

fn cross_graph(cfg: &WhisperConfig, w: &Weights, [windows, frames]: [Dim; 2]) -> Result<Graph> {
    let d = cfg.d_model;
    let mut b = GraphBuilder::new();
    let enc = b.input(
        "encoder",
        TypedFact::new(DType::F32, [windows, frames, Dim::n(d as i64)]),
    )?;
    let mut n = Net { b: &mut b, w, d };
    for (name, o) in cross_outputs(&mut n, enc, cfg)? {
        b.output(&name, o);
    }
    b.build()
}

/// How many sequences and tokens a decoder graph takes per run: facts
/// have one symbol, so one of the two is fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderShape {
    /// One sequence, `S` tokens (a prompt).
    Prompt,
    /// `S` sequences, one token each (a decoding step).
    Step,
}

/// The decoder over new tokens: inputs `tokens` (i64, `[1, S]` or `[S, 1]`)
/// and their text `positions` (i64, `[S]` or `[S, 1]`); output `hidden`
/// `[B, n, d]` after the final layer norm (logits are `hidden · Eᵀ`, taken
/// only where decoding needs them). Keys and values go to `cache`.
pub fn decoder(
    cfg: &WhisperConfig,
    w: &Weights,
    cache: &KvCache,
    shape: DecoderShape,
) -> Result<Graph> {
    decoder_graph(cfg, w, cache, shape, Head::Hidden)
}

/// [`decoder`] with a second output, `logits` `[B, n, vocab]` (`hidden ·
/// Eᵀ` in the graph): where the projection runs on the same device as the
/// decoder (a GPU), every step's logits come from there.
pub fn decoder_with_logits(
    cfg: &WhisperConfig,
    w: &Weights,
    cache: &KvCache,
    shape: DecoderShape,
) -> Result<Graph> {
    decoder_graph(cfg, w, cache, shape, Head::Logits)
}

/// The decoder step choosing each sequence's `k` best next tokens where
/// its logits are ([`TopTokens`]): inputs `tokens [S, 1]`, `positions
/// [S, 1]`, then `rules [S, ROW_PARAMS]` i64, `scores [S]` f32 (each row's
/// running score) and `masks [2, vocab]` bool; outputs `hidden`, then
/// `ids [S, k]`, `scores [S, k]` and `no_speech [S]`. A GPU step hands
/// back these instead of `S x vocab` logits.
pub fn decoder_choosing(
    cfg: &WhisperConfig,
    w: &Weights,
    cache: &KvCache,
    k: usize,
) -> Result<Graph> {
    decoder_graph(cfg, w, cache, DecoderShape::Step, Head::Choose(k))
}

/// What follows the decoder's last layer norm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    Hidden,
    Logits,
    Choose(usize),
}

fn decoder_graph(
    cfg: &WhisperConfig,
    w: &Weights,
    cache: &KvCache,
    shape: DecoderShape,
    head: Head,
) -> Result<Graph> {
    let d = cfg.d_model;
    let mut b = GraphBuilder::new();
    // a step's rows are sequences, each at its own position
    let (tok, pos) = match shape {
        DecoderShape::Prompt => ([Dim::n(1), Dim::s()], vec![Dim::s()]),
        DecoderShape::Step => ([Dim::s(), Dim::n(1)], vec![Dim::s(), Dim::n(1)]),
    };
    let tokens = b.input("tokens", TypedFact::new(DType::I64, tok))?;
    let positions = b.input("positions", TypedFact::new(DType::I64, pos))?;
    let mut n = Net { b: &mut b, w, d };
    // the lookup reads the embedding as the weights hold it (a CPU model
    // keeps it as stored, f16) and widens the rows it takes: exact
    let emb_name = "model.decoder.embed_tokens.weight";
    let emb = n.stored_weight(emb_name, &[cfg.vocab_size, d])?;
    let pemb = n.weight(
        "model.decoder.embed_positions.weight",
        &[cfg.max_target_positions, d],
    )?;
    let mut te =
        n.b.op("model.decoder.tokens", Gather { axis: 0 }, &[emb, tokens])?;
    let stored = n.w.get(emb_name, &[cfg.vocab_size, d])?.dtype();
    if stored != DType::F32 {
        let wide = Cast { to: DType::F32 };
        te = n.b.op("model.decoder.tokens.f32", wide, &[te])?;
    }
    // a head in the graph multiplies by the embedding in f32
    let emb = match (&head, stored) {
        (Head::Hidden, _) | (_, DType::F32) => emb,
        _ => {
            let e = n.w.f32(emb_name, &[cfg.vocab_size, d])?;
            n.b.constant(&format!("{emb_name}.f32"), e)?
        }
    };
    let pe = n.b.op(
        "model.decoder.positions",
        Gather { axis: 0 },
        &[pemb, positions],
    )?;
    let mut x = n.b.op("model.decoder.embedded", Binary::Add, &[te, pe])?;
    let heads = cfg.decoder_attention_heads;
    for l in 0..cfg.decoder_layers {
        let p = format!("model.decoder.layers.{l}");
        x = n.residual(&format!("{p}.self_attn_layer_norm"), x, |n, h| {
            n.self_attention(
                &format!("{p}.self_attn"),
                h,
                heads,
                SelfAttention::Cached(cache, l),
            )
        })?;
        x = n.residual(&format!("{p}.encoder_attn_layer_norm"), x, |n, h| {
            n.cross_attention(&format!("{p}.encoder_attn"), h, heads, cache, l)
        })?;
        x = n.residual(&format!("{p}.final_layer_norm"), x, |n, h| {
            n.mlp(&p, h, cfg.decoder_ffn_dim)
        })?;
    }
    let hidden = n.layer_norm("model.decoder.layer_norm", x)?;
    let outputs: Vec<(&str, OutletId)> = match head {
        Head::Hidden => Vec::new(),
        Head::Logits => vec![(
            "logits",
            n.b.op("model.decoder.logits", Linear, &[hidden, emb])?,
        )],
        Head::Choose(k) => {
            let vocab = Dim::n(cfg.vocab_size as i64);
            let rules = n.b.input(
                "rules",
                TypedFact::new(DType::I64, [Dim::s(), Dim::n(ROW_PARAMS as i64)]),
            )?;
            let cum =
                n.b.input("scores", TypedFact::new(DType::F32, [Dim::s()]))?;
            let masks =
                n.b.input("masks", TypedFact::new(DType::Bool, [Dim::n(2), vocab]))?;
            let logits = n.b.op("model.decoder.logits", Linear, &[hidden, emb])?;
            let rows =
                n.b.op("model.decoder.logit_rows", Squeeze { axis: 1 }, &[logits])?;
            let choice = n.b.op_multi(
                "model.decoder.choice",
                TopTokens { k },
                &[rows, rules, cum, masks],
            )?;
            vec![
                ("ids", choice[0]),
                ("scores", choice[1]),
                ("no_speech", choice[2]),
            ]
        }
    };
    b.output("hidden", hidden);
    for (name, o) in outputs {
        b.output(name, o);
    }
    b.build()
}
