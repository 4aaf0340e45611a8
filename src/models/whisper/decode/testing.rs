//! A deterministic `WhisperBackend` for tests: logits come from a script
//! of the window's features and the sequence so far, features from the
//! samples themselves.

use crate::models::whisper::backend::forward_backend;
use crate::models::whisper::{AlignmentSource, WhisperBackend};
use crate::Result;

type Script = Box<dyn Fn(&[f32], &[u32]) -> Vec<f32>>;
type Attention = Box<dyn Fn(&[f32], &[u32], &[(usize, usize)]) -> Vec<f32>>;

/// A scripted network.
pub(crate) struct Scripted {
    pub vocab: usize,
    pub n_mels: usize,
    pub window_frames: usize,
    pub max_text_positions: usize,
    script: Script,
    /// Cross-attention for word timestamps (`[heads, tokens, frames]`).
    pub attention: Option<Attention>,
    /// The windows of the last `encode`.
    pub windows: Vec<Vec<f32>>,
    /// Every window encoded so far, in order.
    pub encoded_log: Vec<Vec<f32>>,
    /// The windows of each `encode` call.
    pub encode_calls: Vec<usize>,
    /// Each live sequence: its window and tokens.
    seqs: Vec<(usize, Vec<u32>)>,
    /// Every token sequence fed, as it stood after each feed.
    pub fed_log: Vec<Vec<u32>>,
    /// The sequences of each feed call.
    pub feed_rows: Vec<usize>,
    /// The padding the "checkpoint" asks for.
    pub padding: super::WindowPadding,
}

impl Scripted {
    /// A backend of `vocab` logits that answers with `script(window, sequence)`.
    pub(crate) fn new(
        vocab: usize,
        script: impl Fn(&[f32], &[u32]) -> Vec<f32> + 'static,
    ) -> Scripted {
        Scripted {
            vocab,
            n_mels: 2,
            window_frames: 3000,
            max_text_positions: 448,
            script: Box::new(script),
            attention: None,
            windows: Vec::new(),
            encoded_log: Vec::new(),
            encode_calls: Vec::new(),
            seqs: Vec::new(),
            fed_log: Vec::new(),
            feed_rows: Vec::new(),
            padding: super::WindowPadding::Silence,
        }
    }

    /// Logits with `hot` at `value` and every other entry at 0.
    pub(crate) fn peaked(vocab: usize, hot: u32, value: f32) -> Vec<f32> {
        let mut l = vec![0.0; vocab];
        l[hot as usize] = value;
        l
    }

    fn window(&self, w: usize) -> &[f32] {
        self.windows.get(w).map_or(&[], |v| v.as_slice())
    }
}

impl WhisperBackend for Scripted {
    fn n_mels(&self) -> usize {
        self.n_mels
    }

    fn window_frames(&self) -> usize {
        self.window_frames
    }

    fn vocab_size(&self) -> usize {
        self.vocab
    }

    fn max_text_positions(&self) -> usize {
        self.max_text_positions
    }

    fn window_padding(&self) -> super::WindowPadding {
        self.padding
    }

    /// Every mel row holds sample `160 * frame` (and a zero frame at the end
    /// of a recording whose length is a multiple of 160).
    fn log_mel(&mut self, audio: &[f32]) -> Result<Vec<f32>> {
        let frames = audio.len() / 160 + 1;
        let row: Vec<f32> = (0..frames)
            .map(|f| audio.get(f * 160).copied().unwrap_or(0.0))
            .collect();
        Ok((0..self.n_mels).flat_map(|_| row.iter().copied()).collect())
    }

    fn encode(&mut self, windows: &[&[f32]]) -> Result<()> {
        self.windows = windows.iter().map(|w| w.to_vec()).collect();
        self.encoded_log.extend(self.windows.iter().cloned());
        self.encode_calls.push(windows.len());
        Ok(())
    }

    fn start(&mut self, windows: &[usize]) -> Result<()> {
        self.seqs = windows.iter().map(|&w| (w, Vec::new())).collect();
        Ok(())
    }

    fn feed(
        &mut self,
        tokens: &[u32],
        n: usize,
        positions: &[usize],
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        logits.clear();
        self.feed_rows.push(self.seqs.len());
        for b in 0..self.seqs.len() {
            self.seqs[b]
                .1
                .extend_from_slice(&tokens[b * n..(b + 1) * n]);
            let (w, seq) = &self.seqs[b];
            self.fed_log.push(seq.clone());
            for &p in positions {
                let upto = seq.len() - n + p + 1;
                let l = (self.script)(self.window(*w), &seq[..upto]);
                assert_eq!(l.len(), self.vocab, "script gave a wrong-sized row");
                logits.extend(l);
            }
        }
        Ok(())
    }

    fn reorder(&mut self, src: &[usize]) -> Result<()> {
        self.seqs = src.iter().map(|&s| self.seqs[s].clone()).collect();
        Ok(())
    }
}

impl AlignmentSource for Scripted {
    fn cross_attention(
        &mut self,
        window: usize,
        tokens: &[u32],
        heads: &[(usize, usize)],
    ) -> Result<Vec<f32>> {
        let f = self.attention.as_ref().expect("no attention script");
        Ok(f(self.window(window), tokens, heads))
    }
}

/// A backend that chooses tokens itself ([`WhisperBackend::feed_choose`]),
/// on the host, over another backend's logits: decoding through it takes
/// the path a GPU's choosing step takes. Counts the steps it chose.
pub(crate) struct Choosing<'a, B>(pub &'a mut B, pub usize);

impl<B: WhisperBackend> WhisperBackend for Choosing<'_, B> {
    forward_backend!(0);

    fn encode(&mut self, windows: &[&[f32]]) -> Result<()> {
        self.0.encode(windows)
    }
    fn start(&mut self, windows: &[usize]) -> Result<()> {
        self.0.start(windows)
    }
    fn feed_choose(
        &mut self,
        tokens: &[u32],
        rules: &[crate::ops::top_tokens::RowRules],
        cum: &[f32],
        masks: &crate::ops::Tensor,
        k: usize,
    ) -> Result<Option<crate::models::whisper::Chosen>> {
        use crate::ops::top_tokens::{TopTokens, ROW_PARAMS};
        use crate::ops::{Op, Scratch, Tensor};
        let (rows, vocab) = (tokens.len(), self.vocab_size());
        let mut logits = Vec::new();
        self.0.feed(tokens, 1, &[0], &mut logits)?;
        self.1 += 1;
        // the op a choosing step ends in, on the host
        let params: Vec<i64> = rules.iter().flat_map(|r| r.encode()).collect();
        let inputs = [
            Tensor::from_vec(vec![rows, vocab], logits)?,
            Tensor::from_vec(vec![rows, ROW_PARAMS], params)?,
            Tensor::from_vec(vec![rows], cum.to_vec())?,
            masks.clone(),
        ];
        let mut outs = Vec::new();
        TopTokens { k }.eval(&inputs.each_ref(), &mut outs, &mut Scratch::default())?;
        let out = crate::models::whisper::Chosen {
            stride: k,
            ids: outs[0]
                .as_slice::<i64>()?
                .iter()
                .map(|&i| i as u32)
                .collect(),
            scores: outs[1].to_f32_vec(),
            no_speech: outs[2].to_f32_vec(),
        };
        Ok(Some(out))
    }
}

impl<B: AlignmentSource> AlignmentSource for Choosing<'_, B> {
    fn cross_attention(
        &mut self,
        window: usize,
        tokens: &[u32],
        heads: &[(usize, usize)],
    ) -> Result<Vec<f32>> {
        self.0.cross_attention(window, tokens, heads)
    }
}
