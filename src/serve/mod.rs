//! `pulsed serve`: one model, opened once, behind HTTP and WebSocket APIs
//! that OpenAI's clients speak (see docs/serve.md):
//!
//! - `POST /v1/audio/transcriptions` ([`http`]): an uploaded file, as
//!   json, text, srt, vtt or verbose_json, or as server-sent events;
//! - `GET /v1/realtime` ([`realtime`]): live transcription over a
//!   WebSocket, the Realtime API's transcription events;
//! - `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus text).
//!
//! [`load`] is the other side: Realtime clients by the thousand, for
//! `pulsed load`.
//!
//! Model work never runs on the async executor: files go to
//! `spawn_blocking`, each live stream has its own inference thread (the
//! library's live session). Admission never waits: over `--max-streams`
//! a WebSocket gets an `error` event and is closed, over
//! `--max-requests` a request gets 503.

mod api_error;
mod auth;
mod deltas;
mod formats;
#[cfg(test)]
mod fuzz_tests;
#[doc(hidden)]
pub mod fuzzing;
mod http;
pub mod load;
mod metrics;
mod page;
mod pcm;
mod realtime;
mod realtime_events;
mod session_config;
mod state;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

use crate::asr::{LiveSettings, Transcriber};

pub use auth::same_secret;
pub use metrics::Metrics;
pub use state::AppState;

/// How long a stopping server waits for its live sessions to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How the server runs; `pulsed serve`'s flags.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The name clients give for the loaded model (`default` works too).
    pub model_name: String,
    /// Every route but `/health` and the page (`/`, its scripts) needs
    /// `Authorization: Bearer KEY` (a WebSocket may send it as the
    /// subprotocol `openai-insecure-api-key.KEY`, as browsers must).
    pub api_key: Option<String>,
    /// Live sessions at once.
    pub max_streams: usize,
    /// File transcriptions at once.
    pub max_requests: usize,
    /// Largest request body (an upload).
    pub max_upload_bytes: usize,
    /// Largest WebSocket message.
    pub max_message_bytes: usize,
    /// A live session that sends nothing this long is closed.
    pub idle_timeout: Duration,
    /// The language the model is set to (`None`: detected, or the model
    /// has no choice).
    pub language: Option<String>,
    /// Live sessions' settings (a session's `silence_duration_ms` replaces
    /// `end_silence_s`; `turn_detection: null` turns endpointing off).
    pub live: LiveSettings,
}

impl ServeOptions {
    /// Defaults for the model named `model_name`.
    pub fn new(model_name: impl Into<String>) -> ServeOptions {
        ServeOptions {
            model_name: model_name.into(),
            api_key: None,
            max_streams: 16,
            max_requests: std::thread::available_parallelism().map_or(2, |n| n.get()),
            max_upload_bytes: 25 << 20,
            max_message_bytes: 1 << 20,
            idle_timeout: Duration::from_secs(300),
            language: None,
            live: LiveSettings::default(),
        }
    }
}

/// The routes over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.options.max_upload_bytes;
    Router::new()
        .route("/v1/audio/transcriptions", post(http::transcriptions))
        .route("/v1/models", get(http::models))
        .route("/v1/models/{id}", get(http::model))
        .route("/v1/realtime", get(realtime::upgrade))
        .route("/metrics", get(http::metrics))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ))
        .route("/health", get(http::health))
        .route("/", get(page::index))
        .route("/app.js", get(page::app))
        .route("/worklet.js", get(page::worklet))
        .fallback(http::not_found)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Serves `transcriber` on `listener` until `shutdown` resolves; then
/// live sessions finish their lines and close, and the server returns.
pub async fn serve(
    listener: TcpListener,
    transcriber: Arc<Transcriber>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let state = Arc::new(AppState::new(transcriber, options, stopped));
    axum::serve(listener, router(state.clone()))
        .with_graceful_shutdown(async move {
            shutdown.await;
            let _ = stop.send(true);
        })
        .await?;
    // upgraded connections outlive the server's own wait: give the live
    // sessions time to send their last lines and close
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    while state.metrics.streams_active.load(Ordering::Relaxed) > 0
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
