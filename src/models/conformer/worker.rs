//! The conformer as a worker of the file pool (`crate::batch`): a lane of
//! its own of the recogniser's engine (on a GPU, its own CUDA stream, so
//! workers run side by side) and either one streaming session, reset from
//! file to file, or a batched session whose cohort of files is the
//! worker's group (`super::cohort`).

use super::{Mode, MultiStreamTranscriber, Recognizer, StreamTranscriber};
use crate::audio::WavStream;
use crate::batch::{BatchOptions, FileWorker, Group, Job, Outcome};
use crate::engine::Engine;
use crate::Result;

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

/// One pool worker of a [`Recognizer`] (shared read-only by all of them).
pub struct ConformerWorker<'a> {
    rec: &'a Recognizer,
    engine: Engine,
    /// Samples read from a file at a time.
    chunk: usize,
    /// The batched session, when the worker runs its files in cohorts.
    cohort: Option<MultiStreamTranscriber>,
    /// Else one file at a time: made at the first file, then reset.
    stream: Option<StreamTranscriber>,
    /// Why the batched session asked for could not be made.
    fell_back: Option<String>,
}

impl<'a> ConformerWorker<'a> {
    /// A worker for a run with `opts`: a batched session of `opts.streams`
    /// streams when that is more than one (streamed mode only), else, or
    /// when the session cannot be made ([`FileWorker::fallback`]), one stream.
    pub fn new(rec: &'a Recognizer, opts: BatchOptions) -> Result<Self> {
        Self::with_batch(rec, opts, &|engine| rec.batch_on(engine, opts.streams))
    }

    /// [`ConformerWorker::new`], with the batched session made by `make_batch`.
    fn with_batch(
        rec: &'a Recognizer,
        opts: BatchOptions,
        make_batch: &dyn Fn(&Engine) -> Result<MultiStreamTranscriber>,
    ) -> Result<Self> {
        let engine = rec.engine().lane()?;
        let batched = opts.streams > 1 && matches!(rec.options().mode, Mode::Streamed { .. });
        // a model with no batched form (or no room for one) still runs, one
        // stream at a time, and the run's summary says so
        let (cohort, fell_back) = match batched.then(|| make_batch(&engine)) {
            Some(Ok(bt)) => (Some(bt), None),
            Some(Err(e)) => (None, Some(e.to_string())),
            None => (None, None),
        };
        Ok(ConformerWorker {
            rec,
            engine,
            chunk: opts.chunk_samples.max(1),
            cohort,
            stream: None,
            fell_back,
        })
    }
}

impl FileWorker for ConformerWorker<'_> {
    fn group(&self) -> Group {
        match &self.cohort {
            None => Group::ONE,
            Some(bt) => Group {
                files: bt.batch(),
                bytes: u64::MAX,
                fair_share: false,
            },
        }
    }

    fn transcribe(&mut self, job: &mut Job<'_>) -> Result<()> {
        let rate = self.rec.sample_rate();
        if let Some(bt) = &mut self.cohort {
            return super::cohort::run(bt, job, self.chunk, rate);
        }
        for k in 0..job.len() {
            let outcome = match self.rec.options().mode {
                Mode::Whole => whole(self.rec, &self.engine, job, k),
                Mode::Streamed { .. } => {
                    streamed(self.rec, &self.engine, &mut self.stream, job, k, self.chunk)
                }
            };
            job.finish(k, outcome);
        }
        Ok(())
    }

    fn fallback(&self) -> Option<&str> {
        self.fell_back.as_deref()
    }
}

/// The whole utterance at once: the user chose memory for it.
fn whole(rec: &Recognizer, engine: &Engine, job: &mut Job<'_>, k: usize) -> Outcome {
    let path = job.path(k);
    let audio = match crate::audio::load_wav(path, rec.sample_rate()) {
        Ok(a) => a,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    match rec.transcribe_on(engine, &audio.samples) {
        Ok(transcript) => {
            job.progress(k, audio.samples.len() as f64 / rec.sample_rate() as f64);
            Outcome::Done {
                transcript,
                duration_s: audio.duration_s,
                extra: Default::default(),
            }
        }
        Err(e) => Outcome::Failed(format!("{}: {e}", path.display())),
    }
}

/// File `k` streamed chunk by chunk through the worker's session, so that
/// memory does not grow with its length.
fn streamed(
    rec: &Recognizer,
    engine: &Engine,
    stream: &mut Option<StreamTranscriber>,
    job: &mut Job<'_>,
    k: usize,
    chunk: usize,
) -> Outcome {
    let path = job.path(k);
    let name = path.display();
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
    let mut pushed = 0usize;
    loop {
        if job.control().is_stopped() {
            return Outcome::Cancelled;
        }
        match wav.next_chunk(chunk) {
            Ok(Some(samples)) => {
                if let Err(e) = st.push(&samples) {
                    return Outcome::Failed(format!("{name}: {e}"));
                }
                pushed += samples.len();
                job.progress(k, pushed as f64 / rec.sample_rate() as f64);
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

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::asr::RecognizerOptions;
    use crate::batch::{run, Control, Summary};
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
        make_batch: &(dyn Fn(&Engine) -> Result<MultiStreamTranscriber> + Sync),
    ) -> (Summary, Vec<String>) {
        let mut texts = vec![String::new(); files.len()];
        let make = || ConformerWorker::with_batch(rec, opts, make_batch);
        let summary = run(files, opts, &Control::new(), &make, |r| {
            match r.outcome {
                Outcome::Done { transcript, .. } => texts[r.index] = transcript.text,
                other => panic!("{}: {other:?}", r.path.display()),
            }
            Ok::<(), ()>(())
        })
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
        let batched = |_: &Engine| rec.batch_on(&Engine::Cpu, 3);
        let (summary, want) = texts(&rec, &files, opts, &batched);
        assert_eq!(summary.transcribed, 5);
        assert_eq!(summary.single_stream_workers, 0);
        assert_eq!(summary.single_stream_reason, None);

        let refuse = |_: &Engine| Err(crate::Error::Other("no room for 3 streams".into()));
        let (summary, got) = texts(&rec, &files, opts, &refuse);
        assert_eq!((summary.transcribed, summary.failed), (5, 0));
        assert_eq!(summary.single_stream_workers, 2);
        let reason = summary.single_stream_reason.unwrap();
        assert!(reason.contains("no room for 3 streams"), "{reason}");
        assert_eq!(got, want);

        // only the first worker to ask is refused: one runs cohorts, one falls back
        let asked = AtomicUsize::new(0);
        let first_refused = |e: &Engine| match asked.fetch_add(1, Ordering::SeqCst) {
            0 => refuse(e),
            _ => batched(e),
        };
        let (summary, got) = texts(&rec, &files, opts, &first_refused);
        assert_eq!(summary.single_stream_workers, 1);
        assert_eq!(got, want);
    }
}
