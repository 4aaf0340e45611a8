//! Transcribes one WAV with any model the API opens (a Whisper checkpoint
//! by default) and prints its text, language and timed words.
//!
//! ```text
//! cargo run --release --example transcribe_file -- [MODEL] [FILE.wav]
//! ```
//! `MODEL`: a short name in the model cache (default `whisper-tiny.en`;
//! `pulsed fetch NAME` fetches one) or a model folder.

use std::path::PathBuf;

use pulsed::asr::{Transcriber, TranscriberOptions};
use pulsed::engine::Engine;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let model = PathBuf::from(args.next().unwrap_or_else(|| "whisper-tiny.en".into()));
    let file = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "fixtures/whisper/librivox_dev00.wav".into()),
    );
    let t = Transcriber::open(Some(&model), &TranscriberOptions::default(), Engine::auto())?;
    let result = t.transcribe_file(&file)?;
    println!("{}", result.transcript.text);
    if let Some(language) = &result.language {
        println!("language: {language}");
    }
    for w in &result.transcript.words {
        println!(
            "  {:7.2} {:7.2}  {:.2}  {}",
            w.start_s, w.end_s, w.confidence, w.text
        );
    }
    Ok(())
}
