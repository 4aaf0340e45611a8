//! Silero VAD v6 (16 kHz), written with the graph builder from the weights
//! that `scripts/fetch_silero.sh` extracts from the package's ONNX model
//! (names as in the package's tinygrad definition).
//!
//! The official chunk protocol: 512-sample chunks, each model call fed the
//! 64 samples before the chunk (zeros at the start) and the chunk, 576 in
//! all. Per call: reflect-pad 64 samples on the right, STFT as a stride-128
//! convolution with 258 basis rows (real and imaginary halves), magnitude,
//! four 3-tap convolutions with ReLU down to one frame, one LSTM cell step
//! (state carried from call to call), ReLU, a 1x1 convolution and a sigmoid.
//!
//! The whole-utterance graph does exactly that for every chunk at once:
//! `audio [S]` -> `Unfold` (576-sample windows every 512, 64 zeros before)
//! -> the per-window network batched over the chunk axis -> `Lstm` over
//! the chunk axis -> `probs [N]`, `N = floor(S / 512)`. Everything before the
//! LSTM is frame-local along the chunk axis, so the pulsifier streams it with
//! a 512-sample pulse: a Delay keeps the 64-sample context, the LSTM state
//! lives in a `PulsedLstm`. Callers zero-pad a trailing partial chunk, as the
//! official wrapper does.

use std::path::{Path, PathBuf};

use crate::graph::{Graph, GraphBuilder, OutletId};
use crate::ops::conv::{Conv1d, ConvLayout};
use crate::ops::lstm::Lstm;
use crate::ops::matmul::Linear;
use crate::ops::pad::{Pad, PadMode};
use crate::ops::shape::{Slice, Squeeze, Unsqueeze};
use crate::ops::{Binary, DType, Dim, Tensor, TypedFact, Unary};
use crate::pulse::Unfold;
use crate::weights::Weights;
use crate::{Error, Result};

/// Sample rate the 16 kHz network runs at.
pub const SAMPLE_RATE: u32 = 16_000;
/// New samples per model call.
pub const CHUNK: usize = 512;
/// Past samples fed in front of each chunk.
pub const CONTEXT: usize = 64;
/// LSTM state size.
pub const HIDDEN: usize = 128;
const N_FFT: usize = 256;
const HOP: usize = 128;
const BINS: usize = N_FFT / 2 + 1;

/// Where `scripts/fetch_silero.sh` puts the weights, relative to the crate.
pub const DEFAULT_WEIGHTS: &str = "third_party/silero/silero_vad_16k_onnx.safetensors";

/// The default weights file: `$PULSED_SILERO_WEIGHTS`; else the one
/// `pulsed fetch silero-vad` puts in the model cache; else
/// [`DEFAULT_WEIGHTS`] under the current directory or the crate's root
/// (where the reference scripts' fetch puts it); else the model cache's
/// path, where fetching puts it.
pub fn default_weights_path() -> PathBuf {
    if let Some(p) = std::env::var_os("PULSED_SILERO_WEIGHTS") {
        return PathBuf::from(p);
    }
    use crate::models::fetch::{models_dir, SILERO, SILERO_FILE};
    let cached = models_dir().join(SILERO).join(SILERO_FILE);
    let here = PathBuf::from(DEFAULT_WEIGHTS);
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_WEIGHTS);
    if let Some(p) = [&cached, &here, &built].into_iter().find(|p| p.is_file()) {
        return p.clone();
    }
    cached
}

/// Loads the weights, saying how to get them when the file is missing.
pub fn load_weights(path: &Path) -> Result<Weights> {
    if !path.exists() {
        return Err(Error::Other(format!(
            "Silero VAD weights not found at {}: run `pulsed fetch silero-vad` (needs network access)",
            path.display()
        )));
    }
    Weights::load(path)
}

/// Builds the whole-utterance graph: input `audio [S]` f32 at 16 kHz
/// (a whole number of chunks); output `probs [floor(S/512)]`, then the LSTM
/// state after the last chunk, `h [128]` and `c [128]`.
pub fn build(w: &Weights) -> Result<Graph> {
    let mut b = GraphBuilder::new();
    let audio = b.input("audio", TypedFact::new(DType::F32, [Dim::s()]))?;
    let mut m = Builder { b: &mut b, w };
    let windows = m.b.op(
        "windows",
        Unfold {
            size: CHUNK + CONTEXT,
            step: CHUNK,
            pad_before: CONTEXT,
        },
        &[audio],
    )?;
    let mag = m.stft(windows)?;
    let feats = m.encoder(mag)?;
    let (probs, h, c) = m.decoder(feats)?;
    b.output("probs", probs);
    b.output("h", h);
    b.output("c", c);
    b.build()
}

struct Builder<'a, 'w> {
    b: &'a mut GraphBuilder,
    w: &'w Weights,
}

impl Builder<'_, '_> {
    fn weight(&mut self, name: &str, shape: &[usize]) -> Result<OutletId> {
        let t: Tensor = self.w.f32(name, shape)?;
        self.b.constant(name, t)
    }

    /// `[N, 576]` windows -> STFT magnitudes `[N, 129, 4]`.
    fn stft(&mut self, windows: OutletId) -> Result<OutletId> {
        let pad = Pad {
            pads: vec![(0, 0), (0, CONTEXT)],
            mode: PadMode::Reflect,
        };
        let x = self.b.op("stft.pad", pad, &[windows])?;
        let x = self.b.op("stft.unsqueeze", Unsqueeze { axis: 1 }, &[x])?;
        let basis = self.weight("stft_conv.weight", &[2 * BINS, 1, N_FFT])?;
        let conv = Conv1d {
            stride: HOP,
            dilation: 1,
            pad: (0, 0),
            groups: 1,
            layout: ConvLayout::ChannelsFirst,
        };
        let spec = self.b.op("stft.conv", conv, &[x, basis])?;
        let re = self.b.op(
            "stft.real",
            Slice {
                axis: 1,
                start: 0,
                end: Some(BINS as i64),
            },
            &[spec],
        )?;
        let im = self.b.op(
            "stft.imag",
            Slice {
                axis: 1,
                start: BINS as i64,
                end: Some(2 * BINS as i64),
            },
            &[spec],
        )?;
        let re2 = self.b.op("stft.real2", Unary::Square, &[re])?;
        let im2 = self.b.op("stft.imag2", Unary::Square, &[im])?;
        let pow = self.b.op("stft.power", Binary::Add, &[re2, im2])?;
        self.b.op("stft.magnitude", Unary::Sqrt, &[pow])
    }

    /// Four 3-tap convolutions with ReLU: `[N, 129, 4]` -> `[N, 128]`.
    fn encoder(&mut self, mut x: OutletId) -> Result<OutletId> {
        let layers = [(BINS, 128, 1), (128, 64, 2), (64, 64, 2), (64, 128, 1)];
        for (k, &(cin, cout, stride)) in layers.iter().enumerate() {
            let name = format!("conv{}", k + 1);
            let w = self.weight(&format!("{name}.weight"), &[cout, cin, 3])?;
            let bias = self.weight(&format!("{name}.bias"), &[cout])?;
            let conv = Conv1d {
                stride,
                dilation: 1,
                pad: (1, 1),
                groups: 1,
                layout: ConvLayout::ChannelsFirst,
            };
            let y = self.b.op(&name, conv, &[x, w, bias])?;
            x = self.b.op(&format!("{name}.relu"), Unary::Relu, &[y])?;
        }
        self.b.op("encoder.squeeze", Squeeze { axis: 2 }, &[x])
    }

    /// LSTM over the chunks, ReLU, 1x1 projection, sigmoid.
    fn decoder(&mut self, x: OutletId) -> Result<(OutletId, OutletId, OutletId)> {
        let h4 = 4 * HIDDEN;
        let ins = [
            x,
            self.weight("lstm_cell.weight_ih", &[h4, HIDDEN])?,
            self.weight("lstm_cell.weight_hh", &[h4, HIDDEN])?,
            self.weight("lstm_cell.bias_ih", &[h4])?,
            self.weight("lstm_cell.bias_hh", &[h4])?,
            self.b
                .constant("lstm.h0", Tensor::zeros(DType::F32, &[HIDDEN]))?,
            self.b
                .constant("lstm.c0", Tensor::zeros(DType::F32, &[HIDDEN]))?,
        ];
        let outs = self.b.op_multi("lstm", Lstm { hidden: HIDDEN }, &ins)?;
        let y = self.b.op("decoder.relu", Unary::Relu, &[outs[0]])?;
        let w = self
            .w
            .f32("final_conv.weight", &[1, HIDDEN, 1])?
            .reshape(&[1, HIDDEN])
            .map_err(|e| Error::Other(e.to_string()))?;
        let w = self.b.constant("final_conv.weight", w.contiguous())?;
        let bias = self.weight("final_conv.bias", &[1])?;
        let logit = self.b.op("final_conv", Linear, &[y, w, bias])?;
        let p = self.b.op("sigmoid", Unary::Sigmoid, &[logit])?;
        let probs = self.b.op("probs", Squeeze { axis: 1 }, &[p])?;
        Ok((probs, outs[1], outs[2]))
    }
}
