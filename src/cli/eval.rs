//! `pulsed eval MANIFEST`: character and word error rates of a model on a
//! jsonl manifest (`file`, `text`, optional `held_out_voice`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use pulsed::asr::metrics::ErrorCounts;
use pulsed::asr::{Decoding, Mode, Recognizer, RecognizerOptions};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// jsonl manifest: one object per line with `file` (relative to the manifest) and `text`.
    manifest: PathBuf,
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
            c.add(
                &it.text,
                &text.split_whitespace().collect::<Vec<_>>().join(" "),
            );
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
    let mode = if a.whole {
        Mode::Whole
    } else {
        Mode::Streamed { pulse: a.pulse }
    };
    let decoding = a
        .beam
        .map_or(Decoding::Greedy, |width| Decoding::Beam { width });
    let rec = Recognizer::open(
        super::model_dir(a.model.clone()),
        RecognizerOptions { mode, decoding },
    )
    .map_err(|e| e.to_string())?;
    let rec = a.lm.apply(rec)?;
    if !a.sweep_weight.is_empty() {
        return sweep(&a, &rec, &items, base);
    }
    let mut groups: [(&str, ErrorCounts, usize); 2] = [
        ("training voices", ErrorCounts::default(), 0),
        ("held-out voice", ErrorCounts::default(), 0),
    ];
    for it in &items {
        let audio = pulsed::audio::load_wav(&base.join(&it.file), rec.sample_rate())
            .map_err(|e| e.to_string())?;
        let hyp = rec
            .transcribe(&audio.samples)
            .map_err(|e| format!("{}: {e}", it.file))?;
        let g = &mut groups[usize::from(it.held_out_voice)];
        g.1.add(&it.text, &hyp.text);
        g.2 += 1;
    }
    let mut all = ErrorCounts::default();
    for (name, e, files) in &groups {
        if *files > 0 {
            println!(
                "{name:>16}: {files:3} files, CER {:6.2} %, WER {:6.2} %",
                e.cer() * 100.0,
                e.wer() * 100.0
            );
            all.char_edits += e.char_edits;
            all.chars += e.chars;
            all.word_edits += e.word_edits;
            all.words += e.words;
        }
    }
    println!(
        "{:>16}: CER {:6.2} %, WER {:6.2} %",
        "all",
        all.cer() * 100.0,
        all.wer() * 100.0
    );
    Ok(ExitCode::SUCCESS)
}
