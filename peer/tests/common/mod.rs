//! What the peer crate's QUIC tests share: a trust store that trusts anyone, and one request
//! on a new stream in the connection's protocol version.

// Not every test file uses every helper.
#![allow(dead_code)]

use ferry_names::Label;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferry_peer::call::{CallTuning, Caller, Target};
use ferry_peer::pool::Pool;
use ferry_peer::route_table::RouteTable;
use ferry_peer::routes::{Route, RouteKind};
use ferry_peer::tls::TrustedKeys;
use ferry_peer::transport::{self, PeerEndpoint, TransportTuning};
use ferry_peer::wire::{Extensions, Request, RequestFrame, Response};
use ferry_peer::{frames, NodeId, NodeKey};

/// How long an answer may take on loopback.
pub const WAIT: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct Anyone;

impl TrustedKeys for Anyone {
    fn is_trusted(&self, _: &NodeId) -> bool {
        true
    }
}

/// A peer endpoint on loopback with the default tuning, trusting anyone.
pub fn endpoint(key: &NodeKey) -> PeerEndpoint {
    PeerEndpoint::bind(
        "127.0.0.1:0".parse().expect("a loopback address"),
        key.clone(),
        Arc::new(Anyone),
        TransportTuning::default(),
    )
    .expect("bind loopback")
}

/// A caller with the key `key` and the default tuning, and `owner` at `addr` (one LAN route)
/// as the target of its calls.
pub fn caller_to(key: &NodeKey, owner: NodeId, addr: SocketAddr) -> (Caller, Target) {
    let routes = Arc::new(RouteTable::default());
    let pool = Arc::new(Pool::new(Arc::clone(&routes)));
    let caller = Caller::new(endpoint(key), pool, CallTuning::default(), routes);
    let target = Target {
        node: owner,
        label: Label::from_static("owner"),
        routes: vec![Route {
            kind: RouteKind::Lan,
            addr,
        }],
        down_routes: Vec::new(),
    };
    (caller, target)
}

/// One request on a new stream, in the connection's version; the answer, or why there was none.
pub async fn ask(conn: &quinn::Connection, body: Request) -> Result<Response, String> {
    let version = transport::protocol_of(conn).ok_or("the connection has no protocol version")?;
    let frame = frames::encode_request(
        version,
        &RequestFrame {
            body,
            ext: Extensions::default(),
        },
    )
    .map_err(|e| e.to_string())?;
    ask_raw(conn, &frame).await
}

/// `frame`'s bytes as they are on a new stream; the answer, or why there was none.
pub async fn ask_raw(conn: &quinn::Connection, frame: &[u8]) -> Result<Response, String> {
    let version = transport::protocol_of(conn).ok_or("the connection has no protocol version")?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    transport::write_frame(&mut send, frame)
        .await
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(WAIT, transport::read_response(&mut recv, version)).await {
        Err(_) => Err(format!("no answer within {WAIT:?}")),
        Ok(read) => read.map(|frame| frame.body).map_err(|e| e.to_string()),
    }
}
