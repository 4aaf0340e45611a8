//! The second pass of an utterance whose streamed text is doubtful, run
//! beside the stream: on a network of its own, in a thread of its own, so
//! the audio after it streams on (a looping utterance's pass, decoded
//! again at each temperature of the fallback, held the next lines up to
//! 8 s on two cores). Final lines still come in the order their
//! utterances ended: a line waits for the passes before it.
//!
//! It runs beside the stream where the policy is not
//! [`WhisperLiveOptions::paced`](super::WhisperLiveOptions::paced); a paced
//! policy runs it in its way, so that what it gives does not depend on the
//! machine's speed (the next utterance's prompt holds the second pass's
//! words, not the streamed ones).

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::buffer::{text_of, trimmed};
use super::decoding::Decoding;
use super::policy::{same_word, Update, WhisperLive};
use crate::decode::Word;
use crate::engine::Engine;
use crate::models::whisper::decode::{AlignedBackend, SAMPLE_RATE};
use crate::models::whisper::{GenerationConfig, WhisperModel, WhisperTokenizer};
use crate::{Error, Result};

/// An utterance sent to the second pass: the streamed line that stands if
/// the pass gives no text, and where the utterance lies in the stream.
pub(super) struct Redo {
    /// The streamed line (`None`: it has no words) and its words untrimmed.
    pub(super) held: Option<(Update, Vec<Word>)>,
    /// From the utterance's buffer start to where it ended (stream seconds).
    pub(super) span: (f64, f64),
    /// Its index in the stream.
    pub(super) utterance: u64,
}

/// A final line as it waits to be given out.
enum Line {
    Ready(Update),
    /// A second pass's result makes it (`sent`: the pass was sent to the
    /// worker; else there was nothing to decode).
    Waiting {
        redo: Redo,
        sent: bool,
    },
}

/// The second passes running beside the stream, and the final lines
/// waiting behind them.
pub(super) struct SecondPasses {
    /// Each pass's decoding and the samples it decodes.
    jobs: Option<Sender<(Decoding, Vec<f32>)>>,
    done: Receiver<Result<Vec<Word>>>,
    worker: Option<JoinHandle<()>>,
    lines: VecDeque<Line>,
}

impl SecondPasses {
    /// A worker that builds its network of `model` on `engine` at its
    /// first pass (a stream that needs none holds none).
    pub(super) fn new(
        model: WhisperModel,
        engine: Engine,
        tokenizer: Arc<WhisperTokenizer>,
        gen: Arc<GenerationConfig>,
    ) -> Result<SecondPasses> {
        let (jobs, inbox) = unbounded::<(Decoding, Vec<f32>)>();
        let (outbox, done) = unbounded();
        let worker = std::thread::Builder::new()
            .name("second-pass".into())
            .spawn(move || {
                let mut net: Option<Box<dyn AlignedBackend + Send>> = None;
                for (d, samples) in inbox {
                    let hypothesis = (|| {
                        if net.is_none() {
                            net = Some(crate::models::whisper::network(&model, &engine)?);
                        }
                        let Some(n) = net.as_deref_mut() else {
                            return Err(Error::Other("second pass: no network".into()));
                        };
                        Ok(d.run(n, &tokenizer, &gen, &samples)?.0)
                    })();
                    if outbox.send(hypothesis).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| Error::Other(format!("second pass: cannot start its thread: {e}")))?;
        Ok(SecondPasses {
            jobs: Some(jobs),
            done,
            worker: Some(worker),
            lines: VecDeque::new(),
        })
    }

    /// Second passes sent and not yet given out.
    pub(super) fn waiting(&self) -> usize {
        self.lines
            .iter()
            .filter(|l| matches!(l, Line::Waiting { .. }))
            .count()
    }

    /// Sends an utterance to the second pass (`None`: nothing to decode,
    /// its streamed line stands).
    pub(super) fn send(&mut self, job: Option<(Decoding, Vec<f32>)>, redo: Redo) -> Result<()> {
        let sent = job.is_some();
        if let Some(job) = job {
            if self.jobs.as_ref().is_none_or(|j| j.send(job).is_err()) {
                return Err(ended());
            }
        }
        self.lines.push_back(Line::Waiting { redo, sent });
        Ok(())
    }
}

impl Drop for SecondPasses {
    fn drop(&mut self) {
        // the worker ends after the pass it is on: its queue closes, and
        // nothing takes what it would send
        self.jobs = None;
        self.done = crossbeam_channel::never();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl WhisperLive {
    /// Gives out `line` now, or after the second passes before it.
    pub(super) fn give(&mut self, line: Option<Update>, out: &mut Vec<Update>) {
        let Some(line) = line else {
            return;
        };
        match &mut self.second_passes {
            Some(p) if !p.lines.is_empty() => p.lines.push_back(Line::Ready(line)),
            _ => out.push(line),
        }
    }

    /// Gives out the final lines whose second passes have ended (`wait`:
    /// waits for all of them).
    pub(super) fn collect(&mut self, wait: bool, out: &mut Vec<Update>) -> Result<()> {
        loop {
            let Some(p) = self.second_passes.as_mut() else {
                return Ok(());
            };
            match p.lines.pop_front() {
                None => return Ok(()),
                Some(Line::Ready(u)) => out.push(u),
                Some(Line::Waiting { redo, sent }) => {
                    let hypothesis = if !sent {
                        Ok(Vec::new())
                    } else if wait {
                        p.done.recv().map_err(|_| ended())?
                    } else {
                        match p.done.try_recv() {
                            Ok(h) => h,
                            Err(crossbeam_channel::TryRecvError::Empty) => {
                                p.lines.push_front(Line::Waiting { redo, sent });
                                return Ok(());
                            }
                            Err(_) => return Err(ended()),
                        }
                    };
                    let now = self.fed as f64 / SAMPLE_RATE as f64;
                    if let Some(u) = self.redone(redo, hypothesis?, now) {
                        out.push(u);
                    }
                }
            }
        }
    }

    /// The final line of an utterance sent to the second pass, its
    /// `hypothesis` there (words in stream seconds) given out at stream
    /// position `now`; the prompt's history takes its words in place of the
    /// streamed ones.
    pub(super) fn redone(&mut self, redo: Redo, hypothesis: Vec<Word>, now: f64) -> Option<Update> {
        if hypothesis.is_empty() {
            // the second pass has no text: the streamed line stands
            return redo.held.map(|(update, _)| update);
        }
        self.replace_history(redo.span, &hypothesis);
        let mut committed_at_s = vec![now; hypothesis.len()];
        let mut shown_at_s = committed_at_s.clone();
        if let Some((line, _)) = &redo.held {
            // the streamed words the second pass kept, in order from the
            // start, stayed as they were committed and shown
            let same = hypothesis
                .iter()
                .zip(&line.words)
                .take_while(|(w, k)| same_word(&w.text, &k.text))
                .count();
            committed_at_s[..same].copy_from_slice(&line.committed_at_s[..same]);
            shown_at_s[..same].copy_from_slice(&line.shown_at_s[..same]);
        }
        Some(Update {
            text: text_of(&hypothesis),
            stable: hypothesis.len(),
            words: trimmed(hypothesis),
            is_final: true,
            committed_at_s,
            shown_at_s,
            utterance: redo.utterance,
        })
    }

    /// The prompt's history with the words of `span` (stream seconds) in
    /// place of those it held there.
    fn replace_history(&mut self, span: (f64, f64), words: &[Word]) {
        let inside = |w: &Word| w.start_s >= span.0 - 1e-6 && w.start_s < span.1;
        let at = self.history.iter().position(inside);
        self.history.retain(|w| !inside(w));
        let at = at.unwrap_or_else(|| {
            self.history
                .iter()
                .position(|w| w.start_s >= span.1)
                .unwrap_or(self.history.len())
        });
        for (i, w) in words.iter().enumerate() {
            self.history.insert(at + i, w.clone());
        }
        while self.history.len() > super::policy::HISTORY_WORDS {
            self.history.pop_front();
        }
    }
}

fn ended() -> Error {
    Error::Other("second pass: its thread has ended".into())
}
