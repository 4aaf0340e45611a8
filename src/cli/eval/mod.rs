//! `pulsed eval MANIFEST`: character and word error rates of a model on a
//! jsonl manifest (`file`, `text`, optional `held_out_voice` or `group`).
//! Texts are compared after [`normalize`] (case and punctuation are not
//! errors).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use pulsed::asr::metrics::{normalize, ErrorCounts};
use pulsed::asr::{Family, Mode, Recognizer, Requests, Transcriber, TranscriberOptions};
use pulsed::batch::{self, Control, Outcome};

use super::device::Device;

mod live;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// jsonl manifest: one object per line with `file` (relative to the manifest) and `text`.
    manifest: PathBuf,
    /// Model folder (default: the shipped model), or a Whisper checkpoint
    /// (folder or short name, e.g. `whisper-tiny.en`).
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, default_value_t = 5120, conflicts_with = "whole")]
    pulse: usize,
    #[arg(long)]
    whole: bool,
    #[arg(long)]
    beam: Option<usize>,
    #[command(flatten)]
    lm: super::lm::LmArgs,
    #[command(flatten)]
    whisper: super::whisper::WhisperArgs,
    /// Whisper: the live path instead (`pulsed mic`'s LocalAgreement policy
    /// with Silero VAD, each file fed in 20 ms blocks and decoded at every
    /// step as if compute were free; files on `-j` workers); also prints
    /// the latency from each word's end to the audio position where it was
    /// committed.
    #[arg(long)]
    live: bool,
    /// With --live and a chunked (streaming) checkpoint: re-encode the
    /// whole buffer at every decoding instead of streaming the encoder.
    #[arg(long, requires = "live")]
    window_encoder: bool,
    #[command(flatten)]
    policy: crate::cli::text_policy::PolicyArgs,
    /// With --live: at each end of speech the buffer decoded once more, as
    /// a whole, replaces the words agreed on meanwhile as the final line.
    /// Default: on where the encoder streams (a chunked checkpoint);
    /// `--second-pass=false` keeps the agreed words.
    #[arg(long, requires = "live", conflicts_with = "ctc", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    second_pass: Option<bool>,
    /// With --live: partial decodings greedy at temperature 0 (the final
    /// decoding keeps --beam; words agreed before a cut of the buffer, in an
    /// utterance longer than --trim, stay in the final line). Default: on
    /// where a second pass makes the final lines.
    #[arg(long, requires = "live", conflicts_with = "ctc", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    greedy_partials: Option<bool>,
    /// With --live: a buffer longer than this (seconds) is cut at the end
    /// of a committed segment (`pulsed mic --trim`).
    #[arg(
        long,
        requires = "live",
        conflicts_with = "ctc",
        default_value_t = 15.0
    )]
    trim: f64,
    /// A chunked Whisper checkpoint's CTC head over its streamed encoder
    /// instead of the Whisper decoder (greedy; `--beam N`: prefix beam
    /// search with the language-model flags); with --live, `mic --ctc`'s
    /// policy (a final line after 0.6 s of blanks).
    #[arg(long)]
    ctc: bool,
    /// Whisper: where the network runs (default auto: a GPU when one is
    /// usable).
    #[arg(long, value_enum)]
    device: Option<super::device::Device>,
    /// How Whisper's weights are stored: f32 or bf16 on the GPU; int8 on
    /// the CPU.
    #[arg(long, value_enum, default_value = "f32")]
    precision: super::device::Precision,
    /// GPU f32: let matrix products use TF32 tensor cores (faster; each
    /// product to about 1e-3 relative instead of f32's 1e-6).
    #[arg(long)]
    tf32: bool,
    /// Whisper: parallel workers (default: one per core).
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Whisper: before timing, make every worker and run it once over the
    /// first files (a worker's group), so the figure leaves out set-up
    /// (networks built, GPU runners planned and captured), as peers report
    /// theirs after a warm-up pass. Transcripts are unchanged.
    #[arg(long)]
    warmup: bool,
    /// Also write each file's hypothesis here (JSON lines: file, text,
    /// reference; with `--live`, also each text shown with its stream time and
    /// the final words with their ends).
    #[arg(long)]
    hyp_out: Option<PathBuf>,
    /// With --beam: decode each file's log-probs once per language model
    /// weight in this list (and per --sweep-bonus), plus once without the
    /// model, and print a table instead (for tuning on a development set).
    #[arg(long, value_delimiter = ',', requires = "beam")]
    sweep_weight: Vec<f64>,
    /// Word bonuses for --sweep-weight (default: the current one).
    #[arg(long, value_delimiter = ',', requires = "sweep_weight")]
    sweep_bonus: Vec<f64>,
}

/// One manifest line: the WAV and its reference text.
struct Item {
    file: String,
    text: String,
    held_out_voice: bool,
    group: Option<String>,
}

fn read_manifest(path: &Path) -> Result<Vec<Item>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut items = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))?;
        let (Some(file), Some(reference)) = (v["file"].as_str(), v["text"].as_str()) else {
            return Err(format!(
                "{}:{}: needs `file` and `text`",
                path.display(),
                n + 1
            ));
        };
        items.push(Item {
            file: file.into(),
            text: reference.into(),
            held_out_voice: v["held_out_voice"].as_bool().unwrap_or(false),
            group: v["group"].as_str().map(str::to_string),
        });
    }
    Ok(items)
}

/// `--sweep-weight`: every file's log-probs once, decoded per setting.
fn sweep(a: &Args, rec: &Recognizer, items: &[Item], base: &Path) -> Result<ExitCode, String> {
    use pulsed::asr::Lm;
    use pulsed::decode::{prefix_beam_search_lm, LmScorer, LmWeights};
    let lm = rec
        .lm()
        .ok_or("--sweep-weight needs a language model (--lm FILE, or the model's lm.arpa)")?;
    let width = a.beam.unwrap_or(1);
    let bonuses = if a.sweep_bonus.is_empty() {
        vec![lm.weights.word_bonus]
    } else {
        a.sweep_bonus.clone()
    };
    let mut settings: Vec<Option<LmWeights>> = vec![None];
    for &weight in &a.sweep_weight {
        for &word_bonus in &bonuses {
            settings.push(Some(LmWeights {
                weight,
                word_bonus,
                ..lm.weights
            }));
        }
    }
    let scorers: Vec<Option<Arc<LmScorer>>> = settings
        .iter()
        .map(|s| {
            s.map(|weights| {
                Lm {
                    model: lm.model.clone(),
                    weights,
                }
                .scorer(rec.tokens())
            })
            .transpose()
        })
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let mut counts = vec![ErrorCounts::default(); settings.len()];
    let tokens = rec.tokens();
    for it in items {
        let audio = pulsed::audio::load_wav(&base.join(&it.file), rec.sample_rate())
            .map_err(|e| e.to_string())?;
        let (rows, frames) = rec
            .log_probs(&audio.samples)
            .map_err(|e| format!("{}: {e}", it.file))?;
        for (scorer, c) in scorers.iter().zip(&mut counts) {
            let hyps = prefix_beam_search_lm(
                &rows,
                frames,
                tokens.len(),
                tokens.blank(),
                width,
                scorer.clone(),
            )
            .map_err(|e| format!("{}: {e}", it.file))?;
            let text = match hyps.first() {
                Some(h) => tokens.text_of(&h.tokens).map_err(|e| e.to_string())?,
                None => String::new(),
            };
            c.add(&normalize(&it.text), &normalize(&text));
        }
    }
    println!(
        "{} files, beam {width}: CER / WER per language model setting",
        items.len()
    );
    println!(
        "{:>10} {:>10} {:>8} {:>8}",
        "weight", "bonus", "CER %", "WER %"
    );
    for (s, c) in settings.iter().zip(&counts) {
        let (w, b) = s.map_or(("none".to_string(), "-".to_string()), |s| {
            (s.weight.to_string(), s.word_bonus.to_string())
        });
        println!(
            "{w:>10} {b:>10} {:>8.2} {:>8.2}",
            c.cer() * 100.0,
            c.wer() * 100.0
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    let items = read_manifest(&a.manifest)?;
    let base = a.manifest.parent().unwrap_or(Path::new("."));
    let family = Family::of(a.model.as_deref(), a.ctc).map_err(|e| e.to_string())?;
    let requests = Requests {
        live: a.live,
        device: a.device.is_some(),
        ..Requests::default()
    };
    family.check(&requests).map_err(|e| e.to_string())?;
    let device = a.device.unwrap_or(if family.gpu_by_default() {
        Device::Auto
    } else {
        Device::Cpu
    });
    let engine = device.engine_tf32(a.precision, a.tf32)?;
    let opts = TranscriberOptions {
        mode: if a.whole {
            Mode::Whole
        } else {
            Mode::Streamed { pulse: a.pulse }
        },
        beam: a.beam,
        lm: a.lm.choice(),
        ctc_head: a.ctc,
        whisper: a.whisper.options(pulsed::output::Format::Text),
        int8: a.precision.int8(),
    };
    let t = Transcriber::open(a.model.as_deref(), &opts, engine).map_err(|e| e.to_string())?;
    if a.live {
        return live::run_live(&a, &t, &items, base);
    }
    if let (false, Some(rec)) = (a.sweep_weight.is_empty(), t.recognizer()) {
        return sweep(&a, rec, &items, base);
    }
    if let Some(what) = t.describe() {
        eprintln!("pulsed: {what}");
    }
    run_workers(&a, &t, &items, base)
}

/// The files on parallel workers, then the rates.
fn run_workers(a: &Args, t: &Transcriber, items: &[Item], base: &Path) -> Result<ExitCode, String> {
    let files: Vec<PathBuf> = items.iter().map(|it| base.join(&it.file)).collect();
    let jobs = a.jobs.unwrap_or_else(batch::default_jobs);
    // one stream per worker: a file's text does not depend on the others
    let opts = t.batch_options(jobs, Some(1), files.len());
    if a.warmup {
        let t0 = std::time::Instant::now();
        let workers = opts.jobs.clamp(1, files.len().max(1));
        let first = &files[..t.group_files().min(files.len())];
        if t.warm_up(workers, first).map_err(|e| e.to_string())? {
            eprintln!(
                "pulsed: {workers} workers warmed up on {} files in {:.1} s (not timed)",
                first.len(),
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let mut hyps = vec![String::new(); items.len()];
    let mut failed = Vec::new();
    let summary = t.run_files(&files, opts, &Control::new(), |r| {
        match r.outcome {
            Outcome::Done { transcript, .. } => hyps[r.index] = transcript.text,
            Outcome::Failed(e) => failed.push(e),
            Outcome::Cancelled => failed.push(format!("{}: cancelled", r.path.display())),
        }
        Ok::<(), String>(())
    })?;
    if let Some(e) = failed.first() {
        return Err(format!(
            "{} of {} files failed; first: {e}",
            failed.len(),
            items.len()
        ));
    }
    eprintln!(
        "pulsed: {:.1} s of audio in {:.1} s ({:.1} audio s/s, {} workers)",
        summary.audio_s,
        summary.wall_s,
        summary.audio_s / summary.wall_s.max(1e-9),
        opts.jobs.min(items.len())
    );
    report(a, items, &hyps, &[])
}

/// A bar of files done, on a terminal only.
fn files_bar(files: usize) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() || files < 2 {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(files as u64);
    let style = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} files ETA {eta}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

/// Prints the rates per group (the manifest's `group`, else training vs
/// held-out voices) and over all, from one count per item.
fn print_groups(items: &[Item], counts: &[ErrorCounts]) {
    let mut groups: Vec<(String, ErrorCounts, usize)> = Vec::new();
    let mut all = ErrorCounts::default();
    for (it, e) in items.iter().zip(counts) {
        let name = match &it.group {
            Some(g) => g.clone(),
            None if it.held_out_voice => "held-out voice".into(),
            None => "training voices".into(),
        };
        let i = match groups.iter().position(|g| g.0 == name) {
            Some(i) => i,
            None => {
                groups.push((name, ErrorCounts::default(), 0));
                groups.len() - 1
            }
        };
        groups[i].1.merge(e);
        groups[i].2 += 1;
        all.merge(e);
    }
    for (name, e, files) in &groups {
        println!(
            "{name:>16}: {files:3} files, CER {:6.2} %, WER {:6.2} %",
            e.cer() * 100.0,
            e.wer() * 100.0
        );
    }
    println!(
        "{:>16}: CER {:6.2} %, WER {:6.2} %",
        "all",
        all.cer() * 100.0,
        all.wer() * 100.0
    );
}

/// Prints the rates per group and over all ([`print_groups`]), and writes
/// `--hyp-out` (each row with `more`'s fields, where given).
fn report(
    a: &Args,
    items: &[Item],
    hyps: &[String],
    more: &[serde_json::Value],
) -> Result<ExitCode, String> {
    if let Some(p) = &a.hyp_out {
        let mut out = String::new();
        for (i, (it, h)) in items.iter().zip(hyps).enumerate() {
            let mut line = serde_json::json!({"file": it.file, "text": h, "reference": it.text});
            if let (Some(row), Some(serde_json::Value::Object(extra))) =
                (line.as_object_mut(), more.get(i))
            {
                row.extend(extra.clone());
            }
            out.push_str(&line.to_string());
            out.push('\n');
        }
        std::fs::write(p, out).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let counts: Vec<ErrorCounts> = items
        .iter()
        .zip(hyps)
        .map(|(it, h)| {
            let mut e = ErrorCounts::default();
            e.add(&normalize(&it.text), &normalize(h));
            e
        })
        .collect();
    print_groups(items, &counts);
    Ok(ExitCode::SUCCESS)
}
