//! `--api-key`: every route but `/health` and the page needs
//! `Authorization: Bearer KEY`, compared in constant time (a WebSocket
//! upgrade is an HTTP request too, so it is refused with 401 before it
//! upgrades). A browser cannot set that header on a WebSocket: it may send
//! the key as the subprotocol `openai-insecure-api-key.KEY` instead, as
//! OpenAI's browser clients do.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, SEC_WEBSOCKET_PROTOCOL};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::api_error::ApiError;
use super::state::AppState;

/// Lets the request through when no key is set or it bears the key.
pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(key) = &state.options.api_key else {
        return next.run(req).await;
    };
    let bearer = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let given = bearer.or_else(|| subprotocol_key(&req));
    match given {
        Some(g) if same_secret(g.as_bytes(), key.as_bytes()) => next.run(req).await,
        _ => ApiError::unauthorized().into_response(),
    }
}

/// The key a WebSocket upgrade offers as a subprotocol.
fn subprotocol_key(req: &Request) -> Option<&str> {
    req.headers()
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix(KEY_PROTOCOL))
}

/// The subprotocol prefix that carries a key.
const KEY_PROTOCOL: &str = "openai-insecure-api-key.";

/// Whether `a` equals `b`, in time that depends only on their lengths.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= (x ^ y) as u64;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::same_secret;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"k3y", b"k3y"));
        assert!(!same_secret(b"k3y", b"k3z"));
        assert!(!same_secret(b"k3y", b"k3y0"));
        assert!(!same_secret(b"", b"k"));
        assert!(same_secret(b"", b""));
    }
}
