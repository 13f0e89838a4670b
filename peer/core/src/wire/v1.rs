//! Protocol 1's frame layouts, frozen: what a gateway of the first releases sends and expects.
//!
//! Protocol 1 encodes a frame as the derived serde layout of [`RequestFrame`] and
//! [`ResponseFrame`] as they were then: the request or answer enum's variant index, then the
//! variant's fields. Those enums have since gained variants and [`Hello`] a field, so the
//! layouts are kept here as their own types: borrowed ones to encode without copying a write's
//! value, owned ones to decode into. Every type a frame holds that is not mirrored here
//! (a write request, a read answer, a ticket, ...) is shared with the current protocol and may
//! not change its layout: `tests/fixtures/wire` holds its bytes and fails the build if it does.

use serde::{Deserialize, Serialize};

use ferry_names::VaultName;

use crate::outcome::{Refusal, RefusalCode};

use super::received::{valid_vaults, Received};
use super::{
    CallState, CallStatusRequest, Extensions, Heartbeat, Hello, ProtocolFailure, ReadAnswer,
    ReadRequest, Request, RequestFrame, Response, ResponseFrame, TicketAnswer, TicketRequest,
    WriteAnswer, WriteRequest,
};

/// A value that protocol 1 has no form for (it is sent only to peers that declared a newer
/// version, or never sent at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{what} has no protocol 1 form")]
pub struct NotInVersion {
    pub what: &'static str,
}

/// A protocol 1 request frame, borrowed from a current one.
#[derive(Debug, Serialize)]
pub struct RequestFrameRef<'a> {
    body: RequestRef<'a>,
    ext: &'a Extensions,
}

#[derive(Debug, Serialize)]
enum RequestRef<'a> {
    Hello(HelloRef<'a>),
    Write(&'a WriteRequest),
    Read(&'a ReadRequest),
    IssueTicket(&'a TicketRequest),
    CallStatus(&'a CallStatusRequest),
    Heartbeat(&'a Heartbeat),
}

/// A protocol 1 hello: no release.
#[derive(Debug, Serialize)]
struct HelloRef<'a> {
    label_hint: &'a str,
    owned_vaults: &'a [VaultName],
    replicated_vaults: &'a [VaultName],
}

impl<'a> HelloRef<'a> {
    fn of(hello: &'a Hello) -> Self {
        Self {
            label_hint: &hello.label_hint,
            owned_vaults: &hello.owned_vaults,
            replicated_vaults: &hello.replicated_vaults,
        }
    }
}

/// A protocol 1 answer frame, borrowed from a current one.
#[derive(Debug, Serialize)]
pub struct ResponseFrameRef<'a> {
    body: ResponseRef<'a>,
    ext: &'a Extensions,
}

#[derive(Debug, Serialize)]
enum ResponseRef<'a> {
    Hello(HelloRef<'a>),
    Write(&'a WriteAnswer),
    Read(&'a ReadAnswer),
    Failed(Failure),
    Ticket(&'a TicketAnswer),
    CallStatus(&'a CallState),
    Heartbeat(&'a Heartbeat),
}

/// Protocol 1's failures.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum Failure {
    UnsupportedVersion { oldest: u16, newest: u16 },
    GoingAway,
}

impl<'a> RequestFrameRef<'a> {
    /// `frame` in protocol 1's layout, or what it holds that protocol 1 cannot carry.
    pub fn of(frame: &'a RequestFrame) -> Result<Self, NotInVersion> {
        let body = match &frame.body {
            Request::Hello(hello) => RequestRef::Hello(HelloRef::of(hello)),
            Request::Write(write) => RequestRef::Write(write),
            Request::Read(read) => RequestRef::Read(read),
            Request::IssueTicket(ticket) => RequestRef::IssueTicket(ticket),
            Request::CallStatus(status) => RequestRef::CallStatus(status),
            Request::Heartbeat(beat) => RequestRef::Heartbeat(beat),
            Request::Unknown { .. } => {
                return Err(NotInVersion {
                    what: "a request of an unknown kind",
                })
            }
            Request::BadName { .. } => {
                return Err(NotInVersion {
                    what: "a request naming an invalid vault or app",
                })
            }
        };
        Ok(Self {
            body,
            ext: &frame.ext,
        })
    }
}

/// `frame` with every refusal code protocol 1 does not have mapped to one it has, or `None`
/// when there is none (the usual case: nothing is copied). Protocol 1's decoder fails on a code
/// past its nine, and a refused write must stay a refusal there: an unknown code becomes
/// `BadRequest` (refused, not carried out) and its number goes into the detail.
pub fn with_v1_codes(frame: &ResponseFrame) -> Option<ResponseFrame> {
    fn refusal(body: &mut Response) -> Option<&mut Refusal> {
        match body {
            Response::Write(WriteAnswer::Refused(refusal))
            | Response::CallStatus(CallState::Answered(WriteAnswer::Refused(refusal)))
            | Response::Read(ReadAnswer::Refused(refusal))
            | Response::Ticket(TicketAnswer::Refused(refusal)) => Some(refusal),
            _ => None,
        }
    }
    let mut copy = frame.clone();
    let refusal = refusal(&mut copy.body)?;
    let RefusalCode::Unrecognized(number) = refusal.code else {
        return None;
    };
    refusal.code = RefusalCode::BadRequest;
    refusal.detail = format!(
        "refused with code {number}, which protocol 1 cannot name: {}",
        refusal.detail
    );
    Some(copy)
}

impl<'a> ResponseFrameRef<'a> {
    /// `frame` in protocol 1's layout, or what it holds that protocol 1 cannot carry.
    pub fn of(frame: &'a ResponseFrame) -> Result<Self, NotInVersion> {
        let body = match &frame.body {
            Response::Hello(hello) => ResponseRef::Hello(HelloRef::of(hello)),
            Response::Write(answer) => ResponseRef::Write(answer),
            Response::Read(answer) => ResponseRef::Read(answer),
            Response::Failed(ProtocolFailure::UnsupportedVersion { oldest, newest }) => {
                ResponseRef::Failed(Failure::UnsupportedVersion {
                    oldest: *oldest,
                    newest: *newest,
                })
            }
            Response::Failed(ProtocolFailure::GoingAway) => ResponseRef::Failed(Failure::GoingAway),
            Response::Failed(ProtocolFailure::UnknownRequest { .. }) => {
                return Err(NotInVersion {
                    what: "the unknown-request failure",
                })
            }
            Response::Ticket(answer) => ResponseRef::Ticket(answer),
            // Protocol 1's decoder knows four states: a later one is withheld (the old caller
            // hears no answer, which settles nothing), never sent as bytes it would misread.
            Response::CallStatus(CallState::Unrecognized { .. }) => {
                return Err(NotInVersion {
                    what: "a settle state protocol 1 does not have",
                })
            }
            Response::CallStatus(state) => ResponseRef::CallStatus(state),
            Response::Heartbeat(beat) => ResponseRef::Heartbeat(beat),
            Response::Unknown { .. } => {
                return Err(NotInVersion {
                    what: "an answer of an unknown kind",
                })
            }
        };
        Ok(Self {
            body,
            ext: &frame.ext,
        })
    }
}

/// A protocol 1 request frame as received.
#[derive(Debug, Deserialize)]
pub struct RequestFrameV1 {
    body: RequestV1,
    ext: Extensions,
}

#[derive(Debug, Deserialize)]
enum RequestV1 {
    Hello(HelloV1),
    Write(Box<Received<WriteRequest>>),
    Read(Received<ReadRequest>),
    IssueTicket(Received<TicketRequest>),
    CallStatus(CallStatusRequest),
    Heartbeat(Heartbeat),
}

#[derive(Debug, Deserialize)]
struct HelloV1 {
    label_hint: String,
    #[serde(deserialize_with = "valid_vaults")]
    owned_vaults: Vec<VaultName>,
    #[serde(deserialize_with = "valid_vaults")]
    replicated_vaults: Vec<VaultName>,
}

impl From<HelloV1> for Hello {
    fn from(hello: HelloV1) -> Self {
        Self {
            label_hint: hello.label_hint,
            owned_vaults: hello.owned_vaults,
            replicated_vaults: hello.replicated_vaults,
            release: None,
        }
    }
}

/// A protocol 1 answer frame as received.
#[derive(Debug, Deserialize)]
pub struct ResponseFrameV1 {
    body: ResponseV1,
    ext: Extensions,
}

#[derive(Debug, Deserialize)]
enum ResponseV1 {
    Hello(HelloV1),
    Write(WriteAnswer),
    Read(ReadAnswer),
    Failed(Failure),
    Ticket(TicketAnswer),
    CallStatus(CallState),
    Heartbeat(Heartbeat),
}

impl From<RequestFrameV1> for RequestFrame {
    fn from(frame: RequestFrameV1) -> Self {
        let body = match frame.body {
            RequestV1::Hello(hello) => Request::Hello(hello.into()),
            RequestV1::Write(write) => write.into_request(|write| Request::Write(Box::new(write))),
            RequestV1::Read(read) => read.into_request(Request::Read),
            RequestV1::IssueTicket(ticket) => ticket.into_request(Request::IssueTicket),
            RequestV1::CallStatus(status) => Request::CallStatus(status),
            RequestV1::Heartbeat(beat) => Request::Heartbeat(beat),
        };
        Self {
            body,
            ext: frame.ext,
        }
    }
}

impl From<ResponseFrameV1> for ResponseFrame {
    fn from(frame: ResponseFrameV1) -> Self {
        let body = match frame.body {
            ResponseV1::Hello(hello) => Response::Hello(hello.into()),
            ResponseV1::Write(answer) => Response::Write(answer),
            ResponseV1::Read(answer) => Response::Read(answer),
            ResponseV1::Failed(Failure::UnsupportedVersion { oldest, newest }) => {
                Response::Failed(ProtocolFailure::UnsupportedVersion { oldest, newest })
            }
            ResponseV1::Failed(Failure::GoingAway) => Response::Failed(ProtocolFailure::GoingAway),
            ResponseV1::Ticket(answer) => Response::Ticket(answer),
            ResponseV1::CallStatus(state) => Response::CallStatus(state),
            ResponseV1::Heartbeat(beat) => Response::Heartbeat(beat),
        };
        Self {
            body,
            ext: frame.ext,
        }
    }
}
