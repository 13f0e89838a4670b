//! What the gateway does with discovery: announce itself, remember every gateway seen
//! (trusted or not, for `ferry peers`), and turn a trusted peer's announcements into routes
//! (its LAN addresses as `lan` or `thunderbolt`, its TXT tailnet addresses as `tailnet`).
//! A goodbye takes the peer's routes down at once.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ferry_peer::discovery::{Announcement, DiscoveryEvent};
use ferry_peer::health::Failure;
use ferry_peer::route_table::RouteSource;
use ferry_peer::routes::{Route, RouteKind};
use ferry_ticket::NodeId;
use tokio::sync::mpsc;
use tracing::debug;

use crate::gateway::Gateway;

/// A gateway seen on the LAN.
#[derive(Debug, Clone)]
pub struct Seen {
    pub announcement: Announcement,
    pub lan: Vec<SocketAddr>,
}

/// Everything seen, by node.
#[derive(Debug, Default)]
pub struct SeenPeers(Mutex<HashMap<NodeId, Seen>>);

impl SeenPeers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Seen>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn all(&self) -> Vec<Seen> {
        let mut all: Vec<Seen> = self.lock().values().cloned().collect();
        all.sort_by_key(|s| s.announcement.node);
        all
    }

    pub fn get(&self, node: &NodeId) -> Option<Seen> {
        self.lock().get(node).cloned()
    }
}

/// The kind of a route to `ip`: `thunderbolt` if it is on the subnet of a configured
/// thunderbolt interface, else `lan`.
fn lan_kind(ip: IpAddr, thunderbolt: &[String]) -> RouteKind {
    if thunderbolt.is_empty() {
        return RouteKind::Lan;
    }
    let on_thunderbolt = if_addrs::get_if_addrs()
        .unwrap_or_default()
        .into_iter()
        .filter(|i| thunderbolt.contains(&i.name))
        .any(|i| match (i.addr, ip) {
            (if_addrs::IfAddr::V4(v4), IpAddr::V4(peer)) => {
                let mask = u32::from(v4.netmask);
                u32::from(v4.ip) & mask == u32::from(peer) & mask
            }
            _ => false,
        });
    if on_thunderbolt {
        RouteKind::Thunderbolt
    } else {
        RouteKind::Lan
    }
}

impl Gateway {
    /// Adds the routes a trusted peer announced. Returns true if any is new.
    pub fn apply_seen(&self, node: NodeId) -> bool {
        if self.peers.by_node(&node).is_none() {
            return false;
        }
        let Some(seen) = self.seen.get(&node) else {
            return false;
        };
        let now = Instant::now();
        let mut added = false;
        for addr in &seen.lan {
            let route = Route {
                kind: lan_kind(addr.ip(), &self.config.thunderbolt_interfaces),
                addr: *addr,
            };
            added |= self
                .routes
                .add_discovered(node, route, RouteSource::Mdns, now);
        }
        for addr in &seen.announcement.tailnet {
            let route = Route {
                kind: RouteKind::Tailnet,
                addr: *addr,
            };
            added |= self
                .routes
                .add_discovered(node, route, RouteSource::Txt, now);
        }
        added
    }

    /// Consumes discovery events until the stream ends.
    pub async fn follow_discovery(self: Arc<Self>, mut events: mpsc::Receiver<DiscoveryEvent>) {
        while let Some(event) = events.recv().await {
            match event {
                DiscoveryEvent::Seen {
                    announcement,
                    addrs,
                } => {
                    let node = announcement.node;
                    if node == self.node_id() {
                        continue;
                    }
                    let lan = addrs
                        .into_iter()
                        .filter(|ip| RouteKind::guess(*ip) != RouteKind::Tailnet)
                        .map(|ip| SocketAddr::new(ip, announcement.quic_port))
                        .collect();
                    debug!(peer = %node.short(), label = %announcement.label_hint, "seen on the LAN");
                    self.seen
                        .0
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(node, Seen { announcement, lan });
                    self.routes.revive_peer(node, Instant::now());
                    if self.apply_seen(node) {
                        // A new way to a trusted peer: learn what it owns.
                        let gateway = self.clone();
                        gateway.hello_all(std::time::Duration::from_secs(2)).await;
                    }
                }
                DiscoveryEvent::Gone { node } => {
                    debug!(peer = %node.short(), "said goodbye on the LAN");
                    self.seen
                        .0
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&node);
                    self.routes
                        .peer_failed(node, Instant::now(), Failure::GoingAway);
                }
            }
        }
    }
}
