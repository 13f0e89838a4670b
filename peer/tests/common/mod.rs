//! What the peer crate's QUIC tests share: a trust store that trusts anyone, endpoints and
//! callers on loopback, the one set of [`Service`] stubs a door serves ([`Stub`]), and one
//! request on a new stream in the connection's protocol version.

// Not every test file uses every helper.
#![allow(dead_code)]

use ferry_names::Label;
use ferry_names::VaultName;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferry_peer::call::{CallTuning, Caller, Target};
use ferry_peer::door::{self, InFlight, ReadReply, Service};
use ferry_peer::outcome::NotCarriedOutReason;
use ferry_peer::pool::Pool;
use ferry_peer::route_table::RouteTable;
use ferry_peer::routes::{Route, RouteKind};
use ferry_peer::tls::{peer_node_id, TrustedKeys};
use ferry_peer::transport::{self, PeerEndpoint, TransportTuning};
use ferry_peer::wire::{
    CallState, CallStatusRequest, Extensions, Hello, ReadRequest, Request, RequestFrame, RequestId,
    Response, TicketAnswer, TicketRequest, WriteAnswer, WriteRequest,
};
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

/// The services the tests' doors serve. Each answers only what its tests ask and treats any
/// other request as a bug in the test (`unreachable!`), except where noted.
#[derive(Debug, Clone)]
pub enum Stub {
    /// An owner that ran `id` (first answer `answer`) and is asked only while it stops: a
    /// stopping door answers hellos, reads and ticket requests itself, so those are never
    /// handed over; a write or settle query about `id` gets `answer`, any other none.
    Ran { id: RequestId, answer: WriteAnswer },
    /// An owner of vault `v` that never heard of any request id.
    NeverHeard,
    /// A server of vault `v` whose read handler panics, as one with a bug would.
    PanicsOnRead,
    /// Answers hellos with the protocol version they came on (in the label); nothing else.
    Greeter,
}

impl Stub {
    /// The hello of a gateway labelled `label` that owns vault `v`.
    fn owner_of_v(label: &str) -> Hello {
        Hello {
            label_hint: label.into(),
            owned_vaults: vec![VaultName::from_static("v")],
            replicated_vaults: Vec::new(),
            release: None,
        }
    }
}

impl Service for Stub {
    async fn hello(&self, _: NodeId, hello: Hello, version: u16) -> Hello {
        match self {
            Self::Ran { .. } => unreachable!("a stopping door answers hellos itself"),
            Self::NeverHeard => Self::owner_of_v("owner"),
            Self::PanicsOnRead => Self::owner_of_v("server"),
            Self::Greeter => Hello {
                label_hint: format!("heard {} on protocol {version}", hello.label_hint),
                owned_vaults: Vec::new(),
                replicated_vaults: Vec::new(),
                release: Some("test".into()),
            },
        }
    }
    async fn write(&self, _: NodeId, _: WriteRequest) -> Option<WriteAnswer> {
        unreachable!("{self:?} is sent no writes that it runs")
    }
    async fn write_while_stopping(&self, _: NodeId, request: WriteRequest) -> Option<WriteAnswer> {
        match self {
            Self::Ran { id, answer } => (request.request_id == *id).then(|| answer.clone()),
            _ => unreachable!("{self:?} is not stopped"),
        }
    }
    async fn read(&self, _: NodeId, _: ReadRequest, _: Option<Duration>) -> ReadReply {
        match self {
            Self::PanicsOnRead => panic!("a bug in a read handler"),
            Self::Ran { .. } => unreachable!("a stopping door answers reads itself"),
            _ => unreachable!("{self:?} is sent no reads"),
        }
    }
    async fn issue_ticket(&self, _: NodeId, _: TicketRequest) -> TicketAnswer {
        unreachable!("{self:?} is asked for no tickets")
    }
    async fn call_status(
        &self,
        _: NodeId,
        request: CallStatusRequest,
        _: Option<VaultName>,
    ) -> Option<CallState> {
        match self {
            Self::Ran { id, answer } => {
                (request.request_id == *id).then(|| CallState::Answered(answer.clone()))
            }
            Self::NeverHeard => Some(CallState::NotCarriedOut {
                reason: NotCarriedOutReason::NeverArrived,
            }),
            _ => unreachable!("{self:?} is asked about no calls"),
        }
    }
}

/// Serves `stub` on the first connection `server` accepts (which must come and complete its
/// handshake), with `stopping` as the door's stop signal; the task ends when that connection
/// does.
pub fn serve_first(
    server: PeerEndpoint,
    stub: Stub,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let conn = server.accept().await.expect("a connection").await.unwrap();
        let peer = peer_node_id(&conn).unwrap();
        let in_flight = Arc::new(InFlight::default());
        door::serve_connection(Arc::new(stub), conn, peer, stopping, in_flight).await;
    })
}

/// Serves `stub` on `conn`, accepted by a test's own loop, until it ends.
pub async fn serve_connection(
    stub: Stub,
    conn: quinn::Connection,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    let peer = peer_node_id(&conn).unwrap();
    let in_flight = Arc::new(InFlight::default());
    door::serve_connection(Arc::new(stub), conn, peer, stopping, in_flight).await;
}
