//! `pulsed transcribe --bench`: the same files through the batch workers at
//! 1, 2, 4 ... workers (and as many streams each), throughput side by side,
//! with the machine and the peak memory named.

use std::path::PathBuf;
use std::process::ExitCode;

use pulsed::asr::Transcriber;
use pulsed::batch::{self, BatchOptions, Control, Outcome};

/// `--bench`: the same files with 1 worker, then doubling up to `opts.jobs`.
pub(super) fn run(
    t: &Transcriber,
    files: &[PathBuf],
    opts: BatchOptions,
) -> Result<ExitCode, String> {
    let rec = t.recognizer().ok_or("--bench is for the shipped model")?;
    println!(
        "machine: {}, {} cores available",
        cpu_model(),
        batch::default_jobs()
    );
    println!(
        "files: {} (pulse {:?}, {:?}), encoder on {}",
        files.len(),
        rec.options().mode,
        rec.options().decoding,
        rec.engine().name()
    );
    // warm-up: page in the weights and the allocator on one file
    let warm = Control::new();
    let one = BatchOptions { jobs: 1, ..opts };
    t.run_files(&files[..1], one, &warm, |_| Ok::<(), ()>(()))
        .ok();
    let mut worker_counts = vec![1];
    while worker_counts[worker_counts.len() - 1] < opts.jobs {
        let next = (worker_counts[worker_counts.len() - 1] * 2).min(opts.jobs);
        worker_counts.push(next);
    }
    let mut runs: Vec<(usize, usize)> = worker_counts.iter().map(|&j| (j, 1)).collect();
    if opts.streams > 1 {
        runs.extend(worker_counts.iter().map(|&j| (j, opts.streams)));
    }
    let mut base = None;
    println!(
        "{:>8} {:>8} {:>10} {:>10} {:>12} {:>10} {:>8}",
        "workers", "streams", "audio s", "wall s", "audio s/s", "RTF", "speed-up"
    );
    for (jobs, streams) in runs {
        let control = Control::new();
        let mut failed = 0;
        let o = BatchOptions {
            jobs,
            streams,
            ..opts
        };
        let s = t
            .run_files(files, o, &control, |r| {
                failed += matches!(r.outcome, Outcome::Failed(_)) as usize;
                Ok::<(), ()>(())
            })
            .map_err(|_| "benchmark run failed".to_string())?;
        if s.audio_s <= 0.0 {
            return Err("no file could be transcribed".into());
        }
        let speed = s.audio_s / s.wall_s;
        let speedup = base.map_or(1.0, |b| speed / b);
        base.get_or_insert(speed);
        println!(
            "{jobs:>8} {streams:>8} {:>10.1} {:>10.2} {speed:>12.1} {:>10.4} {speedup:>7.2}x{}",
            s.audio_s,
            s.wall_s,
            s.wall_s / s.audio_s,
            if failed > 0 {
                format!("  ({failed} files failed)")
            } else {
                String::new()
            }
        );
        if s.single_stream_workers > 0 {
            println!(
                "{:>8} ({})",
                "",
                super::transcribe::layout(jobs, streams, s.single_stream_workers)
            );
        }
    }
    if let Some(kb) = peak_rss_kb() {
        println!("peak resident memory: {:.1} MiB", kb as f64 / 1024.0);
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// VmHWM of this process (Linux), in KiB.
fn peak_rss_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
