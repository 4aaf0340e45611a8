//! A CTC head over a chunked checkpoint's streamed encoder (issue 20's
//! "CTC head for instant partials"). The head turns each encoder frame into
//! character log-probs as soon as the streamed encoder gives the frame, so
//! text follows the speech at the encoder's own latency, with no decoder
//! run; the Whisper decoder still gives the final line where it is wanted.
//!
//! The folder holds `ctc_head.safetensors` (`ctc.out` `[vocab, d]`, and
//! optionally `ctc.hidden` `[h, d]` before it with a GELU between) and
//! `ctc_tokens.txt` (the character list, as the shipped model's
//! `tokens.txt`), beside the checkpoint's own files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::encoder_stream::EncoderStream;
use super::graphs::HOP;
use super::layers::Net;
use super::WhisperModel;
use crate::decode::{BeamSearch, FrameTiming, GreedyDecoder, LmScorer, Tokens, Transcript};
use crate::engine::Engine;
use crate::graph::{Graph, GraphBuilder, Runner};
use crate::ops::softmax::LogSoftmax;
use crate::ops::{DType, Dim, Tensor, TypedFact, Unary};
use crate::weights::Weights;
use crate::{Error, Result};

/// The head's weights in a checkpoint folder.
pub const HEAD_FILE: &str = "ctc_head.safetensors";
/// The head's characters in a checkpoint folder.
pub const TOKENS_FILE: &str = "ctc_tokens.txt";

/// Whisper's encoder frame: 20 ms.
pub const FRAME_S: f64 = 2.0 * HOP as f64 / 16_000.0;

/// A loaded head: its graph (`frames [S, d]` to `log_probs [S, vocab]`) and
/// its characters.
#[derive(Clone)]
pub struct CtcHead {
    graph: Arc<Graph>,
    tokens: Tokens,
}

impl CtcHead {
    /// Whether the folder `dir` has a head.
    pub fn present(dir: &Path) -> bool {
        dir.join(HEAD_FILE).is_file()
    }

    /// The head of the checkpoint in `dir`, whose encoder gives `d` values a
    /// frame.
    pub fn open(dir: &Path, d: usize) -> Result<CtcHead> {
        let file = |name: &str| -> PathBuf { dir.join(name) };
        let tokens = Tokens::load(&file(TOKENS_FILE)).map_err(|e| Error::File {
            path: file(TOKENS_FILE),
            reason: e.to_string(),
        })?;
        let w = Weights::load(file(HEAD_FILE))?;
        let graph = head_graph(&w, d, tokens.len()).map_err(|e| Error::File {
            path: file(HEAD_FILE),
            reason: e.to_string(),
        })?;
        Ok(CtcHead {
            graph: Arc::new(graph),
            tokens,
        })
    }

    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    pub fn graph(&self) -> &Arc<Graph> {
        &self.graph
    }
}

fn head_graph(w: &Weights, d: usize, vocab: usize) -> Result<Graph> {
    let mut b = GraphBuilder::new();
    let mut x = b.input(
        "frames",
        TypedFact::new(DType::F32, [Dim::s(), Dim::n(d as i64)]),
    )?;
    let mut n = Net { b: &mut b, w, d };
    let mut fan_in = d;
    if let Some(h) = w.tensor("ctc.hidden.weight") {
        let hidden = h.shape().first().copied().unwrap_or(0);
        x = n.linear("ctc.hidden", x, (d, hidden), true)?;
        x = n.b.op("ctc.hidden.gelu", Unary::Gelu, &[x])?;
        fan_in = hidden;
    }
    let logits = n.linear("ctc.out", x, (fan_in, vocab), true)?;
    let logp =
        n.b.op("ctc.log_probs", LogSoftmax { axis: -1 }, &[logits])?;
    b.output("log_probs", logp);
    b.build()
}

/// How the head's log-probs become text.
#[derive(Clone)]
pub enum CtcDecoding {
    /// The best character a frame.
    Greedy,
    /// Prefix beam search of this width, with a word language model when
    /// given.
    Beam {
        width: usize,
        lm: Option<Arc<LmScorer>>,
    },
}

enum Search {
    Greedy(GreedyDecoder),
    Beam(Box<BeamSearch>),
}

/// A recording through the streamed encoder and the head, text as the
/// frames come. A stream holds one window (a little under 30 s): longer
/// audio is cut into windows, each streamed from a fresh start (the
/// encoder's positions count from a stream's start), and the text goes on
/// across the cut.
pub struct CtcStream {
    encoder: EncoderStream,
    head: Runner,
    tokens: Tokens,
    decoding: CtcDecoding,
    /// The transcripts of the windows already ended.
    done: Vec<Transcript>,
    search: Search,
    /// Encoder frames of this window through the head so far.
    frames: usize,
    /// Seconds before this window.
    offset_s: f64,
    /// Samples a window holds (the streamed encoder's capacity).
    window_samples: usize,
}

impl CtcStream {
    /// A stream over `model`'s chunked encoder (on `engine`) and `head`.
    pub fn new(
        model: &WhisperModel,
        head: &CtcHead,
        decoding: CtcDecoding,
        engine: &Engine,
    ) -> Result<CtcStream> {
        let encoder = EncoderStream::frames_only(model, model.config.padding(), engine)?;
        let window_samples = encoder.capacity();
        let tokens = head.tokens.clone();
        let search = new_search(&tokens, &decoding, 0.0)?;
        Ok(CtcStream {
            encoder,
            head: Runner::new(head.graph.clone())?,
            tokens,
            decoding,
            done: Vec::new(),
            search,
            frames: 0,
            offset_s: 0.0,
            window_samples,
        })
    }

    /// Takes more samples (16 kHz) and reads the frames they complete.
    pub fn push(&mut self, mut samples: &[f32]) -> Result<()> {
        while !samples.is_empty() {
            let room = self.window_samples - self.encoder.samples();
            if room == 0 {
                self.end_window()?;
                continue;
            }
            let (now, later) = samples.split_at(samples.len().min(room));
            self.encoder.push(now)?;
            self.read_frames()?;
            samples = later;
        }
        Ok(())
    }

    /// The text so far (the best hypothesis for beam search).
    pub fn partial(&self) -> Result<Transcript> {
        let current = self.current()?;
        Ok(join(self.done.iter().chain(std::iter::once(&current))))
    }

    /// The recording ended: its last frames read, the whole transcript.
    pub fn finish(mut self) -> Result<Transcript> {
        self.cut()?;
        Ok(join(self.done.iter()))
    }

    /// Ends the window in progress here (an end of speech): its last
    /// frames read from padding, its text kept, and the audio after it
    /// streamed in a new window from a fresh start.
    pub fn cut(&mut self) -> Result<()> {
        if self.encoder.samples() > 0 {
            self.end_window()?;
        }
        Ok(())
    }

    /// Encoder frames of the window in progress so far.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// The last frame of this window that gave a character (not a blank).
    pub fn last_token_frame(&self) -> Option<usize> {
        match &self.search {
            Search::Greedy(g) => g.spans().last().map(|s| s.last_frame),
            Search::Beam(b) => b.best().and_then(|h| h.spans.last().map(|s| s.last_frame)),
        }
    }

    /// This window's text so far (the best hypothesis for beam search).
    fn current(&self) -> Result<Transcript> {
        let t = match &self.search {
            Search::Greedy(g) => g.partial(),
            Search::Beam(b) => match b.best() {
                Some(h) => h.transcript(&self.tokens, timing(self.offset_s), b.frames())?,
                None => Transcript::default(),
            },
        };
        Ok(t)
    }

    fn read_frames(&mut self) -> Result<()> {
        let n = self.encoder.frames();
        if n == self.frames {
            return Ok(());
        }
        let rows = self.encoder.frame_rows(self.frames, n);
        let d = rows.len() / (n - self.frames);
        let x = Tensor::from_vec(vec![n - self.frames, d], rows.to_vec())?;
        self.head.step(&[&x])?;
        let logp = self.head.output(0).as_slice::<f32>()?;
        match &mut self.search {
            Search::Greedy(g) => g.push_log_probs(self.frames, logp),
            Search::Beam(b) => b.push(logp),
        }?;
        self.frames = n;
        Ok(())
    }

    /// A full window: its text kept, the encoder and the search afresh.
    fn end_window(&mut self) -> Result<()> {
        self.encoder.finish()?;
        self.read_frames()?;
        let t = self.current()?;
        self.done.push(t);
        self.offset_s += self.encoder.samples() as f64 / 16_000.0;
        self.encoder.reset();
        self.frames = 0;
        self.search = new_search(&self.tokens, &self.decoding, self.offset_s)?;
        Ok(())
    }
}

/// Frame times of a window starting `offset_s` into the recording.
fn timing(offset_s: f64) -> FrameTiming {
    FrameTiming::new(FRAME_S).with_offset(offset_s)
}

fn new_search(tokens: &Tokens, decoding: &CtcDecoding, offset_s: f64) -> Result<Search> {
    let s = match decoding {
        CtcDecoding::Greedy => {
            Search::Greedy(GreedyDecoder::new(tokens.clone(), timing(offset_s))?)
        }
        CtcDecoding::Beam { width, lm } => Search::Beam(Box::new(BeamSearch::new(
            tokens.len(),
            tokens.blank(),
            *width,
            lm.clone(),
        )?)),
    };
    Ok(s)
}

/// Transcripts one after another as one.
fn join<'a>(parts: impl Iterator<Item = &'a Transcript>) -> Transcript {
    let mut all = Transcript::default();
    for t in parts {
        all.words.extend(t.words.iter().cloned());
        all.duration_s += t.duration_s;
    }
    all.text = all
        .words
        .iter()
        .map(|w| w.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    all
}

/// The whole recording `samples` (16 kHz) through a fresh [`CtcStream`].
pub fn transcribe(
    model: &WhisperModel,
    head: &CtcHead,
    decoding: CtcDecoding,
    engine: &Engine,
    samples: &[f32],
) -> Result<Transcript> {
    let mut s = CtcStream::new(model, head, decoding, engine)?;
    s.push(samples)?;
    s.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(named: &[(&str, Vec<usize>, Vec<f32>)]) -> Weights {
        Weights::from_tensors(
            "head",
            named.iter().map(|(n, s, v)| {
                (
                    n.to_string(),
                    Tensor::from_vec(s.clone(), v.clone()).unwrap(),
                )
            }),
        )
    }

    fn run(g: Graph, x: Tensor) -> Vec<f32> {
        let mut r = Runner::new(g).unwrap();
        r.step(&[&x]).unwrap();
        r.output(0).to_f32_vec()
    }

    #[test]
    fn a_linear_head_gives_each_frame_log_softmax_of_its_logits() {
        // d 2, vocab 3
        let w = weights(&[
            (
                "ctc.out.weight",
                vec![3, 2],
                vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0],
            ),
            ("ctc.out.bias", vec![3], vec![0.0, 0.5, -1.0]),
        ]);
        let x = Tensor::from_vec(vec![2, 2], vec![1.0, 2.0, -1.0, 0.0]).unwrap();
        let got = run(head_graph(&w, 2, 3).unwrap(), x);
        for (row, logits) in got.chunks(3).zip([[1.0f32, 2.5, 2.0], [-1.0, 0.5, -2.0]]) {
            let lse = logits.iter().map(|v| v.exp()).sum::<f32>().ln();
            for (g, l) in row.iter().zip(logits) {
                assert!((g - (l - lse)).abs() < 1e-5, "{row:?} {logits:?}");
            }
        }
    }

    #[test]
    fn a_hidden_layer_is_read_from_the_file() {
        let w = weights(&[
            ("ctc.hidden.weight", vec![4, 2], vec![0.5; 8]),
            ("ctc.hidden.bias", vec![4], vec![0.0; 4]),
            ("ctc.out.weight", vec![3, 4], vec![0.1; 12]),
            ("ctc.out.bias", vec![3], vec![0.0; 3]),
        ]);
        let x = Tensor::from_vec(vec![5, 2], vec![1.0; 10]).unwrap();
        let got = run(head_graph(&w, 2, 3).unwrap(), x);
        assert_eq!(got.len(), 5 * 3);
        // equal logits: every token ln(1/3)
        assert!(got.iter().all(|v| (v + 3f32.ln()).abs() < 1e-5), "{got:?}");
    }

    #[test]
    fn a_head_for_another_vocabulary_is_refused() {
        let w = weights(&[
            ("ctc.out.weight", vec![3, 2], vec![0.0; 6]),
            ("ctc.out.bias", vec![3], vec![0.0; 3]),
        ]);
        let e = head_graph(&w, 2, 29).unwrap_err().to_string();
        assert!(e.contains("ctc.out.weight"), "{e}");
        let e = head_graph(&w, 4, 3).unwrap_err().to_string();
        assert!(e.contains("ctc.out.weight"), "{e}");
    }
}
