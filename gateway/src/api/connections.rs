//! How many connections the local API holds, and which one makes room when it is full.
//!
//! Any process on this machine may connect without the token, so a bare bound would let a
//! stranger fill it and lock apps out, and no bound lets it take every file the gateway may open.
//! A connection is *proven* once a request on it has shown the token (or a status page's
//! session, which only the token can mint); until then it is *unproven*. At the bound a new
//! connection takes the place of the oldest unproven one that is *waiting* (the gateway has
//! read all it sent, and its request head is still not whole), which is closed; when there is
//! none it is refused. So a stranger holds connections only until apps need them. An app's new
//! connection is unproven too until its first request is read, but it sends that request with
//! its connect: its first read finds the whole head, so it is never closed to make room before
//! its request is in, however fast a stranger reopens connections (a connection closed there
//! would leave an app's write `outcome_unknown`).
//!
//! Plain bookkeeping under one lock, taken when a connection opens, first shows the token, and
//! closes; never on a request of a proven connection. Serving is `listen`'s.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Of the open-file limit, the share kept for everything but connections (the database, the
/// peer socket, logs, refusals in progress), and the most kept.
const FILES_KEPT_SHARE: u64 = 4;
const FILES_KEPT_AT_MOST: u64 = 1024;

/// The bound in force: `configured`, held below the open-file limit so that the gateway's other
/// files keep room (a quarter of the limit, at most 1024 files). Past the limit `accept` fails
/// and the connection waits in the kernel's queue, which is how 1,100 half-sent requests once
/// kept every app out.
pub fn bound(configured: usize, file_limit: Option<u64>) -> usize {
    let Some(limit) = file_limit else {
        return configured.max(1);
    };
    let kept = (limit / FILES_KEPT_SHARE).min(FILES_KEPT_AT_MOST);
    let room = usize::try_from(limit - kept).unwrap_or(usize::MAX);
    configured.min(room).max(1)
}

/// One connection's place.
#[derive(Debug)]
pub struct Slot {
    /// Its age: smaller is older.
    id: u64,
    /// Set once, under the lock, when a request on it shows the token; read without the lock
    /// on every request after.
    proven: AtomicBool,
    /// Set, under the lock, when it is chosen to make room.
    evicted: AtomicBool,
    /// Set (without the lock) the first time a read on it finds nothing more to read: from then
    /// on, while unproven, it may make room.
    waiting: AtomicBool,
    closing: Notify,
}

impl Slot {
    /// Returns once this connection has been chosen to make room: its task then drops it.
    pub async fn made_room(&self) {
        // `notify_one` keeps its permit if nobody waits yet, so a choice made before the task
        // got here is not missed.
        self.closing.notified().await;
    }

    pub fn is_evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }

    pub fn is_proven(&self) -> bool {
        self.proven.load(Ordering::Acquire)
    }

    /// A read on this connection found nothing more to read: it waits for its client.
    pub fn waits(&self) {
        // A load first: after the first time this is a read of a line no one writes.
        if !self.waiting.load(Ordering::Relaxed) {
            self.waiting.store(true, Ordering::Relaxed);
        }
    }
}

/// A connection's hold on its place, given back when it drops (the connection's task ended,
/// however it ended).
#[derive(Debug)]
pub struct Ticket {
    connections: Arc<Connections>,
    slot: Arc<Slot>,
}

impl Ticket {
    /// A request on this connection showed the token: from now on it is never chosen to make
    /// room.
    pub fn prove(&self) {
        if !self.slot.is_proven() {
            self.connections.prove(&self.slot);
        }
    }

    pub fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    pub fn connections(&self) -> &Arc<Connections> {
        &self.connections
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.connections.leave(&self.slot);
    }
}

/// What a new connection gets.
#[derive(Debug)]
pub enum Admission {
    /// A place; `made_room` when the oldest unproven connection was closed for it.
    Admitted { ticket: Ticket, made_room: bool },
    /// No place: apps hold every one, or none of the others waits (all are still being
    /// read). The connection is refused.
    Refused,
}

/// The connections held, with counters for `/metrics`.
#[derive(Debug)]
pub struct Connections {
    bound: usize,
    held: Mutex<Held>,
    made_room: AtomicU64,
    refused: AtomicU64,
    header_timeouts: AtomicU64,
    /// Header timeouts are logged through this, as they come on every connection's task.
    timeouts_logged: Mutex<Throttle>,
}

#[derive(Debug, Default)]
struct Held {
    next_id: u64,
    proven: usize,
    /// By age, oldest first.
    unproven: BTreeMap<u64, Arc<Slot>>,
}

/// How many of the oldest unproven connections are looked at for one that waits. The oldest
/// have waited longest, so the first nearly always does; a bound keeps a burst of connections
/// not yet read from making the search long.
const EVICTION_SCAN: usize = 64;

impl Held {
    fn count(&self) -> usize {
        self.proven + self.unproven.len()
    }

    /// Chooses the oldest waiting unproven connection to close, if there is one.
    fn evict_oldest(&mut self) -> bool {
        let oldest = self
            .unproven
            .iter()
            .take(EVICTION_SCAN)
            .find(|(_, slot)| slot.waiting.load(Ordering::Relaxed))
            .map(|(id, _)| *id);
        match oldest.and_then(|id| self.unproven.remove(&id)) {
            Some(oldest) => {
                oldest.evicted.store(true, Ordering::Release);
                oldest.closing.notify_one();
                true
            }
            None => false,
        }
    }
}

impl Connections {
    pub fn new(bound: usize) -> Self {
        Self {
            bound: bound.max(1),
            held: Mutex::new(Held::default()),
            made_room: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            header_timeouts: AtomicU64::new(0),
            timeouts_logged: Mutex::new(Throttle::new(LOG_EVERY)),
        }
    }

    pub fn bound(&self) -> usize {
        self.bound
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a new connection: a free one, else the oldest waiting unproven connection's,
    /// else none.
    pub fn admit(self: &Arc<Self>) -> Admission {
        let mut held = self.held();
        let made_room = held.count() >= self.bound && held.evict_oldest();
        if made_room {
            self.made_room.fetch_add(1, Ordering::Relaxed);
        } else if held.count() >= self.bound {
            drop(held);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Admission::Refused;
        }
        let slot = Arc::new(Slot {
            id: held.next_id,
            proven: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            closing: Notify::new(),
        });
        held.next_id += 1;
        held.unproven.insert(slot.id, slot.clone());
        Admission::Admitted {
            ticket: Ticket {
                connections: self.clone(),
                slot,
            },
            made_room,
        }
    }

    /// At the bound, with no unproven connection known to wait, but some not yet read: one of
    /// those may turn out to wait (and make room) once its task has read it.
    pub fn unread_may_make_room(&self) -> bool {
        let held = self.held();
        held.count() >= self.bound
            && !held.unproven.is_empty()
            && !held
                .unproven
                .values()
                .any(|slot| slot.waiting.load(Ordering::Relaxed))
    }

    /// Closes the oldest waiting unproven connection, to free its file when `accept` found none
    /// left; false if there is none.
    pub fn make_room(&self) -> bool {
        let made = self.held().evict_oldest();
        if made {
            self.made_room.fetch_add(1, Ordering::Relaxed);
        }
        made
    }

    fn prove(&self, slot: &Slot) {
        let mut held = self.held();
        // Not there: already proven, or chosen to make room (it is closing; nothing to keep).
        if held.unproven.remove(&slot.id).is_some() {
            slot.proven.store(true, Ordering::Release);
            held.proven += 1;
        }
    }

    fn leave(&self, slot: &Slot) {
        let mut held = self.held();
        if slot.is_proven() {
            held.proven = held.proven.saturating_sub(1);
        } else {
            held.unproven.remove(&slot.id);
        }
    }

    /// Connections held now: proven, unproven.
    pub fn count(&self) -> (usize, usize) {
        let held = self.held();
        (held.proven, held.unproven.len())
    }

    /// A connection sent no whole request head in time; returns how many did since the last
    /// time this said to log one, when it is time to log again.
    pub fn header_timed_out(&self, now: Instant) -> Option<u64> {
        self.header_timeouts.fetch_add(1, Ordering::Relaxed);
        self.timeouts_logged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .note(now)
    }

    /// The series for `/metrics`.
    pub fn render(&self, out: &mut String) {
        let (proven, unproven) = self.count();
        let _ = writeln!(
            out,
            "# HELP ferry_api_connections Connections the local API holds now, by whether a request on them has shown the token.\n# TYPE ferry_api_connections gauge\nferry_api_connections{{token=\"shown\"}} {proven}\nferry_api_connections{{token=\"not_shown\"}} {unproven}"
        );
        let _ = writeln!(
            out,
            "# HELP ferry_api_connections_bound The most connections the local API holds at once.\n# TYPE ferry_api_connections_bound gauge\nferry_api_connections_bound {}",
            self.bound
        );
        let _ = writeln!(
            out,
            "# HELP ferry_api_connections_closed_total Connections the local API closed or refused: made_room (the oldest waiting without showing the token, for a new one), refused (no place: apps held them all), header_timeout (no whole request head in time).\n# TYPE ferry_api_connections_closed_total counter"
        );
        for (reason, count) in [
            ("made_room", &self.made_room),
            ("refused", &self.refused),
            ("header_timeout", &self.header_timeouts),
        ] {
            let _ = writeln!(
                out,
                "ferry_api_connections_closed_total{{reason=\"{reason}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
    }
}

/// How often a kind of connection trouble may be logged.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// Counts events and lets one log line through per `every`, which says how many came since the
/// line before: a flood of connections never becomes a flood of log lines. The first event is
/// logged at once.
#[derive(Debug)]
pub struct Throttle {
    every: Duration,
    last: Option<Instant>,
    since: u64,
}

impl Throttle {
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            since: 0,
        }
    }

    /// One more event at `now`: `Some(events since the last line)` when a line is due.
    pub fn note(&mut self, now: Instant) -> Option<u64> {
        self.since += 1;
        let due = self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= self.every);
        if !due {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.since))
    }
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): their waits are real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    /// A new connection whose first read found its request incomplete (a stranger's).
    fn admitted(connections: &Arc<Connections>) -> (Ticket, bool) {
        let (ticket, made_room) = fresh(connections);
        ticket.slot().waits();
        (ticket, made_room)
    }

    /// A new connection not read yet.
    fn fresh(connections: &Arc<Connections>) -> (Ticket, bool) {
        match connections.admit() {
            Admission::Admitted { ticket, made_room } => (ticket, made_room),
            Admission::Refused => panic!("refused"),
        }
    }

    #[test]
    fn at_the_bound_the_oldest_unproven_connection_makes_room() {
        let connections = Arc::new(Connections::new(3));
        let (app, _) = admitted(&connections);
        let (stranger_1, _) = admitted(&connections);
        let (stranger_2, made_room) = admitted(&connections);
        assert!(!made_room);
        app.prove();
        assert_eq!(connections.count(), (1, 2));
        // Full: the oldest that has not shown the token goes, not the app's older one.
        let (newcomer, made_room) = admitted(&connections);
        assert!(made_room);
        assert!(stranger_1.slot().is_evicted());
        assert!(!app.slot().is_evicted() && !stranger_2.slot().is_evicted());
        assert_eq!(connections.count(), (1, 2));
        // The evicted connection's task ends: its place is not given back twice.
        drop(stranger_1);
        assert_eq!(connections.count(), (1, 2));
        drop(newcomer);
        assert_eq!(connections.count(), (1, 1));
    }

    #[test]
    fn when_apps_hold_every_place_a_new_connection_is_refused() {
        let connections = Arc::new(Connections::new(2));
        let (a, _) = admitted(&connections);
        let (b, _) = admitted(&connections);
        a.prove();
        b.prove();
        assert!(matches!(connections.admit(), Admission::Refused));
        drop(a);
        let (c, made_room) = admitted(&connections);
        assert!(!made_room);
        assert_eq!(connections.count(), (1, 1));
        drop((b, c));
        assert_eq!(connections.count(), (0, 0));
        let mut text = String::new();
        connections.render(&mut text);
        assert!(
            text.contains("ferry_api_connections_closed_total{reason=\"refused\"} 1\n"),
            "{text}"
        );
    }

    #[test]
    fn a_stranger_churning_connections_never_closes_an_apps() {
        let connections = Arc::new(Connections::new(100));
        let (app, _) = admitted(&connections);
        app.prove();
        let mut strangers = std::collections::VecDeque::new();
        for _ in 0..10_000 {
            let (stranger, _) = admitted(&connections);
            strangers.push_back(stranger);
            // A stranger's connection chosen to make room closes.
            strangers.retain(|s| !s.slot().is_evicted());
        }
        assert!(!app.slot().is_evicted());
        assert_eq!(connections.count(), (1, 99));
    }

    #[test]
    fn a_connection_not_read_yet_never_makes_room() {
        let connections = Arc::new(Connections::new(3));
        // The app's connection, accepted, its request not read yet (its task has not run).
        let (app, _) = fresh(&connections);
        let (stranger, _) = admitted(&connections);
        let (_newer, _) = admitted(&connections);
        let (_newest, made_room) = admitted(&connections);
        assert!(made_room);
        assert!(!app.slot().is_evicted() && stranger.slot().is_evicted());
        // Only connections not read yet: the newcomer is refused rather than one closed.
        let connections = Arc::new(Connections::new(2));
        let (a, _) = fresh(&connections);
        let (b, _) = fresh(&connections);
        assert!(matches!(connections.admit(), Admission::Refused));
        assert!(!a.slot().is_evicted() && !b.slot().is_evicted());
    }

    #[test]
    fn a_connection_chosen_while_proving_stays_chosen() {
        let connections = Arc::new(Connections::new(1));
        let (first, _) = admitted(&connections);
        let (_second, made_room) = admitted(&connections);
        assert!(made_room && first.slot().is_evicted());
        // Its request showed the token after it was chosen: it still closes, and is not counted.
        first.prove();
        assert!(!first.slot().is_proven());
        assert_eq!(connections.count(), (0, 1));
    }

    #[test]
    fn make_room_frees_the_oldest_unproven_connection() {
        let connections = Arc::new(Connections::new(10));
        assert!(!connections.make_room(), "nothing to close");
        let (app, _) = admitted(&connections);
        app.prove();
        assert!(
            !connections.make_room(),
            "an app's connection is never closed"
        );
        let (stranger, _) = admitted(&connections);
        assert!(connections.make_room());
        assert!(stranger.slot().is_evicted());
    }

    #[tokio::test]
    async fn a_choice_made_before_the_task_waits_is_not_missed() {
        let connections = Arc::new(Connections::new(1));
        let (first, _) = admitted(&connections);
        let (_second, _) = admitted(&connections);
        tokio::time::timeout(Duration::from_secs(5), first.slot().made_room())
            .await
            .expect("the evicted connection is told");
    }

    #[test]
    fn the_bound_leaves_room_below_the_file_limit() {
        assert_eq!(bound(4096, None), 4096);
        assert_eq!(bound(4096, Some(1024)), 768);
        assert_eq!(bound(4096, Some(256)), 192);
        assert_eq!(bound(4096, Some(524_288)), 4096);
        assert_eq!(bound(4096, Some(8192)), 4096);
        assert_eq!(bound(100, Some(8192)), 100);
        assert_eq!(bound(4096, Some(2)), 2);
        assert_eq!(bound(0, None), 1);
    }

    #[test]
    fn the_throttle_lets_one_line_through_per_interval_with_the_count() {
        let start = Instant::now();
        let mut throttle = Throttle::new(Duration::from_secs(10));
        assert_eq!(throttle.note(start), Some(1), "the first at once");
        for ms in 1..1000 {
            assert_eq!(throttle.note(start + Duration::from_millis(ms)), None);
        }
        assert_eq!(throttle.note(start + Duration::from_secs(10)), Some(1000));
        assert_eq!(throttle.note(start + Duration::from_secs(11)), None);
        assert_eq!(throttle.note(start + Duration::from_secs(25)), Some(2));
    }
}
