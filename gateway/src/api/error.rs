//! API errors as JSON: `{"error": code, "detail": sentence, "request_id": ..., ...}`.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

/// An error answer: status, code, detail, and any extra fields.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub detail: String,
    pub extra: Map<String, Value>,
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code,
            detail: detail.into(),
            extra: Map::new(),
            retry_after_s: None,
        }
    }

    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(400, "bad_request", detail)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            401,
            "unauthorized",
            "missing or wrong bearer token; send `Authorization: Bearer <token>` with the token from the gateway's local-token file",
        )
    }

    pub fn stopping() -> Self {
        Self::new(
            503,
            "unavailable",
            "this gateway is stopping; try again once it is back; nothing was sent",
        )
    }

    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(500, "internal", format!("{detail}; see the gateway's log"))
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.into(), value.into());
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = Map::new();
        body.insert("error".into(), json!(self.code));
        body.insert("detail".into(), json!(self.detail));
        body.extend(self.extra);
        let mut response = (self.status, axum::Json(Value::Object(body))).into_response();
        if let Some(seconds) = self.retry_after_s {
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from(seconds));
        }
        response
    }
}
