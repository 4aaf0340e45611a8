//! `pulsed eval MANIFEST`: character and word error rates of a model on a
//! jsonl manifest (`file`, `text`, optional `held_out_voice`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

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
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(&a.manifest)
        .map_err(|e| format!("{}: {e}", a.manifest.display()))?;
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
        super::model_dir(a.model),
        RecognizerOptions { mode, decoding },
    )
    .map_err(|e| e.to_string())?;
    let mut groups: [(&str, ErrorCounts, usize); 2] = [
        ("training voices", ErrorCounts::default(), 0),
        ("held-out voice", ErrorCounts::default(), 0),
    ];
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("{}:{}: {e}", a.manifest.display(), n + 1))?;
        let (Some(file), Some(reference)) = (v["file"].as_str(), v["text"].as_str()) else {
            return Err(format!(
                "{}:{}: needs `file` and `text`",
                a.manifest.display(),
                n + 1
            ));
        };
        let audio = pulsed::audio::load_wav(&base.join(file), rec.sample_rate())
            .map_err(|e| e.to_string())?;
        let hyp = rec
            .transcribe(&audio.samples)
            .map_err(|e| format!("{file}: {e}"))?;
        let g = &mut groups[usize::from(v["held_out_voice"].as_bool().unwrap_or(false))];
        g.1.add(reference, &hyp.text);
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
