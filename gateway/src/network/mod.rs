//! Who this gateway can reach, and how: the trusted peers ([`book`]), which of them owns or
//! replicates which vault (the directory, learned from hellos), every route to each with its
//! health (the route table), the gateways seen on the LAN ([`discovery`]), the route prober
//! ([`monitor`]), and the caller that carries calls to peers.
//!
//! A call starts by finding where its vault lives ([`Network::place_of`]): here, at a trusted
//! peer that said it owns it, or nowhere known, in which case the peers are asked once more.

pub mod book;
pub mod collisions;
pub mod discovery;
pub mod monitor;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_core::clock::Clock;
use ferry_peer::call::{Caller, Target};
use ferry_peer::route_table::RouteTable;
use ferry_peer::transport::CLOSE_UNTRUSTED;
use ferry_ticket::NodeId;
use tokio::task::JoinSet;
use tracing::debug;

use crate::names::{Label, VaultName};
use crate::store::trust::{PeerVersion, TrustedPeer};
use crate::store::vaults::VaultRow;
use crate::vaults::Vaults;
use book::{Directory, Owners, PeerBook};
pub use discovery::DiscoveryState;
use discovery::SeenPeers;

/// How long asking the peers "who owns this vault?" may take at most.
pub const DIRECTORY_REFRESH_BOUND: Duration = Duration::from_secs(2);

/// Where a vault lives, from this gateway's point of view.
#[derive(Debug, Clone)]
pub enum Place {
    /// This gateway owns or replicates it.
    Local(VaultRow),
    /// A trusted peer owns it.
    Remote(Target),
    /// Two or more trusted peers each own a vault of that name, and this gateway holds none:
    /// different vaults, none picked (`collisions`). Calls by the name are refused.
    Ambiguous(Vec<NodeId>),
}

/// The peers and the ways to them.
#[derive(Debug)]
pub struct Network {
    me: NodeId,
    label: Label,
    book: Arc<PeerBook>,
    directory: Directory,
    routes: Arc<RouteTable>,
    seen: SeenPeers,
    caller: Caller,
    vaults: Arc<Vaults>,
    /// Connections peers opened to us, so `untrust` can close them.
    incoming: Mutex<Vec<(NodeId, quinn::Connection)>>,
    thunderbolt: Vec<String>,
    clock: Arc<dyn Clock>,
    /// What each peer last said of its version (heard since start, or remembered from the
    /// database), and where a change goes to be written down.
    versions: Mutex<Versions>,
    /// Discovery's state, and since when.
    discovery: Mutex<(DiscoveryState, Instant)>,
}

/// The peers' versions and the changes not yet taken by the task that writes them down.
#[derive(Debug)]
struct Versions {
    said: HashMap<NodeId, PeerVersion>,
    log: tokio::sync::mpsc::Sender<(NodeId, PeerVersion)>,
    /// Taken once by the writing task ([`Network::version_changes`]). Until then changes wait
    /// in the channel, so none heard at start is lost.
    changes: Option<tokio::sync::mpsc::Receiver<(NodeId, PeerVersion)>>,
}

impl Versions {
    fn new() -> Self {
        let (log, changes) = tokio::sync::mpsc::channel(VERSION_LOG_BOUND);
        Self {
            said: HashMap::new(),
            log,
            changes: Some(changes),
        }
    }
}

/// Changes of peers' versions waiting to be written down. A change that finds it full is
/// dropped: the peer says its version again at its next hello, and memory has it meanwhile.
const VERSION_LOG_BOUND: usize = 256;

/// The longest release a peer's hello may name that is kept (a release is a short version
/// string; anything longer is cut, not stored whole).
const MAX_RELEASE_CHARS: usize = 64;

/// What [`Network::new`] needs.
#[derive(Debug)]
pub struct NetworkParts {
    pub me: NodeId,
    pub label: Label,
    pub book: Arc<PeerBook>,
    pub caller: Caller,
    pub vaults: Arc<Vaults>,
    pub thunderbolt: Vec<String>,
    pub clock: Arc<dyn Clock>,
}

impl Network {
    pub fn new(parts: NetworkParts) -> Self {
        let routes = parts.caller.routes().clone();
        let now = parts.clock.now();
        for peer in parts.book.all() {
            routes.set_configured(peer.node_id, &peer.routes, now);
        }
        Self {
            me: parts.me,
            label: parts.label,
            book: parts.book,
            directory: Directory::default(),
            routes,
            seen: SeenPeers::default(),
            caller: parts.caller,
            vaults: parts.vaults,
            incoming: Mutex::new(Vec::new()),
            thunderbolt: parts.thunderbolt,
            clock: parts.clock,
            versions: Mutex::new(Versions::new()),
            discovery: Mutex::new((DiscoveryState::Off, now)),
        }
    }

    /// Records how discovery started (the daemon, once), and when.
    pub fn set_discovery_state(&self, state: DiscoveryState) {
        *self.discovery.lock().unwrap_or_else(|p| p.into_inner()) = (state, self.clock.now());
    }

    pub fn discovery_state(&self) -> DiscoveryState {
        self.discovery
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// How long discovery has been in its present state: for `Running`, how long this gateway
    /// has been announcing and browsing (its start comes after the tailnet's detection, not
    /// with the process).
    pub fn discovery_for(&self) -> Duration {
        let since = self.discovery.lock().unwrap_or_else(|p| p.into_inner()).1;
        self.clock.now().saturating_duration_since(since)
    }

    fn heard_self(&self) {
        let mut state = self.discovery.lock().unwrap_or_else(|p| p.into_inner());
        if let (DiscoveryState::Running { heard_self }, _) = &mut *state {
            *heard_self = true;
        }
    }

    fn versions(&self) -> std::sync::MutexGuard<'_, Versions> {
        // Each use is one short edit of plain data; a panic cannot leave it half-done.
        self.versions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Versions remembered from the database, read at start: what was heard since start wins.
    pub fn remember_versions(&self, known: Vec<(NodeId, PeerVersion)>) {
        let mut versions = self.versions();
        for (node, version) in known {
            versions.said.entry(node).or_insert(version);
        }
    }

    /// The changes of peers' versions, for the one task that writes them down; `None` after
    /// the first call.
    pub fn version_changes(&self) -> Option<tokio::sync::mpsc::Receiver<(NodeId, PeerVersion)>> {
        self.versions().changes.take()
    }

    /// A trusted peer's hello, heard on a connection of protocol `protocol`: remembered, and
    /// queued to be written down if it changed (under the lock, so changes queue in order).
    pub fn heard_version(&self, from: NodeId, protocol: u16, release: Option<String>) {
        let release = release.map(|r| r.chars().take(MAX_RELEASE_CHARS).collect());
        let version = PeerVersion { protocol, release };
        let mut versions = self.versions();
        let changed = versions
            .said
            .insert(from, version.clone())
            .is_none_or(|before| before != version);
        if changed {
            let _ = versions.log.try_send((from, version));
        }
    }

    /// Each trusted peer with a route down for a protocol mismatch (SPEC 11), as `label: the
    /// dial's error` (which names both ranges). A route heard since is no longer counted.
    pub fn version_mismatches(&self) -> Vec<String> {
        let now = self.clock.now();
        self.book
            .all()
            .iter()
            .filter_map(|peer| {
                self.routes
                    .version_mismatch(peer.node_id, now)
                    .map(|error| format!("{}: {error}", peer.label))
            })
            .collect()
    }

    /// What `node` last said of its version.
    pub fn version_of(&self, node: &NodeId) -> Option<PeerVersion> {
        self.versions().said.get(node).cloned()
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    /// This gateway's own label.
    pub fn label(&self) -> &Label {
        &self.label
    }

    /// The trusted peers (the TLS server asks it at every handshake).
    pub fn book(&self) -> &Arc<PeerBook> {
        &self.book
    }

    /// The vaults held here, and which owners writes of each name went to.
    pub fn vaults(&self) -> &Arc<Vaults> {
        &self.vaults
    }

    /// Who owns and replicates which vault.
    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// Every route with its health.
    pub fn routes(&self) -> &Arc<RouteTable> {
        &self.routes
    }

    /// The gateways seen on the LAN.
    pub fn seen(&self) -> &SeenPeers {
        &self.seen
    }

    /// The caller that carries calls to peers.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// `node`'s label: this gateway's own, a trusted peer's, or the short id.
    pub fn label_of(&self, node: &NodeId) -> String {
        if *node == self.me {
            return self.label.to_string();
        }
        self.book
            .label_of(node)
            .map_or_else(|| node.short(), Label::into_string)
    }

    /// A call target for a trusted peer: its usable routes, best first, and the down ones. A
    /// peer whose every route is down gets no usable routes, so a write to it is refused at
    /// once, nothing sent.
    pub fn target(&self, node: &NodeId) -> Option<Target> {
        let peer = self.book.by_node(node)?;
        let (routes, down_routes) = self.routes.ranked(peer.node_id, self.clock.now());
        Some(Target {
            node: peer.node_id,
            label: peer.label,
            routes,
            down_routes,
        })
    }

    /// Exchanges hellos with every trusted peer at once, within `bound`; learns who owns what.
    /// Peers that do not answer are skipped: this is a refresh, not a requirement.
    pub async fn hello_all(self: &Arc<Self>, bound: Duration) {
        let mut asks = JoinSet::new();
        for peer in self.book.all() {
            let network = self.clone();
            asks.spawn(async move { network.hello_peer(peer.node_id, bound).await });
        }
        while asks.join_next().await.is_some() {}
    }

    /// Exchanges hellos with the trusted peer `node`, within `bound`; learns what it holds (and
    /// it learns what this gateway holds). Skipped if it does not answer.
    pub async fn hello_peer(self: &Arc<Self>, node: NodeId, bound: Duration) {
        let Some(target) = self.target(&node) else {
            return;
        };
        let hello = self.vaults.hello(&self.label);
        let deadline = self.clock.now() + bound;
        match self.caller.hello(&target, hello, deadline).await {
            Ok((theirs, protocol)) => {
                self.heard_version(target.node, protocol, theirs.release.clone());
                self.directory.learn(target.node, &theirs.owned_vaults);
                self.directory
                    .learn_replicas(target.node, &theirs.replicated_vaults);
            }
            Err(err) => debug!(peer = %target.label, %err, "hello not answered"),
        }
    }

    /// A trusted peer greeted this gateway: learn what it holds, and take its greeting as a
    /// sign of life (its routes may have come back after a restart).
    pub fn heard_hello(&self, from: NodeId, owned: &[VaultName], replicated: &[VaultName]) {
        self.directory.learn(from, owned);
        self.directory.learn_replicas(from, replicated);
        self.routes.revive_peer(from, self.clock.now());
    }

    /// Where `vault` lives: held here (owned, or followed from its one owner), else the one
    /// trusted peer that owns a vault of that name, else ambiguous if several do. Asks the
    /// peers once if nobody is known to own it; `None`: nobody trusted owns it.
    pub async fn place_of(self: &Arc<Self>, vault: &str, deadline: Instant) -> Option<Place> {
        if let Some(row) = self.vaults.get(vault) {
            return Some(Place::Local(row));
        }
        if let Some(place) = self.remote_place(vault) {
            return Some(place);
        }
        let bound = deadline
            .saturating_duration_since(self.clock.now())
            .min(DIRECTORY_REFRESH_BOUND);
        self.hello_all(bound).await;
        self.remote_place(vault)
    }

    fn remote_place(&self, vault: &str) -> Option<Place> {
        match self.directory.owners_of(vault) {
            Owners::None => None,
            Owners::One(owner) => self.target(&owner).map(Place::Remote),
            Owners::Many(owners) => Some(Place::Ambiguous(owners)),
        }
    }

    /// A peer newly trusted (already in the trust store): its routes, and any it announced on
    /// the LAN before it was trusted.
    pub fn add_peer(&self, peer: &TrustedPeer) {
        self.book.upsert(peer.clone());
        self.routes
            .set_configured(peer.node_id, &peer.routes, self.clock.now());
        self.apply_seen(peer.node_id);
    }

    /// A peer no longer trusted (already out of the trust store): forgotten, and every
    /// connection to it closed now rather than at its next idle timeout.
    pub fn remove_peer(&self, label: &Label, node: Option<NodeId>) {
        self.book.remove(label);
        let Some(node) = node else {
            return;
        };
        self.caller
            .pool()
            .drop_peer(node, CLOSE_UNTRUSTED, b"untrusted");
        self.directory.forget(node);
        self.routes.forget_peer(node);
        // Trusted again later, it is heard afresh and its row written anew.
        self.versions().said.remove(&node);
        for (peer, conn) in self
            .incoming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            if *peer == node {
                conn.close(quinn::VarInt::from_u32(CLOSE_UNTRUSTED), b"untrusted");
            }
        }
    }

    /// Remembers a connection a peer opened to us, so `untrust` can close it.
    pub fn register_incoming(&self, peer: NodeId, conn: quinn::Connection) {
        let mut incoming = self.incoming.lock().unwrap_or_else(|p| p.into_inner());
        incoming.retain(|(_, c)| c.close_reason().is_none());
        incoming.push((peer, conn));
    }

    /// The clock the network's decisions read.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}
