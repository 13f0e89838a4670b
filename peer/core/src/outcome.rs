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
///
/// An open enum: on the wire a code is its number (the same byte bincode gave the variant index
/// in protocol 1, so those frames are unchanged), and a number this build does not know decodes
/// as [`RefusalCode::Unrecognized`]: still a refusal (the owner answered and did not carry the
/// request out), never a decode failure that would turn an answer into `outcome_unknown`. New
/// codes take the next number and are sent only to peers whose protocol version has them. In
/// JSON (the journal, the calls table) a code is its name, as it always was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// Two or more trusted peers each own a vault of the name the app gave, and this gateway
    /// holds none of them: the calling gateway refuses it, nothing sent. Never on the wire (a
    /// caller's own refusal; its number is not one a peer sends).
    VaultAmbiguous,
    /// A code from a newer peer that this build does not know (its number): the owner refused
    /// the request and did not carry it out.
    Unrecognized(u16),
}

/// The codes protocol 1 knows, by number (their variant index there).
const REFUSAL_CODES_V1: [RefusalCode; 9] = [
    RefusalCode::Conflict,
    RefusalCode::NotFound,
    RefusalCode::UnknownVault,
    RefusalCode::Forbidden,
    RefusalCode::BadRequest,
    RefusalCode::StaleRequestId,
    RefusalCode::RateLimited,
    RefusalCode::Busy,
    RefusalCode::TicketRefused,
];

impl RefusalCode {
    /// The HTTP status the local API answers with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::Conflict | Self::VaultAmbiguous => 409,
            Self::NotFound | Self::UnknownVault => 404,
            Self::Forbidden => 403,
            Self::BadRequest | Self::StaleRequestId => 400,
            Self::RateLimited => 429,
            Self::Busy => 503,
            Self::TicketRefused => 401,
            // The owner answered "no" for a reason this gateway cannot name: a refusal of
            // the request as sent, not a failure of this gateway.
            Self::Unrecognized(_) => 422,
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
            Self::VaultAmbiguous => "vault_ambiguous",
            Self::Unrecognized(_) => "refused",
        }
    }

    /// Whether the owner asks for the same request id to be sent again (after
    /// `retry_after_ms`): it did not carry the request out, now.
    pub fn may_resend(self) -> bool {
        matches!(self, Self::Busy | Self::RateLimited)
    }

    /// The code's number on the wire.
    pub fn number(self) -> u16 {
        match self {
            Self::Unrecognized(number) => number,
            known => REFUSAL_CODES_V1
                .iter()
                .position(|code| *code == known)
                .map_or(u16::MAX, |index| index as u16),
        }
    }

    /// The code with this number; [`RefusalCode::Unrecognized`] if this build does not know it.
    pub fn from_number(number: u16) -> Self {
        REFUSAL_CODES_V1
            .get(usize::from(number))
            .copied()
            .unwrap_or(Self::Unrecognized(number))
    }

    /// The code with this JSON name: the variant's name, as the journal and the calls table
    /// have always stored it (`Busy`), or `Unrecognized:N`.
    fn from_name(name: &str) -> Option<Self> {
        if let Some(number) = name.strip_prefix("Unrecognized:") {
            return number.parse().ok().map(Self::Unrecognized);
        }
        REFUSAL_CODES_V1
            .iter()
            .copied()
            .find(|code| code.variant_name() == name)
    }

    /// The Rust variant's name: what serde_json wrote for a code before the enum was opened.
    fn variant_name(self) -> &'static str {
        match self {
            Self::Conflict => "Conflict",
            Self::NotFound => "NotFound",
            Self::UnknownVault => "UnknownVault",
            Self::Forbidden => "Forbidden",
            Self::BadRequest => "BadRequest",
            Self::StaleRequestId => "StaleRequestId",
            Self::RateLimited => "RateLimited",
            Self::Busy => "Busy",
            Self::TicketRefused => "TicketRefused",
            Self::VaultAmbiguous => "VaultAmbiguous",
            Self::Unrecognized(_) => "Unrecognized",
        }
    }
}

impl Serialize for RefusalCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            match self {
                Self::Unrecognized(number) => {
                    serializer.serialize_str(&format!("Unrecognized:{number}"))
                }
                known => serializer.serialize_str(known.variant_name()),
            }
        } else {
            serializer.serialize_u16(self.number())
        }
    }
}

impl<'de> Deserialize<'de> for RefusalCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let name = String::deserialize(deserializer)?;
            Self::from_name(&name)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown refusal code {name:?}")))
        } else {
            u16::deserialize(deserializer).map(Self::from_number)
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
    /// With `TicketRefused`: the door's reason (`expired`, `bad_signature`, ...); with `Busy`
    /// and `RateLimited` from the capacity budget: the rule (`caller_cap`, `queue_full`, ...).
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
    /// The owner's gateway and this one speak no protocol version in common (SPEC 11); the
    /// older one must be upgraded.
    VersionMismatch,
    /// This app already has as many writes out to the owner as the owner last said it takes
    /// (`ferry_core::capacity::send_gate`): answered `503 busy` here, as the owner would have.
    /// The same request id may be sent again.
    CallerCap,
    /// The owner already holds as many of this gateway's interactive writes as it last took
    /// while saturated (its wait bound, `ferry_core::capacity::send_gate`): answered `503 busy`
    /// here, as the owner would have. The same request id may be sent again.
    Saturated,
    /// The owner already holds as many of this gateway's background writes as it last took
    /// beside interactive ones (`ferry_core::capacity::send_gate`): answered `503 busy` here,
    /// as the owner would have. The same request id may be sent again.
    BackgroundFull,
    /// This gateway could not write down what it needs before a write leaves (the call's
    /// record for settling, or the home's sent mark): a full or failing disk.
    CannotRecord,
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
            Self::VersionMismatch => "version_mismatch",
            Self::CallerCap => "caller_cap",
            Self::Saturated => "saturated",
            Self::BackgroundFull => "background_full",
            Self::CannotRecord => "cannot_record",
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
