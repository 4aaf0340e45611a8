//! The `pulsed` command line: transcribe, inspect.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pulsed: {e}");
            ExitCode::from(2)
        }
    }
}
