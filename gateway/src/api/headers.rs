//! Parsing the headers a call may carry. Each parser's error says which header and what it
//! accepts; a bad header is `400 bad_request` and nothing is sent.

use std::time::Duration;

use axum::http::HeaderMap;
use ferry_peer::wire::{Priority, RequestId};

use super::ApiError;
use crate::names::AppName;
use crate::owner::verbs::{self, IdProblem, MAX_FUTURE_SKEW};
use ferry_kit::contract::{parse_if_match, parse_timeout, ErrorCode, DEFAULT_TIMEOUT};

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
pub fn app(headers: &HeaderMap) -> Result<AppName, ApiError> {
    let app = text(headers, "x-ferry-app")?.ok_or_else(|| {
        ApiError::bad_request(
            "header X-Ferry-App is missing; name your app in it (e.g. X-Ferry-App: notes)",
        )
    })?;
    AppName::parse(app).map_err(ApiError::bad_request)
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

/// `If-Match`: the revision a compare-and-swap expects (0 = must not exist), as
/// [`parse_if_match`] reads it.
pub fn if_match(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(raw) = text(headers, "if-match")? else {
        return Ok(None);
    };
    parse_if_match(raw).map(Some).ok_or_else(|| {
        ApiError::bad_request(format!(
            "If-Match {raw:?} is not a revision number (decimal digits, at most {}, optionally in double quotes; 0 means the record must not exist); nothing was sent",
            u64::MAX
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_outside_the_contract_are_refused() {
        for bad in [
            "0",
            "-1",
            "601",
            "abc",
            "",
            "1e2",
            "inf",
            "NaN",
            ".",
            "1.2.3",
            " 5",
            "600.01",
            "+5",
            "0.0",
            "000",
            "1000",
            "600.0000000000000000001",
            "0600.000000000001",
        ] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
        for (good, want) in [
            ("600", Duration::from_secs(600)),
            ("0600.000", Duration::from_secs(600)),
            ("0.25", Duration::from_millis(250)),
            ("1", Duration::from_secs(1)),
            ("5.", Duration::from_secs(5)),
            (".5", Duration::from_millis(500)),
            ("599.9999999999", Duration::from_secs(600)),
            // Above 0 however small: a nanosecond, never a zero timeout.
            (
                "0.0000000000000000000000000000000000000001",
                Duration::from_nanos(1),
            ),
        ] {
            assert_eq!(parse_timeout(good), Some(want), "{good:?}");
        }
    }

    #[test]
    fn if_match_takes_digits_bare_or_in_one_pair_of_quotes() {
        let parse = |raw: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("if-match", raw.parse().unwrap());
            if_match(&headers).ok().flatten()
        };
        for (good, want) in [
            ("7", 7),
            ("\"7\"", 7),
            ("007", 7),
            ("18446744073709551615", u64::MAX),
        ] {
            assert_eq!(parse(good), Some(want), "{good:?}");
        }
        for bad in [
            "+7",
            "\"7",
            "7\"",
            "\"\"7\"\"",
            "\"\"",
            "",
            "7 ",
            "\" 7\"",
            "18446744073709551616",
            "W/\"7\"",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
