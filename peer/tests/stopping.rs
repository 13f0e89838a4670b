//! A stopping owner on real QUIC (issue 43). Its door turns new streams away "going away", but
//! not a write (the stop is no answer about a request id: the service says what it knows of
//! it, or nothing) nor a settle query. And a caller that is told "going away" in answer to a
//! write (as a release before this one tells every write after its stop) does not take it
//! for "did not run": it settles by asking.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_names::{AppName, VaultName};
use std::time::Instant;

use crate::common::{caller_to, endpoint, serve_first, Stub, WAIT};
use ferry_peer::call::{Target, TicketError, TicketSource, WriteCall};
use ferry_peer::outcome::{UnknownReason, WriteOutcome};
use ferry_peer::transport::{self, ReadFrameError, RESET_UNANSWERED};
use ferry_peer::wire::{
    CallState, CallStatusRequest, Extensions, Priority, ProtocolFailure, Request, RequestFrame,
    RequestId, Response, ResponseFrame, WriteAnswer, WriteRequest, WriteVerb,
};
use ferry_peer::{frames, NodeId, NodeKey};
use ferry_ticket::{Ticket, VerbSet};

/// The one id this owner ran before its stop, and its first answer.
const RAN: RequestId = RequestId::from_bytes([7; 16]);
const FIRST: WriteAnswer = WriteAnswer::Done { revision: 7 };

/// An owner that ran [`RAN`], and is asked only while it stops.
const RAN_STUB: Stub = Stub::Ran {
    id: RAN,
    answer: FIRST,
};

/// A ticket for `holder`, signed by a key of no one: these owners do not check it.
fn ticket(holder: NodeId) -> Ticket {
    Ticket::issue(
        &NodeKey::generate().unwrap(),
        holder,
        "app",
        "v",
        VerbSet::all_writes(),
        0,
        u64::MAX / 2,
        1,
    )
}

fn put_k() -> WriteVerb {
    WriteVerb::Put {
        key: "k".into(),
        value: b"v".to_vec(),
        if_revision: None,
    }
}

fn put(request_id: RequestId, holder: NodeId) -> Request {
    Request::Write(Box::new(WriteRequest {
        request_id,
        app: AppName::from_static("app"),
        vault: VaultName::from_static("v"),
        verb: put_k(),
        deadline_ms: 5_000,
        priority: Priority::Interactive,
        ticket: ticket(holder),
    }))
}

/// One request on a new stream: the answer, or the code the stream was reset with.
async fn ask(conn: &quinn::Connection, body: Request) -> Result<Response, u64> {
    let version = transport::protocol_of(conn).unwrap();
    let frame = frames::encode_request(
        version,
        &RequestFrame {
            body,
            ext: Extensions::default(),
        },
    )
    .unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    transport::write_frame(&mut send, &frame).await.unwrap();
    match tokio::time::timeout(WAIT, transport::read_response(&mut recv, version)).await {
        Err(_) => panic!("no answer nor reset within {WAIT:?}"),
        Ok(Ok(frame)) => Ok(frame.body),
        Ok(Err(ReadFrameError::Broken {
            source: quinn::ReadExactError::ReadError(quinn::ReadError::Reset(code)),
        })) => Err(code.into_inner()),
        Ok(Err(err)) => panic!("neither an answer nor a reset: {err}"),
    }
}

#[tokio::test]
async fn a_stopping_door_hands_writes_and_settle_queries_to_the_service() {
    let (owner_key, caller_key) = (NodeKey::generate().unwrap(), NodeKey::generate().unwrap());
    let server = endpoint(&owner_key);
    let addr = server.local_addr().unwrap();
    // Stopping from the start: every stream arrives after the stop began.
    let (_stop, stopping) = tokio::sync::watch::channel(true);
    serve_first(server, RAN_STUB, stopping);
    let client = endpoint(&caller_key);
    let conn = client.dial(addr, owner_key.node_id(), WAIT).await.unwrap();
    let me = caller_key.node_id();

    // A copy of the write that ran: its first answer, not "going away".
    assert_eq!(ask(&conn, put(RAN, me)).await, Ok(Response::Write(FIRST)));
    // A write the service cannot say anything of: no answer (the caller settles).
    assert_eq!(
        ask(&conn, put(RequestId::generate(), me)).await,
        Err(u64::from(RESET_UNANSWERED))
    );
    // A settle query is the service's to answer; what it cannot say is "going away".
    let status = |request_id| Request::CallStatus(CallStatusRequest { request_id });
    assert_eq!(
        ask(&conn, status(RAN)).await,
        Ok(Response::CallStatus(CallState::Answered(FIRST)))
    );
    assert_eq!(
        ask(&conn, status(RequestId::generate())).await,
        Ok(Response::Failed(ProtocolFailure::GoingAway))
    );
}

/// Tickets from nowhere, for an owner that does not check them.
struct AnyTicket;

impl TicketSource for AnyTicket {
    async fn ticket(
        &self,
        _: &Target,
        _: &AppName,
        _: &VaultName,
        _: bool,
        _: Instant,
    ) -> Result<Ticket, TicketError> {
        Ok(ticket(NodeKey::generate().unwrap().node_id()))
    }
}

/// An owner of the release before this one, stopping: it answers every request on every
/// connection "going away", unread.
fn serve_going_away(server: ferry_peer::transport::PeerEndpoint) {
    tokio::spawn(async move {
        while let Some(incoming) = server.accept().await {
            let Ok(conn) = incoming.await else { continue };
            tokio::spawn(async move {
                let version = transport::protocol_of(&conn).unwrap();
                while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                    let _ = transport::read_request(&mut recv, version).await;
                    let frame = ResponseFrame {
                        body: Response::Failed(ProtocolFailure::GoingAway),
                        ext: Extensions::default(),
                    };
                    let bytes = frames::encode_response(version, &frame).unwrap();
                    let _ = transport::write_frame(&mut send, &bytes).await;
                    let _ = send.stopped().await;
                }
            });
        }
    });
}

#[tokio::test]
async fn a_write_answered_going_away_is_settled_not_taken_for_did_not_run() {
    let (owner_key, caller_key) = (NodeKey::generate().unwrap(), NodeKey::generate().unwrap());
    let server = endpoint(&owner_key);
    let addr = server.local_addr().unwrap();
    serve_going_away(server);

    let (caller, owner) = caller_to(&caller_key, owner_key.node_id(), addr);
    let call = WriteCall {
        request_id: RequestId::generate(),
        app: AppName::from_static("app"),
        vault: VaultName::from_static("v"),
        verb: put_k(),
        priority: Priority::Interactive,
    };
    let outcome = caller
        .write(&owner, &call, &AnyTicket, Instant::now() + WAIT)
        .await;
    // The owner may have run an earlier copy of this id: its outcome is unknown until settled,
    // never a refusal that says it did not run.
    assert!(
        matches!(
            &outcome,
            WriteOutcome::Unknown {
                reason: UnknownReason::ConnectionLost,
                ..
            }
        ),
        "{outcome:?}"
    );
}
