//! One Whisper network's decoder serving many live streams: each stream
//! holds a [`DecoderSlot`] (a sequence of the shared cache and an encoder
//! window of its own) and decodes through it as through a network of its
//! own, while a thread of the decoder's runs the steps the streams ask for
//! at about the same time as one step, a row each. A decoder step reads
//! every weight whatever its rows (base: 23.7 ms for one row on the 2-core
//! box, 36.2 ms for five), so streams that share steps share that cost.
//!
//! A step waits for the slots that are deciding their next token (they
//! had an answer and have not asked again) at most [`WAIT`]; a slot whose
//! pulse ended says so ([`crate::models::whisper::WhisperBackend::idle`]) and is
//! not waited for. Everything else a slot asks (a prompt, its window's
//! frames, a rewind, an alignment pass) runs for it alone, at once.
//!
//! On a GPU the decoder's cache holds every slot's window and sequence
//! (base: 37 MB a slot at f32), and a step's rows are padded to a few
//! sizes, each captured once.

mod hub;
mod slot;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{unbounded, Sender};

pub use slot::DecoderSlot;

use crate::engine::Engine;
use crate::models::whisper::decode::WindowPadding;
use crate::models::whisper::{CpuWhisper, NetRunners, WhisperBackend, WhisperModel, WhisperNet};
use crate::{Error, Result};

/// Longest a step waits for a slot still deciding its next token.
pub const WAIT: Duration = Duration::from_millis(2);

/// A decoder shared by up to `slots` streams.
pub struct SharedDecoder {
    calls: Sender<hub::Call>,
    free: Arc<Mutex<Vec<usize>>>,
    sizes: Sizes,
    slots: usize,
    counts: Arc<Counts>,
}

/// What the decoder's thread has run.
#[derive(Debug, Default)]
struct Counts {
    steps: AtomicU64,
    rows: AtomicU64,
    /// Nanoseconds in steps, and in calls run for one slot alone (by
    /// [`Work`]), and how many of those calls.
    step_ns: AtomicU64,
    alone_ns: [AtomicU64; WORK.len()],
    alone_calls: [AtomicU64; WORK.len()],
}

/// What a call run for one slot alone does.
#[derive(Debug, Clone, Copy)]
enum Work {
    /// A decoding's prompt fed.
    Prompt = 0,
    /// A whole window of encoder frames into the slot's window.
    Window = 1,
    /// A pulse's new encoder frames into the slot's window.
    Rows = 2,
    /// An alignment pass.
    Align = 3,
    /// Starts, rewinds, recording.
    Other = 4,
}

/// The names of [`Work`]'s kinds, in its order (the `work` label of the
/// server's metrics).
pub const WORK: [&str; 5] = ["prompts", "windows", "rows", "alignment", "other"];

/// Steps the shared decoder ran, the rows they fed (all slots'), and
/// where its thread's time went (seconds): the steps, or what it ran for
/// one slot alone. Times that add up to the run's wall time say the
/// thread is the bottleneck.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepCounts {
    pub steps: u64,
    pub rows: u64,
    pub step_s: f64,
    /// Seconds in calls run for one slot alone, by kind ([`WORK`]):
    /// prompts fed for one decoding, whole windows and a pulse's new
    /// frames set into a slot's window, alignment passes (word times at
    /// an utterance's end), starts, rewinds and recording.
    pub alone_s: [f64; WORK.len()],
    /// How many of those calls, by kind.
    pub alone_calls: [u64; WORK.len()],
}

/// What a slot answers without asking the decoder.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    n_mels: usize,
    window_frames: usize,
    vocab: usize,
    max_text_positions: usize,
    padding: WindowPadding,
}

impl SharedDecoder {
    /// A decoder of `model` on `engine` for up to `slots` streams at once;
    /// its thread runs until the decoder and every slot are dropped.
    pub fn new(model: &WhisperModel, engine: &Engine, slots: usize) -> Result<SharedDecoder> {
        if slots == 0 {
            return Err(Error::Other("a shared Whisper decoder needs a slot".into()));
        }
        match engine {
            Engine::Cpu => SharedDecoder::over(CpuWhisper::new(model)?, slots),
            #[cfg(feature = "cuda")]
            Engine::Gpu { device, options } => SharedDecoder::over(
                crate::models::whisper::GpuWhisper::on_gpu(model, device.clone(), options)?,
                slots,
            ),
        }
    }

    fn over<R: NetRunners + 'static>(
        mut net: WhisperNet<R>,
        slots: usize,
    ) -> Result<SharedDecoder> {
        net.reserve_slots(slots)?;
        let sizes = Sizes {
            n_mels: net.n_mels(),
            window_frames: net.window_frames(),
            vocab: net.vocab_size(),
            max_text_positions: net.max_text_positions(),
            padding: net.window_padding(),
        };
        let (calls, inbox) = unbounded();
        let free = Arc::new(Mutex::new((0..slots).rev().collect::<Vec<_>>()));
        let counts = Arc::new(Counts::default());
        hub::Hub::start(net, slots, inbox, free.clone(), counts.clone())?;
        Ok(SharedDecoder {
            calls,
            free,
            sizes,
            slots,
            counts,
        })
    }

    /// A slot for one stream, free again when dropped; an error when all
    /// are taken.
    pub fn slot(&self) -> Result<DecoderSlot> {
        let taken = self.free.lock().ok().and_then(|mut f| f.pop());
        let Some(slot) = taken else {
            return Err(Error::Other(format!(
                "the shared Whisper decoder's {} slots are all taken",
                self.slots
            )));
        };
        DecoderSlot::claim(slot, self.calls.clone(), self.sizes)
    }

    /// Slots not taken.
    pub fn free_slots(&self) -> usize {
        self.free.lock().map_or(0, |f| f.len())
    }

    /// Slots in all.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Steps run so far and the rows they fed: rows over steps is how many
    /// streams a step served on average.
    pub fn counts(&self) -> StepCounts {
        let s = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 * 1e-9;
        StepCounts {
            steps: self.counts.steps.load(Ordering::Relaxed),
            rows: self.counts.rows.load(Ordering::Relaxed),
            step_s: s(&self.counts.step_ns),
            alone_s: self.counts.alone_ns.each_ref().map(s),
            alone_calls: self
                .counts
                .alone_calls
                .each_ref()
                .map(|c| c.load(Ordering::Relaxed)),
        }
    }
}
