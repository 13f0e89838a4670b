//! What became of a call, as types.
//!
//! A write ends in exactly one of four ways, and the type says which, so nobody can confuse
//! "nothing was sent" (safe to try again) with "the request left and no answer came" (never send
//! it again; settle it):
//! - [`WriteOutcome::Answered`]: the owner answered, done or refused ([`Refusal`]);
//! - [`WriteOutcome::NotCarriedOut`]: the request left, the connection broke, and the owner
//!   confirmed it was not carried out and never will be;
//! - [`WriteOutcome::NotSent`]: the call never left this machine;
//! - [`WriteOutcome::Unknown`]: the call left and no answer came back in time.

use serde::{Deserialize, Serialize};

/// The owner's reasons for not carrying out a request, each with its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RefusalCode {
    /// `if_revision` did not match; the refusal carries the current revision.
    Conflict,
    /// The record does not exist.
    NotFound,
    /// The vault does not exist on the receiving gateway.
    UnknownVault,
    /// The caller may not do this (config restricts the app or vault).
    Forbidden,
    /// The request is malformed or over a limit.
    BadRequest,
    /// The request id is older than the journal keeps; use a new one.
    StaleRequestId,
    /// Too many requests from this app of this node; try again after `retry_after_ms`.
    RateLimited,
    /// The owner could not start it in time; not carried out, may be sent again with the same id.
    Busy,
    /// The ticket was refused at the door; no verb ran.
    TicketRefused,
}

impl RefusalCode {
    /// The HTTP status the local API answers with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::Conflict => 409,
            Self::NotFound | Self::UnknownVault => 404,
            Self::Forbidden => 403,
            Self::BadRequest | Self::StaleRequestId => 400,
            Self::RateLimited => 429,
            Self::Busy => 503,
            Self::TicketRefused => 401,
        }
    }

    /// The `error` code in JSON answers.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Conflict => "conflict",
            Self::NotFound => "not_found",
            Self::UnknownVault => "unknown_vault",
            Self::Forbidden => "forbidden",
            Self::BadRequest => "bad_request",
            Self::StaleRequestId => "stale_request_id",
            Self::RateLimited => "rate_limited",
            Self::Busy => "busy",
            Self::TicketRefused => "ticket_refused",
        }
    }
}

/// The owner answered and did not carry the request out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub code: RefusalCode,
    /// One sentence a person can act on.
    pub detail: String,
    /// With `Conflict`: the record's current revision (0 = it does not exist).
    pub current_revision: Option<u64>,
    /// With `Busy` and `RateLimited`: when to send again.
    pub retry_after_ms: Option<u64>,
    /// With `TicketRefused`: the door's reason (`expired`, `bad_signature`, ...).
    pub reason: Option<String>,
    /// True when refused at the door, before any verb ran.
    pub at_door: bool,
}

impl Refusal {
    pub fn new(code: RefusalCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            current_revision: None,
            retry_after_ms: None,
            reason: None,
            at_door: false,
        }
    }

    /// Busy: not carried out now; the same request id may be sent again after `retry_after`.
    pub fn busy(detail: impl Into<String>, retry_after: std::time::Duration) -> Self {
        Self {
            retry_after_ms: Some(retry_after.as_millis() as u64),
            ..Self::new(RefusalCode::Busy, detail)
        }
    }

    pub fn conflict(current_revision: u64) -> Self {
        Self {
            current_revision: Some(current_revision),
            ..Self::new(
                RefusalCode::Conflict,
                format!("the record is at revision {current_revision}; read it again and retry with If-Match set to that revision"),
            )
        }
    }
}

/// Why a call never left this machine. Nothing was written; trying later is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NotSentReason {
    /// No trusted route to the owner is known or up.
    NoRoute,
    /// The connection attempt failed (refused, unreachable, TLS alert from the peer).
    ConnectFailed,
    /// The connection attempt did not finish within the connect timeout.
    ConnectTimedOut,
    /// Nothing listens on the peer's port: the host answered, the gateway is not running.
    PortClosed,
    /// The peer at that address is not the node this gateway trusts under that label.
    KeyMismatch,
    /// No ticket could be had from the owner.
    TicketUnavailable,
    /// This gateway is stopping.
    Stopping,
    /// The deadline ran out before the request could be handed to QUIC.
    DeadlineSpent,
}

impl NotSentReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoRoute => "no_route",
            Self::ConnectFailed => "connect_failed",
            Self::ConnectTimedOut => "connect_timed_out",
            Self::PortClosed => "port_closed",
            Self::KeyMismatch => "key_mismatch",
            Self::TicketUnavailable => "ticket_unavailable",
            Self::Stopping => "stopping",
            Self::DeadlineSpent => "deadline_spent",
        }
    }
}

/// Why a call that left got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnknownReason {
    /// The deadline passed while waiting for the answer.
    TimedOut,
    /// The stream or connection broke after the send and the owner could not be asked in time.
    ConnectionLost,
}

/// Why the owner says a request was not carried out (and never will be).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NotCarriedOutReason {
    NeverArrived,
    Expired,
    Interrupted,
}

impl NotCarriedOutReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NeverArrived => "never_arrived",
            Self::Expired => "expired",
            Self::Interrupted => "interrupted",
        }
    }
}

/// The owner's answer to a write; journaled and replayed verbatim for a repeated request id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteAnswer {
    /// Carried out; the record now has this revision.
    Done { revision: u64 },
    /// The owner answered and did not carry it out.
    Refused(Refusal),
    /// The request id is fenced: it was not carried out and never will be (a repeat of an id
    /// the owner tombstoned, or one interrupted by a crash).
    NotCarriedOut { reason: NotCarriedOutReason },
}

/// Everything a write can end as. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    Answered(WriteAnswer),
    NotCarriedOut {
        reason: NotCarriedOutReason,
    },
    NotSent {
        reason: NotSentReason,
        detail: String,
    },
    Unknown {
        reason: UnknownReason,
        detail: String,
    },
}

impl WriteOutcome {
    pub fn not_sent(reason: NotSentReason, detail: impl Into<String>) -> Self {
        Self::NotSent {
            reason,
            detail: detail.into(),
        }
    }
}
