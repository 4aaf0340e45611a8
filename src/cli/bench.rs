//! `pulsed bench`: real-time factor of the shipped model on the CPU, streamed
//! and whole, and the streaming session's own overhead, side by side.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use pulsed::asr::{Decoding, Mode, Recognizer, RecognizerOptions};
use pulsed::models::ModelDir;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// WAV file to run (default: the shipped fixture).
    file: Option<PathBuf>,
    #[arg(long)]
    model: Option<PathBuf>,
    /// Input samples per pulse.
    #[arg(long, default_value_t = 5120)]
    pulse: usize,
    /// Timed repetitions (the median is printed).
    #[arg(long, default_value_t = 5)]
    reps: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    let dir = super::model_dir(a.model);
    let file = a.file.unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/asr/hello.wav"
        ))
    });
    let model = ModelDir::open(&dir).map_err(|e| e.to_string())?;
    let audio =
        pulsed::audio::load_wav(&file, model.config.sample_rate).map_err(|e| e.to_string())?;
    let dur = audio.duration_s;
    let reps = a.reps.max(1);
    println!(
        "file {} ({dur:.2} s), model {}, pulse {} samples, one thread",
        file.display(),
        dir.display(),
        a.pulse
    );
    for (label, mode) in [
        ("streamed", Mode::Streamed { pulse: a.pulse }),
        ("whole", Mode::Whole),
    ] {
        let rec = Recognizer::new(
            model.clone(),
            RecognizerOptions {
                mode,
                decoding: Decoding::Greedy,
            },
        )
        .map_err(|e| e.to_string())?;
        rec.transcribe(&audio.samples).map_err(|e| e.to_string())?; // warm-up
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            rec.transcribe(&audio.samples).map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64());
        }
        let t = median(times);
        println!(
            "{label:>9}: {:8.2} ms per file, real-time factor {:.4}",
            t * 1000.0,
            t / dur
        );
    }
    // session overhead: push() (buffering, state, collecting outputs) vs the bare steps
    let rec = Recognizer::new(
        model,
        RecognizerOptions {
            mode: Mode::Streamed { pulse: a.pulse },
            decoding: Decoding::Greedy,
        },
    )
    .map_err(|e| e.to_string())?;
    let pm = rec.pulsed_model().ok_or("no pulsed model")?.clone();
    let mut s = pulsed::pulse::StreamingSession::new(pm).map_err(|e| e.to_string())?;
    let pulses = audio.samples.len() / a.pulse;
    if pulses == 0 {
        return Err(format!("{} is shorter than one pulse", file.display()));
    }
    let body = &audio.samples[..pulses * a.pulse];
    let (mut pushed, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        s.reset();
        let t = Instant::now();
        s.push(body).map_err(|e| e.to_string())?;
        pushed.push(t.elapsed().as_secs_f64());
        s.reset();
        s.push(&body[..a.pulse - 1]).map_err(|e| e.to_string())?;
        let t = Instant::now();
        for _ in 0..pulses {
            s.step_only().map_err(|e| e.to_string())?;
        }
        bare.push(t.elapsed().as_secs_f64());
    }
    let (p, b) = (median(pushed), median(bare));
    println!(
        "  session: {:.3} ms per chunk step, {:.3} ms per push()-driven step, overhead {:+.2}%",
        b * 1000.0 / pulses as f64,
        p * 1000.0 / pulses as f64,
        (p - b) / b * 100.0
    );
    Ok(ExitCode::SUCCESS)
}
