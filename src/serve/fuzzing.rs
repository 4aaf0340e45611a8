//! The server's readers of client input driven without a socket or a
//! model, as the handlers drive them: the entry points of the fuzz targets
//! (`fuzz/`, docs/fuzzing.md). Not part of the API.

use axum::body::Body;
use axum::extract::{FromRequest, Multipart};
use axum::http::header::CONTENT_TYPE;
use axum::http::Request;

use super::http::read_fields;
use super::pcm::PcmInput;
use super::realtime_events::{parse, ClientEvent};
use super::session_config::SessionConfig;

/// The model's rate the realtime path resamples to.
const MODEL_RATE: u32 = 16_000;

/// Reads a connection's text messages as `realtime.rs` does, up to the
/// live session: each is parsed, a session update is applied and reported,
/// a rate change makes a new decoder, an append's audio is decoded and
/// resampled. Returns how many samples the live session would get and how
/// many messages were refused.
pub fn realtime_messages<'a>(texts: impl IntoIterator<Item = &'a str>) -> (usize, usize) {
    let mut config = SessionConfig::new("default", None, 500);
    let mut pcm = PcmInput::new(config.rate, MODEL_RATE).expect("both rates are above zero");
    let (mut samples, mut refused) = (Vec::new(), 0);
    for text in texts {
        let event = match parse(text) {
            Ok(incoming) => incoming.event,
            Err(_) => {
                refused += 1;
                continue;
            }
        };
        let (session, beta) = match event {
            ClientEvent::Append(audio) => {
                refused += usize::from(pcm.push(&audio, &mut samples).is_err());
                continue;
            }
            ClientEvent::Commit => {
                pcm.flush(&mut samples);
                continue;
            }
            ClientEvent::Clear => {
                pcm.reset();
                continue;
            }
            ClientEvent::SessionUpdate(s) => (s, false),
            ClientEvent::TranscriptionSessionUpdate(s) => (s, true),
        };
        let mut next = config.clone();
        let checked = if beta {
            next.update_beta(&session)
        } else {
            next.update_ga(&session)
        };
        if checked.is_err() {
            refused += 1;
            continue;
        }
        if next.rate != config.rate {
            pcm.flush(&mut samples);
            match PcmInput::new(next.rate, MODEL_RATE) {
                Ok(p) => pcm = p,
                Err(_) => {
                    refused += 1;
                    continue;
                }
            }
        }
        config = next;
        let _ = if beta {
            config.beta("s")
        } else {
            config.ga("s")
        };
    }
    (samples.len(), refused)
}

/// Reads a `POST /v1/audio/transcriptions` body with the given
/// `Content-Type` as the route does, up to the upload; the uploaded file's
/// length, or the error the client would get.
pub fn transcription_form(content_type: &[u8], body: Vec<u8>) -> Result<usize, String> {
    let request = Request::builder()
        .header(CONTENT_TYPE, content_type)
        .body(Body::from(body))
        .map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let mut multipart = Multipart::from_request(request, &())
            .await
            .map_err(|e| e.body_text())?;
        let req = read_fields(&mut multipart)
            .await
            .map_err(|e| e.body().to_string())?;
        Ok(req.file.map_or(0, |(bytes, _)| bytes.len()))
    })
}
