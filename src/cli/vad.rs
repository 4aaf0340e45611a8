//! `pulsed vad FILE...`: speech segments (or per-chunk speech probabilities)
//! of WAV files with Silero VAD v6, as JSON lines; `--bench` times it.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use pulsed::output::{write_error_line, Format};
use pulsed::vad::{SegmentOptions, Segmenter, Vad, CHUNK, SAMPLE_RATE};
use serde_json::json;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// WAV files (any rate and channel count: resampled to 16 kHz mono).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Speech probability threshold.
    #[arg(long, default_value_t = 0.5)]
    threshold: f32,
    /// Drop segments this short or shorter.
    #[arg(long, default_value_t = 250)]
    min_speech_ms: u32,
    /// Silence that ends a segment.
    #[arg(long, default_value_t = 100)]
    min_silence_ms: u32,
    /// Padding on each side of a segment.
    #[arg(long, default_value_t = 30)]
    pad_ms: u32,
    /// Print each file's per-chunk (512 samples, 32 ms) probabilities instead of segments.
    #[arg(long)]
    probs: bool,
    /// Run each file as a whole utterance instead of streaming it chunk by chunk.
    #[arg(long)]
    whole: bool,
    /// Weights (default: $PULSED_SILERO_WEIGHTS, else the model cache's, `pulsed fetch silero-vad`).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Print the real-time factor (one thread) instead of results.
    #[arg(long)]
    bench: bool,
    /// Timed repetitions for --bench (the median is printed).
    #[arg(long, default_value_t = 5)]
    reps: usize,
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    let path = a
        .weights
        .clone()
        .unwrap_or_else(pulsed::models::silero::default_weights_path);
    let vad = Vad::load(&path).map_err(|e| e.to_string())?;
    if a.bench {
        return bench(&vad, &a);
    }
    let opts = SegmentOptions {
        threshold: a.threshold,
        min_speech_ms: a.min_speech_ms,
        min_silence_ms: a.min_silence_ms,
        speech_pad_ms: a.pad_ms,
        ..SegmentOptions::default()
    };
    let mut out = io::stdout().lock();
    let mut failed = 0;
    for file in &a.files {
        let name = file.display().to_string();
        let r = probs_of(&vad, file, a.whole).map(|(probs, n)| {
            let mut lines = String::new();
            if a.probs {
                let chunk_s = CHUNK as f64 / SAMPLE_RATE as f64;
                lines.push_str(&format!(
                    "{{\"file\":{},\"chunk_s\":{chunk_s},\"probs\":{}}}\n",
                    json!(name),
                    json!(probs)
                ));
            } else {
                for s in Segmenter::segments(opts, &probs, n) {
                    let (t0, t1) = s.seconds(SAMPLE_RATE);
                    // file first, then times (serde_json's maps sort their keys)
                    lines.push_str(&format!(
                        "{{\"file\":{},\"start\":{},\"end\":{}}}\n",
                        json!(name),
                        ms(t0),
                        ms(t1)
                    ));
                }
            }
            lines
        });
        let w = match r {
            Ok(lines) => out.write_all(lines.as_bytes()),
            Err(e) => {
                failed += 1;
                eprintln!("pulsed: {name}: {e}");
                write_error_line(&mut out, Format::Jsonl, &name, &e)
            }
        };
        match w.and_then(|_| out.flush()) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
            Err(e) => return Err(format!("writing output: {e}")),
            Ok(()) => {}
        }
    }
    if failed > 0 {
        eprintln!("pulsed: {failed} of {} files failed", a.files.len());
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Seconds rounded to the millisecond.
fn ms(t: f64) -> f64 {
    (t * 1000.0).round() / 1000.0
}

/// A file's probabilities and its length in samples.
fn probs_of(vad: &Vad, file: &Path, whole: bool) -> Result<(Vec<f32>, u64), String> {
    let audio = pulsed::audio::load_wav(file, SAMPLE_RATE).map_err(|e| e.to_string())?;
    let n = audio.samples.len() as u64;
    if whole {
        return Ok((vad.probs(&audio.samples).map_err(|e| e.to_string())?, n));
    }
    let mut s = vad.session().map_err(|e| e.to_string())?;
    let mut probs = s.push(&audio.samples).map_err(|e| e.to_string())?;
    probs.extend(s.flush().map_err(|e| e.to_string())?);
    Ok((probs, n))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Real-time factor, streamed (chunk by chunk, as a live caller would) and whole.
fn bench(vad: &Vad, a: &Args) -> Result<ExitCode, String> {
    let reps = a.reps.max(1);
    for file in &a.files {
        let audio = pulsed::audio::load_wav(file, SAMPLE_RATE)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let dur = audio.samples.len() as f64 / SAMPLE_RATE as f64;
        let mut s = vad.session().map_err(|e| e.to_string())?;
        let mut runner =
            pulsed::graph::Runner::new(vad.graph().clone()).map_err(|e| e.to_string())?;
        let time = |f: &mut dyn FnMut() -> Result<usize, String>| -> Result<f64, String> {
            f()?; // warm-up
            let mut t = Vec::new();
            for _ in 0..reps {
                let start = Instant::now();
                f()?;
                t.push(start.elapsed().as_secs_f64());
            }
            Ok(median(t))
        };
        let streamed = time(&mut || {
            s.reset();
            let mut n = 0;
            for c in audio.samples.chunks(CHUNK) {
                n += s.push(c).map_err(|e| e.to_string())?.len();
            }
            Ok(n + s.flush().map_err(|e| e.to_string())?.len())
        })?;
        let whole = time(&mut || {
            vad.probs_with(&mut runner, &audio.samples)
                .map(|p| p.len())
                .map_err(|e| e.to_string())
        })?;
        println!(
            "pulsed vad {} ({dur:.2} s, one thread): streamed {:.2} ms, RTF {:.5}; whole {:.2} ms, RTF {:.5}",
            file.display(),
            streamed * 1e3,
            streamed / dur,
            whole * 1e3,
            whole / dur
        );
    }
    Ok(ExitCode::SUCCESS)
}
