//! Errors as OpenAI's API gives them: an HTTP status and
//! `{"error": {"message", "type", "param", "code"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `server_error`, ...).
    pub kind: &'static str,
    /// The request field at fault.
    pub param: Option<&'static str>,
    /// A machine-readable code.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400: the request is wrong (`param` names the field).
    pub fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param,
            code: None,
        }
    }

    /// 404: no model of that name is loaded.
    pub fn unknown_model(name: &str, loaded: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "the model `{name}` does not exist here: this server runs `{loaded}` \
                 (or ask for `default`)"
            ),
            kind: "invalid_request_error",
            param: Some("model"),
            code: Some("model_not_found"),
        }
    }

    /// 401: no key, or the wrong one.
    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "missing or wrong API key: send `Authorization: Bearer KEY`".into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// 503: the server is at its limit; the client may retry.
    pub fn busy(what: &str) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: format!("the server is busy: {what}; retry later"),
            kind: "server_error",
            param: None,
            code: Some("server_busy"),
        }
    }

    /// 500: the model failed.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    /// The `error` object of the body (the Realtime API's error events
    /// carry the same fields).
    pub fn body(&self) -> Value {
        json!({
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.body() }))).into_response()
    }
}
