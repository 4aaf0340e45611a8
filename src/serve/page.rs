//! The page at `/`, for a person to try the server: the microphone
//! through the browser (getUserMedia and an AudioWorklet) over the same
//! Realtime WebSocket any client uses. Its three files are compiled into
//! the binary (no build step, nothing fetched from elsewhere), and hold no
//! data: they are served without the key, which the page asks for and
//! sends with its WebSocket.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;

const INDEX: &str = include_str!("page/index.html");
const APP: &str = include_str!("page/app.js");
const WORKLET: &str = include_str!("page/worklet.js");

fn file(kind: &'static str, body: &'static str) -> impl IntoResponse {
    ([(CONTENT_TYPE, kind), (CACHE_CONTROL, "no-cache")], body)
}

pub async fn index() -> impl IntoResponse {
    file("text/html; charset=utf-8", INDEX)
}

pub async fn app() -> impl IntoResponse {
    file("text/javascript; charset=utf-8", APP)
}

pub async fn worklet() -> impl IntoResponse {
    file("text/javascript; charset=utf-8", WORKLET)
}
