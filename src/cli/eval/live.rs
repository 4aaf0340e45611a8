//! `pulsed eval --live`: each file of the manifest through the model's live
//! policy (Whisper's, or the CTC head's), fed as if compute were free; the final
//! lines scored as the offline path's, and the partial lines and the
//! latency of each word besides.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use pulsed::asr::partial::{partial_counts, Shown};
use pulsed::asr::{LiveSettings, LiveSetup, Transcriber};
use pulsed::batch;
use pulsed::live::WhisperLiveOptions;

use super::{files_bar, print_groups, report, Args, Item};

/// `--live`: each file through the live policy; the final lines joined.
pub(super) fn run_live(
    a: &Args,
    t: &Transcriber,
    items: &[Item],
    base: &Path,
) -> Result<ExitCode, String> {
    let mut whisper = WhisperLiveOptions {
        stream_encoder: !a.window_encoder,
        second_pass: a.second_pass,
        greedy_partials: a.greedy_partials,
        ..WhisperLiveOptions::default()
    }
    .with_trim(a.trim);
    a.policy.apply(&mut whisper);
    a.whisper.decode.apply(a.beam, &mut whisper.decode)?;
    let settings = LiveSettings {
        whisper,
        ..LiveSettings::default()
    };
    let live = t.live(settings).map_err(|e| e.to_string())?;
    if let Some(what) = live.describe() {
        eprintln!("pulsed: {what}");
    }
    live_files(a, items, base, &|path: &Path| live_file(&live, path))
}

/// One file's live result.
type LiveRun<'a> = dyn Fn(&Path) -> Result<LiveFile, String> + Sync + 'a;

/// The files through `run_file` on `-j` threads, then latency, partial and
/// final rates.
fn live_files(
    a: &Args,
    items: &[Item],
    base: &Path,
    run_file: &LiveRun,
) -> Result<ExitCode, String> {
    let t0 = std::time::Instant::now();
    let files: Vec<PathBuf> = items.iter().map(|it| base.join(&it.file)).collect();
    let jobs = a
        .jobs
        .unwrap_or_else(batch::default_jobs)
        .clamp(1, files.len().max(1));
    let bar = files_bar(files.len());
    // files on `jobs` threads, each file through a policy of its own
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, Result<LiveFile, String>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(path) = files.get(i) else {
                            return out;
                        };
                        let r = run_file(path);
                        if r.is_err() {
                            // no more files once one fails
                            next.store(files.len(), std::sync::atomic::Ordering::Relaxed);
                        }
                        out.push((i, r));
                        bar.inc(1);
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    bar.finish_and_clear();
    done.sort_by_key(|(i, _)| *i);
    let (mut hyps, mut audio_s) = (Vec::new(), 0.0);
    let (mut latencies, mut computed) = (Vec::new(), Vec::new());
    let (mut shown, mut first_shown) = (Vec::new(), Vec::new());
    let (mut partial, mut more) = (Vec::new(), Vec::new());
    for ((_, r), it) in done.into_iter().zip(items) {
        let f = r?;
        partial.push(partial_counts(&it.text, &f.finals, &f.shown, f.audio_s));
        // what the user saw, for --hyp-out
        more.push(serde_json::json!({
            "shown": f.shown.iter().map(|s| serde_json::json!([s.at_s, s.text])).collect::<Vec<_>>(),
            "words": f.finals.iter().map(|(w, end)| serde_json::json!([w, end])).collect::<Vec<_>>(),
        }));
        hyps.push(f.text);
        latencies.extend(f.latencies);
        computed.extend(f.computed);
        shown.extend(f.shown_at);
        first_shown.extend(f.first_shown);
        audio_s += f.audio_s;
    }
    if hyps.len() != items.len() {
        return Err("--live: a worker stopped before its files were done".into());
    }
    let wall = t0.elapsed().as_secs_f64();
    eprintln!("pulsed: {audio_s:.1} s of audio in {wall:.1} s ({jobs} workers)");
    let rows = [
        ("committed, compute not counted", latencies),
        (
            "committed, compute counted at real-time pace on this machine",
            computed,
        ),
        ("first shown where it stayed, compute not counted", shown),
        ("first shown where it stayed, compute counted", first_shown),
    ];
    for (what, mut l) in rows {
        if l.is_empty() {
            continue;
        }
        l.sort_by(f64::total_cmp);
        let at = |q: f64| l[((l.len() - 1) as f64 * q).round() as usize] * 1000.0;
        println!(
            "latency from a word's end to its text {what}: median {:.0} ms, p90 {:.0} ms, max {:.0} ms over {} words",
            at(0.5),
            at(0.9),
            at(1.0),
            l.len()
        );
    }
    println!("partial lines (the text shown at each partial update, against the reference words spoken by then; those timed by the final words they align with):");
    print_groups(items, &partial);
    if let Some(phases) = pulsed::profile::report() {
        eprintln!("{phases}");
    }
    println!("final lines:");
    report(a, items, &hyps, &more)
}

/// One file through the live policy.
#[derive(Default)]
struct LiveFile {
    /// The final lines, joined.
    text: String,
    /// From each final word's end to the stream position that committed it.
    latencies: Vec<f64>,
    /// The same with compute counted, and to when its text was first shown
    /// where it stayed (where the policy says), not counted and counted.
    computed: Vec<f64>,
    shown_at: Vec<f64>,
    first_shown: Vec<f64>,
    audio_s: f64,
    /// The final words and their end times, and the texts shown before.
    finals: Vec<(String, f64)>,
    shown: Vec<Shown>,
}

fn live_file(live: &LiveSetup, path: &Path) -> Result<LiveFile, String> {
    let in_file = |e: pulsed::Error| format!("{}: {e}", path.display());
    // the audio error names the file already
    let audio = pulsed::audio::load_wav(path, 16_000).map_err(|e| e.to_string())?;
    let mut policy = live.policy().map_err(in_file)?;
    let (updates, clock) = feed(&audio, |block| {
        match block {
            Some(b) => policy.push(b),
            None => policy.finish(),
        }
        .map_err(in_file)
    })?;
    let said = updates.into_iter().map(|(at_s, u)| {
        let line = if u.is_final {
            let words = u.words.iter().zip(&u.committed_at_s).enumerate();
            let words = words
                .map(|(i, (w, at))| Spoken {
                    text: w.text.clone(),
                    end_s: w.end_s,
                    committed_s: *at,
                    shown_s: u.shown_at_s.get(i).copied(),
                })
                .collect();
            Said::Final(u.text, words)
        } else {
            Said::Partial(u.text)
        };
        (at_s, line)
    });
    Ok(LiveFile::from_said(audio.duration_s, said, &clock))
}

/// A recording through a live policy in 20 ms blocks (`step(Some(block))`),
/// then its end (`step(None)`): what the policy gave, each with the stream
/// time it came at, and the clock with compute counted (the block's
/// arrival, or the end of the previous step if that is later, plus the
/// step's own time) at the end of each step.
fn feed<E>(
    audio: &pulsed::audio::Audio,
    mut step: impl FnMut(Option<&[f32]>) -> Result<Vec<E>, String>,
) -> Result<(Vec<(f64, E)>, Clock), String> {
    let mut out = Vec::new();
    let mut clock = Clock::default();
    let mut taken = 0usize;
    for block in audio.samples.chunks(320) {
        taken += block.len();
        let at_s = taken as f64 / 16_000.0;
        let t = std::time::Instant::now();
        let events = step(Some(block))?;
        clock.stepped(at_s, t.elapsed().as_secs_f64());
        out.extend(events.into_iter().map(|e| (at_s, e)));
    }
    let end_s = audio.duration_s;
    let t = std::time::Instant::now();
    let events = step(None)?;
    clock.stepped(end_s, t.elapsed().as_secs_f64());
    out.extend(events.into_iter().map(|e| (end_s, e)));
    Ok((out, clock))
}

/// A live policy fed at real-time pace on this machine, simulated: after
/// each step, the stream position it had taken and the time it ended.
#[derive(Default)]
struct Clock {
    steps: Vec<(f64, f64)>,
}

impl Clock {
    fn stepped(&mut self, at_s: f64, compute_s: f64) {
        let free = self.steps.last().map_or(at_s, |&(_, end)| end.max(at_s));
        self.steps.push((at_s, free + compute_s));
    }

    /// When the step that had taken stream position `at_s` ended.
    fn at(&self, at_s: f64) -> f64 {
        let i = self.steps.partition_point(|&(p, _)| p < at_s - 1e-9);
        self.steps
            .get(i)
            .or(self.steps.last())
            .map_or(at_s, |s| s.1)
    }
}

/// A line a live policy gave: partial text, or a final line with each
/// word's end and the stream time that committed it.
enum Said {
    Partial(String),
    Final(String, Vec<Spoken>),
}

/// A final word: its text and end, the stream position that committed it
/// and the one where it was first shown (if known).
struct Spoken {
    text: String,
    end_s: f64,
    committed_s: f64,
    shown_s: Option<f64>,
}

impl LiveFile {
    fn from_said(audio_s: f64, said: impl Iterator<Item = (f64, Said)>, clock: &Clock) -> LiveFile {
        let mut f = LiveFile {
            audio_s,
            ..LiveFile::default()
        };
        let mut text = Vec::new();
        for (at_s, line) in said {
            match line {
                // what the user sees: the final lines so far, then this one
                Said::Partial(t) => f.shown.push(Shown {
                    at_s,
                    text: format!("{} {t}", text.join(" ")),
                }),
                Said::Final(t, words) => {
                    text.push(t);
                    for w in words {
                        f.latencies.push(w.committed_s - w.end_s);
                        f.computed.push(clock.at(w.committed_s) - w.end_s);
                        if let Some(s) = w.shown_s {
                            f.shown_at.push(s - w.end_s);
                            f.first_shown.push(clock.at(s) - w.end_s);
                        }
                        f.finals.push((w.text, w.end_s));
                    }
                }
            }
        }
        f.text = text.join(" ");
        f
    }
}
