//! How an owner paces its answers to followers' long polls when many follow one vault. Each
//! answered long poll costs a page read and a stream on the owner and a commit and a feed
//! wake-up on the follower, whatever the page carries: changes coming one at a time to many
//! followers would cost all that per change per follower (on a two-core box, twenty followers
//! made the owner's writes eight times slower). So with more than two followers waiting on a
//! vault, a follower's next answer with news leaves no sooner than the gather after its last
//! one and carries everything committed meanwhile; a change after a quiet still goes at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_ticket::NodeId;

/// The gathering each waiting follower past the second adds.
pub const GATHER_PER_WAITER: Duration = Duration::from_millis(3);
/// The most news is held for gathering (issue 16 bounds the 20-follower p99 at 100 ms).
pub const MAX_GATHER: Duration = Duration::from_millis(60);
/// Followers' last answers kept before the stale ones are dropped.
const PACER_ENTRIES: usize = 4096;

/// The least time between two answers with news to one follower when `waiting` followers'
/// long polls wait on the vault: nothing for one or two, then [`GATHER_PER_WAITER`] for each
/// further one, at most [`MAX_GATHER`]. Bounds the answers to one per follower per gather
/// however fast changes come.
pub fn gather_for(waiting: usize) -> Duration {
    let beyond_two = waiting.saturating_sub(2) as u32;
    (GATHER_PER_WAITER * beyond_two).min(MAX_GATHER)
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
#[derive(Debug, Default)]
pub struct PushPacer {
    answered: Mutex<HashMap<(NodeId, String), Answered>>,
    waiting: Mutex<HashMap<String, usize>>,
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
            not_before: not_before(previous, gather_for(waiting)),
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

/// The earliest a follower last answered as `previous` may be sent news again.
fn not_before(previous: Option<Answered>, gather: Duration) -> Option<Instant> {
    if gather.is_zero() {
        return None;
    }
    previous.and_then(|p| p.news_at).map(|at| at + gather)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(seed: u8) -> NodeId {
        ferry_ticket::NodeKey::from_secret_bytes([seed; 32]).node_id()
    }

    #[test]
    fn news_gathers_only_when_many_wait_and_never_past_the_bound() {
        assert_eq!(gather_for(0), Duration::ZERO);
        assert_eq!(gather_for(2), Duration::ZERO);
        assert_eq!(gather_for(3), GATHER_PER_WAITER);
        assert_eq!(gather_for(22), GATHER_PER_WAITER * 20);
        assert_eq!(gather_for(10_000), MAX_GATHER);
    }

    #[test]
    fn a_follower_is_paced_from_its_own_last_news_when_many_follow() {
        let pacer = Arc::new(PushPacer::default());
        let (a, b, c) = (node(1), node(2), node(3));
        // Two followers: never paced, even right after news.
        let t0 = Instant::now();
        pacer.answered(a, "v", t0, true);
        let _b = pacer.start(b, "v");
        let first = pacer.start(a, "v");
        assert_eq!(first.not_before, None);
        assert_eq!(first.previous_answer, Some(t0));
        // A third: `a` waits one gather from its last news; `c`, never answered, does not.
        let _c = pacer.start(c, "v");
        let paced = pacer.start(a, "v");
        assert_eq!(paced.not_before, Some(t0 + gather_for(4)));
        assert_eq!(pacer.start(c, "v").not_before, None);
        // An empty answer since does not move the pace; another vault is not paced.
        pacer.answered(a, "v", t0 + Duration::from_secs(1), false);
        let again = pacer.start(a, "v");
        assert_eq!(again.not_before, Some(t0 + gather_for(5)));
        assert_eq!(again.previous_answer, Some(t0 + Duration::from_secs(1)));
        assert_eq!(pacer.start(a, "w").not_before, None);
    }

    #[test]
    fn news_is_dated_from_the_wake_else_from_a_recent_previous_answer_else_not_at_all() {
        let pacer = Arc::new(PushPacer::default());
        let a = node(1);
        let t0 = Instant::now();
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
        let pacer = Arc::new(PushPacer::default());
        let a = node(1);
        pacer.answered(a, "v", Instant::now(), true);
        let others: Vec<_> = (2..5).map(|seed| pacer.start(node(seed), "v")).collect();
        assert!(pacer.start(a, "v").not_before.is_some());
        drop(others);
        assert_eq!(pacer.start(a, "v").not_before, None);
        // Nobody waits: nothing kept.
        assert!(pacer.waiting.lock().unwrap().is_empty());
    }
}
