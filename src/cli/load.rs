//! `pulsed load`: Realtime clients at real-time pace against a server
//! (see [`pulsed::serve::load`] and docs/serve.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use pulsed::serve::load::{self, LoadOptions, MAX_CLIENTS};

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Format {
    Text,
    Json,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The server's Realtime endpoint.
    #[arg(long, default_value = "ws://127.0.0.1:8000/v1/realtime")]
    url: String,
    /// Streams at once (at most 10000).
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Sent as `Authorization: Bearer KEY`.
    #[arg(long)]
    api_key: Option<String>,
    /// Seconds over which the clients start, evenly.
    #[arg(long, default_value_t = 1.0)]
    ramp: f64,
    /// Seconds the whole run may last; streams still running are closed and
    /// counted as unfinished.
    #[arg(long)]
    duration: Option<f64>,
    /// Milliseconds of audio per append (20 to 100).
    #[arg(long, default_value_t = 40)]
    block_ms: u32,
    /// Seconds a stream waits for its last line after it commits.
    #[arg(long, default_value_t = 30.0)]
    final_timeout: f64,
    /// Lets --url name a host beyond loopback (a load test can take a server down).
    #[arg(long)]
    allow_remote: bool,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Clients beside --clients that misbehave, in turn: malformed
    /// messages among their appends, a stall (neither sending nor reading
    /// from halfway), a drop without a close frame, a message over the
    /// server's size limit. They start between the others, which keep the
    /// start times of a run without them, and are left out of the figures.
    #[arg(long, default_value_t = 0)]
    misbehaving: usize,
    /// WAV files, replayed round-robin (client i sends file i mod n).
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    let seconds = |name: &str, s: f64| {
        Duration::try_from_secs_f64(s)
            .map_err(|_| format!("{name} must be a number of seconds, 0 or more"))
    };
    if a.clients > MAX_CLIENTS || a.misbehaving > MAX_CLIENTS {
        return Err(format!("--clients must be 1 to {MAX_CLIENTS}"));
    }
    let options = LoadOptions {
        api_key: a.api_key,
        ramp: seconds("--ramp", a.ramp)?,
        duration: a.duration.map(|d| seconds("--duration", d)).transpose()?,
        block_ms: a.block_ms,
        final_timeout: seconds("--final-timeout", a.final_timeout)?,
        allow_remote: a.allow_remote,
        progress: true,
        misbehaving: a.misbehaving,
        ..LoadOptions::new(a.url, a.clients)
    };
    // refused before the runtime starts or any file is read
    options.check()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the async runtime: {e}"))?;
    let report = runtime.block_on(load::run(&options, &a.files))?;
    super::print_all(&match a.format {
        Format::Text => report.text(),
        Format::Json => report.json(),
    })?;
    Ok(ExitCode::SUCCESS)
}
