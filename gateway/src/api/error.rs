//! API errors as JSON (`ferry_kit::contract::ErrorBody`): `{"error": code, "detail":
//! sentence, "request_id": ..., ...}`. Every `4xx` and `5xx` the local API gives has this
//! shape, the router's own (unknown route, bad path or query) included: see [`json_errors`].

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ferry_kit::contract::{ErrorBody, ErrorCode};
use ferry_peer::outcome::RefusalCode;

use crate::names::{Label, VaultName};

/// An error answer: status, body, and `Retry-After` when there is one.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// Boxed: errors travel up through `Result`s on every request's path, and the body is big.
    pub body: Box<ErrorBody>,
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    pub fn new(status: u16, code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body: Box::new(ErrorBody::new(code, detail)),
            retry_after_s: None,
        }
    }

    /// A 400 whose detail is `detail`'s text (a sentence, or an error such as
    /// [`crate::names::NameError`]).
    pub fn bad_request(detail: impl std::fmt::Display) -> Self {
        Self::new(400, ErrorCode::BadRequest, detail.to_string())
    }

    pub fn unauthorized() -> Self {
        Self::new(
            401,
            ErrorCode::Unauthorized,
            "missing or wrong bearer token; send `Authorization: Bearer <token>` with the token from the gateway's local-token file",
        )
    }

    pub fn stopping() -> Self {
        Self::new(
            503,
            ErrorCode::Unavailable,
            "this gateway is stopping; try again once it is back; nothing was sent",
        )
    }

    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(
            500,
            ErrorCode::Internal,
            format!("{detail}; see the gateway's log"),
        )
    }

    pub fn request_id(mut self, id: impl ToString) -> Self {
        self.body.request_id = Some(id.to_string());
        self
    }

    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.body.owner = Some(owner.into());
        self
    }

    /// The owner's label, when the answer knows which owner it was.
    pub fn owner_if_known(self, owner: Option<Label>) -> Self {
        match owner {
            Some(owner) => self.owner(owner),
            None => self,
        }
    }

    pub fn vault(mut self, vault: VaultName) -> Self {
        self.body.vault = Some(vault);
        self
    }

    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.body.reason = Some(reason.into());
        self
    }

    pub fn current_revision(mut self, revision: u64) -> Self {
        self.body.current_revision = Some(revision);
        self
    }

    pub fn at_door(mut self) -> Self {
        self.body.at_door = Some(true);
        self
    }

    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.body.source = Some(source.into());
        self
    }
}

/// The API's error code for an owner's refusal.
pub fn refusal_code(code: RefusalCode) -> ErrorCode {
    match code {
        RefusalCode::Conflict => ErrorCode::Conflict,
        RefusalCode::NotFound => ErrorCode::NotFound,
        RefusalCode::UnknownVault => ErrorCode::UnknownVault,
        RefusalCode::Forbidden => ErrorCode::Forbidden,
        RefusalCode::BadRequest => ErrorCode::BadRequest,
        RefusalCode::StaleRequestId => ErrorCode::StaleRequestId,
        RefusalCode::RateLimited => ErrorCode::RateLimited,
        RefusalCode::Busy => ErrorCode::Busy,
        RefusalCode::TicketRefused => ErrorCode::TicketRefused,
        RefusalCode::VaultAmbiguous => ErrorCode::VaultAmbiguous,
        RefusalCode::Unrecognized(_) => ErrorCode::Refused,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body)).into_response();
        if let Some(seconds) = self.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The most of a non-JSON error body read to quote it in the JSON one.
const QUOTE_LIMIT: usize = 4096;

/// Turns every error answer that is not Ferry's JSON (axum's rejections of a path that is not
/// UTF-8, of a query string that does not parse, of a method a route does not take) into the
/// documented JSON error, quoting what the router said. Ferry's own errors pass untouched.
pub async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let said = axum::body::to_bytes(body, QUOTE_LIMIT)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_string())
        .unwrap_or_default();
    let (status, code, detail) = match parts.status.as_u16() {
        404 => (
            404,
            ErrorCode::UnknownRoute,
            "no such route in the local API (see docs/operations.md)".to_string(),
        ),
        405 => (
            405,
            ErrorCode::MethodNotAllowed,
            "this route does not take that method".to_string(),
        ),
        // Rejections of a path, query or body that could not be read: 400, nothing was sent.
        400 | 413 | 415 | 422 => (
            400,
            ErrorCode::BadRequest,
            format!("the request could not be read ({said}); nothing was sent"),
        ),
        500..=599 => (
            parts.status.as_u16(),
            ErrorCode::Internal,
            format!("{said}; see the gateway's log"),
        ),
        other => (other, ErrorCode::BadRequest, said),
    };
    let mut error = ApiError::new(status, code, detail);
    if let Some(allow) = parts.headers.get(header::ALLOW) {
        if let Ok(allow) = allow.to_str() {
            error.body.detail = format!("{} (allowed: {allow})", error.body.detail);
        }
    }
    let mut response = error.into_response();
    for name in [header::ALLOW, header::RETRY_AFTER] {
        if let Some(value) = parts.headers.get(&name) {
            response.headers_mut().insert(name, value.clone());
        }
    }
    response
}

/// The fallback for paths that match no route.
pub async fn unknown_route() -> ApiError {
    ApiError::new(
        404,
        ErrorCode::UnknownRoute,
        "no such route in the local API (see docs/operations.md)",
    )
}
