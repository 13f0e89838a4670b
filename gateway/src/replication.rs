//! Replicas (SPEC 10): a replica pulls its owner's change log in pages, as background reads
//! through the pool and the read path's route fallbacks (never the write path), and applies
//! each page and moves its cursor in one SQLite transaction, so after any crash it resumes
//! exactly where it stopped. Deletes arrive as tombstones and are applied as such.
//!
//! The [`SyncBoard`] keeps each replica's progress: its cursor, the owner's revision, when it
//! last pulled (the heartbeat) and last caught up, for `ferry vault list` and for deciding
//! whether the local replica is fresh enough to answer reads first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_peer::wire::{ReadAnswer, ReadRequest, ReadVerb};
use ferry_ticket::NodeId;
use tracing::{debug, info};

use crate::gateway::Gateway;
use crate::store::{self, vaults};

/// Changes pulled per page (also bounded by bytes on the owner).
const PAGE: u32 = 1000;
/// How often a caught-up replica asks for more.
const PULL_INTERVAL: Duration = Duration::from_millis(500);
/// The wait after a failed pull before the next.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// One page's deadline.
const PAGE_DEADLINE: Duration = Duration::from_secs(10);
/// The app name replication reads as.
const APP: &str = "ferry-replication";

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
    fn edit(&self, vault: &str, change: impl FnOnce(&mut SyncStatus)) {
        let mut board = self.0.lock().unwrap_or_else(|p| p.into_inner());
        change(board.entry(vault.to_string()).or_default());
    }

    pub fn get(&self, vault: &str) -> Option<SyncStatus> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(vault)
            .cloned()
    }

    /// How long ago the replica was last caught up; `None` if never (since start).
    pub fn caught_up_ago(&self, vault: &str) -> Option<Duration> {
        self.get(vault)?.caught_up_at.map(|at| at.elapsed())
    }
}

impl Gateway {
    /// `ferry vault follow`: starts replicating `vault` from the trusted peer `owner_label`.
    pub async fn follow(
        self: &Arc<Self>,
        vault: String,
        owner_label: String,
    ) -> Result<vaults::VaultRow, String> {
        let owner = self
            .peers
            .all()
            .into_iter()
            .find(|p| p.label == owner_label)
            .map(|p| p.node_id)
            .ok_or_else(|| {
                format!(
                    "no peer is trusted under the label {owner_label:?}; `ferry peers` lists them"
                )
            })?;
        let name = vault.clone();
        let row = self
            .reader
            .run(move |conn| vaults::create_replica(conn, &name, owner, store::unix_ms()))
            .await
            .map_err(|err| err.to_string())?;
        self.remember_local_vault(row.clone());
        // Whatever the cache held for this vault now has a better source.
        self.cache().invalidate_vault(&vault);
        self.start_sync(vault, owner);
        self.hello_all(Duration::from_secs(2)).await;
        Ok(row)
    }

    /// Starts the sync job of a replicated vault (at start, for every replica; on follow).
    pub fn start_sync(self: &Arc<Self>, vault: String, owner: NodeId) {
        let gateway = self.clone();
        self.spawn_background(async move { gateway.sync_forever(vault, owner).await });
    }

    async fn sync_forever(self: Arc<Self>, vault: String, owner: NodeId) {
        let mut cursor = self
            .local_vault_rows()
            .into_iter()
            .find(|v| v.name == vault)
            .map_or(0, |v| v.revision);
        self.sync.edit(&vault, |s| s.cursor = cursor);
        let mut stopping = self.stopping();
        info!(%vault, cursor, "replica sync started");
        loop {
            if self.is_stopping() {
                return;
            }
            let wait = match self.pull_once(&vault, owner, cursor).await {
                Ok((next, more)) => {
                    cursor = next;
                    if more {
                        continue;
                    }
                    PULL_INTERVAL
                }
                Err(err) => {
                    debug!(%vault, %err, "replica pull failed");
                    self.sync.edit(&vault, |s| s.last_error = Some(err));
                    RETRY_AFTER
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = stopping.wait_for(|stopping| *stopping) => return,
            }
        }
    }

    /// Pulls and applies one page; returns the new cursor and whether more is waiting.
    async fn pull_once(
        &self,
        vault: &str,
        owner: NodeId,
        cursor: u64,
    ) -> Result<(u64, bool), String> {
        let target = self.target(&owner).ok_or("the owner is not trusted")?;
        let deadline = Instant::now() + PAGE_DEADLINE;
        let request = ReadRequest {
            app: APP.into(),
            vault: vault.to_string(),
            verb: ReadVerb::Changes {
                since_revision: cursor,
                limit: PAGE,
            },
            deadline_ms: PAGE_DEADLINE.as_millis() as u32,
        };
        let (changes, more, owner_revision) =
            match self.caller.read(&target, request, deadline).await {
                Ok(ReadAnswer::Changes {
                    changes,
                    more,
                    vault_revision,
                }) => (changes, more, vault_revision),
                Ok(ReadAnswer::Refused(refusal)) => return Err(refusal.detail),
                Ok(other) => {
                    return Err(format!("the owner answered a change pull with {other:?}"))
                }
                Err(err) => return Err(err.to_string()),
            };
        let next = changes.last().map_or(cursor, |c| c.revision.max(cursor));
        let count = changes.len() as u64;
        if !changes.is_empty() {
            let keys: Vec<String> = changes.iter().map(|c| c.key.clone()).collect();
            let name = vault.to_string();
            self.reader
                .run(move |conn| vaults::apply_changes(conn, &name, &changes, next))
                .await
                .map_err(|err| err.to_string())?;
            let mut cache = self.cache();
            for key in keys {
                cache.invalidate(vault, &key);
            }
        }
        let now = Instant::now();
        self.sync.edit(vault, |s| {
            s.cursor = next;
            s.owner_revision = owner_revision;
            s.last_pull = Some(now);
            s.applied += count;
            s.last_error = None;
            if !more && next >= owner_revision {
                s.caught_up_at = Some(now);
            }
        });
        Ok((next, more))
    }
}
