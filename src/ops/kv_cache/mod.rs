//! A text decoder's key/value cache and the two attentions that read it.
//!
//! A Whisper-style decoder is stepped a few tokens at a time: its
//! self-attention keys and values grow by one row per token, and its
//! cross-attention keys and values are computed once per encoder window.
//! Both live in one [`KvCache`] that the decoder's step graphs share: the
//! prompt is fed through a graph over `[1, S]` tokens and the following
//! tokens through one over `[S, 1]` (facts have one symbol, so batch and
//! length cannot both be free in one graph), and beam search reorders the
//! sequences between steps. The cache is therefore a handle the ops hold,
//! not per-runner op state.
//!
//! Layouts are row-major `[rows, heads * head_dim]` per sequence, as the
//! projecting Linears write them; a head is a column block read through
//! strides, so nothing is transposed.
//!
//! The filled length is advanced by whoever runs the graph
//! ([`KvCache::advance`], after every layer wrote its rows), not by the
//! ops: every layer of a step writes at the same position, wherever it
//! runs. A [`CacheMirror`] (a GPU's copy of the cache, whose ops run there)
//! is told of every change made from outside the graph.

mod attention;
mod cache;

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use super::{OpError, OpResult, Tensor};

pub use attention::{CachedSelfAttention, CrossAttention};
pub use cache::KvCache;

/// What can go wrong when driving the cache from outside the graph.
fn param(msg: String) -> OpError {
    OpError::Param(msg)
}

/// A copy of a cache's keys and values kept elsewhere (a GPU's memory, for
/// the GPU forms of the ops). The host cache keeps the bookkeeping and
/// tells the mirror of each change; each call sees the state after it.
pub trait CacheMirror: Debug + Send + Sync {
    /// Sequences start, reading these encoder windows; nothing filled.
    fn start(&self, windows: &[usize]) -> OpResult<()>;
    /// New sequence `b` continues old sequence `src[b]`, whose first `len`
    /// positions are filled.
    fn reorder(&self, src: &[usize], windows: &[usize], len: usize) -> OpResult<()>;
    /// Layer `layer`'s cross-attention keys and values, `[windows, frames,
    /// width]` f32 contiguous.
    fn set_cross(&self, layer: usize, k: &Tensor, v: &Tensor) -> OpResult<()>;
    /// Layer `layer`'s cross-attention keys and values of window
    /// `window`'s frames `from..` (`[1, rows, width]` f32 each); the rest
    /// kept.
    fn set_cross_rows(
        &self,
        layer: usize,
        window: usize,
        from: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> OpResult<()> {
        let _ = (layer, window, from, k, v);
        Err(param("this cache's copy takes whole windows".into()))
    }
    /// Layer `layer`'s cross-attention keys and values of window `window`
    /// alone (`[1, frames, width]` f32 each); the other windows kept.
    fn set_window(&self, layer: usize, window: usize, k: &Tensor, v: &Tensor) -> OpResult<()> {
        let _ = (layer, window, k, v);
        Err(param("this cache's copy takes its windows together".into()))
    }
    /// Each sequence's positions filled from now on (`lens[s]`).
    fn set_lens(&self, lens: &[usize]) -> OpResult<()>;
    /// The encoder window each sequence reads from now on.
    fn set_windows(&self, windows: &[usize]) -> OpResult<()> {
        let _ = windows;
        Err(param(
            "this cache's copy starts its sequences together".into(),
        ))
    }
    /// The sequence each row of the next steps feeds (`None`: row `r`
    /// feeds sequence `r`).
    fn set_rows(&self, rows: Option<&[usize]>) -> OpResult<()> {
        match rows {
            None => Ok(()),
            Some(_) => Err(param(
                "this cache's copy feeds its sequences in order".into(),
            )),
        }
    }
    /// Whether the ops over this copy can keep cross-attention scores
    /// ([`CacheMirror::record`]).
    fn can_record(&self) -> bool {
        false
    }
    /// Keeps the cross-attention scores of `heads` (`(layer, head)`,
    /// sequence 0) for every row the next steps feed (`None`: stop).
    fn record(&self, heads: Option<&[(usize, usize)]>) -> OpResult<()> {
        let _ = heads;
        Err(param("this cache's copy keeps no attention".into()))
    }
    /// The scores the last step kept: for each of `heads` recorded heads,
    /// `[rows, frames]` (the step's query rows in order, `[fed, n]`),
    /// scaled, before the softmax.
    fn recorded(&self, heads: usize, rows: usize) -> OpResult<Vec<Vec<f32>>> {
        let _ = (heads, rows);
        Ok(Vec::new())
    }
    /// The mirror as its concrete type, for the ops that read it.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

#[cfg(test)]
mod tests;
