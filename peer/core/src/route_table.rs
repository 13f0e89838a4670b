//! Every route to every trusted peer, where it came from, and its health.
//!
//! Sources: the admin's `ferry trust --addr` (config), mDNS on the LAN, tailnet addresses from a
//! peer's mDNS TXT record, and this machine's tailnet client. Discovered routes come from
//! unauthenticated announcements, so the table bounds them (`discovered`): a few per peer,
//! forgotten when unheard, and announcements restart probes only so often. The table ranks a
//! peer's usable
//! routes for each call, proven ones first (down routes are left out: a call to a peer whose
//! every route is down is refused at once, nothing sent), and hands the prober the heartbeats
//! that are due and the instant it must look again.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferry_ticket::NodeId;
use serde::{Deserialize, Serialize};

use crate::discovered::{
    in_tailnet_range, MAX_DISCOVERED_PER_PEER, MAX_UNPROVEN, PROVE_WINDOW, REVIVE_EVERY,
    UNHEARD_EXPIRY, UNPROVEN_PACE_CAP, UNPROVEN_PACE_FIRST,
};
use crate::health::{Failure, RouteHealth, QUIET_GRID, STALL};
use crate::routes::{rank_routes, Route, RouteState, Standing};

/// Where a route came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RouteSource {
    Config,
    Mdns,
    Txt,
}

#[derive(Debug, Clone)]
struct Entry {
    route: Route,
    source: RouteSource,
    health: RouteHealth,
    carried_last_call: bool,
    /// When the route entered the table: a discovered route's time to prove itself runs from
    /// here.
    since: Instant,
    /// Heartbeats sent while the route was unproven, and the earliest the next may go (see
    /// [`Entry::unproven`]).
    unproven_probes: u32,
    unproven_pace: Option<Instant>,
}

impl Entry {
    fn new(route: Route, source: RouteSource, now: Instant) -> Self {
        Self {
            route,
            source,
            health: RouteHealth::new(now),
            carried_last_call: false,
            since: now,
            unproven_probes: 0,
            unproven_pace: None,
        }
    }

    /// A discovered route never heard: nothing says it leads to the peer (anyone can announce
    /// one). It carries no write, and its heartbeats go at a slowing pace
    /// ([`UNPROVEN_PACE_FIRST`] doubling), since each is a dial to an address a stranger may
    /// have chosen; to one where no host answers, the kernel holds the packets (charged to
    /// the peer socket every call shares) until address resolution fails.
    fn unproven(&self) -> bool {
        self.source != RouteSource::Config && self.health.last_heard().is_none()
    }

    /// Whether the pace of an unproven route holds its next heartbeat back at `now`.
    fn paced(&self, now: Instant) -> bool {
        self.unproven() && self.unproven_pace.is_some_and(|pace| now < pace)
    }

    /// A heartbeat goes out on the route at `now`: an unproven route's next waits longer.
    fn probe_sent(&mut self, now: Instant) {
        if self.unproven() {
            let wait = UNPROVEN_PACE_FIRST
                .checked_mul(1 << self.unproven_probes.min(16))
                .map_or(UNPROVEN_PACE_CAP, |wait| wait.min(UNPROVEN_PACE_CAP));
            self.unproven_pace = Some(now + wait);
            self.unproven_probes += 1;
        }
    }

    /// The latest instant the prober must look at this route again.
    fn next_wake(&self) -> Option<Instant> {
        let wake = self.health.next_wake()?;
        Some(match self.unproven_pace {
            Some(pace) if self.unproven() => wake.max(pace),
            _ => wake,
        })
    }

    /// A discovered route that has had its chance: never heard within [`PROVE_WINDOW`] of
    /// being added, or unheard for [`UNHEARD_EXPIRY`] since it last was. Configured routes are
    /// the admin's and never expire.
    fn expired(&self, now: Instant) -> bool {
        if self.source == RouteSource::Config {
            return false;
        }
        let (from, allowed) = match self.health.last_heard() {
            Some(heard) => (heard, UNHEARD_EXPIRY),
            None => (self.since, PROVE_WINDOW),
        };
        now.saturating_duration_since(from) >= allowed
    }
}

/// One route as `ferry routes` shows it.
#[derive(Debug, Clone)]
pub struct RouteView {
    pub route: Route,
    pub source: RouteSource,
    pub state: RouteState,
    pub rtt: Option<Duration>,
    pub last_heard_ago: Option<Duration>,
    pub last_error: Option<String>,
    /// The last failure was a protocol mismatch (and the route has not been heard since).
    pub no_common_version: bool,
    pub carried_last_call: bool,
}

/// The table. All methods take `now`; none does IO.
#[derive(Debug, Default)]
pub struct RouteTable {
    /// Ordered, so every walk of the table (the prober's above all) is the same from run to run.
    peers: Mutex<BTreeMap<NodeId, Vec<Entry>>>,
    bell: ProberBell,
    /// Where the grid of quiet heartbeats starts (`health::QUIET_GRID`): the first look.
    grid_epoch: Mutex<Option<Instant>>,
    /// When an announcement or goodbye last restarted each peer's probes ([`REVIVE_EVERY`]).
    /// Only peers in the table have one; forgotten with the peer.
    announced_revive: Mutex<BTreeMap<NodeId, Instant>>,
}

/// Rung when a heartbeat became due sooner than the prober may be sleeping for (a call to an
/// idle peer, a new route, a failure), so the prober sleeps until the table's next instant and
/// no longer: a table of idle peers costs no wake-ups between their heartbeats.
#[derive(Default)]
struct ProberBell(Mutex<Option<Box<dyn Fn() + Send + Sync>>>);

impl std::fmt::Debug for ProberBell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProberBell")
    }
}

impl ProberBell {
    fn ring(&self) {
        let bell = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(ring) = bell.as_ref() {
            ring();
        }
    }
}

impl RouteTable {
    /// `ring` is called whenever a heartbeat becomes due sooner than the table said before
    /// (the prober wakes on it). It must not call back into the table.
    pub fn on_sooner(&self, ring: impl Fn() + Send + Sync + 'static) {
        *self
            .bell
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Box::new(ring));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Vec<Entry>>> {
        // Each method is one short edit of plain data; a panic cannot leave it half-done.
        self.peers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets the admin's routes to `node`, keeping the health of routes that stay.
    pub fn set_configured(&self, node: NodeId, routes: &[Route], now: Instant) {
        let mut peers = self.lock();
        let entries = peers.entry(node).or_default();
        entries.retain(|e| e.source != RouteSource::Config || routes.contains(&e.route));
        for route in routes {
            if let Some(entry) = entries.iter_mut().find(|e| e.route == *route) {
                entry.source = RouteSource::Config;
            } else {
                entries.push(Entry::new(*route, RouteSource::Config, now));
            }
        }
        drop(peers);
        self.bell.ring();
    }

    /// Adds a discovered route (an upsert: rediscovering a known route changes nothing, and
    /// refreshes nothing: an announcement is no proof). Refused when the peer already has
    /// [`MAX_DISCOVERED_PER_PEER`] discovered routes, or the table [`MAX_UNPROVEN`] routes
    /// never heard, whoever they lead to (the ones there are kept: a place frees when one is
    /// heard or expires), and for a TXT route outside the tailnet's range. Returns true if it
    /// is new.
    pub fn add_discovered(
        &self,
        node: NodeId,
        route: Route,
        source: RouteSource,
        now: Instant,
    ) -> bool {
        if source == RouteSource::Txt && !in_tailnet_range(route.addr.ip()) {
            return false;
        }
        let mut peers = self.lock();
        let entries = peers.get(&node).map(Vec::as_slice).unwrap_or_default();
        if entries.iter().any(|e| e.route.addr == route.addr) {
            return false;
        }
        let discovered = entries
            .iter()
            .filter(|e| e.source != RouteSource::Config)
            .count();
        if discovered >= MAX_DISCOVERED_PER_PEER {
            return false;
        }
        let unproven = peers.values().flatten().filter(|e| e.unproven()).count();
        if unproven >= MAX_UNPROVEN {
            return false;
        }
        peers
            .entry(node)
            .or_default()
            .push(Entry::new(route, source, now));
        drop(peers);
        self.bell.ring();
        true
    }

    /// Forgets the discovered routes that had their chance (see `Entry::expired`): never
    /// heard within [`PROVE_WINDOW`], or unheard for [`UNHEARD_EXPIRY`]. Returns them.
    pub fn forget_unheard(&self, now: Instant) -> Vec<(NodeId, Route)> {
        let mut forgotten = Vec::new();
        for (node, entries) in self.lock().iter_mut() {
            entries.retain(|entry| {
                let expired = entry.expired(now);
                if expired {
                    forgotten.push((*node, entry.route));
                }
                !expired
            });
        }
        forgotten
    }

    /// Forgets every route to `node` (it was untrusted).
    pub fn forget_peer(&self, node: NodeId) {
        self.lock().remove(&node);
        self.revives().remove(&node);
    }

    fn revives(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Instant>> {
        self.announced_revive
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether an unauthenticated sign about `node` may restart its probes now: the peer is in
    /// the table, and the last such restart was at least [`REVIVE_EVERY`] ago. Counts this one.
    fn announced_restart_allowed(&self, node: NodeId, now: Instant) -> bool {
        if !self.lock().contains_key(&node) {
            return false;
        }
        let mut revives = self.revives();
        if revives
            .get(&node)
            .is_some_and(|last| now.saturating_duration_since(*last) < REVIVE_EVERY)
        {
            return false;
        }
        revives.insert(node, now);
        true
    }

    /// `node` announced itself on the LAN (anyone could have sent it): as
    /// [`RouteTable::revive_peer`], at most once per [`REVIVE_EVERY`]. Returns whether it did.
    pub fn revive_announced(&self, node: NodeId, now: Instant) -> bool {
        let allowed = self.announced_restart_allowed(node, now);
        if allowed {
            self.revive_peer(node, now);
        }
        allowed
    }

    /// `node` said goodbye on the LAN (anyone could have sent it): as
    /// [`RouteTable::probe_all_now`], sharing [`RouteTable::revive_announced`]'s pace. Returns
    /// whether it did.
    pub fn probe_announced_goodbye(&self, node: NodeId, now: Instant) -> bool {
        let allowed = self.announced_restart_allowed(node, now);
        if allowed {
            self.probe_all_now(node, now);
        }
        allowed
    }

    /// `node`'s routes, best first (SPEC 8: proven before doubtful, then kind, then RTT): the
    /// usable ones, and apart from them the down ones, the last resort of calls that are safe
    /// to repeat. Discovered routes never heard count as down, after the others: anyone could
    /// have announced them, and a write must not wait on a stranger's address.
    pub fn ranked(&self, node: NodeId, now: Instant) -> (Vec<Route>, Vec<Route>) {
        let peers = self.lock();
        let Some(entries) = peers.get(&node) else {
            return (Vec::new(), Vec::new());
        };
        let mut candidates: Vec<_> = entries
            .iter()
            .filter(|e| !e.unproven())
            .map(|e| (e.route, e.health.standing(now), e.health.rtt()))
            .collect();
        // Ranking puts down routes last, so they are the tail.
        rank_routes(&mut candidates);
        let first_down = candidates.partition_point(|(_, standing, _)| *standing != Standing::Down);
        let mut usable: Vec<Route> = candidates.into_iter().map(|(route, ..)| route).collect();
        let mut down = usable.split_off(first_down);
        down.extend(entries.iter().filter(|e| e.unproven()).map(|e| e.route));
        (usable, down)
    }

    /// The smallest smoothed RTT of `node`'s routes that are not down.
    pub fn best_rtt(&self, node: NodeId) -> Option<Duration> {
        self.lock()
            .get(&node)?
            .iter()
            .filter(|e| e.health.state() != RouteState::Down)
            .filter_map(|e| e.health.rtt())
            .min()
    }

    /// Every route to `node` for display.
    pub fn view(&self, node: NodeId, now: Instant) -> Vec<RouteView> {
        let peers = self.lock();
        peers
            .get(&node)
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| RouteView {
                        route: e.route,
                        source: e.source,
                        state: e.health.state(),
                        rtt: e.health.rtt(),
                        last_heard_ago: e
                            .health
                            .last_heard()
                            .map(|h| now.saturating_duration_since(h)),
                        last_error: e.health.last_error().map(|f| f.to_string()),
                        no_common_version: e.health.state() != RouteState::Up
                            && matches!(e.health.last_error(), Some(Failure::NoCommonVersion(_))),
                        carried_last_call: e.carried_last_call,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The dial's words if a route to `node` is down for a protocol mismatch (SPEC 11): they
    /// name both ranges. `None` once every such route has been heard again.
    pub fn version_mismatch(&self, node: NodeId, now: Instant) -> Option<String> {
        self.view(node, now)
            .into_iter()
            .find(|view| view.no_common_version)
            .and_then(|view| view.last_error)
    }

    fn with_route(&self, node: NodeId, addr: SocketAddr, edit: impl FnOnce(&mut Entry)) {
        if let Some(entry) = self
            .lock()
            .get_mut(&node)
            .and_then(|entries| entries.iter_mut().find(|e| e.route.addr == addr))
        {
            edit(entry);
        }
    }

    /// The peer answered on this route (or a packet from it arrived there).
    pub fn heard(&self, node: NodeId, addr: SocketAddr, now: Instant, rtt: Option<Duration>) {
        self.with_route(node, addr, |e| e.health.heard(now, rtt));
    }

    /// The interval last published on this route: what silence on it is measured against.
    pub fn published(&self, node: NodeId, addr: SocketAddr) -> Option<Duration> {
        let peers = self.lock();
        let entry = peers.get(&node)?.iter().find(|e| e.route.addr == addr)?;
        Some(entry.health.published())
    }

    /// A call to `node` starts (or just ended): every route to the peer counts as in use, so
    /// their heartbeats run fast from the next one on (50 ms): a route that dies under the
    /// call is known within a few intervals, and the one that would take over is warm.
    pub fn calling(&self, node: NodeId, now: Instant) {
        let mut sooner = false;
        if let Some(entries) = self.lock().get_mut(&node) {
            for entry in entries.iter_mut() {
                sooner |= entry.health.used(now);
            }
        }
        // Only the first call after a quiet rings: a call is no wake-up of its own.
        if sooner {
            self.bell.ring();
        }
    }

    /// A call went over this route and was answered: it carried the last call, and the peer
    /// was heard on it.
    pub fn carried(&self, node: NodeId, addr: SocketAddr, now: Instant) {
        if let Some(entries) = self.lock().get_mut(&node) {
            for entry in entries.iter_mut() {
                entry.carried_last_call = entry.route.addr == addr;
                if entry.carried_last_call {
                    entry.health.heard(now, None);
                }
            }
        }
    }

    /// The route failed.
    pub fn failed(&self, node: NodeId, addr: SocketAddr, now: Instant, why: Failure) {
        self.with_route(node, addr, |e| e.health.failed(now, why));
        self.bell.ring();
    }

    /// Every route to `node` failed at once (it said goodbye, or is going away).
    pub fn peer_failed(&self, node: NodeId, now: Instant, why: Failure) {
        if let Some(entries) = self.lock().get_mut(&node) {
            for entry in entries.iter_mut() {
                entry.health.failed(now, why.clone());
            }
        }
        self.bell.ring();
    }

    /// The heartbeat on this route ended (whatever it found).
    pub fn probe_finished(&self, node: NodeId, addr: SocketAddr) {
        self.with_route(node, addr, |e| e.health.probe_finished());
    }

    /// `node` is alive (it greeted us or announced itself): probe all its routes now.
    pub fn revive_peer(&self, node: NodeId, now: Instant) {
        if let Some(entries) = self.lock().get_mut(&node) {
            for entry in entries.iter_mut() {
                entry.health.revive(now);
            }
        }
        self.bell.ring();
    }

    /// Probes every route to `node` at once (one of them found the gateway not running: the
    /// others very likely lead to the same dead process).
    pub fn probe_all_now(&self, node: NodeId, now: Instant) {
        if let Some(entries) = self.lock().get_mut(&node) {
            for entry in entries.iter_mut() {
                entry.health.probe_now(now);
            }
        }
        self.bell.ring();
    }

    /// A look at the table at `now` for a wake asked for at `asked`. Came more than [`STALL`]
    /// late: this machine stalled, and the silence every route shows is ours, so each route's
    /// silence counts afresh from `now` ([`RouteHealth::restart_silence`]), so a verdict drawn
    /// at this look takes a route down only once 10 s of its silence have been excused
    /// ([`crate::health::STALL_EXCUSED_AT_MOST`]). Returns whether it stalled.
    pub fn excuse_stall(&self, asked: Instant, now: Instant) -> bool {
        self.excuse_own_silence(now.saturating_duration_since(asked) > STALL, now)
    }

    /// As [`RouteTable::excuse_stall`], for a silence this machine knows is its own some other
    /// way (`ours`: its peer socket holds datagrams it has not read yet). Returns `ours`.
    pub fn excuse_own_silence(&self, ours: bool, now: Instant) -> bool {
        if ours {
            for entry in self.lock().values_mut().flatten() {
                entry.health.restart_silence(now);
            }
        }
        ours
    }

    /// Applies the silence rule to every route; returns the routes it turned down.
    pub fn check_silence(&self, now: Instant) -> Vec<(NodeId, Route)> {
        let mut turned = Vec::new();
        for (node, entries) in self.lock().iter_mut() {
            for entry in entries.iter_mut() {
                if entry.health.check_silence(now) {
                    turned.push((*node, entry.route));
                }
            }
        }
        turned
    }

    /// The latest instant the prober must look at the table again (`None`: nothing to watch).
    pub fn next_wake(&self) -> Option<Instant> {
        self.lock()
            .values()
            .flatten()
            .filter_map(Entry::next_wake)
            .min()
    }

    /// The other routes to `node` than `addr` (one found the gateway not running; the others
    /// likely lead to the same dead process and are worth a side probe at once).
    pub fn other_routes(&self, node: NodeId, addr: SocketAddr) -> Vec<Route> {
        self.lock()
            .get(&node)
            .into_iter()
            .flatten()
            .filter(|e| e.route.addr != addr && e.health.state() != RouteState::Down)
            .map(|e| e.route)
            .collect()
    }

    /// The heartbeats due now: (peer, route, interval to publish).
    pub fn due_probes(&self, now: Instant) -> Vec<(NodeId, Route, Duration)> {
        let epoch = *self
            .grid_epoch
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get_or_insert(now);
        let mut due = Vec::new();
        for (node, entries) in self.lock().iter_mut() {
            for entry in entries.iter_mut() {
                if entry.paced(now) {
                    continue;
                }
                if let Some(interval) = entry.health.probe_due(now) {
                    entry.health.align_quiet_probe(epoch, QUIET_GRID);
                    entry.probe_sent(now);
                    due.push((*node, entry.route, interval));
                }
            }
        }
        due
    }
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use ferry_ticket::NodeKey;

    #[test]
    fn down_routes_are_left_out_and_lan_beats_tailnet() {
        let now = Instant::now();
        let table = RouteTable::default();
        let node = NodeKey::from_secret_bytes([1; 32]).node_id();
        let lan = Route::parse("10.77.0.1:7420").unwrap();
        let tailnet = Route::parse("100.77.0.1:7420").unwrap();
        table.set_configured(node, &[tailnet, lan], now);
        assert_eq!(table.ranked(node, now).0, vec![lan, tailnet]);
        table.failed(node, lan.addr, now, Failure::Silent);
        assert_eq!(table.ranked(node, now).0, vec![tailnet]);
        table.heard(node, lan.addr, now, Some(Duration::from_millis(1)));
        assert_eq!(table.ranked(node, now).0, vec![lan, tailnet]);
        table.peer_failed(node, now, Failure::GoingAway);
        assert_eq!(table.ranked(node, now).0, Vec::<Route>::new());
    }

    /// A table with one route to one peer in use, heard at `t0`.
    fn one_route_heard_at(t0: Instant) -> (RouteTable, NodeId, Route) {
        let table = RouteTable::default();
        let node = NodeKey::from_secret_bytes([1; 32]).node_id();
        let lan = Route::parse("10.77.0.1:7420").unwrap();
        table.set_configured(node, &[lan], t0);
        table.calling(node, t0);
        table.due_probes(t0);
        table.heard(node, lan.addr, t0, Some(Duration::from_millis(1)));
        (table, node, lan)
    }

    #[test]
    fn a_late_look_excuses_the_silence_of_the_stall_and_an_early_one_does_not() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (table, node, lan) = one_route_heard_at(t0);
        // On time: nothing excused, and silence over the allowance is judged.
        assert!(!table.excuse_stall(t0 + ms(350), t0 + ms(350) + STALL));
        // Asked for 50 ms after the last word, woken 2 s later: our stall, not the peer's.
        let woke = t0 + ms(2_050);
        assert!(table.excuse_stall(t0 + ms(50), woke));
        assert_eq!(table.check_silence(woke + ms(1)), vec![]);
        assert_eq!(table.check_silence(woke + ms(301)), vec![(node, lan)]);
    }

    #[test]
    fn a_silence_with_answers_unread_in_our_own_socket_is_excused_like_a_stall() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (table, node, lan) = one_route_heard_at(t0);
        // Not behind: nothing excused.
        assert!(!table.excuse_own_silence(false, t0 + ms(400)));
        // Behind at 2 s: the silence so far is ours, and counts afresh from then.
        let behind = t0 + ms(2_000);
        assert!(table.excuse_own_silence(true, behind));
        assert_eq!(table.check_silence(behind + ms(1)), vec![]);
        assert_eq!(table.check_silence(behind + ms(301)), vec![(node, lan)]);
    }

    #[test]
    fn a_gateway_behind_at_every_look_still_gives_a_dead_route_up() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (table, node, lan) = one_route_heard_at(t0);
        // Behind at every look, 25 ms apart, and the verdict drawn at each, as the prober does:
        // the route goes down once 10 s past its last word have been excused, not never.
        let down_at = (1..=1_000u64).map(|look| t0 + ms(look * 25)).find(|&now| {
            table.excuse_own_silence(true, now);
            !table.check_silence(now).is_empty()
        });
        let excused = crate::health::STALL_EXCUSED_AT_MOST;
        assert!(
            down_at.is_some_and(|at| at > t0 + excused && at <= t0 + excused + ms(400)),
            "down at {:?}",
            down_at.map(|at| at - t0)
        );
        assert_eq!(table.check_silence(t0 + excused + ms(500)), vec![]);
        let _ = (node, lan);
    }

    #[test]
    fn discovery_is_an_upsert_and_config_keeps_health() {
        let now = Instant::now();
        let table = RouteTable::default();
        let node = NodeKey::from_secret_bytes([1; 32]).node_id();
        let lan = Route::parse("10.77.0.1:7420").unwrap();
        assert!(table.add_discovered(node, lan, RouteSource::Mdns, now));
        assert!(!table.add_discovered(node, lan, RouteSource::Mdns, now));
        table.heard(node, lan.addr, now, Some(Duration::from_millis(3)));
        table.set_configured(node, &[lan], now);
        let view = table.view(node, now);
        assert_eq!(view.len(), 1);
        assert_eq!(
            (view[0].source, view[0].state),
            (RouteSource::Config, RouteState::Up)
        );
    }

    fn lan(i: u32) -> Route {
        Route::parse(&format!("10.77.{}.{}:7420", 1 + i / 200, i % 200 + 10)).unwrap()
    }

    fn discovered(table: &RouteTable, node: NodeId) -> Vec<Route> {
        let now = Instant::now();
        table
            .view(node, now)
            .into_iter()
            .filter(|v| v.source != RouteSource::Config)
            .map(|v| v.route)
            .collect()
    }

    #[test]
    fn discovered_routes_stop_at_the_cap_and_configured_ones_never_count_nor_go() {
        let now = Instant::now();
        let table = RouteTable::default();
        let node = NodeKey::from_secret_bytes([1; 32]).node_id();
        let configured = [
            Route::parse("10.77.0.1:7420").unwrap(),
            Route::parse("100.77.0.1:7420").unwrap(),
        ];
        table.set_configured(node, &configured, now);
        // A stranger announces the peer at a thousand addresses.
        let added = (0..1_000)
            .filter(|i| table.add_discovered(node, lan(*i), RouteSource::Mdns, now))
            .count();
        assert_eq!(added, MAX_DISCOVERED_PER_PEER);
        assert_eq!(
            discovered(&table, node),
            (0..8).map(lan).collect::<Vec<_>>()
        );
        let view = table.view(node, now);
        assert_eq!(view.len(), MAX_DISCOVERED_PER_PEER + configured.len());
        for route in configured {
            assert!(view
                .iter()
                .any(|v| v.route == route && v.source == RouteSource::Config));
        }
        // The admin adds one of them by hand: it is configured now, and its place frees.
        table.set_configured(node, &[configured[0], configured[1], lan(0)], now);
        assert!(table.add_discovered(node, lan(500), RouteSource::Mdns, now));
        assert!(!table.add_discovered(node, lan(501), RouteSource::Mdns, now));
        // The admin's routes are never refused, however many are discovered.
        let more: Vec<Route> = (0..20).map(|i| lan(600 + i)).collect();
        table.set_configured(node, &more, now);
        assert_eq!(
            table
                .view(node, now)
                .iter()
                .filter(|v| v.source == RouteSource::Config)
                .count(),
            20
        );
    }

    #[test]
    fn routes_never_heard_are_bounded_for_all_peers_together() {
        let now = Instant::now();
        let table = RouteTable::default();
        let peers: Vec<NodeId> = (1..=5u8)
            .map(|i| NodeKey::from_secret_bytes([i; 32]).node_id())
            .collect();
        let mut added = Vec::new();
        for (p, node) in peers.iter().enumerate() {
            for i in 0..4 {
                let route = lan(u32::try_from(p * 10 + i).unwrap());
                if table.add_discovered(*node, route, RouteSource::Mdns, now) {
                    added.push((*node, route));
                }
            }
        }
        assert_eq!(added.len(), MAX_UNPROVEN);
        let last = peers[4];
        assert!(!table.add_discovered(last, lan(99), RouteSource::Mdns, now));
        // One answers: it is proven, and its place among the unproven frees.
        let (node, route) = added[0];
        table.heard(node, route.addr, now, None);
        assert!(table.add_discovered(last, lan(99), RouteSource::Mdns, now));
    }

    #[test]
    fn an_unproven_route_carries_no_write_and_is_probed_at_a_slowing_pace() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let table = RouteTable::default();
        let node = NodeKey::from_secret_bytes([1; 32]).node_id();
        let configured = Route::parse("10.77.0.1:7420").unwrap();
        let forged = lan(0);
        table.set_configured(node, &[configured], t0);
        assert!(table.add_discovered(node, forged, RouteSource::Mdns, t0));
        // Never heard: after every route that was, even a down one, and never offered to a write.
        let (usable, down) = table.ranked(node, t0);
        assert_eq!((usable, down), (vec![configured], vec![forged]));
        // The peer is in use (heartbeats every 50 ms); the forged route never answers.
        let mut forged_probes = Vec::new();
        let mut now = t0;
        while now < t0 + PROVE_WINDOW {
            table.calling(node, now);
            for (_, route, _) in table.due_probes(now) {
                if route == forged {
                    forged_probes.push(now - t0);
                } else {
                    table.heard(node, route.addr, now, Some(ms(1)));
                }
                table.probe_finished(node, route.addr);
            }
            // The prober is never asked to wake before the pace allows: no spin.
            let wake = table.next_wake().unwrap();
            assert!(wake >= now, "asked to wake in the past at {:?}", now - t0);
            now += ms(10);
        }
        assert_eq!(forged_probes, vec![ms(0), ms(1_000), ms(3_000), ms(7_000)]);
        // Once it answers it is a route like any other, probed as the peer's use asks.
        table.heard(node, forged.addr, now, Some(ms(1)));
        assert_eq!(table.ranked(node, now).0, vec![configured, forged]);
        let mut probes = 0;
        for step in 0..100 {
            let at = now + ms(10 * step);
            table.calling(node, at);
            for (_, route, _) in table.due_probes(at) {
                probes += usize::from(route == forged);
                table.heard(node, route.addr, at, Some(ms(1)));
                table.probe_finished(node, route.addr);
            }
        }
        assert!(probes >= 15, "{probes} heartbeats in a second of use");
    }

    #[test]
    fn a_tailnet_route_from_a_txt_record_must_be_in_the_tailnet_range() {
        let now = Instant::now();
        let table = RouteTable::default();
        let node = NodeKey::from_secret_bytes([1; 32]).node_id();
        for off in ["203.0.113.9:7420", "10.77.0.9:7420", "[2001:db8::1]:7420"] {
            let route = Route::parse(&format!("{off},tailnet")).unwrap();
            assert!(
                !table.add_discovered(node, route, RouteSource::Txt, now),
                "{off}"
            );
        }
        for on in ["100.77.0.9:7420", "[fd7a:115c:a1e0::9]:7420"] {
            let route = Route::parse(on).unwrap();
            assert!(
                table.add_discovered(node, route, RouteSource::Txt, now),
                "{on}"
            );
        }
    }

    #[test]
    fn an_unheard_discovered_route_is_forgotten_and_its_place_frees() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let table = RouteTable::default();
        let node = NodeKey::from_secret_bytes([1; 32]).node_id();
        let configured = Route::parse("10.77.0.1:7420").unwrap();
        table.set_configured(node, &[configured], t0);
        for i in 0..8 {
            assert!(table.add_discovered(node, lan(i), RouteSource::Mdns, t0));
        }
        // The real one answers; the others never do, however often they are announced again.
        table.heard(node, lan(3).addr, t0 + s(1), Some(Duration::from_millis(1)));
        assert!(!table.add_discovered(node, lan(5), RouteSource::Mdns, t0 + s(9)));
        assert!(!table.add_discovered(node, lan(100), RouteSource::Mdns, t0 + s(9)));
        assert_eq!(table.forget_unheard(t0 + PROVE_WINDOW - s(1)), vec![]);
        let forgotten = table.forget_unheard(t0 + PROVE_WINDOW);
        assert_eq!(forgotten.len(), 7);
        assert!(forgotten.iter().all(|(n, r)| *n == node && *r != lan(3)));
        assert_eq!(discovered(&table, node), vec![lan(3)]);
        // Places are free again.
        assert!(table.add_discovered(node, lan(100), RouteSource::Mdns, t0 + PROVE_WINDOW));
        // A route heard once is kept through a long silence, then forgotten.
        let heard = t0 + s(1);
        assert_eq!(
            table.forget_unheard(heard + UNHEARD_EXPIRY - s(1)),
            vec![(node, lan(100))]
        );
        assert_eq!(
            table.forget_unheard(heard + UNHEARD_EXPIRY),
            vec![(node, lan(3))]
        );
        // The admin's route stays, heard or not.
        assert_eq!(table.forget_unheard(heard + UNHEARD_EXPIRY * 100), vec![]);
        assert_eq!(
            table.view(node, heard + UNHEARD_EXPIRY * 100)[0].route,
            configured
        );
    }

    #[test]
    fn announcements_restart_a_peers_probes_at_most_once_per_revive_every() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let table = RouteTable::default();
        let node = NodeKey::from_secret_bytes([1; 32]).node_id();
        let route = Route::parse("10.77.0.1:7420").unwrap();
        table.set_configured(node, &[route], t0);
        let probed_at = |now: Instant| {
            let due = table.due_probes(now);
            for (_, r, _) in &due {
                table.probe_finished(node, r.addr);
                table.failed(node, r.addr, now, Failure::Silent);
            }
            !due.is_empty()
        };
        // Down, its next probe 250 ms on.
        assert!(probed_at(t0));
        assert!(!probed_at(t0 + ms(100)));
        // An announcement: probed at once, backoff restarted.
        assert!(table.revive_announced(node, t0 + ms(100)));
        assert!(probed_at(t0 + ms(100)));
        // A flood of them: nothing more until REVIVE_EVERY has passed; a goodbye shares the pace.
        for i in 1..100u64 {
            let now = t0 + ms(100 + i * 4);
            assert!(!table.revive_announced(node, now));
            assert!(!table.probe_announced_goodbye(node, now));
        }
        assert!(!probed_at(t0 + ms(500)), "next at 100 + 500 ms");
        let later = t0 + ms(100) + REVIVE_EVERY;
        assert!(table.revive_announced(node, later));
        assert!(probed_at(later));
        // A hello is authenticated: never paced.
        table.revive_peer(node, later + ms(10));
        assert!(probed_at(later + ms(10)));
        // Strangers' node ids leave nothing behind.
        for i in 2..50u8 {
            let stranger = NodeKey::from_secret_bytes([i; 32]).node_id();
            assert!(!table.revive_announced(stranger, later));
        }
        assert_eq!(table.revives().len(), 1);
        table.forget_peer(node);
        assert_eq!(table.revives().len(), 0);
    }

    #[test]
    fn a_quiet_lan_route_is_passed_over_for_the_warm_tailnet_before_it_is_down() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let table = RouteTable::default();
        let node = NodeKey::from_secret_bytes([1; 32]).node_id();
        let lan = Route::parse("10.77.0.1:7420").unwrap();
        let tailnet = Route::parse("100.77.0.1:7420").unwrap();
        table.set_configured(node, &[lan, tailnet], t0);
        // Calls flow over the LAN; both routes are heard on every heartbeat.
        let mut now = t0;
        while now < t0 + ms(1_000) {
            table.calling(node, now);
            table.carried(node, lan.addr, now);
            for (_, route, _) in table.due_probes(now) {
                table.heard(node, route.addr, now, Some(ms(1)));
                table.probe_finished(node, route.addr);
            }
            now += ms(10);
        }
        assert_eq!(
            table.published(node, tailnet.addr),
            Some(ms(50)),
            "the tailnet is kept warm"
        );
        assert_eq!(table.ranked(node, now).0, vec![lan, tailnet]);
        // The LAN goes silent; the tailnet still answers.
        let cut = now;
        while now < cut + ms(400) {
            for (_, route, _) in table.due_probes(now) {
                if route == tailnet {
                    table.heard(node, route.addr, now, Some(ms(1)));
                }
                table.probe_finished(node, route.addr);
            }
            table.check_silence(now);
            let (usable, down) = table.ranked(node, now);
            let since = now - cut;
            if since <= ms(70) {
                assert_eq!(usable, vec![lan, tailnet], "at {since:?}");
            } else if (ms(140)..ms(240)).contains(&since) {
                assert_eq!(
                    usable,
                    vec![tailnet, lan],
                    "doubtful, not yet down, at {since:?}"
                );
            } else if since >= ms(360) {
                assert_eq!((usable, down), (vec![tailnet], vec![lan]), "at {since:?}");
            }
            now += ms(10);
        }
    }
}
