//! One stream's place in a [`super::SharedDecoder`]: a backend whose
//! decoder calls go to the shared thread. It decodes streamed frames, one
//! sequence at a time (the streaming decoder's calls); whole-window
//! encoding and beam search need a network of their own.

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::hub::{Alone, Answer, Call};
use super::Sizes;
use crate::models::whisper::decode::WindowPadding;
use crate::models::whisper::features;
use crate::models::whisper::{AlignmentSource, WhisperBackend};
use crate::{Error, Result};

/// A stream's slot of a shared decoder (see [`super::SharedDecoder`]).
pub struct DecoderSlot {
    slot: usize,
    calls: Sender<Call>,
    answers: Receiver<Result<Answer>>,
    sizes: Sizes,
    /// Attention rows kept since the last take, where recording.
    attention: Vec<Vec<f32>>,
    records: bool,
}

fn stopped() -> Error {
    Error::Other("the shared Whisper decoder stopped".into())
}

fn whole_only(what: &str) -> Error {
    Error::Other(format!(
        "a shared decoder's slot decodes streamed frames one sequence at a time: {what} needs a network of its own"
    ))
}

impl DecoderSlot {
    pub(super) fn claim(slot: usize, calls: Sender<Call>, sizes: Sizes) -> Result<DecoderSlot> {
        let (to_slot, answers) = unbounded();
        calls
            .send(Call::Claim(slot, to_slot))
            .map_err(|_| stopped())?;
        Ok(DecoderSlot {
            slot,
            calls,
            answers,
            sizes,
            attention: Vec::new(),
            records: false,
        })
    }

    /// The slot's index in the decoder.
    pub fn index(&self) -> usize {
        self.slot
    }

    /// Sends `call` and waits for its answer.
    fn ask(&mut self, call: Call) -> Result<Answer> {
        self.calls.send(call).map_err(|_| stopped())?;
        self.answers.recv().map_err(|_| stopped())?
    }

    /// Asks for `work` for this slot alone.
    fn alone(&mut self, work: Alone) -> Result<Answer> {
        let slot = self.slot;
        self.ask(Call::Alone(slot, work))
    }

    /// Keeps a step's or a prompt's attention rows; gives its logits.
    fn logits(&mut self, answer: Answer) -> Result<Vec<f32>> {
        match answer {
            Answer::Logits(logits, attention) => {
                if self.records {
                    if self.attention.len() < attention.len() {
                        self.attention.resize(attention.len(), Vec::new());
                    }
                    for (kept, mut rows) in self.attention.iter_mut().zip(attention) {
                        kept.append(&mut rows);
                    }
                }
                Ok(logits)
            }
            _ => Err(Error::Other("shared decoder: an answer out of turn".into())),
        }
    }
}

impl Drop for DecoderSlot {
    fn drop(&mut self) {
        let _ = self.calls.send(Call::Release(self.slot));
    }
}

impl WhisperBackend for DecoderSlot {
    fn n_mels(&self) -> usize {
        self.sizes.n_mels
    }

    fn window_frames(&self) -> usize {
        self.sizes.window_frames
    }

    fn vocab_size(&self) -> usize {
        self.sizes.vocab
    }

    fn max_text_positions(&self) -> usize {
        self.sizes.max_text_positions
    }

    fn window_padding(&self) -> WindowPadding {
        self.sizes.padding
    }

    fn log_mel(&mut self, audio: &[f32]) -> Result<Vec<f32>> {
        features::log_mel(self.sizes.n_mels, audio)
    }

    fn encode(&mut self, _windows: &[&[f32]]) -> Result<()> {
        Err(whole_only("encoding whole windows"))
    }

    fn encode_frames(&mut self, frames: &[&[f32]]) -> Result<()> {
        let [frames] = frames else {
            return Err(whole_only("more than one window"));
        };
        self.alone(Alone::Window(frames.to_vec())).map(|_| ())
    }

    fn encode_frame_rows(&mut self, from: usize, rows: &[f32]) -> Result<bool> {
        match self.alone(Alone::WindowRows(from, rows.to_vec()))? {
            Answer::Kept(k) => Ok(k),
            _ => Err(Error::Other("shared decoder: an answer out of turn".into())),
        }
    }

    fn rewind(&mut self, len: usize) -> Result<bool> {
        self.alone(Alone::Rewind(len)).map(|_| true)
    }

    fn reserve(&mut self, sequences: usize) -> Result<()> {
        match sequences {
            0 | 1 => Ok(()),
            _ => Err(whole_only("beam search")),
        }
    }

    fn start(&mut self, windows: &[usize]) -> Result<()> {
        if windows != [0] {
            return Err(whole_only("decoding several sequences"));
        }
        self.alone(Alone::Start).map(|_| ())
    }

    fn feed(
        &mut self,
        tokens: &[u32],
        n: usize,
        positions: &[usize],
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        if n == 0 || tokens.len() != n {
            return Err(whole_only("decoding several sequences"));
        }
        let buffer = std::mem::take(logits);
        let slot = self.slot;
        let call = match (n, positions) {
            (1, [0]) => Call::Step {
                slot,
                token: tokens[0],
                logits: buffer,
            },
            _ => Call::Alone(
                slot,
                Alone::Prompt {
                    tokens: tokens.to_vec(),
                    positions: positions.to_vec(),
                    logits: buffer,
                },
            ),
        };
        let answer = self.ask(call)?;
        *logits = self.logits(answer)?;
        Ok(())
    }

    fn reorder(&mut self, src: &[usize]) -> Result<()> {
        match src {
            [0] => Ok(()),
            _ => Err(whole_only("beam search")),
        }
    }

    fn idle(&mut self) {
        let _ = self.calls.send(Call::Idle(self.slot));
    }
}

impl AlignmentSource for DecoderSlot {
    fn cross_attention(
        &mut self,
        window: usize,
        tokens: &[u32],
        heads: &[(usize, usize)],
    ) -> Result<Vec<f32>> {
        if window != 0 {
            return Err(whole_only("aligning over another window"));
        }
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        match self.alone(Alone::Align {
            tokens: tokens.to_vec(),
            heads: heads.to_vec(),
        })? {
            Answer::Weights(w) => Ok(w),
            _ => Err(Error::Other("shared decoder: an answer out of turn".into())),
        }
    }

    fn record_attention(&mut self, heads: Option<&[(usize, usize)]>) -> bool {
        let on = heads.is_some();
        let kept = matches!(
            self.alone(Alone::Record(heads.map(<[_]>::to_vec))),
            Ok(Answer::Kept(true))
        );
        self.records = on && kept;
        self.attention.clear();
        kept
    }

    fn take_attention(&mut self) -> Vec<Vec<f32>> {
        let heads = self.attention.len();
        std::mem::replace(&mut self.attention, vec![Vec::new(); heads])
    }
}
