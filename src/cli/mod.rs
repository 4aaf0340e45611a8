//! Subcommands of the `pulsed` binary.

mod bench;
mod bench_streamed;
mod compare;
mod device;
mod eval;
mod inspect;
mod lm;
#[cfg(feature = "serve")]
mod load;
mod mic;
mod models;
#[cfg(feature = "serve")]
mod serve;
mod text_policy;
mod transcribe;
mod transcribe_bench;
mod vad;
mod whisper;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Streaming speech recognition on CPU and GPU.
#[derive(Parser, Debug)]
#[command(name = "pulsed", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Transcribe WAV files (default model: whisper-base-streaming-640ms, fetched on first use).
    Transcribe(transcribe::Args),
    /// Print a model's graph: every node with its facts (pulsed with `--pulse`).
    Inspect(inspect::Args),
    /// Real-time factor of the model on the CPU (and the GPU with `--device cuda`).
    Bench(bench::Args),
    /// CPU vs GPU, chunk by chunk and node by node: which node and chunk go wrong first.
    Compare(compare::Args),
    /// Character and word error rates on a jsonl manifest of WAVs and texts.
    Eval(eval::Args),
    /// Live transcription from the microphone, or a WAV at real-time pace.
    Mic(mic::Args),
    /// Speech segments (or probabilities) of WAV files with Silero VAD v6.
    Vad(vad::Args),
    /// The models pulsed knows by short name: which are cached, their sizes.
    Models(models::ModelsArgs),
    /// Fetch models into the model cache (checked, rebuilt when damaged).
    Fetch(models::FetchArgs),
    /// Serve the model over HTTP and WebSocket: OpenAI's transcription and Realtime APIs.
    #[cfg(feature = "serve")]
    Serve(serve::Args),
    /// Many Realtime clients at once against `pulsed serve`: streams held and word latency.
    #[cfg(feature = "serve")]
    Load(load::Args),
}

/// Runs a parsed command line; `Err` is a one-line reason (exit code 2).
pub fn run(cli: Cli) -> Result<ExitCode, String> {
    match cli.command {
        Command::Transcribe(a) => transcribe::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Eval(a) => eval::run(a),
        Command::Mic(a) => mic::run(a),
        Command::Vad(a) => vad::run(a),
        Command::Models(a) => models::models(a),
        Command::Fetch(a) => models::run(a),
        #[cfg(feature = "serve")]
        Command::Serve(a) => serve::run(a),
        #[cfg(feature = "serve")]
        Command::Load(a) => load::run(a),
    }
}

/// The model folder: the argument (`pulsed-en-ctc`: the shipped model), or
/// the shipped model.
fn model_dir(arg: Option<PathBuf>) -> PathBuf {
    pulsed::models::ModelDir::find(arg.as_deref())
}

/// The model `transcribe` and `mic` run: `--model`, or the default for
/// people's speech, fetched into the model cache on first use (`vad`: with
/// Silero VAD). `ctc`: a CTC head has no default (the caller's `--ctc`
/// error says to name the folder). With the default, `language` becomes
/// its language unless one was given.
fn chosen_model(
    arg: Option<PathBuf>,
    ctc: bool,
    vad: bool,
    language: &mut Option<String>,
) -> Result<Option<PathBuf>, String> {
    use pulsed::models::fetch::{ModelChoice, DEFAULT_LANGUAGE};
    if ctc && arg.is_none() {
        return Ok(None);
    }
    let choice = ModelChoice::of(arg.as_deref());
    choice.fetch(vad).map_err(|e| e.to_string())?;
    if choice.is_default() {
        language.get_or_insert_with(|| DEFAULT_LANGUAGE.to_string());
    }
    Ok(Some(choice.spec()))
}

/// Writes to standard output; a closed pipe (`| head`) ends quietly.
fn print_all(text: &str) -> Result<(), String> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("writing output: {e}")),
        _ => Ok(()),
    }
}
