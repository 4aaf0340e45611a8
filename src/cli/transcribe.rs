//! `pulsed transcribe FILE|DIR|GLOB|-... [--manifest FILE]`: audio files
//! (WAV, FLAC, MP3, OGG Vorbis, M4A; `-` is standard input) to text,
//! JSON lines, SRT or VTT, on parallel CPU workers (see [`pulsed::batch`]).
//!
//! Exit codes: 0 every file transcribed, 1 some file failed (each has its own
//! error line), 2 bad arguments or output, 130 stopped by Ctrl-C (the output
//! then holds only complete lines; `--resume` carries on from it).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pulsed::asr::{Family, Mode, Requests, Transcriber, TranscriberOptions};
use pulsed::batch::{self, Control, FileResult, Outcome};
use pulsed::output::{
    write_error_line, write_transcript, write_transcript_with, Format, WriteOptions,
};

use super::device::{Device, Precision};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Audio files (WAV, FLAC, MP3, OGG Vorbis, M4A), folders (searched for
    /// those recursively), glob patterns, or `-` for standard input (e.g.
    /// `ffmpeg -i F -f wav - | pulsed transcribe -`).
    #[arg(required_unless_present = "manifest")]
    inputs: Vec<PathBuf>,
    /// Refuse a file that ends before its header says (by default the audio
    /// that is there is transcribed, with a warning).
    #[arg(long)]
    strict: bool,
    /// A list of files: one path per line, or JSON lines with "audio_filepath" or "file"
    /// (relative paths are taken from the manifest's folder). May be repeated.
    #[arg(long)]
    manifest: Vec<PathBuf>,
    /// A short name (`whisper-base-streaming-640ms`, `whisper-tiny.en`,
    /// `whisper-base`: Whisper checkpoints in the model cache, `pulsed
    /// fetch NAME`; `pulsed-en-ctc`: the shipped model,
    /// synthetic voices, nothing to fetch) or a folder. Default:
    /// whisper-base-streaming-640ms with `--language en`, fetched on first use.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Output format: text, jsonl, srt or vtt.
    #[arg(long, default_value = "text")]
    format: Format,
    /// Input samples per pulse when streaming (a multiple of the model's 640-sample frame).
    #[arg(long, default_value_t = 5120, conflicts_with = "whole")]
    pulse: usize,
    /// Run the whole utterance at once instead of streaming it in pulses (memory grows with the file).
    #[arg(long)]
    whole: bool,
    /// Beam search of this width: CTC prefix beam search for the shipped
    /// model (greedy when absent); Whisper's beam search (default 5, 1 = greedy).
    #[arg(long)]
    beam: Option<usize>,
    #[command(flatten)]
    whisper: super::whisper::WhisperArgs,
    #[command(flatten)]
    lm: super::lm::LmArgs,
    /// A chunked Whisper checkpoint's CTC head over its streamed encoder
    /// instead of the Whisper decoder (greedy; `--beam N`: prefix beam
    /// search with the language-model flags).
    #[arg(long)]
    ctc: bool,
    /// Where the encoder runs (Whisper: the encoder and decoder): a GPU when
    /// one is usable (auto), or the one named.
    #[arg(long, value_enum, default_value = "auto")]
    device: Device,
    /// How weights are stored: on the GPU f32 or bf16 (half the memory
    /// traffic, f32 accumulation); int8 runs a Whisper checkpoint's linear
    /// layers from int8 weights on the CPU (a quarter of the bytes).
    #[arg(long, value_enum, default_value = "f32")]
    precision: Precision,
    /// GPU f32: let matrix products use TF32 tensor cores (faster; each
    /// product to about 1e-3 relative instead of f32's 1e-6).
    #[arg(long)]
    tf32: bool,
    /// Parallel workers, each with its own streaming session (default: one per
    /// core); on a GPU, each streams its file on a CUDA stream of its own, so the
    /// GPU runs their chunk steps concurrently.
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Files each worker streams together through one batched chunk step (one
    /// CUDA graph on a GPU reads each weight once for all of them); files are
    /// run in cohorts of this many; in completion order (-o) files go longest
    /// first, so a cohort's files have similar lengths. Default: enough for
    /// every worker to have a full cohort, up to 4 on the CPU and 32 on a GPU.
    #[arg(long, conflicts_with = "whole")]
    streams: Option<usize>,
    /// Write here instead of standard output.
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Write one `<name>.<format>` file per input into this folder.
    #[arg(long, conflicts_with = "output")]
    output_dir: Option<PathBuf>,
    /// With `-o FILE --format jsonl`: skip the files FILE already has a complete line for
    /// (transcript or error) and append the others.
    #[arg(long, requires = "output")]
    resume: bool,
    /// Order of the results: as the inputs were given, or as each file finishes
    /// (default: input order on standard output, completion order with -o/--output-dir).
    #[arg(long, value_enum)]
    order: Option<Order>,
    /// Print batch throughput over the inputs with 1, 2, 4, ... up to --jobs workers
    /// (concurrent streams on a GPU), each with 1 and with --streams streams per
    /// step, instead of transcripts.
    #[arg(long, conflicts_with_all = ["output", "output_dir", "resume"])]
    bench: bool,
}

/// When results are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Order {
    /// In the order of the inputs (a finished file waits for the ones before it).
    Input,
    /// As each file finishes.
    Completion,
}

pub fn run(mut a: Args) -> Result<ExitCode, String> {
    pulsed::audio::set_truncation(if a.strict {
        pulsed::audio::Truncation::Refuse
    } else {
        pulsed::audio::Truncation::Warn
    });
    let engine = a.device.engine_tf32(a.precision, a.tf32)?;
    let mut files = batch::expand_inputs(&a.inputs).map_err(|e| e.to_string())?;
    for m in &a.manifest {
        files.extend(batch::read_manifest(m).map_err(|e| e.to_string())?);
    }
    let mut seen = std::collections::HashSet::new();
    files.retain(|f| seen.insert(f.clone())); // a file named twice runs once
    if files.is_empty() {
        return Err(format!(
            "no input files (the folders hold no {} file)",
            batch::AUDIO_EXTENSIONS.join("/")
        ));
    }
    let several = files.len() > 1;
    if several
        && matches!(a.format, Format::Srt | Format::Vtt)
        && a.output_dir.is_none()
        && !a.bench
    {
        return Err(format!(
            "{} with several files needs --output-dir (one subtitle file per input)",
            a.format
        ));
    }
    if a.resume && a.format != Format::Jsonl {
        return Err(
            "--resume needs --format jsonl (it reads the file names back from the output)".into(),
        );
    }
    if a.jobs == Some(0) {
        return Err("--jobs must be at least 1".into());
    }
    if a.streams == Some(0) {
        return Err("--streams must be at least 1".into());
    }
    let gate = !a.whisper.no_speech_gate;
    a.model = super::chosen_model(a.model.take(), a.ctc, gate, &mut a.whisper.decode.language)?;
    let family = Family::of(a.model.as_deref(), a.ctc).map_err(|e| e.to_string())?;
    family
        .check(&Requests {
            whole: a.whole,
            streams: a.streams.is_some(),
            lm: a.lm.is_set(),
            bench: a.bench,
            ..Requests::default()
        })
        .map_err(|e| e.to_string())?;
    let t =
        Transcriber::open(a.model.as_deref(), &options(&a), engine).map_err(|e| e.to_string())?;
    if let Some(what) = t.describe() {
        eprintln!("pulsed: {what}");
    }
    // on a GPU each worker streams its files on a CUDA stream of its own
    let jobs = a.jobs.unwrap_or_else(batch::default_jobs);
    if a.bench {
        let opts = t.batch_options(jobs, a.streams, files.len());
        return super::transcribe_bench::run(&t, &files, opts);
    }
    write_results(&a, &t, files, several, jobs)
}

/// The library's options these flags choose.
fn options(a: &Args) -> TranscriberOptions {
    TranscriberOptions {
        mode: if a.whole {
            Mode::Whole
        } else {
            Mode::Streamed { pulse: a.pulse }
        },
        beam: a.beam,
        lm: a.lm.choice(),
        ctc_head: a.ctc,
        whisper: a.whisper.options(a.format),
        int8: a.precision.int8(),
    }
}

/// Runs the files through the transcriber's pool and writes each result
/// as it comes: output file or standard output, `--resume`, input or
/// completion order, Ctrl-C, a progress bar, the summary line and the exit
/// code.
fn write_results(
    a: &Args,
    t: &Transcriber,
    mut files: Vec<PathBuf>,
    several: bool,
    jobs: usize,
) -> Result<ExitCode, String> {
    let out: Box<dyn Write> = match &a.output {
        Some(p) if a.resume => {
            let (f, done) =
                batch::open_for_resume(p).map_err(|e| format!("{}: {e}", p.display()))?;
            let before = files.len();
            files.retain(|f| !done.files.contains(&f.display().to_string()));
            if before > files.len() {
                eprintln!(
                    "pulsed: resuming {}: {} of {before} files already done",
                    p.display(),
                    before - files.len()
                );
            }
            Box::new(BufWriter::new(f))
        }
        Some(p) => Box::new(BufWriter::new(
            File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
        )),
        None => Box::new(io::stdout().lock()),
    };
    // the streams a worker batches suit the files left once --resume has
    // dropped those done
    let mut opts = t.batch_options(jobs, a.streams, files.len());
    if let Some(d) = &a.output_dir {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let order = a
        .order
        .unwrap_or(if a.output.is_some() || a.output_dir.is_some() {
            Order::Completion
        } else {
            Order::Input
        });
    // In input order, a long file started first would hold back every line after it.
    opts.longest_first = order == Order::Completion;

    let control = Arc::new(Control::new());
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let (control, interrupted) = (control.clone(), interrupted.clone());
        // Setting the handler fails only if one is already set; Ctrl-C then keeps its default.
        let _ = ctrlc::set_handler(move || {
            if interrupted.swap(true, Ordering::SeqCst) {
                std::process::exit(130); // second Ctrl-C: leave now (a cut line is dropped by --resume)
            }
            control.stop();
            eprintln!(
                "\npulsed: stopping (files in flight are dropped; Ctrl-C again to quit at once)"
            );
        });
    }

    let progress = Progress::new(&files, t.sample_rate());
    let mut sink = Sink {
        out,
        format: a.format,
        output_dir: a.output_dir.clone(),
        several,
        order,
        pending: BTreeMap::new(),
        next: 0,
        failed: 0,
        bar: progress.bar.clone(),
    };
    let finished = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        s.spawn(|| progress.tick_until(&finished, &control));
        let r = t
            .run_files(&files, opts, &control, |r| {
                progress.file_done(&r);
                sink.accept(r)
            })
            .and_then(|summary| sink.drain().map(|_| summary));
        finished.store(true, Ordering::SeqCst);
        r
    });
    progress.bar.finish_and_clear();
    let summary = match result {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        Err(e) => return Err(format!("writing output: {e}")),
    };
    if interrupted.load(Ordering::SeqCst) {
        eprintln!(
            "pulsed: interrupted: {} transcribed, {} failed, {} not done (run again with --resume to finish)",
            summary.transcribed,
            summary.failed,
            summary.cancelled + summary.not_started
        );
        return Ok(ExitCode::from(130));
    }
    let jobs = opts.jobs.min(files.len());
    if let Some(reason) = &summary.single_stream_reason {
        eprintln!(
            "pulsed: warning: {} of {jobs} workers ran one stream at a time: no batched session of {} streams ({reason})",
            summary.single_stream_workers, opts.streams
        );
    }
    if several && summary.audio_s > 0.0 {
        eprintln!(
            "pulsed: {} files, {:.1} s of audio in {:.1} s ({:.1} audio s/s, {})",
            summary.transcribed + summary.failed,
            summary.audio_s,
            summary.wall_s,
            summary.audio_s / summary.wall_s.max(1e-9),
            layout(jobs, opts.streams, summary.single_stream_workers)
        );
    }
    if sink.failed > 0 {
        eprintln!("pulsed: {} of {} files failed", sink.failed, files.len());
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// How the workers ran: "16 workers x 32 streams", or with those that fell
/// back to one stream counted apart.
pub(super) fn layout(jobs: usize, streams: usize, single: usize) -> String {
    match single.min(jobs) {
        0 => format!("{jobs} workers x {streams} streams"),
        n if n == jobs => format!("{jobs} workers x 1 streams"),
        n => format!("{} workers x {streams} streams, {n} x 1", jobs - n),
    }
}

/// Writes results as they come, in the chosen order, flushing after each.
struct Sink {
    out: Box<dyn Write>,
    format: Format,
    output_dir: Option<PathBuf>,
    several: bool,
    order: Order,
    /// Input order: finished results waiting for an earlier file.
    pending: BTreeMap<usize, FileResult>,
    next: usize,
    failed: usize,
    bar: ProgressBar,
}

impl Sink {
    fn accept(&mut self, r: FileResult) -> io::Result<()> {
        if self.order == Order::Completion {
            return self.write(r);
        }
        self.pending.insert(r.index, r);
        while let Some(r) = self.pending.remove(&self.next) {
            self.next += 1;
            self.write(r)?;
        }
        Ok(())
    }

    /// Writes what waits behind files that never finished (a stopped run).
    fn drain(&mut self) -> io::Result<()> {
        while let Some((_, r)) = self.pending.pop_first() {
            self.write(r)?;
        }
        self.out.flush()
    }

    fn write(&mut self, r: FileResult) -> io::Result<()> {
        let name = r.path.display().to_string();
        match r.outcome {
            Outcome::Done {
                transcript,
                duration_s,
                extra: mut model_extra,
            } => {
                let mut extra = serde_json::Map::new();
                extra.append(&mut model_extra);
                extra.insert(
                    "duration_s".into(),
                    serde_json::json!((duration_s * 1000.0).round() / 1000.0),
                );
                match &self.output_dir {
                    Some(d) => write_file(d, &r.path, self.format, &name, &transcript, extra)?,
                    None => {
                        let opts = WriteOptions {
                            prefix_file_name: self.several,
                            ..WriteOptions::default()
                        };
                        write_transcript_with(
                            &mut self.out,
                            self.format,
                            &name,
                            &transcript,
                            &extra,
                            &opts,
                        )?
                    }
                }
            }
            Outcome::Failed(e) => {
                self.failed += 1;
                if self.format == Format::Jsonl && self.output_dir.is_none() {
                    write_error_line(&mut self.out, self.format, &name, &e)?;
                }
                // Audio errors start with the path already.
                let msg = if e.starts_with(&name) {
                    e
                } else {
                    format!("{name}: {e}")
                };
                self.bar.suspend(|| eprintln!("pulsed: {msg}"));
            }
            Outcome::Cancelled => {}
        }
        self.out.flush()
    }
}

fn write_file(
    dir: &Path,
    input: &Path,
    format: Format,
    name: &str,
    t: &pulsed::decode::Transcript,
    extra: serde_json::Map<String, serde_json::Value>,
) -> io::Result<()> {
    let stem = input
        .file_stem()
        .map_or("out".into(), |s| s.to_string_lossy().into_owned());
    let mut f = BufWriter::new(File::create(
        dir.join(format!("{stem}.{}", format.extension())),
    )?);
    write_transcript(&mut f, format, name, t, &extra)?;
    f.flush()
}

/// The progress bar: position in milliseconds of audio, so that the ETA
/// follows the audio left rather than the file count.
struct Progress {
    bar: ProgressBar,
    /// Each file's length from its header (0 when unreadable).
    durations: Vec<f64>,
    files: u64,
    /// Audio of finished files that was never pushed (failures), in ms.
    skipped_ms: AtomicU64,
    started: Instant,
}

impl Progress {
    fn new(files: &[PathBuf], rate: u32) -> Progress {
        let visible = io::stderr().is_terminal();
        // The header scan is only worth it for a bar someone sees.
        let durations: Vec<f64> = if visible {
            files
                .iter()
                .map(|f| {
                    // standard input is read once, by the worker
                    if f.as_os_str() == pulsed::audio::STDIN {
                        return 0.0;
                    }
                    pulsed::audio::WavStream::open(f, rate).map_or(0.0, |w| w.source_duration_s())
                })
                .collect()
        } else {
            vec![0.0; files.len()]
        };
        let total_ms = (durations.iter().sum::<f64>() * 1000.0) as u64;
        let bar = if visible && (files.len() > 1 || total_ms > 60_000) {
            let bar =
                ProgressBar::with_draw_target(Some(total_ms.max(1)), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{bar:30} {percent:>3}% {msg} ETA {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar
        } else {
            ProgressBar::hidden()
        };
        Progress {
            bar,
            durations,
            files: files.len() as u64,
            skipped_ms: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    fn file_done(&self, r: &FileResult) {
        let expected = self.durations.get(r.index).copied().unwrap_or(0.0);
        let unpushed_ms = ((expected - r.audio_s_processed).max(0.0) * 1000.0) as u64;
        self.skipped_ms.fetch_add(unpushed_ms, Ordering::Relaxed);
    }

    fn tick_until(&self, finished: &AtomicBool, control: &Control) {
        if self.bar.is_hidden() {
            return;
        }
        while !finished.load(Ordering::SeqCst) {
            let audio_s = control.audio_s_processed();
            let pos = (audio_s * 1000.0) as u64 + self.skipped_ms.load(Ordering::Relaxed);
            self.bar
                .set_position(pos.min(self.bar.length().unwrap_or(u64::MAX)));
            let speed = audio_s / self.started.elapsed().as_secs_f64().max(1e-9);
            self.bar.set_message(format!(
                "{}/{} files, {speed:.1} audio s/s",
                control.files_finished(),
                self.files
            ));
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
