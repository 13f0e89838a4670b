//! The floor for liveness: what keeping N QUIC connections alive costs with nothing on top.
//! One hub endpoint on a runtime thread of its own (`floor-hub`), and one client endpoint per
//! peer (its own UDP socket, as a separate process would have) on another runtime, each holding
//! one connection to the hub with quinn's keep-alive at the interval Ferry's heartbeats use.
//! Both sides' keep-alives are on, as both of Ferry's gateways probe each other.
//!
//! The TLS is Ferry's own (`ferry_peer::tls`, raw public keys), so the handshake and the crypto
//! are the ones Ferry pays; there are no frames, no route table and no prober.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferry_peer::tls::{self, TrustedKeys};
use ferry_ticket::{NodeId, NodeKey};

use crate::bare_relay::{Flavor, RelayError, RuntimeHost};
use crate::cpu::Sides;

/// Longer than any interval measured, so a connection lives on its keep-alives alone.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_BOUND: Duration = Duration::from_secs(10);
/// A busy peer's calls: one a second, as Ferry's busy phase reads.
const CALL_EVERY: Duration = Duration::from_secs(1);
const CALL_BYTES: usize = 16;
/// The hub's runtime thread: the one whose CPU is the floor.
pub const HUB_THREAD: &str = "floor-hub";

/// The hub and its peers' connections. Dropping it closes every connection and joins both
/// runtimes.
#[derive(Debug)]
pub struct Floor {
    connections: Vec<quinn::Connection>,
    peers: tokio::runtime::Handle,
    endpoints: Vec<quinn::Endpoint>,
    /// Held only to be dropped last, after the endpoints: peers first, then the hub.
    _runtimes: Vec<RuntimeHost>,
}

/// The hub accepts any key: the floor measures keeping connections, not trust.
#[derive(Debug)]
struct AnyKey;

impl TrustedKeys for AnyKey {
    fn is_trusted(&self, _: &NodeId) -> bool {
        true
    }
}

impl Floor {
    /// Starts the hub and connects `intervals.len()` peers, peer `i` keeping its connection alive
    /// every `intervals[i]` (the hub's side of that connection uses the same interval).
    pub fn start(intervals: &[Duration]) -> Result<Self, RelayError> {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let hub_key = NodeKey::generate()?;
        let alpn = vec![ferry_peer::wire::ALPN.to_vec()];
        let hub = RuntimeHost::start(HUB_THREAD, Flavor::CurrentThread)?;
        let peers = RuntimeHost::start("floor-peers", Flavor::MultiThread)?;

        // One hub endpoint per interval (all on the hub's thread): quinn takes the keep-alive
        // from an endpoint's server config, and each side of a connection keeps it alive at
        // the peer's interval, as Ferry's two gateways both probe each other.
        let mut hubs: Vec<(Duration, SocketAddr)> = Vec::new();
        let mut endpoints = Vec::new();
        for interval in intervals {
            if hubs.iter().any(|(known, _)| known == interval) {
                continue;
            }
            let endpoint = {
                // quinn spawns an endpoint's driver on the runtime it is created in.
                let handle = hub.handle();
                let _runtime = handle.enter();
                let mut config = quinn::ServerConfig::with_crypto(Arc::new(tls::server_crypto(
                    &hub_key,
                    Arc::new(AnyKey),
                    alpn.clone(),
                )?));
                config.transport_config(transport(*interval));
                quinn::Endpoint::server(config, loopback).map_err(|source| RelayError::Bind {
                    what: "floor hub",
                    source,
                })?
            };
            let addr = endpoint.local_addr().map_err(|source| RelayError::Bind {
                what: "floor hub",
                source,
            })?;
            // Accept and hold every connection until the endpoint closes.
            let acceptor = endpoint.clone();
            hub.handle().spawn(async move {
                while let Some(incoming) = acceptor.accept().await {
                    tokio::spawn(async move {
                        if let Ok(connection) = incoming.await {
                            answer_calls(connection).await;
                        }
                    });
                }
            });
            hubs.push((*interval, addr));
            endpoints.push(endpoint);
        }

        let mut connections = Vec::with_capacity(intervals.len());
        for interval in intervals {
            let hub_addr = hubs
                .iter()
                .find(|(known, _)| known == interval)
                .map(|(_, addr)| *addr)
                .ok_or(RelayError::NotStarted { what: "floor hub" })?;
            let key = NodeKey::generate()?;
            let endpoint = {
                let handle = peers.handle();
                let _runtime = handle.enter();
                quinn::Endpoint::client(loopback).map_err(|source| RelayError::Bind {
                    what: "floor peer",
                    source,
                })?
            };
            let mut config = quinn::ClientConfig::new(Arc::new(tls::client_crypto(
                &key,
                hub_key.node_id(),
                alpn.clone(),
            )?));
            config.transport_config(transport(*interval));
            let dialer = endpoint.clone();
            let connecting = peers.handle().spawn(async move {
                let connecting = dialer
                    .connect_with(config, hub_addr, tls::SERVER_NAME)
                    .map_err(|err| err.to_string())?;
                tokio::time::timeout(CONNECT_BOUND, connecting)
                    .await
                    .map_err(|_| format!("no handshake within {CONNECT_BOUND:?}"))?
                    .map_err(|err| err.to_string())
            });
            let connection = peers
                .handle()
                .block_on(connecting)
                .map_err(|err| RelayError::Connect(err.to_string()))?
                .map_err(RelayError::Connect)?;
            connections.push(connection);
            endpoints.push(endpoint);
        }
        Ok(Self {
            connections,
            peers: peers.handle(),
            endpoints,
            _runtimes: vec![peers, hub],
        })
    }

    /// Where the hub's CPU is counted.
    pub fn hub_side() -> Sides {
        Sides::Threads {
            caller: vec![],
            owner: vec![HUB_THREAD],
        }
    }

    /// Starts one call a second (a one-byte request on a new stream, answered with one byte)
    /// on each of the first `busy` connections, as Ferry's busy phase reads once a second from
    /// each busy peer. The calls stop when the floor drops.
    pub fn call_every_second(&self, busy: usize) -> Calls {
        let done = Arc::new(AtomicU64::new(0));
        for connection in self.connections.iter().take(busy) {
            let (connection, done) = (connection.clone(), done.clone());
            self.peers.spawn(async move {
                let mut every = tokio::time::interval(CALL_EVERY);
                loop {
                    every.tick().await;
                    let Ok((mut send, mut recv)) = connection.open_bi().await else {
                        return;
                    };
                    if send.write_all(b"?").await.is_err() || send.finish().is_err() {
                        return;
                    }
                    if recv.read_to_end(CALL_BYTES).await.is_ok() {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        Calls { done }
    }

    /// How many peers are still connected (a keep-alive that failed would close one).
    pub fn connected(&self) -> usize {
        self.connections
            .iter()
            .filter(|connection| connection.close_reason().is_none())
            .count()
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        for endpoint in &self.endpoints {
            endpoint.close(0u32.into(), b"done");
        }
        // `_runtimes` drops next: each runtime stops and its thread is joined.
    }
}

/// The floor's calls so far.
#[derive(Debug)]
pub struct Calls {
    done: Arc<AtomicU64>,
}

impl Calls {
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
}

/// The hub's side of a connection: answers each call's byte with one byte until it closes.
async fn answer_calls(connection: quinn::Connection) {
    while let Ok((mut send, mut recv)) = connection.accept_bi().await {
        tokio::spawn(async move {
            if recv.read_to_end(CALL_BYTES).await.is_ok() && send.write_all(b"!").await.is_ok() {
                let _ = send.finish();
            }
        });
    }
}

fn transport(keep_alive: Duration) -> Arc<quinn::TransportConfig> {
    let mut config = quinn::TransportConfig::default();
    config.keep_alive_interval(Some(keep_alive));
    config.max_idle_timeout(quinn::IdleTimeout::try_from(IDLE_TIMEOUT).ok());
    Arc::new(config)
}
