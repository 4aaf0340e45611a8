//! `model.stream()`: a live session over [`LiveSetup::start`], the path
//! `pulsed mic --input F` runs (an inference thread fed through a ring
//! buffer), pushed to from Python and read as events.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use pyo3::prelude::*;

use pulsed::asr::{LiveSettings, Transcriber, WhisperDecoding};
use pulsed::audio::StreamResampler;
use pulsed::live::{self, AudioInput, LiveTranscriber, WhisperLiveOptions};

use crate::errors::{detached, error, f32_samples};
use crate::result::Word;

/// A live session's settings: `pulsed mic`'s flags.
pub struct LiveOptions {
    /// The rate pushed samples come at (converted to the model's).
    pub source_rate: u32,
    pub end_silence_s: f64,
    pub vad: bool,
    pub step_s: f64,
    pub trim_s: f64,
    pub paced: bool,
    pub stream_encoder: bool,
    pub second_pass: Option<bool>,
    pub greedy_partials: Option<bool>,
    pub stream_text: Option<bool>,
    pub margin: Option<usize>,
    pub backstep: usize,
    pub show: usize,
    pub refill: bool,
    pub repeats: usize,
    pub untexted_speech_s: f64,
    pub final_beam: usize,
    /// The model's Whisper decoding and beam.
    pub decoding: WhisperDecoding,
    pub beam: Option<usize>,
}

impl LiveOptions {
    /// The library's settings, as `pulsed mic` makes them of its flags.
    fn settings(&self) -> pulsed::Result<LiveSettings> {
        let mut whisper = WhisperLiveOptions {
            step_s: self.step_s,
            paced: self.paced,
            stream_encoder: self.stream_encoder,
            second_pass: self.second_pass,
            greedy_partials: self.greedy_partials,
            ..WhisperLiveOptions::default()
        }
        .with_trim(self.trim_s);
        self.decoding.apply(self.beam, &mut whisper.decode)?;
        whisper.stream_text = self.stream_text;
        whisper.stream.margin = self.margin;
        whisper.stream.refill = self.refill;
        whisper.stream.backstep = self.backstep;
        whisper.stream.show = self.show;
        whisper.stream.repeats = self.repeats;
        whisper.untexted_speech_s = self.untexted_speech_s;
        whisper.stream.final_beam = self.final_beam;
        Ok(LiveSettings {
            end_silence_s: self.end_silence_s,
            vad: self.vad,
            whisper,
        })
    }
}

/// A running live session. `push(samples)` as audio comes, `finish()` at
/// its end; iterate for events (blocking), or `poll()` for those ready.
#[pyclass(module = "pulsed._pulsed", frozen)]
pub struct LiveSession {
    /// The writing end and the resampler in front of it; `None` once
    /// finished.
    input: Mutex<Option<Feed>>,
    /// The inference thread; `None` once finished.
    live: Mutex<Option<LiveTranscriber>>,
    events: Receiver<live::LiveEvent>,
    /// Events taken off the channel but not yet handed out (while looking
    /// for the reason the thread stopped).
    held: Mutex<VecDeque<live::LiveEvent>>,
    started: std::sync::OnceLock<Instant>,
    /// The rate pushed samples come at.
    source_rate: u32,
}

struct Feed {
    input: AudioInput,
    resampler: Option<StreamResampler>,
}

impl LiveSession {
    /// Starts a session over `t` (the model's thread of inference).
    pub fn start(t: &Transcriber, opts: LiveOptions) -> Result<LiveSession, String> {
        let rate = t.sample_rate();
        let resampler = if opts.source_rate == rate {
            None
        } else {
            Some(StreamResampler::new(opts.source_rate, rate).map_err(|e| {
                format!("cannot resample {} Hz to {rate} Hz: {e}", opts.source_rate)
            })?)
        };
        let settings = opts.settings().map_err(|e| e.to_string())?;
        let setup = t.live(settings).map_err(|e| e.to_string())?;
        let (live, input) = setup.start().map_err(|e| e.to_string())?;
        Ok(LiveSession {
            events: live.events().clone(),
            input: Mutex::new(Some(Feed { input, resampler })),
            live: Mutex::new(Some(live)),
            held: Mutex::new(VecDeque::new()),
            started: std::sync::OnceLock::new(),
            source_rate: opts.source_rate,
        })
    }

    /// The next event within `timeout` (`None`: until one comes or the
    /// stream ends); `Ok(None)` at the end or on timeout.
    fn next(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<Option<LiveEvent>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let ev = match py.detach(|| lock(&self.held).pop_front()) {
                Some(ev) => ev,
                None => {
                    // short waits, so that Ctrl-C is seen while blocked
                    let mut wait = Duration::from_millis(100);
                    if let Some(d) = deadline {
                        wait = wait.min(d.saturating_duration_since(Instant::now()));
                    }
                    let events = self.events.clone();
                    match py.detach(move || events.recv_timeout(wait)) {
                        Ok(ev) => ev,
                        Err(RecvTimeoutError::Disconnected) => return Ok(None),
                        Err(RecvTimeoutError::Timeout) => {
                            py.check_signals()?;
                            if deadline.is_some_and(|d| Instant::now() >= d) {
                                return Ok(None);
                            }
                            continue;
                        }
                    }
                }
            };
            if let Some(ev) = self.event(ev)? {
                return Ok(Some(ev));
            }
        }
    }

    /// A library event for Python: a line, or the error that stopped the
    /// session; `None` for what is not a line (an overrun, counted only).
    fn event(&self, ev: live::LiveEvent) -> PyResult<Option<LiveEvent>> {
        let t0 = self.started.get().copied();
        let secs =
            |at: Instant| t0.map_or(0.0, |t0| at.saturating_duration_since(t0).as_secs_f64());
        Ok(match ev {
            live::LiveEvent::Partial {
                text,
                words,
                stable,
                utterance,
                at,
            } => Some(LiveEvent {
                kind: "partial",
                text,
                words: words.iter().map(Word::of).collect(),
                stable,
                utterance,
                time: secs(at),
            }),
            live::LiveEvent::Final {
                text,
                words,
                utterance,
                at,
            } => Some(LiveEvent {
                kind: "final",
                stable: words.len(),
                text,
                words: words.iter().map(Word::of).collect(),
                utterance,
                time: secs(at),
            }),
            live::LiveEvent::Overrun { .. } => None,
            live::LiveEvent::Failed(e) => return Err(error(e)),
        })
    }

    /// Why the inference thread stopped, from the events it left (those
    /// that are lines are kept for the reader).
    fn stop_reason(&self) -> String {
        let mut held = lock(&self.held);
        let mut reason = None;
        for ev in self.events.try_iter() {
            match ev {
                live::LiveEvent::Failed(e) => reason = Some(e),
                ev => held.push_back(ev),
            }
        }
        reason.unwrap_or_else(|| "the live session's inference thread has stopped".into())
    }
}

#[pymethods]
impl LiveSession {
    /// Feeds mono samples (little-endian f32 bytes) at the session's
    /// `sample_rate`; waits while the session's buffer is full (nothing is
    /// dropped).
    fn push(&self, py: Python<'_>, samples: &[u8]) -> PyResult<()> {
        let samples = f32_samples(samples)?;
        if let Some(i) = samples.iter().position(|x| !x.is_finite()) {
            return Err(error(format!("samples: NaN or infinity at sample {i}")));
        }
        let _ = self.started.set(Instant::now());
        // Every lock is taken with the GIL released: a thread holding one
        // never waits for the GIL.
        detached(py, || {
            let mut feed = lock(&self.input);
            let Some(feed) = feed.as_mut() else {
                return Err("the live session is finished: push before finish()".into());
            };
            if feed.write(&samples)? {
                Ok(())
            } else {
                Err(self.stop_reason())
            }
        })
    }

    /// The end of the audio: the utterance in progress becomes a final
    /// line, and the session stops once the events are read. Idempotent.
    fn finish(&self, py: Python<'_>) -> PyResult<()> {
        detached(py, || {
            let feed = lock(&self.input).take();
            let live = lock(&self.live).take();
            let mut fed = true;
            if let Some(mut feed) = feed {
                fed = feed.flush()?;
            }
            if let Some(mut live) = live {
                live.finish(); // drains the ring buffer and flushes the tail
            }
            if fed {
                Ok(())
            } else {
                Err(self.stop_reason())
            }
        })
    }

    /// The events ready now, without waiting.
    fn poll(&self, py: Python<'_>) -> PyResult<Vec<LiveEvent>> {
        let mut out = Vec::new();
        while let Some(ev) = self.next(py, Some(Duration::ZERO))? {
            out.push(ev);
        }
        Ok(out)
    }

    /// The next event, waiting up to `timeout` seconds (`None`: until one
    /// comes); `None` on timeout or once the session is finished and every
    /// event was read (see `ended`).
    #[pyo3(signature = (timeout = None))]
    fn next_event(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<LiveEvent>> {
        let timeout = match timeout {
            Some(t) if !(t >= 0.0 && t.is_finite()) => {
                return Err(error(format!("timeout must be a number >= 0 (got {t})")))
            }
            t => t.map(Duration::from_secs_f64),
        };
        self.next(py, timeout)
    }

    /// True once the session is finished and every event has been read.
    #[getter]
    fn ended(&self, py: Python<'_>) -> bool {
        py.detach(|| {
            lock(&self.live).is_none()
                && lock(&self.input).is_none()
                && lock(&self.held).is_empty()
                && self.events.is_empty()
        })
    }

    /// The rate (Hz) pushed samples are taken at.
    #[getter]
    fn sample_rate(&self) -> u32 {
        self.source_rate
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Blocks for the next event; stops once the session is finished and
    /// its events read.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<LiveEvent>> {
        self.next(py, None)
    }
}

/// A session dropped unfinished waits for its thread's step in hand
/// (seconds of decoding); Python's other threads run meanwhile.
impl Drop for LiveSession {
    fn drop(&mut self) {
        let live = self
            .live
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(live) = live {
            Python::attach(|py| py.detach(move || drop(live)));
        }
    }
}

impl Feed {
    /// Writes samples (converted to the model's rate), waiting for room;
    /// false when the inference thread has stopped.
    fn write(&mut self, samples: &[f32]) -> Result<bool, String> {
        match &mut self.resampler {
            None => Ok(self.input.write_waiting(samples)),
            Some(r) => {
                let mut out = Vec::with_capacity(samples.len());
                r.push(samples, &mut out).map_err(|e| e.to_string())?;
                Ok(self.input.write_waiting(&out))
            }
        }
    }

    /// Writes the resampler's tail.
    fn flush(&mut self) -> Result<bool, String> {
        match &mut self.resampler {
            None => Ok(true),
            Some(r) => {
                let mut out = Vec::new();
                r.finish(&mut out).map_err(|e| e.to_string())?;
                Ok(self.input.write_waiting(&out))
            }
        }
    }
}

/// A line of a live session: `kind` "partial" (the utterance so far; its
/// first `stable` words are committed and will not change) or "final" (an
/// utterance ended; every word is stable); `words` with times from the
/// stream's start; `time`: seconds from the first push to the event.
#[pyclass(module = "pulsed", frozen, get_all)]
#[derive(Clone, Debug)]
pub struct LiveEvent {
    pub kind: &'static str,
    pub text: String,
    pub words: Vec<Word>,
    pub stable: usize,
    /// Which utterance of the stream (from 0) the line is of: unpaced, a
    /// later utterance's partial lines may come before an earlier one's
    /// final line.
    pub utterance: u64,
    pub time: f64,
}

#[pymethods]
impl LiveEvent {
    /// True for a final line.
    #[getter]
    fn is_final(&self) -> bool {
        self.kind == "final"
    }

    fn __repr__(&self) -> String {
        format!(
            "LiveEvent({:?}, {:?}, stable={})",
            self.kind, self.text, self.stable
        )
    }
}

/// A lock that a panic elsewhere does not poison for good.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
