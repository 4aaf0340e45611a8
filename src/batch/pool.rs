//! The worker pool: N threads share one [`Recognizer`], each with its own
//! streaming session, and hand results back in completion order.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

use crate::asr::{Mode, MultiStreamTranscriber, Recognizer, StreamTranscriber};
use crate::audio::WavStream;
use crate::decode::Transcript;
use crate::engine::Engine;

/// Settings of a batch run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// Worker threads (at least 1; more than the files is pointless).
    pub jobs: usize,
    /// Samples read from a file and pushed per step: bounds a worker's audio
    /// memory and how long a stop request waits.
    pub chunk_samples: usize,
    /// Start the largest files first (by size on disk), so that a long file
    /// met last does not leave the other workers idle; results then come in
    /// roughly that order.
    pub longest_first: bool,
    /// Streams each worker runs in one chunk step (a batched session; 1:
    /// one stream per worker). Files go in cohorts of this many; a cohort
    /// lasts as long as its longest file, so with `longest_first` cohorts
    /// hold files of similar lengths and little time is spent on silence.
    pub streams: usize,
}

impl Default for BatchOptions {
    /// One worker per core, 1.28 s chunks (four 320 ms pulses), files in the given order.
    fn default() -> Self {
        BatchOptions {
            jobs: default_jobs(),
            chunk_samples: 20_480,
            longest_first: false,
            streams: 1,
        }
    }
}

/// Streams per worker step that suit `files` files on `jobs` workers of
/// `engine`: enough to give every worker a full cohort, at most 4 on the
/// CPU and 32 on a GPU (where measured throughput stops growing; see
/// `docs/notes/gpu-notes.md`), 1 when there are no more files than workers. Each
/// stream holds its file open, so all workers together keep at most
/// [`OPEN_FILES`] open.
pub fn default_streams(engine: &Engine, files: usize, jobs: usize) -> usize {
    let cap = match engine {
        Engine::Cpu => 4,
        #[cfg(feature = "cuda")]
        Engine::Gpu { .. } => 32,
    };
    let jobs = jobs.max(1);
    files.div_ceil(jobs).min(cap).min(OPEN_FILES / jobs).max(1)
}

/// Files all workers of a batched run keep open at most by default: half
/// the usual soft limit of 1,024 descriptors.
pub const OPEN_FILES: usize = 512;

/// The number of cores this process may use (1 if unknown).
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Shared between a run and whoever watches or stops it (a Ctrl-C handler, a
/// progress bar); every method may be called from any thread.
#[derive(Debug, Default)]
pub struct Control {
    stop: AtomicBool,
    samples_pushed: AtomicU64,
    files_finished: AtomicU64,
}

impl Control {
    /// A fresh control: not stopped, nothing counted.
    pub fn new() -> Control {
        Control::default()
    }

    /// Asks the workers to stop: no new file starts, files in flight are
    /// dropped at their next chunk (reported as [`Outcome::Cancelled`]).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Whether [`Control::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Model-rate samples pushed through the model so far, by all workers.
    pub fn samples_pushed(&self) -> u64 {
        self.samples_pushed.load(Ordering::Relaxed)
    }

    /// Files finished so far (transcribed or failed).
    pub fn files_finished(&self) -> u64 {
        self.files_finished.load(Ordering::Relaxed)
    }

    pub(super) fn count_pushed(&self, samples: u64) {
        self.samples_pushed.fetch_add(samples, Ordering::Relaxed);
    }

    pub(super) fn count_finished(&self) {
        self.files_finished.fetch_add(1, Ordering::Relaxed);
    }
}

/// What became of one file.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Transcribed; `duration_s` is the length of the file's audio;
    /// `extra` holds what a model gives beyond the transcript (Whisper's
    /// segments and language), written as JSON-lines fields.
    Done {
        transcript: Transcript,
        duration_s: f64,
        extra: serde_json::Map<String, serde_json::Value>,
    },
    /// Not transcribed, with a one-line reason that names the file.
    Failed(String),
    /// Dropped half-way because the run was stopped.
    Cancelled,
}

/// One file's result, as a worker finished it.
#[derive(Debug, Clone)]
pub struct FileResult {
    /// Position of the file in the list given to [`run`].
    pub index: usize,
    pub path: PathBuf,
    pub outcome: Outcome,
    /// Seconds of audio (at the model rate) this file pushed through the model.
    pub audio_s_processed: f64,
    /// Wall-clock seconds the worker spent on it.
    pub elapsed_s: f64,
}

/// Counts of a finished run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub transcribed: usize,
    pub failed: usize,
    /// Dropped in flight by a stop.
    pub cancelled: usize,
    /// Never started because of a stop.
    pub not_started: usize,
    /// Seconds of audio in the transcribed files.
    pub audio_s: f64,
    /// Wall-clock seconds of the whole run.
    pub wall_s: f64,
    /// Workers of a batched run ([`BatchOptions::streams`] > 1) that could
    /// not build their batched session (out of GPU memory, say) and ran one
    /// stream at a time instead; 0 when every worker ran its cohorts.
    pub single_stream_workers: usize,
    /// Why the first of them could not.
    pub single_stream_reason: Option<String>,
}

impl Summary {
    /// Counts one result.
    fn count(&mut self, r: &FileResult) {
        match &r.outcome {
            Outcome::Done { duration_s, .. } => {
                self.transcribed += 1;
                self.audio_s += duration_s;
            }
            Outcome::Failed(_) => self.failed += 1,
            Outcome::Cancelled => self.cancelled += 1,
        }
    }

    /// Once every worker is done: the files never started, the wall time.
    pub(super) fn close(&mut self, files: usize, started: Instant) {
        self.not_started = files - (self.transcribed + self.failed + self.cancelled);
        self.wall_s = started.elapsed().as_secs_f64();
    }
}

/// Counts and hands on every result the workers send; after `on_result`
/// fails, the run is stopped and later results are only counted. Returns
/// that failure.
pub(super) fn receive<E>(
    rx: mpsc::Receiver<FileResult>,
    summary: &mut Summary,
    control: &Control,
    on_result: &mut impl FnMut(FileResult) -> Result<(), E>,
) -> Option<E> {
    let mut first_err = None;
    for r in rx {
        summary.count(&r);
        if first_err.is_none() {
            if let Err(e) = on_result(r) {
                control.stop();
                first_err = Some(e);
            }
        }
    }
    first_err
}

/// Transcribes `files` on `opts.jobs` threads and calls `on_result` on the
/// calling thread as each file finishes (completion order). Long files are
/// streamed chunk by chunk (in [`Mode::Streamed`]), so memory does not grow
/// with their length. A file that fails, even by a panic in the model, gets a
/// [`Outcome::Failed`] and the run goes on.
///
/// When `on_result` returns an error the run stops (as by
/// [`Control::stop`]), the remaining results are still drained (not passed
/// on) and that error is returned.
///
/// ```no_run
/// use pulsed::asr::{Recognizer, RecognizerOptions};
/// use pulsed::batch::{run, BatchOptions, Control, Outcome};
/// let rec = Recognizer::open(pulsed::models::ModelDir::default_path(), RecognizerOptions::default())?;
/// let files = pulsed::batch::expand_inputs(&["recordings/".into()])?;
/// run(&rec, &files, BatchOptions::default(), &Control::new(), |r| {
///     if let Outcome::Done { transcript, .. } = &r.outcome {
///         println!("{}: {}", r.path.display(), transcript.text);
///     }
///     Ok::<(), std::io::Error>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run<E>(
    rec: &Recognizer,
    files: &[PathBuf],
    opts: BatchOptions,
    control: &Control,
    on_result: impl FnMut(FileResult) -> Result<(), E>,
) -> Result<Summary, E> {
    let streams = opts.streams.max(1);
    let batched = move || rec.engine().lane().and_then(|e| rec.batch_on(&e, streams));
    run_with(rec, files, opts, control, on_result, &batched)
}

/// [`run`], with each batched worker's session made by `make_batch`.
fn run_with<E>(
    rec: &Recognizer,
    files: &[PathBuf],
    opts: BatchOptions,
    control: &Control,
    mut on_result: impl FnMut(FileResult) -> Result<(), E>,
    make_batch: &MakeBatch<'_>,
) -> Result<Summary, E> {
    let started = Instant::now();
    let jobs = opts.jobs.clamp(1, files.len().max(1));
    let chunk = opts.chunk_samples.max(1);
    let next = AtomicUsize::new(0);
    let streams = opts.streams.max(1);
    let batched = streams > 1 && matches!(rec.options().mode, Mode::Streamed { .. });
    let mut order: Vec<usize> = (0..files.len()).collect();
    if opts.longest_first {
        let sizes: Vec<u64> = files
            .iter()
            .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
            .collect();
        order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    }
    let mut summary = Summary::default();
    let mut first_err = None;
    let fell_back = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        for _ in 0..jobs {
            let tx = tx.clone();
            let (next, order, fell_back) = (&next, &order, &fell_back);
            if batched {
                s.spawn(move || {
                    super::cohort::cohort_worker(
                        rec, files, order, next, chunk, make_batch, fell_back, control, tx,
                    )
                });
            } else {
                s.spawn(move || worker(rec, files, order, next, chunk, control, tx));
            }
        }
        drop(tx);
        first_err = receive(rx, &mut summary, control, &mut on_result);
    });
    summary.close(files.len(), started);
    let fell_back = fell_back.into_inner().unwrap_or_else(|e| e.into_inner());
    summary.single_stream_workers = fell_back.len();
    summary.single_stream_reason = fell_back.into_iter().next();
    match first_err {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

/// Makes one worker's batched session.
pub(super) type MakeBatch<'a> = dyn Fn() -> crate::Result<MultiStreamTranscriber> + Sync + 'a;

pub(super) fn worker(
    rec: &Recognizer,
    files: &[PathBuf],
    order: &[usize],
    next: &AtomicUsize,
    chunk: usize,
    control: &Control,
    tx: mpsc::Sender<FileResult>,
) {
    // One session per worker, reused (reset) from file to file, on a lane
    // of its own (on a GPU: its own CUDA stream, so workers run side by side).
    let engine = rec.engine().lane().map_err(|e| e.to_string());
    let mut stream: Option<StreamTranscriber> = None;
    while !control.is_stopped() {
        let Some(&index) = order.get(next.fetch_add(1, Ordering::SeqCst)) else {
            break;
        };
        let path = &files[index];
        let t0 = Instant::now();
        let mut pushed = 0u64;
        let outcome = catch_unwind(AssertUnwindSafe(|| match &engine {
            Ok(engine) => {
                transcribe_file(rec, engine, &mut stream, path, chunk, control, &mut pushed)
            }
            Err(e) => Outcome::Failed(format!("{}: {e}", path.display())),
        }))
        .unwrap_or_else(|panic| {
            stream = None; // its state is unknown after a panic
            Outcome::Failed(format!(
                "{}: internal error: {}",
                path.display(),
                panic_message(&panic)
            ))
        });
        if !matches!(outcome, Outcome::Cancelled) {
            control.files_finished.fetch_add(1, Ordering::Relaxed);
        }
        let r = FileResult {
            index,
            path: path.clone(),
            outcome,
            audio_s_processed: pushed as f64 / rec.sample_rate() as f64,
            elapsed_s: t0.elapsed().as_secs_f64(),
        };
        if tx.send(r).is_err() {
            break;
        }
    }
}

fn transcribe_file(
    rec: &Recognizer,
    engine: &Engine,
    stream: &mut Option<StreamTranscriber>,
    path: &Path,
    chunk: usize,
    control: &Control,
    pushed: &mut u64,
) -> Outcome {
    let name = path.display();
    if rec.options().mode == Mode::Whole {
        // The whole utterance at once: the user chose memory for it.
        let audio = match crate::audio::load_wav(path, rec.sample_rate()) {
            Ok(a) => a,
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        return match rec.transcribe_on(engine, &audio.samples) {
            Ok(transcript) => {
                *pushed = audio.samples.len() as u64;
                control.samples_pushed.fetch_add(*pushed, Ordering::Relaxed);
                Outcome::Done {
                    transcript,
                    duration_s: audio.duration_s,
                    extra: Default::default(),
                }
            }
            Err(e) => Outcome::Failed(format!("{name}: {e}")),
        };
    }
    let mut wav = match WavStream::open(path, rec.sample_rate()) {
        Ok(w) => w,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let st = match stream {
        Some(st) => {
            st.reset();
            st
        }
        None => match rec.stream_on(engine) {
            Ok(st) => stream.insert(st),
            Err(e) => return Outcome::Failed(format!("{name}: {e}")),
        },
    };
    loop {
        if control.is_stopped() {
            return Outcome::Cancelled;
        }
        match wav.next_chunk(chunk) {
            Ok(Some(samples)) => {
                if let Err(e) = st.push(&samples) {
                    return Outcome::Failed(format!("{name}: {e}"));
                }
                *pushed += samples.len() as u64;
                control
                    .samples_pushed
                    .fetch_add(samples.len() as u64, Ordering::Relaxed);
            }
            Ok(None) => break,
            Err(e) => return Outcome::Failed(e.to_string()),
        }
    }
    match st.finish() {
        Ok(transcript) => Outcome::Done {
            transcript,
            duration_s: wav.source_duration_s(),
            extra: Default::default(),
        },
        Err(e) => Outcome::Failed(format!("{name}: {e}")),
    }
}

pub(super) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::asr::RecognizerOptions;
    use crate::models::ModelDir;

    fn heldout(n: usize) -> Vec<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/asr/heldout");
        (0..n).map(|i| dir.join(format!("{i:02}.wav"))).collect()
    }

    /// The run's summary and each file's text, in file order.
    fn texts(
        rec: &Recognizer,
        files: &[PathBuf],
        opts: BatchOptions,
        make: &MakeBatch<'_>,
    ) -> (Summary, Vec<String>) {
        let mut texts = vec![String::new(); files.len()];
        let summary = run_with(
            rec,
            files,
            opts,
            &Control::new(),
            |r| {
                match r.outcome {
                    Outcome::Done { transcript, .. } => texts[r.index] = transcript.text,
                    other => panic!("{}: {other:?}", r.path.display()),
                }
                Ok::<(), ()>(())
            },
            make,
        )
        .unwrap();
        (summary, texts)
    }

    #[test]
    fn workers_without_a_batched_session_run_one_stream_and_say_why() {
        let rec = Recognizer::open(ModelDir::default_path(), RecognizerOptions::default()).unwrap();
        let files = heldout(5);
        let opts = BatchOptions {
            jobs: 2,
            streams: 3,
            ..BatchOptions::default()
        };
        let batched = || rec.batch_on(&Engine::Cpu, 3);
        let (summary, want) = texts(&rec, &files, opts, &batched);
        assert_eq!(summary.transcribed, 5);
        assert_eq!(summary.single_stream_workers, 0);
        assert_eq!(summary.single_stream_reason, None);

        let refuse = || Err(crate::Error::Other("no room for 3 streams".into()));
        let (summary, got) = texts(&rec, &files, opts, &refuse);
        assert_eq!((summary.transcribed, summary.failed), (5, 0));
        assert_eq!(summary.single_stream_workers, 2);
        let reason = summary.single_stream_reason.unwrap();
        assert!(reason.contains("no room for 3 streams"), "{reason}");
        assert_eq!(got, want);

        // only the first worker to ask is refused: one runs cohorts, one falls back
        let asked = AtomicUsize::new(0);
        let first_refused = || match asked.fetch_add(1, Ordering::SeqCst) {
            0 => refuse(),
            _ => batched(),
        };
        let (summary, got) = texts(&rec, &files, opts, &first_refused);
        assert_eq!(summary.single_stream_workers, 1);
        assert_eq!(got, want);
    }
}
