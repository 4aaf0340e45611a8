//! What Whisper decoding needs from whatever runs the network: log-mel
//! features, the encoder over 30 s windows, and a text decoder fed token by
//! token whose self-attention cache lives in the engine.
//!
//! Decoding (prompts, logit rules, greedy and beam search, fallback, long
//! audio) is written against this trait only, so it runs the same over the
//! CPU graphs, the GPU graphs and a test double.

use crate::models::whisper::decode::WindowPadding;
use crate::ops::top_tokens::RowRules;
use crate::Result;

/// The next-token candidates a backend chose itself
/// ([`WhisperBackend::feed_choose`]), `stride` a row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chosen {
    pub stride: usize,
    /// `[rows, stride]`: ids best first, and their log-probabilities plus
    /// the row's running score.
    pub ids: Vec<u32>,
    pub scores: Vec<f32>,
    /// Per row: the no-speech probability where its rules asked for it.
    pub no_speech: Vec<f32>,
}

/// A Whisper network, ready to encode windows and decode text over them.
pub trait WhisperBackend {
    /// Mel bins of the features (80, or 128 for large-v3).
    fn n_mels(&self) -> usize;

    /// Feature frames in one encoder window (3000: 30 s at 10 ms).
    fn window_frames(&self) -> usize;

    /// Logits per position (the vocabulary size).
    fn vocab_size(&self) -> usize;

    /// Most text positions the decoder has (448): prompt plus output.
    fn max_text_positions(&self) -> usize;

    /// What fills an encoder window after a recording's end, unless the
    /// decoding options say otherwise: what the checkpoint was trained on.
    fn window_padding(&self) -> WindowPadding {
        WindowPadding::default()
    }

    /// Log-mel features of a whole recording as the reference computes them
    /// (160 zero samples appended, log10 clamped to the maximum minus 8 over
    /// the whole recording, then `(x + 4) / 4`): `[n_mels, frames]`
    /// row-major, with `frames = samples / 160 + 1`.
    fn log_mel(&mut self, audio: &[f32]) -> Result<Vec<f32>>;

    /// Runs the encoder over `windows` (each `[n_mels, window_frames]`
    /// row-major, already padded with zeros or trimmed) and computes every
    /// decoder layer's cross-attention keys and values for them. Replaces
    /// the windows of any earlier call.
    fn encode(&mut self, windows: &[&[f32]]) -> Result<()>;

    /// As [`WhisperBackend::encode`], from encoder frames computed elsewhere
    /// (a streamed encoder's): each entry `[1500, d]` row-major, of which
    /// only the decoder's cross-attention keys and values are computed. A
    /// backend that encodes whole windows only says so
    /// ([`super::WhisperError::NoFrameInput`]).
    fn encode_frames(&mut self, frames: &[&[f32]]) -> Result<()> {
        let _ = frames;
        Err(crate::Error::Whisper(super::WhisperError::NoFrameInput))
    }

    /// Replaces encoded window 0's frames `from..from + n` (rows of the
    /// window [`WhisperBackend::encode_frames`] took) with `rows` (`[n, d]`
    /// row-major): a streamed encoder's new frames, at their cost alone.
    /// `Ok(false)`, having changed nothing, where this backend takes whole
    /// windows only.
    fn encode_frame_rows(&mut self, from: usize, rows: &[f32]) -> Result<bool> {
        let _ = (from, rows);
        Ok(false)
    }

    /// Keeps the first `len` text positions of every sequence and forgets
    /// the rest, so that decoding continues from a shorter prefix without
    /// feeding it again. `Ok(false)` where this backend cannot: the caller
    /// starts again and feeds the prefix.
    fn rewind(&mut self, len: usize) -> Result<bool> {
        let _ = len;
        Ok(false)
    }

    /// Makes room for `sequences` decoded at once (the rows of a batch of
    /// beams), before [`WhisperBackend::start`]: a backend whose cache has a
    /// fixed size may make a new one, losing what the old one held.
    fn reserve(&mut self, sequences: usize) -> Result<()> {
        let _ = sequences;
        Ok(())
    }

    /// Starts decoding one sequence per entry of `windows`, sequence `b`
    /// reading encoded window `windows[b]`, with empty self-attention
    /// caches.
    fn start(&mut self, windows: &[usize]) -> Result<()>;

    /// Feeds `n` new tokens to every sequence (`tokens` is `[batch, n]`
    /// row-major) and writes into `logits` (resized to `[batch,
    /// positions.len(), vocab]`) the logits after each listed position among
    /// the `n` new tokens (`n - 1` for the next token; the start-of-transcript
    /// position for the no-speech probability).
    fn feed(
        &mut self,
        tokens: &[u32],
        n: usize,
        positions: &[usize],
        logits: &mut Vec<f32>,
    ) -> Result<()>;

    /// Feeds one token to every sequence and chooses each row's `k` best
    /// next tokens where the logits are (a GPU step then hands back `k`
    /// candidates a row, not the vocabulary): after `rules` (one per row,
    /// [`crate::ops::top_tokens`]) and `masks` (`[2, vocab]`: suppressed
    /// always, at the first free step), log-softmaxed, each row's `cum`
    /// added. `Ok(None)`, having fed nothing, when this backend does not
    /// choose, or not `k`: the caller feeds and chooses from the logits.
    fn feed_choose(
        &mut self,
        tokens: &[u32],
        rules: &[RowRules],
        cum: &[f32],
        masks: &crate::ops::Tensor,
        k: usize,
    ) -> Result<Option<Chosen>> {
        let _ = (tokens, rules, cum, masks, k);
        Ok(None)
    }

    /// Keeps the sequences `src` in that order: new sequence `b` continues
    /// old sequence `src[b]` (its cache and its window). The batch may grow
    /// or shrink (beam search forks and drops sequences).
    fn reorder(&mut self, src: &[usize]) -> Result<()>;

    /// The caller feeds nothing for a while (a pulse of its stream ended):
    /// a backend whose steps run with other streams' runs theirs without
    /// waiting for this one ([`crate::models::whisper::shared`]).
    fn idle(&mut self) {}
}

/// The [`WhisperBackend`] methods a wrapper passes on to the backend in its
/// field `$field` unchanged (sizes, feature extraction, and the decoder's
/// cache and steps); the wrapper writes the ones it changes (`encode`,
/// `encode_frames`, `start`, `feed_choose`) itself.
macro_rules! forward_backend {
    ($field:tt) => {
        fn n_mels(&self) -> usize {
            self.$field.n_mels()
        }
        fn window_frames(&self) -> usize {
            self.$field.window_frames()
        }
        fn vocab_size(&self) -> usize {
            self.$field.vocab_size()
        }
        fn max_text_positions(&self) -> usize {
            self.$field.max_text_positions()
        }
        fn window_padding(&self) -> $crate::models::whisper::decode::WindowPadding {
            self.$field.window_padding()
        }
        fn log_mel(&mut self, audio: &[f32]) -> $crate::Result<Vec<f32>> {
            self.$field.log_mel(audio)
        }
        fn reserve(&mut self, sequences: usize) -> $crate::Result<()> {
            self.$field.reserve(sequences)
        }
        fn feed(
            &mut self,
            tokens: &[u32],
            n: usize,
            positions: &[usize],
            logits: &mut Vec<f32>,
        ) -> $crate::Result<()> {
            self.$field.feed(tokens, n, positions, logits)
        }
        fn reorder(&mut self, src: &[usize]) -> $crate::Result<()> {
            self.$field.reorder(src)
        }
        fn idle(&mut self) {
            self.$field.idle()
        }
    };
}
pub(crate) use forward_backend;

/// Cross-attention weights for word timestamps.
pub trait AlignmentSource {
    /// Runs `tokens` (a whole prompt plus text sequence) through the decoder
    /// over encoded window `window` and returns the cross-attention weights
    /// of each `(layer, head)` in `heads`: `[heads.len(), tokens.len(),
    /// encoder_frames]` row-major, each row a softmax over the window's
    /// encoder frames (1500 for a full window).
    fn cross_attention(
        &mut self,
        window: usize,
        tokens: &[u32],
        heads: &[(usize, usize)],
    ) -> Result<Vec<f32>>;

    /// The rows of [`AlignmentSource::cross_attention`] from row `from` on:
    /// `[heads.len(), tokens.len() - from, encoder_frames]`. A backend may
    /// keep the positions before `from` from an earlier call over the same
    /// tokens and window (their self-attention then read that call's
    /// frames, as a decoder's kept cache does) and run only the rest.
    fn cross_attention_from(
        &mut self,
        window: usize,
        tokens: &[u32],
        heads: &[(usize, usize)],
        from: usize,
    ) -> Result<Vec<f32>> {
        let all = self.cross_attention(window, tokens, heads)?;
        Ok(rows_from(&all, heads.len(), tokens.len(), from))
    }

    /// Keeps (`Some`) or stops keeping (`None`) the cross-attention weights
    /// of `heads` for every position fed from now on; false, keeping
    /// nothing, where this backend's decoder steps cannot (they run where
    /// the weights are not kept: [`AlignmentSource::cross_attention`] then
    /// gives them in a pass of its own).
    fn record_attention(&mut self, heads: Option<&[(usize, usize)]>) -> bool {
        let _ = heads;
        false
    }

    /// The weights kept since the last take: per head, `[rows, frames]`
    /// for every position fed (batch 1).
    fn take_attention(&mut self) -> Vec<Vec<f32>> {
        Vec::new()
    }
}

/// Rows `from..rows` of each head's `[rows, frames]` block in `all`
/// (`heads` blocks).
pub(crate) fn rows_from(all: &[f32], heads: usize, rows: usize, from: usize) -> Vec<f32> {
    let frames = all.len() / (heads * rows).max(1);
    let from = from.min(rows);
    all.chunks(rows * frames.max(1))
        .take(heads)
        .flat_map(|h| &h[from * frames..])
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::rows_from;

    #[test]
    fn rows_from_keeps_each_heads_later_rows() {
        // 2 heads x 3 rows x 2 frames
        let all: Vec<f32> = (0..12).map(|v| v as f32).collect();
        assert_eq!(rows_from(&all, 2, 3, 1), [2., 3., 4., 5., 8., 9., 10., 11.]);
        assert_eq!(rows_from(&all, 2, 3, 0), all);
        assert!(rows_from(&all, 2, 3, 3).is_empty());
    }
}
