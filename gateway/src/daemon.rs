//! `ferry serve`: build the gateway, listen, serve, and stop in order.
//!
//! Start: state directory and its lock, key and token, database, executor, trust book, QUIC endpoint, local
//! API; `api.addr` is written only once the API listens, so a client that reads it can connect.
//!
//! Stop (SIGTERM, SIGINT or `ferry stop`), in this order:
//! 1. new local calls and new peer streams are refused at once (a peer's write is not run, but
//!    hears what the journal says of its id; settle queries are still answered); the QUIC port
//!    stops taking new connections;
//! 2. in-flight writes finish within the drain bound;
//! 3. the mDNS goodbye; then the answers still on their streams are acknowledged by their
//!    callers (inside the same bound), since a close drops what was not sent;
//! 4. connections close with "going away", so peers mark this gateway's routes down at once;
//! 5. `api.addr` is removed and the process exits 0.

use std::sync::Arc;
use std::time::Duration;

use ferry_peer::discovery::{Announcement, Discovery, DiscoveryEvent};
use ferry_peer::mdns::MdnsDiscovery;

use crate::network::DiscoveryState;
use ferry_peer::transport::{BindError, PeerEndpoint, TransportTuning};
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::api;
use crate::config::{Config, ConfigError};
use crate::env::Env;
use crate::gateway::{Gateway, GatewayStartError, Parts};
use crate::home::{Home, HomeError};
use crate::network::book::PeerBook;
use crate::store::StoreError;

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
    #[error(transparent)]
    Gateway(#[from] GatewayStartError),
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
    // Before anything of the home but its config is read, and kept past this function's end.
    home.lock()?.hold_until_exit();
    // Before any file or socket is opened: every connection to the local API takes a file.
    let file_limit = crate::platform::raise_file_limit();
    let key = home.node_key()?;
    let token = home.local_token()?;
    let book = Arc::new(PeerBook::default());
    let mut tuning = TransportTuning::default();
    if let Some(protocols) = crate::owner::fault::protocols() {
        tuning.protocols = protocols;
    }
    let endpoint = PeerEndpoint::bind(config.listen, key.clone(), book.clone(), tuning)?;
    if let Some(buffer) = endpoint.receive_buffer().filter(|buffer| buffer.capped()) {
        tracing::warn!(
            asked = buffer.asked,
            granted = buffer.granted,
            "the system holds the peer socket's receive buffer below what was asked: under \
             load this gateway drops peers' datagrams when it falls behind (`ferry doctor`, \
             `udp buffer`, says what to raise)"
        );
    }
    if let Some(ferry_peer::udp_io::UdpPath::Plain { why }) = endpoint.udp_path() {
        tracing::warn!(
            "the peer socket sends and reads plain datagrams, without ECN or segmentation \
             offload ({why}); peers are reached as usual (`ferry doctor`, `udp path`)"
        );
    }
    let listener = api::bind(config.api).map_err(|source| StartError::Api {
        addr: config.api,
        source,
    })?;
    let api_addr = listener.local_addr().map_err(|source| StartError::Api {
        addr: config.api,
        source,
    })?;
    let label = config.label_or_hostname();
    let mut env = Env::system();
    if let Some(offset_ms) = crate::owner::fault::clock_offset_ms() {
        env.clock = Arc::new(crate::env::ShiftedClock {
            inner: env.clock.clone(),
            offset_ms,
        });
    }
    let gateway = Gateway::start(
        Parts {
            db_path: home.db_path(),
            slots_path: home.root().join("calls.slots"),
            config,
            key,
            label,
            home: home.clone(),
            token,
            endpoint: endpoint.clone(),
            book,
        },
        env,
    )?;
    gateway.set_api_addr(api_addr);

    let mut tasks = JoinSet::new();
    tasks.spawn(api::serve(gateway.clone(), listener, file_limit));
    let discovery = match start_discovery(&gateway).await {
        Some((discovery, events)) => {
            tasks.spawn(gateway.network().clone().follow_discovery(events));
            Some(discovery)
        }
        None => None,
    };
    home.write_api_addr(api_addr)?;
    info!(node = %gateway.node_id().short(), label = %gateway.label(), api = %api_addr, quic = %gateway.quic_addr(), "gateway running");

    wait_for_stop(&gateway).await;
    info!("stopping: refusing new calls, draining in-flight writes");
    gateway.lifecycle().begin_stop();
    endpoint.refuse_new_connections();
    let drain = gateway.config().drain();
    let drain_until = tokio::time::Instant::from_std(gateway.clock().now()) + drain;
    // Apps' writes already on their way finish first (their outcome goes to the call log);
    // then the executor drains what is queued.
    let writes_done = tokio::time::timeout_at(drain_until, gateway.writes().tasks().wait_idle())
        .await
        .is_ok();
    // Their outcomes on disk; a call still in flight past the bound stays in its slot and is
    // settled with its owner after the next start.
    let _ = tokio::time::timeout_at(drain_until, gateway.call_log().flush()).await;
    let drained = writes_done
        && gateway
            .owner()
            .executor()
            .drain(drain_until.saturating_duration_since(gateway.clock().now().into()))
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
    let answered = tokio::time::timeout_at(drain_until, gateway.streams_in_flight().wait_idle())
        .await
        .is_ok();
    if !drained || !answered {
        warn!("in-flight writes did not finish within the drain bound; unfinished ones are interrupted");
    }
    // The goodbye on every connection, so peers mark this gateway's routes down at once.
    endpoint.close_going_away().await;
    gateway.lifecycle().stop_background();
    home.remove_api_addr();
    // Every task watches the stop signal; give them the rest of a short bound, then abort.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    // The writers are done (unless the drain ran out: then one may still commit, and the
    // checkpoint leaves what it cannot move): the log's changes go into the database file
    // itself, off the async threads (it may wait up to a second on a busy connection).
    let db = home.db_path();
    match tokio::task::spawn_blocking(move || crate::store::checkpoint(&db)).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => warn!("the database's write-ahead log was not emptied (another connection was busy); nothing is lost, the next start reads it; copy ferry.db-wal with ferry.db"),
        Ok(Err(err)) => warn!(%err, "the database's write-ahead log could not be checkpointed; nothing is lost, the next start reads it"),
        Err(err) => warn!(%err, "the checkpoint did not finish"),
    }
    info!("stopped");
    Ok(())
}

/// Starts mDNS (unless turned off) and announces this gateway. A failure is logged, not
/// fatal: peers can still be added with `ferry trust --addr`.
async fn start_discovery(
    gateway: &Arc<Gateway>,
) -> Option<(
    Arc<dyn Discovery>,
    tokio::sync::mpsc::Receiver<DiscoveryEvent>,
)> {
    if !gateway.config().mdns {
        return None;
    }
    let mut tailnet = gateway.config().tailnet.clone();
    for addr in crate::tailnet::from_client(gateway.quic_addr().port()).await {
        if !tailnet.contains(&addr) {
            tailnet.push(addr);
        }
    }
    let announcement = Announcement {
        node: gateway.node_id(),
        protocol: gateway.protocols().newest,
        quic_port: gateway.quic_addr().port(),
        label_hint: gateway.label().to_string(),
        tailnet,
    };
    let started = MdnsDiscovery::start(&gateway.config().mdns_interfaces)
        .and_then(|mdns| mdns.announce(&announcement).map(|()| mdns));
    match started {
        Ok(mdns) => {
            let Some(events) = mdns.events() else {
                // Taken once, at start: never in practice; said rather than left "off".
                let err = "its events were already taken (a bug in this build)";
                warn!(err, "mDNS discovery failed");
                gateway
                    .network()
                    .set_discovery_state(DiscoveryState::Failed(err.into()));
                return None;
            };
            gateway
                .network()
                .set_discovery_state(DiscoveryState::Running { heard_self: false });
            Some((Arc::new(mdns), events))
        }
        Err(err) => {
            warn!(%err, "mDNS discovery is off");
            gateway
                .network()
                .set_discovery_state(DiscoveryState::Failed(err.to_string()));
            None
        }
    }
}

/// Waits for Ctrl-C (SIGINT), the service manager's stop (SIGTERM; on Windows the console's
/// and the system's stop events) or a stop requested through the API.
async fn wait_for_stop(gateway: &Gateway) {
    let mut stop_requested = gateway.lifecycle().stopping();
    tokio::select! {
        biased;
        _ = tokio::signal::ctrl_c() => {}
        _ = crate::platform::service_stop() => {}
        _ = stop_requested.wait_for(|stopping| *stopping) => {}
    }
}
