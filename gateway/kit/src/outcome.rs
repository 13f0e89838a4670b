//! What a call through the kit ended as, one variant per case of SPEC 5's table, so an app
//! cannot mistake "nothing was sent" for "the request left and nobody knows".

use std::time::Duration;

use crate::contract::ErrorCode;

/// What became of a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteResult {
    /// The owner carried it out.
    Done { revision: u64, request_id: String },
    /// The owner answered and did not carry it out (`conflict`, `busy`, `ticket_refused`,
    /// ...). `busy` and `rate_limited` may be sent again with the same request id after
    /// `retry_after`. A `busy` with reason `caller_cap`, `saturated` or `background_full`
    /// whose detail ends "nothing was sent" was answered by the local gateway on the owner's
    /// behalf (it knows the owner's cap for this app, or what the loaded owner last took of
    /// this machine's writes of the class); it too was not carried out, and is sent again the
    /// same way.
    Refused {
        status: u16,
        code: ErrorCode,
        detail: String,
        request_id: String,
        current_revision: Option<u64>,
        retry_after: Option<Duration>,
    },
    /// The request left, the connection broke, and the owner confirmed it never ran and never
    /// will: send it again under a new request id.
    NotCarriedOut {
        request_id: String,
        reason: String,
        detail: String,
    },
    /// The call never left the local gateway (no route, connect failed, gateway stopping...).
    Unavailable { request_id: String, detail: String },
    /// The request may have reached the owner and no answer came back (or the answer was lost
    /// between the local gateway and the app). Settle it with [`crate::Kit::settle`]; never
    /// send it under a new id.
    OutcomeUnknown {
        request_id: String,
        vault: String,
        /// The owner's label, when the local gateway said.
        owner: Option<String>,
        detail: String,
    },
    /// The local gateway refused the call before sending anything (bad input, unknown vault,
    /// bad token).
    Invalid {
        status: u16,
        code: ErrorCode,
        detail: String,
    },
    /// The local gateway could not be reached at all: not a byte of the request left this
    /// app. Nothing was written.
    LocalGatewayDown { detail: String },
}

impl WriteResult {
    /// When the owner refused it `busy` or `rate_limited` (so it was not carried out and the
    /// same request id may be sent again): how long to wait first. `None` for every other
    /// result, which must not be sent again as it is.
    pub fn may_resend_after(&self) -> Option<Duration> {
        match self {
            Self::Refused {
                code: ErrorCode::Busy | ErrorCode::RateLimited,
                retry_after,
                ..
            } => Some(retry_after.unwrap_or(Duration::from_secs(1))),
            _ => None,
        }
    }

    /// The request id the write carried, when it was handed to the gateway.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Self::Done { request_id, .. }
            | Self::Refused { request_id, .. }
            | Self::NotCarriedOut { request_id, .. }
            | Self::Unavailable { request_id, .. }
            | Self::OutcomeUnknown { request_id, .. } => Some(request_id),
            Self::Invalid { .. } | Self::LocalGatewayDown { .. } => None,
        }
    }
}

/// What the owner says became of a write (`GET /v1/calls/{id}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Carried out: the first answer's revision.
    Done { revision: u64 },
    /// The owner answered and did not carry it out (its first answer, verbatim).
    Refused {
        status: u16,
        code: ErrorCode,
        detail: String,
    },
    /// Not carried out, and never will be: send it again under a new request id.
    NotCarriedOut { reason: String },
    /// Still running (at the owner, or still on its way there); ask again.
    Running,
    /// The owner could not be asked now; the outcome is still unknown. Ask again later.
    Unavailable { detail: String },
    /// The local gateway never sent a write with that id (and was not told its vault).
    NeverSent { detail: String },
}

/// A record as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    pub value: Vec<u8>,
    pub revision: u64,
    /// `local`, `cache`, `owner` or `replica:<label>`.
    pub source: String,
    /// The answer may be behind the owner.
    pub stale: bool,
}

/// A call other than a write that did not succeed. Every such call is safe to repeat.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum KitError {
    /// The local gateway could not be reached (and, for a read, no peer could answer either).
    #[error("{detail}")]
    LocalGatewayDown { detail: String },
    /// The gateway answered with an error.
    #[error("{code}: {detail}")]
    Answered {
        status: u16,
        code: ErrorCode,
        detail: String,
    },
    /// The connection to the local gateway broke before a whole answer came.
    #[error("the local gateway's answer broke off: {detail}")]
    Broken { detail: String },
    /// The gateway's answer could not be understood (a different version?).
    #[error("the gateway's answer could not be understood: {detail}")]
    Protocol { detail: String },
    /// The call could not be made from what the app gave (a bad request id, say).
    #[error("{detail}")]
    Invalid { detail: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: ErrorCode, retry_after: Option<Duration>) -> WriteResult {
        WriteResult::Refused {
            status: 503,
            code,
            detail: String::new(),
            request_id: "id".into(),
            current_revision: None,
            retry_after,
        }
    }

    #[test]
    fn only_busy_and_rate_limited_may_be_sent_again() {
        let second = Some(Duration::from_secs(2));
        assert_eq!(refused(ErrorCode::Busy, second).may_resend_after(), second);
        assert_eq!(
            refused(ErrorCode::RateLimited, None).may_resend_after(),
            Some(Duration::from_secs(1))
        );
        for not_again in [
            refused(ErrorCode::Conflict, second),
            refused(ErrorCode::TicketRefused, second),
            WriteResult::OutcomeUnknown {
                request_id: "id".into(),
                vault: "v".into(),
                owner: None,
                detail: String::new(),
            },
            WriteResult::Unavailable {
                request_id: "id".into(),
                detail: String::new(),
            },
            WriteResult::LocalGatewayDown {
                detail: String::new(),
            },
        ] {
            assert_eq!(not_again.may_resend_after(), None, "{not_again:?}");
        }
    }
}
