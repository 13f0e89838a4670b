//! Where a read looks, in what order, and when it gives up on a source (SPEC 9).
//!
//! [`RecordRead`] is one read of one record as a state machine: the driver performs each
//! [`ReadStep`] (several may run at once: the owner and, after the hedge, the replicas) and
//! reports each source's fate as a [`ReadEvent`]. Whether an answer may be given to the app at
//! all (monotonic reads: never older than what that app already saw) is the driver's to ask of
//! `ferry_cache::MonotonicReads`; the machine only hears "admitted" or "older".
//!
//! The order: a fresh local replica → a fresh cache entry → the owner (sending the cached
//! revision, so an unchanged record costs no body) → the replicas, asked once the owner has not
//! answered within the hedge (or failed) while it may still answer → the cache's last value,
//! then a local replica that is not fresh, both marked stale → fail.
//!
//! [`attempts`] is the plan of any call that is safe to repeat on one route: a pooled
//! connection first (if its peer was heard lately) with a short attempt of its own, then one
//! fresh connection with the rest of the deadline.

use std::time::{Duration, Instant};

use crate::liveness::{fit_for_read, CallTuning, PooledView};

/// The least time the owner gets before the replicas are asked too.
pub const HEDGE_FLOOR: Duration = Duration::from_millis(50);
/// The hedge waits this many smoothed RTTs of the owner's best route.
pub const HEDGE_RTTS: u32 = 8;
/// The least time a read on a pooled connection gets before a fresh connection is tried:
/// enough for a loaded owner on a LAN, far less than a deadline.
pub const POOLED_ATTEMPT_FLOOR: Duration = Duration::from_millis(500);
/// A pooled attempt gets this many RTTs of its connection (at least the floor).
pub const POOLED_ATTEMPT_RTTS: u32 = 4;

/// The least time a call that is safe to repeat waits on one route, while that route's
/// connection stays silent, before it is sent on the next route too.
pub const ROUTE_HEDGE_FLOOR: Duration = Duration::from_millis(30);
/// The route hedge waits this many smoothed RTTs of the route.
pub const ROUTE_HEDGE_RTTS: u32 = 4;

/// How long a read (or a settle query, a ticket request, a hello) waits on a route whose
/// connection has gone quiet before it is also sent on the next route: a few RTTs, with a
/// floor above QUIC's delayed acknowledgement (25 ms), so a live path has always said
/// something by then. Reads may be sent twice; writes never are.
pub fn route_hedge_delay(rtt: Option<Duration>) -> Duration {
    rtt.map(|rtt| (rtt * ROUTE_HEDGE_RTTS).max(ROUTE_HEDGE_FLOOR))
        .unwrap_or(ROUTE_HEDGE_FLOOR)
}

/// How long the owner gets before the replicas are asked too: a few RTTs of its best route,
/// with a floor (no RTT known: the floor).
pub fn hedge_delay(best_rtt: Option<Duration>) -> Duration {
    best_rtt
        .map(|rtt| (rtt * HEDGE_RTTS).max(HEDGE_FLOOR))
        .unwrap_or(HEDGE_FLOOR)
}

/// The cache's entry for the record, as the decisions see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheView {
    pub revision: u64,
    /// A value is held (not a remembered "not found").
    pub has_value: bool,
    /// Marked stale (a write whose outcome is unknown may have changed it).
    pub stale: bool,
    pub fetched_at_ms: u64,
}

/// What the read knows before it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadStart {
    /// This gateway holds a replica of the vault; `fresh` if it caught up lately.
    pub local_replica: Option<LocalReplica>,
    pub cache: Option<CacheView>,
    /// How long a cache entry answers without asking the owner.
    pub cache_fresh_ms: u64,
    /// When to ask the replicas too; `None` when no peer replicates the vault.
    pub hedge: Option<Duration>,
}

/// A local replica of the vault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalReplica {
    pub fresh: bool,
}

/// What the driver should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadStep {
    /// Offer the local replica's answer to the app (`stale`: marked so).
    OfferLocal { stale: bool },
    /// Offer the cache's entry to the app (`stale`: marked so).
    OfferCache { stale: bool },
    /// Ask the owner, with the revision whose body the cache holds (an unchanged record then
    /// comes back without a body).
    AskOwner { known_revision: Option<u64> },
    /// Ask the peers that replicate the vault (their answers are stale).
    AskReplicas,
    /// Wake the machine at this instant, unless an answer comes first.
    WakeAt(Instant),
    /// The last source the driver reported `Admitted` for is the answer.
    Answer,
    /// No source could answer: fail with the owner's failure.
    Fail,
}

/// Which source an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadSource {
    Local,
    Cache,
    Owner,
    Replicas,
}

/// What became of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadEvent {
    /// The source answered and the app may be given it.
    Admitted(ReadSource),
    /// The source answered something older than what the app already saw (or, for the
    /// replicas, none of them answered usefully).
    Passed(ReadSource),
    /// The owner refused the read on its merits (no such vault, forbidden): final.
    OwnerRefused,
    /// The owner could not be reached or did not answer in time.
    OwnerFailed,
    /// The instant asked for with `WakeAt` came.
    Woke,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    NotAsked,
    Pending,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Offering a fresh local replica or a fresh cache entry.
    Fresh,
    /// The owner (and maybe the replicas) asked.
    Remote,
    /// Offering the stale fallbacks: the cache, then the local replica.
    Fallback {
        cache_offered: bool,
        local_offered: bool,
    },
    Over,
}

/// One read of one record.
#[derive(Debug, Clone)]
pub struct RecordRead {
    start: ReadStart,
    now_ms: u64,
    phase: Phase,
    owner: Fate,
    replicas: Fate,
    cache_fresh_offered: bool,
    local_fresh_offered: bool,
}

impl RecordRead {
    /// Starts a read at `now` (wall time `now_ms`, for the cache's age); the first steps.
    pub fn start(start: ReadStart, now: Instant, now_ms: u64) -> (Self, Vec<ReadStep>) {
        let mut read = Self {
            start,
            now_ms,
            phase: Phase::Fresh,
            owner: Fate::NotAsked,
            replicas: Fate::NotAsked,
            cache_fresh_offered: false,
            local_fresh_offered: false,
        };
        let steps = read.fresh_or_remote(now);
        (read, steps)
    }

    fn cache_is_fresh(&self) -> bool {
        self.start.cache.is_some_and(|c| {
            !c.stale && self.now_ms.saturating_sub(c.fetched_at_ms) < self.start.cache_fresh_ms
        })
    }

    /// The next fresh source, or the owner.
    fn fresh_or_remote(&mut self, now: Instant) -> Vec<ReadStep> {
        if !self.local_fresh_offered && self.start.local_replica.is_some_and(|r| r.fresh) {
            self.local_fresh_offered = true;
            return vec![ReadStep::OfferLocal { stale: false }];
        }
        if !self.cache_fresh_offered && self.cache_is_fresh() {
            self.cache_fresh_offered = true;
            return vec![ReadStep::OfferCache { stale: false }];
        }
        self.phase = Phase::Remote;
        self.owner = Fate::Pending;
        let known_revision = self.start.cache.filter(|c| c.has_value).map(|c| c.revision);
        let mut steps = vec![ReadStep::AskOwner { known_revision }];
        // With no replica to turn to, no hedge timer either.
        if let Some(hedge) = self.start.hedge {
            steps.push(ReadStep::WakeAt(now + hedge));
        }
        steps
    }

    fn ask_replicas(&mut self) -> Vec<ReadStep> {
        self.replicas = Fate::Pending;
        vec![ReadStep::AskReplicas]
    }

    /// After the owner gave nothing usable: the replicas if not asked yet, else (once they are
    /// done too) the stale fallbacks.
    fn after_owner(&mut self) -> Vec<ReadStep> {
        match self.replicas {
            Fate::NotAsked if self.start.hedge.is_some() => self.ask_replicas(),
            Fate::Pending => Vec::new(),
            _ => self.fallback(),
        }
    }

    /// The stale fallbacks in order: the cache's value, then a local replica; then fail.
    fn fallback(&mut self) -> Vec<ReadStep> {
        let (cache_offered, local_offered) = match self.phase {
            Phase::Fallback {
                cache_offered,
                local_offered,
            } => (cache_offered, local_offered),
            _ => (false, false),
        };
        if !cache_offered && self.start.cache.is_some_and(|c| c.has_value) {
            self.phase = Phase::Fallback {
                cache_offered: true,
                local_offered,
            };
            return vec![ReadStep::OfferCache { stale: true }];
        }
        if !local_offered && self.start.local_replica.is_some() {
            self.phase = Phase::Fallback {
                cache_offered: true,
                local_offered: true,
            };
            return vec![ReadStep::OfferLocal { stale: true }];
        }
        self.phase = Phase::Over;
        vec![ReadStep::Fail]
    }

    /// Feeds what happened; returns what to do next (nothing: wait for the next event).
    pub fn on(&mut self, event: ReadEvent, now: Instant) -> Vec<ReadStep> {
        if self.phase == Phase::Over {
            return Vec::new();
        }
        match event {
            ReadEvent::Admitted(_) => {
                self.phase = Phase::Over;
                vec![ReadStep::Answer]
            }
            ReadEvent::Passed(ReadSource::Local | ReadSource::Cache) => match self.phase {
                Phase::Fresh => self.fresh_or_remote(now),
                Phase::Fallback { .. } => self.fallback(),
                _ => Vec::new(),
            },
            ReadEvent::Passed(ReadSource::Owner) | ReadEvent::OwnerFailed => {
                self.owner = Fate::Done;
                self.after_owner()
            }
            ReadEvent::OwnerRefused => {
                self.phase = Phase::Over;
                vec![ReadStep::Fail]
            }
            ReadEvent::Passed(ReadSource::Replicas) => {
                self.replicas = Fate::Done;
                if self.owner == Fate::Pending {
                    Vec::new()
                } else {
                    self.fallback()
                }
            }
            ReadEvent::Woke => {
                if self.owner == Fate::Pending && self.replicas == Fate::NotAsked {
                    self.ask_replicas()
                } else {
                    Vec::new()
                }
            }
        }
    }
}

/// One attempt of a call that is safe to repeat, on one route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// On the pooled connection, giving up on it at `until`.
    Pooled { until: Instant },
    /// On a fresh connection, with the rest of the deadline.
    Fresh,
}

/// The attempts on one route: a pooled connection first if its peer was heard lately (and
/// `fresh_only` is not asked: after a break the pooled one may be the dead one), with a short
/// attempt of its own so a dead one costs little; then one fresh connection (SPEC 9).
pub fn attempts(
    pooled: Option<&PooledView>,
    fresh_only: bool,
    now: Instant,
    deadline: Instant,
    tuning: &CallTuning,
) -> Vec<Attempt> {
    let mut plan = Vec::with_capacity(2);
    if let Some(pooled) = pooled.filter(|p| !fresh_only && fit_for_read(p, tuning)) {
        let bound = (pooled.rtt * POOLED_ATTEMPT_RTTS).max(POOLED_ATTEMPT_FLOOR);
        plan.push(Attempt::Pooled {
            until: deadline.min(now + bound),
        });
    }
    plan.push(Attempt::Fresh);
    plan
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    fn cache(fetched_at_ms: u64, stale: bool) -> Option<CacheView> {
        Some(CacheView {
            revision: 4,
            has_value: true,
            stale,
            fetched_at_ms,
        })
    }

    fn start(cache: Option<CacheView>, hedge: Option<Duration>) -> ReadStart {
        ReadStart {
            local_replica: None,
            cache,
            cache_fresh_ms: 1000,
            hedge,
        }
    }

    #[test]
    fn a_fresh_cache_answers_alone_and_an_older_one_goes_to_the_owner() {
        let now = Instant::now();
        let (mut read, steps) = RecordRead::start(start(cache(9_500, false), None), now, 10_000);
        assert_eq!(steps, vec![ReadStep::OfferCache { stale: false }]);
        assert_eq!(
            read.on(ReadEvent::Passed(ReadSource::Cache), now),
            vec![ReadStep::AskOwner {
                known_revision: Some(4)
            }]
        );
        assert_eq!(
            read.on(ReadEvent::Admitted(ReadSource::Owner), now),
            vec![ReadStep::Answer]
        );
    }

    #[test]
    fn a_slow_owner_is_hedged_with_the_replicas_and_the_stale_cache_is_last() {
        let now = Instant::now();
        let hedge = Duration::from_millis(50);
        let (mut read, steps) = RecordRead::start(start(cache(0, false), Some(hedge)), now, 10_000);
        assert_eq!(
            steps,
            vec![
                ReadStep::AskOwner {
                    known_revision: Some(4)
                },
                ReadStep::WakeAt(now + hedge)
            ]
        );
        assert_eq!(
            read.on(ReadEvent::Woke, now + hedge),
            vec![ReadStep::AskReplicas]
        );
        // Both fail: the cache's last value, marked stale.
        assert!(read
            .on(ReadEvent::Passed(ReadSource::Replicas), now)
            .is_empty());
        assert_eq!(
            read.on(ReadEvent::OwnerFailed, now),
            vec![ReadStep::OfferCache { stale: true }]
        );
        assert_eq!(
            read.on(ReadEvent::Passed(ReadSource::Cache), now),
            vec![ReadStep::Fail]
        );
    }

    #[test]
    fn with_no_replica_there_is_no_hedge_and_a_refusal_is_final() {
        let now = Instant::now();
        let (mut read, steps) = RecordRead::start(start(None, None), now, 0);
        assert_eq!(
            steps,
            vec![ReadStep::AskOwner {
                known_revision: None
            }]
        );
        assert_eq!(read.on(ReadEvent::OwnerRefused, now), vec![ReadStep::Fail]);
        assert!(read.on(ReadEvent::Woke, now).is_empty(), "over is over");
    }

    #[test]
    fn a_fresh_local_replica_answers_first_and_a_stale_one_comes_after_the_cache() {
        let now = Instant::now();
        let with_local = |fresh| ReadStart {
            local_replica: Some(LocalReplica { fresh }),
            ..start(cache(0, true), None)
        };
        let (_, steps) = RecordRead::start(with_local(true), now, 10_000);
        assert_eq!(steps, vec![ReadStep::OfferLocal { stale: false }]);
        let (mut read, steps) = RecordRead::start(with_local(false), now, 10_000);
        assert!(matches!(steps[0], ReadStep::AskOwner { .. }));
        assert_eq!(
            read.on(ReadEvent::OwnerFailed, now),
            vec![ReadStep::OfferCache { stale: true }]
        );
        assert_eq!(
            read.on(ReadEvent::Passed(ReadSource::Cache), now),
            vec![ReadStep::OfferLocal { stale: true }]
        );
        assert_eq!(
            read.on(ReadEvent::Passed(ReadSource::Local), now),
            vec![ReadStep::Fail]
        );
    }

    #[test]
    fn a_pooled_connection_gets_a_short_attempt_then_a_fresh_one_the_rest() {
        let now = Instant::now();
        let deadline = now + Duration::from_secs(30);
        let tuning = CallTuning::default();
        let pooled = PooledView {
            heard_ago: Duration::from_millis(10),
            rtt: Duration::from_millis(1),
            closed: false,
        };
        assert_eq!(
            attempts(Some(&pooled), false, now, deadline, &tuning),
            vec![
                Attempt::Pooled {
                    until: now + POOLED_ATTEMPT_FLOOR
                },
                Attempt::Fresh
            ]
        );
        assert_eq!(
            attempts(Some(&pooled), true, now, deadline, &tuning),
            vec![Attempt::Fresh]
        );
        // Unheard for longer than two of the slowest heartbeat intervals.
        let silent = PooledView {
            heard_ago: crate::liveness::READ_LIVENESS + Duration::from_millis(1),
            ..pooled
        };
        assert_eq!(
            attempts(Some(&silent), false, now, deadline, &tuning),
            vec![Attempt::Fresh]
        );
    }

    #[test]
    fn the_hedge_is_eight_rtts_with_a_floor() {
        assert_eq!(hedge_delay(None), HEDGE_FLOOR);
        assert_eq!(hedge_delay(Some(Duration::from_millis(1))), HEDGE_FLOOR);
        assert_eq!(
            hedge_delay(Some(Duration::from_millis(10))),
            Duration::from_millis(80)
        );
    }
}
