//! Protocol negotiation on real QUIC and TLS (SPEC 11): two endpoints agree on the newest
//! version both speak; a pair with none in common is refused at the handshake, before any
//! request could leave, with an error that names both ranges; and a newer peer's request of a
//! kind this build does not know is answered "not understood", nothing run.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;

use crate::common::{ask, ask_raw, serve_connection, Anyone, Stub, WAIT};
use ferry_peer::tls;
use ferry_peer::transport::{self, DialError, PeerEndpoint, TransportTuning};
use ferry_peer::wire::{
    Extensions, Hello, ProtocolFailure, ProtocolRange, Request, Response, ALPN,
};
use ferry_peer::{codec, NodeKey};

fn range(oldest: u16, newest: u16) -> ProtocolRange {
    ProtocolRange { oldest, newest }
}

/// An endpoint speaking `protocols`, serving [`Stub::Greeter`] (and closing connections that met on
/// no version, as the gateway's accept loop does).
fn serving(key: &NodeKey, protocols: ProtocolRange) -> (SocketAddr, PeerEndpoint) {
    let endpoint = PeerEndpoint::bind(
        "127.0.0.1:0".parse().unwrap(),
        key.clone(),
        Arc::new(Anyone),
        TransportTuning {
            protocols,
            ..TransportTuning::default()
        },
    )
    .unwrap();
    let addr = endpoint.local_addr().unwrap();
    let server = endpoint.clone();
    tokio::spawn(async move {
        let (_stop, stopping) = tokio::sync::watch::channel(false);
        while let Some(incoming) = server.accept().await {
            let (stopping, protocols) = (stopping.clone(), server.protocols());
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                if transport::refuse_without_common_version(&conn, protocols).await {
                    return;
                }
                serve_connection(Stub::Greeter, conn, stopping).await;
            });
        }
    });
    (addr, endpoint)
}

fn client(protocols: ProtocolRange) -> PeerEndpoint {
    PeerEndpoint::bind(
        "127.0.0.1:0".parse().unwrap(),
        NodeKey::generate().unwrap(),
        Arc::new(Anyone),
        TransportTuning {
            protocols,
            ..TransportTuning::default()
        },
    )
    .unwrap()
}

fn hello(label: &str) -> Request {
    Request::Hello(Hello {
        label_hint: label.into(),
        owned_vaults: Vec::new(),
        replicated_vaults: Vec::new(),
        release: Some("client".into()),
    })
}

#[tokio::test]
async fn two_gateways_agree_on_the_newest_version_both_speak_and_talk_in_it() {
    for (server, client_range, agreed) in [
        (range(1, 2), range(1, 2), 2),
        (range(1, 2), range(1, 1), 1),
        (range(1, 1), range(1, 2), 1),
        (range(2, 3), range(1, 2), 2),
    ] {
        let key = NodeKey::generate().unwrap();
        let (addr, _server) = serving(&key, server);
        let conn = client(client_range)
            .dial(addr, key.node_id(), WAIT)
            .await
            .unwrap_or_else(|err| panic!("{client_range} dialing {server}: {err}"));
        assert_eq!(
            transport::protocol_of(&conn),
            Some(agreed),
            "{client_range} dialing {server}"
        );
        match ask(&conn, hello("me")).await.unwrap() {
            Response::Hello(theirs) => {
                assert_eq!(theirs.label_hint, format!("heard me on protocol {agreed}"));
                // Protocol 1's hello has no release: it is dropped on the way, not garbled.
                let release = (agreed >= 2).then(|| "test".to_string());
                assert_eq!(theirs.release, release, "{client_range} dialing {server}");
            }
            other => panic!("a hello answered with {other:?}"),
        }
    }
}

#[tokio::test]
async fn gateways_with_no_version_in_common_are_refused_naming_both_ranges() {
    let key = NodeKey::generate().unwrap();
    let (addr, _server) = serving(&key, range(3, 4));
    let err = client(range(1, 2))
        .dial(addr, key.node_id(), WAIT)
        .await
        .expect_err("no version in common");
    match &err {
        DialError::NoCommonVersion { ours, theirs, .. } => {
            assert_eq!(*ours, range(1, 2));
            let (their_range, release) = theirs.clone().expect("the server said its range");
            assert_eq!(their_range, range(3, 4));
            assert_eq!(release, ferry_peer::wire::RELEASE);
        }
        other => panic!("expected NoCommonVersion, got {other:?}"),
    }
    let text = err.to_string();
    for part in [
        "it speaks 3-4",
        "this one speaks 1-2",
        "upgrade this gateway",
    ] {
        assert!(text.contains(part), "{text:?} lacks {part:?}");
    }

    // The other way round: the newer side dials the older.
    let key = NodeKey::generate().unwrap();
    let (addr, _server) = serving(&key, range(1, 2));
    let text = client(range(3, 4))
        .dial(addr, key.node_id(), WAIT)
        .await
        .expect_err("no version in common")
        .to_string();
    for part in [
        "it speaks 1-2",
        "this one speaks 3-4",
        "upgrade the gateway there",
    ] {
        assert!(text.contains(part), "{text:?} lacks {part:?}");
    }
}

/// A release before protocol 2 offers `ferry/1` alone, without the version exchange: a newer
/// gateway that no longer speaks 1 is refused by its TLS alert and says what it can.
#[tokio::test]
async fn a_first_release_that_cannot_say_its_range_is_named_as_protocol_1() {
    let key = NodeKey::generate().unwrap();
    let crypto = tls::server_crypto(&key, Arc::new(Anyone), vec![ALPN.to_vec()]).unwrap();
    let config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let old = quinn::Endpoint::server(config, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = old.local_addr().unwrap();
    tokio::spawn(async move {
        while let Some(incoming) = old.accept().await {
            let _ = incoming.await;
        }
    });
    let err = client(range(2, 3))
        .dial(addr, key.node_id(), WAIT)
        .await
        .expect_err("no version in common");
    assert!(
        matches!(err, DialError::NoCommonVersion { theirs: None, .. }),
        "{err:?}"
    );
    let text = err.to_string();
    for part in [
        "speaks none of 2-3",
        "speak only 1",
        "upgrade the gateway there",
    ] {
        assert!(text.contains(part), "{text:?} lacks {part:?}");
    }
}

#[tokio::test]
async fn a_request_of_a_kind_this_build_does_not_know_is_answered_not_understood() {
    #[derive(serde::Serialize)]
    struct Envelope {
        kind: u32,
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
        ext: Extensions,
    }
    let key = NodeKey::generate().unwrap();
    let (addr, _server) = serving(&key, range(1, 2));
    let conn = client(range(1, 2))
        .dial(addr, key.node_id(), WAIT)
        .await
        .unwrap();
    let future = codec::encode_frame(
        2,
        &Envelope {
            kind: 40,
            payload: b"a verb from protocol 9".to_vec(),
            ext: Extensions::default(),
        },
    )
    .unwrap();
    assert_eq!(
        ask_raw(&conn, &future).await.unwrap(),
        Response::Failed(ProtocolFailure::UnknownRequest { kind: 40 })
    );
    // The connection goes on serving.
    let answer = ask(&conn, hello("me")).await;
    assert!(
        matches!(answer, Ok(Response::Hello(_))),
        "after an unknown kind, a hello got {answer:?}"
    );
}
