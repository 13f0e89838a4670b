//! The door on real QUIC: a connection's streams share one task, so a stream whose handler
//! panics must not take the others down with it; and a frame is the whole stream, so reading
//! one leaves the stream read to its end when the end has arrived (a stream dropped before its
//! end was read sends the peer a STOP_SENDING: quinn cannot tell an end that came from one
//! still awaited).

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{ask, endpoint, serve_first, Stub, WAIT};
use ferry_names::{AppName, VaultName};
use ferry_peer::wire::{Hello, ProtocolFailure, ReadRequest, ReadVerb, Request, Response};
use ferry_peer::NodeKey;

/// A client connection to a door serving [`Stub::PanicsOnRead`] on loopback; the task serving it, and
/// the sender whose drop would stop it.
async fn connected_to_door() -> (
    quinn::Connection,
    tokio::task::JoinHandle<()>,
    tokio::sync::watch::Sender<bool>,
) {
    let (server_key, client_key) = (NodeKey::generate().unwrap(), NodeKey::generate().unwrap());
    let server = endpoint(&server_key);
    let addr = server.local_addr().unwrap();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let serving = serve_first(server, Stub::PanicsOnRead, stopping);
    let client = endpoint(&client_key);
    let conn = client
        .dial(addr, server_key.node_id(), WAIT)
        .await
        .expect("connects");
    (conn, serving, stop)
}

fn hello() -> Request {
    Request::Hello(Hello {
        label_hint: "client".into(),
        owned_vaults: Vec::new(),
        replicated_vaults: Vec::new(),
        release: None,
    })
}

#[tokio::test]
async fn a_stream_whose_handler_panics_leaves_the_connections_other_streams_served() {
    let (conn, serving, _stop) = connected_to_door().await;

    let read = Request::Read(ReadRequest {
        app: AppName::from_static("app"),
        vault: VaultName::from_static("v"),
        verb: ReadVerb::Get {
            key: "k".into(),
            known_revision: None,
        },
        deadline_ms: 1_000,
    });
    let panicked = ask(&conn, read).await;
    assert!(
        panicked.is_err(),
        "the read whose handler panicked has no answer: {panicked:?}"
    );
    match ask(&conn, hello()).await {
        Ok(Response::Hello(theirs)) => assert_eq!(theirs.owned_vaults, vec!["v".to_string()]),
        other => panic!("a hello on the same connection after the panic: {other:?}"),
    }
    assert!(
        !serving.is_finished(),
        "the connection is still being served"
    );
}

#[tokio::test]
async fn calls_whose_frames_end_their_streams_send_no_stop_sending_either_way() {
    let (conn, _serving, stop) = connected_to_door().await;
    let before = conn.stats();

    const CALLS: u64 = 20;
    for call in 0..CALLS {
        match ask(&conn, hello()).await {
            Ok(Response::Hello(_)) => {}
            other => panic!("call {call}: {other:?}"),
        }
    }

    // Calls run one after another, and a stream's STOP_SENDING is queued as its call ends, so
    // every call's but the last has crossed by now, both ways: with the next request (ours) or
    // before the next answer (the door's).
    let after = conn.stats();
    let sent = after.frame_tx.stop_sending - before.frame_tx.stop_sending;
    let heard = after.frame_rx.stop_sending - before.frame_rx.stop_sending;
    assert_eq!(
        (sent, heard),
        (0, 0),
        "STOP_SENDING frames over {CALLS} calls (sent by the caller for answers, heard from the door for requests): each is a packet for nothing"
    );

    // The answers the door holds until the caller has them (a write's, and a stopping door's
    // "going away") are stopped on purpose: that tells the door at once. A door told to stop
    // answers every new stream "going away"; the second call carries the first one's stop.
    stop.send(true).unwrap();
    for call in 0..2 {
        match ask(&conn, hello()).await {
            Ok(Response::Failed(ProtocolFailure::GoingAway)) => {}
            other => panic!("call {call} to a stopping door: {other:?}"),
        }
    }
    let stopped = conn.stats().frame_tx.stop_sending - after.frame_tx.stop_sending;
    assert!(
        stopped >= 1,
        "a held answer's stream is stopped by the caller once it has the answer"
    );
}
