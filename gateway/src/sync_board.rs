//! Every replica's sync progress (SPEC 10): its cursor, the owner's revision, when it last
//! pulled (the heartbeat) and last caught up. `ferry vault list` shows it as lag; the read path
//! asks it whether the local replica is fresh enough to answer first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A replica read here within this long is in use: its sync job keeps its questions to the
/// owner short, so the replica stays fresh enough to answer reads itself. Past it (and
/// [`NEWS_KEEPS_WARM`]) the replica is at rest, and its job asks long questions
/// (`replication`'s `LONG_POLL_AT_REST`).
pub const READ_KEEPS_WARM: Duration = Duration::from_secs(60);
/// A replica brought changes within this long is in use too: a cut under a stream of changes
/// is found as fast as ever (a short question's end), and a stream's gaps are shorter.
pub const NEWS_KEEPS_WARM: Duration = Duration::from_secs(10);

/// One replica's progress.
#[derive(Debug, Clone, Default)]
pub struct SyncStatus {
    /// The owner's revision this replica has applied everything up to.
    pub cursor: u64,
    /// The owner's revision at the last pull.
    pub owner_revision: u64,
    /// When the last pull answered (the sync job's heartbeat).
    pub last_pull: Option<Instant>,
    /// When the replica was last fully caught up.
    pub caught_up_at: Option<Instant>,
    /// Changes applied since this gateway started.
    pub applied: u64,
    pub last_error: Option<String>,
    /// When an app last read the replica here.
    pub last_read: Option<Instant>,
    /// When a page last brought changes.
    pub last_news: Option<Instant>,
    /// Rung when a replica at rest is read: its sync job cuts its long question short.
    pub nudge: Arc<tokio::sync::Notify>,
}

impl SyncStatus {
    /// Whether the replica was read within [`READ_KEEPS_WARM`] of `now`, or brought news
    /// within [`NEWS_KEEPS_WARM`].
    pub fn warm(&self, now: Instant) -> bool {
        let within = |at: Option<Instant>, span| {
            at.is_some_and(|at| now.saturating_duration_since(at) < span)
        };
        within(self.last_read, READ_KEEPS_WARM) || within(self.last_news, NEWS_KEEPS_WARM)
    }
}

/// Every replica's progress.
#[derive(Debug, Default)]
pub struct SyncBoard(Mutex<HashMap<String, SyncStatus>>);

impl SyncBoard {
    /// Changes one replica's entry.
    pub fn edit(&self, vault: &str, change: impl FnOnce(&mut SyncStatus)) {
        let mut board = self.0.lock().unwrap_or_else(|p| p.into_inner());
        change(board.entry(vault.to_string()).or_default());
    }

    /// Forgets one replica's entry (it was dropped, or is followed anew from nothing).
    pub fn forget(&self, vault: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(vault);
    }

    pub fn get(&self, vault: &str) -> Option<SyncStatus> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(vault)
            .cloned()
    }

    /// An app reads the replica of `vault` at `now`; one at rest until now wakes its sync job.
    pub fn read_at(&self, vault: &str, now: Instant) {
        let mut board = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(status) = board.get_mut(vault) {
            let was_warm = status.warm(now);
            status.last_read = Some(now);
            if !was_warm {
                status.nudge.notify_one();
            }
        }
    }

    /// How long before `now` the replica was last caught up; `None` if never (since start).
    pub fn caught_up_ago(&self, vault: &str, now: Instant) -> Option<Duration> {
        self.get(vault)?
            .caught_up_at
            .map(|at| now.saturating_duration_since(at))
    }
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): their instants are only origins.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_is_warm_a_minute_after_a_read_and_ten_seconds_after_news() {
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let mut status = SyncStatus::default();
        assert!(!status.warm(t0), "never read, never brought news: at rest");
        status.last_news = Some(t0);
        assert!(status.warm(s(9)) && !status.warm(s(10)));
        status.last_read = Some(t0);
        assert!(status.warm(s(59)) && !status.warm(s(60)));
    }

    #[tokio::test]
    async fn the_first_read_of_a_replica_at_rest_rings_its_job_and_later_ones_do_not() {
        let board = SyncBoard::default();
        board.edit("notes", |_| {});
        let nudge = board.get("notes").map(|s| s.nudge).unwrap_or_default();
        let t0 = Instant::now();
        board.read_at("notes", t0);
        let rung = tokio::time::timeout(Duration::from_secs(5), nudge.notified()).await;
        assert!(rung.is_ok(), "the first read did not ring the job");
        // Warm now: a read within the minute rings nothing.
        board.read_at("notes", t0 + Duration::from_secs(30));
        let rung = tokio::time::timeout(Duration::from_millis(50), nudge.notified()).await;
        assert!(rung.is_err(), "a read of a warm replica rang its job");
        // A read of a vault with no replica here is nothing to ring.
        board.read_at("elsewhere", t0);
        assert!(board.get("elsewhere").is_none());
    }
}
