//! The owner's executor: one thread owns the writing SQLite connection and runs writes in
//! batches. Each batch is one transaction; each write in it runs in its own savepoint (a
//! failed verb rolls back alone) and every answer is sent only after the batch commits
//! durably. That is group commit: one fsync for many writes, never an answer before the commit.
//!
//! The queue in front of the thread is bounded; a full queue answers `busy` at once (not
//! carried out, the same id may be sent again). The capacity rules of SPEC 7 rule 7 (two
//! classes with aging, a per-caller cap, rate limits) slot in here as the admission step.

use std::path::Path;
use std::time::{Duration, Instant};

use ferry_peer::outcome::{Refusal, RefusalCode};
use ferry_peer::wire::{WriteAnswer, WriteRequest};
use ferry_ticket::NodeId;
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error};

use super::verbs::{self, WriteLimits};
use crate::store::{self, StoreError};

/// How many writes may wait for the executor.
const QUEUE_DEPTH: usize = 4096;
/// The most writes in one transaction: large enough to amortise the fsync, small enough that
/// the first write in a batch does not wait long for the last.
const MAX_BATCH: usize = 256;

/// One write waiting to run.
#[derive(Debug)]
struct WriteJob {
    caller: NodeId,
    request: WriteRequest,
    deadline: Instant,
    reply: oneshot::Sender<WriteAnswer>,
}

/// The handle apps' and peers' writes go through.
#[derive(Debug)]
pub struct Executor {
    queue: std::sync::Mutex<Option<mpsc::Sender<WriteJob>>>,
    finished: tokio::sync::Mutex<Option<oneshot::Receiver<()>>>,
}

/// Why a write could not be handed to the executor: it did not run.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    #[error("the owner is stopping and takes no new writes")]
    Stopping,
}

impl Executor {
    /// Opens the writing connection and starts the thread.
    pub fn start(db_path: &Path, limits: WriteLimits) -> Result<Self, StoreError> {
        let conn = store::open(db_path)?;
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let (done_tx, done_rx) = oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("ferry-owner".into())
            .spawn(move || {
                run(conn, rx, limits);
                let _ = done_tx.send(());
            });
        if let Err(err) = spawned {
            return Err(StoreError::Corrupt(format!(
                "cannot start the owner thread: {err}"
            )));
        }
        Ok(Self {
            queue: std::sync::Mutex::new(Some(tx)),
            finished: tokio::sync::Mutex::new(Some(done_rx)),
        })
    }

    /// Runs one write and waits for its committed answer.
    pub async fn submit(
        &self,
        caller: NodeId,
        request: WriteRequest,
        deadline: Instant,
    ) -> Result<WriteAnswer, SubmitError> {
        let sender = self
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
            .ok_or(SubmitError::Stopping)?;
        let (reply, answer) = oneshot::channel();
        let job = WriteJob {
            caller,
            request,
            deadline,
            reply,
        };
        match sender.try_send(job) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                return Ok(busy("the owner's write queue is full", 100));
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(SubmitError::Stopping),
        }
        drop(sender);
        // The thread always answers a job it took; a dropped reply means it died mid-batch,
        // in which case the batch did not commit.
        answer.await.map_err(|_| SubmitError::Stopping)
    }

    /// Stops taking writes and waits, at most `bound`, for the queued ones to finish.
    /// Returns whether the queue drained in time.
    pub async fn drain(&self, bound: Duration) -> bool {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some(finished) = self.finished.lock().await.take() else {
            return true;
        };
        tokio::time::timeout(bound, finished).await.is_ok()
    }
}

fn busy(detail: &str, retry_after_ms: u64) -> WriteAnswer {
    WriteAnswer::Refused(Refusal {
        retry_after_ms: Some(retry_after_ms),
        ..Refusal::new(
            RefusalCode::Busy,
            format!("{detail}; not carried out, send it again with the same request id"),
        )
    })
}

fn run(mut conn: Connection, mut queue: mpsc::Receiver<WriteJob>, limits: WriteLimits) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let answers = run_batch(&mut conn, &batch, &limits);
        for (job, answer) in batch.drain(..).zip(answers) {
            // The caller may have gone (its connection broke); the answer is in the journal.
            let _ = job.reply.send(answer);
        }
    }
    debug!("owner executor stopped");
}

/// Runs a batch in one transaction and returns one answer per job, in order.
fn run_batch(conn: &mut Connection, batch: &[WriteJob], limits: &WriteLimits) -> Vec<WriteAnswer> {
    let now = Instant::now();
    let now_ms = store::unix_ms();
    let mut tx = match conn.transaction() {
        Ok(tx) => tx,
        Err(err) => {
            error!(%err, "cannot begin a write transaction");
            return batch
                .iter()
                .map(|_| busy("the owner's database is unavailable", 1000))
                .collect();
        }
    };
    let mut answers = Vec::with_capacity(batch.len());
    for job in batch {
        // SPEC 7 rule 5: a request whose deadline passed before it starts is not carried out.
        if job.deadline <= now {
            answers.push(busy(
                "the request's deadline passed before the owner could start it",
                0,
            ));
            continue;
        }
        answers.push(run_one(&mut tx, job, limits, now_ms));
    }
    if let Err(err) = tx.commit() {
        error!(%err, "write batch did not commit; none of it happened");
        return batch
            .iter()
            .map(|_| busy("the owner could not commit", 1000))
            .collect();
    }
    answers
}

fn run_one(
    tx: &mut rusqlite::Transaction<'_>,
    job: &WriteJob,
    limits: &WriteLimits,
    now_ms: u64,
) -> WriteAnswer {
    let savepoint = match tx.savepoint() {
        Ok(sp) => sp,
        Err(err) => {
            error!(%err, "cannot open a savepoint");
            return busy("the owner's database is unavailable", 1000);
        }
    };
    match verbs::apply(&savepoint, job.caller, &job.request, limits, now_ms) {
        Ok(answer) => match savepoint.commit() {
            Ok(()) => answer,
            Err(err) => {
                error!(%err, request_id = %job.request.request_id, "savepoint did not release");
                busy("the owner could not record the write", 1000)
            }
        },
        Err(err) => {
            // Dropping the savepoint rolls this write back; the rest of the batch goes on.
            error!(%err, request_id = %job.request.request_id, "write failed in the store");
            busy("the owner's store failed on this write", 1000)
        }
    }
}
