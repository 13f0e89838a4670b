//! The local API's contract (SPEC 5) as Rust types, shared by the gateway that serves it and
//! the kit that calls it, so the two cannot drift apart.
//!
//! Every error answer is an [`ErrorBody`]; a write that was carried out is a [`WriteDone`]; a
//! settle query is a [`CallAnswer`]. Unknown error codes from a newer gateway decode as
//! [`ErrorCode::Other`] rather than failing, so an older kit still reads the status and the
//! detail.

use std::time::Duration;

use ferry_names::{AppName, VaultName};
use serde::{Deserialize, Serialize};

/// Header: the app's name (`X-Ferry-App`).
pub const HEADER_APP: &str = "x-ferry-app";
/// Header: the write's request id (`X-Ferry-Request-Id`), sent and echoed.
pub const HEADER_REQUEST_ID: &str = "x-ferry-request-id";
/// Header: a compare-and-swap's expected revision (`If-Match`).
pub const HEADER_IF_MATCH: &str = "if-match";
/// Header: the write's capacity class (`X-Ferry-Class`): `interactive` (default) or
/// `background` (SPEC 7 rule 7).
pub const HEADER_CLASS: &str = "x-ferry-class";
/// Header: seconds the call may take (`X-Ferry-Timeout`).
pub const HEADER_TIMEOUT: &str = "x-ferry-timeout";
/// Header: a record's revision on a read.
pub const HEADER_REVISION: &str = "x-ferry-revision";
/// Header: where a read's answer came from (`local`, `cache`, `owner`, `replica:LABEL`).
pub const HEADER_SOURCE: &str = "x-ferry-source";
/// Header: `true` when a read's answer may be behind the owner.
pub const HEADER_STALE: &str = "x-ferry-stale";
/// Query parameter of a settle query naming the vault, so the gateway can ask its owner even
/// when it has no memory of the call.
pub const QUERY_VAULT: &str = "vault";

/// The longest `X-Ferry-Timeout` (and settle `wait`) allowed.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// A call's timeout when the app gives none (SPEC 5).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// `X-Ferry-Timeout`'s form: decimal seconds, greater than 0 and at most [`MAX_TIMEOUT`];
/// digits with at most one decimal point, nothing else (no sign, exponent, or `inf`).
///
/// Read exactly, digit by digit, not through `f64`: a float would round `600.0000000000000001`
/// down to an allowed 600 and a long `0.000…1` to a refused 0, where the OpenAPI document's
/// pattern (which is all a client generator sees) says the opposite. A fraction finer than a
/// nanosecond rounds up, so a value above 0 never becomes a zero timeout.
pub fn parse_timeout(raw: &str) -> Option<Duration> {
    let (whole, fraction) = raw.split_once('.').unwrap_or((raw, ""));
    let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    let whole = whole.trim_start_matches('0');
    // More than three significant digits is over 600 whatever follows.
    if whole.len() > 3 {
        return None;
    }
    let seconds: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let nanos = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(9)
        .fold(0u64, |nanos, digit| nanos * 10 + u64::from(digit - b'0'));
    let finer = u64::from(fraction.bytes().skip(9).any(|digit| digit != b'0'));
    let timeout = Duration::from_secs(seconds) + Duration::from_nanos(nanos + finer);
    (!timeout.is_zero() && timeout <= MAX_TIMEOUT).then_some(timeout)
}

/// `If-Match`'s form: the revision a compare-and-swap expects (0: the record must not exist),
/// decimal digits (at most `u64::MAX`), bare or in one pair of double quotes (an entity tag's
/// form). Nothing else: no sign, no spaces inside, no lone quote, so the OpenAPI document's
/// pattern says exactly what is taken.
pub fn parse_if_match(raw: &str) -> Option<u64> {
    let digits = raw
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or(raw);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A settle query's `wait`: a timeout's form, or `0` (answer at once).
pub fn parse_wait(raw: &str) -> Option<Duration> {
    if raw == "0" {
        return Some(Duration::ZERO);
    }
    parse_timeout(raw)
}

/// Every `error` code the local API answers with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request was malformed or over a limit; nothing was sent.
    BadRequest,
    /// Missing or wrong bearer token; nothing happened.
    Unauthorized,
    /// The record (or route) does not exist.
    NotFound,
    /// No trusted gateway owns that vault; nothing was sent.
    UnknownVault,
    /// Two or more trusted peers each own a vault of that name and this gateway holds none of
    /// them; nothing was sent. `detail` names them and how to choose.
    VaultAmbiguous,
    /// This gateway never sent a write with that request id.
    UnknownCall,
    /// The owner refused a compare-and-swap; the answer carries the current revision.
    Conflict,
    /// The owner does not let this app or node do that.
    Forbidden,
    /// The request id is older than the owner's journal keeps.
    StaleRequestId,
    /// Too many writes from this app; send again after `Retry-After`, same request id.
    RateLimited,
    /// The owner could not take it now; not carried out; same request id after `Retry-After`.
    Busy,
    /// The owner refused this gateway's ticket at its door, even after one renewal.
    TicketRefused,
    /// The owner refused the write for a reason this gateway does not know (the owner runs a
    /// newer release; `detail` says what it said): not carried out. Status 422.
    Refused,
    /// The request left, broke, and the owner confirmed it never ran and never will.
    NotCarriedOut,
    /// Nothing was sent (no route, connect failed, gateway stopping, ...).
    Unavailable,
    /// The request left and no answer came back: settle it by its request id.
    OutcomeUnknown,
    /// The path is not one of the API's routes.
    UnknownRoute,
    /// The route exists but not with that method.
    MethodNotAllowed,
    /// A bug or a store failure on the gateway; see its log.
    Internal,
    /// A code this kit does not know (a newer gateway).
    #[serde(other)]
    Other,
}

impl ErrorCode {
    /// The code as it appears in JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::Unauthorized => "unauthorized",
            Self::NotFound => "not_found",
            Self::UnknownVault => "unknown_vault",
            Self::VaultAmbiguous => "vault_ambiguous",
            Self::UnknownCall => "unknown_call",
            Self::Conflict => "conflict",
            Self::Forbidden => "forbidden",
            Self::StaleRequestId => "stale_request_id",
            Self::RateLimited => "rate_limited",
            Self::Busy => "busy",
            Self::TicketRefused => "ticket_refused",
            Self::Refused => "refused",
            Self::NotCarriedOut => "not_carried_out",
            Self::Unavailable => "unavailable",
            Self::OutcomeUnknown => "outcome_unknown",
            Self::UnknownRoute => "unknown_route",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::Internal => "internal",
            Self::Other => "other",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every error answer of the local API (`4xx` and `5xx`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorCode,
    /// One sentence a person can act on.
    pub detail: String,
    /// The write's request id, on every answer to a write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The vault's owner (its label), with `outcome_unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The vault, with `outcome_unknown`, so the app can settle by naming it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vault: Option<VaultName>,
    /// A finer reason: the door's (`expired`, ...), `not_carried_out`'s (`never_arrived`, ...),
    /// `unavailable`'s (`port_closed`, ...), `outcome_unknown`'s (`timed_out`, ...), or which of
    /// the owner's rules `busy` and `rate_limited` came from (`caller_cap`, `queue_full`, `saturated`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// With `conflict`: the record's current revision (0: it does not exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<u64>,
    /// With `ticket_refused`: refused at the door, before any verb ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_door: Option<bool>,
    /// With a read's `not_found`: which source said so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl ErrorBody {
    pub fn new(error: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            error,
            detail: detail.into(),
            request_id: None,
            owner: None,
            vault: None,
            reason: None,
            current_revision: None,
            at_door: None,
            source: None,
        }
    }
}

/// `200` to a write: the owner carried it out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteDone {
    pub revision: u64,
    pub request_id: String,
}

/// What a settle query (`GET /v1/calls/{id}`) found, and one row of `GET /v1/calls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallAnswer {
    pub state: CallStateName,
    pub request_id: String,
    /// The owner's label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// With `done`: the first answer's HTTP status (200 carried out, else the refusal's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// With `done` and status 200: the revision the write made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// With `done` and a refusal: its code and detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<u64>,
    /// With `not_carried_out`: `never_arrived`, `expired` or `interrupted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// With `running`: since when (Unix ms), and how old the owner's last sign of work is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_age_ms: Option<u64>,
    /// In `GET /v1/calls`: the vault and the app of the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vault: Option<VaultName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<AppName>,
}

impl CallAnswer {
    /// An answer in `state` for `request_id`, every other field empty.
    pub fn new(state: CallStateName, request_id: impl Into<String>) -> Self {
        Self {
            state,
            request_id: request_id.into(),
            owner: None,
            status: None,
            revision: None,
            error: None,
            detail: None,
            current_revision: None,
            reason: None,
            since: None,
            heartbeat_age_ms: None,
            vault: None,
            app: None,
        }
    }
}

/// The states a call can be in, as the API names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStateName {
    /// The owner answered: carried out (status 200) or refused (its status).
    Done,
    /// Still being carried out (or still on its way): ask again.
    Running,
    /// Not carried out, and never will be.
    NotCarriedOut,
    /// Only in `GET /v1/calls`: answered `outcome_unknown` and not settled yet.
    Unknown,
    /// A state this kit does not know (a newer gateway): ask again later.
    #[serde(other)]
    Other,
}

impl CallStateName {
    /// The name the API gives the state (`not_carried_out`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Running => "running",
            Self::NotCarriedOut => "not_carried_out",
            Self::Unknown => "unknown",
            Self::Other => "other",
        }
    }
}

impl std::fmt::Display for CallStateName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One key of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedKey {
    pub key: String,
    pub revision: u64,
}

/// `GET /v1/vaults/{vault}/records`: one page of keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListPage {
    pub keys: Vec<ListedKey>,
    /// Whether another page follows; ask again with `after = next_after`.
    pub more: bool,
    #[serde(default)]
    pub next_after: Option<String>,
    pub vault_revision: u64,
}

/// One entry of a change feed: a key's state as of `revision` (its newest change; a key
/// changed twice between two pages shows once, at its newer revision).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedChange {
    pub key: String,
    pub revision: u64,
    /// The key was deleted at `revision`.
    pub deleted: bool,
}

/// `GET /v1/vaults/{vault}/changes?after=REV&limit=N&wait=SECONDS`: the changes after `REV`,
/// oldest first, from this gateway's own copy (the owner's, or what a replica has applied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangePage {
    pub changes: Vec<FeedChange>,
    /// Ask again with `after = next` (the last change's revision, or `after` if none came).
    pub next: u64,
    /// Whether more changes are waiting past this page.
    pub more: bool,
    /// This copy's revision.
    pub vault_revision: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_error_code_decodes_as_other_and_keeps_the_detail() {
        let body: ErrorBody =
            serde_json::from_str(r#"{"error":"brand_new","detail":"d","extra":1}"#).unwrap();
        assert_eq!((body.error, body.detail.as_str()), (ErrorCode::Other, "d"));
    }

    #[test]
    fn codes_serialize_as_their_names() {
        for code in [
            ErrorCode::OutcomeUnknown,
            ErrorCode::NotCarriedOut,
            ErrorCode::StaleRequestId,
        ] {
            assert_eq!(
                serde_json::to_value(&code).unwrap(),
                serde_json::json!(code.as_str())
            );
        }
    }

    #[test]
    fn call_states_are_named_as_they_serialize() {
        for state in [
            CallStateName::Done,
            CallStateName::Running,
            CallStateName::NotCarriedOut,
            CallStateName::Unknown,
            CallStateName::Other,
        ] {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::json!(state.as_str())
            );
        }
    }
}
