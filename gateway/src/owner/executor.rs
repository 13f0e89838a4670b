//! The owner's executor: one thread owns the writing SQLite connection and runs writes (and
//! settle queries, which may write a tombstone) in batches, in arrival order.
//!
//! A batch runs in two transactions:
//! 1. **admit** (`synchronous=NORMAL`: no fsync of its own): each new write is marked
//!    `running` in the journal; a settle query about an id the journal already holds is
//!    answered from it. The marker survives a crash of the process (WAL), so after a crash those
//!    ids are `interrupted`, not forgotten. Nothing admit writes is ever answered by itself: a
//!    `running` marker only says "ask again";
//! 2. **execute** (`synchronous=FULL`): each write's checks, effect and first answer, each in a
//!    savepoint (a failed or fenced write rolls back alone), and the tombstones of settle
//!    queries about ids never seen. One fsync makes both transactions durable (group commit);
//!    answers are sent only after it. Every answer the owner gives about a journal entry it
//!    wrote follows that durable commit: a tombstone answered `never_arrived` before its fsync
//!    could be lost to a power cut, and the id could then run after all.
//!
//! The queue in front of the thread is bounded; a full queue answers `busy` at once (not
//! carried out, the same id may be sent again). The capacity rules of SPEC 7 rule 7 (two
//! classes with aging, a per-caller cap, rate limits) slot in as the admission step in front of
//! this queue.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_core::admission::{self, BusyReason, QUEUE_FULL_RETRY};
use ferry_core::clock::Clock;

use ferry_peer::call::WriteCall;
use ferry_peer::outcome::{NotCarriedOutReason, Refusal};
use ferry_peer::wire::{CallState, RequestId, WriteAnswer};
use ferry_ticket::NodeId;
use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info};

use super::fault;
use super::verbs::{self, Admission, Execution, WriteLimits};
use crate::env::Blocking;
use crate::store::{self, journal, StoreError};

/// How many jobs may wait for the executor.
const QUEUE_DEPTH: usize = 4096;
/// The most jobs in one batch: large enough to amortise the fsync, small enough that the first
/// write in a batch does not wait long for the last.
const MAX_BATCH: usize = 256;

/// One piece of work for the owner thread.
#[derive(Debug)]
enum Job {
    Write {
        caller: NodeId,
        request: WriteCall,
        deadline: Instant,
        reply: oneshot::Sender<WriteAnswer>,
    },
    Status {
        caller: NodeId,
        request_id: RequestId,
        reply: oneshot::Sender<Result<CallState, StatusFailed>>,
    },
    /// Forget journal rows of request ids dated before `before_ms` (see `journal::collect`).
    Collect {
        before_ms: u64,
        reply: oneshot::Sender<Result<usize, StoreError>>,
    },
    /// Any other change to the database (trust, vault creation, a replica's page, the ticket
    /// epoch), in a transaction of its own: the executor is the store's one writer.
    Apply(Apply),
}

/// A change to run on the writing connection, in its own transaction; it answers its own
/// caller once that transaction committed (or failed).
struct Apply(Box<dyn FnOnce(&mut Connection) + Send>);

impl std::fmt::Debug for Apply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Apply")
    }
}

/// The handle apps' and peers' writes go through.
#[derive(Debug)]
pub struct Executor {
    queue: std::sync::Mutex<Option<mpsc::Sender<Job>>>,
    finished: tokio::sync::Mutex<Option<oneshot::Receiver<()>>>,
    clock: Arc<dyn Clock>,
}

/// Why a job could not be handed to the executor: it did not run.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    /// The gateway is stopping (or the executor died): send it again once it is back.
    #[error("the owner is stopping and takes no new work")]
    Stopping,
    /// Too much work is waiting: send it again in a moment.
    #[error("the owner's queue is full")]
    Full,
    /// The job was queued and its answer never came (the executor died mid-batch, or a batch
    /// could not commit and could not be fenced either): whether it ran is unknown. A write's
    /// outcome is settled by its request id; never answer it as not sent.
    #[error("the owner took the request and its answer was lost; settle it by its request id")]
    Lost,
}

impl From<SubmitError> for StoreError {
    /// A change that could not be handed to the store's one writer.
    fn from(err: SubmitError) -> Self {
        match err {
            SubmitError::Stopping => Self::WriterStopping,
            SubmitError::Full => Self::WriterBusy,
            SubmitError::Lost => Self::WriterLost,
        }
    }
}

/// Why a settle query the executor took got no state from it.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
enum StatusFailed {
    /// The batch it was in did not commit.
    #[error("the owner's store failed")]
    Store,
    /// A bookkeeping slot of a job that is not a settle query (never answered to anyone).
    #[error("collections and changes run alone")]
    NotAQuery,
}

impl Executor {
    /// Opens the writing connection, settles what a crash left running, starts the thread (a
    /// task with [`Blocking::Inline`]).
    pub fn start(
        db_path: &Path,
        mut limits: WriteLimits,
        blocking: Blocking,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        let conn = store::open(db_path)?;
        limits.collected_before_ms = limits
            .collected_before_ms
            .max(store::meta::journal_collected_before(&conn)?);
        let interrupted = journal::recover_interrupted(&conn, clock.unix_ms())?;
        if interrupted > 0 {
            info!(
                interrupted,
                "writes left running by a crash are now not_carried_out: interrupted"
            );
        }
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let (done_tx, done_rx) = oneshot::channel();
        let work = Work {
            conn,
            limits,
            clock: clock.clone(),
        };
        match blocking {
            Blocking::Threads => {
                let spawned = std::thread::Builder::new()
                    .name("ferry-owner".into())
                    .spawn(move || {
                        run_thread(work, rx);
                        let _ = done_tx.send(());
                    });
                if let Err(source) = spawned {
                    return Err(StoreError::Spawn {
                        thread: "owner",
                        source,
                    });
                }
            }
            Blocking::Inline => {
                tokio::spawn(async move {
                    run_task(work, rx).await;
                    let _ = done_tx.send(());
                });
            }
        }
        Ok(Self {
            queue: std::sync::Mutex::new(Some(tx)),
            finished: tokio::sync::Mutex::new(Some(done_rx)),
            clock,
        })
    }

    fn sender(&self) -> Result<mpsc::Sender<Job>, SubmitError> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
            .ok_or(SubmitError::Stopping)
    }

    fn enqueue(&self, job: Job) -> Result<(), SubmitError> {
        self.sender()?.try_send(job).map_err(|err| match err {
            mpsc::error::TrySendError::Full(_) => SubmitError::Full,
            mpsc::error::TrySendError::Closed(_) => SubmitError::Stopping,
        })
    }

    /// Runs one write and waits for its committed answer.
    pub async fn submit(
        &self,
        caller: NodeId,
        request: WriteCall,
        deadline: Instant,
    ) -> Result<WriteAnswer, SubmitError> {
        let sender = self.sender()?;
        let queued = sender.max_capacity() - sender.capacity();
        if let admission::Admission::Busy { why, retry_after } =
            admission::on_arrival(deadline, self.clock.now(), queued, QUEUE_DEPTH)
        {
            return Ok(busy_answer(why, retry_after));
        }
        let (reply, answer) = oneshot::channel();
        match self.enqueue(Job::Write {
            caller,
            request,
            deadline,
            reply,
        }) {
            Ok(()) => {}
            // Filled up since it was counted (another caller was quicker).
            Err(SubmitError::Full) => {
                return Ok(busy_answer(BusyReason::QueueFull, QUEUE_FULL_RETRY))
            }
            Err(err) => return Err(err),
        }
        // The executor answers every job it takes; a dropped reply means it died mid-batch or
        // could not say how the batch ended: the write may have run.
        answer.await.map_err(|_| SubmitError::Lost)
    }

    /// What became of `caller`'s `request_id`; tombstones an id never seen.
    pub async fn status(
        &self,
        caller: NodeId,
        request_id: RequestId,
    ) -> Result<CallState, SubmitError> {
        let (reply, answer) = oneshot::channel();
        self.enqueue(Job::Status {
            caller,
            request_id,
            reply,
        })?;
        match answer.await {
            Ok(Ok(state)) => Ok(state),
            Ok(Err(err)) => {
                debug!(%err, "a settle query got no state; answered as stopping");
                Err(SubmitError::Stopping)
            }
            Err(_) => Err(SubmitError::Stopping),
        }
    }

    /// Collects the journal: forgets the rows of request ids dated before `before_ms`, which
    /// are refused as stale from then on whatever the clock says. Returns how many went.
    pub async fn collect(&self, before_ms: u64) -> Result<usize, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.enqueue(Job::Collect { before_ms, reply })?;
        answer.await.map_err(|_| SubmitError::Stopping)?
    }

    /// Runs `change` on the writing connection in an `IMMEDIATE` transaction of its own,
    /// between batches of writes, and returns what it returned (rolled back if it failed).
    pub async fn apply<R, F>(&self, change: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Apply(Box::new(move |conn: &mut Connection| {
            // A failed change is rolled back when its transaction drops.
            let _ = reply.send(store::in_transaction(conn, change));
        }));
        self.enqueue(Job::Apply(job))?;
        // A dropped reply: the executor died before the change committed.
        answer.await.map_err(|_| SubmitError::Stopping)?
    }

    /// Stops taking work and waits, at most `bound`, for the queued jobs to finish.
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

fn busy(detail: &str, retry_after: Duration) -> WriteAnswer {
    WriteAnswer::Refused(Refusal::busy(
        format!("{detail}; not carried out, send it again with the same request id"),
        retry_after,
    ))
}

/// The answer to a request the admission decision refused.
fn busy_answer(why: BusyReason, retry_after: Duration) -> WriteAnswer {
    busy(why.detail(), retry_after)
}

/// The executor's side of the queue: its connection, its limits, its clock.
struct Work {
    conn: Connection,
    limits: WriteLimits,
    clock: Arc<dyn Clock>,
}

impl Work {
    /// Runs one batch: collections and other changes first, each alone, then the writes and
    /// settle queries.
    fn take(&mut self, batch: &mut Vec<Job>) {
        self.take_alone(batch);
        if !batch.is_empty() {
            run_batch(
                &mut self.conn,
                batch,
                &self.limits,
                self.clock.now(),
                self.clock.unix_ms(),
            );
        }
    }

    /// As [`Work::take`], on a task: it yields between the batch's two transactions, so a
    /// simulated crash can fall between them (as a power cut can between the thread's), leaving
    /// `running` markers for recovery to fence.
    async fn take_yielding(&mut self, batch: &mut Vec<Job>) {
        self.take_alone(batch);
        if batch.is_empty() {
            return;
        }
        let now_ms = self.clock.unix_ms();
        if let Some(admitted) = admit_step(
            &mut self.conn,
            batch,
            &self.limits,
            self.clock.now(),
            now_ms,
        ) {
            tokio::task::yield_now().await;
            execute_step(&mut self.conn, batch, admitted, &self.limits, now_ms);
        }
    }

    /// Collections and other changes in `batch`, each alone, taken out of it.
    fn take_alone(&mut self, batch: &mut Vec<Job>) {
        let mut i = 0;
        while i < batch.len() {
            match &batch[i] {
                Job::Collect { .. } | Job::Apply(_) => match batch.remove(i) {
                    Job::Collect { before_ms, reply } => {
                        let result = collect_journal(&mut self.conn, before_ms, &mut self.limits);
                        let _ = reply.send(result);
                    }
                    Job::Apply(Apply(change)) => change(&mut self.conn),
                    _ => {}
                },
                _ => i += 1,
            }
        }
    }
}

/// Takes what is waiting, up to a batch.
fn fill(batch: &mut Vec<Job>, queue: &mut mpsc::Receiver<Job>) {
    while batch.len() < MAX_BATCH {
        match queue.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

fn run_thread(mut work: Work, mut queue: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.blocking_recv() {
        batch.push(first);
        fill(&mut batch, &mut queue);
        work.take(&mut batch);
    }
    debug!("owner executor stopped");
}

async fn run_task(mut work: Work, mut queue: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.recv().await {
        batch.push(first);
        fill(&mut batch, &mut queue);
        work.take_yielding(&mut batch).await;
    }
    debug!("owner executor stopped");
}

/// How many journal rows one collection transaction deletes at most, so writes waiting behind
/// it wait little.
const COLLECT_CHUNK: u32 = 10_000;

/// Deletes journal rows of ids dated before `before_ms`, chunk by chunk, and raises the
/// watermark below which ids are refused as stale, in the same transaction as the first chunk.
fn collect_journal(
    conn: &mut Connection,
    before_ms: u64,
    limits: &mut WriteLimits,
) -> Result<usize, StoreError> {
    let mut total = 0;
    loop {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if before_ms > limits.collected_before_ms {
            store::meta::set_journal_collected_before(&tx, before_ms)?;
        }
        let deleted = journal::collect(&tx, before_ms, COLLECT_CHUNK)?;
        tx.commit()?;
        limits.collected_before_ms = limits.collected_before_ms.max(before_ms);
        total += deleted;
        if deleted < COLLECT_CHUNK as usize {
            if total > 0 {
                info!(rows = total, "journal collected");
            }
            return Ok(total);
        }
    }
}

/// Where one job stands inside a batch.
#[derive(Debug, Clone)]
enum Pending {
    Answered(WriteAnswer),
    Run,
    Status(Result<CallState, StatusFailed>),
    StatusAfterRun,
}

fn run_batch(
    conn: &mut Connection,
    batch: &mut Vec<Job>,
    limits: &WriteLimits,
    now: Instant,
    now_ms: u64,
) {
    if let Some(admitted) = admit_step(conn, batch, limits, now, now_ms) {
        execute_step(conn, batch, admitted, limits, now_ms);
    }
}

/// Transaction 1 of a batch; `None` (every job answered) if it failed.
fn admit_step(
    conn: &mut Connection,
    batch: &mut Vec<Job>,
    limits: &WriteLimits,
    now: Instant,
    now_ms: u64,
) -> Option<Vec<Pending>> {
    match admit_all(conn, batch, limits, now, now_ms) {
        Ok(pending) => Some(pending),
        Err(err) => {
            error!(%err, "write batch could not be admitted; none of it ran");
            answer_all_failed(batch);
            None
        }
    }
}

/// Transaction 2 of a batch, then every answer.
fn execute_step(
    conn: &mut Connection,
    batch: &mut Vec<Job>,
    pending: Vec<Pending>,
    limits: &WriteLimits,
    now_ms: u64,
) {
    // What transaction 1 decided is durable (answers from the journal, stale ids); kept in
    // case transaction 2 fails.
    let admitted = pending.clone();
    let pending = match execute_all(conn, batch, pending, limits, now_ms) {
        Ok(pending) => pending,
        Err(err) => {
            error!(%err, "write batch did not commit; none of its verbs happened");
            // Its `running` markers did commit (transaction 1): fence them, so settle queries
            // learn the truth now rather than after a restart.
            let fenced = fence_batch(conn, batch, now_ms).is_ok();
            return answer_after_failed_commit(batch, admitted, fenced);
        }
    };
    if batch.iter().any(|job| matches!(job, Job::Write { .. })) {
        fault::point("after_commit");
    }
    for (job, outcome) in batch.drain(..).zip(pending) {
        // A caller that went away (its connection broke) finds the answer in the journal.
        match (job, outcome) {
            (Job::Write { reply, .. }, Pending::Answered(answer)) => {
                let _ = reply.send(answer);
            }
            (Job::Status { reply, .. }, Pending::Status(state)) => {
                let _ = reply.send(state);
            }
            (job, outcome) => error!(
                ?job,
                ?outcome,
                "owner bookkeeping mismatch; job dropped unanswered"
            ),
        }
    }
}

/// Transaction 1: journal lookups, `running` markers, tombstones for settle queries.
///
/// Every transaction here is `IMMEDIATE`: it takes the write lock at `BEGIN`, so the one other
/// writing connection (the call log's, or the CLI's with no gateway running) makes it wait out
/// the busy timeout instead of failing at its first write on a stale snapshot.
fn admit_all(
    conn: &mut Connection,
    batch: &[Job],
    limits: &WriteLimits,
    now: Instant,
    now_ms: u64,
) -> Result<Vec<Pending>, StoreError> {
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let admitted = admit_in_transaction(conn, batch, limits, now, now_ms);
    // Back to FULL on every path, failed ones included: every later commit on this connection
    // (the execute step, tickets, trust, vaults) answers as durable. A connection that cannot
    // be put back can make no durable promise at all, so the process stops rather than lie;
    // recovery fences what was running.
    if let Err(err) = conn.pragma_update(None, "synchronous", "FULL") {
        error!(%err, "cannot restore synchronous=FULL on the writing connection; stopping");
        std::process::abort();
    }
    admitted
}

fn admit_in_transaction(
    conn: &mut Connection,
    batch: &[Job],
    limits: &WriteLimits,
    now: Instant,
    now_ms: u64,
) -> Result<Vec<Pending>, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut pending = Vec::with_capacity(batch.len());
    for job in batch {
        pending.push(match job {
            Job::Write {
                caller,
                request,
                deadline,
                ..
            } => match admission::at_start(*deadline, now) {
                // SPEC 7 rule 5: a request whose deadline passed before it starts is not
                // carried out.
                admission::Admission::Busy { why, retry_after } => {
                    Pending::Answered(busy_answer(why, retry_after))
                }
                admission::Admission::Admit => {
                    match verbs::admit(&tx, *caller, request, limits, now_ms)? {
                        Admission::Answer(answer) => Pending::Answered(answer),
                        Admission::Run => Pending::Run,
                    }
                }
            },
            Job::Status {
                caller, request_id, ..
            } => match journal::lookup(&tx, *caller, *request_id)? {
                // Running means it is in this batch: answer after it ran. Never seen: the
                // tombstone is written in the durable transaction, and answered after it.
                None | Some(journal::JournalEntry::Running { .. }) => Pending::StatusAfterRun,
                Some(entry) => Pending::Status(Ok(entry.to_call_state())),
            },
            Job::Collect { .. } | Job::Apply(_) => Pending::Status(Err(StatusFailed::NotAQuery)),
        });
    }
    tx.commit()?;
    Ok(pending)
}

/// Transaction 2: each admitted write's effect and answer, then the deferred settle queries;
/// one durable commit.
fn execute_all(
    conn: &mut Connection,
    batch: &[Job],
    mut pending: Vec<Pending>,
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<Vec<Pending>, StoreError> {
    let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for (job, slot) in batch.iter().zip(pending.iter_mut()) {
        let Job::Write {
            caller, request, ..
        } = job
        else {
            continue;
        };
        if !matches!(slot, Pending::Run) {
            continue;
        }
        let savepoint = tx.savepoint()?;
        *slot = match verbs::execute(&savepoint, *caller, request, limits, now_ms) {
            Ok(Execution::Recorded(answer)) => {
                savepoint.commit()?;
                Pending::Answered(answer)
            }
            // Dropping the savepoint rolls the effect back.
            Ok(Execution::Fenced(answer)) => Pending::Answered(answer),
            Err(err) => {
                // The savepoint (dropped here) rolls this write's effect back. Fence the id in
                // the same transaction, so a settle query learns the truth at once rather than
                // `running` until a restart.
                error!(%err, request_id = %request.request_id, "write failed in the store; fenced as interrupted");
                drop(savepoint);
                journal::fence_interrupted(&tx, *caller, request.request_id, now_ms)?;
                Pending::Answered(WriteAnswer::NotCarriedOut {
                    reason: NotCarriedOutReason::Interrupted,
                })
            }
        };
    }
    for (job, slot) in batch.iter().zip(pending.iter_mut()) {
        if let (
            Job::Status {
                caller, request_id, ..
            },
            Pending::StatusAfterRun,
        ) = (job, &slot)
        {
            *slot = Pending::Status(Ok(verbs::status(
                &tx,
                *caller,
                *request_id,
                limits,
                now_ms,
            )?));
        }
    }
    // Fault points mark a write's path: batches of settle queries alone pass them by.
    let ran_writes = batch.iter().any(|job| matches!(job, Job::Write { .. }));
    if ran_writes {
        fault::point("before_commit");
    }
    tx.commit()?;
    Ok(pending)
}

/// Marks every write of a failed batch that is still `running` as interrupted.
fn fence_batch(conn: &mut Connection, batch: &[Job], now_ms: u64) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for job in batch {
        if let Job::Write {
            caller, request, ..
        } = job
        {
            journal::fence_interrupted(&tx, *caller, request.request_id, now_ms)?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// After transaction 2 failed: admitted answers stand; writes that were to run did not, and
/// are `interrupted` if the fence held. If it did not, nothing definite can be said (a commit
/// that failed in its fsync may yet be replayed from the WAL at the next start): their replies
/// are dropped, which their callers take as a lost answer, to be settled by request id.
fn answer_after_failed_commit(batch: &mut Vec<Job>, admitted: Vec<Pending>, fenced: bool) {
    for (job, admitted) in batch.drain(..).zip(admitted) {
        match (job, admitted) {
            (Job::Write { reply, .. }, Pending::Answered(answer)) => {
                let _ = reply.send(answer);
            }
            (Job::Write { reply, .. }, _) if fenced => {
                let _ = reply.send(WriteAnswer::NotCarriedOut {
                    reason: NotCarriedOutReason::Interrupted,
                });
            }
            (Job::Write { reply, .. }, _) => drop(reply),
            (Job::Status { reply, .. }, Pending::Status(state)) => {
                let _ = reply.send(state);
            }
            (Job::Status { reply, .. }, _) => {
                let _ = reply.send(Err(StatusFailed::Store));
            }
            (Job::Collect { .. } | Job::Apply(_), _) => {}
        }
    }
}

fn answer_all_failed(batch: &mut Vec<Job>) {
    for job in batch.drain(..) {
        match job {
            Job::Write { reply, .. } => {
                let _ = reply.send(busy("the owner could not commit", Duration::from_secs(1)));
            }
            Job::Status { reply, .. } => {
                let _ = reply.send(Err(StatusFailed::Store));
            }
            Job::Collect { .. } | Job::Apply(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::vaults;
    use ferry_peer::outcome::RefusalCode;
    use ferry_peer::wire::{Priority, WriteVerb};
    use ferry_ticket::NodeKey;

    const DAY_MS: u64 = 86_400_000;

    fn clock() -> Arc<dyn Clock> {
        Arc::new(ferry_core::clock::SystemClock)
    }

    fn limits() -> WriteLimits {
        WriteLimits {
            max_value_bytes: 1024,
            journal_retention: Duration::from_secs(7 * 86_400),
            collected_before_ms: 0,
        }
    }

    /// A UUIDv7 dated `ms`.
    fn id_at(ms: u64) -> RequestId {
        let mut bytes = RequestId::generate().0;
        bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
        RequestId(bytes)
    }

    fn put(request_id: RequestId, key: &str) -> WriteCall {
        WriteCall {
            request_id,
            app: "app".into(),
            vault: "v".into(),
            verb: WriteVerb::Put {
                key: key.into(),
                value: b"x".to_vec(),
                if_revision: None,
            },
            priority: Priority::Interactive,
        }
    }

    #[tokio::test]
    async fn an_id_whose_journal_row_was_collected_can_never_run() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ferry.db");
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        let now = store::unix_ms();
        let old = id_at(now - 8 * DAY_MS);
        {
            // A write that ran eight days ago, when the id was fresh.
            let conn = store::open(&db).unwrap();
            vaults::create_owned(&conn, "v", me, 0).unwrap();
            journal::mark_running(&conn, me, old, "v", now - 8 * DAY_MS).unwrap();
            journal::record_answer(&conn, me, old, &WriteAnswer::Done { revision: 1 }, now)
                .unwrap();
        }
        let executor = Executor::start(&db, limits(), Blocking::Threads, clock()).unwrap();
        assert_eq!(executor.collect(now - 7 * DAY_MS).await.unwrap(), 1);
        let deadline = Instant::now() + Duration::from_secs(5);
        let again = executor
            .submit(me, put(old, "again"), deadline)
            .await
            .unwrap();
        assert!(
            matches!(&again, WriteAnswer::Refused(r) if r.code == RefusalCode::StaleRequestId),
            "{again:?}"
        );
        assert!(matches!(
            executor.status(me, old).await.unwrap(),
            CallState::Forgotten { .. }
        ));
        assert!(executor.drain(Duration::from_secs(5)).await);

        // Restarted with a clock set back a day (here: a retention a day longer), the
        // watermark still refuses it.
        let longer = WriteLimits {
            journal_retention: Duration::from_secs(9 * 86_400),
            ..limits()
        };
        let executor = Executor::start(&db, longer, Blocking::Threads, clock()).unwrap();
        let again = executor
            .submit(me, put(old, "again"), deadline)
            .await
            .unwrap();
        assert!(
            matches!(&again, WriteAnswer::Refused(r) if r.code == RefusalCode::StaleRequestId),
            "{again:?}"
        );
        assert!(executor.drain(Duration::from_secs(5)).await);
        let conn = store::open(&db).unwrap();
        assert_eq!(
            crate::store::records::get(&conn, "v", "again").unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn ids_from_the_future_or_of_the_wrong_variant_are_refused_and_not_journaled() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ferry.db");
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(&store::open(&db).unwrap(), "v", me, 0).unwrap();
        let executor = Executor::start(&db, limits(), Blocking::Threads, clock()).unwrap();
        let future = id_at(store::unix_ms() + 10 * 60_000);
        let mut wrong_variant = RequestId::generate();
        wrong_variant.0[8] = (wrong_variant.0[8] & 0x3f) | 0xc0;
        let deadline = Instant::now() + Duration::from_secs(5);
        for id in [future, wrong_variant] {
            let answer = executor.submit(me, put(id, "k"), deadline).await.unwrap();
            assert!(
                matches!(&answer, WriteAnswer::Refused(r) if r.code == RefusalCode::BadRequest),
                "{id}: {answer:?}"
            );
        }
        assert!(executor.drain(Duration::from_secs(5)).await);
        let conn = store::open(&db).unwrap();
        assert_eq!(journal::lookup(&conn, me, future).unwrap(), None);
        assert_eq!(crate::store::records::get(&conn, "v", "k").unwrap(), None);
    }
}
