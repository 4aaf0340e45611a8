//! Transcribes every WAV under a folder in the worker pool (one worker per
//! core), printing each file's text as it finishes and the progress
//! counters meanwhile.
//!
//! ```text
//! cargo run --release --example transcribe_folder -- [MODEL] [DIR]
//! ```
//! `MODEL`: default `whisper-tiny.en`; `DIR`: default `fixtures/asr/heldout`.

use std::path::PathBuf;

use pulsed::asr::{Transcriber, TranscriberOptions};
use pulsed::batch::{self, Control, Outcome};
use pulsed::engine::Engine;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let model = PathBuf::from(args.next().unwrap_or_else(|| "whisper-tiny.en".into()));
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "fixtures/asr/heldout".into()));
    let files = batch::expand_inputs(&[dir])?;
    let t = Transcriber::open(Some(&model), &TranscriberOptions::default(), Engine::auto())?;
    let opts = t.batch_options(batch::default_jobs(), None, files.len());
    let control = Control::new();
    let summary = t.run_files(&files, opts, &control, |r| {
        match r.outcome {
            Outcome::Done { transcript, .. } => println!(
                "[{}/{}] {}: {}",
                control.files_finished(),
                files.len(),
                r.path.display(),
                transcript.text
            ),
            Outcome::Failed(e) => eprintln!("failed: {e}"),
            Outcome::Cancelled => {}
        }
        Ok::<(), std::io::Error>(())
    })?;
    eprintln!(
        "{} transcribed, {} failed: {:.1} s of audio in {:.1} s",
        summary.transcribed, summary.failed, summary.audio_s, summary.wall_s
    );
    Ok(())
}
