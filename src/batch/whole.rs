//! A pool for models that take a whole recording at a time (Whisper's
//! windows and seeking need all of it): each worker builds its own model
//! instance once and transcribes one file after another, or a group of
//! files at once when its model decodes several together
//! ([`FileWorker::group`]); results come back as [`FileResult`]s in
//! completion order, as from [`super::run`].

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use super::pool::{panic_message, receive};
use super::{BatchOptions, Control, FileResult, Outcome, Summary};

/// One worker's model: transcribes a file, reporting the seconds of audio
/// it has got through to `progress` as it goes.
pub trait FileWorker {
    fn transcribe(
        &mut self,
        path: &Path,
        control: &Control,
        progress: &mut dyn FnMut(f64),
    ) -> Outcome;

    /// How many files, and how many bytes of them, the worker takes at
    /// once (at least one file, whatever its size): more than one when
    /// [`FileWorker::transcribe_group`] decodes files together.
    fn group(&self) -> Group {
        Group::ONE
    }

    /// Transcribes `paths` together, one outcome each in order; `progress`
    /// gets a file's index in `paths` with its seconds. By default, one
    /// file after another.
    fn transcribe_group(
        &mut self,
        paths: &[&Path],
        control: &Control,
        progress: &mut dyn FnMut(usize, f64),
    ) -> Vec<Outcome> {
        one_by_one(self, paths, control, progress)
    }
}

/// [`FileWorker::transcribe_group`] one file after another.
pub fn one_by_one<W: FileWorker + ?Sized>(
    worker: &mut W,
    paths: &[&Path],
    control: &Control,
    progress: &mut dyn FnMut(usize, f64),
) -> Vec<Outcome> {
    paths
        .iter()
        .enumerate()
        .map(|(i, p)| worker.transcribe(p, control, &mut |s| progress(i, s)))
        .collect()
}

/// The most a worker takes at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub files: usize,
    /// Summed file sizes on disk (what the worker holds decoded at once).
    pub bytes: u64,
}

impl Group {
    /// One file at a time.
    pub const ONE: Group = Group {
        files: 1,
        bytes: u64::MAX,
    };
}

/// Runs `files` on `opts.jobs` workers made by `make` (one each; a worker
/// that cannot be made fails every file it takes, with the reason), calling
/// `on_result` on this thread as each file finishes. A panic inside a
/// worker fails that file only. When `on_result` errs, the run stops and
/// that error is returned. `opts.streams` and `opts.chunk_samples` are not
/// used.
pub fn run_whole<W, E>(
    files: &[PathBuf],
    opts: BatchOptions,
    control: &Control,
    make: &(dyn Fn() -> crate::Result<W> + Sync),
    mut on_result: impl FnMut(FileResult) -> Result<(), E>,
) -> Result<Summary, E>
where
    W: FileWorker,
{
    let started = Instant::now();
    let jobs = opts.jobs.clamp(1, files.len().max(1));
    let mut order: Vec<usize> = (0..files.len()).collect();
    let sizes: Vec<u64> = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .collect();
    if opts.longest_first {
        order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    }
    let queue = Queue {
        order: &order,
        sizes: &sizes,
        next: AtomicUsize::new(0),
        jobs,
    };
    let mut summary = Summary::default();
    let mut first_err = None;
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        for _ in 0..jobs {
            let (tx, queue) = (tx.clone(), &queue);
            s.spawn(move || worker(files, queue, control, make, tx));
        }
        drop(tx);
        first_err = receive(rx, &mut summary, control, &mut on_result);
    });
    summary.close(files.len(), started);
    match first_err {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

/// The files not yet taken, in the order they are handed out.
struct Queue<'a> {
    order: &'a [usize],
    sizes: &'a [u64],
    next: AtomicUsize,
    jobs: usize,
}

impl Queue<'_> {
    fn is_empty(&self) -> bool {
        self.next.load(Ordering::SeqCst) >= self.order.len()
    }

    /// The next files (indices into the run's files) for a worker that
    /// takes `group` at once: no more than its share of what is left (so
    /// that every worker gets files), rounded down to a power of two when
    /// below the group; empty when none is left.
    fn take(&self, group: Group) -> Vec<usize> {
        let mut at = self.next.load(Ordering::SeqCst);
        loop {
            let left = self.order.len().saturating_sub(at);
            if left == 0 {
                return Vec::new();
            }
            let mut share = left.div_ceil(self.jobs).min(group.files).max(1);
            if share < group.files {
                // a power of two, so that the tail of a run comes in few
                // sizes (a GPU plans and captures a graph per size)
                share = 1 << share.ilog2();
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

fn worker<W: FileWorker>(
    files: &[PathBuf],
    queue: &Queue<'_>,
    control: &Control,
    make: &(dyn Fn() -> crate::Result<W> + Sync),
    tx: mpsc::Sender<FileResult>,
) {
    let mut model: Option<W> = None;
    let mut why = None;
    while !control.is_stopped() && !queue.is_empty() {
        if model.is_none() && why.is_none() {
            match make() {
                Ok(m) => model = Some(m),
                Err(e) => why = Some(e),
            }
        }
        let group = model.as_ref().map_or(Group::ONE, |m| m.group());
        let taken = queue.take(group);
        if taken.is_empty() {
            break;
        }
        let paths: Vec<&Path> = taken.iter().map(|&i| files[i].as_path()).collect();
        let t0 = Instant::now();
        let mut done_s = vec![0f64; taken.len()];
        let outcomes = match (&mut model, &why) {
            (Some(m), _) => catch_unwind(AssertUnwindSafe(|| {
                m.transcribe_group(&paths, control, &mut |k, s| {
                    let more = ((s - done_s[k]).max(0.0) * 16_000.0) as u64;
                    control.count_pushed(more);
                    done_s[k] = done_s[k].max(s);
                })
            }))
            .unwrap_or_else(|panic| {
                model = None; // its state is unknown after a panic
                let why = panic_message(&panic);
                paths
                    .iter()
                    .map(|p| Outcome::Failed(format!("{}: internal error: {why}", p.display())))
                    .collect()
            }),
            (None, Some(e)) => paths
                .iter()
                .map(|p| Outcome::Failed(format!("{}: {e}", p.display())))
                .collect(),
            (None, None) => paths
                .iter()
                .map(|p| Outcome::Failed(format!("{}: no model", p.display())))
                .collect(),
        };
        let mut outcomes = outcomes.into_iter();
        for (k, &index) in taken.iter().enumerate() {
            let outcome = outcomes.next().unwrap_or_else(|| {
                Outcome::Failed(format!("{}: no outcome", files[index].display()))
            });
            if !matches!(outcome, Outcome::Cancelled) {
                control.count_finished();
            }
            let r = FileResult {
                index,
                path: files[index].clone(),
                outcome,
                audio_s_processed: done_s[k],
                elapsed_s: t0.elapsed().as_secs_f64(),
            };
            if tx.send(r).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Transcript;

    struct Fake(usize);

    impl FileWorker for Fake {
        fn transcribe(
            &mut self,
            path: &Path,
            _: &Control,
            progress: &mut dyn FnMut(f64),
        ) -> Outcome {
            self.0 += 1;
            progress(1.0);
            match path.to_str() {
                Some("panic") => panic!("boom"),
                Some("bad") => Outcome::Failed("bad: unreadable".into()),
                _ => Outcome::Done {
                    transcript: Transcript {
                        text: path.display().to_string(),
                        ..Transcript::default()
                    },
                    duration_s: 1.0,
                    extra: Default::default(),
                },
            }
        }
    }

    #[test]
    fn every_file_gets_an_outcome() {
        let files: Vec<PathBuf> = ["a", "panic", "bad", "b"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let control = Control::new();
        let opts = BatchOptions {
            jobs: 2,
            ..BatchOptions::default()
        };
        let mut got = Vec::new();
        let s = run_whole(&files, opts, &control, &|| Ok(Fake(0)), |r| {
            got.push((r.index, r.outcome));
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!((s.transcribed, s.failed), (2, 2));
        got.sort_by_key(|g| g.0);
        assert!(matches!(&got[1].1, Outcome::Failed(e) if e.contains("internal error: boom")));
        assert!(matches!(&got[3].1, Outcome::Done { transcript, .. } if transcript.text == "b"));
        assert_eq!(control.files_finished(), 4);
    }

    /// Takes up to `.0` files at once and records each group it was given.
    struct Grouped(usize, std::sync::Arc<std::sync::Mutex<Vec<Vec<String>>>>);

    impl FileWorker for Grouped {
        fn transcribe(&mut self, _: &Path, _: &Control, _: &mut dyn FnMut(f64)) -> Outcome {
            unreachable!("grouped workers transcribe groups")
        }

        fn group(&self) -> Group {
            Group {
                files: self.0,
                bytes: u64::MAX,
            }
        }

        fn transcribe_group(
            &mut self,
            paths: &[&Path],
            _: &Control,
            progress: &mut dyn FnMut(usize, f64),
        ) -> Vec<Outcome> {
            let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            self.1.lock().unwrap().push(names.clone());
            names
                .into_iter()
                .enumerate()
                .map(|(k, text)| {
                    progress(k, 2.0);
                    Outcome::Done {
                        transcript: Transcript {
                            text,
                            ..Transcript::default()
                        },
                        duration_s: 2.0,
                        extra: Default::default(),
                    }
                })
                .collect()
        }
    }

    #[test]
    fn grouped_workers_share_the_files_and_answer_each() {
        let files: Vec<PathBuf> = (0..10).map(|i| PathBuf::from(format!("f{i}"))).collect();
        for (jobs, most) in [(1, 4), (2, 4), (4, 8)] {
            let groups = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let control = Control::new();
            let opts = BatchOptions {
                jobs,
                ..BatchOptions::default()
            };
            let make = || Ok(Grouped(most, groups.clone()));
            let mut got = Vec::new();
            let s = run_whole(&files, opts, &control, &make, |r| {
                assert_eq!(r.audio_s_processed, 2.0);
                got.push((r.index, r.outcome));
                Ok::<(), ()>(())
            })
            .unwrap();
            assert_eq!(s.transcribed, 10);
            got.sort_by_key(|g| g.0);
            for (i, (index, outcome)) in got.iter().enumerate() {
                assert_eq!(*index, i);
                assert!(
                    matches!(outcome, Outcome::Done { transcript, .. } if transcript.text == format!("f{i}"))
                );
            }
            let groups = groups.lock().unwrap();
            // never more than asked, nor than a fair share of what was left
            assert!(groups.iter().all(|g| !g.is_empty() && g.len() <= most));
            assert!(groups[0].len() <= 10usize.div_ceil(jobs));
            if jobs == 1 {
                assert_eq!(
                    groups.iter().map(Vec::len).collect::<Vec<_>>(),
                    vec![4, 4, 2]
                );
            }
        }
    }

    #[test]
    fn a_group_stops_at_its_bytes_but_takes_one_file_at_least() {
        let sizes = [5u64, 5, 20, 1, 1];
        let order: Vec<usize> = (0..5).collect();
        let q = Queue {
            order: &order,
            sizes: &sizes,
            next: AtomicUsize::new(0),
            jobs: 1,
        };
        let g = Group {
            files: 4,
            bytes: 10,
        };
        assert_eq!(q.take(g), vec![0, 1]);
        assert_eq!(q.take(g), vec![2]);
        assert_eq!(q.take(g), vec![3, 4]);
        assert!(q.take(g).is_empty() && q.is_empty());
    }

    #[test]
    fn a_worker_that_cannot_start_fails_its_files() {
        let files = vec![PathBuf::from("a")];
        let control = Control::new();
        let mut got = Vec::new();
        let make = || Err::<Fake, _>(crate::Error::Other("no model here".into()));
        run_whole(&files, BatchOptions::default(), &control, &make, |r| {
            got.push(r.outcome);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!(matches!(&got[0], Outcome::Failed(e) if e == "a: no model here"));
    }
}
