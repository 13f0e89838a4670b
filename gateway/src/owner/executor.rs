//! The owner's executor: one thread owns the writing SQLite connection and runs writes (and
//! settle queries, which may write a tombstone) in batches, in arrival order.
//!
//! A batch runs in two steps:
//! 1. **mark**: the request ids of its writes are written to the running marks
//!    (`owner::marks`, one `pwrite`, no fsync), so that a crash before the commit leaves each
//!    of them `interrupted` at the next start (SPEC 7 rule 4), not unknown to the journal;
//! 2. **execute**, one transaction (`synchronous=FULL`): each write's id checked against the
//!    journal (a copy hears the first answer, an id settled meanwhile its fence), its checks,
//!    first answer and effect (nothing written for a write whose id the journal holds; a store
//!    error in one write rolls the transaction back, fences that write alone, and runs the rest
//!    again), the vaults' revisions written once, then the settle queries (a tombstone for an
//!    id never seen). One fsync makes it durable (group commit); answers are sent only after
//!    it. Every answer the owner gives about a journal entry it wrote follows that durable
//!    commit: a tombstone answered `never_arrived` before its fsync could be lost to a power
//!    cut, and the id could then run after all.
//!
//! In front of the thread sits the capacity budget (SPEC 7 rule 7, decided in
//! `ferry_core::capacity`): a write is admitted at arrival only within its caller's cap (node
//! and app), its node's cap (all its apps), their rate budgets and the queue's bound, else it
//! is answered `busy` or `rate_limited` at once (not carried out, not journaled, the same id
//! may be sent again). The
//! admitted ones wait in two classes, interactive first with aging for background; a write
//! taken out of the queue starts only if it can still finish before its deadline, else it is
//! `busy` and never runs afterwards.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_core::capacity::{self, CallerLoad, CapacityRules, ClassQueue, Gate, ServiceTime};
use ferry_core::clock::Clock;

use ferry_peer::call::WriteCall;
use ferry_peer::outcome::Refusal;
use ferry_peer::wire::{CallState, Priority, RequestId, WriteAnswer};
use ferry_ticket::NodeId;
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info};

use super::fault;
use super::marks::{Mark, MarkFile};
use super::verbs::{self, Execution, WriteLimits};
use crate::env::Blocking;
use crate::metrics::Metrics;
use crate::names::{AppName, VaultName};
use crate::revisions::Revisions;
use crate::store::immediate::Immediate;
use crate::store::{self, journal, StoreError};

/// Jobs other than writes (settle queries, collections, changes) that may wait for the
/// executor; writes are bounded by the capacity budget's queue depth.
const OTHER_JOBS: usize = 1024;
/// The most jobs in one batch: large enough to amortise the fsync, small enough that the first
/// write in a batch does not wait long for the last.
const MAX_BATCH: usize = 256;
/// The most ids whose batch neither committed nor could be fenced that the executor carries
/// (in its marks, answering their copies "running"). A store failing that often cannot keep
/// any promise; past this the process stops, and the next start fences them from the marks.
const MAX_STRANDED: usize = 65_536;
/// The running marks' file, next to the database.
const MARKS_FILE: &str = "owner.marks";

/// A caller of the owner as the capacity budget counts it: its node and its app.
pub type CallerKey = (NodeId, AppName);

/// One piece of work for the owner thread.
// Writes are nearly every job, so boxing their variant would add an allocation to the common
// case to save bytes in the rare ones.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Job {
    Write {
        caller: NodeId,
        request: WriteCall,
        deadline: Instant,
        /// Its place in the capacity budget, given back when the job is answered or dropped.
        slot: Slot,
        reply: oneshot::Sender<WriteAnswer>,
    },
    Status {
        caller: NodeId,
        request_id: RequestId,
        /// The vault the caller named, if any: a tombstone is recorded under it.
        vault: Option<VaultName>,
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

/// Whether an applied change is fsynced before its caller hears it committed.
#[derive(Debug, Clone, Copy)]
enum Durability {
    Fsynced,
    /// A change the owner of the data can give again ([`Executor::apply_rederivable`]).
    Rederivable,
}

/// A change to run on the writing connection, in its own transaction; it answers its own
/// caller once that transaction committed (or failed).
struct Apply(Box<dyn FnOnce(&mut Connection) + Send>);

impl std::fmt::Debug for Apply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Apply")
    }
}

/// The capacity budget's state, shared by the callers (admission) and the thread (start,
/// finish).
#[derive(Debug)]
struct Budget {
    state: Mutex<BudgetState>,
    metrics: Arc<Metrics>,
}

/// The gate, and the request ids it admitted that are not answered yet (queued or running),
/// under one lock: an id's copy is told apart from a new write in the same step as the gate
/// decides.
#[derive(Debug)]
struct BudgetState {
    gate: Gate<CallerKey>,
    admitted: HashMap<(NodeId, RequestId), u32>,
    /// Ids a stopping gateway turned away ([`Executor::turn_away`]), never admitted after:
    /// empty until the stop, and gone with the process.
    turned_away: HashSet<(NodeId, RequestId)>,
}

/// What the budget says of a write at its arrival.
enum Arrival {
    Admitted,
    /// Refused for the budget: answered busy or rate_limited (after a journal check).
    Refused(capacity::Refusal),
    /// Refused for the budget, but a copy of this id is queued or running: telling this copy
    /// "not carried out" would be false of the id, so it gets no answer (the caller settles).
    CopyInFlight,
    /// A copy of this id was turned away by the stop: this one is answered as it was.
    TurnedAway,
}

impl Budget {
    fn lock(&self) -> std::sync::MutexGuard<'_, BudgetState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn with_gate<R>(&self, f: impl FnOnce(&mut Gate<CallerKey>) -> R) -> R {
        let mut state = self.lock();
        let result = f(&mut state.gate);
        self.metrics.owner_queued(state.gate.queued());
        result
    }

    /// The gate's decision at arrival, and the id counted as admitted if it passes.
    fn admit(
        &self,
        id: (NodeId, RequestId),
        caller: &CallerKey,
        class: Priority,
        deadline: Instant,
        now: Instant,
    ) -> Arrival {
        let mut state = self.lock();
        if state.turned_away.contains(&id) {
            return Arrival::TurnedAway;
        }
        let arrival = match state.gate.arrive(caller, class, deadline, now) {
            Ok(()) => {
                *state.admitted.entry(id).or_default() += 1;
                Arrival::Admitted
            }
            Err(_) if state.admitted.contains_key(&id) => Arrival::CopyInFlight,
            Err(refusal) => Arrival::Refused(refusal),
        };
        self.metrics.owner_queued(state.gate.queued());
        arrival
    }

    /// An admitted id answered or dropped: one copy fewer in flight.
    fn forget(state: &mut BudgetState, id: &(NodeId, RequestId)) {
        if let Some(count) = state.admitted.get_mut(id) {
            *count -= 1;
            if *count == 0 {
                state.admitted.remove(id);
            }
        }
    }
}

/// An admitted write's place in the budget: counted as queued until it leaves the queue, and
/// against its caller's cap until it is answered or dropped (whatever path that takes).
#[derive(Debug)]
struct Slot {
    budget: Arc<Budget>,
    caller: CallerKey,
    /// The write's request id, counted in the budget's admitted ids until the slot goes.
    request_id: RequestId,
    class: Priority,
    arrived: Instant,
    queued: bool,
    /// Who decides the write's fate: the executor starting it, or the caller's side
    /// withdrawing it (answering `busy`) when its deadline comes while it still waits.
    claim: Arc<Claim>,
}

/// A queued write's one decision, taken once: started (it will run) or withdrawn (it never
/// will). A compare-and-swap, so the executor and the waiting caller cannot both win.
#[derive(Debug, Default)]
struct Claim(std::sync::atomic::AtomicU8);

const WAITING: u8 = 0;
/// The executor started it: it runs, and is answered after its commit.
const STARTED: u8 = 1;
/// The waiting caller's side withdrew it (its deadline came): answered `busy` there, its place
/// in the budget given back there, dropped unrun when the executor reaches it.
const WITHDRAWN: u8 = 2;
/// The executor refused it at its start (it could not finish before its deadline).
const REFUSED_AT_START: u8 = 3;

impl Claim {
    fn take(&self, to: u8) -> bool {
        use std::sync::atomic::Ordering;
        self.0
            .compare_exchange(WAITING, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn withdrawn_by_caller(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire) == WITHDRAWN
    }
}

impl Slot {
    /// It left the queue to start.
    fn started(&mut self) {
        self.queued = false;
        let class = self.class;
        self.budget.with_gate(|gate| gate.dequeued(class));
    }

    /// It was refused at its start: it spent nothing of its caller's rate budget.
    fn refund(&self) {
        self.budget.with_gate(|gate| gate.refund(&self.caller));
    }

    /// Whether another copy of its request id is queued, running or stranded (its own place
    /// is one of the count): such a copy may yet run, so nothing may be said of this one.
    fn other_copies_in_flight(&self) -> bool {
        let id = (self.caller.0, self.request_id);
        self.budget
            .lock()
            .admitted
            .get(&id)
            .is_some_and(|&copies| copies > 1)
    }

    /// Its batch neither committed nor could be fenced: its place is given back, but its id
    /// stays counted as in flight for the life of this process, so a copy the budget refuses
    /// is never told "not carried out" about a write whose fate only a restart can settle.
    fn strand(self) {
        *self
            .budget
            .lock()
            .admitted
            .entry((self.caller.0, self.request_id))
            .or_default() += 1;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // The waiting caller's side withdrew it and gave its place back then.
        if self.claim.withdrawn_by_caller() {
            return;
        }
        let mut state = self.budget.lock();
        if self.queued {
            state.gate.dequeued(self.class);
        }
        state.gate.finished(&self.caller, self.class);
        Budget::forget(&mut state, &(self.caller.0, self.request_id));
        self.budget.metrics.owner_queued(state.gate.queued());
    }
}

/// What the owner's queue holds now, for `ferry status`.
#[derive(Debug, Clone)]
pub struct QueueLoad {
    pub rules: CapacityRules,
    pub interactive: usize,
    pub background: usize,
    pub top_callers: Vec<CallerLoad<CallerKey>>,
}

/// The handle apps' and peers' writes go through.
#[derive(Debug)]
pub struct Executor {
    queue: std::sync::Mutex<Option<mpsc::Sender<Job>>>,
    finished: tokio::sync::Mutex<Option<oneshot::Receiver<()>>>,
    budget: Arc<Budget>,
    /// Reads the journal for copies of answered writes that the budget would refuse.
    journal_reader: Mutex<Connection>,
    clock: Arc<dyn Clock>,
    /// Each vault's newest committed revision, moved after every batch that wrote.
    revisions: Arc<Revisions>,
}

/// How the executor runs: its limits, its capacity budget, where it reports.
#[derive(Debug, Clone)]
pub struct ExecutorSettings {
    pub limits: WriteLimits,
    pub rules: CapacityRules,
    pub blocking: Blocking,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
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
    /// could not commit and could not be fenced either), or it is a copy of a write still
    /// queued or running that the budget would have refused: whether it ran is unknown here.
    /// A write's outcome is settled by its request id; never answer it as not sent.
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
    pub fn start(db_path: &Path, settings: ExecutorSettings) -> Result<Self, StoreError> {
        let ExecutorSettings {
            mut limits,
            rules,
            blocking,
            clock,
            metrics,
        } = settings;
        let mut conn = store::open(db_path)?;
        // Read on the runtime thread (a refusal's journal lookup): never wait for a lock there.
        // A busy database makes the lookup fail, and the copy's answer is withheld (settled by
        // id), never turned into a refusal.
        let journal_reader = store::open(db_path)?;
        journal_reader.busy_timeout(Duration::ZERO)?;
        let journal_reader = Mutex::new(journal_reader);
        limits.collected_before_ms = limits
            .collected_before_ms
            .max(store::meta::journal_collected_before(&conn)?);
        let (marks, left) = MarkFile::open(&db_path.with_file_name(MARKS_FILE))
            .map_err(|source| StoreError::MarkFile { source })?;
        let interrupted = recover(&mut conn, &left, &limits, clock.unix_ms())?;
        if interrupted > 0 {
            info!(
                interrupted,
                "writes left running by a crash are now not_carried_out: interrupted"
            );
        }
        // Settled and durable: the marks are spent.
        let mut marks = marks;
        marks
            .clear()
            .map_err(|source| StoreError::MarkFile { source })?;
        let (tx, rx) = mpsc::channel(rules.queue_depth.saturating_add(OTHER_JOBS));
        let (done_tx, done_rx) = oneshot::channel();
        let budget = Arc::new(Budget {
            state: Mutex::new(BudgetState {
                gate: Gate::new(rules),
                admitted: HashMap::new(),
                turned_away: HashSet::new(),
            }),
            metrics: metrics.clone(),
        });
        let revisions = Arc::new(Revisions::new(clock.clone()));
        let work = Work {
            conn,
            marks,
            stranded: Vec::new(),
            limits,
            clock: clock.clone(),
            waiting: ClassQueue::new(&rules),
            service: ServiceTime::default(),
            budget: budget.clone(),
            metrics,
            revisions: revisions.clone(),
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
            budget,
            journal_reader,
            clock,
            revisions,
        })
    }

    /// Each vault's newest committed revision (the change feed waits on it).
    pub fn revisions(&self) -> &Arc<Revisions> {
        &self.revisions
    }

    /// The owner's queue by class and its busiest callers.
    pub fn load(&self, top: usize) -> QueueLoad {
        self.budget.with_gate(|gate| {
            let (interactive, background) = gate.queued();
            QueueLoad {
                rules: *gate.rules(),
                interactive,
                background,
                top_callers: gate.top_callers(top),
            }
        })
    }

    /// Whether the stop has taken the queue (`drain`).
    fn stopping(&self) -> bool {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_none()
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
        let sender = match self.sender() {
            Ok(sender) => sender,
            Err(stopping) => {
                return self.answer_while_stopping(caller, request.request_id, stopping)
            }
        };
        let now = self.clock.now();
        let caller_key = (caller, request.app.clone());
        let class = request.priority;
        let request_id = request.request_id;
        match self
            .budget
            .admit((caller, request_id), &caller_key, class, deadline, now)
        {
            Arrival::Admitted => {}
            Arrival::CopyInFlight => return Err(SubmitError::Lost),
            Arrival::TurnedAway => {
                return self.answer_while_stopping(caller, request_id, SubmitError::Stopping)
            }
            Arrival::Refused(refusal) => {
                // Decided before the injected bug queues the copy anyway: that copy, now in
                // flight, would otherwise withhold this answer instead of refusing it.
                let answer = self.budget_refusal(caller, &caller_key, request_id, refusal);
                if refusal.why == capacity::Refused::CallerCap
                    && ferry_core::bugs::on(ferry_core::bugs::Bug::RunAfterBusy)
                {
                    self.queue_unanswered(caller, request.clone(), deadline, now);
                }
                return answer;
            }
        }
        let claim = Arc::new(Claim::default());
        let slot = Slot {
            budget: self.budget.clone(),
            caller: caller_key.clone(),
            request_id,
            class,
            arrived: now,
            queued: true,
            claim: claim.clone(),
        };
        let (reply, answer) = oneshot::channel();
        let job = Job::Write {
            caller,
            request,
            deadline,
            slot,
            reply,
        };
        // A stop that began since `sender()` above counts as a closed queue: nothing is sent
        // after it. Checked after the admission, so a copy of this id that arrived after the
        // stop either saw this one in flight or this one sees the stop.
        let sent = if self.stopping() {
            Err(mpsc::error::TrySendError::Closed(job))
        } else {
            sender.try_send(job)
        };
        // The channel holds the budget's queue and more; settle queries and changes share it,
        // so a flood of those can fill it too. Either way the job (and its slot) is dropped
        // unsent, and its rate budget given back.
        if let Err(err) = sent {
            self.budget.with_gate(|gate| gate.refund(&caller_key));
            return match err {
                mpsc::error::TrySendError::Full(job) => {
                    drop(job);
                    let refusal = capacity::Refusal {
                        why: capacity::Refused::QueueFull,
                        retry_after: capacity::BUSY_RETRY,
                    };
                    self.budget_refusal(caller, &caller_key, request_id, refusal)
                }
                mpsc::error::TrySendError::Closed(job) => {
                    // The job's own place in the budget goes first, or the copy would find
                    // itself in flight.
                    drop(job);
                    self.answer_while_stopping(caller, request_id, SubmitError::Stopping)
                }
            };
        }
        let mut answer = std::pin::pin!(answer);
        let withdraw_at = capacity::withdraw_at(deadline, now);
        tokio::select! {
            biased;
            // The executor answers every job it takes; a dropped reply means it died
            // mid-batch or could not say how the batch ended: the write may have run.
            answered = &mut answer => return answered.map_err(|_| SubmitError::Lost),
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(withdraw_at)) => {}
        }
        if claim.take(WITHDRAWN) {
            // It never started and now never will (the executor drops it unrun when it comes
            // to it): its place in the budget and its rate budget are given back now.
            {
                let mut state = self.budget.lock();
                state.gate.dequeued(class);
                state.gate.finished(&caller_key, class);
                state.gate.refund(&caller_key);
                Budget::forget(&mut state, &(caller, request_id));
                self.budget.metrics.owner_queued(state.gate.queued());
            }
            let refusal = capacity::Refusal {
                why: capacity::Refused::DeadlinePassed,
                retry_after: capacity::LATE_RETRY,
            };
            return self.budget_refusal(caller, &caller_key, request_id, refusal);
        }
        // It started: its answer follows its commit.
        answer.await.map_err(|_| SubmitError::Lost)
    }

    /// The answer to a write the budget refuses: a copy of a write the journal already answered
    /// gets that answer (SPEC 7 rule 2), not a refusal saying it was not carried out; any other
    /// is counted and refused (`busy` or `rate_limited`).
    /// A copy of a write still queued or running (or stranded), which may yet run, and a copy
    /// the journal cannot be read for, cannot be told the id never ran: its answer is lost
    /// (`SubmitError::Lost`, settled by id), never a refusal. The refused copy's own place in
    /// the budget is given back before this look.
    fn budget_refusal(
        &self,
        caller: NodeId,
        caller_key: &CallerKey,
        request_id: RequestId,
        refusal: capacity::Refusal,
    ) -> Result<WriteAnswer, SubmitError> {
        if let Some(answer) = self.answer_unless_in_flight(caller, request_id)? {
            return Ok(answer);
        }
        self.budget
            .metrics
            .owner_refusal(refusal.why, &caller_key.1);
        Ok(WriteAnswer::Refused(refusal.answer()))
    }

    /// What a write arriving while the owner stops is told. "Stopping, not carried out" is
    /// true only of an id the owner holds nothing of: a copy of a write that ran gets its first
    /// answer (SPEC 7 rule 2), and a copy of one still queued or running, which may yet run,
    /// gets no answer (settled by id).
    fn answer_while_stopping(
        &self,
        caller: NodeId,
        request_id: RequestId,
        stopping: SubmitError,
    ) -> Result<WriteAnswer, SubmitError> {
        match self.answer_unless_in_flight(caller, request_id)? {
            Some(answer) => Ok(answer),
            None => Err(stopping),
        }
    }

    /// A write that reached the owner after its gateway began to stop (SPEC 11: it does not
    /// run), told what `answer_while_stopping` tells: its first answer if the id ran, nothing
    /// (`Lost`) if a copy is queued or running in the drain, else `Stopping` (not carried out).
    /// The executor may still be taking work for writes that came before the stop, so the id
    /// is turned away first, under the same lock as admission: a copy of it that came before
    /// the stop and is not admitted yet is then never admitted, and cannot run after this one
    /// was told it did not.
    pub fn turn_away(
        &self,
        caller: NodeId,
        request_id: RequestId,
    ) -> Result<WriteAnswer, SubmitError> {
        let id = (caller, request_id);
        {
            let mut state = self.budget.lock();
            if state.admitted.contains_key(&id) {
                return Err(SubmitError::Lost);
            }
            state.turned_away.insert(id);
        }
        self.answer_while_stopping(caller, request_id, SubmitError::Stopping)
    }

    /// What the owner may say of a copy of `request_id` it will not run: `Lost` while another
    /// copy is queued, running or stranded (it may yet run, so "not carried out" would be
    /// false); else the journal's answer, if it holds one. In flight first: one that finishes
    /// after this look is in the journal by the next (its place in the budget is given back
    /// only after its commit).
    fn answer_unless_in_flight(
        &self,
        caller: NodeId,
        request_id: RequestId,
    ) -> Result<Option<WriteAnswer>, SubmitError> {
        if self
            .budget
            .lock()
            .admitted
            .contains_key(&(caller, request_id))
        {
            return Err(SubmitError::Lost);
        }
        self.journal_answer(caller, request_id)
    }

    /// The journal's answer for a copy of `request_id` that the owner is about to refuse: the
    /// first answer (or the fence) if the journal has one; `Lost` if the journal holds the id as
    /// running or cannot be read. Read on a connection of its own (a point lookup, on the
    /// refusal path only).
    fn journal_answer(
        &self,
        caller: NodeId,
        request_id: RequestId,
    ) -> Result<Option<WriteAnswer>, SubmitError> {
        let conn = self
            .journal_reader
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        journal_answer(&conn, caller, request_id)
    }

    /// The injected bug `RunAfterBusy`: a refused write queued anyway, its answer dropped.
    fn queue_unanswered(
        &self,
        caller: NodeId,
        request: WriteCall,
        deadline: Instant,
        now: Instant,
    ) {
        let caller_key = (caller, request.app.clone());
        let class = request.priority;
        let request_id = request.request_id;
        {
            let mut state = self.budget.lock();
            state.gate.admit_unchecked(&caller_key, class);
            *state.admitted.entry((caller, request_id)).or_default() += 1;
        }
        let (reply, _) = oneshot::channel();
        let job = Job::Write {
            caller,
            request,
            deadline,
            slot: Slot {
                budget: self.budget.clone(),
                caller: caller_key,
                request_id,
                class,
                arrived: now,
                queued: true,
                claim: Arc::new(Claim::default()),
            },
            reply,
        };
        if let Ok(sender) = self.sender() {
            let _ = sender.try_send(job);
        }
    }

    /// What became of `caller`'s `request_id`; tombstones an id never seen. Once the stop has
    /// taken the queue no tombstone can be written, but an id the owner knows is still
    /// answered: `running` while a copy is queued or running in the drain (a caller whose
    /// write broke asks again, and hears the first answer once it committed), else the
    /// journal's entry. An id it knows nothing of is `Stopping` (ask again later).
    pub async fn status(
        &self,
        caller: NodeId,
        request_id: RequestId,
        vault: Option<VaultName>,
    ) -> Result<CallState, SubmitError> {
        let (reply, answer) = oneshot::channel();
        let queued = self.enqueue(Job::Status {
            caller,
            request_id,
            vault,
            reply,
        });
        if let Err(SubmitError::Stopping) = queued {
            return self
                .known_state(caller, request_id)
                .ok_or(SubmitError::Stopping);
        }
        queued?;
        match answer.await {
            Ok(Ok(state)) => Ok(state),
            Ok(Err(err)) => {
                debug!(%err, "a settle query got no state; answered as stopping");
                Err(SubmitError::Stopping)
            }
            Err(_) => Err(SubmitError::Stopping),
        }
    }

    /// What the owner can say of `request_id` without writing: `running` while a copy is
    /// admitted and unanswered (in flight first, as [`Self::answer_unless_in_flight`] looks),
    /// else the journal's entry; `None` when it holds nothing, or the journal cannot be read.
    fn known_state(&self, caller: NodeId, request_id: RequestId) -> Option<CallState> {
        if self
            .budget
            .lock()
            .admitted
            .contains_key(&(caller, request_id))
        {
            return Some(CallState::Running {
                since_ms: self.clock.unix_ms(),
                heartbeat_age_ms: 0,
            });
        }
        let conn = self
            .journal_reader
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match journal::lookup(&conn, caller, request_id) {
            Ok(entry) => entry.map(|entry| entry.to_call_state()),
            Err(err) => {
                debug!(%err, %request_id, "journal lookup for a settle query while stopping failed");
                None
            }
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
        self.apply_with(change, Durability::Fsynced).await
    }

    /// As [`apply`](Self::apply), but committed without an fsync of its own
    /// (`synchronous=NORMAL`): for changes that can be derived again, and only those. A
    /// replica's page is one: it and its cursor commit together, so a power loss can only take
    /// the last pages back (a killed process loses nothing: they are in the kernel's page
    /// cache), and the replica pulls them again with the same revisions. The next durable
    /// commit on this connection syncs them too. Twenty followers of one owner on one disk
    /// would otherwise make twenty fsyncs a change beside the owner's one.
    pub async fn apply_rederivable<R, F>(&self, change: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        self.apply_with(change, Durability::Rederivable).await
    }

    async fn apply_with<R, F>(&self, change: F, durability: Durability) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Apply(Box::new(move |conn: &mut Connection| {
            // A failed change is rolled back when its transaction drops.
            let result = match durability {
                Durability::Fsynced => store::in_transaction(conn, change),
                Durability::Rederivable => {
                    without_fsync(conn, |conn| store::in_transaction(conn, change))
                }
            };
            let _ = reply.send(result);
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

/// The journal's first answer (or fence) for `request_id`: `None` when it holds none; `Lost`
/// when it holds the id as running (it may yet run) or the lookup failed (it may have run).
fn journal_answer(
    conn: &Connection,
    caller: NodeId,
    request_id: RequestId,
) -> Result<Option<WriteAnswer>, SubmitError> {
    match journal::lookup(conn, caller, request_id) {
        Ok(None) => Ok(None),
        Ok(Some(entry)) => entry.to_write_answer().map(Some).ok_or(SubmitError::Lost),
        Err(err) => {
            error!(%err, %request_id, "journal lookup for a refused copy failed; its answer is withheld");
            Err(SubmitError::Lost)
        }
    }
}

/// The executor's side of the queue: its connection, its limits, its clock, the admitted
/// writes waiting in their classes.
struct Work {
    conn: Connection,
    /// Where each batch marks the ids it may run before its transaction begins.
    marks: MarkFile,
    /// Ids whose batch neither committed nor could be fenced: marked again with every batch
    /// until a restart settles them, their copies answered as running meanwhile.
    stranded: Vec<Mark>,
    limits: WriteLimits,
    clock: Arc<dyn Clock>,
    waiting: ClassQueue<Job>,
    /// What a batch takes now: a write starts only if it can finish before its deadline.
    service: ServiceTime,
    /// The gate, told each batch's pace for its wait bound.
    budget: Arc<Budget>,
    metrics: Arc<Metrics>,
    revisions: Arc<Revisions>,
}

impl Work {
    /// A batch with `writes` writes took `took`: the deadline check's service time and the
    /// wait bound's pace.
    fn ran(&mut self, writes: usize, took: Duration) {
        self.service.observe(took);
        self.budget.with_gate(|gate| gate.batch_ran(writes, took));
    }

    /// A job from the channel: writes wait in their class; anything else joins the batch.
    fn intake(&mut self, job: Job, batch: &mut Vec<Job>) {
        match job {
            Job::Write { ref slot, .. } => {
                let (class, arrived) = (slot.class, slot.arrived);
                self.waiting.push(class, arrived, job);
            }
            other => batch.push(other),
        }
    }

    /// Fills `batch` with waiting writes in the classes' order. A write that can no longer
    /// finish before its deadline is answered `busy` here and never runs.
    fn pick(&mut self, batch: &mut Vec<Job>) {
        let now = self.clock.now();
        let mut background = 0;
        while batch.len() < MAX_BATCH {
            let room = background < capacity::MAX_BACKGROUND_PER_BATCH;
            let Some((arrived, mut job)) = self.waiting.pop(now, room) else {
                break;
            };
            let Job::Write {
                ref mut slot,
                deadline,
                ref request,
                ..
            } = job
            else {
                continue;
            };
            let late = capacity::at_start(deadline, now, self.service.estimate());
            let to = if late.is_ok() {
                STARTED
            } else {
                REFUSED_AT_START
            };
            if !slot.claim.take(to) {
                // Its caller's side withdrew it (answered busy, gave its place back) while it
                // waited: it never runs.
                continue;
            }
            slot.started();
            if slot.class == Priority::Background {
                background += 1;
            }
            self.metrics
                .owner_wait(slot.class, now.saturating_duration_since(arrived));
            if let Err(refusal) = late {
                slot.refund();
                self.metrics.owner_refusal(refusal.why, &request.app);
                // A copy of a write the journal already answered gets that answer, not busy;
                // one with another copy in flight (taken into this batch, still waiting, or
                // stranded), or the journal cannot say about, gets none (its caller settles it
                // by id).
                let answer = if slot.other_copies_in_flight()
                    || is_stranded(&self.stranded, slot.caller.0, request.request_id)
                {
                    None
                } else {
                    match journal_answer(&self.conn, slot.caller.0, request.request_id) {
                        Ok(Some(answer)) => Some(answer),
                        Ok(None) => Some(WriteAnswer::Refused(refusal.answer())),
                        Err(_) => None,
                    }
                };
                if let Job::Write { reply, slot, .. } = job {
                    drop(slot);
                    if let Some(answer) = answer {
                        let _ = reply.send(answer);
                    }
                }
                continue;
            }
            batch.push(job);
        }
    }

    /// Whether anything waits to be picked.
    fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Runs one batch: collections and other changes first, each alone, then the writes and
    /// settle queries.
    fn take(&mut self, batch: &mut Vec<Job>) {
        self.take_alone(batch);
        if !batch.is_empty() {
            let now_ms = self.clock.unix_ms();
            if let Some(pending) = self.mark_step(batch, now_ms) {
                self.execute_step(batch, pending, now_ms);
            }
        }
    }

    /// As [`Work::take`], on a task: it yields between the batch's marks and its transaction,
    /// so a simulated crash can fall between them (as a power cut can on the thread), leaving
    /// marks for recovery to fence.
    async fn take_yielding(&mut self, batch: &mut Vec<Job>) {
        self.take_alone(batch);
        if batch.is_empty() {
            return;
        }
        let now_ms = self.clock.unix_ms();
        if let Some(pending) = self.mark_step(batch, now_ms) {
            tokio::task::yield_now().await;
            self.execute_step(batch, pending, now_ms);
        }
    }

    /// Step 1 of a batch: where each job starts, and the running marks of every write that may
    /// run (with the stranded ids); `None` (every job answered, nothing ran) if the marks could
    /// not be written.
    fn mark_step(&mut self, batch: &mut Vec<Job>, now_ms: u64) -> Option<Vec<Pending>> {
        let stranded = &self.stranded;
        let pending = batch
            .iter()
            .map(|job| match job {
                // A copy of an id whose fate only a restart can settle: "ask again", as for
                // any id running now; a settle query hears it is running.
                Job::Write {
                    caller, request, ..
                } if is_stranded(stranded, *caller, request.request_id) => {
                    Pending::Answered(verbs::busy_duplicate())
                }
                Job::Status {
                    caller, request_id, ..
                } if is_stranded(stranded, *caller, *request_id) => {
                    Pending::Status(Ok(CallState::Running {
                        since_ms: now_ms,
                        heartbeat_age_ms: 0,
                    }))
                }
                Job::Write { .. } => Pending::Run,
                Job::Status { .. } => Pending::StatusAfterRun,
                Job::Collect { .. } | Job::Apply(_) => {
                    Pending::Status(Err(StatusFailed::NotAQuery))
                }
            })
            .collect::<Vec<_>>();
        let limits = &self.limits;
        let mut to_mark = batch
            .iter()
            .zip(&pending)
            .filter_map(|(job, pending)| match (job, pending) {
                (
                    Job::Write {
                        caller, request, ..
                    },
                    Pending::Run,
                ) if verbs::may_run(request, limits, now_ms) => {
                    Some((*caller, request.request_id, request.vault.as_str()))
                }
                _ => None,
            })
            .chain(stranded.iter().map(Mark::parts))
            .peekable();
        // Nothing that may run (settle queries alone): the last marks stay, harmless, since
        // every id in them is in the journal by now.
        if to_mark.peek().is_none() {
            return Some(pending);
        }
        if let Err(err) = self.marks.write(to_mark) {
            error!(%err, "the batch's running marks could not be written; none of it ran");
            answer_unmarked(&self.conn, batch, pending);
            return None;
        }
        // Ids whose fate only a restart can settle: their marks go to the disk now, as their
        // `running` rows did with the next durable commit.
        if !self.stranded.is_empty() {
            if let Err(err) = self.marks.sync() {
                error!(%err, "the stranded writes' marks could not be synced");
            }
        }
        Some(pending)
    }

    /// Step 2 of a batch: its one transaction, then every answer.
    fn execute_step(&mut self, batch: &mut Vec<Job>, pending: Vec<Pending>, now_ms: u64) {
        // Where each job stood before the transaction (answered copies of stranded ids, and
        // any write fenced below); kept in case the transaction fails.
        let mut admitted = pending;
        let pending = loop {
            match execute_all(
                &mut self.conn,
                batch,
                admitted.clone(),
                &self.limits,
                now_ms,
            ) {
                Ok(pending) => break pending,
                // One write's error rolled the whole transaction back, so nothing of the batch
                // ran. That write alone is fenced (its own durable transaction), and the rest run
                // again: each round takes one write out, so this ends.
                Err(ExecuteFailure::Write { index, err }) => {
                    let fenced = match batch.get(index) {
                        Some(Job::Write {
                            caller, request, ..
                        }) => {
                            error!(%err, request_id = %request.request_id, "a write failed in the store; fenced as interrupted, the rest of its batch runs again");
                            fence_one(&mut self.conn, *caller, request, &self.limits, now_ms).ok()
                        }
                        _ => None,
                    };
                    match fenced {
                        Some(answer) => admitted[index] = Pending::Answered(answer),
                        None => return self.after_failed_commit(batch, admitted, now_ms),
                    }
                }
                Err(ExecuteFailure::Batch(err)) => {
                    error!(%err, "write batch did not commit; none of its verbs happened");
                    return self.after_failed_commit(batch, admitted, now_ms);
                }
            }
        };
        if batch.iter().any(|job| matches!(job, Job::Write { .. })) {
            fault::point("after_commit");
        }
        // Committed: the change feed's waiters may read it now.
        for (job, outcome) in batch.iter().zip(&pending) {
            if let (Job::Write { request, .. }, Pending::Answered(WriteAnswer::Done { revision })) =
                (job, outcome)
            {
                self.revisions.advanced(&request.vault, *revision);
            }
        }
        answer_batch(batch, pending);
    }

    /// After the batch's transaction failed: its writes that were to run did not. Each is
    /// fenced `interrupted` now (a copy of an earlier write keeps its first answer), so settle
    /// queries learn the truth at once. If the fence fails too, nothing definite can be said (a
    /// commit that failed in its fsync may yet be replayed from the WAL at the next start):
    /// their replies are dropped, which their callers take as a lost answer to settle by id,
    /// and their ids are stranded: marked with every later batch, answered as running, until
    /// a restart settles them.
    fn after_failed_commit(&mut self, batch: &mut Vec<Job>, admitted: Vec<Pending>, now_ms: u64) {
        match fence_batch(&mut self.conn, batch, &admitted, &self.limits, now_ms) {
            Ok(fenced) => answer_after_fence(batch, fenced),
            Err(err) => {
                error!(%err, "the failed batch could not be fenced either; its writes' answers are withheld until a restart settles them");
                self.strand(batch, admitted, now_ms);
            }
        }
    }

    fn strand(&mut self, batch: &mut Vec<Job>, admitted: Vec<Pending>, now_ms: u64) {
        for (job, admitted) in batch.drain(..).zip(admitted) {
            match send_decided(job, admitted) {
                None => {}
                Some((
                    Job::Write {
                        caller,
                        request,
                        slot,
                        reply,
                        ..
                    },
                    _,
                )) => {
                    if verbs::may_run(&request, &self.limits, now_ms) {
                        slot.strand();
                        self.stranded.push(Mark {
                            caller,
                            request_id: request.request_id,
                            vault: request.vault.into_string(),
                        });
                    }
                    drop(reply);
                }
                Some((Job::Status { reply, .. }, _)) => status_failed(reply),
                Some(_) => {}
            }
        }
        // This batch's marks hold them: on the disk now (later batches mark them again).
        if let Err(err) = self.marks.sync() {
            error!(%err, "the stranded writes' marks could not be synced");
        }
        if self.stranded.len() > MAX_STRANDED {
            error!(
                stranded = self.stranded.len(),
                "the store keeps failing to commit and to fence; stopping, so the next start settles every stranded write from the marks"
            );
            std::process::abort();
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

/// Takes everything the channel holds into the classes (writes) or the batch (the rest).
fn fill(work: &mut Work, batch: &mut Vec<Job>, queue: &mut mpsc::Receiver<Job>) {
    while let Ok(job) = queue.try_recv() {
        work.intake(job, batch);
    }
}

fn run_thread(mut work: Work, mut queue: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        if !work.has_waiting() {
            // Nothing waits: sleep until a job comes; a closed channel (a stop) ends the loop
            // once every admitted write has run.
            let Some(first) = queue.blocking_recv() else {
                break;
            };
            work.intake(first, &mut batch);
        }
        fill(&mut work, &mut batch, &mut queue);
        work.pick(&mut batch);
        if !batch.is_empty() {
            let (started, writes) = (work.clock.now(), writes_in(&batch));
            work.take(&mut batch);
            work.ran(writes, work.clock.now().saturating_duration_since(started));
        }
    }
    debug!("owner executor stopped");
}

async fn run_task(mut work: Work, mut queue: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        if !work.has_waiting() {
            let Some(first) = queue.recv().await else {
                break;
            };
            work.intake(first, &mut batch);
        }
        fill(&mut work, &mut batch, &mut queue);
        work.pick(&mut batch);
        if !batch.is_empty() {
            let (started, writes) = (work.clock.now(), writes_in(&batch));
            work.take_yielding(&mut batch).await;
            work.ran(writes, work.clock.now().saturating_duration_since(started));
        }
    }
    debug!("owner executor stopped");
}

/// The writes of a batch (the rest are settle queries and changes).
fn writes_in(batch: &[Job]) -> usize {
    batch
        .iter()
        .filter(|job| matches!(job, Job::Write { .. }))
        .count()
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
        let tx = Immediate::begin(conn)?;
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

/// Settles what a crash left, in one durable transaction before the owner serves: `running`
/// rows an older release wrote, and the ids of the running marks the journal does not hold.
fn recover(
    conn: &mut Connection,
    marks: &[Mark],
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<usize, StoreError> {
    let tx = Immediate::begin(conn)?;
    let interrupted = journal::recover_interrupted(&tx, now_ms)?
        + verbs::fence_marks(&tx, marks, limits, now_ms)?;
    tx.commit()?;
    Ok(interrupted)
}

fn is_stranded(stranded: &[Mark], caller: NodeId, request_id: RequestId) -> bool {
    !stranded.is_empty()
        && stranded
            .iter()
            .any(|mark| mark.caller == caller && mark.request_id == request_id)
}

/// Sends every job of `batch` its answer (taking the jobs out). A caller that went away (its
/// connection broke) finds the answer in the journal.
fn answer_batch(batch: &mut Vec<Job>, pending: Vec<Pending>) {
    for (job, outcome) in batch.drain(..).zip(pending) {
        if let Some((job, outcome)) = send_decided(job, outcome) {
            error!(
                ?job,
                ?outcome,
                "owner bookkeeping mismatch; job dropped unanswered"
            );
        }
    }
}

/// Sends `job` the answer its batch decided (a write's answer, a settle query's state) and
/// gives back the job that has none yet. A collection or change has nothing to hear here.
fn send_decided(job: Job, pending: Pending) -> Option<(Job, Pending)> {
    match (job, pending) {
        // The caller's place in the budget is given back before the answer leaves, so its
        // next write cannot arrive to find its own last one still counted.
        (Job::Write { reply, slot, .. }, Pending::Answered(answer)) => {
            drop(slot);
            let _ = reply.send(answer);
            None
        }
        (Job::Status { reply, .. }, Pending::Status(state)) => {
            let _ = reply.send(state);
            None
        }
        (Job::Collect { .. } | Job::Apply(_), _) => None,
        undecided => Some(undecided),
    }
}

/// Tells a settle query its batch failed before it was answered.
fn status_failed(reply: oneshot::Sender<Result<CallState, StatusFailed>>) {
    let _ = reply.send(Err(StatusFailed::Store));
}

/// Runs `work` on the writing connection with `synchronous=NORMAL` (its commits are not
/// fsynced), then puts `FULL` back.
fn without_fsync<R>(
    conn: &mut Connection,
    work: impl FnOnce(&mut Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let result = work(conn);
    // Back to FULL on every path, failed ones included: every later commit on this connection
    // (the batches, tickets, trust, vaults) answers as durable. A connection that cannot be
    // put back can make no durable promise at all, so the process stops rather than lie;
    // recovery fences what was marked.
    if let Err(err) = conn.pragma_update(None, "synchronous", "FULL") {
        error!(%err, "cannot restore synchronous=FULL on the writing connection; stopping");
        std::process::abort();
    }
    result
}

/// How long the injected bug `AnswerBeforeCommit` holds a batch's commit after its answers left.
const BUGGY_COMMIT_DELAY: Duration = Duration::from_millis(200);

/// Why the batch's transaction did not commit (it was rolled back whole either way).
#[derive(Debug)]
enum ExecuteFailure {
    /// The write at this index of the batch failed in the store.
    Write { index: usize, err: StoreError },
    /// Anything else: the transaction's start, the vaults' revisions, a settle query, the
    /// commit.
    Batch(StoreError),
}

impl From<StoreError> for ExecuteFailure {
    fn from(err: StoreError) -> Self {
        Self::Batch(err)
    }
}

impl From<rusqlite::Error> for ExecuteFailure {
    fn from(err: rusqlite::Error) -> Self {
        Self::Batch(err.into())
    }
}

/// The batch's transaction: each write's journal check, answer and effect, then the settle
/// queries; one durable commit. Every transaction here is `IMMEDIATE`: it takes the write lock
/// at `BEGIN`, so the one other writing connection (the call log's, or the CLI's with no
/// gateway running) makes it wait out the busy timeout instead of failing at its first write
/// on a stale snapshot.
fn execute_all(
    conn: &mut Connection,
    batch: &mut Vec<Job>,
    mut pending: Vec<Pending>,
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<Vec<Pending>, ExecuteFailure> {
    let tx = Immediate::begin(conn)?;
    let mut vaults = verbs::BatchVaults::default();
    for (index, (job, slot)) in batch.iter().zip(pending.iter_mut()).enumerate() {
        let Job::Write {
            caller, request, ..
        } = job
        else {
            continue;
        };
        if !matches!(slot, Pending::Run) {
            continue;
        }
        // A store error rolls the whole transaction back (`execute_step` fences this write
        // and runs the others again): cheaper, on the path every write takes, than a
        // savepoint per write (two statements and a statement journal each).
        *slot = match verbs::execute(&tx, &mut vaults, *caller, request, limits, now_ms) {
            Ok(Execution::Recorded(answer) | Execution::Fenced(answer)) => {
                Pending::Answered(answer)
            }
            Err(err) => return Err(ExecuteFailure::Write { index, err }),
        };
    }
    vaults.write_back(&tx)?;
    for (job, slot) in batch.iter().zip(pending.iter_mut()) {
        if let (
            Job::Status {
                caller,
                request_id,
                vault,
                ..
            },
            Pending::StatusAfterRun,
        ) = (job, &slot)
        {
            *slot = Pending::Status(Ok(verbs::status(
                &tx,
                *caller,
                *request_id,
                vault.as_ref(),
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
    if ran_writes && ferry_core::bugs::on(ferry_core::bugs::Bug::AnswerBeforeCommit) {
        // The injected bug: every answer leaves before the commit, which comes a moment later.
        answer_batch(batch, pending.clone());
        std::thread::sleep(BUGGY_COMMIT_DELAY);
    }
    tx.commit()?;
    Ok(pending)
}

/// Fences one write whose statement failed, in a durable transaction of its own; what its
/// caller is told.
fn fence_one(
    conn: &mut Connection,
    caller: NodeId,
    request: &WriteCall,
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<WriteAnswer, StoreError> {
    let tx = Immediate::begin(conn)?;
    let answer = verbs::fence(&tx, caller, request, limits, now_ms)?;
    tx.commit()?;
    Ok(answer)
}

/// Fences every write of a failed batch that was to run, in one durable transaction; where
/// each job stands after.
fn fence_batch(
    conn: &mut Connection,
    batch: &[Job],
    admitted: &[Pending],
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<Vec<Pending>, StoreError> {
    let tx = Immediate::begin(conn)?;
    let mut fenced = Vec::with_capacity(batch.len());
    for (job, pending) in batch.iter().zip(admitted) {
        fenced.push(match (job, pending) {
            (
                Job::Write {
                    caller, request, ..
                },
                Pending::Run,
            ) => Pending::Answered(verbs::fence(&tx, *caller, request, limits, now_ms)?),
            (_, other) => other.clone(),
        });
    }
    tx.commit()?;
    Ok(fenced)
}

/// Answers a failed batch after its fence: each write what the fence said, each settle query
/// answered before the failure its state, the rest of them a store failure.
fn answer_after_fence(batch: &mut Vec<Job>, fenced: Vec<Pending>) {
    for (job, fenced) in batch.drain(..).zip(fenced) {
        match send_decided(job, fenced) {
            None => {}
            Some((Job::Status { reply, .. }, _)) => status_failed(reply),
            Some((job, fenced)) => error!(
                ?job,
                ?fenced,
                "owner bookkeeping mismatch after a fence; job dropped unanswered"
            ),
        }
    }
}

/// Answers a batch whose marks could not be written (none of it ran): a write the journal
/// holds gets its answer from it (a copy of one that ran is never told "not carried out"),
/// one it does not hold `busy` (nothing ran; the same id may be sent again) unless another
/// copy of it still waits, one it cannot say about nothing (settled by id); what the batch had
/// answered already (a stranded id's copy) stands.
fn answer_unmarked(conn: &Connection, batch: &mut Vec<Job>, pending: Vec<Pending>) {
    for (job, pending) in batch.drain(..).zip(pending) {
        match send_decided(job, pending) {
            None => {}
            Some((
                Job::Write {
                    caller,
                    request,
                    reply,
                    slot,
                    ..
                },
                _,
            )) => {
                let answer = match journal_answer(conn, caller, request.request_id) {
                    Ok(Some(answer)) => Some(answer),
                    // Another copy still waiting may run in a later batch.
                    Ok(None) if slot.other_copies_in_flight() => None,
                    Ok(None) => {
                        slot.refund();
                        Some(busy(
                            "the owner could not record the write before running it",
                            Duration::from_secs(1),
                        ))
                    }
                    Err(_) => None,
                };
                drop(slot);
                if let Some(answer) = answer {
                    let _ = reply.send(answer);
                }
            }
            Some((Job::Status { reply, .. }, _)) => status_failed(reply),
            Some(_) => {}
        }
    }
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use crate::store::{records, vaults};
    use ferry_peer::outcome::NotCarriedOutReason;
    use ferry_peer::outcome::RefusalCode;
    use ferry_peer::wire::{Priority, WriteVerb};
    use ferry_ticket::NodeKey;

    const DAY_MS: u64 = 86_400_000;

    fn clock() -> Arc<dyn Clock> {
        Arc::new(ferry_core::clock::SystemClock)
    }

    fn start(db: &Path, limits: WriteLimits, rules: CapacityRules) -> Executor {
        Executor::start(
            db,
            ExecutorSettings {
                limits,
                rules,
                blocking: Blocking::Threads,
                clock: clock(),
                metrics: Arc::new(Metrics::default()),
            },
        )
        .unwrap()
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
        let mut bytes = *RequestId::generate().as_bytes();
        bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
        RequestId::from_bytes(bytes)
    }

    fn put(request_id: RequestId, key: &str) -> WriteCall {
        WriteCall {
            request_id,
            app: AppName::from_static("app"),
            vault: VaultName::from_static("v"),
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
            vaults::create_owned(&conn, &VaultName::from_static("v"), me, 0).unwrap();
            let done = WriteAnswer::Done { revision: 1 };
            journal::record_first_answer(&conn, me, old, "v", &done, now - 8 * DAY_MS).unwrap();
        }
        let executor = start(&db, limits(), CapacityRules::default());
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
            executor.status(me, old, None).await.unwrap(),
            CallState::Forgotten { .. }
        ));
        assert!(executor.drain(Duration::from_secs(5)).await);

        // Restarted with a clock set back a day (here: a retention a day longer), the
        // watermark still refuses it.
        let longer = WriteLimits {
            journal_retention: Duration::from_secs(9 * 86_400),
            ..limits()
        };
        let executor = start(&db, longer, CapacityRules::default());
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
        vaults::create_owned(
            &store::open(&db).unwrap(),
            &VaultName::from_static("v"),
            me,
            0,
        )
        .unwrap();
        let executor = start(&db, limits(), CapacityRules::default());
        let future = id_at(store::unix_ms() + 10 * 60_000);
        let mut bytes = *RequestId::generate().as_bytes();
        bytes[8] = (bytes[8] & 0x3f) | 0xc0;
        let wrong_variant = RequestId::from_bytes(bytes);
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

    /// A clock a test moves by hand (the Unix time stays the system's).
    #[derive(Debug)]
    struct ManualClock(std::sync::Mutex<Instant>);

    impl ManualClock {
        fn advance(&self, by: Duration) {
            *self.0.lock().unwrap() += by;
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> Instant {
            *self.0.lock().unwrap()
        }
        fn unix_ms(&self) -> u64 {
            store::unix_ms()
        }
    }

    #[tokio::test]
    async fn a_rederivable_change_runs_unsynced_and_the_connection_goes_back_to_full() {
        let dir = tempfile::tempdir().unwrap();
        let executor = start(
            &dir.path().join("ferry.db"),
            limits(),
            CapacityRules::default(),
        );
        let synchronous = |conn: &Connection| -> Result<i64, StoreError> {
            Ok(conn.query_row("PRAGMA synchronous", [], |row| row.get(0))?)
        };
        // 1 is NORMAL, 2 is FULL.
        assert_eq!(executor.apply_rederivable(synchronous).await.unwrap(), 1);
        assert_eq!(executor.apply(synchronous).await.unwrap(), 2);
        // A failed one too puts FULL back.
        let failed = executor
            .apply_rederivable(|conn| -> Result<(), StoreError> {
                conn.execute("INSERT INTO no_such_table VALUES (1)", [])?;
                Ok(())
            })
            .await;
        assert!(failed.is_err());
        assert_eq!(executor.apply(synchronous).await.unwrap(), 2);
    }

    /// Holds the executor's thread in a change until the returned sender is dropped or sent to.
    async fn hold(executor: &Arc<Executor>) -> std::sync::mpsc::Sender<()> {
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (entered_tx, entered) = oneshot::channel();
        let executor = executor.clone();
        tokio::spawn(async move {
            executor
                .apply(move |_| {
                    let _ = entered_tx.send(());
                    let _ = held.recv();
                    Ok(())
                })
                .await
        });
        entered.await.unwrap();
        release
    }

    /// Waits (bounded) until the owner's queue holds `interactive` and `background` writes.
    async fn until_queued(executor: &Executor, interactive: usize, background: usize) {
        let wait = async {
            loop {
                let load = executor.load(4);
                if (load.interactive, load.background) == (interactive, background) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the queue never held {interactive}+{background} writes: {:?}",
                    executor.load(4)
                )
            });
    }

    fn revision(answer: &WriteAnswer) -> u64 {
        match answer {
            WriteAnswer::Done { revision } => *revision,
            other => panic!("not done: {other:?}"),
        }
    }

    fn started_with(
        dir: &Path,
        rules: CapacityRules,
        clock: Arc<dyn Clock>,
    ) -> (Arc<Executor>, NodeId) {
        let db = dir.join("ferry.db");
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(
            &store::open(&db).unwrap(),
            &VaultName::from_static("v"),
            me,
            0,
        )
        .unwrap();
        let executor = Executor::start(
            &db,
            ExecutorSettings {
                limits: limits(),
                rules,
                blocking: Blocking::Threads,
                clock,
                metrics: Arc::new(Metrics::default()),
            },
        )
        .unwrap();
        (Arc::new(executor), me)
    }

    fn spawn_put(
        executor: &Arc<Executor>,
        me: NodeId,
        call: WriteCall,
        deadline: Instant,
    ) -> tokio::task::JoinHandle<Result<WriteAnswer, SubmitError>> {
        let executor = executor.clone();
        tokio::spawn(async move { executor.submit(me, call, deadline).await })
    }

    /// Four writes of keys `prefix0..3`, each on a task of its own.
    fn spawn_puts(
        executor: &Arc<Executor>,
        me: NodeId,
        prefix: &str,
        deadline: Instant,
    ) -> Vec<tokio::task::JoinHandle<Result<WriteAnswer, SubmitError>>> {
        (0..4)
            .map(|n| {
                spawn_put(
                    executor,
                    me,
                    put(RequestId::generate(), &format!("{prefix}{n}")),
                    deadline,
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn a_background_write_that_waited_ten_seconds_goes_before_new_interactive_ones() {
        for (waited, background_first) in [(11, true), (5, false)] {
            let dir = tempfile::tempdir().unwrap();
            let clock = Arc::new(ManualClock(std::sync::Mutex::new(Instant::now())));
            let (executor, me) = started_with(dir.path(), CapacityRules::default(), clock.clone());
            let release = hold(&executor).await;
            let far = clock.now() + Duration::from_secs(3600);
            let mut bulk = put(RequestId::generate(), "bulk");
            bulk.priority = Priority::Background;
            bulk.app = AppName::from_static("importer");
            let bulk = spawn_put(&executor, me, bulk, far);
            until_queued(&executor, 0, 1).await;
            clock.advance(Duration::from_secs(waited));
            let app = spawn_put(&executor, me, put(RequestId::generate(), "app"), far);
            until_queued(&executor, 1, 1).await;
            drop(release);
            let bulk = revision(&bulk.await.unwrap().unwrap());
            let app = revision(&app.await.unwrap().unwrap());
            assert_eq!(
                bulk < app,
                background_first,
                "waited {waited} s: bulk at {bulk}, app at {app}"
            );
            assert!(executor.drain(Duration::from_secs(5)).await);
        }
    }

    #[tokio::test]
    async fn a_write_whose_deadline_comes_while_it_waits_is_busy_and_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let (executor, me) = started_with(dir.path(), CapacityRules::default(), clock());
        let release = hold(&executor).await;
        let id = RequestId::generate();
        let asked = Instant::now();
        let answer = executor
            .submit(me, put(id, "late"), asked + Duration::from_millis(300))
            .await
            .unwrap();
        // Answered busy before its deadline, while the executor was still held.
        assert!(
            asked.elapsed() < Duration::from_millis(300),
            "{:?}",
            asked.elapsed()
        );
        let WriteAnswer::Refused(refusal) = &answer else {
            panic!("{answer:?}");
        };
        assert_eq!(refusal.code, RefusalCode::Busy, "{refusal:?}");
        assert!(refusal.retry_after_ms.is_some());
        drop(release);
        // Settling it says it was not carried out (and fences it), and it never ran.
        assert_eq!(
            executor.status(me, id, None).await.unwrap(),
            CallState::NotCarriedOut {
                reason: NotCarriedOutReason::NeverArrived
            }
        );
        assert!(executor.drain(Duration::from_secs(5)).await);
        let conn = store::open(&dir.path().join("ferry.db")).unwrap();
        assert_eq!(
            crate::store::records::get(&conn, "v", "late").unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn a_copy_withdrawn_while_its_original_waits_is_never_told_it_was_not_carried_out() {
        let dir = tempfile::tempdir().unwrap();
        let (executor, me) = started_with(dir.path(), CapacityRules::default(), clock());
        let release = hold(&executor).await;
        let call = put(RequestId::generate(), "once");
        let far = Instant::now() + Duration::from_secs(60);
        let original = spawn_put(&executor, me, call.clone(), far);
        until_queued(&executor, 1, 0).await;
        // The copy's deadline comes while both wait: it is withdrawn, but the id may yet run.
        let copy = executor
            .submit(
                me,
                call.clone(),
                Instant::now() + Duration::from_millis(200),
            )
            .await;
        assert_eq!(
            copy,
            Err(SubmitError::Lost),
            "never 'busy' while its original may run"
        );
        drop(release);
        assert_eq!(
            original.await.unwrap(),
            Ok(WriteAnswer::Done { revision: 1 })
        );
        assert!(executor.drain(Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn a_fifth_write_of_one_caller_is_busy_and_runs_when_sent_again() {
        let dir = tempfile::tempdir().unwrap();
        let (executor, me) = started_with(dir.path(), CapacityRules::default(), clock());
        let release = hold(&executor).await;
        let far = Instant::now() + Duration::from_secs(60);
        let first = spawn_puts(&executor, me, "k", far);
        until_queued(&executor, 4, 0).await;
        let fifth = RequestId::generate();
        let answer = executor.submit(me, put(fifth, "k4"), far).await.unwrap();
        assert!(
            matches!(&answer, WriteAnswer::Refused(r) if r.code == RefusalCode::Busy && r.retry_after_ms.is_some()),
            "{answer:?}"
        );
        // Another app of the same caller is not held back by the first's cap.
        let mut other = put(RequestId::generate(), "other");
        other.app = AppName::from_static("other");
        let other = spawn_put(&executor, me, other, far);
        until_queued(&executor, 5, 0).await;
        drop(release);
        for write in first {
            revision(&write.await.unwrap().unwrap());
        }
        revision(&other.await.unwrap().unwrap());
        // Refused busy, it was not journaled: the same id runs now.
        revision(&executor.submit(me, put(fifth, "k4"), far).await.unwrap());
        assert!(executor.drain(Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn a_copy_of_an_answered_write_gets_its_answer_even_when_its_app_is_at_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let (executor, me) = started_with(dir.path(), CapacityRules::default(), clock());
        let far = Instant::now() + Duration::from_secs(60);
        let done = RequestId::generate();
        let first = revision(&executor.submit(me, put(done, "k"), far).await.unwrap());
        let release = hold(&executor).await;
        let queued = spawn_puts(&executor, me, "q", far);
        until_queued(&executor, 4, 0).await;
        // At its cap, the app sends the answered write again: it hears its first answer, not
        // "busy, not carried out".
        let again = executor.submit(me, put(done, "k"), far).await.unwrap();
        assert_eq!(again, WriteAnswer::Done { revision: first });
        drop(release);
        for write in queued {
            revision(&write.await.unwrap().unwrap());
        }
        assert!(executor.drain(Duration::from_secs(5)).await);
    }

    /// A copy of a write still queued, refused for its app's cap, is not told "busy, not
    /// carried out": the queued copy will run. It gets no answer (the caller settles by id).
    #[tokio::test]
    async fn a_copy_of_a_queued_write_at_its_apps_cap_is_never_told_it_was_not_carried_out() {
        let dir = tempfile::tempdir().unwrap();
        let (executor, me) = started_with(dir.path(), CapacityRules::default(), clock());
        let release = hold(&executor).await;
        let far = Instant::now() + Duration::from_secs(60);
        let id = RequestId::generate();
        let first = spawn_put(&executor, me, put(id, "k0"), far);
        let others: Vec<_> = (1..4)
            .map(|n| {
                spawn_put(
                    &executor,
                    me,
                    put(RequestId::generate(), &format!("k{n}")),
                    far,
                )
            })
            .collect();
        until_queued(&executor, 4, 0).await;
        let copy = executor.submit(me, put(id, "k0"), far).await;
        assert!(matches!(copy, Err(SubmitError::Lost)), "{copy:?}");
        drop(release);
        let ran = revision(&first.await.unwrap().unwrap());
        for write in others {
            revision(&write.await.unwrap().unwrap());
        }
        // The id ran once; a copy sent now hears its answer.
        let again = executor.submit(me, put(id, "k0"), far).await.unwrap();
        assert_eq!(again, WriteAnswer::Done { revision: ran });
        assert!(executor.drain(Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn a_withdrawn_write_gives_its_place_back_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (executor, me) = started_with(dir.path(), CapacityRules::default(), clock());
        let release = hold(&executor).await;
        // Four writes withdrawn at their deadline while the executor is held...
        for n in 0..4 {
            let id = RequestId::generate();
            let soon = Instant::now() + Duration::from_millis(100);
            let answer = executor
                .submit(me, put(id, &format!("late{n}")), soon)
                .await
                .unwrap();
            assert!(
                matches!(&answer, WriteAnswer::Refused(r) if r.code == RefusalCode::Busy),
                "{answer:?}"
            );
        }
        // ...hold none of the app's four places: four more are admitted, not refused.
        let far = Instant::now() + Duration::from_secs(60);
        let admitted = spawn_puts(&executor, me, "k", far);
        until_queued(&executor, 4, 0).await;
        assert_eq!(executor.load(1).top_callers[0].in_flight, 4);
        drop(release);
        for write in admitted {
            revision(&write.await.unwrap().unwrap());
        }
        assert!(executor.drain(Duration::from_secs(5)).await);
        let load = executor.load(1);
        assert_eq!((load.interactive, load.background), (0, 0));
        assert_eq!(load.top_callers[0].in_flight, 0);
    }

    #[tokio::test]
    async fn a_store_error_in_one_write_fences_it_alone_and_the_rest_of_its_batch_runs() {
        let dir = tempfile::tempdir().unwrap();
        let (executor, me) = started_with(dir.path(), CapacityRules::default(), clock());
        // The disk refusing one record, as a damaged page under one key would.
        store::open(&dir.path().join("ferry.db"))
            .unwrap()
            .execute_batch(
                "CREATE TRIGGER boom BEFORE INSERT ON records WHEN NEW.key = 'boom'
                 BEGIN SELECT RAISE(ABORT, 'the disk said no'); END;",
            )
            .unwrap();
        let release = hold(&executor).await;
        let far = Instant::now() + Duration::from_secs(60);
        let calls: Vec<WriteCall> = ["a", "boom", "c"]
            .iter()
            .map(|key| put(RequestId::generate(), key))
            .collect();
        let writes: Vec<_> = calls
            .iter()
            .map(|call| spawn_put(&executor, me, call.clone(), far))
            .collect();
        // One batch: all three wait behind the held executor.
        until_queued(&executor, 3, 0).await;
        drop(release);
        let mut answers = Vec::new();
        for write in writes {
            answers.push(write.await.unwrap().unwrap());
        }
        let interrupted = NotCarriedOutReason::Interrupted;
        assert_eq!(
            answers,
            [
                WriteAnswer::Done { revision: 1 },
                WriteAnswer::NotCarriedOut {
                    reason: interrupted
                },
                WriteAnswer::Done { revision: 2 },
            ],
            "the failing write is told the truth, and its batch-mates still run, once"
        );
        // The journal says the same to a settle query, and the store holds exactly that.
        let states = [
            CallState::Answered(WriteAnswer::Done { revision: 1 }),
            CallState::NotCarriedOut {
                reason: interrupted,
            },
            CallState::Answered(WriteAnswer::Done { revision: 2 }),
        ];
        for (call, state) in calls.iter().zip(states) {
            assert_eq!(
                executor.status(me, call.request_id, None).await.unwrap(),
                state
            );
        }
        let stored = executor
            .apply(|conn| {
                let vault = vaults::get(conn, "v")?.map(|vault| vault.revision);
                let keys = ["a", "boom", "c"]
                    .map(|key| records::get(conn, "v", key).map(|row| row.map(|row| row.revision)));
                Ok((vault, keys))
            })
            .await
            .unwrap();
        assert_eq!(
            stored.0,
            Some(2),
            "no revision was spent on the failed write"
        );
        assert_eq!(
            stored.1.map(|row| row.ok().flatten()),
            [Some(1), None, Some(2)]
        );
        assert!(executor.drain(Duration::from_secs(5)).await);
    }

    /// An executor on a fresh store that has run one write (key `ran`), and its answer.
    async fn after_one_write(dir: &Path) -> (Arc<Executor>, NodeId, WriteCall, WriteAnswer) {
        let (executor, me) = started_with(dir, CapacityRules::default(), clock());
        let far = Instant::now() + Duration::from_secs(60);
        let ran = put(RequestId::generate(), "ran");
        let done = executor.submit(me, ran.clone(), far).await.unwrap();
        assert_eq!(done, WriteAnswer::Done { revision: 1 });
        (executor, me, ran, done)
    }

    /// Makes the store refuse every statement of `kind` on `table` (a failing disk, as far as
    /// those statements can tell), through a connection of its own.
    fn refuse(dir: &Path, table: &str, kind: &str) {
        store::open(&dir.join("ferry.db"))
            .unwrap()
            .execute_batch(&format!(
                "CREATE TRIGGER boom BEFORE {kind} ON {table}
                 BEGIN SELECT RAISE(ABORT, 'the disk said no'); END;"
            ))
            .unwrap();
    }

    #[tokio::test]
    async fn a_failed_batch_tells_a_copy_its_first_answer_and_its_new_writes_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let (executor, me, ran, done) = after_one_write(dir.path()).await;
        let far = Instant::now() + Duration::from_secs(60);
        // The batch's commit fails at the vault's revision, after every write in it went.
        refuse(dir.path(), "vaults", "UPDATE");
        let release = hold(&executor).await;
        let new = put(RequestId::generate(), "new");
        let copy = spawn_put(&executor, me, ran.clone(), far);
        let first = spawn_put(&executor, me, new.clone(), far);
        until_queued(&executor, 2, 0).await;
        drop(release);
        assert_eq!(
            copy.await.unwrap(),
            Ok(done.clone()),
            "the copy of a write that ran is never told it was cut short"
        );
        let interrupted = WriteAnswer::NotCarriedOut {
            reason: NotCarriedOutReason::Interrupted,
        };
        assert_eq!(first.await.unwrap(), Ok(interrupted));
        assert_eq!(
            executor.status(me, new.request_id, None).await.unwrap(),
            CallState::NotCarriedOut {
                reason: NotCarriedOutReason::Interrupted
            }
        );
        let stored = executor
            .apply(|conn| records::get(conn, "v", "new"))
            .await
            .unwrap();
        assert_eq!(stored, None, "the cut-short write left nothing");
        assert!(executor.drain(Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn a_write_whose_batch_and_fence_both_failed_stays_running_until_a_restart_fences_it() {
        let dir = tempfile::tempdir().unwrap();
        let (executor, me) = started_with(dir.path(), CapacityRules::default(), clock());
        let far = Instant::now() + Duration::from_secs(60);
        // Every journal insert fails: the write's answer, then both fences.
        refuse(dir.path(), "journal", "INSERT");
        let call = put(RequestId::generate(), "k");
        assert_eq!(
            executor.submit(me, call.clone(), far).await,
            Err(SubmitError::Lost),
            "nothing definite can be said: its answer is withheld"
        );
        // Its fate is only known after a restart: asked, the owner says it is running...
        assert!(matches!(
            executor.status(me, call.request_id, None).await.unwrap(),
            CallState::Running { .. }
        ));
        // ...and a copy is told to ask again, never "not carried out".
        let again = executor.submit(me, call.clone(), far).await.unwrap();
        assert!(
            matches!(&again, WriteAnswer::Refused(r) if r.code == RefusalCode::Busy),
            "{again:?}"
        );
        assert!(executor.drain(Duration::from_secs(5)).await);
        drop(executor);
        // The disk recovers; the restart fences it from its mark.
        store::open(&dir.path().join("ferry.db"))
            .unwrap()
            .execute_batch("DROP TRIGGER boom")
            .unwrap();
        let restarted = start(
            &dir.path().join("ferry.db"),
            limits(),
            CapacityRules::default(),
        );
        let interrupted = NotCarriedOutReason::Interrupted;
        assert_eq!(
            restarted.status(me, call.request_id, None).await.unwrap(),
            CallState::NotCarriedOut {
                reason: interrupted
            }
        );
        assert_eq!(
            restarted.submit(me, call, far).await,
            Ok(WriteAnswer::NotCarriedOut {
                reason: interrupted
            }),
            "it never runs afterwards"
        );
        assert!(restarted.drain(Duration::from_secs(5)).await);
    }

    /// A write (key `queued`) held in the queue, then a stop that has taken the queue: the
    /// write, its submission, what releases the queue, and the drain.
    async fn drain_with_one_queued(
        executor: &Arc<Executor>,
        me: NodeId,
        deadline: Instant,
    ) -> (
        WriteCall,
        tokio::task::JoinHandle<Result<WriteAnswer, SubmitError>>,
        std::sync::mpsc::Sender<()>,
        tokio::task::JoinHandle<bool>,
    ) {
        let release = hold(executor).await;
        let queued = put(RequestId::generate(), "queued");
        let first = spawn_put(executor, me, queued.clone(), deadline);
        until_queued(executor, 1, 0).await;
        let stopping = {
            let executor = executor.clone();
            tokio::spawn(async move { executor.drain(Duration::from_secs(5)).await })
        };
        let stopped = async {
            while !executor.stopping() {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), stopped)
            .await
            .expect("the stop never took the queue");
        (queued, first, release, stopping)
    }

    #[tokio::test]
    async fn a_copy_sent_while_the_owner_stops_hears_the_truth_about_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let (executor, me, ran, done) = after_one_write(dir.path()).await;
        let far = Instant::now() + Duration::from_secs(60);
        // A write still queued when the stop comes.
        let (queued, first, release, stopping) = drain_with_one_queued(&executor, me, far).await;
        // A copy of a write that ran hears its first answer, not "stopping, not carried out".
        assert_eq!(executor.submit(me, ran, far).await, Ok(done));
        // A copy of one that may yet run hears nothing it could mistake for "not carried out".
        assert_eq!(
            executor.submit(me, queued, far).await,
            Err(SubmitError::Lost)
        );
        // Only an id the owner holds nothing of is told it is stopping.
        assert_eq!(
            executor
                .submit(me, put(RequestId::generate(), "new"), far)
                .await,
            Err(SubmitError::Stopping)
        );
        drop(release);
        assert_eq!(
            first.await.unwrap(),
            Ok(WriteAnswer::Done { revision: 2 }),
            "the queued write ran once, as the stop drains"
        );
        assert!(stopping.await.unwrap());
    }

    #[tokio::test]
    async fn a_write_that_came_after_the_stop_runs_never_and_hears_the_truth_about_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let (executor, me, ran, done) = after_one_write(dir.path()).await;
        let far = Instant::now() + Duration::from_secs(60);
        // The gateway began to stop, but the executor still takes the work that came before.
        let release = hold(&executor).await;
        let queued = put(RequestId::generate(), "queued");
        let first = spawn_put(&executor, me, queued.clone(), far);
        until_queued(&executor, 1, 0).await;
        // A copy of a write that ran hears its first answer.
        assert_eq!(executor.turn_away(me, ran.request_id), Ok(done));
        // A copy of one queued (it will run in the drain) hears nothing.
        assert_eq!(
            executor.turn_away(me, queued.request_id),
            Err(SubmitError::Lost)
        );
        // An id the owner holds nothing of is not carried out, and a copy of it that came
        // before the stop but reaches the executor after is never admitted: it never runs.
        let new = put(RequestId::generate(), "new");
        assert_eq!(
            executor.turn_away(me, new.request_id),
            Err(SubmitError::Stopping)
        );
        assert_eq!(
            executor.submit(me, new.clone(), far).await,
            Err(SubmitError::Stopping)
        );
        drop(release);
        assert_eq!(first.await.unwrap(), Ok(WriteAnswer::Done { revision: 2 }));
        assert!(executor.drain(Duration::from_secs(5)).await);
        let conn = store::open(&dir.path().join("ferry.db")).unwrap();
        assert_eq!(journal::lookup(&conn, me, new.request_id).unwrap(), None);
        assert_eq!(crate::store::records::get(&conn, "v", "new").unwrap(), None);
    }

    #[tokio::test]
    async fn a_settle_query_after_the_stop_took_the_queue_hears_what_the_owner_knows() {
        let dir = tempfile::tempdir().unwrap();
        let (executor, me, ran, done) = after_one_write(dir.path()).await;
        let far = Instant::now() + Duration::from_secs(60);
        let (queued, first, release, stopping) = drain_with_one_queued(&executor, me, far).await;
        assert_eq!(
            executor.status(me, ran.request_id, None).await,
            Ok(CallState::Answered(done))
        );
        assert!(matches!(
            executor.status(me, queued.request_id, None).await,
            Ok(CallState::Running { .. })
        ));
        // No tombstone can be written now: an unseen id is "ask again later", not a fence.
        let unseen = RequestId::generate();
        assert_eq!(
            executor.status(me, unseen, None).await,
            Err(SubmitError::Stopping)
        );
        drop(release);
        let answered = first.await.unwrap();
        assert_eq!(answered, Ok(WriteAnswer::Done { revision: 2 }));
        assert_eq!(
            executor.status(me, queued.request_id, None).await,
            Ok(CallState::Answered(WriteAnswer::Done { revision: 2 }))
        );
        assert!(stopping.await.unwrap());
        let conn = store::open(&dir.path().join("ferry.db")).unwrap();
        assert_eq!(journal::lookup(&conn, me, unseen).unwrap(), None);
    }
}
