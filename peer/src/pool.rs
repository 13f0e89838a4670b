//! Open connections to peers, one per (peer, address), and how recently each was heard.
//!
//! Reads reuse any open connection. Writes need more: a connection that is not *proven alive*
//! (a packet from the peer within the route's write window) may be dead without knowing it, and a
//! write sent on it could vanish into an outcome nobody can tell.
//!
//! What proves a connection is the answer to a heartbeat on it ([`Pool::answered`]), exactly
//! timed. While its peer is in use (50 ms heartbeats) a small watcher also samples the
//! connection's receive counter every [`WATCH_INTERVAL`], so the answers and acknowledgements of
//! calls in flight keep it proven when a heartbeat's answer is slow. While the peer is idle the
//! watcher only waits for the connection to close: an idle peer costs its heartbeats and no
//! timer of its own (QUIC keep-alives are off for the same reason, `crate::transport`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_ticket::NodeId;
use tokio::task::JoinSet;

use ferry_core::health::ACTIVE_INTERVAL;
use ferry_core::liveness::PooledView;

use crate::clock;
use crate::health::Failure;
use crate::route_table::RouteTable;
use crate::transport::{CLOSE_GOING_AWAY, CLOSE_UNTRUSTED};

/// How often a watcher samples its connection's receive counter while the peer is in use.
/// Bounds the error of "last heard" from below; far smaller than the write window of a peer in
/// use (125 ms).
const WATCH_INTERVAL: Duration = Duration::from_millis(50);

/// How long a connection replaced in the pool stays open for the calls still using it.
const REPLACED_GRACE: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Pooled {
    conn: quinn::Connection,
    seen: Arc<Seen>,
    /// When it joined the pool: just after its handshake completed.
    made_at: Instant,
}

/// What a connection's watcher last saw of it, kept in atomics: asking the connection itself
/// takes its lock, which its driver holds while it works, on every call.
#[derive(Debug)]
struct Seen {
    /// Milliseconds since `Pool::epoch` when a packet from the peer last arrived.
    heard_at_ms: AtomicU64,
    /// The connection has closed.
    closed: AtomicBool,
    /// The smoothed RTT in microseconds.
    rtt_us: AtomicU64,
    /// Wakes an idle watcher after a heartbeat's answer, to see whether the peer is in use now.
    wake: tokio::sync::Notify,
}

/// A pooled connection and how long ago its peer was last heard.
#[derive(Debug, Clone)]
pub struct PooledConnection {
    pub conn: quinn::Connection,
    pub heard_ago: Duration,
    /// The connection's smoothed RTT at the watcher's last look (asking the connection takes
    /// its lock).
    pub rtt: Duration,
    /// When it joined the pool, just after its handshake: a call that needs a connection newer
    /// than a break can take it if this is later.
    pub made_at: Instant,
}

impl PooledConnection {
    /// What the decisions need to know of it (`ferry_core::liveness`).
    pub fn view(&self) -> PooledView {
        PooledView {
            heard_ago: self.heard_ago,
            rtt: self.rtt,
            closed: false,
        }
    }
}

/// The connection pool. Dropping it stops every watcher.
#[derive(Debug)]
pub struct Pool {
    epoch: Instant,
    conns: Mutex<BTreeMap<(NodeId, SocketAddr), Pooled>>,
    watchers: Mutex<JoinSet<()>>,
    routes: Arc<RouteTable>,
}

impl Pool {
    /// A pool that tells `routes` when a peer closes a connection saying it is going away.
    pub fn new(routes: Arc<RouteTable>) -> Self {
        Self {
            epoch: clock::now(),
            conns: Mutex::new(BTreeMap::new()),
            watchers: Mutex::new(JoinSet::new()),
            routes,
        }
    }

    fn now_ms(&self) -> u64 {
        clock::since(self.epoch).as_millis() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(NodeId, SocketAddr), Pooled>> {
        // A panic while holding this lock leaves the map consistent (every operation is a single
        // insert or remove), so a poisoned lock is still safe to use.
        self.conns
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The open connection to `peer` at `addr`, if any. Closed ones are dropped on the way.
    /// A connection that closed a moment ago may still be returned until its watcher has run;
    /// a call on it then fails before anything is sent.
    pub fn get(&self, peer: NodeId, addr: SocketAddr) -> Option<PooledConnection> {
        let mut conns = self.lock();
        let pooled = conns.get(&(peer, addr))?;
        if pooled.seen.closed.load(Ordering::Relaxed) {
            conns.remove(&(peer, addr));
            return None;
        }
        let heard = pooled.seen.heard_at_ms.load(Ordering::Relaxed);
        Some(PooledConnection {
            conn: pooled.conn.clone(),
            heard_ago: Duration::from_millis(self.now_ms().saturating_sub(heard)),
            rtt: Duration::from_micros(pooled.seen.rtt_us.load(Ordering::Relaxed)),
            made_at: pooled.made_at,
        })
    }

    /// Adds a fresh connection (replacing any older one to the same place) and starts watching it.
    pub fn insert(&self, peer: NodeId, addr: SocketAddr, conn: quinn::Connection) {
        let seen = Arc::new(Seen {
            heard_at_ms: AtomicU64::new(self.now_ms()),
            closed: AtomicBool::new(false),
            rtt_us: AtomicU64::new(micros(conn.rtt())),
            wake: tokio::sync::Notify::new(),
        });
        let watched = conn.clone();
        let epoch = self.epoch;
        let replaced = self.lock().insert(
            (peer, addr),
            Pooled {
                conn,
                seen: seen.clone(),
                made_at: clock::now(),
            },
        );
        let mut watchers = self
            .watchers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Reap finished watchers so the set does not grow with every reconnect.
        while watchers.try_join_next().is_some() {}
        if let Some(old) = replaced.filter(|old| old.conn.stable_id() != watched.stable_id()) {
            // Two calls may dial the same place at once; the one that loses the pool slot may
            // still be carrying a request. Close it only after a grace period.
            watchers.spawn(async move {
                tokio::time::sleep(REPLACED_GRACE).await;
                old.conn.close(quinn::VarInt::from_u32(0), b"replaced");
            });
        }
        watchers.spawn(watch(watched, seen, epoch, self.routes.clone(), peer, addr));
    }

    /// A heartbeat on `conn` to `peer` at `addr` was answered just now: the connection is
    /// proven alive at this instant. Nothing happens if `conn` is no longer the pooled one.
    pub fn answered(&self, peer: NodeId, addr: SocketAddr, conn: &quinn::Connection) {
        let now_ms = self.now_ms();
        let conns = self.lock();
        let Some(pooled) = conns
            .get(&(peer, addr))
            .filter(|pooled| pooled.conn.stable_id() == conn.stable_id())
        else {
            return;
        };
        pooled.seen.heard_at_ms.fetch_max(now_ms, Ordering::Relaxed);
        pooled
            .seen
            .rtt_us
            .store(micros(conn.rtt()), Ordering::Relaxed);
        pooled.seen.wake.notify_one();
    }

    /// Whether `conn` is the connection pooled for `peer` at `addr`: the one that route's
    /// heartbeats run on, so its silence is the route's.
    pub fn is_pooled(&self, peer: NodeId, addr: SocketAddr, conn: &quinn::Connection) -> bool {
        self.lock()
            .get(&(peer, addr))
            .is_some_and(|pooled| pooled.conn.stable_id() == conn.stable_id())
    }

    /// Every open connection, for telling peers about a change.
    pub fn open_connections(&self) -> Vec<(NodeId, quinn::Connection)> {
        let mut conns = self.lock();
        conns.retain(|_, pooled| pooled.conn.close_reason().is_none());
        conns
            .iter()
            .map(|((peer, _), pooled)| (*peer, pooled.conn.clone()))
            .collect()
    }

    /// Closes and forgets every connection to `peer` (it was untrusted).
    pub fn drop_peer(&self, peer: NodeId, code: u32, reason: &[u8]) {
        self.lock().retain(|(id, _), pooled| {
            if *id == peer {
                pooled.conn.close(quinn::VarInt::from_u32(code), reason);
                false
            } else {
                true
            }
        });
    }
}

/// Follows one pooled connection until it closes: notes a close (and what it says of the
/// route), and while the peer is in use samples the receive counter every [`WATCH_INTERVAL`].
async fn watch(
    conn: quinn::Connection,
    seen: Arc<Seen>,
    epoch: Instant,
    routes: Arc<RouteTable>,
    peer: NodeId,
    addr: SocketAddr,
) {
    let mut last_count = conn.stats().udp_rx.datagrams;
    let mut ticker = tokio::time::interval(WATCH_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sampling = true;
    loop {
        let in_use = routes
            .published(peer, addr)
            .is_some_and(|published| published <= ACTIVE_INTERVAL);
        if in_use && !sampling {
            // Counted packets from the idle time are old news: a move is news only from here.
            last_count = conn.stats().udp_rx.datagrams;
            ticker.reset();
        }
        sampling = in_use;
        tokio::select! {
            // Biased: a close first, and a replayable order under simulation.
            biased;
            reason = conn.closed() => {
                seen.closed.store(true, Ordering::Relaxed);
                // A peer that says it is stopping takes its route down at once (SPEC 8).
                if let quinn::ConnectionError::ApplicationClosed(close) = &reason {
                    let why = match close.error_code.into_inner() {
                        code if code == u64::from(CLOSE_GOING_AWAY) => Some(Failure::GoingAway),
                        code if code == u64::from(CLOSE_UNTRUSTED) => {
                            Some(Failure::Failed("the peer no longer trusts this node".into()))
                        }
                        _ => None,
                    };
                    if let Some(why) = why {
                        routes.failed(peer, addr, clock::now(), why);
                    }
                }
                // A stateless reset comes from a restarted gateway that no longer knows this
                // connection: the peer is there, the connection is not. Probe at once, so the
                // route gets a new connection before the next call needs one.
                if matches!(reason, quinn::ConnectionError::Reset) {
                    routes.probe_all_now(peer, clock::now());
                }
                return;
            }
            () = seen.wake.notified(), if !sampling => {}
            _ = ticker.tick(), if sampling => {
                let stats = conn.stats();
                seen.rtt_us.store(micros(stats.path.rtt), Ordering::Relaxed);
                let count = stats.udp_rx.datagrams;
                if count != last_count {
                    last_count = count;
                    seen.heard_at_ms.fetch_max(clock::since(epoch).as_millis() as u64, Ordering::Relaxed);
                    // Any packet from the peer on the route is proof the route works: with
                    // calls in flight, their answers and acknowledgements keep it proven even
                    // when a heartbeat's answer is slow.
                    routes.heard(peer, addr, clock::now(), None);
                }
            }
        }
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
