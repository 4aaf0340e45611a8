//! The HTTP routes: `POST /v1/audio/transcriptions`, `GET /v1/models`,
//! `GET /health`, `GET /metrics`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::multipart::{Multipart, MultipartError, MultipartRejection};
use axum::extract::{Path, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::api_error::ApiError;
use super::formats::{self, ResponseFormat};
use super::metrics::add_seconds;
use super::state::AppState;

/// A transcription request's fields.
#[derive(Default)]
pub(super) struct Request {
    /// The uploaded file and the name the client gave it.
    pub file: Option<(Bytes, String)>,
    model: Option<String>,
    language: Option<String>,
    response_format: Option<String>,
    stream: Option<String>,
}

/// `POST /v1/audio/transcriptions` (multipart): `file`, `model`,
/// `language`, `prompt`, `response_format`, `stream`; other fields
/// (`temperature`, `timestamp_granularities[]`, ...) are read and ignored.
pub async fn transcriptions(
    State(state): State<Arc<AppState>>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    // refused before the upload is read: a busy server answers at once
    let permit = state
        .admit_request()
        .ok_or_else(|| ApiError::busy("every transcription slot is taken (--max-requests)"))?;
    let result = transcribe(&state, multipart).await;
    drop(permit);
    if result.is_err() {
        state
            .metrics
            .requests_failed
            .fetch_add(1, Ordering::Relaxed);
    }
    result
}

async fn transcribe(
    state: &Arc<AppState>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    let mut multipart = multipart.map_err(|e| ApiError {
        status: e.status(),
        ..ApiError::bad_request(
            format!("expected a multipart/form-data body: {}", e.body_text()),
            None,
        )
    })?;
    let req = read_fields(&mut multipart).await?;
    let model = req.model.as_deref().unwrap_or("default");
    if !state.is_model(model) {
        return Err(ApiError::unknown_model(model, &state.options.model_name));
    }
    state
        .check_language(req.language.as_deref())
        .map_err(|e| ApiError::bad_request(e, Some("language")))?;
    let format = match req.response_format.as_deref() {
        None | Some("") => ResponseFormat::Json,
        Some(f) => ResponseFormat::parse(f).ok_or_else(|| {
            ApiError::bad_request(
                format!("response_format `{f}` is not one of json, text, srt, vtt, verbose_json"),
                Some("response_format"),
            )
        })?,
    };
    let stream = match req.stream.as_deref() {
        None | Some("false") | Some("") => false,
        Some("true") => true,
        Some(s) => {
            return Err(ApiError::bad_request(
                format!("stream must be true or false, not `{s}`"),
                Some("stream"),
            ))
        }
    };
    let (bytes, name) = req
        .file
        .ok_or_else(|| ApiError::bad_request("the `file` field is missing", Some("file")))?;
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "the uploaded file is empty",
            Some("file"),
        ));
    }
    let t = state.transcriber.clone();
    let done = tokio::task::spawn_blocking(move || {
        let upload = Upload::write(&bytes, &name)?;
        t.transcribe_file(&upload.path).map_err(|e| match e {
            crate::Error::Audio(a) => ApiError::bad_request(
                format!(
                    "the audio could not be read: {}",
                    without_path(&a.to_string(), &upload.path)
                ),
                Some("file"),
            ),
            other => ApiError::internal(format!("transcription failed: {other}")),
        })
    })
    .await
    .map_err(|e| ApiError::internal(format!("the transcription task failed: {e}")))??;
    add_seconds(&state.metrics.file_audio_us, done.transcript.duration_s);
    Ok(if stream {
        formats::sse(&done)
    } else {
        formats::render(&done, format)
    })
}

/// Reads every field; the file stays in memory (bounded by the body limit).
pub(super) async fn read_fields(multipart: &mut Multipart) -> Result<Request, ApiError> {
    let mut req = Request::default();
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_string();
        match name.as_str() {
            "file" => {
                let file_name = field.file_name().unwrap_or_default().to_string();
                let bytes = field.bytes().await.map_err(multipart_error)?;
                req.file = Some((bytes, file_name));
            }
            "model" | "language" | "response_format" | "stream" => {
                let value = field
                    .text()
                    .await
                    .map_err(multipart_error)?
                    .trim()
                    .to_string();
                let slot = match name.as_str() {
                    "model" => &mut req.model,
                    "language" => &mut req.language,
                    "response_format" => &mut req.response_format,
                    _ => &mut req.stream,
                };
                *slot = Some(value);
            }
            // accepted, not used: the prompt and decoding are fixed when
            // the server starts (docs/serve.md)
            _ => {
                field.bytes().await.map_err(multipart_error)?;
            }
        }
    }
    Ok(req)
}

fn multipart_error(e: MultipartError) -> ApiError {
    let status = e.status();
    let what = if status == StatusCode::PAYLOAD_TOO_LARGE {
        "the upload is larger than the server takes (--max-upload-mb)".to_string()
    } else {
        format!("the multipart body could not be read: {}", e.body_text())
    };
    ApiError {
        status,
        ..ApiError::bad_request(what, Some("file"))
    }
}

/// The server's temporary file name out of an error (the client knows its
/// file by its own name).
fn without_path(message: &str, path: &std::path::Path) -> String {
    message.replace(&path.display().to_string(), "upload")
}

/// An upload written to a temporary file (every reader of the crate reads
/// files, and the compressed formats need to seek), removed when dropped.
struct Upload {
    path: PathBuf,
}

impl Upload {
    /// Writes `bytes` under a fresh name; the client's file name lends
    /// only its extension (letters and digits), a hint for the decoder.
    fn write(bytes: &[u8], client_name: &str) -> Result<Upload, ApiError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let ext: String = std::path::Path::new(client_name)
            .extension()
            .and_then(|e| e.to_str())
            .filter(|e| e.len() <= 5 && e.chars().all(|c| c.is_ascii_alphanumeric()))
            .unwrap_or("bin")
            .to_ascii_lowercase();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("pulsed-upload-{}-{n}.{ext}", std::process::id()));
        let failed = |e: std::io::Error| ApiError::internal(format!("cannot keep the upload: {e}"));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(failed)?;
        let upload = Upload { path };
        f.write_all(bytes).map_err(failed)?;
        Ok(upload)
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn model_object(name: &str) -> Value {
    json!({"id": name, "object": "model", "created": 0, "owned_by": "pulsed"})
}

/// `GET /v1/models`: the loaded model.
pub async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [model_object(&state.options.model_name)]}))
}

/// `GET /v1/models/{id}`.
pub async fn model(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if id == state.options.model_name {
        Ok(Json(model_object(&id)))
    } else {
        Err(ApiError::unknown_model(&id, &state.options.model_name))
    }
}

/// `GET /health`: up (no key needed).
pub async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /metrics`: Prometheus' text format.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        state.metrics.render() + &shared_steps(&state),
    )
        .into_response()
}

/// The shared live decoder's counters, where live sessions share one.
fn shared_steps(state: &AppState) -> String {
    use crate::models::whisper::shared::WORK;
    let Some(c) = state.transcriber.shared_steps() else {
        return String::new();
    };
    let mut out = format!(
        "# HELP pulsed_decoder_steps_total Decoder steps the live sessions' shared decoder ran.\n\
         # TYPE pulsed_decoder_steps_total counter\n\
         pulsed_decoder_steps_total {}\n\
         # HELP pulsed_decoder_rows_total Rows those steps fed (one per session a step served).\n\
         # TYPE pulsed_decoder_rows_total counter\n\
         pulsed_decoder_rows_total {}\n\
         # HELP pulsed_decoder_busy_seconds_total The shared decoder's thread at work, by what it did.\n\
         # TYPE pulsed_decoder_busy_seconds_total counter\n\
         pulsed_decoder_busy_seconds_total{{work=\"steps\"}} {:.3}\n",
        c.steps, c.rows, c.step_s
    );
    for (work, s) in WORK.iter().zip(c.alone_s) {
        out.push_str(&format!(
            "pulsed_decoder_busy_seconds_total{{work=\"{work}\"}} {s:.3}\n"
        ));
    }
    out.push_str(
        "# HELP pulsed_decoder_calls_total Calls the shared decoder ran for one session alone, by what they did.\n\
         # TYPE pulsed_decoder_calls_total counter\n",
    );
    for (work, n) in WORK.iter().zip(c.alone_calls) {
        out.push_str(&format!(
            "pulsed_decoder_calls_total{{work=\"{work}\"}} {n}\n"
        ));
    }
    out
}

/// Any other path.
pub async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        ..ApiError::bad_request("no such route (see docs/serve.md)", None)
    }
}
