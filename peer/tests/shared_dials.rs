//! Calls that want a fresh connection at the same moment share one, on real QUIC: the settle
//! queries of 32 writes after a break make one handshake, not 32. Those that start while the
//! dial is under way join it (`ferry_peer::dials`); those that start after take the connection
//! it made, which is newer than the break.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_names::VaultName;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::common::{caller_to, endpoint, serve_connection, Stub, WAIT};
use ferry_peer::call::{Caller, Target};
use ferry_peer::outcome::NotCarriedOutReason;
use ferry_peer::transport::PeerEndpoint;
use ferry_peer::wire::{CallState, RequestId};
use ferry_peer::NodeKey;
use futures_util::future::join_all;

/// The owner's side: every connection accepted is counted, served, and handed to `accepted`
/// so the test can break it.
fn serve(
    server: PeerEndpoint,
    handshakes: Arc<AtomicUsize>,
    accepted: tokio::sync::mpsc::UnboundedSender<quinn::Connection>,
) {
    tokio::spawn(async move {
        let (_stop, stopping) = tokio::sync::watch::channel(false);
        while let Some(incoming) = server.accept().await {
            let Ok(conn) = incoming.await else { continue };
            handshakes.fetch_add(1, Ordering::SeqCst);
            let _ = accepted.send(conn.clone());
            tokio::spawn(serve_connection(Stub::NeverHeard, conn, stopping.clone()));
        }
    });
}

/// 32 settle queries at once, each asking for a fresh connection as a settle after a break
/// does; every one must be answered.
async fn settle_32(caller: &Caller, owner: &Target, broke: Instant) {
    let vault = VaultName::from_static("v");
    let asks = (0..32u128).map(|n| {
        caller.call_status(
            owner,
            RequestId::from_bytes((n + 1).to_be_bytes()),
            Some(&vault),
            Instant::now() + WAIT,
            Some(broke),
        )
    });
    for answer in join_all(asks).await {
        assert!(
            matches!(
                answer,
                Ok(CallState::NotCarriedOut {
                    reason: NotCarriedOutReason::NeverArrived
                })
            ),
            "every settle query is answered: {answer:?}"
        );
    }
}

#[tokio::test]
async fn settle_queries_after_a_break_share_one_fresh_connection() {
    let (owner_key, caller_key) = (NodeKey::generate().unwrap(), NodeKey::generate().unwrap());
    let server = endpoint(&owner_key);
    let addr: SocketAddr = server.local_addr().unwrap();
    let handshakes = Arc::new(AtomicUsize::new(0));
    let (accepted, mut connections) = tokio::sync::mpsc::unbounded_channel();
    serve(server, Arc::clone(&handshakes), accepted);

    let (caller, owner) = caller_to(&caller_key, owner_key.node_id(), addr);

    settle_32(&caller, &owner, Instant::now()).await;
    assert_eq!(
        handshakes.load(Ordering::SeqCst),
        1,
        "32 settle queries wanting a fresh connection at once made one handshake ({:?})",
        caller.dial_counts()
    );
    assert_eq!(caller.dial_counts().started, 1);

    // The break: the owner closes the connection the queries shared. The next wave asks for
    // a fresh one again, and again makes one between them.
    let first = tokio::time::timeout(WAIT, connections.recv())
        .await
        .expect("the owner saw the first connection within the bound")
        .expect("the owner's accept loop runs");
    first.close(quinn::VarInt::from_u32(0), b"break");
    settle_32(&caller, &owner, Instant::now()).await;
    assert_eq!(
        handshakes.load(Ordering::SeqCst),
        2,
        "after the break, the second wave made one more handshake"
    );
    assert_eq!(caller.dial_counts().started, 2);
}
