//! The bare relay: the least code that carries a write the way Ferry does, built from the same
//! libraries, as the yardstick for Ferry's write path.
//!
//! ```text
//! load ──HTTP/1.1──▶ hyper server ──one pooled quinn connection, ──▶ quinn server ──▶ writer
//!                                   new bidi stream per request                      thread
//! ```
//!
//! - the HTTP side is a hyper 1 server (no token check, no routing table, no JSON parsing of
//!   the request): the body is read and handed on. Like Ferry's `axum::serve`, it leaves
//!   `TCP_NODELAY` off on accepted sockets;
//! - the QUIC side uses Ferry's own raw-public-key TLS (`ferry_peer::tls`) with fresh keys, and
//!   Ferry's transport timers (keep-alive 300 ms, idle timeout 5 s), so handshake and crypto
//!   costs are identical; the frame is `[u16 key length][key][value]` one way and
//!   `[u8 code][i64 revision]` back, with no codec;
//! - the owner is one thread with the only SQLite connection (WAL, `synchronous=FULL`). It
//!   takes up to 256 queued writes, inserts each in one transaction, commits once, and only
//!   then answers each: Ferry's group commit, without savepoints, journal, vault or revision
//!   bookkeeping.
//!
//! Where each part runs is the [`Layout`].

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_peer::tls::{self, TlsConfigError, TrustedKeys};
use ferry_ticket::{KeyGenError, NodeId, NodeKey};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rusqlite::{params, Connection};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::cpu::Sides;
use crate::sqlite::open_durable;

/// Ferry's owner queue depth and batch size (`gateway/src/owner/executor.rs`).
const QUEUE_DEPTH: usize = 4096;
const MAX_BATCH: usize = 256;
/// Ferry's transport timers (`TransportTuning::default()`).
const KEEP_ALIVE: Duration = Duration::from_millis(300);
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest value the relay takes; the benchmark sends 64 bytes.
const MAX_VALUE_BYTES: usize = 1 << 20;
const MAX_FRAME_BYTES: usize = 2 + u16::MAX as usize + MAX_VALUE_BYTES;
const ANSWER_BYTES: usize = 9;
/// How long a part may take to start, and a runtime to shut down.
const START_BOUND: Duration = Duration::from_secs(10);
const STOP_BOUND: Duration = Duration::from_secs(2);

/// Where the relay's parts run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// HTTP server, QUIC client and QUIC server each on its own single-threaded tokio runtime
    /// and OS thread (plus the writer thread): the fastest layout in the measured limits.
    Split,
    /// Ferry's shape: two multi-threaded tokio runtimes with the default worker count, one
    /// for the HTTP server and the QUIC client (the calling gateway), one for the QUIC server
    /// (the owner), plus the writer thread.
    PerProcess,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Split => "split",
            Layout::PerProcess => "per-process",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Layout::Split => {
                "HTTP server, QUIC client and QUIC server each on its own single-threaded tokio \
                 runtime and OS thread; one SQLite writer thread"
            }
            Layout::PerProcess => {
                "like Ferry's two processes: one multi-threaded runtime (default workers) for the \
                 HTTP server and QUIC client, another for the QUIC server; one SQLite writer thread"
            }
        }
    }
}

/// Why the relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("cannot start the {what} thread or runtime: {source}")]
    Runtime {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("the {what} did not start within {START_BOUND:?}")]
    NotStarted { what: &'static str },
    #[error("cannot make a node key: {0}")]
    Key(#[from] KeyGenError),
    #[error(transparent)]
    Tls(#[from] TlsConfigError),
    #[error("cannot bind the {what} on loopback: {source}")]
    Bind {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("the relay's QUIC connection failed: {0}")]
    Connect(String),
    #[error("the relay's database: {0}")]
    Store(#[from] rusqlite::Error),
}

/// The running relay. Dropping it stops every part and joins every thread.
#[derive(Debug)]
pub struct BareRelay {
    /// Where to send `PUT /v1/vaults/{vault}/records/{key}`.
    pub http_addr: SocketAddr,
    layout: Layout,
    conn: quinn::Connection,
    endpoints: Vec<quinn::Endpoint>,
    /// Dropped in order: HTTP, client, server (the server's tasks hold the writer's queue).
    hosts: Vec<RuntimeHost>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl BareRelay {
    /// Starts every part, its database in `dir`, and opens the one QUIC connection.
    pub fn start(dir: &Path, layout: Layout) -> Result<Self, RelayError> {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let (server_key, client_key) = (NodeKey::generate()?, NodeKey::generate()?);

        let db = open_durable(&dir.join("bare-relay.db"))?;
        let (jobs, queue) = mpsc::channel(QUEUE_DEPTH);
        let writer = std::thread::Builder::new()
            .name("bare-writer".into())
            .spawn(move || write_loop(db, queue))
            .map_err(|source| RelayError::Runtime {
                what: "writer",
                source,
            })?;

        let mut hosts = Vec::new();
        let (http, client, server) = match layout {
            Layout::Split => {
                let http = RuntimeHost::start("bare-http", Flavor::CurrentThread)?;
                let client = RuntimeHost::start("bare-quic-client", Flavor::CurrentThread)?;
                let server = RuntimeHost::start("bare-quic-server", Flavor::CurrentThread)?;
                let handles = (http.handle(), client.handle(), server.handle());
                hosts.extend([http, client, server]);
                handles
            }
            Layout::PerProcess => {
                let caller = RuntimeHost::start("bare-caller", Flavor::MultiThread)?;
                let owner = RuntimeHost::start("bare-owner", Flavor::MultiThread)?;
                let handles = (caller.handle(), caller.handle(), owner.handle());
                hosts.extend([caller, owner]);
                handles
            }
        };
        // From here on, an early return drops `hosts`, which stops what started.

        let server_endpoint = {
            // quinn spawns its endpoint driver on the runtime it is created in.
            let _runtime = server.enter();
            let trusted = Arc::new(OnlyKey(client_key.node_id()));
            let mut config = quinn::ServerConfig::with_crypto(Arc::new(tls::server_crypto(
                &server_key,
                trusted,
            )?));
            config.transport_config(transport());
            quinn::Endpoint::server(config, loopback).map_err(|source| RelayError::Bind {
                what: "QUIC server",
                source,
            })?
        };
        let server_addr = server_endpoint
            .local_addr()
            .map_err(|source| RelayError::Bind {
                what: "QUIC server",
                source,
            })?;
        server.spawn(serve_quic(server_endpoint.clone(), jobs));

        let client_endpoint = {
            let _runtime = client.enter();
            quinn::Endpoint::client(loopback).map_err(|source| RelayError::Bind {
                what: "QUIC client",
                source,
            })?
        };
        let mut client_config = quinn::ClientConfig::new(Arc::new(tls::client_crypto(
            &client_key,
            server_key.node_id(),
        )?));
        client_config.transport_config(transport());
        let (connected_tx, connected) = std::sync::mpsc::channel();
        let dialer = client_endpoint.clone();
        client.spawn(async move {
            let result = match dialer.connect_with(client_config, server_addr, tls::SERVER_NAME) {
                Ok(connecting) => connecting.await.map_err(|err| err.to_string()),
                Err(err) => Err(err.to_string()),
            };
            let _ = connected_tx.send(result);
        });
        let conn = connected
            .recv_timeout(START_BOUND)
            .map_err(|_| RelayError::NotStarted {
                what: "QUIC connection",
            })?
            .map_err(RelayError::Connect)?;

        let listener = {
            let _runtime = http.enter();
            let bind = |source| RelayError::Bind {
                what: "HTTP server",
                source,
            };
            let std_listener = std::net::TcpListener::bind(loopback).map_err(bind)?;
            std_listener.set_nonblocking(true).map_err(bind)?;
            TcpListener::from_std(std_listener).map_err(bind)?
        };
        let http_addr = listener.local_addr().map_err(|source| RelayError::Bind {
            what: "HTTP server",
            source,
        })?;
        http.spawn(serve_http(listener, conn.clone()));

        Ok(Self {
            http_addr,
            layout,
            conn,
            endpoints: vec![client_endpoint, server_endpoint],
            hosts,
            writer: Some(writer),
        })
    }
}

impl BareRelay {
    /// The threads of each side, by name (Linux cuts names to 15 bytes).
    pub fn cpu_sides(&self) -> Sides {
        match self.layout {
            Layout::Split => Sides::Threads {
                caller: vec!["bare-http", "bare-quic-c"],
                owner: vec!["bare-quic-s", "bare-writer"],
            },
            Layout::PerProcess => Sides::Threads {
                caller: vec!["bare-caller"],
                owner: vec!["bare-owner", "bare-writer"],
            },
        }
    }
}

impl Drop for BareRelay {
    fn drop(&mut self) {
        self.conn.close(0u32.into(), b"done");
        for endpoint in &self.endpoints {
            endpoint.close(0u32.into(), b"done");
        }
        // Stopping the runtimes drops the server's tasks and with them the writer's queue.
        self.hosts.clear();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn transport() -> Arc<quinn::TransportConfig> {
    let mut config = quinn::TransportConfig::default();
    config.keep_alive_interval(Some(KEEP_ALIVE));
    config.max_idle_timeout(quinn::IdleTimeout::try_from(IDLE_TIMEOUT).ok());
    Arc::new(config)
}

/// The server trusts exactly the relay's client key.
#[derive(Debug)]
struct OnlyKey(NodeId);

impl TrustedKeys for OnlyKey {
    fn is_trusted(&self, id: &NodeId) -> bool {
        *id == self.0
    }
}

#[derive(Debug, Clone, Copy)]
enum Flavor {
    CurrentThread,
    MultiThread,
}

/// A tokio runtime on a thread of its own, driven until the host drops.
#[derive(Debug)]
struct RuntimeHost {
    handle: tokio::runtime::Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RuntimeHost {
    fn start(name: &'static str, flavor: Flavor) -> Result<Self, RelayError> {
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut builder = match flavor {
                    Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
                    Flavor::MultiThread => tokio::runtime::Builder::new_multi_thread(),
                };
                let runtime = match builder.thread_name(name).enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(runtime.handle().clone()));
                // A current-thread runtime runs its tasks only inside block_on: this is it.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                runtime.shutdown_timeout(STOP_BOUND);
            })
            .map_err(|source| RelayError::Runtime { what: name, source })?;
        let handle = match ready.recv_timeout(START_BOUND) {
            Ok(Ok(handle)) => handle,
            Ok(Err(source)) => return Err(RelayError::Runtime { what: name, source }),
            Err(_) => return Err(RelayError::NotStarted { what: name }),
        };
        Ok(Self {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    fn handle(&self) -> tokio::runtime::Handle {
        self.handle.clone()
    }
}

impl Drop for RuntimeHost {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// ---- the owner: QUIC server and writer thread ----

/// One write waiting for the writer thread; the answer is the new row's id.
#[derive(Debug)]
struct Job {
    key: String,
    value: Bytes,
    reply: oneshot::Sender<Option<i64>>,
}

/// Group commit: up to [`MAX_BATCH`] queued writes per transaction, answers after the commit.
fn write_loop(mut db: Connection, mut queue: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let revisions = commit_batch(&mut db, &batch).unwrap_or_else(|_| vec![None; batch.len()]);
        for (job, revision) in batch.drain(..).zip(revisions) {
            let _ = job.reply.send(revision);
        }
    }
}

fn commit_batch(db: &mut Connection, batch: &[Job]) -> rusqlite::Result<Vec<Option<i64>>> {
    let tx = db.transaction()?;
    let mut revisions = Vec::with_capacity(batch.len());
    {
        let mut insert = tx.prepare_cached("INSERT INTO records (key, value) VALUES (?1, ?2)")?;
        for job in batch {
            // A failed insert undoes only itself; the rest of the batch goes on.
            revisions.push(match insert.execute(params![job.key, &job.value[..]]) {
                Ok(_) => Some(tx.last_insert_rowid()),
                Err(_) => None,
            });
        }
    }
    tx.commit()?;
    Ok(revisions)
}

async fn serve_quic(endpoint: quinn::Endpoint, jobs: mpsc::Sender<Job>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                connections.spawn(serve_connection(incoming, jobs.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    while connections.join_next().await.is_some() {}
}

async fn serve_connection(incoming: quinn::Incoming, jobs: mpsc::Sender<Job>) {
    let Ok(conn) = incoming.await else { return };
    let mut streams = JoinSet::new();
    loop {
        tokio::select! {
            accepted = conn.accept_bi() => {
                let Ok((send, recv)) = accepted else { break };
                streams.spawn(serve_stream(send, recv, jobs.clone()));
            }
            Some(_) = streams.join_next(), if !streams.is_empty() => {}
        }
    }
    while streams.join_next().await.is_some() {}
}

async fn serve_stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    jobs: mpsc::Sender<Job>,
) {
    let answer = match recv.read_to_end(MAX_FRAME_BYTES).await {
        Err(_) => return,
        Ok(frame) => match decode_request(&frame) {
            None => StoreAnswer::Malformed,
            Some((key, value)) => {
                submit(&jobs, key.to_string(), Bytes::copy_from_slice(value)).await
            }
        },
    };
    if send.write_all(&encode_answer(answer)).await.is_ok() {
        let _ = send.finish();
    }
}

async fn submit(jobs: &mpsc::Sender<Job>, key: String, value: Bytes) -> StoreAnswer {
    let (reply, answered) = oneshot::channel();
    if jobs.try_send(Job { key, value, reply }).is_err() {
        return StoreAnswer::Busy;
    }
    match answered.await {
        Ok(Some(revision)) => StoreAnswer::Written(revision),
        _ => StoreAnswer::Failed,
    }
}

// ---- the caller: HTTP server and QUIC client ----

async fn serve_http(listener: TcpListener, conn: quinn::Connection) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { break };
                let conn = conn.clone();
                connections.spawn(async move {
                    let service = service_fn(move |request| answer_http(request, conn.clone()));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    while connections.join_next().await.is_some() {}
}

async fn answer_http(
    request: Request<Incoming>,
    conn: quinn::Connection,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, body) = match relay_put(request, &conn).await {
        Ok(revision) => (StatusCode::OK, format!("{{\"revision\":{revision}}}")),
        Err((status, detail)) => (status, format!("{{\"error\":{detail:?}}}")),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

async fn relay_put(
    request: Request<Incoming>,
    conn: &quinn::Connection,
) -> Result<i64, (StatusCode, String)> {
    if request.method() != Method::PUT {
        return Err((StatusCode::METHOD_NOT_ALLOWED, "only PUT".into()));
    }
    let key = record_key(request.uri().path())
        .ok_or((StatusCode::NOT_FOUND, "not a record path".into()))?
        .to_string();
    let value = Limited::new(request.into_body(), MAX_VALUE_BYTES)
        .collect()
        .await
        .map_err(|err| (StatusCode::BAD_REQUEST, err.to_string()))?
        .to_bytes();
    let frame = encode_request(&key, &value)
        .ok_or((StatusCode::BAD_REQUEST, "key too long".to_string()))?;
    let broken = |err: String| (StatusCode::BAD_GATEWAY, err);
    let (mut send, mut recv) = conn
        .open_bi()
        .await
        .map_err(|err| (StatusCode::SERVICE_UNAVAILABLE, err.to_string()))?;
    send.write_all(&frame)
        .await
        .map_err(|err| broken(err.to_string()))?;
    let _ = send.finish();
    let answer = recv
        .read_to_end(ANSWER_BYTES)
        .await
        .map_err(|err| broken(err.to_string()))?;
    match decode_answer(&answer) {
        Some(StoreAnswer::Written(revision)) => Ok(revision),
        Some(StoreAnswer::Busy) => Err((StatusCode::SERVICE_UNAVAILABLE, "busy".into())),
        Some(StoreAnswer::Failed) => Err((StatusCode::SERVICE_UNAVAILABLE, "not written".into())),
        Some(StoreAnswer::Malformed) => Err((StatusCode::BAD_REQUEST, "malformed".into())),
        None => Err(broken("unreadable answer".into())),
    }
}

/// The key of `/v1/vaults/{vault}/records/{key}`.
fn record_key(path: &str) -> Option<&str> {
    let (_vault, key) = path.strip_prefix("/v1/vaults/")?.split_once("/records/")?;
    (!key.is_empty()).then_some(key)
}

// ---- the relay's frames ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreAnswer {
    Written(i64),
    Busy,
    Failed,
    Malformed,
}

fn encode_request(key: &str, value: &[u8]) -> Option<Vec<u8>> {
    let len = u16::try_from(key.len()).ok()?;
    let mut frame = Vec::with_capacity(2 + key.len() + value.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(key.as_bytes());
    frame.extend_from_slice(value);
    Some(frame)
}

fn decode_request(frame: &[u8]) -> Option<(&str, &[u8])> {
    let (len, rest) = frame.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_be_bytes(*len));
    let key = rest.get(..len)?;
    let value = rest.get(len..)?;
    Some((std::str::from_utf8(key).ok()?, value))
}

fn encode_answer(answer: StoreAnswer) -> [u8; ANSWER_BYTES] {
    let (code, revision) = match answer {
        StoreAnswer::Written(revision) => (0, revision),
        StoreAnswer::Busy => (1, 0),
        StoreAnswer::Failed => (2, 0),
        StoreAnswer::Malformed => (3, 0),
    };
    let mut bytes = [0u8; ANSWER_BYTES];
    bytes[0] = code;
    bytes[1..].copy_from_slice(&i64::to_be_bytes(revision));
    bytes
}

fn decode_answer(bytes: &[u8]) -> Option<StoreAnswer> {
    let (code, revision) = bytes.split_first()?;
    let revision = i64::from_be_bytes(revision.try_into().ok()?);
    match code {
        0 => Some(StoreAnswer::Written(revision)),
        1 => Some(StoreAnswer::Busy),
        2 => Some(StoreAnswer::Failed),
        3 => Some(StoreAnswer::Malformed),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_frames_round_trip_and_refuse_short_input() {
        let frame = encode_request("k-1", b"value").unwrap();
        assert_eq!(decode_request(&frame), Some(("k-1", &b"value"[..])));
        assert_eq!(decode_request(&frame[..3]), None);
        assert_eq!(decode_request(&[0]), None);
        assert!(encode_request(&"k".repeat(70_000), b"").is_none());
    }

    #[test]
    fn answers_round_trip_and_refuse_other_shapes() {
        for answer in [
            StoreAnswer::Written(42),
            StoreAnswer::Busy,
            StoreAnswer::Failed,
            StoreAnswer::Malformed,
        ] {
            assert_eq!(decode_answer(&encode_answer(answer)), Some(answer));
        }
        assert_eq!(decode_answer(&[0; 4]), None);
        assert_eq!(decode_answer(&[9; ANSWER_BYTES]), None);
    }

    #[test]
    fn record_keys_come_from_the_record_path() {
        assert_eq!(record_key("/v1/vaults/bench/records/k-1"), Some("k-1"));
        assert_eq!(record_key("/v1/vaults/bench/records/"), None);
        assert_eq!(record_key("/v1/status"), None);
    }

    #[test]
    fn a_write_goes_through_every_part_and_is_durable() {
        let dir = tempfile::tempdir().unwrap();
        for layout in [Layout::Split, Layout::PerProcess] {
            let sub = dir.path().join(layout.name());
            std::fs::create_dir_all(&sub).unwrap();
            let relay = BareRelay::start(&sub, layout).unwrap();
            let target = crate::load::Target {
                api: relay.http_addr,
                token: "t".into(),
                app: "bench".into(),
                vault: "bench".into(),
            };
            let keys = crate::load::Keys::new("t-");
            let sample = crate::load::sequential(&target, &keys, 2, 5, START_BOUND).unwrap();
            assert_eq!((sample.ok(), sample.failures()), (5, 0), "{sample:?}");
            drop(relay);
            let db = open_durable(&sub.join("bare-relay.db")).unwrap();
            let rows: i64 = db
                .query_row("SELECT count(*) FROM records", [], |row| row.get(0))
                .unwrap();
            assert_eq!(rows, 7);
        }
    }
}
