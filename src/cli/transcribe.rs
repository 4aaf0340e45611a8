//! `pulsed transcribe FILE...`: WAV files to text, JSON lines, SRT or VTT.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use pulsed::asr::{Decoding, Mode, Recognizer, RecognizerOptions};
use pulsed::output::{
    write_error_line, write_transcript, write_transcript_with, Format, WriteOptions,
};

use super::device::Device;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// WAV files or folders (searched for *.wav).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Model folder (default: the shipped model).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Output format: text, jsonl, srt or vtt.
    #[arg(long, default_value = "text")]
    format: Format,
    /// Input samples per pulse when streaming (a multiple of the model's 640-sample frame).
    #[arg(long, default_value_t = 5120, conflicts_with = "whole")]
    pulse: usize,
    /// Run the whole utterance at once instead of streaming it in pulses.
    #[arg(long)]
    whole: bool,
    /// CTC prefix beam search of this width (greedy when absent).
    #[arg(long)]
    beam: Option<usize>,
    #[arg(long, value_enum, default_value = "auto")]
    device: Device,
    /// Write here instead of standard output.
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Write one `<name>.<format>` file per input into this folder.
    #[arg(long, conflicts_with = "output")]
    output_dir: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    a.device.resolve()?;
    let files = expand(&a.inputs)?;
    if files.len() > 1 && matches!(a.format, Format::Srt | Format::Vtt) && a.output_dir.is_none() {
        return Err(format!(
            "{} with several files needs --output-dir (one subtitle file per input)",
            a.format
        ));
    }
    let mode = if a.whole {
        Mode::Whole
    } else {
        Mode::Streamed { pulse: a.pulse }
    };
    let decoding = match a.beam {
        Some(w) => Decoding::Beam { width: w },
        None => Decoding::Greedy,
    };
    let rec = Recognizer::open(
        super::model_dir(a.model),
        RecognizerOptions { mode, decoding },
    )
    .map_err(|e| e.to_string())?;
    let mut out: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(BufWriter::new(
            File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
        )),
        None => Box::new(io::stdout().lock()),
    };
    if let Some(d) = &a.output_dir {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let bar = progress(files.len());
    let (mut failed, mut audio_s) = (0usize, 0.0f64);
    let started = Instant::now();
    let several = files.len() > 1;
    for path in &files {
        let name = path.display().to_string();
        bar.set_message(short_name(path));
        match transcribe_one(&rec, path) {
            Ok((t, dur)) => {
                audio_s += dur;
                let mut extra = serde_json::Map::new();
                extra.insert(
                    "duration_s".into(),
                    serde_json::json!((dur * 1000.0).round() / 1000.0),
                );
                let r = match &a.output_dir {
                    Some(d) => write_file(d, path, a.format, &name, &t, extra),
                    None => {
                        let opts = WriteOptions {
                            prefix_file_name: several,
                            ..WriteOptions::default()
                        };
                        write_transcript_with(&mut out, a.format, &name, &t, &extra, &opts)
                    }
                };
                r.map_err(|e| format!("writing output: {e}"))?;
            }
            Err(e) => {
                failed += 1;
                if a.format == Format::Jsonl && a.output_dir.is_none() {
                    write_error_line(&mut out, a.format, &name, &e)
                        .map_err(|e| format!("writing output: {e}"))?;
                }
                bar.suspend(|| eprintln!("pulsed: {name}: {e}"));
            }
        }
        out.flush().map_err(|e| format!("writing output: {e}"))?;
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        bar.set_prefix(format!("{:.0} audio s/s", audio_s / secs));
        bar.inc(1);
    }
    bar.finish_and_clear();
    if failed > 0 {
        eprintln!("pulsed: {failed} of {} files failed", files.len());
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn transcribe_one(
    rec: &Recognizer,
    path: &Path,
) -> Result<(pulsed::decode::Transcript, f64), String> {
    let audio = pulsed::audio::load_wav(path, rec.sample_rate()).map_err(|e| e.to_string())?;
    let t = rec.transcribe(&audio.samples).map_err(|e| e.to_string())?;
    Ok((t, audio.duration_s))
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
    let ext = match format {
        Format::Text => "txt",
        Format::Jsonl => "jsonl",
        Format::Srt => "srt",
        Format::Vtt => "vtt",
    };
    let mut f = BufWriter::new(File::create(dir.join(format!("{stem}.{ext}")))?);
    write_transcript(&mut f, format, name, t, &extra)?;
    f.flush()
}

/// Files as given, and the `*.wav` files under folders (sorted).
fn expand(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for p in inputs {
        if p.is_dir() {
            let mut found = Vec::new();
            walk(p, &mut found).map_err(|e| format!("{}: {e}", p.display()))?;
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone()); // missing files fail on their own line
        }
    }
    Ok(files)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else if p.extension().is_some_and(|x| x.eq_ignore_ascii_case("wav")) {
            out.push(p);
        }
    }
    Ok(())
}

fn progress(n: usize) -> ProgressBar {
    if n < 2 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(n as u64);
    let style =
        ProgressStyle::with_template("{bar:30} {pos}/{len} files, {prefix}, ETA {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

fn short_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
}
