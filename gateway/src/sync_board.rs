//! Every replica's sync progress (SPEC 10): its cursor, the owner's revision, when it last
//! pulled (the heartbeat) and last caught up. `ferry vault list` shows it as lag; the read path
//! asks it whether the local replica is fresh enough to answer first.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

    /// How long before `now` the replica was last caught up; `None` if never (since start).
    pub fn caught_up_ago(&self, vault: &str, now: Instant) -> Option<Duration> {
        self.get(vault)?
            .caught_up_at
            .map(|at| now.saturating_duration_since(at))
    }
}
