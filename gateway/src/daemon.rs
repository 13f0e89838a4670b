//! `ferry serve`: build the gateway, listen, serve, and stop in order.
//!
//! Start: state directory, key and token, database, executor, trust book, QUIC endpoint, local
//! API; `api.addr` is written only once the API listens, so a client that reads it can connect.
//!
//! Stop (SIGTERM, SIGINT or `ferry stop`), in this order:
//! 1. new local calls and new peer streams are refused at once; the QUIC port stops taking
//!    new connections;
//! 2. in-flight writes finish within the drain bound;
//! 3. the mDNS goodbye; then the answers still on their streams are acknowledged by their
//!    callers (inside the same bound), since a close drops what was not sent;
//! 4. connections close with "going away", so peers mark this gateway's routes down at once;
//! 5. `api.addr` is removed and the process exits 0.

use std::sync::Arc;
use std::time::Duration;

use ferry_peer::call::{CallTuning, Caller};
use ferry_peer::discovery::{Announcement, Discovery, DiscoveryEvent};
use ferry_peer::door;
use ferry_peer::mdns::MdnsDiscovery;
use ferry_peer::pool::Pool;
use ferry_peer::route_table::RouteTable;
use ferry_peer::tls::peer_node_id;
use ferry_peer::transport::{BindError, PeerEndpoint, TransportTuning};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::api;
use crate::call_log::CallLog;
use crate::config::{Config, ConfigError};
use crate::gateway::{Gateway, Parts};
use crate::home::{Home, HomeError};
use crate::owner::executor::Executor;
use crate::owner::verbs::WriteLimits;
use crate::peers::PeerBook;
use crate::reader::Reader;
use crate::service::PeerService;
use crate::store::{self, meta, trust, StoreError};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Home(#[from] HomeError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("cannot listen for apps on {addr}: {source}; is another gateway running? (`ferry status`), or choose another address with --api")]
    Api {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

/// Runs a gateway until it is told to stop; returns once it has stopped cleanly.
pub async fn run(home: Home, config: Config) -> Result<(), StartError> {
    config.validate()?;
    home.ensure()?;
    let key = home.node_key()?;
    let token = home.local_token()?;
    let db_path = home.db_path();
    let setup = store::open(&db_path)?;
    let peers = Arc::new(PeerBook::default());
    peers.replace_all(trust::list(&setup)?);
    let ticket_epoch = meta::ticket_epoch(&setup)?;
    let local_vaults = crate::store::vaults::list(&setup)?;
    drop(setup);
    let executor = Executor::start(
        &db_path,
        WriteLimits {
            max_value_bytes: config.max_value_bytes,
            journal_retention: config.journal_retention(),
            collected_before_ms: 0,
        },
    )?;
    let reader = Reader::open(&db_path)?;
    let call_log = CallLog::start(&db_path, &home.root().join("calls.slots"))?;
    let endpoint = PeerEndpoint::bind(
        config.listen,
        key.clone(),
        peers.clone(),
        TransportTuning::default(),
    )?;
    let quic_addr = endpoint.local_addr().map_err(|source| BindError::Socket {
        addr: config.listen,
        source,
    })?;
    let routes = Arc::new(RouteTable::default());
    for peer in peers.all() {
        routes.set_configured(peer.node_id, &peer.routes, std::time::Instant::now());
    }
    let caller = Caller::new(
        endpoint.clone(),
        Arc::new(Pool::new(routes.clone())),
        CallTuning {
            connect_timeout: config.connect_timeout(),
            write_liveness: config.write_liveness(),
            ..CallTuning::default()
        },
        routes,
    );
    let listener = TcpListener::bind(config.api)
        .await
        .map_err(|source| StartError::Api {
            addr: config.api,
            source,
        })?;
    let api_addr = listener.local_addr().map_err(|source| StartError::Api {
        addr: config.api,
        source,
    })?;
    let label = config.label_or_hostname();
    let gateway = Arc::new(Gateway::new(Parts {
        home: home.clone(),
        config,
        key,
        label,
        token,
        executor,
        reader,
        call_log,
        peers,
        caller,
        quic_addr,
        ticket_epoch,
        local_vaults,
    }));
    let _ = gateway.api_addr.set(api_addr);

    let mut tasks = JoinSet::new();
    let in_flight = Arc::new(door::InFlight::default());
    tasks.spawn(accept_peers(
        gateway.clone(),
        endpoint.clone(),
        in_flight.clone(),
    ));
    tasks.spawn(api::serve(gateway.clone(), listener));
    let greeter = gateway.clone();
    tasks.spawn(async move { greeter.hello_all(Duration::from_secs(2)).await });
    tasks.spawn(gateway.clone().settle_in_background());
    tasks.spawn(collect_journals(gateway.clone()));
    for replica in gateway.local_vault_rows() {
        if replica.role == crate::store::vaults::Role::Replica {
            gateway.start_sync(replica.name, replica.owner);
        }
    }
    tasks.spawn(crate::monitor::watch_routes(gateway.clone()));
    let discovery = match start_discovery(&gateway).await {
        Some((discovery, events)) => {
            tasks.spawn(gateway.clone().follow_discovery(events));
            Some(discovery)
        }
        None => None,
    };
    home.write_api_addr(api_addr)?;
    info!(node = %gateway.node_id().short(), label = %gateway.label, api = %api_addr, quic = %quic_addr, "gateway running");

    wait_for_stop(&gateway).await;
    info!("stopping: refusing new calls, draining in-flight writes");
    gateway.begin_stop();
    endpoint.refuse_new_connections();
    let drain_until = tokio::time::Instant::now() + gateway.config.drain();
    // Apps' writes already on their way finish first (their outcome goes to the call log);
    // then the executor drains what is queued.
    let writes_done = tokio::time::timeout_at(drain_until, gateway.write_tasks.wait_idle())
        .await
        .is_ok();
    // Their outcomes on disk; a call still in flight past the bound stays `in_flight` and is
    // settled with its owner after the next start.
    let _ = tokio::time::timeout_at(drain_until, gateway.call_log.flush()).await;
    let drained = writes_done
        && gateway
            .executor
            .drain(drain_until.saturating_duration_since(tokio::time::Instant::now()))
            .await;
    // The goodbye on the LAN first, so peers stop choosing this gateway; then the answers of
    // streams in flight (the executor's, and "going away" to anything that came since) leave
    // before the close, which would drop them. Waiting last leaves the least time for a stream
    // to arrive between the wait and the close.
    if let Some(discovery) = discovery {
        tokio::task::spawn_blocking(move || discovery.goodbye())
            .await
            .ok();
    }
    let answered = tokio::time::timeout_at(drain_until, in_flight.wait_idle())
        .await
        .is_ok();
    if !drained || !answered {
        warn!("in-flight writes did not finish within the drain bound; unfinished ones are interrupted");
    }
    // The goodbye on every connection, so peers mark this gateway's routes down at once.
    endpoint.close_going_away().await;
    gateway.stop_background();
    home.remove_api_addr();
    // Every task watches the stop signal; give them the rest of a short bound, then abort.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    info!("stopped");
    Ok(())
}

/// How often the owner's journal and the caller's call log forget what is past retention.
const COLLECT_EVERY: Duration = Duration::from_secs(3600);

/// SPEC 7 rule 3: forgets journal rows (and settled calls) of request ids older than the
/// retention, at start and then every [`COLLECT_EVERY`]. Ids that old are refused as stale, so
/// an id whose row went can never run.
async fn collect_journals(gateway: Arc<Gateway>) {
    let mut stopping = gateway.stopping();
    loop {
        let retention = gateway.config.journal_retention().as_millis() as u64;
        let before_ms = store::unix_ms().saturating_sub(retention);
        match gateway.executor.collect(before_ms).await {
            Ok(rows) => debug!(rows, "journal collected"),
            Err(err) => warn!(%err, "the journal could not be collected; trying again later"),
        }
        gateway.call_log.collect(before_ms).await;
        tokio::select! {
            _ = tokio::time::sleep(COLLECT_EVERY) => {}
            _ = stopping.wait_for(|stopping| *stopping) => return,
        }
    }
}

/// Starts mDNS (unless turned off) and announces this gateway. A failure is logged, not
/// fatal: peers can still be added with `ferry trust --addr`.
async fn start_discovery(
    gateway: &Arc<Gateway>,
) -> Option<(
    Arc<dyn Discovery>,
    tokio::sync::mpsc::Receiver<DiscoveryEvent>,
)> {
    if !gateway.config.mdns {
        return None;
    }
    let mut tailnet = gateway.config.tailnet.clone();
    for addr in crate::tailnet::from_client(gateway.quic_addr.port()).await {
        if !tailnet.contains(&addr) {
            tailnet.push(addr);
        }
    }
    let announcement = Announcement {
        node: gateway.node_id(),
        protocol: ferry_peer::wire::PROTOCOL_VERSION,
        quic_port: gateway.quic_addr.port(),
        label_hint: gateway.label.clone(),
        tailnet,
    };
    let started = MdnsDiscovery::start(&gateway.config.mdns_interfaces)
        .and_then(|mdns| mdns.announce(&announcement).map(|()| mdns));
    match started {
        Ok(mdns) => {
            let events = mdns.events()?;
            Some((Arc::new(mdns), events))
        }
        Err(err) => {
            warn!(%err, "mDNS discovery is off");
            None
        }
    }
}

/// Waits for SIGTERM, SIGINT or a stop requested through the API.
async fn wait_for_stop(gateway: &Gateway) {
    let mut stop_requested = gateway.stopping();
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                warn!(%err, "cannot watch SIGTERM; stop with SIGINT or `ferry stop`");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
        _ = stop_requested.wait_for(|stopping| *stopping) => {}
    }
}

/// Accepts peer connections until the stop; each is served until it closes.
async fn accept_peers(
    gateway: Arc<Gateway>,
    endpoint: PeerEndpoint,
    in_flight: Arc<door::InFlight>,
) {
    let mut connections = JoinSet::new();
    let mut stopping = gateway.stopping();
    let service = Arc::new(PeerService(gateway.clone()));
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                let service = service.clone();
                let stopping = gateway.stopping();
                let registry = gateway.clone();
                let in_flight = in_flight.clone();
                connections.spawn(async move {
                    let conn = match incoming.await {
                        Ok(conn) => conn,
                        Err(err) => {
                            debug!(%err, "peer handshake failed");
                            return;
                        }
                    };
                    let Some(peer) = peer_node_id(&conn) else {
                        conn.close(quinn_close_code(), b"no node key");
                        return;
                    };
                    registry.register_incoming(peer, conn.clone());
                    door::serve_connection(service, conn.clone(), peer, stopping, in_flight).await;
                    // A peer that closed saying it is stopping takes its routes down at once.
                    if let Some(quinn::ConnectionError::ApplicationClosed(close)) = conn.close_reason() {
                        if close.error_code.into_inner() == u64::from(ferry_peer::transport::CLOSE_GOING_AWAY) {
                            registry.routes.peer_failed(peer, std::time::Instant::now(), ferry_peer::health::Failure::GoingAway);
                        }
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stopping.wait_for(|stopping| *stopping) => break,
        }
    }
    // Connections keep serving in-flight streams (new ones are answered "going away") until
    // the endpoint closes them.
    while connections.join_next().await.is_some() {}
}

fn quinn_close_code() -> quinn::VarInt {
    quinn::VarInt::from_u32(ferry_peer::transport::CLOSE_UNTRUSTED)
}
