//! A pool for models that take a whole recording at a time (Whisper's
//! windows and seeking need all of it): each worker builds its own model
//! instance once and transcribes one file after another; results come back
//! as [`FileResult`]s in completion order, as from [`super::run`].

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
    if opts.longest_first {
        let sizes: Vec<u64> = files
            .iter()
            .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
            .collect();
        order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    }
    let next = AtomicUsize::new(0);
    let mut summary = Summary::default();
    let mut first_err = None;
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        for _ in 0..jobs {
            let (tx, next, order) = (tx.clone(), &next, &order);
            s.spawn(move || worker(files, order, next, control, make, tx));
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

fn worker<W: FileWorker>(
    files: &[PathBuf],
    order: &[usize],
    next: &AtomicUsize,
    control: &Control,
    make: &(dyn Fn() -> crate::Result<W> + Sync),
    tx: mpsc::Sender<FileResult>,
) {
    let mut model = None;
    let mut why = None;
    while !control.is_stopped() {
        let Some(&index) = order.get(next.fetch_add(1, Ordering::SeqCst)) else {
            break;
        };
        let path = &files[index];
        let t0 = Instant::now();
        if model.is_none() && why.is_none() {
            match make() {
                Ok(m) => model = Some(m),
                Err(e) => why = Some(e),
            }
        }
        let mut done_s = 0f64;
        let outcome = match (&mut model, &why) {
            (Some(m), _) => catch_unwind(AssertUnwindSafe(|| {
                m.transcribe(path, control, &mut |s| {
                    let more = ((s - done_s).max(0.0) * 16_000.0) as u64;
                    control.count_pushed(more);
                    done_s = done_s.max(s);
                })
            }))
            .unwrap_or_else(|panic| {
                model = None; // its state is unknown after a panic
                Outcome::Failed(format!(
                    "{}: internal error: {}",
                    path.display(),
                    panic_message(&panic)
                ))
            }),
            (None, Some(e)) => Outcome::Failed(format!("{}: {e}", path.display())),
            (None, None) => Outcome::Failed(format!("{}: no model", path.display())),
        };
        if !matches!(outcome, Outcome::Cancelled) {
            control.count_finished();
        }
        let r = FileResult {
            index,
            path: path.clone(),
            outcome,
            audio_s_processed: done_s,
            elapsed_s: t0.elapsed().as_secs_f64(),
        };
        if tx.send(r).is_err() {
            break;
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
