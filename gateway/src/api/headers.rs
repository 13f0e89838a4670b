//! Parsing the headers a call may carry. Each parser's error says which header and what it
//! accepts; a bad header is `400 bad_request` and nothing is sent.

use std::time::Duration;

use axum::http::HeaderMap;
use ferry_peer::wire::{Priority, RequestId};

use super::ApiError;
use crate::names;
use crate::owner::verbs::{self, IdProblem, MAX_FUTURE_SKEW};
use ferry_kit::contract::{parse_timeout, ErrorCode, DEFAULT_TIMEOUT};

fn text<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ApiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("header {name} is not plain ASCII text"))),
    }
}

/// `X-Ferry-App`: required on record calls.
pub fn app(headers: &HeaderMap) -> Result<String, ApiError> {
    let app = text(headers, "x-ferry-app")?.ok_or_else(|| {
        ApiError::bad_request(
            "header X-Ferry-App is missing; name your app in it (e.g. X-Ferry-App: notes)",
        )
    })?;
    names::check_app(app).map_err(ApiError::bad_request)?;
    Ok(app.to_string())
}

/// `X-Ferry-Class`: `interactive` (the default) or `background` (bulk imports and the like:
/// the owner runs it after apps' writes, but never more than its aging time after them).
pub fn class(headers: &HeaderMap) -> Result<Priority, ApiError> {
    match text(headers, "x-ferry-class")? {
        None | Some("interactive") => Ok(Priority::Interactive),
        Some("background") => Ok(Priority::Background),
        Some(other) => Err(ApiError::bad_request(format!(
            "X-Ferry-Class {other:?} is neither interactive nor background; nothing was sent"
        ))),
    }
}

/// `X-Ferry-Timeout`: decimal seconds, greater than 0, at most 600; default 30.
pub fn timeout(headers: &HeaderMap) -> Result<Duration, ApiError> {
    let Some(raw) = text(headers, "x-ferry-timeout")? else {
        return Ok(DEFAULT_TIMEOUT);
    };
    parse_timeout(raw).ok_or_else(|| {
        ApiError::bad_request(format!(
            "X-Ferry-Timeout {raw:?} is not a decimal number of seconds greater than 0 and at most 600 (e.g. 2.5); nothing was sent"
        ))
    })
}

/// `X-Ferry-Request-Id`: a hyphenated UUIDv7 with the RFC 9562 variant, dated neither older
/// than the journal keeps nor more than a few minutes ahead of `now_ms` (the gateway's clock);
/// made here when absent.
pub fn request_id(
    headers: &HeaderMap,
    retention: Duration,
    now_ms: u64,
) -> Result<RequestId, ApiError> {
    let Some(raw) = text(headers, "x-ferry-request-id")? else {
        return Ok(RequestId::at(now_ms));
    };
    let id = RequestId::parse(raw).map_err(|err| {
        ApiError::bad_request(format!(
            "X-Ferry-Request-Id {raw:?}: {err}; nothing was sent"
        ))
    })?;
    check_request_id_age(id, retention, now_ms)?;
    Ok(id)
}

/// Refuses an id older than `retention` (`400 stale_request_id`) or dated more than
/// [`MAX_FUTURE_SKEW`] ahead of `now_ms`, the gateway's clock (`400 bad_request`).
pub fn check_request_id_age(
    id: RequestId,
    retention: Duration,
    now_ms: u64,
) -> Result<(), ApiError> {
    match verbs::check_id(id, retention, 0, now_ms) {
        Ok(()) => Ok(()),
        Err(IdProblem::Stale) => Err(ApiError::new(
            400,
            ErrorCode::StaleRequestId,
            format!(
                "request id {id} is older than the journal keeps ({} days); use a new request id; nothing was sent",
                retention.as_secs() / 86_400
            ),
        )),
        Err(IdProblem::FromTheFuture) => Err(ApiError::bad_request(format!(
            "request id {id} is dated more than {} minutes ahead of this machine's clock; check the clock, or omit the header and the gateway makes one; nothing was sent",
            MAX_FUTURE_SKEW.as_secs() / 60
        ))),
        Err(IdProblem::Malformed) => Err(ApiError::bad_request(format!(
            "{id} is not a UUIDv7 with the RFC 9562 variant; nothing was sent"
        ))),
    }
}

/// `If-Match`: the revision a compare-and-swap expects (0 = must not exist). Quotes allowed.
pub fn if_match(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(raw) = text(headers, "if-match")? else {
        return Ok(None);
    };
    raw.trim()
        .trim_matches('"')
        .parse::<u64>()
        .map(Some)
        .map_err(|_| {
            ApiError::bad_request(format!(
                "If-Match {raw:?} is not a revision number (0 means the record must not exist); nothing was sent"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_outside_the_contract_are_refused() {
        for bad in [
            "0", "-1", "601", "abc", "", "1e2", "inf", "NaN", ".", "1.2.3", " 5", "600.01",
        ] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
        assert_eq!(parse_timeout("600"), Some(Duration::from_secs(600)));
        assert_eq!(parse_timeout("0.25"), Some(Duration::from_millis(250)));
        assert_eq!(parse_timeout("1"), Some(Duration::from_secs(1)));
    }
}
