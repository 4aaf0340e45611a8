//! The layers Whisper's encoder and decoder are made of, written with the
//! graph builder over weights named as `transformers` names them.

use super::config::EncoderContext;
use super::copy_layout::CopyLayout;
use super::WhisperConfig;
use crate::graph::{GraphBuilder, OutletId};
use crate::ops::attention::Attention;
use crate::ops::chunked_attention::ChunkedAttention;
use crate::ops::conv::{Conv1d, ConvLayout};
use crate::ops::copies_attention::CopiesAttention;
use crate::ops::gather::Gather;
use crate::ops::kv_cache::{CachedSelfAttention, CrossAttention, KvCache};
use crate::ops::matmul::{Int8Linear, Linear};
use crate::ops::norm::LayerNorm;
use crate::ops::right_copies::RightCopies;
use crate::ops::shape::{Permute, Reshape, Slice, Squeeze};
use crate::ops::{Binary, Tensor, Unary};
use crate::weights::Weights;
use crate::Result;

/// `transformers`' LayerNorm epsilon for Whisper.
const LN_EPS: f32 = 1e-5;

/// A graph builder plus the checkpoint's weights (converted to f32). Node
/// names are the weights' own (`model.encoder.layers.0.fc1`), so a node
/// says where its parameters come from.
pub struct Net<'a> {
    pub b: &'a mut GraphBuilder,
    pub w: &'a Weights,
    pub d: usize,
}

/// Where a self-attention's keys and values come from.
pub enum SelfAttention<'c> {
    /// All frames at once (the encoder).
    Whole,
    /// Appended to a decoder cache, causal.
    Cached(&'c KvCache, usize),
    /// Restricted to chunks (a streaming encoder), in encoder layer `usize`.
    Chunked(EncoderContext, usize),
    /// Chunks over frames and their right-context copy slots (a streaming
    /// encoder with `right_copies`).
    Copies(EncoderContext),
    /// The same restriction over a window of known length, as a mask (a
    /// `[T, T]` bool constant from [`Net::chunk_mask`]) on whole attention,
    /// which runs as blocked matrix products.
    Masked(OutletId),
}

impl Net<'_> {
    /// The weight `name` as an f32 constant, checked against `shape`.
    pub fn weight(&mut self, name: &str, shape: &[usize]) -> Result<OutletId> {
        let t = self.w.f32(name, shape)?;
        self.b.constant(name, t)
    }

    /// The weight `name` as stored (f16 stays f16), checked against `shape`.
    pub fn stored_weight(&mut self, name: &str, shape: &[usize]) -> Result<OutletId> {
        let t = self.w.get(name, shape)?;
        self.b.constant(name, t)
    }

    /// `x · Wᵀ + b` from `{name}.weight` `[out, in]` and `{name}.bias`;
    /// int8 where the weights hold the matrix as int8.
    pub fn linear(
        &mut self,
        name: &str,
        x: OutletId,
        (fan_in, fan_out): (usize, usize),
        bias: bool,
    ) -> Result<OutletId> {
        let weight = format!("{name}.weight");
        // the weight is checked before the bias: errors name it first
        let int8 = self.w.int8(&weight);
        let w = match &int8 {
            Some(q) if (q.rows(), q.cols()) != (fan_out, fan_in) => {
                return Err(crate::Error::Other(format!(
                    "{weight}: int8 [{}, {}], expected [{fan_out}, {fan_in}]",
                    q.rows(),
                    q.cols()
                )))
            }
            Some(_) => None,
            None => Some(self.weight(&weight, &[fan_out, fan_in])?),
        };
        let bias = match bias {
            true => Some(self.weight(&format!("{name}.bias"), &[fan_out])?),
            false => None,
        };
        match (int8, w) {
            (Some(w), _) => {
                let ins: Vec<OutletId> = std::iter::once(x).chain(bias).collect();
                self.b.op(name, Int8Linear { w }, &ins)
            }
            (None, w) => {
                let ins: Vec<OutletId> = [x].into_iter().chain(w).chain(bias).collect();
                self.b.op(name, Linear, &ins)
            }
        }
    }

    pub fn layer_norm(&mut self, name: &str, x: OutletId) -> Result<OutletId> {
        let g = self.weight(&format!("{name}.weight"), &[self.d])?;
        let b = self.weight(&format!("{name}.bias"), &[self.d])?;
        self.b.op(
            name,
            LayerNorm {
                eps: LN_EPS,
                axis: -1,
            },
            &[x, g, b],
        )
    }

    /// The encoder's two convolutions with their GELUs, over time-major
    /// `x [.., T, n_mels]` (the second one halves `T`).
    pub fn conv_stem(&mut self, mut x: OutletId, n_mels: usize) -> Result<OutletId> {
        let d = self.d;
        for (i, (stride, fan_in)) in [(1, n_mels), (2, d)].into_iter().enumerate() {
            let name = format!("model.encoder.conv{}", i + 1);
            let wt = self.weight(&format!("{name}.weight"), &[d, fan_in, 3])?;
            let bias = self.weight(&format!("{name}.bias"), &[d])?;
            let conv = Conv1d {
                stride,
                dilation: 1,
                pad: (1, 1),
                groups: 1,
                layout: ConvLayout::ChannelsLast,
            };
            let y = self.b.op(&name, conv, &[x, wt, bias])?;
            x = self.b.op(&format!("{name}.gelu"), Unary::Gelu, &[y])?;
        }
        Ok(x)
    }

    /// Where each of `t` frames may look under chunked context `c` with
    /// look-ahead `right`: `[t, t]` bools ([`ChunkedAttention::window`]).
    fn chunk_mask(&mut self, c: EncoderContext, right: usize, t: usize) -> Result<OutletId> {
        let op = ChunkedAttention {
            heads: 1,
            chunk: c.chunk,
            left: c.left,
            right,
        };
        let mut mask = vec![false; t * t];
        for (i, row) in mask.chunks_exact_mut(t).enumerate() {
            let (lo, hi) = op.window(i as i64);
            let (lo, hi) = (lo.max(0) as usize, (hi.max(-1) + 1).min(t as i64) as usize);
            row[lo..hi.max(lo)].fill(true);
        }
        let name = format!("model.encoder.attention_mask.right{right}");
        self.b.constant(&name, Tensor::from_vec(vec![t, t], mask)?)
    }

    /// The encoder's layers and final norm over `x` (positions added), with
    /// the checkpoint's attention: the whole window, or chunks. `window`:
    /// the frames of a fixed window `[B, t, d]` (chunks then become a
    /// mask), or `None` for a stream. With right-context copies, the copies
    /// join the frames before the layers and leave before the final norm:
    /// a window gathers them as extra rows under one mask, a stream puts
    /// them in a slot beside each frame (`[T, 2, d]`).
    pub fn encoder_blocks(
        &mut self,
        mut x: OutletId,
        cfg: &WhisperConfig,
        window: Option<usize>,
    ) -> Result<OutletId> {
        let copies = cfg
            .encoder_context
            .filter(|c| c.right_copies && c.right > 0);
        let mut copy_mask = None;
        if let Some(c) = copies {
            x = match window {
                Some(t) => {
                    let (rows, mask) = self.copy_rows(&CopyLayout::new(&c, t))?;
                    copy_mask = Some(mask);
                    let gather = Gather { axis: 1 };
                    self.b
                        .op("model.encoder.right_copies", gather, &[x, rows])?
                }
                None => {
                    let op = RightCopies {
                        chunk: c.chunk,
                        right: c.right,
                    };
                    self.b.op("model.encoder.right_copies", op, &[x])?
                }
            };
        }
        let mut masks: Vec<(usize, OutletId)> = Vec::new();
        for l in 0..cfg.encoder_layers {
            let p = format!("model.encoder.layers.{l}");
            let heads = cfg.encoder_attention_heads;
            let kind = match (cfg.encoder_context, window, copy_mask) {
                (_, _, Some(mask)) => SelfAttention::Masked(mask),
                (Some(c), Some(t), None) => {
                    // the layers after the first share one mask
                    let right = c.right_of(l);
                    if masks.last().is_none_or(|&(r, _)| r != right) {
                        masks.push((right, self.chunk_mask(c, right, t)?));
                    }
                    SelfAttention::Masked(masks.last().expect("pushed").1)
                }
                (Some(c), None, None) if copies.is_some() => SelfAttention::Copies(c),
                (Some(c), None, None) => SelfAttention::Chunked(c, l),
                (None, _, _) => SelfAttention::Whole,
            };
            x = self.residual(&format!("{p}.self_attn_layer_norm"), x, |n, h| {
                n.self_attention(&format!("{p}.self_attn"), h, heads, kind)
            })?;
            x = self.residual(&format!("{p}.final_layer_norm"), x, |n, h| {
                n.mlp(&p, h, cfg.encoder_ffn_dim)
            })?;
        }
        if copies.is_some() {
            x = self.drop_copies(x, window)?;
        }
        self.layer_norm("model.encoder.layer_norm", x)
    }

    /// The frames of `x` without their copies: a window's first `t` rows,
    /// or a stream's slot 0 (a slice and a squeeze, which the GPU runs as
    /// a copy and a view).
    fn drop_copies(&mut self, x: OutletId, window: Option<usize>) -> Result<OutletId> {
        let name = "model.encoder.right_copies.dropped";
        let end = window.map_or(1, |t| t as i64);
        let frames = Slice {
            axis: 1,
            start: 0,
            end: Some(end),
        };
        if window.is_some() {
            return self.b.op(name, frames, &[x]);
        }
        let x = self
            .b
            .op("model.encoder.right_copies.frames", frames, &[x])?;
        self.b.op(name, Squeeze { axis: 1 }, &[x])
    }

    /// The rows of a window with right-context copies, as gather indices
    /// into its frames, and the mask of what each row sees.
    fn copy_rows(&mut self, layout: &CopyLayout) -> Result<(OutletId, OutletId)> {
        let rows: Vec<i64> = layout.rows().iter().map(|r| r.0 as i64).collect();
        let n = rows.len();
        let rows = self.b.constant(
            "model.encoder.right_copies.rows",
            Tensor::from_vec(vec![n], rows)?,
        )?;
        let mask = self.b.constant(
            "model.encoder.attention_mask.copies",
            Tensor::from_vec(vec![n, n], layout.mask())?,
        )?;
        Ok((rows, mask))
    }

    /// `fc2(gelu(fc1(x)))` of layer `layer` (a weight prefix).
    pub fn mlp(&mut self, layer: &str, x: OutletId, ffn: usize) -> Result<OutletId> {
        let d = self.d;
        let h = self.linear(&format!("{layer}.fc1"), x, (d, ffn), true)?;
        let h = self.b.op(&format!("{layer}.gelu"), Unary::Gelu, &[h])?;
        self.linear(&format!("{layer}.fc2"), h, (ffn, d), true)
    }

    /// `x + f(layer_norm(x))`, the norm's weights under `norm`.
    pub fn residual(
        &mut self,
        norm: &str,
        x: OutletId,
        f: impl FnOnce(&mut Self, OutletId) -> Result<OutletId>,
    ) -> Result<OutletId> {
        let h = self.layer_norm(norm, x)?;
        let y = f(self, h)?;
        self.b.op(&format!("{norm}.residual"), Binary::Add, &[x, y])
    }

    /// Multi-head self-attention `attn` (`q_proj`, `k_proj` without bias,
    /// `v_proj`, `out_proj`) over `x [B, T, d]`.
    pub fn self_attention(
        &mut self,
        attn: &str,
        x: OutletId,
        heads: usize,
        kind: SelfAttention<'_>,
    ) -> Result<OutletId> {
        let d = self.d;
        let q = self.linear(&format!("{attn}.q_proj"), x, (d, d), true)?;
        let k = self.linear(&format!("{attn}.k_proj"), x, (d, d), false)?;
        let v = self.linear(&format!("{attn}.v_proj"), x, (d, d), true)?;
        let a = match kind {
            SelfAttention::Whole => {
                let q = self.split(&format!("{attn}.q"), q, heads)?;
                let k = self.split(&format!("{attn}.k"), k, heads)?;
                let v = self.split(&format!("{attn}.v"), v, heads)?;
                let name = format!("{attn}.attention");
                let a = self.b.op(&name, Attention { scale: None }, &[q, k, v])?;
                self.merge(&name, a)?
            }
            SelfAttention::Masked(mask) => {
                let q = self.split(&format!("{attn}.q"), q, heads)?;
                let k = self.split(&format!("{attn}.k"), k, heads)?;
                let v = self.split(&format!("{attn}.v"), v, heads)?;
                let name = format!("{attn}.attention");
                let a = self
                    .b
                    .op(&name, Attention { scale: None }, &[q, k, v, mask])?;
                self.merge(&name, a)?
            }
            SelfAttention::Chunked(c, layer) => {
                let op = ChunkedAttention {
                    heads,
                    chunk: c.chunk,
                    left: c.left,
                    right: c.right_of(layer),
                };
                self.b.op(&format!("{attn}.attention"), op, &[q, k, v])?
            }
            SelfAttention::Copies(c) => {
                let op = CopiesAttention {
                    heads,
                    chunk: c.chunk,
                    left: c.left,
                    right: c.right,
                };
                self.b.op(&format!("{attn}.attention"), op, &[q, k, v])?
            }
            SelfAttention::Cached(cache, layer) => {
                let op = CachedSelfAttention {
                    layer,
                    heads,
                    cache: cache.clone(),
                };
                self.b.op(&format!("{attn}.attention"), op, &[q, k, v])?
            }
        };
        self.linear(&format!("{attn}.out_proj"), a, (d, d), true)
    }

    /// The decoder's attention over its window (`encoder_attn`): only the
    /// query and output projections run per token; the window's keys and
    /// values are in `cache`.
    pub fn cross_attention(
        &mut self,
        attn: &str,
        x: OutletId,
        heads: usize,
        cache: &KvCache,
        layer: usize,
    ) -> Result<OutletId> {
        let d = self.d;
        let q = self.linear(&format!("{attn}.q_proj"), x, (d, d), true)?;
        let op = CrossAttention {
            layer,
            heads,
            cache: cache.clone(),
        };
        let a = self.b.op(&format!("{attn}.attention"), op, &[q])?;
        self.linear(&format!("{attn}.out_proj"), a, (d, d), true)
    }

    /// `[B, T, d]` to `[B, heads, T, d / heads]`.
    fn split(&mut self, name: &str, x: OutletId, heads: usize) -> Result<OutletId> {
        let dh = (self.d / heads) as i64;
        let r = self.b.op(
            name,
            Reshape {
                shape: vec![0, 0, heads as i64, dh],
            },
            &[x],
        )?;
        self.b.op(
            &format!("{name}.heads"),
            Permute {
                axes: vec![0, 2, 1, 3],
            },
            &[r],
        )
    }

    /// `[B, heads, T, dh]` back to `[B, T, d]`.
    fn merge(&mut self, name: &str, x: OutletId) -> Result<OutletId> {
        let t = self.b.op(
            &format!("{name}.t"),
            Permute {
                axes: vec![0, 2, 1, 3],
            },
            &[x],
        )?;
        let shape = vec![0, 0, self.d as i64];
        self.b.op(&format!("{name}.merge"), Reshape { shape }, &[t])
    }
}
