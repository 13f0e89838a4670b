//! Issue 43: an owner that is stopping must not tell a resent request id "did not run". With a
//! real owner process and a trusted raw peer (so nothing but this test decides what is sent,
//! and when): a write that ran before the stop, sent again once the owner's door turns new
//! streams away, hears its first answer; a copy of a write still running in the drain hears
//! nothing it could take for "not carried out" (the stream is reset unanswered: the caller
//! settles), and a settle query about it is answered; only an id the owner holds nothing of is
//! refused "stopping, not carried out", and it never runs (SPEC 7 rule 2, SPEC 11).

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_names::{AppName, VaultName};
use std::sync::Arc;
use std::time::Duration;

use ferry_harness::{wait_for, Gateway};
use ferry_peer::frames;
use ferry_peer::outcome::{RefusalCode, WriteAnswer};
use ferry_peer::tls::TrustedKeys;
use ferry_peer::transport::{
    self, PeerEndpoint, ReadFrameError, TransportTuning, RESET_UNANSWERED,
};
use ferry_peer::wire::{
    CallState, CallStatusRequest, Extensions, Heartbeat, Priority, ProtocolFailure, Request,
    RequestFrame, RequestId, Response, TicketAnswer, TicketRequest, WriteRequest, WriteVerb,
};
use ferry_peer::{NodeId, NodeKey};
use ferry_ticket::{Ticket, VerbSet};

/// How long the owner holds every write batch before its commit: long enough that a write is
/// surely still running while the test sends its copy and asks about it, on a machine whose
/// cores other tests keep busy (at 3 s, a CI run once asked after the stop had ended), and
/// shorter than the 6 s a QUIC connection may stay silent (the prober sends no heartbeats).
const STALL_MS: u64 = 4_500;

/// The owner's drain, well past the stall: the stop must outlast every ask of the test.
const DRAIN_CONFIG: &str = "drain_ms = 30000\n";

/// How long any one answer may take (a stalled commit included).
const ANSWER_BOUND: Duration = Duration::from_secs(15);

#[derive(Debug)]
struct OnlyThis(NodeId);

impl TrustedKeys for OnlyThis {
    fn is_trusted(&self, id: &NodeId) -> bool {
        *id == self.0
    }
}

/// How a stream ended: the owner's answer, or the reset code it ended the stream with.
#[derive(Debug)]
enum Ended {
    Answered(Response),
    Reset(u64),
}

/// One request on a new stream of `conn`.
async fn ask(conn: &quinn::Connection, body: Request, ext: Extensions) -> Ended {
    let version = transport::protocol_of(conn).expect("a protocol version");
    let frame = frames::encode_request(version, &RequestFrame { body, ext }).unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    transport::write_frame(&mut send, &frame).await.unwrap();
    let read = tokio::time::timeout(ANSWER_BOUND, transport::read_response(&mut recv, version))
        .await
        .expect("the owner neither answered nor reset the stream in time");
    match read {
        Ok(frame) => Ended::Answered(frame.body),
        Err(ReadFrameError::Broken {
            source: quinn::ReadExactError::ReadError(quinn::ReadError::Reset(code)),
        }) => Ended::Reset(code.into_inner()),
        Err(err) => panic!("the stream ended without an answer or a reset: {err}"),
    }
}

fn put(request_id: RequestId, key: &str, ticket: &Ticket) -> Request {
    Request::Write(Box::new(WriteRequest {
        request_id,
        app: AppName::from_static("prober-app"),
        vault: VaultName::from_static("notes"),
        verb: WriteVerb::Put {
            key: key.into(),
            value: key.as_bytes().to_vec(),
            if_revision: None,
        },
        deadline_ms: 20_000,
        priority: Priority::Interactive,
        ticket: ticket.clone(),
    }))
}

fn status(request_id: RequestId) -> Request {
    Request::CallStatus(CallStatusRequest { request_id })
}

/// `owner`'s log lines saying the fault point held a batch.
fn stalls(owner: &Gateway) -> usize {
    owner
        .log()
        .lines()
        .filter(|line| line.contains("fault injection: stalling the owner"))
        .count()
}

#[test]
fn a_stopping_owner_answers_a_resent_id_from_its_journal_never_did_not_run() {
    let mut a = Gateway::start_with(
        "a",
        DRAIN_CONFIG,
        &[(
            "FERRY_DANGEROUS_FAULT",
            &format!("before_commit=stall:{STALL_MS}"),
        )],
    );
    let out = a.cli(&["vault", "create", "notes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let prober = NodeKey::generate().unwrap();
    let out = a.cli(&["trust", &prober.node_id().to_string(), "--label", "prober"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let owner: NodeId = a.node_id.parse().unwrap();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _guard = runtime.enter();
    let endpoint = PeerEndpoint::bind(
        "127.0.0.1:0".parse().unwrap(),
        prober.clone(),
        Arc::new(OnlyThis(owner)),
        TransportTuning::default(),
    )
    .unwrap();
    let conn = runtime
        .block_on(endpoint.dial(a.quic.parse().unwrap(), owner, Duration::from_secs(5)))
        .unwrap();
    let ticket = match runtime.block_on(ask(
        &conn,
        Request::IssueTicket(TicketRequest {
            app: AppName::from_static("prober-app"),
            vault: VaultName::from_static("notes"),
            verbs: VerbSet::all_writes(),
        }),
        Extensions::default(),
    )) {
        Ended::Answered(Response::Ticket(TicketAnswer::Issued(ticket))) => ticket,
        other => panic!("a ticket: {other:?}"),
    };

    // A write that runs before the stop.
    let ran = RequestId::generate();
    let first = match runtime.block_on(ask(&conn, put(ran, "ran", &ticket), Extensions::default()))
    {
        Ended::Answered(Response::Write(answer)) => answer,
        other => panic!("the first write: {other:?}"),
    };
    assert_eq!(first, WriteAnswer::Done { revision: 1 });

    // A write still running when the stop comes: its batch is held at the fault point.
    let draining = RequestId::generate();
    let original = {
        let conn = conn.clone();
        let request = put(draining, "draining", &ticket);
        runtime.spawn(async move { ask(&conn, request, Extensions::default()).await })
    };
    wait_for(
        "the owner to hold the second write's batch",
        ANSWER_BOUND,
        || (stalls(&a) >= 2).then_some(()),
    );
    a.signal(ferry_harness::SIGTERM);
    // Once a heartbeat is answered "going away", every stream after it arrived after the stop.
    wait_for(
        "the owner's door to turn new streams away",
        ANSWER_BOUND,
        || {
            let beat = Request::Heartbeat(Heartbeat { interval_ms: 1_000 });
            match runtime.block_on(ask(&conn, beat, Extensions::default())) {
                Ended::Answered(Response::Failed(ProtocolFailure::GoingAway)) => Some(()),
                Ended::Answered(Response::Heartbeat(_)) => None,
                other => panic!("a heartbeat: {other:?}"),
            }
        },
    );
    assert!(
        !original.is_finished(),
        "the second write is still running in the drain"
    );

    // The write that ran, sent again: its first answer, never "stopping, did not run".
    let again = runtime.block_on(ask(&conn, put(ran, "ran", &ticket), Extensions::default()));
    assert!(
        matches!(&again, Ended::Answered(Response::Write(answer)) if *answer == first),
        "a copy of a write that ran, sent to a stopping owner, hears its first answer: {again:?}"
    );

    // The one still running, sent again: no answer (the caller settles), or, if it committed
    // meanwhile, its first answer; never a refusal that says it did not run.
    let copy = runtime.block_on(ask(
        &conn,
        put(draining, "draining", &ticket),
        Extensions::default(),
    ));
    assert!(
        matches!(
            &copy,
            Ended::Reset(code) if *code == u64::from(RESET_UNANSWERED)
        ) || matches!(
            &copy,
            Ended::Answered(Response::Write(WriteAnswer::Done { revision: 2 }))
        ),
        "a copy of a write running in the drain: {copy:?}"
    );
    // Asked about, it is running (or done); the one that ran is done.
    let asked = runtime.block_on(ask(
        &conn,
        status(draining),
        Extensions::vault(&VaultName::from_static("notes")),
    ));
    assert!(
        matches!(
            &asked,
            Ended::Answered(Response::CallStatus(
                CallState::Running { .. } | CallState::Answered(WriteAnswer::Done { revision: 2 })
            ))
        ),
        "a settle query about a write running in the drain: {asked:?}"
    );
    let asked = runtime.block_on(ask(
        &conn,
        status(ran),
        Extensions::vault(&VaultName::from_static("notes")),
    ));
    assert!(
        matches!(&asked, Ended::Answered(Response::CallStatus(CallState::Answered(answer))) if *answer == first),
        "a settle query about a write that ran: {asked:?}"
    );

    // An id the owner holds nothing of: refused as not carried out, which is true of it.
    let new = RequestId::generate();
    let refused = runtime.block_on(ask(&conn, put(new, "new", &ticket), Extensions::default()));
    assert!(
        matches!(
            &refused,
            Ended::Answered(Response::Write(WriteAnswer::Refused(refusal)))
                if refusal.code == RefusalCode::Busy
        ),
        "a new write to a stopping owner: {refused:?}"
    );

    // The write running in the drain finishes, once, and its first sender hears it.
    let original = runtime.block_on(original).unwrap();
    assert!(
        matches!(
            &original,
            Ended::Answered(Response::Write(WriteAnswer::Done { revision: 2 }))
        ),
        "the write running in the drain: {original:?}"
    );
    assert_eq!(
        a.wait_exit(ferry_harness::STOP_BOUND),
        Some(0),
        "{}",
        a.log()
    );
    assert_eq!(
        a.stored("notes", "ran").map(|(_, revision)| revision),
        Some(1)
    );
    assert_eq!(
        a.stored("notes", "draining").map(|(_, revision)| revision),
        Some(2)
    );
    assert_eq!(
        a.stored("notes", "new"),
        None,
        "the refused write never ran"
    );
    assert_eq!(a.vault_revision("notes"), 2, "each write ran once");
}
