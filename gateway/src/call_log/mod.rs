//! The caller's call log: what this gateway knows about the writes it sends to owners, kept
//! so that every one of them can be settled by its request id after any crash.
//!
//! - A write **in flight** holds a slot of the slot file ([`slots`]): written before the
//!   write's first byte leaves, cleared when it ends. A gateway killed mid-call finds the slot
//!   at its next start and turns it into an `unknown` row of the calls table.
//! - A write that ended **`outcome_unknown`** is a row of the calls table (`store::calls`),
//!   settled in the background by asking its owner; its slot is cleared only once that row is
//!   committed, so no moment has neither.
//! - A write the owner **answered** leaves nothing here: the owner's journal keeps that answer,
//!   and a settle query about it asks the owner (the kit names the vault).
//!
//! Rows are written by one thread owning a SQLite connection, in batches: nobody waits for
//! them except `flush`. When every slot is taken (4,096 writes in flight), a write is recorded
//! as an `in_flight` row instead, through the same thread, which the caller then waits for.

// The one module allowed `unsafe`, with its proof (see its docs).
#[allow(unsafe_code)]
pub(crate) mod danger_mapped;
pub mod sent_mark;
pub mod slots;

use std::path::Path;
use std::sync::{Arc, Mutex};

use ferry_peer::wire::{CallState, RequestId};
use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info, warn};

use ferry_core::clock::Clock;

use crate::env::Blocking;
use crate::in_flight::InFlightGuard;
use crate::store::calls::{self, CallRow};
use crate::store::{self, StoreError};
use sent_mark::{EarlierSends, SentMark};
use slots::SlotFile;

/// How many records may wait for the thread.
const QUEUE_DEPTH: usize = 8192;
/// The most records in one transaction.
const MAX_BATCH: usize = 512;

/// One change to the calls table.
#[derive(Debug)]
enum Op {
    /// A call about to be sent, with every slot taken: recorded as an `in_flight` row.
    Begin {
        row: CallRow,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// How a call ended; its slot (if it had one) is cleared and `hold` (its place in the
    /// in-flight registry) let go once this is committed.
    Finish {
        request_id: RequestId,
        end: End,
        slot: Option<u32>,
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
    /// The owner answered the call itself, or it was never sent: nothing to keep (a row an
    /// earlier attempt left stays, to be settled).
    Over,
    /// The owner's definite answer to a settle query about a remembered call.
    Settled(CallState),
}

/// Where a call in flight is recorded: hand it back to [`CallLog::finish`].
#[derive(Debug)]
pub struct Recorded {
    slot: Option<u32>,
}

/// The handle the write path records through.
#[derive(Debug)]
pub struct CallLog {
    queue: mpsc::Sender<Op>,
    slots: Arc<SlotFile>,
    /// The bound on ids sent from this home (`sent_mark`), and what it said at open.
    sent: Mutex<SentMark>,
    earlier_sends: EarlierSends,
    /// The mark as this run's start left it: every id an earlier run sent is stamped at or
    /// below it.
    mark_at_start_ms: u64,
}

/// Why a call could not be recorded: it must then not be sent.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("the call log is full or stopped")]
    Unavailable,
    #[error("the call log could not be written: {source}")]
    Store { source: StoreError },
}

/// What a run takes as the bound on an earlier run's ids when that run's sent mark is lost:
/// the earlier run took ids dated up to the API's skew past its clock, and its clock was at most
/// this one's start (unless the clock was set back meanwhile: the case `protocol.md` names).
pub fn unknown_sends_bound(start_ms: u64) -> u64 {
    start_ms
        .saturating_add(crate::owner::verbs::MAX_FUTURE_SKEW.as_millis() as u64)
        .saturating_add(1)
}

/// The sent mark a run writes at its start, before anything is sent: the earlier runs' mark;
/// the bound this run takes when theirs is lost (the next run must not read a lower one as
/// certain); or, in a new home, the start itself (so a run that sends nothing still leaves a
/// mark, and the next run's gate need not wait out the unknown bound).
pub fn mark_at_start(earlier: EarlierSends, start_ms: u64) -> u64 {
    match earlier {
        EarlierSends::None => start_ms,
        EarlierSends::UpTo(mark_ms) => mark_ms,
        EarlierSends::Unknown => unknown_sends_bound(start_ms),
    }
}

impl CallLog {
    /// Opens the log: calls a crash left in flight (in slots, or `in_flight` rows) become
    /// `unknown` rows, to be settled with their owners; then the thread starts.
    pub fn start(
        db_path: &Path,
        slots_path: &Path,
        blocking: Blocking,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        let mut conn = store::open(db_path)?;
        // Rows need to be in the WAL, not on the platter: a killed process keeps them; a power
        // cut is for the settle path's "ask every owner" (see `settlement.rs`).
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let (slots, cut_short) =
            SlotFile::open(slots_path).map_err(|source| StoreError::SlotFile { source })?;
        let sent_path = slots_path.with_file_name("calls.sent");
        let (mut sent, earlier_sends) = SentMark::open(&sent_path, slots.found_at_open())
            .map_err(|source| StoreError::SentMark { source })?;
        // Before anything is sent, the mark bounds what earlier runs may have sent.
        let mark_at_start_ms = mark_at_start(earlier_sends, clock.unix_ms());
        sent.raise_to(mark_at_start_ms)
            .map_err(|source| StoreError::SentMark { source })?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for row in &cut_short {
            calls::mark_unknown(&tx, row)?;
        }
        let recovered = calls::recover_in_flight(&tx)? + cut_short.len();
        tx.commit()?;
        slots
            .clear_all()
            .map_err(|source| StoreError::SlotFile { source })?;
        if recovered > 0 {
            info!(
                recovered,
                "writes a crash cut short are now outcome_unknown, to be settled with their owners"
            );
        }
        let slots = Arc::new(slots);
        let (queue, receiver) = mpsc::channel(QUEUE_DEPTH);
        let writer = Writer {
            conn,
            slots: slots.clone(),
            clock,
        };
        match blocking {
            Blocking::Threads => {
                std::thread::Builder::new()
                    .name("ferry-call-log".into())
                    .spawn(move || writer.run_thread(receiver))
                    .map_err(|source| StoreError::Spawn {
                        thread: "call log",
                        source,
                    })?;
            }
            Blocking::Inline => {
                tokio::spawn(writer.run_task(receiver));
            }
        }
        Ok(Self {
            queue,
            slots,
            sent: Mutex::new(sent),
            earlier_sends,
            mark_at_start_ms,
        })
    }

    /// What earlier processes of this home may have sent, as the mark told at open (see
    /// `sent_mark`).
    pub fn earlier_sends(&self) -> EarlierSends {
        self.earlier_sends
    }

    /// Every id an earlier run of this home sent is stamped at or below this.
    pub fn earlier_sends_up_to(&self) -> u64 {
        self.mark_at_start_ms
    }

    /// No id stamped above this was ever sent from this home (this run's mark, or an earlier
    /// run's): what an untrust records, so settling knows which ids may have gone to the peer.
    pub fn sent_up_to(&self) -> u64 {
        let now = self
            .sent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .mark_ms();
        now.max(self.mark_at_start_ms)
    }

    /// Raises the sent mark over an id stamped `stamp_ms`; call before the id leaves, and do
    /// not send it on an error (the mark must bound every id sent).
    pub fn cover_sent(&self, stamp_ms: u64) -> std::io::Result<()> {
        if crate::owner::fault::fails("sent_mark") {
            return Err(std::io::Error::other(
                "fault injection: the sent mark fails",
            ));
        }
        self.sent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .cover(stamp_ms)
    }

    /// Records `row` as in flight; returns once it is where a crash cannot lose it to a
    /// killed process (a slot, or a committed row).
    pub async fn begin(&self, row: &CallRow) -> Result<Recorded, LogError> {
        if crate::owner::fault::fails("call_log") {
            return Err(LogError::Unavailable);
        }
        match self.slots.take(row) {
            Ok(Some(slot)) => return Ok(Recorded { slot: Some(slot) }),
            Ok(None) => {}
            Err(err) => warn!(%err, "the call log's slot file refused a write; using a row"),
        }
        // Boxed, the rare path (every slot taken): a channel send's state is most of a
        // kilobyte, which every write's future would otherwise carry.
        Box::pin(self.begin_as_row(row)).await
    }

    /// [`CallLog::begin`] when no slot is free: a row of the calls table, on the log's thread.
    async fn begin_as_row(&self, row: &CallRow) -> Result<Recorded, LogError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Op::Begin {
                row: row.clone(),
                reply,
            })
            .await
            .map_err(|_| LogError::Unavailable)?;
        answer
            .await
            .map_err(|_| LogError::Unavailable)?
            .map_err(|source| LogError::Store { source })?;
        Ok(Recorded { slot: None })
    }

    /// Records how a call ended; `hold` (its place in the in-flight registry) is let go once
    /// that is recorded. A call that ended with nothing to keep is cleared at once.
    pub async fn finish(
        &self,
        request_id: RequestId,
        recorded: Recorded,
        end: End,
        hold: Option<InFlightGuard>,
    ) {
        if let (End::Over, Some(slot)) = (&end, recorded.slot) {
            if let Err(err) = self.slots.clear(slot) {
                warn!(%err, "a slot of the call log could not be cleared; it is settled after the next start");
            }
            return;
        }
        self.send(Op::Finish {
            request_id,
            end,
            slot: recorded.slot,
            hold,
        })
        .await;
    }

    /// Records an `outcome_unknown` answered for a call that held no slot (a local write that
    /// timed out in the owner's queue).
    pub async fn unknown(&self, row: CallRow) {
        let request_id = row.request_id;
        self.send(Op::Finish {
            request_id,
            end: End::Unknown(row),
            slot: None,
            hold: None,
        })
        .await;
    }

    /// Records the owner's answer to a settle query about a remembered call.
    pub async fn settled(&self, request_id: RequestId, state: CallState) {
        // Only a state that can never change settles a call (the settler asks again otherwise).
        if !state.is_final() {
            debug!(%request_id, ?state, "not kept: the state is not final");
            return;
        }
        self.send(Op::Finish {
            request_id,
            end: End::Settled(state),
            slot: None,
            hold: None,
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
        // Boxed: a channel send's state is most of a kilobyte, and `finish` awaits this on the
        // rare path only (an unknown outcome); every write's future would carry it otherwise.
        if Box::pin(self.queue.send(op)).await.is_err() {
            error!("the call log has stopped; a call's outcome was not recorded");
        }
    }
}

/// The log's writer: its connection, the slot file, the clock.
struct Writer {
    conn: Connection,
    slots: Arc<SlotFile>,
    clock: Arc<dyn Clock>,
}

impl Writer {
    fn run_thread(mut self, mut queue: mpsc::Receiver<Op>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while let Some(first) = queue.blocking_recv() {
            batch.push(first);
            fill(&mut batch, &mut queue);
            self.take(&mut batch);
        }
    }

    async fn run_task(mut self, mut queue: mpsc::Receiver<Op>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while let Some(first) = queue.recv().await {
            batch.push(first);
            fill(&mut batch, &mut queue);
            self.take(&mut batch);
        }
    }

    fn take(&mut self, batch: &mut Vec<Op>) {
        let results = apply(&mut self.conn, batch, self.clock.unix_ms());
        for (op, result) in batch.drain(..).zip(results) {
            match op {
                Op::Begin { reply, .. } => {
                    let _ = reply.send(result);
                }
                Op::Flush { reply } => {
                    let _ = reply.send(());
                }
                // After the commit: the row holds the call now, so its slot can go, and the
                // call can leave the registry (dropping `hold`).
                Op::Finish { slot, hold, .. } => match result {
                    Ok(()) => {
                        if let Some(slot) = slot {
                            if let Err(err) = self.slots.clear(slot) {
                                warn!(%err, "a slot of the call log could not be cleared");
                            }
                        }
                        drop(hold);
                    }
                    // The slot still holds the call: the next start settles it.
                    Err(err) => error!(%err, "a call's outcome could not be recorded"),
                },
                Op::Collect { .. } => {
                    if let Err(err) = result {
                        error!(%err, "settled calls could not be collected");
                    }
                }
            }
        }
    }
}

/// Takes what is waiting, up to a batch.
fn fill(batch: &mut Vec<Op>, queue: &mut mpsc::Receiver<Op>) {
    while batch.len() < MAX_BATCH {
        match queue.try_recv() {
            Ok(op) => batch.push(op),
            Err(_) => break,
        }
    }
}

/// Applies a batch in one transaction; each op's own result (all fail if the commit fails).
fn apply(conn: &mut Connection, batch: &[Op], now_ms: u64) -> Vec<Result<(), StoreError>> {
    let attempt = (|| {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut results = Vec::with_capacity(batch.len());
        for op in batch {
            results.push(match op {
                Op::Begin { row, .. } => calls::begin(&tx, row).map(|_| ()),
                Op::Finish {
                    request_id, end, ..
                } => match end {
                    End::Unknown(row) => calls::mark_unknown(&tx, row),
                    End::Over => calls::over(&tx, *request_id),
                    End::Settled(state) => calls::settle(&tx, *request_id, state, now_ms),
                },
                Op::Flush { .. } => Ok(()),
                Op::Collect { before_ms } => calls::collect(&tx, *before_ms, 100_000).map(|_| ()),
            });
        }
        tx.commit()?;
        Ok::<_, StoreError>(results)
    })();
    match attempt {
        Ok(results) => results,
        Err(err) => {
            let source = Arc::new(err);
            batch
                .iter()
                .map(|_| {
                    Err(StoreError::NotCommitted {
                        source: source.clone(),
                    })
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::clock::SystemClock;

    #[test]
    fn the_mark_at_start_bounds_what_earlier_runs_may_have_sent() {
        let start = 1_764_000_000_000;
        assert_eq!(mark_at_start(EarlierSends::None, start), start);
        assert_eq!(
            mark_at_start(EarlierSends::UpTo(start + 7), start),
            start + 7
        );
        assert_eq!(
            mark_at_start(EarlierSends::Unknown, start),
            start + crate::owner::verbs::MAX_FUTURE_SKEW.as_millis() as u64 + 1
        );
    }

    #[tokio::test]
    async fn every_start_leaves_a_mark_and_a_lost_one_is_written_as_the_unknown_bound() {
        let dir = tempfile::tempdir().unwrap();
        let (db, slots) = (dir.path().join("ferry.db"), dir.path().join("calls.slots"));
        let start = |expect: EarlierSends| {
            let log = CallLog::start(&db, &slots, Blocking::Inline, Arc::new(SystemClock)).unwrap();
            assert_eq!(log.earlier_sends(), expect);
        };
        let before = SystemClock.unix_ms();
        start(EarlierSends::None);
        // A new home's run writes its start as the mark, though it sent nothing.
        let path = dir.path().join("calls.sent");
        let (_, earlier) = SentMark::open(&path, true).unwrap();
        let EarlierSends::UpTo(first) = earlier else {
            panic!("no mark written at a new home's start: {earlier:?}");
        };
        assert!(first >= before && first < unknown_sends_bound(before));
        // The mark lost (a torn write, an upgrade): the next run takes the unknown bound, and
        // writes it at once.
        std::fs::remove_file(&path).unwrap();
        start(EarlierSends::Unknown);
        let (_, earlier) = SentMark::open(&path, true).unwrap();
        let EarlierSends::UpTo(mark) = earlier else {
            panic!("no mark written at start: {earlier:?}");
        };
        assert!(mark >= unknown_sends_bound(before), "{mark}");
        start(EarlierSends::UpTo(mark));
    }
}
