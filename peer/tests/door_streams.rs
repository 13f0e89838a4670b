//! The door on real QUIC: a connection's streams share one task, so a stream whose handler
//! panics must not take the others down with it.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

mod common;

use common::{ask, Anyone, WAIT};
use ferry_peer::door::{self, InFlight, ReadReply, Service};
use ferry_peer::tls::peer_node_id;
use ferry_peer::transport::{PeerEndpoint, TransportTuning};
use ferry_peer::wire::{
    CallState, CallStatusRequest, Hello, ReadRequest, ReadVerb, Request, Response, TicketAnswer,
    TicketRequest, WriteAnswer, WriteRequest,
};
use ferry_peer::{NodeId, NodeKey};

/// Answers hellos; panics on every read, as a handler with a bug would.
struct PanicsOnRead;

impl Service for PanicsOnRead {
    async fn hello(&self, _: NodeId, _: Hello, _: u16) -> Hello {
        Hello {
            label_hint: "server".into(),
            owned_vaults: vec!["v".into()],
            replicated_vaults: Vec::new(),
            release: None,
        }
    }
    async fn write(&self, _: NodeId, _: WriteRequest) -> Option<WriteAnswer> {
        unreachable!("this test sends no writes")
    }
    async fn read(&self, _: NodeId, _: ReadRequest, _: Option<Duration>) -> ReadReply {
        panic!("a bug in a read handler")
    }
    async fn issue_ticket(&self, _: NodeId, _: TicketRequest) -> TicketAnswer {
        unreachable!("this test asks for no tickets")
    }
    async fn call_status(
        &self,
        _: NodeId,
        _: CallStatusRequest,
        _: Option<String>,
    ) -> Option<CallState> {
        unreachable!("this test asks about no calls")
    }
}

fn endpoint(key: &NodeKey) -> PeerEndpoint {
    PeerEndpoint::bind(
        "127.0.0.1:0".parse().unwrap(),
        key.clone(),
        Arc::new(Anyone),
        TransportTuning::default(),
    )
    .expect("bind loopback")
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
    let (server_key, client_key) = (NodeKey::generate().unwrap(), NodeKey::generate().unwrap());
    let server = endpoint(&server_key);
    let addr = server.local_addr().unwrap();
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let serving = tokio::spawn(async move {
        let conn = server.accept().await.expect("a connection").await.unwrap();
        let peer = peer_node_id(&conn).unwrap();
        let in_flight = Arc::new(InFlight::default());
        door::serve_connection(Arc::new(PanicsOnRead), conn, peer, stopping, in_flight).await;
    });
    let client = endpoint(&client_key);
    let conn = client
        .dial(addr, server_key.node_id(), WAIT)
        .await
        .expect("connects");

    let read = Request::Read(ReadRequest {
        app: "app".into(),
        vault: "v".into(),
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
