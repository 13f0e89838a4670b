//! The QUIC endpoint: bind, dial a pinned peer under a connect timeout, accept, and move one
//! frame each way on a bidirectional stream.
//!
//! One UDP socket serves both directions. Every connection is mutually authenticated by node
//! key ([`crate::tls`]). No QUIC keep-alives by default: the route's heartbeats prove a
//! connection alive (`crate::pool`) and keep it open, at a pace that follows use, where
//! keep-alives would cost every idle peer packets several times a second.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferry_ticket::{NodeId, NodeKey};
use futures_util::FutureExt;
use quinn::{ConnectionError, RecvStream, SendStream};

use crate::codec::{self, DecodeError};
use crate::frames;
use crate::tls::{self, TlsConfigError, TrustedKeys};
use crate::udp_catcher::{CatcherWatch, CatchingUdpSocket};
use crate::udp_io::UdpPath;
use crate::wire::{
    version_of_alpn, ProtocolFailure, ProtocolRange, RequestFrame, Response, ResponseFrame,
    ALPN_VERSIONS, CLOSE_NO_COMMON_VERSION,
};

/// Application close code: the peer is stopping on purpose ("going away"); mark its routes down
/// at once rather than waiting for an idle timeout.
pub const CLOSE_GOING_AWAY: u32 = 0x1;
/// Application close code: this peer is no longer trusted.
pub const CLOSE_UNTRUSTED: u32 = 0x2;
/// Stream reset code: the request frame was malformed; nothing ran.
pub const RESET_MALFORMED: u32 = 0x10;
/// Stream reset code: the owner cannot say whether the write ran (its executor lost the
/// answer); the caller settles by request id, as after any break.
pub const RESET_UNANSWERED: u32 = 0x11;

/// Timers of every connection.
#[derive(Debug, Clone, Copy)]
pub struct TransportTuning {
    /// How long a silent connection lives before QUIC declares it dead.
    pub idle_timeout: Duration,
    /// The seed of QUIC's own randomness (connection ids, skipped packet numbers, greased
    /// transport parameters, whose random length changes packet sizes). `None`, drawn from the
    /// system, in production; a simulation sets it so a seed replays the same packets.
    pub rng_seed: Option<[u8; 32]>,
    /// The protocol versions offered and accepted: [`ProtocolRange::THIS_BUILD`] in
    /// production; tests narrow it to play an older or newer gateway.
    pub protocols: ProtocolRange,
}

impl Default for TransportTuning {
    fn default() -> Self {
        Self {
            // Heartbeats, not this, tell a dead peer: this only closes a connection nothing
            // uses any more.
            idle_timeout: ferry_core::liveness::IDLE_TIMEOUT,
            rng_seed: None,
            protocols: ProtocolRange::THIS_BUILD,
        }
    }
}

/// The RTT assumed of a path before it is measured.
const INITIAL_RTT: Duration = Duration::from_millis(100);
/// Concurrent bidirectional streams a peer may open on one connection.
pub const MAX_STREAMS: u32 = 1024;
/// Bytes a peer may have in flight to this side on one connection, all streams together.
const RECEIVE_WINDOW: u32 = 64 * 1024 * 1024;

impl TransportTuning {
    fn config(&self) -> Arc<quinn::TransportConfig> {
        let mut config = quinn::TransportConfig::default();
        // An idle timeout this small always fits a VarInt.
        config.max_idle_timeout(quinn::IdleTimeout::try_from(self.idle_timeout).ok());
        // quinn assumes 333 ms before it has measured a path, so a lost first packet is sent
        // again only after about a second: a route re-probed as a cable is plugged back in
        // would wait that long. 100 ms still covers a tailnet across a continent; a path
        // slower than that costs a spare Initial packet, nothing more.
        config.initial_rtt(INITIAL_RTT);
        // Enough streams that a caller's writes never queue for stream credit on its side
        // (where a wait would end as "nothing sent" or, late, as unknown): an overloaded owner
        // answers `busy` at once instead (SPEC 7 rule 7). What a peer may make this side buffer
        // stays bounded by the connection's receive window.
        config.max_concurrent_bidi_streams(quinn::VarInt::from_u32(MAX_STREAMS));
        config.receive_window(quinn::VarInt::from_u32(RECEIVE_WINDOW));
        Arc::new(config)
    }
}

/// The receive buffer asked of the kernel for the peer socket. The default (208 KiB on most
/// Linux systems: 92 datagrams of 1,200 bytes) holds a few milliseconds of a busy owner's
/// traffic: a gateway whose runtime falls behind for a moment drops the rest, and QUIC's
/// loss recovery then backs off its sends until a waiting call hears nothing for three
/// heartbeat intervals and gives a live connection up. Linux grants at most
/// `net.core.rmem_max` and then doubles the grant for its own bookkeeping, so on a kernel that
/// allows it this holds 8 MiB as Linux counts it (3,640 datagrams of 1,200 bytes).
pub const RECEIVE_BUFFER: usize = 4 * 1024 * 1024;

/// What the peer socket's receive buffer was asked for and given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveBuffer {
    pub asked: usize,
    /// What the kernel reports it holds: on Linux, twice what it granted (it counts its own
    /// bookkeeping), the grant being capped at `net.core.rmem_max`.
    pub granted: usize,
}

impl ReceiveBuffer {
    /// What the kernel reports when it grants the whole ask: Linux doubles it.
    pub fn full(&self) -> usize {
        if cfg!(target_os = "linux") {
            self.asked.saturating_mul(2)
        } else {
            self.asked
        }
    }

    /// The kernel holds less than was asked (on Linux, its `net.core.rmem_max` is lower).
    pub fn capped(&self) -> bool {
        self.granted < self.full()
    }
}

/// Asks for [`RECEIVE_BUFFER`] on `socket` and says what the kernel gave. A kernel that grants
/// less is not an error (the gateway works, and drops more datagrams when it falls behind):
/// the daemon warns once, and `ferry doctor` shows it.
fn grow_receive_buffer(socket: &std::net::UdpSocket) -> Option<ReceiveBuffer> {
    use quinn::udp::{UdpSockRef, UdpSocketState};
    let state = match UdpSocketState::new(UdpSockRef::from(socket)) {
        Ok(state) => state,
        Err(err) => {
            tracing::debug!(%err, "could not look at the peer socket's receive buffer");
            return None;
        }
    };
    // A kernel that allows less refuses (the BSDs) or caps (Linux): either way what it holds
    // is read back below.
    if let Err(err) = state.set_recv_buffer_size(UdpSockRef::from(socket), RECEIVE_BUFFER) {
        tracing::debug!(%err, asked = RECEIVE_BUFFER, "could not grow the peer socket's receive buffer");
    }
    let granted = state.recv_buffer_size(UdpSockRef::from(socket)).ok()?;
    tracing::debug!(
        asked = RECEIVE_BUFFER,
        granted,
        "peer socket receive buffer"
    );
    Some(ReceiveBuffer {
        asked: RECEIVE_BUFFER,
        granted,
    })
}

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(
        "cannot listen for peers on UDP {addr}: {source}; choose another address with --listen"
    )]
    Socket {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] TlsConfigError),
}

/// Why a dial did not produce a connection. In every case nothing was sent on it.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("no answer from {addr} within {timeout_ms} ms")]
    TimedOut { addr: SocketAddr, timeout_ms: u64 },
    #[error("the gateway at {addr} is not the node trusted under that name (its key differs)")]
    KeyMismatch { addr: SocketAddr },
    #[error("the gateway at {addr} refused the connection ({detail}); it may not trust this node")]
    Refused { addr: SocketAddr, detail: String },
    #[error("cannot connect to {addr}: {detail}")]
    Failed { addr: SocketAddr, detail: String },
    /// The two gateways speak no protocol version in common (SPEC 11): the older one must be
    /// upgraded. `theirs` is what the peer said it speaks, when it could say.
    #[error("{}", no_common_version(*addr, *ours, theirs.as_ref()))]
    NoCommonVersion {
        addr: SocketAddr,
        ours: ProtocolRange,
        theirs: Option<(ProtocolRange, String)>,
    },
}

fn no_common_version(
    addr: SocketAddr,
    ours: ProtocolRange,
    theirs: Option<&(ProtocolRange, String)>,
) -> String {
    let upgrade = |their_newest: u16| {
        if their_newest < ours.oldest {
            "upgrade the gateway there"
        } else {
            "upgrade this gateway"
        }
    };
    match theirs {
        Some((range, release)) => format!(
            "no protocol version in common with the gateway at {addr}: it speaks {range} \
             (release {release}), this one speaks {ours}; {}",
            upgrade(range.newest)
        ),
        None => format!(
            "no protocol version in common with the gateway at {addr}: it speaks none of \
             {ours} and does not say which it speaks (releases before protocol 2 speak only \
             {}); {}",
            ProtocolRange::FIRST_RELEASES,
            upgrade(ProtocolRange::FIRST_RELEASES.newest)
        ),
    }
}

/// The endpoint's settings. The stateless-reset key is derived from the node key, so a gateway
/// that restarts on the same address answers packets of its previous life with resets its
/// peers recognise: their connections to the old process end at once (SPEC 6 rule 7) instead
/// of hanging until an idle timeout. A random key per process, quinn's default, would make
/// those resets unrecognisable.
fn endpoint_config(key: &NodeKey, tuning: &TransportTuning) -> quinn::EndpointConfig {
    let derive = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key.secret_bytes());
    let reset_secret = ring::hmac::sign(&derive, b"ferry/1 stateless reset key");
    let reset_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset_secret.as_ref());
    let mut config = quinn::EndpointConfig::new(Arc::new(reset_key));
    config.rng_seed(tuning.rng_seed);
    config
}

/// The server side's settings: raw-key TLS asking `trusted`, Ferry's timers, and a bound on
/// handshakes a stranger can start (cheap to refuse, but not free).
fn server_config(
    key: &NodeKey,
    trusted: Arc<dyn TrustedKeys>,
    tuning: &TransportTuning,
) -> Result<quinn::ServerConfig, BindError> {
    let crypto = tls::server_crypto(key, trusted, tuning.protocols.alpn_ids())?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(tuning.config());
    server.max_incoming(256);
    Ok(server)
}

/// A Ferry peer endpoint.
#[derive(Debug, Clone)]
pub struct PeerEndpoint {
    endpoint: quinn::Endpoint,
    key: NodeKey,
    tuning: TransportTuning,
    receive_buffer: Option<ReceiveBuffer>,
    catcher: Option<CatcherWatch>,
    /// The path its datagrams take, when this endpoint bound its own socket.
    udp_path: Option<UdpPath>,
}

impl PeerEndpoint {
    /// Binds the UDP socket and starts accepting connections from trusted keys. The socket has a
    /// catcher that reads it while this gateway is behind ([`crate::udp_catcher`]).
    pub fn bind(
        addr: SocketAddr,
        key: NodeKey,
        trusted: Arc<dyn TrustedKeys>,
        tuning: TransportTuning,
    ) -> Result<Self, BindError> {
        let socket =
            std::net::UdpSocket::bind(addr).map_err(|source| BindError::Socket { addr, source })?;
        let receive_buffer = grow_receive_buffer(&socket);
        let runtime = quinn::default_runtime().ok_or_else(|| BindError::Socket {
            addr,
            source: std::io::Error::other("no async runtime is running"),
        })?;
        let (socket, catcher, udp_path) =
            CatchingUdpSocket::new(socket, crate::udp_io::plain_forced())
                .map_err(|source| BindError::Socket { addr, source })?;
        let mut endpoint = Self::with_socket(socket, runtime, key, trusted, tuning)?;
        endpoint.receive_buffer = receive_buffer;
        endpoint.catcher = Some(catcher);
        endpoint.udp_path = Some(udp_path);
        Ok(endpoint)
    }

    /// An endpoint over a socket and runtime of the caller's (quinn's own seams): a simulated
    /// network passes a socket over its datagrams and a runtime on its virtual clock.
    pub fn with_socket(
        socket: Arc<dyn quinn::AsyncUdpSocket>,
        runtime: Arc<dyn quinn::Runtime>,
        key: NodeKey,
        trusted: Arc<dyn TrustedKeys>,
        tuning: TransportTuning,
    ) -> Result<Self, BindError> {
        let server = server_config(&key, trusted, &tuning)?;
        let addr = socket.local_addr().map_err(|source| BindError::Socket {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            source,
        })?;
        let endpoint = quinn::Endpoint::new_with_abstract_socket(
            endpoint_config(&key, &tuning),
            Some(server),
            socket,
            runtime,
        )
        .map_err(|source| BindError::Socket { addr, source })?;
        Ok(Self {
            endpoint,
            key,
            tuning,
            receive_buffer: None,
            catcher: None,
            udp_path: None,
        })
    }

    /// The path the peer socket's datagrams take ([`crate::udp_io`]), when this endpoint bound
    /// its own socket.
    pub fn udp_path(&self) -> Option<&UdpPath> {
        self.udp_path.as_ref()
    }

    /// The peer socket's receive buffer, when this endpoint bound its own socket.
    pub fn receive_buffer(&self) -> Option<ReceiveBuffer> {
        self.receive_buffer
    }

    /// Resolves once this endpoint is keeping up with its socket
    /// ([`CatcherWatch::keeping_up`]); at once on a simulated socket.
    pub async fn keeping_up(&self) {
        if let Some(catcher) = &self.catcher {
            catcher.keeping_up().await;
        }
    }

    /// Whether this endpoint is behind its socket now ([`CatcherWatch::behind`]); never on a
    /// simulated socket.
    pub fn behind(&self) -> bool {
        self.catcher.as_ref().is_some_and(CatcherWatch::behind)
    }

    /// The socket's catcher, when this endpoint bound its own socket.
    pub fn catcher(&self) -> Option<CatcherWatch> {
        self.catcher.clone()
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    pub fn node_id(&self) -> NodeId {
        self.key.node_id()
    }

    /// The protocol versions this endpoint offers and accepts.
    pub fn protocols(&self) -> ProtocolRange {
        self.tuning.protocols
    }

    /// The next incoming connection attempt; `None` once the endpoint is closed.
    pub async fn accept(&self) -> Option<quinn::Incoming> {
        self.endpoint.accept().await
    }

    /// Refuses new connections from now on (existing ones continue). Used at the start of a stop.
    pub fn refuse_new_connections(&self) {
        self.endpoint.set_server_config(None);
    }

    /// Closes every connection with "going away" and waits briefly for the close to be sent.
    pub async fn close_going_away(&self) {
        self.endpoint
            .close(quinn::VarInt::from_u32(CLOSE_GOING_AWAY), b"going away");
        let _ = tokio::time::timeout(Duration::from_millis(500), self.endpoint.wait_idle()).await;
    }

    /// Opens a connection to `addr`, accepting only the node `expected`, within `timeout`.
    /// Never uses 0-RTT.
    pub async fn dial(
        &self,
        addr: SocketAddr,
        expected: NodeId,
        timeout: Duration,
    ) -> Result<quinn::Connection, DialError> {
        let crypto = tls::client_crypto(&self.key, expected, self.tuning.protocols.alpn_ids())
            .map_err(|err| DialError::Failed {
                addr,
                detail: err.to_string(),
            })?;
        let mut client = quinn::ClientConfig::new(Arc::new(crypto));
        client.transport_config(self.tuning.config());
        let connecting = self
            .endpoint
            .connect_with(client, addr, tls::SERVER_NAME)
            .map_err(|err| DialError::Failed {
                addr,
                detail: err.to_string(),
            })?;
        let started = crate::clock::now();
        let conn = match tokio::time::timeout(timeout, connecting).await {
            Err(_) => {
                return Err(DialError::TimedOut {
                    addr,
                    timeout_ms: timeout.as_millis() as u64,
                })
            }
            Ok(Ok(conn)) => conn,
            Ok(Err(err)) => return Err(classify_dial_failure(addr, self.tuning.protocols, err)),
        };
        if protocol_of(&conn).is_some() {
            return Ok(conn);
        }
        // The pair met on `ferry/versions`: the other side states its range on a stream and
        // closes. Nothing is sent from this side.
        let ours = self.tuning.protocols;
        let left = timeout.saturating_sub(crate::clock::since(started));
        let stated = async {
            let mut recv = conn.accept_uni().await.ok()?;
            let said = recv.read_to_end(STATEMENT_MAX).await.ok()?;
            ProtocolRange::parse_statement(&said)
        };
        let theirs = match tokio::time::timeout(left, stated).await {
            Ok(Some(theirs)) => Some(theirs),
            // The close carries it too, unless it went out before the handshake was
            // confirmed: QUIC strips an application close's reason there (RFC 9000 10.2.3).
            _ => match conn.close_reason() {
                Some(ConnectionError::ApplicationClosed(close))
                    if close.error_code.into_inner() == u64::from(CLOSE_NO_COMMON_VERSION) =>
                {
                    ProtocolRange::parse_statement(&close.reason)
                }
                _ => None,
            },
        };
        conn.close(quinn::VarInt::from_u32(CLOSE_NO_COMMON_VERSION), b"");
        Err(DialError::NoCommonVersion { addr, ours, theirs })
    }
}

/// The longest statement of versions read ([`ProtocolRange::statement`] is a few dozen bytes).
const STATEMENT_MAX: usize = 256;
/// How long an accepting side keeps a `ferry/versions` connection open for its statement to
/// be read before it closes it anyway.
const STATEMENT_WAIT: Duration = Duration::from_secs(2);

/// The protocol version a connection agreed on in its handshake; `None` for a connection on
/// [`ALPN_VERSIONS`] (no version in common), which carries no frames.
pub fn protocol_of(conn: &quinn::Connection) -> Option<u16> {
    agreed_alpn(conn).as_deref().and_then(version_of_alpn)
}

/// The ALPN id the handshake agreed on.
fn agreed_alpn(conn: &quinn::Connection) -> Option<Vec<u8>> {
    conn.handshake_data()?
        .downcast::<quinn::crypto::rustls::HandshakeData>()
        .ok()?
        .protocol
}

/// On the accepting side: a connection that met on [`ALPN_VERSIONS`] is told this side's range
/// (on a stream, and in the close) and closed once the other side has read it (or after
/// [`STATEMENT_WAIT`]); `true` is returned and the caller drops it. `false`: the connection has a
/// version and is served.
pub async fn refuse_without_common_version(conn: &quinn::Connection, ours: ProtocolRange) -> bool {
    if agreed_alpn(conn).as_deref() != Some(ALPN_VERSIONS) {
        return false;
    }
    let statement = ours.statement();
    let stated = async {
        if let Ok(mut send) = conn.open_uni().await {
            if send.write_all(statement.as_bytes()).await.is_ok() {
                let _ = send.finish();
                // The dialing side closes once it has read it.
                conn.closed().await;
            }
        }
    };
    let _ = tokio::time::timeout(STATEMENT_WAIT, stated).await;
    conn.close(
        quinn::VarInt::from_u32(CLOSE_NO_COMMON_VERSION),
        statement.as_bytes(),
    );
    true
}

/// TLS alert `no_application_protocol` (120), as QUIC carries it: the crypto error range.
const NO_APPLICATION_PROTOCOL: u64 = 0x100 + 120;

/// A local TLS failure during the handshake is our verifier refusing the server's key; a
/// close from the other side is the server refusing us, or (alert 120) a server offering none
/// of our protocol versions and not the version exchange either: a release before protocol 2.
fn classify_dial_failure(addr: SocketAddr, ours: ProtocolRange, err: ConnectionError) -> DialError {
    match err {
        ConnectionError::ConnectionClosed(ref close)
            if u64::from(close.error_code) == NO_APPLICATION_PROTOCOL =>
        {
            DialError::NoCommonVersion {
                addr,
                ours,
                theirs: None,
            }
        }
        // TLS alerts travel as QUIC's "crypto error" codes 0x100-0x1ff.
        ConnectionError::TransportError(ref transport)
            if (0x100..0x200).contains(&u64::from(transport.code)) =>
        {
            DialError::KeyMismatch { addr }
        }
        ConnectionError::ConnectionClosed(close) => DialError::Refused {
            addr,
            detail: close.to_string(),
        },
        ConnectionError::TimedOut => DialError::TimedOut {
            addr,
            timeout_ms: 0,
        },
        other => DialError::Failed {
            addr,
            detail: other.to_string(),
        },
    }
}

/// Why a frame could not be read from a stream.
#[derive(Debug, thiserror::Error)]
pub enum ReadFrameError {
    /// The stream or connection ended or broke before a whole frame arrived.
    #[error("the stream broke before a whole frame arrived: {source}")]
    Broken { source: quinn::ReadExactError },
    /// The bytes that arrived are not a frame this gateway accepts.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The frame's header names another protocol version than the connection agreed on.
    #[error("a frame of protocol {version} on a connection that agreed on protocol {agreed}")]
    UnsupportedVersion { version: u16, agreed: u16 },
}

/// A frame's buffer starts at most this large and grows as its bytes arrive.
const FIRST_BUFFER: usize = 64 * 1024;

/// Reads one frame's bytes after its length prefix: the prefix is checked against the cap
/// before the body is read, and the buffer grows with the bytes that actually arrive, so a peer
/// that announces 16 MiB frames on many streams and sends little costs little. Its version
/// must be `agreed`, the connection's.
async fn read_raw(recv: &mut RecvStream, agreed: u16) -> Result<Vec<u8>, ReadFrameError> {
    let mut prefix = [0u8; 4];
    recv.read_exact(&mut prefix)
        .await
        .map_err(|source| ReadFrameError::Broken { source })?;
    let len = codec::frame_len(prefix)?;
    let mut rest = Vec::with_capacity(len.min(FIRST_BUFFER));
    while rest.len() < len {
        match recv.read_chunk(len - rest.len(), true).await {
            Ok(Some(chunk)) => rest.extend_from_slice(&chunk.bytes),
            Ok(None) => {
                return Err(ReadFrameError::Decode(DecodeError::Truncated {
                    expected: len,
                    got: rest.len(),
                }))
            }
            Err(err) => {
                return Err(ReadFrameError::Broken {
                    source: quinn::ReadExactError::ReadError(err),
                })
            }
        }
    }
    let (version, _) = codec::split_version(&rest)?;
    if version != agreed {
        return Err(ReadFrameError::UnsupportedVersion { version, agreed });
    }
    Ok(rest)
}

/// What a reader does with its stream once the frame is read: a frame is the whole stream, and
/// its writer finishes the stream with the frame's last bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamEnd {
    /// Read the stream's end if it has already arrived (almost always), without waiting for
    /// it. A stream dropped before its end was read sends the writer a STOP_SENDING (quinn
    /// cannot tell an end that arrived from one still awaited): a frame to send, process and
    /// acknowledge, often a packet of its own, on every call. Bytes after the frame are left
    /// unread.
    Take,
    /// Stop the stream: tells the writer at once that its frame arrived. For the answers the
    /// door holds until the caller has them ([`held_until_acknowledged`]); the acknowledgement
    /// alone says so too, but later (QUIC may delay it), keeping the door's stream open the
    /// while.
    Stop,
}

impl StreamEnd {
    fn apply(self, recv: &mut RecvStream) {
        match self {
            StreamEnd::Take => {
                let _ = recv.read_chunk(1, true).now_or_never();
            }
            StreamEnd::Stop => {
                let _ = recv.stop(quinn::VarInt::from_u32(0));
            }
        }
    }
}

/// The answers a caller cannot do without: a write's, and "going away" (a stopping gateway's
/// answer to anything, writes among them). The door holds their streams until the caller has
/// them, since a stopping gateway closes its connections once no stream is being served and a
/// close drops stream data not yet sent; the caller stops them as soon as it has them.
pub(crate) fn held_until_acknowledged(response: &Response) -> bool {
    matches!(
        response,
        Response::Write(_) | Response::Failed(ProtocolFailure::GoingAway)
    )
}

/// Reads one request frame in protocol `agreed`.
pub async fn read_request(
    recv: &mut RecvStream,
    agreed: u16,
) -> Result<RequestFrame, ReadFrameError> {
    let raw = read_raw(recv, agreed).await?;
    StreamEnd::Take.apply(recv);
    let (version, body) = codec::split_version(&raw)?;
    Ok(frames::decode_request(version, body)?)
}

/// Reads one answer frame in protocol `agreed`; an answer the door holds until the caller has
/// it (a write's, or "going away") is stopped, any other's stream end taken.
pub async fn read_response(
    recv: &mut RecvStream,
    agreed: u16,
) -> Result<ResponseFrame, ReadFrameError> {
    let raw = read_raw(recv, agreed).await?;
    let (version, body) = codec::split_version(&raw)?;
    let decoded = frames::decode_response(version, body);
    let held = decoded
        .as_ref()
        .is_ok_and(|frame| held_until_acknowledged(&frame.body));
    if held {
        StreamEnd::Stop.apply(recv);
    } else {
        StreamEnd::Take.apply(recv);
    }
    Ok(decoded?)
}

/// Writes a whole frame and finishes the stream.
pub async fn write_frame(send: &mut SendStream, frame: &[u8]) -> Result<(), quinn::WriteError> {
    send.write_all(frame).await?;
    // finish() only fails if the stream was already finished or reset; either way the peer has
    // what it will get.
    let _ = send.finish();
    Ok(())
}
