//! The shared decoder's thread: it owns the network, answers each slot's
//! calls, and runs the steps of the slots waiting at once.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::{Counts, Work, WAIT};
use crate::models::whisper::{NetRunners, WhisperBackend, WhisperNet};
use crate::{Error, Result};

/// What a slot asks of the decoder.
pub(super) enum Call {
    /// A slot was taken: where its answers go.
    Claim(usize, Sender<Result<Answer>>),
    /// One token fed; its logits (into the buffer sent) and, where the slot
    /// records, its attention rows.
    Step {
        slot: usize,
        token: u32,
        logits: Vec<f32>,
    },
    /// Work for slot `.0` alone, run at once.
    Alone(usize, Alone),
    /// The slot asks nothing for a while: steps do not wait for it.
    Idle(usize),
    /// The slot was dropped.
    Release(usize),
}

/// What a slot asks to be run for it alone.
pub(super) enum Alone {
    /// The sequence started again over the slot's window.
    Start,
    /// `tokens` fed; the logits after `positions`.
    Prompt {
        tokens: Vec<u32>,
        positions: Vec<usize>,
        logits: Vec<f32>,
    },
    /// The sequence keeps its first `.0` positions.
    Rewind(usize),
    /// The slot's window from whole encoder frames.
    Window(Vec<f32>),
    /// The slot's window's frames from `.0` on.
    WindowRows(usize, Vec<f32>),
    /// Keep (or stop keeping) the slot's attention rows of these heads.
    Record(Option<Vec<(usize, usize)>>),
    /// An alignment pass: the slot's sequence started again and fed
    /// `tokens`, the heads' weights answered.
    Align {
        tokens: Vec<u32>,
        heads: Vec<(usize, usize)>,
    },
}

impl Alone {
    fn work(&self) -> Work {
        match self {
            Alone::Prompt { .. } => Work::Prompt,
            Alone::Window(_) => Work::Window,
            Alone::WindowRows(..) => Work::Rows,
            Alone::Align { .. } => Work::Align,
            Alone::Start | Alone::Rewind(_) | Alone::Record(_) => Work::Other,
        }
    }
}

/// The decoder's answer to a slot.
pub(super) enum Answer {
    Logits(Vec<f32>, Vec<Vec<f32>>),
    Done,
    Kept(bool),
    Weights(Vec<f32>),
}

/// Where a slot is, for when a step may run without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    /// Asks nothing (idle, or not taken).
    #[default]
    Away,
    /// Had an answer: its next call may be a step.
    Deciding,
    /// Its step is waiting.
    Waiting,
}

#[derive(Default)]
struct SlotState {
    phase: Phase,
    answers: Option<Sender<Result<Answer>>>,
    records: bool,
}

pub(super) struct Hub<R: NetRunners> {
    net: WhisperNet<R>,
    slots: Vec<SlotState>,
    /// The heads the cache records (set by the first slot that asks).
    heads: Option<Vec<(usize, usize)>>,
    /// Steps waiting: slot, token, its logits buffer.
    waiting: Vec<(usize, u32, Vec<f32>)>,
    since: Option<Instant>,
    free: Arc<Mutex<Vec<usize>>>,
    logits: Vec<f32>,
    counts: Arc<Counts>,
    /// A pulse's new frames asked for, run together once the calls in
    /// hand are taken (slot, first frame, rows).
    rows: Vec<(usize, usize, Vec<f32>)>,
}

impl<R: NetRunners + 'static> Hub<R> {
    /// Starts the thread over `net`.
    pub(super) fn start(
        net: WhisperNet<R>,
        slots: usize,
        inbox: Receiver<Call>,
        free: Arc<Mutex<Vec<usize>>>,
        counts: Arc<Counts>,
    ) -> Result<()> {
        let hub = Hub {
            net,
            slots: (0..slots).map(|_| SlotState::default()).collect(),
            heads: None,
            waiting: Vec::new(),
            since: None,
            free,
            logits: Vec::new(),
            counts,
            rows: Vec::new(),
        };
        std::thread::Builder::new()
            .name("shared-decoder".into())
            .spawn(move || hub.run(inbox))
            .map_err(|e| Error::Other(format!("shared decoder: cannot start its thread: {e}")))?;
        Ok(())
    }

    fn run(mut self, inbox: Receiver<Call>) {
        loop {
            let call = match self.since {
                None => match inbox.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                },
                Some(since) => match inbox
                    .recv_timeout((since + WAIT).saturating_duration_since(Instant::now()))
                {
                    Ok(c) => Some(c),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                },
            };
            if let Some(c) = call {
                self.take(c);
                while let Ok(c) = inbox.try_recv() {
                    self.take(c);
                }
                self.set_rows();
            }
            let deciding = self.slots.iter().any(|s| s.phase == Phase::Deciding);
            let late = self.since.is_some_and(|s| s.elapsed() >= WAIT);
            if !self.waiting.is_empty() && (!deciding || late) {
                self.step();
            }
        }
    }

    /// Takes one call: a step waits, anything else runs now.
    fn take(&mut self, call: Call) {
        match call {
            Call::Claim(slot, answers) => {
                if let Some(s) = self.slots.get_mut(slot) {
                    *s = SlotState {
                        answers: Some(answers),
                        ..SlotState::default()
                    };
                }
            }
            Call::Step {
                slot,
                token,
                logits,
            } => {
                if let Some(s) = self.slots.get_mut(slot) {
                    s.phase = Phase::Waiting;
                }
                self.waiting.push((slot, token, logits));
                self.since.get_or_insert_with(Instant::now);
            }
            Call::Idle(slot) => {
                if let Some(s) = self.slots.get_mut(slot) {
                    s.phase = Phase::Away;
                }
            }
            Call::Release(slot) => {
                if let Some(s) = self.slots.get_mut(slot) {
                    *s = SlotState::default();
                }
                if let Ok(mut f) = self.free.lock() {
                    f.push(slot);
                }
            }
            // a slot waits for its answer: nothing of its own can come
            // after its rows before they are set
            Call::Alone(slot, Alone::WindowRows(from, rows)) => self.rows.push((slot, from, rows)),
            Call::Alone(slot, work) => {
                let kind = work.work();
                let t0 = Instant::now();
                let answer = self.run_alone(slot, work);
                let ns = t0.elapsed().as_nanos() as u64;
                self.counts.alone_ns[kind as usize].fetch_add(ns, Ordering::Relaxed);
                self.counts.alone_calls[kind as usize].fetch_add(1, Ordering::Relaxed);
                self.answer(slot, answer);
            }
        }
    }

    /// Runs slot `slot`'s work.
    fn run_alone(&mut self, slot: usize, work: Alone) -> Result<Answer> {
        match work {
            Alone::Start => self.net.restart(slot, slot).map(|()| Answer::Done),
            Alone::Prompt {
                tokens,
                positions,
                mut logits,
            } => {
                let r = self.alone(slot, |net| {
                    net.feed(&tokens, tokens.len(), &positions, &mut logits)
                });
                let attention = self.attention_of(slot);
                r.map(|()| Answer::Logits(logits, attention))
            }
            Alone::Rewind(len) => self
                .alone(slot, |net| net.rewind(len).map(|_| ()))
                .map(|()| Answer::Done),
            Alone::Window(frames) => self.net.set_window(slot, &frames).map(|()| Answer::Done),
            Alone::WindowRows(from, rows) => self
                .net
                .set_windows_rows(&[(slot, from, &rows)])
                .map(Answer::Kept),
            Alone::Record(heads) => self.record(slot, heads).map(Answer::Kept),
            Alone::Align { tokens, heads } => self.align(slot, &tokens, heads).map(Answer::Weights),
        }
    }

    /// Sets every slot's new frames asked for, in one pass.
    fn set_rows(&mut self) {
        if self.rows.is_empty() {
            return;
        }
        let t0 = Instant::now();
        let rows = std::mem::take(&mut self.rows);
        let parts: Vec<(usize, usize, &[f32])> = rows
            .iter()
            .map(|(slot, from, r)| (*slot, *from, r.as_slice()))
            .collect();
        let r = self.net.set_windows_rows(&parts);
        let ns = t0.elapsed().as_nanos() as u64;
        let kind = Work::Rows as usize;
        self.counts.alone_ns[kind].fetch_add(ns, Ordering::Relaxed);
        self.counts.alone_calls[kind].fetch_add(rows.len() as u64, Ordering::Relaxed);
        for (slot, _, _) in rows {
            let answer = match &r {
                Ok(kept) => Ok(Answer::Kept(*kept)),
                Err(e) => Err(Error::Other(format!(
                    "shared decoder: a window's frames: {e}"
                ))),
            };
            self.answer(slot, answer);
        }
    }

    /// Runs `f` over the network with slot `slot`'s sequence alone fed.
    fn alone(
        &mut self,
        slot: usize,
        f: impl FnOnce(&mut WhisperNet<R>) -> Result<()>,
    ) -> Result<()> {
        self.net.select(Some(&[slot]))?;
        let r = f(&mut self.net);
        self.net.select(None).and(r)
    }

    /// The weights slot `slot` kept since the last take (none where it
    /// does not record: the cache keeps every sequence's).
    fn attention_of(&mut self, slot: usize) -> Vec<Vec<f32>> {
        let kept = self.net.take_attention_of(slot);
        match self.slots.get(slot).is_some_and(|s| s.records) {
            true => kept,
            false => Vec::new(),
        }
    }

    /// Slot `slot` records `heads` (`None`: stops). The cache records one
    /// set of heads for every sequence, those the first slot asked for.
    fn record(&mut self, slot: usize, heads: Option<Vec<(usize, usize)>>) -> Result<bool> {
        let Some(heads) = heads else {
            if let Some(s) = self.slots.get_mut(slot) {
                s.records = false;
            }
            return Ok(true);
        };
        match &self.heads {
            Some(h) if *h != heads => return Ok(false),
            Some(_) => {}
            None => {
                if !self.net.record_all(Some(&heads))? {
                    return Ok(false);
                }
                self.heads = Some(heads);
            }
        }
        // what it kept before it asked is not its to read
        self.net.take_attention_of(slot);
        if let Some(s) = self.slots.get_mut(slot) {
            s.records = true;
        }
        Ok(true)
    }

    /// Slot `slot`'s alignment pass over `tokens`.
    fn align(
        &mut self,
        slot: usize,
        tokens: &[u32],
        heads: Vec<(usize, usize)>,
    ) -> Result<Vec<f32>> {
        let was = self.slots.get(slot).is_some_and(|s| s.records);
        if !self.record(slot, Some(heads))? {
            return Err(Error::Other(
                "shared decoder: an alignment pass over heads other than the streams'".into(),
            ));
        }
        self.net.restart(slot, slot)?;
        let mut logits = std::mem::take(&mut self.logits);
        let r = self.alone(slot, |net| net.feed(tokens, tokens.len(), &[], &mut logits));
        self.logits = logits;
        let weights = self.net.take_attention_of(slot).concat();
        if let Some(s) = self.slots.get_mut(slot) {
            s.records = was;
        }
        r.map(|()| weights)
    }

    /// Runs every waiting step as one, a row each.
    fn step(&mut self) {
        let t0 = Instant::now();
        let waiting = std::mem::take(&mut self.waiting);
        self.since = None;
        let rows: Vec<usize> = waiting.iter().map(|w| w.0).collect();
        self.counts.steps.fetch_add(1, Ordering::Relaxed);
        self.counts
            .rows
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        let tokens: Vec<u32> = waiting.iter().map(|w| w.1).collect();
        let mut logits = std::mem::take(&mut self.logits);
        let r = self.net.select(Some(&rows)).and_then(|()| {
            let r = self.net.feed(&tokens, 1, &[0], &mut logits);
            self.net.select(None).and(r)
        });
        let vocab = self.net.vocab_size();
        for (i, (slot, _, mut mine)) in waiting.into_iter().enumerate() {
            let attention = self.attention_of(slot);
            let answer = match &r {
                Ok(()) => {
                    mine.clear();
                    mine.extend_from_slice(&logits[i * vocab..(i + 1) * vocab]);
                    Ok(Answer::Logits(mine, attention))
                }
                Err(e) => Err(Error::Other(format!("shared decoder step: {e}"))),
            };
            self.answer(slot, answer);
        }
        self.logits = logits;
        let ns = t0.elapsed().as_nanos() as u64;
        self.counts.step_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Sends slot `slot` its answer; it decides its next call now.
    fn answer(&mut self, slot: usize, answer: Result<Answer>) {
        if let Some(s) = self.slots.get_mut(slot) {
            s.phase = Phase::Deciding;
            if let Some(a) = &s.answers {
                // a slot dropped meanwhile reads nothing
                let _ = a.send(answer);
            }
        }
    }
}
