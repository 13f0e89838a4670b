//! Replicas (SPEC 10): a replica pulls its owner's change log in pages, as background reads
//! through the pool and the read path's route fallbacks (never the write path), and applies
//! each page and moves its cursor in one SQLite transaction, so after any crash it resumes
//! exactly where it stopped. Deletes arrive as tombstones and are applied as such. Once caught
//! up it asks with a long poll: the owner holds the question until its next commit, so a
//! change reaches an online replica about one round trip after it is made, whether the
//! question is short ([`LONG_POLL`], while apps read the replica here, which keeps it fresh
//! enough to answer them itself, or changes stream in) or long ([`LONG_POLL_AT_REST`], a
//! minute after the last read and 10 s after the last change: one question a vault every
//! 4 minutes instead of more than one a second, which on a laptop is battery). A read of a
//! replica at rest cuts its long question short ([`SyncBoard::read_at`]).
//!
//! The `SyncBoard` (`sync_board.rs`) keeps each replica's progress: its cursor, the owner's
//! revision, when it last pulled (the heartbeat) and last caught up, for `ferry vault list` and
//! for deciding whether the local replica is fresh enough to answer reads first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_core::capacity;
use ferry_core::clock::Clock;
use ferry_peer::call::ReadError;
use ferry_peer::outcome::Refusal;
use ferry_peer::wire::{ReadAnswer, ReadRequest, ReadVerb};
use ferry_ticket::NodeId;
use tokio::sync::watch;
use tracing::{debug, info};

use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;
use crate::names::{AppName, Label, VaultName};
use crate::network::{Network, DIRECTORY_REFRESH_BOUND};
use crate::reads::Reads;
use crate::store::vaults::{Removal, Role, VaultRow};
use crate::store::StoreError;
use crate::sync_board::SyncBoard;
use crate::vaults::Vaults;

/// Changes pulled per page (also bounded by bytes on the owner).
const PAGE: u32 = 1000;
/// How often a caught-up replica asks for more when its owner does not hold the question
/// open (a release before long polls).
const PULL_INTERVAL: Duration = Duration::from_millis(500);
/// How long a caught-up replica's question waits at the owner for the next change (a long
/// poll, `EXT_WAIT_MS`): a change reaches the replica at once, and the owner's answer, even an
/// empty one, proves the replica current as of when it asked. A catch-up counts from the
/// asking, so between two answers it ages up to twice this: kept under half of
/// `replica_fresh_ms` (2 s by default), a caught-up replica keeps answering its reads itself.
const LONG_POLL: Duration = Duration::from_millis(800);
/// The question of a caught-up replica nobody reads here and whose vault is quiet
/// (`sync_board::READ_KEEPS_WARM`, `NEWS_KEEPS_WARM`), within the owner's cap
/// (`ferry_peer::door::MAX_READ_WAIT`; an older owner's cap, 5 s, cuts it shorter). Such a
/// replica is not fresh enough to answer reads first (they ask the owner, the replica
/// answering only when the owner cannot), and the first read wakes its job.
const LONG_POLL_AT_REST: Duration = Duration::from_secs(240);
/// The wait after a failed pull before the next.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// One page's deadline.
const PAGE_DEADLINE: Duration = Duration::from_secs(10);
/// The app name replication reads as.
const APP: &str = "ferry-replication";

/// Why `ferry vault follow` did not start a replica. Nothing was replicated.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// No trusted peer has this label: trust the owner first (`ferry trust`), or use the label
    /// `ferry peers` shows for it.
    #[error("no peer is trusted under the label {label:?}; `ferry peers` lists them")]
    UnknownOwner { label: Label },
    /// The store refused the replica (a vault of that name is already here) or failed.
    #[error(transparent)]
    Store {
        #[from]
        source: StoreError,
    },
}

/// Why `ferry vault unfollow` removed nothing.
#[derive(Debug, thiserror::Error)]
pub enum UnfollowError {
    /// No vault of that name is held here: `ferry vault list` shows what is.
    #[error(
        "this gateway holds no vault called {vault:?}; `ferry vault list` shows the vaults here"
    )]
    NotHeld { vault: VaultName },
    /// This gateway owns the vault: only a replica stops being followed (an owned vault's
    /// records exist nowhere else).
    #[error("this gateway owns {vault:?}: only a replica can stop being followed")]
    Owned { vault: VaultName },
    /// The store could not remove it (its writer is busy or stopping, or failed); nothing was
    /// removed and the replica keeps syncing.
    #[error(transparent)]
    Store {
        #[from]
        source: StoreError,
    },
}

/// Why one pull of a replica's changes failed. The replica is left as it was (its cursor did not
/// move) and the sync job tries again after a pause; `ferry vault list` shows the last one.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The owner is no longer trusted here (untrusted since the replica was made).
    #[error("the owner is not trusted")]
    OwnerNotTrusted { owner: NodeId },
    /// The owner could not be reached, or did not answer in time.
    #[error(transparent)]
    Unreachable { source: ReadError },
    /// The owner answered and refused the pull (it no longer owns the vault, say).
    #[error("{}", refusal.detail)]
    Refused { refusal: Refusal },
    /// The owner answered with something other than a page of changes (a version mismatch?).
    #[error("the owner answered a change pull with {answer:?}")]
    UnexpectedAnswer { answer: Box<ReadAnswer> },
    /// The page could not be applied to the local copy; it was rolled back.
    #[error(transparent)]
    Store { source: StoreError },
    /// The replica this job pulled for is gone (unfollowed, or followed anew): nothing was
    /// applied, and the job ends.
    #[error("the replica was dropped")]
    Dropped,
}

/// The pause before the next pull after a page that took `took`: `more` waiting, the cursor
/// `moved`, the question a long poll (`long_polled`).
fn pause_after_page(more: bool, moved: bool, long_polled: bool, took: Duration) -> Duration {
    if more {
        // Catching up is background work (`capacity::catch_up_pause`).
        capacity::catch_up_pause(took)
    } else if moved || !long_polled || took >= LONG_POLL / 2 {
        // News, or just caught up (the next question is a long poll), or the owner held the
        // question open: ask again at once.
        Duration::ZERO
    } else {
        // An empty answer at once to a long poll: an owner without long polls, asked at a pace.
        PULL_INTERVAL
    }
}

/// Replicas and their sync jobs.
#[derive(Debug)]
pub struct Replication {
    network: Arc<Network>,
    vaults: Arc<Vaults>,
    reads: Arc<Reads>,
    board: Arc<SyncBoard>,
    lifecycle: Arc<Lifecycle>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    /// Each replica's sync job, by the sender it watches: dropping the sender ends the job
    /// (`ferry vault unfollow`, or a newer job of the same name).
    jobs: Mutex<HashMap<VaultName, watch::Sender<()>>>,
}

impl Replication {
    pub fn new(
        network: Arc<Network>,
        vaults: Arc<Vaults>,
        reads: Arc<Reads>,
        board: Arc<SyncBoard>,
        lifecycle: Arc<Lifecycle>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            network,
            vaults,
            reads,
            board,
            lifecycle,
            clock,
            metrics,
            jobs: Mutex::default(),
        }
    }

    /// Every replica's progress.
    pub fn board(&self) -> &Arc<SyncBoard> {
        &self.board
    }

    /// Starts the sync job of every replica this gateway holds (at start).
    pub fn start_all(self: &Arc<Self>) {
        for replica in self.vaults.rows() {
            if replica.role == Role::Replica {
                self.start_sync(replica.name, replica.owner);
            }
        }
    }

    /// `ferry vault follow`: starts replicating `vault` from the trusted peer `owner_label`.
    pub async fn follow(
        self: &Arc<Self>,
        vault: VaultName,
        owner_label: Label,
    ) -> Result<VaultRow, FollowError> {
        let owner = self
            .network
            .book()
            .all()
            .into_iter()
            .find(|p| p.label == owner_label)
            .map(|p| p.node_id)
            .ok_or(FollowError::UnknownOwner { label: owner_label })?;
        let row = self.vaults.create_replica(vault.clone(), owner).await?;
        // Whatever the cache held for this vault now has a better source.
        self.reads.invalidate_vault(&vault);
        // A replica of this name followed before and dropped left its progress: this one
        // starts from nothing.
        self.board.forget(&vault);
        self.start_sync(vault, owner);
        self.network.hello_all(DIRECTORY_REFRESH_BOUND).await;
        Ok(row)
    }

    /// `ferry vault unfollow`: stops the replica's sync job and forgets the replica and its
    /// records; reads of the vault then go to its owner. The row that was removed.
    pub async fn unfollow(&self, vault: VaultName) -> Result<VaultRow, UnfollowError> {
        match self.vaults.get(&vault) {
            None => return Err(UnfollowError::NotHeld { vault }),
            Some(row) if row.role == Role::Owner => return Err(UnfollowError::Owned { vault }),
            Some(_) => {}
        }
        // The job's sender is taken out of the table but kept until the store has answered: if
        // nothing is removed, it goes back and the job never noticed. A page the job applies
        // after the removal is refused by the store (`vaults::apply_changes`), which ends it.
        let job = self
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&vault);
        let removal = self.vaults.remove_replica(vault.clone()).await;
        let row = match removal {
            Ok(Removal::Removed(row)) => row,
            refused => {
                if let Some(job) = job {
                    self.jobs
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(vault.clone())
                        .or_insert(job);
                }
                return Err(match refused {
                    Ok(Removal::Owned) => UnfollowError::Owned { vault },
                    Err(source) => UnfollowError::Store { source },
                    Ok(_) => UnfollowError::NotHeld { vault },
                });
            }
        };
        // The job ends now, wherever it is (a long poll at the owner, a pause).
        drop(job);
        self.board.forget(&vault);
        // Nothing of the local copy may answer now.
        self.reads.invalidate_vault(&vault);
        info!(%vault, revision = row.revision, "replica dropped");
        self.network.hello_all(DIRECTORY_REFRESH_BOUND).await;
        Ok(row)
    }

    /// Starts the sync job of a replicated vault (at start, for every replica; on follow). A
    /// job already running for it ends.
    pub fn start_sync(self: &Arc<Self>, vault: VaultName, owner: NodeId) {
        let (job, ended) = watch::channel(());
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(vault.clone(), job);
        let replication = self.clone();
        self.lifecycle
            .spawn(async move { replication.sync_forever(vault, owner, ended).await });
    }

    /// Pulls `vault`'s pages from `owner` until the gateway stops or the job's sender is
    /// dropped (`ended`).
    async fn sync_forever(
        self: Arc<Self>,
        vault: VaultName,
        owner: NodeId,
        mut ended: watch::Receiver<()>,
    ) {
        let mut cursor = self.vaults.get(&vault).map_or(0, |v| v.revision);
        self.board.edit(&vault, |s| s.cursor = cursor);
        let mut stopping = self.lifecycle.stopping();
        info!(%vault, cursor, "replica sync started");
        // Caught up: the next question is a long poll.
        let mut caught_up = false;
        loop {
            if self.lifecycle.is_stopping() || ended.has_changed().is_err() {
                return;
            }
            let started = self.clock.now();
            let status = self.board.get(&vault).unwrap_or_default();
            let at_rest = caught_up && !status.warm(started);
            let long_poll = caught_up.then_some(if at_rest {
                LONG_POLL_AT_REST
            } else {
                LONG_POLL
            });
            let pulled = tokio::select! {
                biased;
                // The replica was dropped: whatever this pull brings is not wanted.
                _ = ended.changed() => return,
                pulled = self.pull_once(&vault, owner, cursor, long_poll) => pulled,
                // Read while at rest: the long question is dropped (a read: nothing ran) and a
                // short one asked at once.
                () = status.nudge.notified(), if at_rest => continue,
            };
            let wait = match pulled {
                Ok((next, more)) => {
                    let moved = next > cursor;
                    if moved {
                        let now = self.clock.now();
                        self.board.edit(&vault, |s| s.last_news = Some(now));
                    }
                    cursor = next;
                    caught_up = !more;
                    let took = self.clock.now().saturating_duration_since(started);
                    pause_after_page(more, moved, long_poll.is_some(), took)
                }
                // The owner is busy (it serves apps first): ask again when it says, same page.
                Err(PullError::Refused { refusal }) if refusal.code.may_resend() => {
                    debug!(%vault, detail = %refusal.detail, "owner busy; the page is asked again");
                    refusal
                        .retry_after_ms
                        .map_or(RETRY_AFTER, Duration::from_millis)
                        .min(RETRY_AFTER)
                }
                Err(PullError::Dropped) => {
                    debug!(%vault, "replica dropped or followed anew; its old sync job ends");
                    return;
                }
                Err(err) => {
                    caught_up = false;
                    debug!(%vault, %err, "replica pull failed");
                    self.board
                        .edit(&vault, |s| s.last_error = Some(err.to_string()));
                    RETRY_AFTER
                }
            };
            tokio::select! {
                // Biased, as every `select!` here: arms in written order, so a simulation's seed
                // replays the same interleaving (tokio's default pick is random).
                biased;
                _ = stopping.wait_for(|stopping| *stopping) => return,
                _ = ended.changed() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Pulls and applies one page; returns the new cursor and whether more is waiting. With
    /// `long_poll`, the owner may hold the question that long for the first change past the
    /// cursor.
    async fn pull_once(
        &self,
        vault: &VaultName,
        owner: NodeId,
        cursor: u64,
        long_poll: Option<Duration>,
    ) -> Result<(u64, bool), PullError> {
        let target = self
            .network
            .target(&owner)
            .ok_or(PullError::OwnerNotTrusted { owner })?;
        let budget = PAGE_DEADLINE + long_poll.unwrap_or_default();
        // What the answer proves is as of no earlier than this: a catch-up counts from here,
        // not from the answer's arrival (a frozen replica or a held question must not look
        // fresher than its page).
        let asked = self.clock.now();
        let deadline = asked + budget;
        let request = ReadRequest {
            app: AppName::from_static(APP),
            vault: vault.clone(),
            verb: ReadVerb::Changes {
                since_revision: cursor,
                limit: PAGE,
            },
            deadline_ms: budget.as_millis() as u32,
        };
        let caller = self.network.caller();
        let (read, news_age) = match long_poll {
            Some(wait) => match caller.read_waiting(&target, request, wait, deadline).await {
                Ok(polled) => (Ok(polled.answer), polled.news_age),
                Err(err) => (Err(err), None),
            },
            None => (caller.read(&target, request, deadline).await, None),
        };
        let (changes, more, owner_revision) = match read {
            Ok(ReadAnswer::Changes {
                changes,
                more,
                vault_revision,
            }) => (changes, more, vault_revision),
            Ok(ReadAnswer::Refused(refusal)) => return Err(PullError::Refused { refusal }),
            Ok(other) => {
                return Err(PullError::UnexpectedAnswer {
                    answer: Box::new(other),
                })
            }
            Err(source) => return Err(PullError::Unreachable { source }),
        };
        let received = self.clock.now();
        let next = changes.last().map_or(cursor, |c| c.revision.max(cursor));
        let count = changes.len() as u64;
        if !changes.is_empty() {
            let keys: Vec<String> = changes.iter().map(|c| c.key.clone()).collect();
            let applied = self
                .vaults
                .apply_changes(vault.clone(), owner, cursor, changes, next)
                .await
                .map_err(|source| PullError::Store { source })?;
            if !applied {
                return Err(PullError::Dropped);
            }
            for key in keys {
                self.reads.invalidate(vault, &key);
            }
            let applied = self.clock.now().saturating_duration_since(received);
            self.metrics.replica_apply(applied);
            // The whole way of news a long poll brought: the owner's commit to its answer,
            // half the round trip, and the apply here. No two clocks are compared.
            if let Some(age) = news_age {
                self.metrics.propagation(age + applied);
            }
        }
        let now = self.clock.now();
        self.board.edit(vault, |s| {
            s.cursor = next;
            s.owner_revision = owner_revision;
            s.last_pull = Some(now);
            s.applied += count;
            s.last_error = None;
            if !more && next >= owner_revision {
                s.caught_up_at = Some(asked);
            }
        });
        Ok((next, more))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_up_replica_asks_again_at_once_unless_its_owner_does_not_hold_questions() {
        let quick = Duration::from_millis(3);
        assert_eq!(pause_after_page(false, true, true, quick), Duration::ZERO);
        assert_eq!(pause_after_page(false, false, false, quick), Duration::ZERO);
        assert_eq!(
            pause_after_page(false, false, true, LONG_POLL),
            Duration::ZERO
        );
        assert_eq!(pause_after_page(false, false, true, quick), PULL_INTERVAL);
    }
}
