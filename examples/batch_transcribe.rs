//! Transcribes every WAV under the given folders (or files, or glob patterns)
//! on all cores, the encoder on the GPU when there is one (each worker on a
//! CUDA stream of its own, running a cohort of files through one batched
//! chunk step), and prints one line per file as each finishes.
//!
//! ```text
//! cargo run --release --example batch_transcribe -- fixtures/asr/heldout
//! ```

use std::path::PathBuf;

use pulsed::asr::{ConformerWorker, Recognizer, RecognizerOptions};
use pulsed::batch::{self, BatchOptions, Control, Outcome};
use pulsed::engine::Engine;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let inputs: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if inputs.is_empty() {
        return Err("usage: batch_transcribe FILE|DIR|GLOB...".into());
    }
    let files = batch::expand_inputs(&inputs)?;
    // One recogniser, shared read-only by the workers; each worker streams its
    // files on a lane of the recogniser's engine.
    let rec = Recognizer::open(
        pulsed::models::ModelDir::default_path(),
        RecognizerOptions::default(),
    )?
    .with_engine(Engine::auto());
    eprintln!("encoder on {}", rec.engine().name());
    let mut opts = BatchOptions::default();
    opts.streams = pulsed::asr::default_streams(rec.engine(), files.len(), opts.jobs);
    let control = Control::new();
    // each worker made on its own thread: a lane and a batched session of its own
    let make = || ConformerWorker::new(&rec, opts);
    let summary = batch::run(&files, opts, &control, &make, |r| {
        match r.outcome {
            Outcome::Done {
                transcript,
                duration_s,
                ..
            } => {
                println!(
                    "{} ({duration_s:.1} s in {:.2} s): {}",
                    r.path.display(),
                    r.elapsed_s,
                    transcript.text
                )
            }
            Outcome::Failed(e) => eprintln!("failed: {e}"),
            Outcome::Cancelled => {}
        }
        Ok::<(), std::io::Error>(())
    })?;
    eprintln!(
        "{} transcribed, {} failed; {:.1} s of audio in {:.1} s ({:.1} audio s/s on {} workers x {} streams)",
        summary.transcribed,
        summary.failed,
        summary.audio_s,
        summary.wall_s,
        summary.audio_s / summary.wall_s.max(1e-9),
        opts.jobs,
        opts.streams
    );
    Ok(())
}
