//! How an owner paces its answers to followers' long polls when many follow one vault. Each
//! answered long poll costs a page read and a stream on the owner and a commit and a feed
//! wake-up on the follower, whatever the page carries: changes coming one at a time to many
//! followers would cost all that per change per follower (on a two-core box, twenty followers
//! made the owner's writes eight times slower). So with more than two followers waiting on a
//! vault, a follower's next answer with news waits for a tick and carries everything committed
//! meanwhile; a change after a quiet still goes at once.
//!
//! The ticks are one grid for every follower, so their answers leave together: one burst of
//! work on the owner per tick, between which its writes run undisturbed, instead of answers
//! strewn over every moment (each follower paced from its own last answer) where every write
//! meets some. The grid's period is the gather rounded up to a power of two milliseconds, so
//! the grids of different waiter counts share their ticks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_ticket::NodeId;

/// The gathering each waiting follower past the second adds.
pub const GATHER_PER_WAITER: Duration = Duration::from_millis(3);
/// The most news is held for gathering, a power of two milliseconds (a tick period). 60 ms was
/// tried (a 64 ms grid): fewer, larger pages, but twenty followers applying one together kept
/// the box busy longer after each tick, and both the owner's writes and the followers' p99 were
/// worse than with 32 (`docs/decisions.md`).
pub const MAX_GATHER: Duration = Duration::from_millis(32);
/// Followers' last answers kept before the stale ones are dropped.
const PACER_ENTRIES: usize = 4096;

/// How long news is gathered when `waiting` followers' long polls wait on the vault: nothing
/// for one or two, then [`GATHER_PER_WAITER`] for each further one, at most [`MAX_GATHER`].
pub fn gather_for(waiting: usize) -> Duration {
    let beyond_two = waiting.saturating_sub(2) as u32;
    (GATHER_PER_WAITER * beyond_two).min(MAX_GATHER)
}

/// The period of the ticks news leaves on for a `gather`: rounded up to a power of two
/// milliseconds (a 9 ms gather ticks every 16 ms), so that every period's ticks are ticks of
/// the shorter periods too, and followers that counted a different number of waiters still
/// answer together.
pub fn tick_period(gather: Duration) -> Duration {
    let ms = u64::try_from(gather.as_millis()).unwrap_or(u64::MAX).max(1);
    Duration::from_millis(ms.checked_next_power_of_two().unwrap_or(ms))
}

/// A follower's last answers for one vault.
#[derive(Debug, Clone, Copy)]
struct Answered {
    /// The last answer, with news or empty.
    at: Instant,
    /// The last answer with news.
    news_at: Option<Instant>,
}

/// Each follower's last answers and each vault's waiting followers (apps' feeds on this
/// gateway are not counted: they are never paced and cost no peer a commit).
#[derive(Debug)]
pub struct PushPacer {
    answered: Mutex<HashMap<(NodeId, String), Answered>>,
    waiting: Mutex<HashMap<String, usize>>,
    /// Where the ticks are counted from.
    origin: Instant,
}

/// A follower's long poll, counted among its vault's waiting followers while this lives.
#[derive(Debug)]
pub struct Following {
    pacer: Arc<PushPacer>,
    vault: String,
}

impl Drop for Following {
    fn drop(&mut self) {
        let mut waiting = self.pacer.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = waiting.get_mut(&self.vault) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                waiting.remove(&self.vault);
            }
        }
    }
}

/// What a follower's long poll is told when it starts.
#[derive(Debug)]
pub struct Start {
    pub following: Following,
    /// The earliest it may be sent news.
    pub not_before: Option<Instant>,
    /// Its previous answer: the news it will be sent was committed after that.
    pub previous_answer: Option<Instant>,
}

impl Start {
    /// How long before `now` the news this long poll answers with was committed, on this
    /// machine's clock: from the commit that woke the wait (`woken_at`); news already there
    /// when the follower asked was committed after its previous answer, so from that (an upper
    /// bound), unless that answer is too old to date anything (a follower back from a cut or a
    /// restart, caught up by pages of its own). `None`: the news cannot be dated.
    pub fn news_age(&self, woken_at: Option<Instant>, now: Instant) -> Option<Duration> {
        match woken_at {
            Some(at) => Some(now.saturating_duration_since(at)),
            None => self
                .previous_answer
                .map(|at| now.saturating_duration_since(at))
                .filter(|age| *age < STALE_AFTER),
        }
    }
}

impl PushPacer {
    /// A pacer counting its ticks from `origin` (now, on the door's clock).
    pub fn new(origin: Instant) -> Self {
        Self {
            answered: Mutex::default(),
            waiting: Mutex::default(),
            origin,
        }
    }

    /// `from`'s long poll of `vault` starts.
    pub fn start(self: &Arc<Self>, from: NodeId, vault: &str) -> Start {
        let waiting = {
            let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            let count = waiting.entry(vault.to_string()).or_insert(0);
            *count += 1;
            *count
        };
        let previous = self
            .answered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(from, vault.to_string()))
            .copied();
        Start {
            following: Following {
                pacer: self.clone(),
                vault: vault.to_string(),
            },
            not_before: not_before(previous, gather_for(waiting), self.origin),
            previous_answer: previous.map(|p| p.at),
        }
    }

    /// `from`'s long poll of `vault` was answered at `at`, with news or not.
    pub fn answered(&self, from: NodeId, vault: &str, at: Instant, news: bool) {
        let mut answered = self.answered.lock().unwrap_or_else(|p| p.into_inner());
        if answered.len() >= PACER_ENTRIES {
            // Answered longer ago than any gather and any long poll's wait: they pace
            // nothing any more.
            answered.retain(|_, last| at.saturating_duration_since(last.at) < STALE_AFTER);
        }
        let key = (from, vault.to_string());
        let news_at = if news {
            Some(at)
        } else {
            answered.get(&key).and_then(|last| last.news_at)
        };
        answered.insert(key, Answered { at, news_at });
    }
}

/// An entry older than this paces nothing and dates nothing (longer than any long poll).
pub const STALE_AFTER: Duration = Duration::from_secs(10);

/// How far past a follower's last news its next tick must be, in periods: `1 / LEAD_DIVISOR`.
/// A burst's answers leave at or just after their tick, so they keep the next one; a follower
/// answered just before a tick (off the grid: new, or back from a quiet) skips that one.
const LEAD_DIVISOR: u32 = 8;

/// The earliest a follower last answered as `previous` may be sent news again: the first tick
/// at least an eighth of a period after its last news. One answer with news per follower per
/// period on the grid; a follower joining the grid may have two an eighth of a period apart.
fn not_before(previous: Option<Answered>, gather: Duration, origin: Instant) -> Option<Instant> {
    if gather.is_zero() {
        return None;
    }
    let news_at = previous?.news_at?;
    let period = tick_period(gather);
    let earliest = news_at + period / LEAD_DIVISOR;
    let period_ns = period.as_nanos();
    let ticks = earliest
        .saturating_duration_since(origin)
        .as_nanos()
        .div_ceil(period_ns);
    let tick = u64::try_from(ticks * period_ns)
        .ok()
        .and_then(|ns| origin.checked_add(Duration::from_nanos(ns)));
    // Past any clock's range (never): the lead alone.
    Some(tick.unwrap_or(earliest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::clock::system_now;

    fn node(seed: u8) -> NodeId {
        ferry_ticket::NodeKey::from_secret_bytes([seed; 32]).node_id()
    }

    #[test]
    fn news_gathers_only_when_many_wait_and_never_past_the_bound() {
        assert_eq!(gather_for(0), Duration::ZERO);
        assert_eq!(gather_for(2), Duration::ZERO);
        assert_eq!(gather_for(3), GATHER_PER_WAITER);
        assert_eq!(gather_for(12), GATHER_PER_WAITER * 10);
        assert_eq!(gather_for(13), MAX_GATHER);
        assert_eq!(gather_for(10_000), MAX_GATHER);
    }

    #[test]
    fn tick_periods_are_powers_of_two_milliseconds_and_nest() {
        let ms = Duration::from_millis;
        assert_eq!(tick_period(gather_for(3)), ms(4));
        assert_eq!(tick_period(ms(16)), ms(16));
        assert_eq!(tick_period(gather_for(22)), ms(32), "the most gathered");
        assert_eq!(tick_period(Duration::from_micros(10)), ms(1));
    }

    /// `at` is the first tick at least a lead past news sent at `news_at`: within one period.
    fn assert_paced_from(news_at: Instant, at: Instant, period: Duration) {
        let lead = period / LEAD_DIVISOR;
        assert!(
            at >= news_at + lead && at < news_at + period + lead,
            "{:?} after the news",
            at - news_at
        );
    }

    /// Whether `at` is one of the pacer's ticks of `period`.
    fn on_the_grid(pacer: &PushPacer, at: Instant, period: Duration) -> bool {
        at.duration_since(pacer.origin)
            .as_nanos()
            .is_multiple_of(period.as_nanos())
    }

    #[test]
    fn a_follower_is_paced_from_its_own_last_news_when_many_follow() {
        let pacer = Arc::new(PushPacer::new(system_now()));
        let (a, b, c) = (node(1), node(2), node(3));
        // Two followers: never paced, even right after news.
        let t0 = system_now();
        pacer.answered(a, "v", t0, true);
        let _b = pacer.start(b, "v");
        let first = pacer.start(a, "v");
        assert_eq!(first.not_before, None);
        assert_eq!(first.previous_answer, Some(t0));
        // A third: `a` waits for a tick at least a lead from its last news; `c`, never answered,
        // does not wait.
        let _c = pacer.start(c, "v");
        let paced = pacer.start(a, "v");
        let period = tick_period(gather_for(4));
        let at = paced.not_before.expect("paced");
        assert_paced_from(t0, at, period);
        assert!(on_the_grid(&pacer, at, period));
        assert_eq!(pacer.start(c, "v").not_before, None);
        // An empty answer since does not move the pace; another vault is not paced.
        pacer.answered(a, "v", t0 + Duration::from_secs(1), false);
        let again = pacer.start(a, "v");
        let period = tick_period(gather_for(5));
        let at = again.not_before.expect("paced");
        assert_paced_from(t0, at, period);
        assert_eq!(again.previous_answer, Some(t0 + Duration::from_secs(1)));
        assert_eq!(pacer.start(a, "w").not_before, None);
    }

    #[test]
    fn followers_answered_apart_are_sent_their_next_news_on_one_tick() {
        let pacer = Arc::new(PushPacer::new(system_now()));
        let waiting: Vec<_> = (10..32).map(|seed| pacer.start(node(seed), "v")).collect();
        let period = tick_period(gather_for(waiting.len() + 1));
        assert_eq!(period, MAX_GATHER);
        // A tick, then a burst of answers over its first few milliseconds.
        let tick = pacer.origin + period * 100;
        let next: Vec<_> = (1..=5u8)
            .map(|seed| {
                let at = tick + Duration::from_millis(u64::from(seed));
                pacer.answered(node(seed), "v", at, true);
                pacer.start(node(seed), "v").not_before
            })
            .collect();
        assert!(next.iter().all(|at| *at == Some(tick + period)), "{next:?}");
        // Fewer waiters since: a shorter period, whose ticks include every longer one's.
        drop(waiting);
        let _few: Vec<_> = (40..44).map(|seed| pacer.start(node(seed), "v")).collect();
        let shorter = tick_period(gather_for(5));
        assert_eq!(shorter, Duration::from_millis(16));
        let at = pacer.start(node(1), "v").not_before.expect("paced");
        assert_eq!(at, tick + shorter);
        assert!(on_the_grid(&pacer, at, shorter));
    }

    #[test]
    fn news_is_dated_from_the_wake_else_from_a_recent_previous_answer_else_not_at_all() {
        let pacer = Arc::new(PushPacer::new(system_now()));
        let a = node(1);
        let t0 = system_now();
        let now = t0 + Duration::from_secs(60);
        // Never answered: news found waiting cannot be dated; news that woke the wait can.
        let first = pacer.start(a, "v");
        assert_eq!(first.news_age(None, now), None);
        let woken = now - Duration::from_millis(3);
        assert_eq!(
            first.news_age(Some(woken), now),
            Some(Duration::from_millis(3))
        );
        // Answered 2 s ago: news found waiting is at most that old.
        pacer.answered(a, "v", now - Duration::from_secs(2), false);
        let recent = pacer.start(a, "v");
        assert_eq!(recent.news_age(None, now), Some(Duration::from_secs(2)));
        assert_eq!(
            recent.news_age(Some(woken), now),
            Some(Duration::from_millis(3))
        );
        // Answered longer ago than the cut: a follower back from a restart dates nothing.
        pacer.answered(a, "w", now - STALE_AFTER, false);
        assert_eq!(pacer.start(a, "w").news_age(None, now), None);
        // A wake dated after `now` (clock read in another order) is no age, not a panic.
        assert_eq!(
            recent.news_age(Some(now + Duration::from_millis(1)), now),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn a_follower_that_stops_waiting_is_not_counted() {
        let pacer = Arc::new(PushPacer::new(system_now()));
        let a = node(1);
        pacer.answered(a, "v", system_now(), true);
        let others: Vec<_> = (2..5).map(|seed| pacer.start(node(seed), "v")).collect();
        assert!(pacer.start(a, "v").not_before.is_some());
        drop(others);
        assert_eq!(pacer.start(a, "v").not_before, None);
        // Nobody waits: nothing kept.
        assert!(pacer.waiting.lock().unwrap().is_empty());
    }
}
