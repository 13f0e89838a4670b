//! Real QUIC with real TLS on loopback: who may connect to whom.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_peer::tls::{peer_node_id, TrustedKeys};
use ferry_peer::transport::{DialError, PeerEndpoint, TransportTuning};
use ferry_peer::{NodeId, NodeKey};

#[derive(Debug, Default)]
struct Trust(Mutex<HashSet<NodeId>>);

impl TrustedKeys for Trust {
    fn is_trusted(&self, id: &NodeId) -> bool {
        self.0.lock().map(|set| set.contains(id)).unwrap_or(false)
    }
}

fn endpoint(key: &NodeKey, trust: Arc<Trust>) -> PeerEndpoint {
    PeerEndpoint::bind(
        "127.0.0.1:0".parse().expect("addr"),
        key.clone(),
        trust,
        TransportTuning::default(),
    )
    .expect("bind loopback")
}

/// Accepts connections forever, echoing one uni stream's worth of nothing; keeps handshakes
/// completing on the server side.
fn serve(server: PeerEndpoint) -> tokio::task::JoinHandle<Vec<NodeId>> {
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(incoming) = server.accept().await {
            if let Ok(conn) = incoming.await {
                if let Some(id) = peer_node_id(&conn) {
                    seen.push(id);
                }
            }
            if !seen.is_empty() {
                break;
            }
        }
        seen
    })
}

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn trusted_client_reaches_the_pinned_server_and_both_see_each_others_key() {
    let (server_key, client_key) = (NodeKey::generate().unwrap(), NodeKey::generate().unwrap());
    let server_trust = Arc::new(Trust::default());
    server_trust.0.lock().unwrap().insert(client_key.node_id());
    let server = endpoint(&server_key, server_trust);
    let addr = server.local_addr().unwrap();
    let accepted = serve(server);
    let client = endpoint(&client_key, Arc::new(Trust::default()));
    let conn = client
        .dial(addr, server_key.node_id(), WAIT)
        .await
        .expect("trusted client connects");
    assert_eq!(peer_node_id(&conn), Some(server_key.node_id()));
    let seen = tokio::time::timeout(WAIT, accepted)
        .await
        .expect("server saw it")
        .unwrap();
    assert_eq!(seen, vec![client_key.node_id()]);
}

#[tokio::test]
async fn dialer_refuses_a_server_whose_key_is_not_the_pinned_one() {
    let (server_key, client_key, impostor) = (
        NodeKey::generate().unwrap(),
        NodeKey::generate().unwrap(),
        NodeKey::generate().unwrap(),
    );
    let server_trust = Arc::new(Trust::default());
    server_trust.0.lock().unwrap().insert(client_key.node_id());
    let server = endpoint(&server_key, server_trust);
    let addr = server.local_addr().unwrap();
    let _accepted = serve(server);
    let client = endpoint(&client_key, Arc::new(Trust::default()));
    let err = client
        .dial(addr, impostor.node_id(), WAIT)
        .await
        .expect_err("the server is not the node we pinned");
    assert!(matches!(err, DialError::KeyMismatch { .. }), "{err:?}");
}

#[tokio::test]
async fn server_refuses_a_client_not_in_its_trust_store() {
    let (server_key, stranger) = (NodeKey::generate().unwrap(), NodeKey::generate().unwrap());
    let server = endpoint(&server_key, Arc::new(Trust::default()));
    let addr = server.local_addr().unwrap();
    let _accepted = serve(server);
    let client = endpoint(&stranger, Arc::new(Trust::default()));
    let result = client.dial(addr, server_key.node_id(), WAIT).await;
    // In TLS 1.3 the client finishes its side before the server checks the client's key, so
    // the refusal may arrive as a failed dial or as the connection closing right after.
    match result {
        Err(DialError::Refused { .. }) => {}
        Ok(conn) => {
            let reason = tokio::time::timeout(WAIT, conn.closed())
                .await
                .expect("closed");
            assert!(
                reason.to_string().contains("crypto") || reason.to_string().contains("handshake"),
                "{reason}"
            );
        }
        Err(other) => panic!("expected a refusal, got {other:?}"),
    }
}
