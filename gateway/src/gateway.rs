//! One running gateway: the composition root that builds the components and hands them out.
//!
//! Each component owns its state and shows a narrow interface; none reaches into another's
//! fields, and none knows this type (the graph of `use crate::...` has no circle):
//!
//! - [`Vaults`]: the vaults held here and the local copy;
//! - [`Network`]: peers, routes, the directory, the caller;
//! - [`Owner`]: tickets and the executor (the store's one writer), and over it, the network
//!   and the vaults, the door that answers peers ([`PeerService`]);
//! - [`Reads`]: the read path and its cache;
//! - [`Writes`]: the write path, its tickets, its tasks;
//! - [`Settlement`]: settling by request id, and in the background;
//! - [`Replication`]: replicas' sync jobs;
//! - [`Admin`]: the admin's changes.
//!
//! [`Gateway::start`] builds them over an [`Env`] (the clock, how blocking work runs, the side
//! probe) and a peer endpoint, and starts the background work every gateway does; the daemon
//! adds what only a real process has (the local API, mDNS, signals, the ordered stop).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ferry_core::clock::Clock;
use ferry_peer::call::{CallTuning, Caller};
use ferry_peer::door;
use ferry_peer::pool::Pool;
use ferry_peer::route_table::RouteTable;
use ferry_peer::tls::peer_node_id;
use ferry_peer::transport::PeerEndpoint;
use ferry_ticket::{NodeId, NodeKey};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tracing::{debug, warn, Instrument};

use crate::admin::Admin;
use crate::call_log::CallLog;
use crate::config::Config;
use crate::door::PeerService;
use crate::env::Env;
use crate::home::Home;
use crate::in_flight::InFlight;
use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;
use crate::names::Label;
use crate::network::book::PeerBook;
use crate::network::{Network, NetworkParts, DIRECTORY_REFRESH_BOUND};
use crate::owner::executor::{Executor, ExecutorSettings};
use crate::owner::verbs::WriteLimits;
use crate::owner::Owner;
use crate::reader::Reader;
use crate::reads::{ReadSettings, Reads};
use crate::replication::Replication;
use crate::settlement::{Settlement, SettlementParts};
use crate::store::{self, meta, trust, StoreError};
use crate::sync_board::SyncBoard;
use crate::vaults::Vaults;
use crate::writes::{Writes, WritesParts};

/// How often the owner's journal and the caller's call log forget what is past retention.
const COLLECT_EVERY: Duration = Duration::from_secs(3600);

/// What a gateway is made of that the caller provides.
#[derive(Debug)]
pub struct Parts {
    /// The SQLite database.
    pub db_path: PathBuf,
    /// The call log's slot file.
    pub slots_path: PathBuf,
    pub config: Config,
    pub key: NodeKey,
    pub label: Label,
    /// The state directory (shown by `ferry status`).
    pub home: Home,
    /// The local API's bearer token.
    pub token: String,
    /// The peer endpoint, bound (on a real socket, or a simulated one), trusting `book`.
    pub endpoint: PeerEndpoint,
    pub book: Arc<PeerBook>,
}

/// Why a gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayStartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The peer endpoint has no local address (its socket is gone).
    #[error("the peer endpoint has no address: {source}")]
    Endpoint { source: std::io::Error },
}

/// The running gateway.
#[derive(Debug)]
pub struct Gateway {
    config: Config,
    key: NodeKey,
    label: Label,
    home: Home,
    token: String,
    started: Instant,
    quic_addr: SocketAddr,
    /// The protocol versions the peer endpoint speaks.
    protocols: ferry_peer::wire::ProtocolRange,
    /// The peer socket's receive buffer, when the endpoint bound its own socket.
    receive_buffer: Option<ferry_peer::transport::ReceiveBuffer>,
    /// The path the peer socket's datagrams take, when the endpoint bound its own socket.
    udp_path: Option<ferry_peer::udp_io::UdpPath>,
    /// The peer socket's catcher, when the endpoint bound its own socket.
    catcher: Option<ferry_peer::udp_catcher::CatcherWatch>,
    api_addr: OnceLock<SocketAddr>,
    env: Env,
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
    vaults: Arc<Vaults>,
    network: Arc<Network>,
    owner: Arc<Owner>,
    reads: Arc<Reads>,
    writes: Arc<Writes>,
    settlement: Arc<Settlement>,
    replication: Arc<Replication>,
    admin: Arc<Admin>,
    call_log: Arc<CallLog>,
    in_flight_streams: Arc<door::InFlight>,
}

impl Gateway {
    /// Builds every component over `env`, and starts what every gateway runs in the
    /// background: serving peers, greeting them, settling, collecting journals, replica syncs,
    /// the route prober. Must run inside a tokio runtime.
    pub fn start(parts: Parts, env: Env) -> Result<Arc<Self>, GatewayStartError> {
        let clock = env.clock.clone();
        let setup = store::open(&parts.db_path)?;
        parts.book.replace_all(trust::list(&setup)?);
        let ticket_epoch = meta::ticket_epoch(&setup)?;
        let local_vaults = store::vaults::list(&setup)?;
        let vault_claims = store::claims::claims(&setup)?;
        drop(setup);
        let config = parts.config;
        let metrics = Arc::new(Metrics::default());
        let executor = Arc::new(Executor::start(
            &parts.db_path,
            ExecutorSettings {
                limits: WriteLimits {
                    max_value_bytes: config.max_value_bytes,
                    journal_retention: config.journal_retention(),
                    collected_before_ms: 0,
                },
                rules: config.capacity.rules(),
                blocking: env.blocking,
                clock: clock.clone(),
                metrics: metrics.clone(),
            },
        )?);
        let reader = Reader::open(&parts.db_path, env.blocking)?;
        let call_log = Arc::new(CallLog::start(
            &parts.db_path,
            &parts.slots_path,
            env.blocking,
            clock.clone(),
        )?);
        let quic_addr = parts
            .endpoint
            .local_addr()
            .map_err(|source| GatewayStartError::Endpoint { source })?;
        let routes = Arc::new(RouteTable::default());
        let caller = Caller::with_probe(
            parts.endpoint.clone(),
            Arc::new(Pool::new(routes.clone())),
            CallTuning {
                connect_timeout: config.connect_timeout(),
                write_liveness: config.write_liveness(),
                ..CallTuning::default()
            },
            routes,
            env.probe.clone(),
        );
        let lifecycle = Lifecycle::new();
        let vaults = Arc::new(Vaults::new(
            local_vaults,
            vault_claims,
            reader,
            executor.clone(),
            clock.clone(),
        ));
        let network = Arc::new(Network::new(NetworkParts {
            me: parts.key.node_id(),
            label: parts.label.clone(),
            book: parts.book,
            caller,
            vaults: vaults.clone(),
            thunderbolt: config.thunderbolt_interfaces.clone(),
            clock: clock.clone(),
        }));
        let owner = Arc::new(Owner::new(
            executor,
            parts.key.clone(),
            ticket_epoch,
            config.writers.clone(),
            clock.clone(),
        ));
        let board = Arc::new(SyncBoard::default());
        let reads = Arc::new(Reads::new(
            network.clone(),
            vaults.clone(),
            board.clone(),
            ReadSettings {
                cache_fresh_ms: config.cache_fresh_ms,
                replica_fresh_ms: config.replica_fresh_ms,
                cache_max_bytes: config.cache_max_bytes,
                cache_max_entries: config.cache_max_entries,
            },
            metrics.clone(),
            clock.clone(),
        ));
        let in_flight = Arc::new(InFlight::default());
        let settle_wake = Arc::new(Notify::new());
        let writes = Arc::new(Writes::new(WritesParts {
            network: network.clone(),
            owner: owner.clone(),
            reads: reads.clone(),
            call_log: call_log.clone(),
            in_flight: in_flight.clone(),
            settle_wake: settle_wake.clone(),
            lifecycle: lifecycle.clone(),
            metrics: metrics.clone(),
            clock: clock.clone(),
        }));
        let settlement = Arc::new(Settlement::new(SettlementParts {
            network: network.clone(),
            owner: owner.clone(),
            vaults: vaults.clone(),
            call_log: call_log.clone(),
            in_flight,
            wake: settle_wake,
            lifecycle: lifecycle.clone(),
            metrics: metrics.clone(),
            clock: clock.clone(),
        }));
        let replication = Arc::new(Replication::new(
            network.clone(),
            vaults.clone(),
            reads.clone(),
            board,
            lifecycle.clone(),
            clock.clone(),
            metrics.clone(),
        ));
        let admin = Arc::new(Admin::new(
            network.clone(),
            vaults.clone(),
            owner.clone(),
            writes.clone(),
            replication.clone(),
            clock.clone(),
        ));
        let gateway = Arc::new(Self {
            config,
            key: parts.key,
            label: parts.label,
            home: parts.home,
            token: parts.token,
            started: clock.now(),
            quic_addr,
            protocols: parts.endpoint.protocols(),
            receive_buffer: parts.endpoint.receive_buffer(),
            udp_path: parts.endpoint.udp_path().cloned(),
            catcher: parts.endpoint.catcher(),
            api_addr: OnceLock::new(),
            env,
            lifecycle,
            metrics,
            vaults,
            network,
            owner,
            reads,
            writes,
            settlement,
            replication,
            admin,
            call_log,
            in_flight_streams: Arc::new(door::InFlight::default()),
        });
        gateway.start_background(parts.endpoint);
        Ok(gateway)
    }

    /// The background work of every gateway, each watching the stop signal.
    fn start_background(self: &Arc<Self>, endpoint: PeerEndpoint) {
        let lifecycle = &self.lifecycle;
        lifecycle.spawn(self.clone().accept_peers(endpoint));
        lifecycle.spawn(self.clone().record_peer_versions());
        let network = self.network.clone();
        lifecycle.spawn(async move { network.hello_all(DIRECTORY_REFRESH_BOUND).await });
        lifecycle.spawn(self.settlement.clone().settle_in_background());
        lifecycle.spawn(self.clone().collect_journals());
        lifecycle.spawn(crate::network::monitor::watch_routes(
            self.network.clone(),
            self.lifecycle.clone(),
        ));
        self.replication.start_all();
    }

    /// Accepts peer connections until the stop; each is served until it closes.
    async fn accept_peers(self: Arc<Self>, endpoint: PeerEndpoint) {
        let mut connections = JoinSet::new();
        let mut stopping = self.lifecycle.stopping();
        let service = Arc::new(PeerService::new(
            self.owner.clone(),
            self.network.clone(),
            self.vaults.clone(),
            self.metrics.clone(),
            self.env.clock.clone(),
            self.config().background_reads,
            self.lifecycle.clone(),
        ));
        let protocols = endpoint.protocols();
        loop {
            tokio::select! {
                // Biased: a stop is seen even under a flood of connections, and a simulation's
                // seed replays the same order.
                biased;
                _ = stopping.wait_for(|stopping| *stopping) => break,
                // Finished connections are reaped before the next is taken, so a steady
                // stream of new ones cannot pile up finished tasks.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                incoming = endpoint.accept() => {
                    let Some(incoming) = incoming else { break };
                    let service = service.clone();
                    let stopping = self.lifecycle.stopping();
                    let network = self.network.clone();
                    let in_flight = self.in_flight_streams.clone();
                    connections.spawn(async move {
                        let conn = match incoming.await {
                            Ok(conn) => conn,
                            Err(err) => {
                                debug!(%err, "peer handshake failed");
                                return;
                            }
                        };
                        // No protocol version in common: the peer is told this side's range
                        // and reports the mismatch; nothing is served.
                        if ferry_peer::transport::refuse_without_common_version(&conn, protocols).await {
                            debug!(peer = ?peer_node_id(&conn).map(|id| id.short()), "no protocol version in common; told it ours");
                            return;
                        }
                        let Some(peer) = peer_node_id(&conn) else {
                            conn.close(
                                quinn::VarInt::from_u32(ferry_peer::transport::CLOSE_UNTRUSTED),
                                b"no node key",
                            );
                            return;
                        };
                        network.register_incoming(peer, conn.clone());
                        // Every request served on this connection logs under the peer's label
                        // and the address it came in by (SPEC 14), so one write can be followed
                        // from the caller's `write` span into the owner's `owner_write`.
                        let door_span = tracing::debug_span!(
                            "door",
                            peer = %network.label_of(&peer),
                            route = %conn.remote_address()
                        );
                        door::serve_connection(service, conn.clone(), peer, stopping, in_flight)
                            .instrument(door_span)
                            .await;
                        // A peer that closed saying it is stopping takes its routes down at once.
                        if let Some(quinn::ConnectionError::ApplicationClosed(close)) = conn.close_reason() {
                            if close.error_code.into_inner() == u64::from(ferry_peer::transport::CLOSE_GOING_AWAY) {
                                network.routes().peer_failed(peer, network.clock().now(), ferry_peer::health::Failure::GoingAway);
                            }
                        }
                    });
                }
            }
        }
        // Connections keep serving in-flight streams (new ones are answered "going away", but
        // for writes and settle queries: `ferry_peer::door`) until the endpoint closes them.
        while connections.join_next().await.is_some() {}
    }

    /// Writes down what peers say of their versions (schema 3), so `ferry peers` still shows a
    /// peer's release while it is off. Changes only, a handful per peer start.
    async fn record_peer_versions(self: Arc<Self>) {
        let Some(mut changes) = self.network.version_changes() else {
            return;
        };
        let known = self
            .vaults
            .reader()
            .run(trust::versions)
            .await
            .unwrap_or_else(|err| {
                warn!(%err, "peers' versions could not be read; they are learned again");
                Vec::new()
            });
        self.network.remember_versions(known);
        let mut stopping = self.lifecycle.stopping();
        loop {
            let (node, version) = tokio::select! {
                biased;
                _ = stopping.wait_for(|stopping| *stopping) => return,
                change = changes.recv() => match change {
                    Some(change) => change,
                    None => return,
                },
            };
            let recorded = self
                .owner
                .executor()
                .apply(move |conn| trust::record_version(conn, node, &version))
                .await;
            if let Err(err) = recorded {
                debug!(%err, "a peer's version was not written down; it is heard again at its next hello");
            }
        }
    }

    /// SPEC 7 rule 3: forgets journal rows (and settled calls) of request ids older than the
    /// retention, at start and then every [`COLLECT_EVERY`]. Ids that old are refused as stale,
    /// so an id whose row went can never run.
    async fn collect_journals(self: Arc<Self>) {
        let mut stopping = self.lifecycle.stopping();
        loop {
            let retention = self.config.journal_retention().as_millis() as u64;
            let before_ms = self.env.clock.unix_ms().saturating_sub(retention);
            match self.owner.executor().collect(before_ms).await {
                Ok(rows) => debug!(rows, "journal collected"),
                Err(err) => warn!(%err, "the journal could not be collected; trying again later"),
            }
            self.call_log.collect(before_ms).await;
            tokio::select! {
                biased;
                _ = stopping.wait_for(|stopping| *stopping) => return,
                _ = tokio::time::sleep(COLLECT_EVERY) => {}
            }
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn node_id(&self) -> NodeId {
        self.key.node_id()
    }

    pub fn label(&self) -> &Label {
        &self.label
    }

    pub fn home(&self) -> &Home {
        &self.home
    }

    /// The local API's bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn quic_addr(&self) -> SocketAddr {
        self.quic_addr
    }

    /// The peer socket's receive buffer (`None` on a simulated network).
    pub fn receive_buffer(&self) -> Option<ferry_peer::transport::ReceiveBuffer> {
        self.receive_buffer
    }

    /// The path the peer socket's datagrams take (`None` on a simulated network).
    pub fn udp_path(&self) -> Option<&ferry_peer::udp_io::UdpPath> {
        self.udp_path.as_ref()
    }

    /// What the peer socket's catcher has done (`None` on a simulated network).
    pub fn catcher_counts(&self) -> Option<ferry_peer::udp_catcher::CatcherCounts> {
        self.catcher
            .as_ref()
            .map(ferry_peer::udp_catcher::CatcherWatch::counts)
    }

    /// The protocol versions this gateway speaks to peers.
    pub fn protocols(&self) -> ferry_peer::wire::ProtocolRange {
        self.protocols
    }

    /// The local API's address, once it listens.
    pub fn api_addr(&self) -> Option<SocketAddr> {
        self.api_addr.get().copied()
    }

    /// Records the local API's address (once).
    pub fn set_api_addr(&self, addr: SocketAddr) {
        let _ = self.api_addr.set(addr);
    }

    /// How long this gateway has run.
    pub fn uptime(&self) -> Duration {
        self.env.clock.now().saturating_duration_since(self.started)
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.env.clock
    }

    pub fn lifecycle(&self) -> &Arc<Lifecycle> {
        &self.lifecycle
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn vaults(&self) -> &Arc<Vaults> {
        &self.vaults
    }

    pub fn network(&self) -> &Arc<Network> {
        &self.network
    }

    pub fn owner(&self) -> &Arc<Owner> {
        &self.owner
    }

    pub fn reads(&self) -> &Arc<Reads> {
        &self.reads
    }

    pub fn writes(&self) -> &Arc<Writes> {
        &self.writes
    }

    pub fn settlement(&self) -> &Arc<Settlement> {
        &self.settlement
    }

    pub fn replication(&self) -> &Arc<Replication> {
        &self.replication
    }

    pub fn admin(&self) -> &Arc<Admin> {
        &self.admin
    }

    pub fn call_log(&self) -> &Arc<CallLog> {
        &self.call_log
    }

    /// The streams being served to peers (a stop waits for their answers to leave).
    pub fn streams_in_flight(&self) -> &Arc<door::InFlight> {
        &self.in_flight_streams
    }

    pub fn is_stopping(&self) -> bool {
        self.lifecycle.is_stopping()
    }
}
