//! The bare relay: the least code that carries a write or a read the way Ferry does, built from
//! the same libraries, as the yardstick for Ferry's write and read paths.
//!
//! ```text
//! load ──HTTP/1.1──▶ hyper server ──one pooled quinn connection, ──▶ quinn server ──▶ writer thread
//!                                   new bidi stream per request                   or a map in memory
//! ```
//!
//! - the HTTP side is a hyper 1 server (no token check, no routing table, no JSON parsing of
//!   the request): the body is read and handed on. Like Ferry's `axum::serve`, it leaves
//!   `TCP_NODELAY` off on accepted sockets (`caller`);
//! - the QUIC side uses Ferry's own raw-public-key TLS (`ferry_peer::tls`) with fresh keys, and
//!   Ferry's transport timers (no keep-alives, idle timeout 45 s), so handshake and crypto
//!   costs are identical; the frames have no codec (`frames`);
//! - for writes, the owner is one thread with the only SQLite connection (WAL,
//!   `synchronous=FULL`). It takes up to 256 queued writes, inserts each in one transaction,
//!   commits once, and only then answers each: Ferry's group commit, without savepoints,
//!   journal, vault or revision bookkeeping. For reads, the owner answers from a map in memory
//!   (`owner`).
//!
//! [`BareHttp`] is the cache-hit yardstick: the same HTTP server answering from memory, with no
//! QUIC at all. Where each part runs is the [`Layout`].

mod caller;
mod frames;
mod owner;

pub use owner::Records;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferry_peer::tls::{self, TlsConfigError, TrustedKeys};
use ferry_ticket::{KeyGenError, NodeId, NodeKey};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::cpu::Sides;
use crate::sqlite::open_durable;
use caller::Handler;
use owner::{Backend, QUEUE_DEPTH};

/// Ferry's transport timers (`TransportTuning::default()`): no keep-alives, this idle timeout.
const IDLE_TIMEOUT: Duration = ferry_peer::liveness::IDLE_TIMEOUT;
/// How long a part may take to start, and a runtime to shut down.
const START_BOUND: Duration = Duration::from_secs(10);
const STOP_BOUND: Duration = Duration::from_secs(2);

/// Where the relay's parts run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// HTTP server, QUIC client and QUIC server each on its own single-threaded tokio runtime
    /// and OS thread (plus the writer thread): the fastest layout in the measured limits.
    Split,
    /// Two processes' shape: two multi-threaded tokio runtimes with the default worker count,
    /// one for the HTTP server and the QUIC client (the calling gateway), one for the QUIC
    /// server (the owner), plus the writer thread. Ferry ran so until its runtime became one
    /// thread by default (`ferry serve --runtime-threads`).
    PerProcess,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Split => "split",
            Layout::PerProcess => "per-process",
        }
    }

    /// The layout of the write relay.
    pub fn describe(self) -> &'static str {
        match self {
            Layout::Split => {
                "HTTP server, QUIC client and QUIC server each on its own single-threaded tokio \
                 runtime and OS thread; one SQLite writer thread"
            }
            Layout::PerProcess => {
                "two processes' shape: one multi-threaded runtime (default workers) for the HTTP \
                 server and QUIC client, another for the QUIC server; one SQLite writer thread"
            }
        }
    }

    /// The layout of the read relay and of the HTTP server answering from memory.
    pub fn describe_reads(self) -> &'static str {
        match self {
            Layout::Split => {
                "relay: HTTP server, QUIC client and QUIC server each on its own single-threaded \
                 tokio runtime and OS thread; from memory: the HTTP server on one single-threaded \
                 runtime and OS thread"
            }
            Layout::PerProcess => {
                "two processes' shape: relay: one multi-threaded runtime (default workers) for \
                 the HTTP server and QUIC client, another for the QUIC server; from memory: the \
                 HTTP server on one multi-threaded runtime (default workers)"
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
    /// Where to send `PUT` (a write relay) or `GET` (a read relay)
    /// `/v1/vaults/{vault}/records/{key}`.
    pub http_addr: SocketAddr,
    layout: Layout,
    conn: quinn::Connection,
    endpoints: Vec<quinn::Endpoint>,
    /// Dropped in order: HTTP, client, server (the server's tasks hold the writer's queue).
    hosts: Vec<RuntimeHost>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl BareRelay {
    /// Starts a write relay, its database in `dir`, and opens the one QUIC connection.
    pub fn start(dir: &Path, layout: Layout) -> Result<Self, RelayError> {
        let db = open_durable(&dir.join("bare-relay.db"))?;
        let (jobs, queue) = mpsc::channel(QUEUE_DEPTH);
        let writer = std::thread::Builder::new()
            .name("bare-writer".into())
            .spawn(move || owner::write_loop(db, queue))
            .map_err(|source| RelayError::Runtime {
                what: "writer",
                source,
            })?;
        // If the start fails, the queue's sender drops with it and the writer thread ends.
        Self::start_with(layout, Backend::Writer(jobs), Some(writer))
    }

    /// Starts a read relay whose owner answers from `records`, and opens the one QUIC
    /// connection.
    pub fn start_reads(layout: Layout, records: Records) -> Result<Self, RelayError> {
        Self::start_with(layout, Backend::Memory(records), None)
    }

    fn start_with(
        layout: Layout,
        backend: Backend,
        writer: Option<std::thread::JoinHandle<()>>,
    ) -> Result<Self, RelayError> {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let (server_key, client_key) = (NodeKey::generate()?, NodeKey::generate()?);
        let reads = matches!(backend, Backend::Memory(_));

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
                vec![ferry_peer::wire::ALPN.to_vec()],
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
        server.spawn(owner::serve_quic(server_endpoint.clone(), backend));

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
            vec![ferry_peer::wire::ALPN.to_vec()],
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

        let (listener, http_addr) = bind_http(&http)?;
        http.spawn(caller::serve_http(
            listener,
            if reads {
                Handler::RelayReads(conn.clone())
            } else {
                Handler::RelayWrites(conn.clone())
            },
        ));

        Ok(Self {
            http_addr,
            layout,
            conn,
            endpoints: vec![client_endpoint, server_endpoint],
            hosts,
            writer,
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

/// The cache-hit yardstick: a hyper HTTP/1.1 server on loopback answering `GET` on a record
/// path from a map in memory. No token check, no QUIC, nothing forwarded. Dropping it stops
/// the runtime and joins its thread.
#[derive(Debug)]
pub struct BareHttp {
    /// Where to send `GET /v1/vaults/{vault}/records/{key}`.
    pub http_addr: SocketAddr,
    thread: &'static str,
    /// Held for its drop, which stops the runtime.
    _host: RuntimeHost,
}

impl BareHttp {
    /// In [`Layout::Split`], one single-threaded runtime on its own OS thread; in
    /// [`Layout::PerProcess`], one multi-threaded runtime with the default worker count, like a
    /// Ferry gateway's.
    pub fn start(layout: Layout, records: Records) -> Result<Self, RelayError> {
        let (thread, flavor) = match layout {
            Layout::Split => ("bare-mem-split", Flavor::CurrentThread),
            Layout::PerProcess => ("bare-mem-proc", Flavor::MultiThread),
        };
        let host = RuntimeHost::start(thread, flavor)?;
        let (listener, http_addr) = bind_http(&host.handle())?;
        host.handle()
            .spawn(caller::serve_http(listener, Handler::Memory(records)));
        Ok(Self {
            http_addr,
            thread,
            _host: host,
        })
    }

    /// Its threads, all on the calling side: there is no other.
    pub fn cpu_sides(&self) -> Sides {
        Sides::Threads {
            caller: vec![self.thread],
            owner: Vec::new(),
        }
    }
}

/// A listener on a loopback port the kernel picks, registered with `runtime`.
fn bind_http(runtime: &tokio::runtime::Handle) -> Result<(TcpListener, SocketAddr), RelayError> {
    let bind = |source| RelayError::Bind {
        what: "HTTP server",
        source,
    };
    let _runtime = runtime.enter();
    let std_listener =
        std::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).map_err(bind)?;
    std_listener.set_nonblocking(true).map_err(bind)?;
    let listener = TcpListener::from_std(std_listener).map_err(bind)?;
    let addr = listener.local_addr().map_err(bind)?;
    Ok((listener, addr))
}

fn transport() -> Arc<quinn::TransportConfig> {
    let mut config = quinn::TransportConfig::default();
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
pub(crate) enum Flavor {
    CurrentThread,
    MultiThread,
}

/// A tokio runtime on a thread of its own, driven until the host drops.
#[derive(Debug)]
pub(crate) struct RuntimeHost {
    handle: tokio::runtime::Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RuntimeHost {
    pub(crate) fn start(name: &'static str, flavor: Flavor) -> Result<Self, RelayError> {
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

    pub(crate) fn handle(&self) -> tokio::runtime::Handle {
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::load::{self, Keys, Target, Verb};

    fn target(api: SocketAddr) -> Target {
        Target {
            api,
            token: "t".into(),
            app: "bench".into(),
            vault: "bench".into(),
        }
    }

    #[test]
    fn a_write_goes_through_every_part_and_is_durable() {
        let dir = tempfile::tempdir().unwrap();
        for layout in [Layout::Split, Layout::PerProcess] {
            let sub = dir.path().join(layout.name());
            std::fs::create_dir_all(&sub).unwrap();
            let relay = BareRelay::start(&sub, layout).unwrap();
            let keys = Keys::new("t-");
            let sample = load::sequential(
                &target(relay.http_addr),
                Verb::Write,
                &keys,
                2,
                5,
                START_BOUND,
            )
            .unwrap();
            assert_eq!((sample.ok(), sample.failures()), (5, 0), "{sample:?}");
            drop(relay);
            let db = open_durable(&sub.join("bare-relay.db")).unwrap();
            let rows: i64 = db
                .query_row("SELECT count(*) FROM records", [], |row| row.get(0))
                .unwrap();
            assert_eq!(rows, 7);
        }
    }

    #[test]
    fn reads_are_answered_through_the_relay_and_from_memory() {
        let records: Records = Arc::new(
            (0..10)
                .map(|n| (Keys::key("r-", n), load::value()))
                .collect::<HashMap<_, _>>(),
        );
        for layout in [Layout::Split, Layout::PerProcess] {
            let relay = BareRelay::start_reads(layout, records.clone()).unwrap();
            let memory = BareHttp::start(layout, records.clone()).unwrap();
            for api in [relay.http_addr, memory.http_addr] {
                let keys = Keys::cycling("r-", 0, 10);
                let sample =
                    load::sequential(&target(api), Verb::Read, &keys, 2, 20, START_BOUND).unwrap();
                assert_eq!((sample.ok(), sample.failures()), (20, 0), "{sample:?}");
                // A key that is not there is a 404, counted as a failure.
                let missing = Keys::starting_at("r-", 10);
                let sample =
                    load::sequential(&target(api), Verb::Read, &missing, 0, 1, START_BOUND)
                        .unwrap();
                assert_eq!(sample.non_200.get(&404), Some(&1), "{sample:?}");
            }
        }
    }
}
