//! `pulsed serve`: the model behind OpenAI-compatible HTTP and WebSocket
//! APIs (see [`pulsed::serve`] and docs/serve.md).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use pulsed::asr::{Family, LiveSettings, Mode, Transcriber, TranscriberOptions, WhisperOptions};
use pulsed::models::fetch::{ModelChoice, DEFAULT_MODEL};
use pulsed::serve::ServeOptions;

use super::device::{Device, Precision};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A short name (`whisper-base-streaming-640ms`, `whisper-tiny.en`,
    /// `pulsed-en-ctc`: the shipped model) or a folder. Default:
    /// whisper-base-streaming-640ms with `--language en`, fetched on first use.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Where the model runs: a GPU when one is usable (auto), or the one named.
    #[arg(long, value_enum, default_value = "auto")]
    device: Device,
    /// The address to listen on; any other than loopback needs `--api-key`.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// The port (0: any free one, printed at start).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Every route but /health then needs `Authorization: Bearer KEY`.
    #[arg(long)]
    api_key: Option<String>,
    /// Live (WebSocket) sessions at once; one more gets an error event and is closed.
    #[arg(long, default_value_t = 16)]
    max_streams: usize,
    /// File transcriptions at once; one more gets 503 (default: one per core).
    #[arg(long)]
    max_requests: Option<usize>,
    /// Largest upload, in MiB.
    #[arg(long, default_value_t = 25)]
    max_upload_mb: usize,
    /// Largest WebSocket message, in KiB (an append of 1 s of 24 kHz PCM16 is 64 KiB).
    #[arg(long, default_value_t = 1024)]
    max_message_kb: usize,
    /// Whisper: the spoken language (default model: en); detected when absent.
    #[arg(long)]
    language: Option<String>,
    /// Seconds of silence that end a live utterance (a session's
    /// turn_detection.silence_duration_ms replaces it).
    #[arg(long, default_value_t = 0.6)]
    end_silence: f64,
    /// Live Whisper: no Silero VAD (a live session is then one utterance
    /// until the client commits).
    #[arg(long)]
    no_vad: bool,
    /// Whisper, uploaded files: write what the decoder writes where Silero
    /// VAD hears no speech (by default there is no text there).
    #[arg(long)]
    no_speech_gate: bool,
    /// Seconds a live session may stay silent (no message) before it is closed.
    #[arg(long, default_value_t = 300)]
    idle_timeout: u64,
    /// Live Whisper (a chunked checkpoint): sessions decode through one
    /// decoder, their steps batched, instead of a network each. Memory stays
    /// flat as sessions grow; latency is worse today (docs/serve.md).
    #[arg(long)]
    shared_decoder: bool,
}

pub fn run(mut a: Args) -> Result<ExitCode, String> {
    if !a.host.is_loopback() && a.api_key.is_none() {
        return Err(format!(
            "listening on {} (beyond loopback) needs --api-key",
            a.host
        ));
    }
    if a.max_streams == 0 || a.max_requests == Some(0) {
        return Err("--max-streams and --max-requests must be at least 1".into());
    }
    if !(a.end_silence.is_finite() && a.end_silence > 0.0) {
        return Err("--end-silence must be above 0".into());
    }
    let name = model_name(a.model.as_deref());
    let vad = !a.no_vad || !a.no_speech_gate;
    a.model = super::chosen_model(a.model.take(), false, vad, &mut a.language)?;
    let family = Family::of(a.model.as_deref(), false).map_err(|e| e.to_string())?;
    let mut opts = TranscriberOptions {
        mode: Mode::Streamed { pulse: 5120 },
        whisper: WhisperOptions {
            speech_gate: !a.no_speech_gate,
            ..WhisperOptions::default()
        },
        ..TranscriberOptions::default()
    };
    opts.whisper.decoding.language = a.language.clone();
    let engine = a.device.engine(Precision::F32)?;
    let mut t = Transcriber::open(a.model.as_deref(), &opts, engine).map_err(|e| e.to_string())?;
    if let Some(what) = t.describe() {
        eprintln!("pulsed: {what}");
    }
    if a.shared_decoder
        && t.share_live_decoder(a.max_streams)
            .map_err(|e| e.to_string())?
    {
        eprintln!(
            "pulsed: live sessions share one decoder ({} slots; their steps run batched)",
            a.max_streams
        );
    }
    let mut live = LiveSettings {
        end_silence_s: a.end_silence,
        vad: !a.no_vad,
        ..LiveSettings::default()
    };
    opts.whisper
        .decoding
        .apply(None, &mut live.whisper.decode)
        .map_err(|e| e.to_string())?;
    let language = family.language(a.language.clone());
    let mut options = ServeOptions::new(name);
    options.api_key = a.api_key.clone();
    options.max_streams = a.max_streams;
    if let Some(n) = a.max_requests {
        options.max_requests = n;
    }
    options.max_upload_bytes = a.max_upload_mb.saturating_mul(1 << 20);
    options.max_message_bytes = a.max_message_kb.saturating_mul(1 << 10);
    options.idle_timeout = Duration::from_secs(a.idle_timeout.max(1));
    options.language = language;
    options.live = live;
    serve(t, options, SocketAddr::new(a.host, a.port))
}

/// The name clients use for the model: its short name, or its folder's name.
fn model_name(arg: Option<&std::path::Path>) -> String {
    match ModelChoice::of(arg) {
        ModelChoice::Default(name) => name.to_string(),
        ModelChoice::Shipped(_) => pulsed::models::fetch::SHIPPED_MODEL.to_string(),
        ModelChoice::Given(p) => p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| DEFAULT_MODEL.to_string()),
    }
}

fn serve(t: Transcriber, options: ServeOptions, addr: SocketAddr) -> Result<ExitCode, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        // the port the system gave for --port 0
        let addr = listener.local_addr().unwrap_or(addr);
        eprintln!(
            "pulsed: serving {} on http://{addr} (max {} live streams{})",
            options.model_name,
            options.max_streams,
            if options.api_key.is_some() {
                ", API key required"
            } else {
                ""
            }
        );
        pulsed::serve::serve(listener, Arc::new(t), options, stop_signal())
            .await
            .map_err(|e| format!("server: {e}"))
    })?;
    eprintln!("pulsed: stopped");
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C or SIGTERM.
async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("pulsed: stopping (live lines are finished)");
}
