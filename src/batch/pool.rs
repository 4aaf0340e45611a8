//! The pool: `jobs` threads, each with a [`FileWorker`] of its own, take
//! groups of files from one queue; results come back on the calling thread
//! in completion order.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

use super::{BatchOptions, Control, FileResult, FileWorker, Group, Job, Summary};

/// Transcribes `files` on `opts.jobs` threads, each with a worker made by
/// `make` on that thread, and calls `on_result` on the calling thread as
/// each file finishes (completion order). A worker that cannot be made
/// fails every file its thread takes, with the reason; a file that fails,
/// even by a panic in the model, gets an [`super::Outcome::Failed`] and the
/// run goes on.
///
/// When `on_result` returns an error the run stops (as by
/// [`Control::stop`]), the remaining results are still drained (not passed
/// on) and that error is returned.
///
/// ```no_run
/// use pulsed::asr::{ConformerWorker, Recognizer, RecognizerOptions};
/// use pulsed::batch::{run, BatchOptions, Control, Outcome};
/// let rec = Recognizer::open(pulsed::models::ModelDir::default_path(), RecognizerOptions::default())?;
/// let files = pulsed::batch::expand_inputs(&["recordings/".into()])?;
/// let opts = BatchOptions::default();
/// run(&files, opts, &Control::new(), &|| ConformerWorker::new(&rec, opts), |r| {
///     if let Outcome::Done { transcript, .. } = &r.outcome {
///         println!("{}: {}", r.path.display(), transcript.text);
///     }
///     Ok::<(), std::io::Error>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run<W: FileWorker, E>(
    files: &[PathBuf],
    opts: BatchOptions,
    control: &Control,
    make: &(dyn Fn() -> crate::Result<W> + Sync),
    mut on_result: impl FnMut(FileResult) -> Result<(), E>,
) -> Result<Summary, E> {
    let started = Instant::now();
    let jobs = opts.jobs.clamp(1, files.len().max(1));
    let queue = Queue::new(files, opts.longest_first, jobs);
    let mut summary = Summary::default();
    let mut first_err = None;
    let fell_back = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        for _ in 0..jobs {
            let (tx, queue, fell_back) = (tx.clone(), &queue, &fell_back);
            s.spawn(move || {
                if let Some(why) = work(files, queue, control, make, &tx) {
                    fell_back
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(why);
                }
            });
        }
        drop(tx);
        first_err = receive(rx, &mut summary, control, &mut on_result);
    });
    let fell_back = fell_back.into_inner().unwrap_or_else(|e| e.into_inner());
    summary.close(files.len(), started, fell_back);
    match first_err {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

/// One thread: makes its worker (again after a panic or an error left it
/// in an unknown state) and hands it groups until none is left or the run
/// stops. Returns why its worker fell back to one stream, if it did.
fn work<W: FileWorker>(
    files: &[PathBuf],
    queue: &Queue,
    control: &Control,
    make: &(dyn Fn() -> crate::Result<W> + Sync),
    tx: &mpsc::Sender<FileResult>,
) -> Option<String> {
    let mut worker: Option<W> = None;
    // a worker that cannot be made is not tried again
    let mut unmade: Option<String> = None;
    let mut fell_back = None;
    // checked before a worker is made: one with no file left builds nothing
    while !control.is_stopped() && !queue.is_empty() {
        if worker.is_none() && unmade.is_none() {
            match make() {
                Ok(w) => {
                    fell_back = fell_back.or_else(|| w.fallback().map(str::to_string));
                    worker = Some(w);
                }
                Err(e) => unmade = Some(e.to_string()),
            }
        }
        let taken = queue.take(worker.as_ref().map_or(Group::ONE, W::group));
        if taken.is_empty() {
            break;
        }
        let mut job = Job::new(files, taken, control, tx);
        let error = match &mut worker {
            None => unmade.clone(),
            Some(w) => match catch_unwind(AssertUnwindSafe(|| w.transcribe(&mut job))) {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(panic) => Some(format!("internal error: {}", panic_message(&panic))),
            },
        };
        if error.is_some() {
            // dropped before its successor is made: a GPU session's memory freed first
            worker = None;
        }
        job.close(error.as_deref());
    }
    fell_back
}

/// Counts and hands on every result the workers send; after `on_result`
/// fails, the run is stopped and later results are only counted. Returns
/// that failure.
fn receive<E>(
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

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// The files not yet taken, in the order they are handed out.
struct Queue {
    order: Vec<usize>,
    sizes: Vec<u64>,
    next: AtomicUsize,
    jobs: usize,
}

impl Queue {
    fn new(files: &[PathBuf], longest_first: bool, jobs: usize) -> Queue {
        let sizes: Vec<u64> = files
            .iter()
            .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
            .collect();
        let mut order: Vec<usize> = (0..files.len()).collect();
        if longest_first {
            order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
        }
        Queue {
            order,
            sizes,
            next: AtomicUsize::new(0),
            jobs,
        }
    }

    fn is_empty(&self) -> bool {
        self.next.load(Ordering::SeqCst) >= self.order.len()
    }

    /// The next files (indices into the run's files) for a worker that
    /// takes `group` at once, up to its bytes (one file at least); empty
    /// when none is left.
    fn take(&self, group: Group) -> Vec<usize> {
        let mut at = self.next.load(Ordering::SeqCst);
        loop {
            let left = self.order.len().saturating_sub(at);
            if left == 0 {
                return Vec::new();
            }
            let mut share = left.min(group.files).max(1);
            if group.fair_share {
                share = left.div_ceil(self.jobs).min(group.files).max(1);
                if share < group.files {
                    share = 1 << share.ilog2();
                }
            }
            let (mut n, mut bytes) = (0, 0u64);
            for &i in &self.order[at..at + share] {
                bytes = bytes.saturating_add(self.sizes[i]);
                if n > 0 && bytes > group.bytes {
                    break;
                }
                n += 1;
            }
            match self
                .next
                .compare_exchange(at, at + n, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return self.order[at..at + n].to_vec(),
                Err(now) => at = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::batch::Outcome;
    use crate::decode::Transcript;

    fn done(text: String) -> Outcome {
        Outcome::Done {
            transcript: Transcript {
                text,
                ..Transcript::default()
            },
            duration_s: 1.0,
            extra: Default::default(),
        }
    }

    /// Takes up to `files` at once, records each group it was given and
    /// answers each file by its name: "panic", "bad" (a failed file),
    /// "error" (a failed step, every file of the group's), "stop" (stops
    /// the run), else its name as the text.
    struct Fake {
        group: Group,
        groups: Arc<Mutex<Vec<Vec<String>>>>,
    }

    impl FileWorker for Fake {
        fn group(&self) -> Group {
            self.group
        }

        fn transcribe(&mut self, job: &mut Job<'_>) -> crate::Result<()> {
            let names: Vec<String> = job
                .paths()
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            self.groups.lock().unwrap().push(names.clone());
            for (k, name) in names.into_iter().enumerate() {
                job.progress(k, 1.0);
                match name.as_str() {
                    "panic" => panic!("boom"),
                    "error" => return Err(crate::Error::Other("step failed".into())),
                    "stop" => job.control().stop(),
                    "bad" => job.finish(k, Outcome::Failed("bad: unreadable".into())),
                    _ => job.finish(k, done(name)),
                }
            }
            Ok(())
        }
    }

    /// Runs `names` on `jobs` workers taking `group`: each file's outcome
    /// in file order, the groups the workers were given, the summary.
    fn run_fake(
        names: &[&str],
        jobs: usize,
        group: Group,
    ) -> (Vec<Outcome>, Vec<Vec<String>>, Summary) {
        let files: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
        let groups = Arc::new(Mutex::new(Vec::new()));
        let make = || {
            Ok(Fake {
                group,
                groups: groups.clone(),
            })
        };
        let opts = BatchOptions {
            jobs,
            ..BatchOptions::default()
        };
        let mut got = vec![None; files.len()];
        let s = run(&files, opts, &Control::new(), &make, |r| {
            if matches!(r.outcome, Outcome::Done { .. }) {
                assert_eq!(r.audio_s_processed, 1.0);
            }
            got[r.index] = Some(r.outcome);
            Ok::<(), ()>(())
        })
        .unwrap();
        let got = got.into_iter().map(|o| o.unwrap_or(Outcome::Cancelled));
        let groups = groups.lock().unwrap().clone();
        (got.collect(), groups, s)
    }

    fn failed(o: &Outcome) -> &str {
        match o {
            Outcome::Failed(e) => e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_file_gets_an_outcome() {
        let names = ["a", "panic", "bad", "b", "error", "c"];
        let (got, groups, s) = run_fake(&names, 2, Group::ONE);
        assert_eq!((s.transcribed, s.failed), (3, 3));
        assert_eq!(failed(&got[1]), "panic: internal error: boom");
        assert_eq!(failed(&got[4]), "error: step failed");
        assert!(matches!(&got[5], Outcome::Done { transcript, .. } if transcript.text == "c"));
        assert_eq!(groups.len(), 6);

        // a failed step fails the group's files it left; the next worker is fresh
        let group = Group {
            files: 3,
            ..Group::ONE
        };
        let (got, groups, s) = run_fake(&["a", "error", "b", "c"], 1, group);
        assert_eq!((s.transcribed, s.failed), (2, 2));
        assert!(matches!(&got[0], Outcome::Done { .. }));
        assert_eq!(failed(&got[2]), "b: step failed");
        assert_eq!(groups, [vec!["a", "error", "b"], vec!["c"]]);
    }

    #[test]
    fn a_stop_cancels_what_is_in_flight_and_starts_nothing() {
        let group = Group {
            files: 2,
            ..Group::ONE
        };
        let (got, _, s) = run_fake(&["stop", "a", "b"], 1, group);
        assert!(matches!(got[0], Outcome::Cancelled));
        assert!(matches!(got[1], Outcome::Done { .. }));
        assert_eq!((s.transcribed, s.cancelled, s.not_started), (1, 1, 1));
    }

    #[test]
    fn fair_shares_keep_every_worker_busy_and_fixed_widths_take_full_groups() {
        let names: Vec<String> = (0..10).map(|i| format!("f{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        for (jobs, most) in [(1, 4), (2, 4), (4, 8)] {
            let group = Group {
                files: most,
                bytes: u64::MAX,
                fair_share: true,
            };
            let (got, groups, s) = run_fake(&names, jobs, group);
            assert_eq!(s.transcribed, 10);
            for (i, o) in got.iter().enumerate() {
                assert!(
                    matches!(o, Outcome::Done { transcript, .. } if transcript.text == names[i])
                );
            }
            // never more than asked, nor than a fair share of what was left
            assert!(groups.iter().all(|g| !g.is_empty() && g.len() <= most));
            assert!(groups[0].len() <= 10usize.div_ceil(jobs));
            if jobs == 1 {
                let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
                assert_eq!(sizes, [4, 4, 2]);
            }
        }
        let group = Group {
            files: 4,
            ..Group::ONE
        };
        let (_, groups, _) = run_fake(&names, 4, group);
        let mut sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
        sizes.sort();
        assert_eq!(sizes, [2, 4, 4]);
    }

    #[test]
    fn a_group_stops_at_its_bytes_but_takes_one_file_at_least() {
        let q = Queue {
            order: (0..5).collect(),
            sizes: vec![5, 5, 20, 1, 1],
            next: AtomicUsize::new(0),
            jobs: 1,
        };
        let g = Group {
            files: 4,
            bytes: 10,
            fair_share: true,
        };
        assert_eq!(q.take(g), vec![0, 1]);
        assert_eq!(q.take(g), vec![2]);
        assert_eq!(q.take(g), vec![3, 4]);
        assert!(q.take(g).is_empty() && q.is_empty());
    }

    #[test]
    fn a_worker_that_cannot_be_made_fails_its_files() {
        let files = vec![PathBuf::from("a"), PathBuf::from("b")];
        let control = Control::new();
        let mut got = Vec::new();
        let make = || Err::<Fake, _>(crate::Error::Other("no model here".into()));
        run(&files, BatchOptions::default(), &control, &make, |r| {
            got.push(r.outcome);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(failed(&got[0]), "a: no model here");
        assert_eq!(failed(&got[1]), "b: no model here");
        assert_eq!(control.files_finished(), 2);
    }
}
