//! One window of a batch seen as the only one, so that the one-window
//! steps (language probabilities, fallback, alignment) run over any window
//! of a batch encoded with others.

use super::Network;
use crate::models::whisper::backend::forward_backend;
use crate::models::whisper::{AlignmentSource, WhisperBackend, WhisperError};
use crate::Result;

/// A backend whose encoded window 0 is window `window` of `inner`: the
/// one-window decoding steps (which read window 0) run over any window of
/// a batch.
/// Runs `f` over `network` seen through its encoded window `window`, as
/// the same variant (word timestamps keep their alignment source).
pub(crate) fn on_window<T>(
    network: &mut Network<'_>,
    window: usize,
    f: impl FnOnce(&mut Network<'_>) -> Result<T>,
) -> Result<T> {
    match network {
        Network::Plain(b) => f(&mut Network::Plain(&mut OnWindow::new(&mut **b, window))),
        Network::Aligned(b) => f(&mut Network::Aligned(&mut OnWindow::new(&mut **b, window))),
    }
}

pub(crate) struct OnWindow<'b, B: ?Sized> {
    inner: &'b mut B,
    window: usize,
}

impl<'b, B: ?Sized> OnWindow<'b, B> {
    pub(crate) fn new(inner: &'b mut B, window: usize) -> OnWindow<'b, B> {
        OnWindow { inner, window }
    }
}

impl<B: WhisperBackend + ?Sized> WhisperBackend for OnWindow<'_, B> {
    forward_backend!(inner);

    /// Encoding would replace the batch this view reads.
    fn encode(&mut self, _windows: &[&[f32]]) -> Result<()> {
        Err(WhisperError::Option {
            option: "encode",
            reason: "a view of one encoded window cannot encode".to_string(),
        }
        .into())
    }

    fn start(&mut self, windows: &[usize]) -> Result<()> {
        let shifted: Vec<usize> = windows.iter().map(|&w| w + self.window).collect();
        self.inner.start(&shifted)
    }

    fn feed_choose(
        &mut self,
        tokens: &[u32],
        rules: &[crate::ops::top_tokens::RowRules],
        cum: &[f32],
        masks: &crate::ops::Tensor,
        k: usize,
    ) -> Result<Option<crate::models::whisper::Chosen>> {
        self.inner.feed_choose(tokens, rules, cum, masks, k)
    }
}

impl<B: AlignmentSource + ?Sized> AlignmentSource for OnWindow<'_, B> {
    fn cross_attention(
        &mut self,
        window: usize,
        tokens: &[u32],
        heads: &[(usize, usize)],
    ) -> Result<Vec<f32>> {
        self.inner
            .cross_attention(window + self.window, tokens, heads)
    }
}
