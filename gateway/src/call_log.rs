//! The caller's call log: one thread owning a SQLite connection that records the writes this
//! gateway sends to owners (`store::calls`), in batches.
//!
//! A write is recorded `in_flight` before its first byte leaves ([`CallLog::begin`] returns
//! once that row is committed), so a gateway killed mid-call still knows, when it is back,
//! which owner to ask about that request id. The commit is `synchronous=NORMAL`: the row is in
//! the WAL when `begin` returns, which survives the process being killed; a power cut of this
//! machine may lose it, and for that the settle path can still ask every owner (see
//! `settlement.rs`). Outcomes after the send are recorded the same way, in the same batches.
//!
//! Batching matters under load: 64 concurrent writes cost one commit, not 64.

use std::path::Path;

use ferry_peer::wire::{CallState, RequestId};
use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info};

use crate::settlement::InFlightGuard;
use crate::store::calls::{self, CallRow};
use crate::store::{self, StoreError};

/// How many records may wait for the thread.
const QUEUE_DEPTH: usize = 8192;
/// The most records in one transaction.
const MAX_BATCH: usize = 512;

/// One change to the call log.
#[derive(Debug)]
enum Op {
    /// A call about to be sent; answered with whether the row is new.
    Begin {
        row: CallRow,
        reply: oneshot::Sender<Result<bool, String>>,
    },
    /// How a call ended, and the call's place in the in-flight registry, given up once this
    /// is committed (so a settle query never finds neither).
    Finish {
        request_id: RequestId,
        end: End,
        hold: Option<InFlightGuard>,
    },
    /// Answered once every op sent before it is committed.
    Flush { reply: oneshot::Sender<()> },
    /// Forget settled calls older than this (Unix ms).
    Collect { before_ms: u64 },
}

/// How a recorded call ended.
#[derive(Debug)]
pub enum End {
    /// The app was told `outcome_unknown` (the row is made if missing).
    Unknown(CallRow),
    /// The owner's definite answer.
    Settled(CallState),
    /// Nothing was sent after all: forget the row this attempt made.
    Forget,
}

/// The handle the write path records through.
#[derive(Debug)]
pub struct CallLog {
    queue: mpsc::Sender<Op>,
}

/// Why a call could not be recorded: it must then not be sent.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("the call log is full or stopped")]
    Unavailable,
    #[error("the call log could not be written: {0}")]
    Store(String),
}

impl CallLog {
    /// Opens the log's connection, turns calls a crash left in flight into unknown ones, and
    /// starts the thread.
    pub fn start(db_path: &Path) -> Result<Self, StoreError> {
        let conn = store::open(db_path)?;
        // The row must be in the WAL before the send, not on the platter: see the module doc.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let recovered = calls::recover_in_flight(&conn)?;
        if recovered > 0 {
            info!(
                recovered,
                "writes a crash cut short are now outcome_unknown, to be settled with their owners"
            );
        }
        let (queue, receiver) = mpsc::channel(QUEUE_DEPTH);
        std::thread::Builder::new()
            .name("ferry-call-log".into())
            .spawn(move || run(conn, receiver))
            .map_err(|err| StoreError::Corrupt(format!("cannot start the call log: {err}")))?;
        Ok(Self { queue })
    }

    /// Records `row` as in flight; returns once it is committed. Whether the row is new.
    pub async fn begin(&self, row: CallRow) -> Result<bool, LogError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Op::Begin { row, reply })
            .await
            .map_err(|_| LogError::Unavailable)?;
        answer
            .await
            .map_err(|_| LogError::Unavailable)?
            .map_err(LogError::Store)
    }

    /// Records how the call `request_id` ended; `hold` (its place in the in-flight registry)
    /// is let go once that is committed.
    pub async fn finish(&self, request_id: RequestId, end: End, hold: Option<InFlightGuard>) {
        self.send(Op::Finish {
            request_id,
            end,
            hold,
        })
        .await;
    }

    /// Forgets settled calls older than `before_ms`.
    pub async fn collect(&self, before_ms: u64) {
        self.send(Op::Collect { before_ms }).await;
    }

    /// Waits until everything recorded so far is committed.
    pub async fn flush(&self) {
        let (reply, done) = oneshot::channel();
        self.send(Op::Flush { reply }).await;
        let _ = done.await;
    }

    async fn send(&self, op: Op) {
        if self.queue.send(op).await.is_err() {
            error!("the call log has stopped; a call's outcome was not recorded");
        }
    }
}

fn run(mut conn: Connection, mut queue: mpsc::Receiver<Op>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let results = apply(&mut conn, &batch);
        for (op, result) in batch.drain(..).zip(results) {
            match op {
                Op::Begin { reply, .. } => {
                    let _ = reply.send(result.map_err(|err| err.to_string()));
                }
                Op::Flush { reply } => {
                    let _ = reply.send(());
                }
                // Dropping `hold` here, after the commit, takes the call off the registry.
                Op::Finish { hold, .. } => {
                    if let Err(err) = result {
                        error!(%err, "a call's outcome could not be recorded");
                    }
                    drop(hold);
                }
                _ => {
                    if let Err(err) = result {
                        error!(%err, "a call's outcome could not be recorded");
                    }
                }
            }
        }
    }
}

/// Applies a batch in one transaction; each op's own result (all fail if the commit fails).
fn apply(conn: &mut Connection, batch: &[Op]) -> Vec<Result<bool, StoreError>> {
    let now_ms = store::unix_ms();
    let attempt = (|| {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut results = Vec::with_capacity(batch.len());
        for op in batch {
            results.push(match op {
                Op::Begin { row, .. } => calls::begin(&tx, row),
                Op::Finish {
                    request_id, end, ..
                } => match end {
                    End::Unknown(row) => calls::mark_unknown(&tx, row),
                    End::Settled(state) => calls::settle(&tx, *request_id, state, now_ms),
                    End::Forget => calls::forget(&tx, *request_id),
                }
                .map(|()| true),
                Op::Flush { .. } => Ok(true),
                Op::Collect { before_ms } => calls::collect(&tx, *before_ms, 100_000).map(|_| true),
            });
        }
        tx.commit()?;
        Ok::<_, StoreError>(results)
    })();
    match attempt {
        Ok(results) => results,
        Err(err) => batch
            .iter()
            .map(|_| {
                Err(StoreError::Corrupt(format!(
                    "the batch did not commit: {err}"
                )))
            })
            .collect(),
    }
}
