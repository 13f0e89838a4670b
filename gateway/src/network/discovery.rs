//! What the gateway does with discovery: announce itself, remember every gateway seen
//! (trusted or not, for `ferry peers`), and turn a trusted peer's announcements into routes
//! (its LAN addresses as `lan` or `thunderbolt`, its TXT tailnet addresses as `tailnet`).
//! Nothing on mDNS is authenticated: anyone on the LAN can announce a node id or say goodbye for
//! it. So an announcement or a goodbye only ever makes this gateway *probe* that peer's routes
//! (a heartbeat over mutual TLS, which only the real peer can answer); it never marks a route
//! down by itself. A peer that really stopped closed its QUIC connections with "going away"
//! (authenticated) and its port now refuses the probe, so it is still down in milliseconds.
//! The table of gateways seen is bounded, and so is what announcements do to a trusted peer's
//! routes (`ferry_core::discovered`: plausible addresses only, a few routes per peer, unheard
//! ones forgotten, probes restarted at a pace), so a flood of made-up announcements costs
//! little. Nothing slow runs in the loop that reads the events: the directory refresh a new
//! route calls for runs beside it, one at a time.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ferry_peer::discovery::{Announcement, DiscoveryEvent};
use ferry_peer::route_table::{RouteSource, RouteTable};
use ferry_peer::routes::{Route, RouteKind};
use ferry_ticket::NodeId;
use tokio::sync::{mpsc, Notify};
use tracing::debug;

use super::Network;

/// A gateway seen on the LAN.
#[derive(Debug, Clone)]
pub struct Seen {
    pub announcement: Announcement,
    pub lan: Vec<SocketAddr>,
    /// When it was last announced.
    pub at: Instant,
}

/// How many gateways the seen table holds; past it, the one announced longest ago that is not
/// trusted makes room.
pub const MAX_SEEN: usize = 256;

/// How discovery stands, for `ferry doctor` and `/v1/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiscoveryState {
    /// `--no-mdns` or `mdns = false`.
    Off,
    /// Announcing and browsing; `heard_self` once this gateway's own announcement came back
    /// (multicast leaves and arrives on this machine).
    Running { heard_self: bool },
    /// It could not start: the error.
    Failed(String),
}

/// The state in a few words, as `/v1/status` shows it (`ferry doctor` says more, with fixes).
impl std::fmt::Display for DiscoveryState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Off => f.write_str("off"),
            Self::Running { heard_self: false } => f.write_str("running"),
            Self::Running { heard_self: true } => f.write_str("running (own announcement heard)"),
            Self::Failed(err) => write!(f, "failed: {err}"),
        }
    }
}

/// Everything seen, by node.
#[derive(Debug, Default)]
pub struct SeenPeers(Mutex<HashMap<NodeId, Seen>>);

impl SeenPeers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Seen>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records an announcement; when the table is full, forgets the untrusted gateway announced
    /// longest ago (a trusted peer's entry is never pushed out by strangers).
    pub fn record(&self, seen: Seen, trusted: impl Fn(&NodeId) -> bool) {
        let mut table = self.lock();
        let node = seen.announcement.node;
        if !table.contains_key(&node) && table.len() >= MAX_SEEN {
            let oldest = table
                .iter()
                .filter(|(node, _)| !trusted(node))
                .min_by_key(|(_, seen)| seen.at)
                .map(|(node, _)| *node);
            match oldest {
                Some(oldest) => {
                    table.remove(&oldest);
                }
                // Full of trusted peers: a stranger has no place.
                None if !trusted(&node) => return,
                None => {}
            }
        }
        table.insert(node, seen);
    }

    /// Forgets a gateway (it said goodbye).
    pub fn forget(&self, node: &NodeId) {
        self.lock().remove(node);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
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

/// The subnets of the configured thunderbolt interfaces (IPv4 address and netmask), read once
/// per announcement.
fn thunderbolt_subnets(thunderbolt: &[String]) -> Vec<(u32, u32)> {
    if thunderbolt.is_empty() {
        return Vec::new();
    }
    if_addrs::get_if_addrs()
        .unwrap_or_default()
        .into_iter()
        .filter(|i| thunderbolt.contains(&i.name))
        .filter_map(|i| match i.addr {
            if_addrs::IfAddr::V4(v4) => Some((u32::from(v4.ip), u32::from(v4.netmask))),
            _ => None,
        })
        .collect()
}

/// The kind of a route to `ip`: `thunderbolt` if it is on the subnet of a configured
/// thunderbolt interface, else `lan`.
fn lan_kind(ip: IpAddr, thunderbolt: &[(u32, u32)]) -> RouteKind {
    let on_thunderbolt = match ip {
        IpAddr::V4(peer) => thunderbolt
            .iter()
            .any(|(mine, mask)| mine & mask == u32::from(peer) & mask),
        IpAddr::V6(_) => false,
    };
    if on_thunderbolt {
        RouteKind::Thunderbolt
    } else {
        RouteKind::Lan
    }
}

impl Network {
    /// Adds the routes a trusted peer announced, as far as the route table's bounds allow.
    /// Returns true if any is new.
    pub fn apply_seen(&self, node: NodeId) -> bool {
        if self.book.by_node(&node).is_none() {
            return false;
        }
        let Some(seen) = self.seen.get(&node) else {
            return false;
        };
        let now = self.clock.now();
        let thunderbolt = thunderbolt_subnets(&self.thunderbolt);
        let lan = seen.lan.iter().map(|addr| {
            let kind = lan_kind(addr.ip(), &thunderbolt);
            (Route { kind, addr: *addr }, RouteSource::Mdns)
        });
        let tailnet = seen.announcement.tailnet.iter().map(|addr| {
            let kind = RouteKind::Tailnet;
            (Route { kind, addr: *addr }, RouteSource::Txt)
        });
        let mut added = false;
        for (route, source) in lan.chain(tailnet) {
            added |= self.routes.add_discovered(node, route, source, now);
        }
        added
    }

    /// Consumes discovery events until the stream ends. A new route to a trusted peer asks
    /// for a directory refresh (hellos to every trusted peer); that runs beside the loop, one
    /// at a time, and the asks that come while one runs make one more after it.
    pub async fn follow_discovery(self: Arc<Self>, mut events: mpsc::Receiver<DiscoveryEvent>) {
        let refresh = Notify::new();
        let follow = async {
            while let Some(event) = events.recv().await {
                if self.on_discovery_event(event) {
                    refresh.notify_one();
                }
            }
        };
        tokio::select! {
            () = follow => {}
            () = self.refresh_directory_when_asked(&refresh) => {}
        }
    }

    /// Runs a directory refresh each time `asked` is notified (never returns).
    async fn refresh_directory_when_asked(self: &Arc<Self>, asked: &Notify) {
        loop {
            asked.notified().await;
            self.hello_all(super::DIRECTORY_REFRESH_BOUND).await;
        }
    }

    /// Takes one discovery event in; nothing here waits. Returns whether it brought a new way
    /// to a trusted peer (worth learning again what it owns).
    fn on_discovery_event(&self, event: DiscoveryEvent) -> bool {
        match event {
            DiscoveryEvent::Seen {
                announcement,
                addrs,
            } => {
                let node = announcement.node;
                if node == self.me {
                    // Our own announcement, back through the network stack: multicast
                    // works on this machine.
                    self.heard_self();
                    return false;
                }
                let lan = addrs
                    .into_iter()
                    .filter(|ip| RouteKind::guess(*ip) != RouteKind::Tailnet)
                    .map(|ip| SocketAddr::new(ip, announcement.quic_port))
                    .collect();
                debug!(peer = %node.short(), label = %announcement.label_hint, "seen on the LAN");
                let book = self.book.clone();
                self.seen.record(
                    Seen {
                        announcement,
                        lan,
                        at: self.clock.now(),
                    },
                    |node| book.by_node(node).is_some(),
                );
                if self.book.by_node(&node).is_none() {
                    return false;
                }
                self.routes.revive_announced(node, self.clock.now());
                self.apply_seen(node)
            }
            DiscoveryEvent::Gone { node } => {
                debug!(peer = %node.short(), "said goodbye on the LAN");
                heard_goodbye(&self.seen, &self.routes, node, self.clock.now());
                false
            }
        }
    }
}

/// An mDNS goodbye for `node`: unauthenticated, so it only sends every route to that peer to
/// be probed at once (see the module doc), at the pace the route table allows.
pub fn heard_goodbye(seen: &SeenPeers, routes: &RouteTable, node: NodeId, now: Instant) {
    seen.forget(&node);
    routes.probe_announced_goodbye(node, now);
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use ferry_peer::routes::RouteState;
    use ferry_ticket::NodeKey;

    fn node(i: u8) -> NodeId {
        NodeKey::from_secret_bytes([i; 32]).node_id()
    }

    fn seen(node: NodeId, at: Instant) -> Seen {
        Seen {
            announcement: Announcement {
                node,
                protocol: 1,
                quic_port: 7420,
                label_hint: "x".into(),
                tailnet: Vec::new(),
            },
            lan: Vec::new(),
            at,
        }
    }

    #[test]
    fn a_goodbye_anyone_could_have_sent_never_takes_a_route_down() {
        let now = Instant::now();
        let (peers, routes) = (SeenPeers::default(), RouteTable::default());
        let victim = node(1);
        let route = Route::parse("10.1.0.1:7420").unwrap();
        routes.set_configured(victim, &[route], now);
        routes.heard(
            victim,
            route.addr,
            now,
            Some(std::time::Duration::from_millis(1)),
        );
        heard_goodbye(&peers, &routes, victim, now);
        assert_eq!(routes.ranked(victim, now).0, vec![route], "still usable");
        assert_eq!(routes.view(victim, now)[0].state, RouteState::Up);
        // ...but it is probed now, so a peer that really stopped is found down at once.
        assert!(routes
            .due_probes(now)
            .iter()
            .any(|(n, r, _)| *n == victim && *r == route));
    }

    #[test]
    fn the_seen_table_is_bounded_and_keeps_trusted_peers() {
        let table = SeenPeers::default();
        let start = Instant::now();
        let trusted = node(200);
        table.record(seen(trusted, start), |_| false);
        for i in 0..1000u32 {
            let mut bytes = [7u8; 32];
            bytes[..4].copy_from_slice(&i.to_be_bytes());
            let stranger = NodeKey::from_secret_bytes(bytes).node_id();
            table.record(
                seen(
                    stranger,
                    start + std::time::Duration::from_millis(u64::from(i) + 1),
                ),
                |n| *n == trusted,
            );
        }
        assert_eq!(table.len(), MAX_SEEN);
        assert!(
            table.get(&trusted).is_some(),
            "a trusted peer is never pushed out"
        );
    }
}
