//! Live transcription: an audio source writes samples into a lock-free ring
//! buffer (its callback never blocks or allocates), an inference thread runs
//! a recogniser and its commit policy on them (the streaming CTC conformer,
//! or Whisper with LocalAgreement), and results go to the printer over a
//! channel: partial text while someone speaks, final text at each end of speech.
//!
//! This module is the family-neutral machinery; the commit policies are the
//! families' own (`models::conformer::live`, `models::whisper::live`), and
//! the public ones are re-exported here.

mod endpoint;
#[cfg(feature = "mic")]
mod mic;
mod source;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use ringbuf::traits::{Consumer, Observer, Producer, Split};
use ringbuf::{HeapCons, HeapProd, HeapRb};

use crate::asr::Recognizer;
use crate::decode::Word;
use crate::{Error, Result};

pub use crate::models::whisper::live::{
    cut_point, word_key, CtcLive, Cut, LocalAgreement, Update, WhisperLive, WhisperLiveOptions,
};
pub use endpoint::Endpointer;
#[cfg(feature = "mic")]
pub use mic::{capture_default_input, MicCapture};
pub use source::{feed_wav_realtime, FeedReport};

/// What the inference thread reports.
#[derive(Debug, Clone)]
pub enum LiveEvent {
    /// The words of the current utterance so far; all but the first
    /// `stable` may still change (the conformer path gives 0, Whisper's
    /// LocalAgreement the committed words).
    Partial {
        text: String,
        words: Vec<Word>,
        stable: usize,
        /// Which utterance of the stream (from 0) the line is of.
        utterance: u64,
        at: Instant,
    },
    /// An utterance ended: its final words, with times from the stream start.
    /// Final lines come in order, but a later utterance's partial lines may
    /// come before an earlier one's final line (where its second pass runs
    /// beside the stream): `utterance` tells whose they are.
    Final {
        text: String,
        words: Vec<Word>,
        utterance: u64,
        at: Instant,
    },
    /// Samples were dropped because the inference thread fell behind.
    Overrun { dropped_total: u64 },
    /// The inference thread stopped on an error.
    Failed(String),
}

/// The writing end given to an audio source (a cpal callback, a WAV feeder).
pub struct AudioInput {
    prod: HeapProd<f32>,
    dropped: Arc<AtomicU64>,
    started: Arc<std::sync::OnceLock<Instant>>,
}

impl AudioInput {
    /// Writes samples without blocking or allocating; what does not fit is
    /// dropped and counted (the inference thread reports it).
    pub fn write(&mut self, samples: &[f32]) {
        let _ = self.started.set(Instant::now());
        let n = self.prod.push_slice(samples);
        if n < samples.len() {
            self.dropped
                .fetch_add((samples.len() - n) as u64, Ordering::Relaxed);
        }
    }

    /// Writes all samples, waiting while the ring buffer is full (a file
    /// fed as fast as the inference thread takes it: nothing is dropped);
    /// false when the inference thread has stopped.
    pub fn write_waiting(&mut self, samples: &[f32]) -> bool {
        let _ = self.started.set(Instant::now());
        let mut rest = samples;
        while !rest.is_empty() {
            let n = self.prod.push_slice(rest);
            rest = &rest[n..];
            if n == 0 {
                if !self.prod.read_is_held() {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        true
    }

    /// When the first sample arrived (the stream's time zero).
    pub fn started(&self) -> Option<Instant> {
        self.started.get().copied()
    }
}

/// A running live transcriber.
pub struct LiveTranscriber {
    events: Receiver<LiveEvent>,
    stop: Arc<AtomicBool>,
    /// Dropped unfinished: stop after the step in hand, no final line.
    cancel: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    started: Arc<std::sync::OnceLock<Instant>>,
}

/// Tuning of the live path.
#[derive(Clone)]
pub struct LiveOptions {
    /// Ring buffer capacity in seconds of audio.
    pub buffer_s: f64,
    /// Silence (CTC blanks) after speech that ends an utterance, in seconds.
    pub end_silence_s: f64,
    /// With Silero VAD, an utterance also needs the VAD to be out of speech
    /// before it ends (a pause inside a sentence is not an end).
    pub vad: Option<crate::vad::Vad>,
}

impl Default for LiveOptions {
    fn default() -> Self {
        LiveOptions {
            buffer_s: 10.0,
            end_silence_s: 0.6,
            vad: None,
        }
    }
}

/// What the inference thread runs: a recogniser and its policy for
/// committing text, fed the samples as they come.
pub(crate) trait LiveEngine: Send {
    /// Most samples one push takes: the conformer reports after every few
    /// thousand (its endpointing looks once per push); Whisper takes all
    /// that waits, so that a late decoding works on the latest audio.
    fn max_push(&self) -> usize;
    /// Takes samples; adds the events they caused.
    fn push(&mut self, samples: &[f32], events: &mut Vec<LiveEvent>) -> Result<()>;
    /// The stream ended: the utterance in progress becomes final.
    fn finish(&mut self, events: &mut Vec<LiveEvent>) -> Result<()>;
}

impl LiveTranscriber {
    /// Starts the inference thread over the streaming conformer; feed audio
    /// (mono, at the recogniser's rate) through the returned [`AudioInput`].
    pub fn start(rec: Arc<Recognizer>, opts: LiveOptions) -> Result<(LiveTranscriber, AudioInput)> {
        let engine = crate::models::conformer::live::Conformer::new(&rec, &opts)?;
        LiveTranscriber::spawn(Box::new(engine), rec.sample_rate(), opts.buffer_s)
    }

    /// Starts the inference thread over a chunked checkpoint's CTC head
    /// (`stream`): partial text after every chunk, a final line when the
    /// head's blanks last `opts.end_silence_s`; feed 16 kHz mono.
    pub fn start_ctc(
        stream: crate::models::whisper::ctc::CtcStream,
        opts: LiveOptions,
    ) -> Result<(LiveTranscriber, AudioInput)> {
        let engine = CtcLive::with_options(stream, &opts);
        LiveTranscriber::spawn(Box::new(engine), 16_000, opts.buffer_s)
    }

    /// Starts the inference thread over a Whisper policy (its VAD and
    /// options are its own; only `opts.buffer_s` applies); feed 16 kHz mono.
    pub fn start_whisper(
        live: WhisperLive,
        opts: LiveOptions,
    ) -> Result<(LiveTranscriber, AudioInput)> {
        let rate = live.sample_rate();
        LiveTranscriber::spawn(Box::new(live), rate, opts.buffer_s)
    }

    /// As [`LiveTranscriber::start_whisper`]; when the session ends, its
    /// policy goes to `keep` (a server's pool of networks: the next session
    /// builds none).
    pub fn start_whisper_kept(
        live: WhisperLive,
        opts: LiveOptions,
        keep: Box<dyn FnOnce(WhisperLive) + Send>,
    ) -> Result<(LiveTranscriber, AudioInput)> {
        let rate = live.sample_rate();
        let engine = Kept {
            live: Some(live),
            keep: Some(keep),
        };
        LiveTranscriber::spawn(Box::new(engine), rate, opts.buffer_s)
    }

    fn spawn(
        engine: Box<dyn LiveEngine>,
        rate: u32,
        buffer_s: f64,
    ) -> Result<(LiveTranscriber, AudioInput)> {
        let cap = ((buffer_s * rate as f64) as usize).max(rate as usize / 10);
        let (prod, cons) = HeapRb::<f32>::new(cap).split();
        let (tx, rx) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let cancel = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let started = Arc::new(std::sync::OnceLock::new());
        let worker = Worker {
            cons,
            tx,
            stop: stop.clone(),
            cancel: cancel.clone(),
            dropped: dropped.clone(),
            engine,
        };
        let thread = std::thread::Builder::new()
            .name("pulsed-inference".into())
            .spawn(move || worker.run())
            .map_err(|e| Error::Other(format!("cannot start the inference thread: {e}")))?;
        let input = AudioInput {
            prod,
            dropped,
            started: started.clone(),
        };
        Ok((
            LiveTranscriber {
                events: rx,
                stop,
                cancel,
                thread: Some(thread),
                started,
            },
            input,
        ))
    }

    /// The event stream; it ends after [`LiveTranscriber::finish`].
    pub fn events(&self) -> &Receiver<LiveEvent> {
        &self.events
    }

    /// When the first audio sample arrived.
    pub fn started(&self) -> Option<Instant> {
        self.started.get().copied()
    }

    /// Drains what is buffered, flushes the stream's tail as a final
    /// result and stops the inference thread.
    pub fn finish(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A session dropped without [`LiveTranscriber::finish`] is abandoned: its
/// thread stops after the step in hand, the audio still buffered is not
/// decoded and no final line comes (a server's client that left, or
/// cleared its buffer, would have the machine decode for no one).
impl Drop for LiveTranscriber {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::SeqCst);
        self.finish();
    }
}

/// A Whisper policy handed on when its session ends.
struct Kept {
    live: Option<WhisperLive>,
    keep: Option<Box<dyn FnOnce(WhisperLive) + Send>>,
}

impl Kept {
    fn live(&mut self) -> Result<&mut WhisperLive> {
        self.live
            .as_mut()
            .ok_or_else(|| crate::Error::Other("live Whisper: the policy was handed on".into()))
    }
}

impl LiveEngine for Kept {
    fn max_push(&self) -> usize {
        self.live.as_ref().map_or(usize::MAX, LiveEngine::max_push)
    }
    fn push(&mut self, samples: &[f32], events: &mut Vec<LiveEvent>) -> Result<()> {
        LiveEngine::push(self.live()?, samples, events)
    }
    fn finish(&mut self, events: &mut Vec<LiveEvent>) -> Result<()> {
        LiveEngine::finish(self.live()?, events)
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        if let (Some(live), Some(keep)) = (self.live.take(), self.keep.take()) {
            keep(live);
        }
    }
}

struct Worker {
    cons: HeapCons<f32>,
    tx: Sender<LiveEvent>,
    stop: Arc<AtomicBool>,
    cancel: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    engine: Box<dyn LiveEngine>,
}

impl Worker {
    fn run(mut self) {
        if let Err(e) = self.work() {
            let _ = self.tx.send(LiveEvent::Failed(e.to_string()));
        }
    }

    fn work(&mut self) -> Result<()> {
        let mut buf = vec![0f32; 4096];
        let mut got = Vec::new();
        let mut events = Vec::new();
        let mut reported = 0u64;
        loop {
            if self.cancel.load(Ordering::SeqCst) {
                return Ok(());
            }
            let stopping = self.stop.load(Ordering::SeqCst);
            got.clear();
            let most = self.engine.max_push();
            loop {
                let want = buf.len().min(most - got.len());
                let n = self.cons.pop_slice(&mut buf[..want]);
                got.extend_from_slice(&buf[..n]);
                if n < buf.len() || got.len() == most {
                    break;
                }
            }
            if !got.is_empty() {
                self.engine.push(&got, &mut events)?;
                self.send(&mut events);
            }
            let dropped = self.dropped.load(Ordering::Relaxed);
            if dropped != reported {
                reported = dropped;
                let _ = self.tx.send(LiveEvent::Overrun {
                    dropped_total: dropped,
                });
            }
            if stopping && self.cons.is_empty() {
                self.engine.finish(&mut events)?;
                self.send(&mut events);
                return Ok(());
            }
            if got.is_empty() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    fn send(&self, events: &mut Vec<LiveEvent>) {
        for e in events.drain(..) {
            let _ = self.tx.send(e);
        }
    }
}
