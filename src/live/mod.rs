//! Live transcription: an audio source writes samples into a lock-free ring
//! buffer (its callback never blocks or allocates), an inference thread runs
//! the streaming recogniser on them, and results go to the printer over a
//! channel: partial text while someone speaks, final text at each end of speech.

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

pub use endpoint::Endpointer;
#[cfg(feature = "mic")]
pub use mic::{capture_default_input, MicCapture};
pub use source::{feed_wav_realtime, FeedReport};

/// What the inference thread reports.
#[derive(Debug, Clone)]
pub enum LiveEvent {
    /// The words of the current utterance so far (may still change).
    Partial {
        text: String,
        words: Vec<Word>,
        at: Instant,
    },
    /// An utterance ended: its final words, with times from the stream start.
    Final {
        text: String,
        words: Vec<Word>,
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

    /// When the first sample arrived (the stream's time zero).
    pub fn started(&self) -> Option<Instant> {
        self.started.get().copied()
    }
}

/// A running live transcriber.
pub struct LiveTranscriber {
    events: Receiver<LiveEvent>,
    stop: Arc<AtomicBool>,
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

impl LiveTranscriber {
    /// Starts the inference thread; feed audio (mono, at the recogniser's
    /// rate) through the returned [`AudioInput`].
    pub fn start(rec: Arc<Recognizer>, opts: LiveOptions) -> Result<(LiveTranscriber, AudioInput)> {
        let cap = ((opts.buffer_s * rec.sample_rate() as f64) as usize)
            .max(rec.sample_rate() as usize / 10);
        let (prod, cons) = HeapRb::<f32>::new(cap).split();
        let (tx, rx) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let started = Arc::new(std::sync::OnceLock::new());
        let stream = rec.stream()?;
        let endpointer =
            Endpointer::new((opts.end_silence_s / rec.frame_seconds()).ceil() as usize);
        let vad = match &opts.vad {
            Some(v) => Some((
                v.session()?,
                crate::vad::Segmenter::new(crate::vad::SegmentOptions::default()),
            )),
            None => None,
        };
        let worker = Worker {
            cons,
            tx,
            stop: stop.clone(),
            dropped: dropped.clone(),
            stream,
            endpointer,
            vad,
            last_partial: String::new(),
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

impl Drop for LiveTranscriber {
    fn drop(&mut self) {
        self.finish();
    }
}

struct Worker {
    cons: HeapCons<f32>,
    tx: Sender<LiveEvent>,
    stop: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    stream: crate::asr::StreamTranscriber,
    endpointer: Endpointer,
    vad: Option<(crate::vad::VadSession, crate::vad::Segmenter)>,
    last_partial: String,
}

impl Worker {
    fn run(mut self) {
        if let Err(e) = self.work() {
            let _ = self.tx.send(LiveEvent::Failed(e.to_string()));
        }
    }

    fn work(&mut self) -> Result<()> {
        let mut buf = vec![0f32; 4096];
        let mut reported = 0u64;
        loop {
            let stopping = self.stop.load(Ordering::SeqCst);
            let n = self.cons.pop_slice(&mut buf);
            if n > 0 {
                if let Some((session, seg)) = &mut self.vad {
                    for p in session.push(&buf[..n])? {
                        seg.push(p);
                    }
                }
                let changed = self.stream.push(&buf[..n])?;
                if changed || self.endpointer.pending() {
                    self.report(false)?;
                }
            }
            let dropped = self.dropped.load(Ordering::Relaxed);
            if dropped != reported {
                reported = dropped;
                let _ = self.tx.send(LiveEvent::Overrun {
                    dropped_total: dropped,
                });
            }
            if stopping && self.cons.is_empty() {
                self.stream.finish()?;
                return self.report(true);
            }
            if n == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// Sends the uncommitted words as partial text, or as final text when
    /// the endpointer sees the end of an utterance (or the stream ended).
    fn report(&mut self, end: bool) -> Result<()> {
        let t = self.stream.partial();
        let frames = self.stream.frames();
        let last_speech = self.stream.last_token_frame();
        let words = self.endpointer.uncommitted(&t.words).to_vec();
        let at = Instant::now();
        let vad_silent = self.vad.as_ref().is_none_or(|(_, seg)| !seg.in_speech());
        let ended = end || (vad_silent && self.endpointer.utterance_ended(frames, last_speech));
        if words.is_empty() {
            return Ok(());
        }
        let text = words
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let event = if ended {
            self.endpointer.commit(words.len());
            // beam search must not revise what was just given out as final
            if self.stream.cut() {
                self.endpointer.restart();
            }
            self.last_partial.clear();
            LiveEvent::Final { text, words, at }
        } else if text == self.last_partial {
            return Ok(()); // nothing new to show
        } else {
            self.last_partial.clone_from(&text);
            LiveEvent::Partial { text, words, at }
        };
        let _ = self.tx.send(event);
        Ok(())
    }
}
