//! Thousands of interleavings of one caller's writes against a real owner store, checking the
//! promises of SPEC 5-7 that keep a write from running twice or being misreported:
//! - no request id runs twice;
//! - a write answered `unavailable` ("nothing was sent") never ran;
//! - a write answered `not_carried_out` never ran, and never runs later;
//! - a write answered done ran exactly once, at the revision it was told;
//! - a write answered `outcome_unknown` settles to the truth, and never runs after that.
//!
//! How: one deterministic simulation per seed. The caller is the real [`WriteMachine`]. The
//! owner is a real SQLite store driven through the real `verbs::execute`, `verbs::status` and
//! `verbs::fence_marks`, in the steps `owner::executor` uses: a batch's running marks, then its
//! transaction. Between them, the network fails sends before the first byte, drops requests,
//! loses answers, delivers copies late and lets deadlines pass; the owner crashes between a
//! batch's marks and its transaction (or before a write reached a batch) and restarts. Settle
//! queries run between batches, in transactions of their own (the executor answers those in a
//! batch after its writes: the simulation's order is the harsher one), so none hears `running`
//! here; a batch whose commit and fence both fail (its ids stranded, answered `running`) is
//! tested in `owner/executor.rs`. A small PRNG
//! makes every choice and time is virtual (a fixed `Instant` plus simulated `Duration`s), so
//! nothing sleeps and a seed replays exactly.
//!
//! Replaying: a failure names its seed and prints that run's trace. Run the seed alone with
//! `INTERLEAVINGS_SEED=<seed> cargo test -p ferry-gateway --test interleavings -- --nocapture`;
//! it prints the trace even when it passes.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_names::{AppName, VaultName};
use std::time::{Duration, Instant};

use ferry_core::rng::Rng;
use ferry_gateway::owner::marks::Mark;
use ferry_gateway::owner::verbs::{self, BatchVaults, Execution, WriteLimits};
use ferry_gateway::store::{self, journal, records, vaults};
use ferry_peer::call::WriteCall;
use ferry_peer::outcome::{NotSentReason, Refusal, RefusalCode, UnknownReason, WriteOutcome};
use ferry_peer::routes::RouteKind;
use ferry_peer::wire::{CallState, Priority, RequestId, WriteAnswer, WriteVerb};
use ferry_peer::write_machine::{Event, Step, WriteMachine};
use ferry_ticket::{NodeId, NodeKey};
use rusqlite::Connection;
use tempfile::TempDir;

/// The default run: seeds `0..SEEDS`, each one whole simulation of `WRITES_PER_SEED` writes.
const SEEDS: u64 = 200;
const WRITES_PER_SEED: usize = 25;
/// Writes arrive spread over this much virtual time, so a handful are in progress at once.
const ARRIVAL_SPREAD_MS: u64 = 8_000;
/// The wall-clock time the simulation pretends to start at. Fixed, so request ids and journal
/// times are the same on every run; the owner's clock is this plus the virtual time, so every
/// id is recent to it and none is refused as stale.
const BASE_UNIX_MS: u64 = 1_760_000_000_000;
const VAULT: &str = "sim";
const LIMITS: WriteLimits = WriteLimits {
    max_value_bytes: 1024,
    journal_retention: Duration::from_secs(7 * 86_400),
    collected_before_ms: 0,
};
/// A seed that takes more actions than this is stuck (a bug in the simulation or the machine).
const MAX_ACTIONS: usize = 50_000;
/// The environment variable that runs one seed alone and prints its trace.
const REPLAY_VAR: &str = "INTERLEAVINGS_SEED";

/// What the network and the owner do with one send of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Fails before the first byte reaches QUIC: nothing left this machine.
    NotSent,
    /// The door refuses the ticket; it certifies that no verb ran.
    DoorRefused,
    /// Lost in flight: the owner never sees it.
    Dropped,
    /// The owner runs it and the answer comes back.
    Answered,
    /// The owner runs it and the answer is lost.
    AnswerLost,
    /// Held up in the network and delivered at a later random point, perhaps after the caller
    /// has settled the id (the owner must then refuse to run it).
    Late,
    /// The owner takes it and crashes before its batch commits.
    OwnerCrashes,
}

const FATES: [(Fate, u64); 7] = [
    (Fate::NotSent, 3),
    (Fate::DoorRefused, 2),
    (Fate::Dropped, 2),
    (Fate::Answered, 8),
    (Fate::AnswerLost, 3),
    (Fate::Late, 3),
    (Fate::OwnerCrashes, 1),
];

/// Why a caller is waiting after its send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// The owner took it; the answer comes back when its batch commits.
    ForAnswer,
    /// The owner took it; the connection breaks when its batch commits.
    ForBreak,
    /// Nothing will come back: the caller learns only at its deadline.
    Silence,
}

/// Where one write stands, from the driver's side.
#[derive(Debug, Clone)]
enum Phase {
    /// The app has not made the call yet.
    NotArrived,
    /// The machine asked for this step and the driver has not performed it yet.
    Ready(Step),
    /// Sent; the driver waits on the network.
    Waiting(Wait),
    Finished(WriteOutcome),
}

#[derive(Debug)]
struct SimWrite {
    call: WriteCall,
    arrives: Instant,
    timeout: Duration,
    deadline: Instant,
    machine: Option<WriteMachine>,
    phase: Phase,
    /// A send of this id may have reached the owner: the machine must never send it again.
    left: bool,
    /// How many times the owner recorded this id as done (the store is checked separately).
    runs: u32,
}

impl SimWrite {
    fn key(&self) -> String {
        record_key(self.call.request_id)
    }
}

/// Each request id puts its own key, so "it ran" is "its record exists".
fn record_key(id: RequestId) -> String {
    format!("w/{id}")
}

/// A UUIDv7 stamped `unix_ms`, unique within a seed by `index`, the rest from `rng`.
fn request_id(unix_ms: u64, index: usize, rng: &mut Rng) -> RequestId {
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&unix_ms.to_be_bytes()[2..]);
    bytes[6..12].copy_from_slice(&rng.next_u64().to_be_bytes()[..6]);
    bytes[6] = 0x70 | (bytes[6] & 0x0f); // version 7
    bytes[8] = 0x80 | (bytes[8] & 0x3f); // RFC 9562 variant
    bytes[12..].copy_from_slice(&(index as u32).to_be_bytes());
    let id = RequestId::from_bytes(bytes);
    assert_eq!(RequestId::parse(&id.to_string()), Ok(id), "a valid UUIDv7");
    id
}

fn door_refusal() -> WriteAnswer {
    WriteAnswer::Refused(Refusal {
        at_door: true,
        reason: Some("old_epoch".into()),
        ..Refusal::new(RefusalCode::TicketRefused, "ticket from an old epoch")
    })
}

fn connection_lost() -> Event {
    Event::Lost {
        reason: UnknownReason::ConnectionLost,
        detail: "the connection broke after the send".into(),
    }
}

/// Counts across a run, so the test can show (and assert) that it explored every path.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    writes: u64,
    /// Scheduler actions: steps of the writes, owner batches, crashes, deliveries, ticks.
    actions: u64,
    not_sent: u64,
    done: u64,
    refused: u64,
    not_carried_out: u64,
    unknown: u64,
    /// `outcome_unknown` ids that had in fact run, and that had not.
    unknown_that_ran: u64,
    unknown_that_did_not: u64,
    /// Settle queries that fenced a write the owner had taken and not run yet (it then ran
    /// into its fence).
    settled_before_run: u64,
    /// Writes a crash took before their batch marked them (answered `never_arrived` after).
    lost_unmarked: u64,
    /// Late copies the owner ran, and those it answered from the journal instead.
    late_admitted: u64,
    late_refused: u64,
    crashes: u64,
    /// Pre-crash executions that landed after the restart, fenced by the journal.
    zombies_fenced: u64,
    timeouts: u64,
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        let Stats {
            writes,
            actions,
            not_sent,
            done,
            refused,
            not_carried_out,
            unknown,
            unknown_that_ran,
            unknown_that_did_not,
            settled_before_run,
            lost_unmarked,
            late_admitted,
            late_refused,
            crashes,
            zombies_fenced,
            timeouts,
        } = other;
        self.writes += writes;
        self.actions += actions;
        self.not_sent += not_sent;
        self.done += done;
        self.refused += refused;
        self.not_carried_out += not_carried_out;
        self.unknown += unknown;
        self.unknown_that_ran += unknown_that_ran;
        self.unknown_that_did_not += unknown_that_did_not;
        self.settled_before_run += settled_before_run;
        self.lost_unmarked += lost_unmarked;
        self.late_admitted += late_admitted;
        self.late_refused += late_refused;
        self.crashes += crashes;
        self.zombies_fenced += zombies_fenced;
        self.timeouts += timeouts;
    }
}

/// The owner: a real store, driven the way `owner::executor` drives it.
struct Owner {
    _dir: TempDir,
    conn: Connection,
    /// Writes the owner took whose batch has not run yet (each with whether it is a late copy).
    admitted: Vec<(usize, bool)>,
    /// Writes marked before a crash whose batch transaction still lands after the restart's
    /// recovery. The executor never does this, but the commit-time check of SPEC 7 rule 5 (a
    /// request declared dead stays dead) must hold if it did, so the simulation makes it happen.
    zombies: Vec<usize>,
}

impl Owner {
    fn open() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let conn = store::open(&dir.path().join("ferry.db")).unwrap();
        // Durability is not what this test checks (crashes are simulated at transaction
        // boundaries, not by killing the process), and an fsync per transaction would make
        // thousands of them slow.
        conn.pragma_update(None, "synchronous", "OFF").unwrap();
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(&conn, &VaultName::from_static(VAULT), me, BASE_UNIX_MS).unwrap();
        Self {
            _dir: dir,
            conn,
            admitted: Vec::new(),
            zombies: Vec::new(),
        }
    }

    /// A batch's transaction, as `executor::execute_all` runs it: each write's answer recorded
    /// (and its effect made) only if the journal does not hold its id, the vaults' revisions
    /// written back once.
    fn execute(&mut self, caller: NodeId, calls: &[WriteCall], now_ms: u64) -> Vec<Execution> {
        let tx = self.conn.transaction().unwrap();
        let mut batch_vaults = BatchVaults::default();
        let mut executions = Vec::with_capacity(calls.len());
        for call in calls {
            executions.push(
                verbs::execute(&tx, &mut batch_vaults, caller, call, &LIMITS, now_ms).unwrap(),
            );
        }
        batch_vaults.write_back(&tx).unwrap();
        tx.commit().unwrap();
        executions
    }

    /// A settle query, in its own transaction (it may write a tombstone).
    fn status(&mut self, caller: NodeId, id: RequestId, now_ms: u64) -> CallState {
        let tx = self.conn.transaction().unwrap();
        let vault = VaultName::from_static(VAULT);
        let state = verbs::status(&tx, caller, id, Some(&vault), &LIMITS, now_ms).unwrap();
        tx.commit().unwrap();
        state
    }

    /// The restart after a crash, as `executor::recover` runs it: each marked id the journal
    /// does not hold is now interrupted.
    fn recover(&mut self, marks: &[Mark], now_ms: u64) -> usize {
        let tx = self.conn.transaction().unwrap();
        let interrupted = journal::recover_interrupted(&tx, now_ms).unwrap()
            + verbs::fence_marks(&tx, marks, &LIMITS, now_ms).unwrap();
        tx.commit().unwrap();
        interrupted
    }

    fn vault_revision(&self) -> u64 {
        vaults::get(&self.conn, VAULT).unwrap().unwrap().revision
    }

    /// The revision of `key`'s record, if the write that puts it ran.
    fn record_revision(&self, key: &str) -> Option<u64> {
        records::get(&self.conn, VAULT, key)
            .unwrap()
            .map(|row| row.revision)
    }
}

/// What the scheduler does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Perform one ready write's next step.
    Drive,
    /// The owner runs one batch of everything it took.
    Execute,
    /// The owner crashes (after marking its batch) and restarts.
    Crash,
    /// A late copy reaches the owner.
    Deliver,
    /// A pre-crash execution lands after the restart.
    Zombie,
    /// Virtual time passes.
    Tick,
}

/// One seed's world: the caller's writes, the network between, the owner.
struct Sim {
    seed: u64,
    rng: Rng,
    start: Instant,
    now: Instant,
    caller: NodeId,
    owner: Owner,
    writes: Vec<SimWrite>,
    /// Copies of sends held up in the network, delivered at a later random point.
    in_flight: Vec<usize>,
    stats: Stats,
    trace: Vec<String>,
}

impl Sim {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        // One base instant for the whole run; only offsets from it matter.
        let start = Instant::now();
        let writes = (0..WRITES_PER_SEED)
            .map(|index| {
                let offset = rng.millis(0, ARRIVAL_SPREAD_MS);
                let id = request_id(BASE_UNIX_MS + offset.as_millis() as u64, index, &mut rng);
                SimWrite {
                    call: WriteCall {
                        request_id: id,
                        app: AppName::from_static("sim"),
                        vault: VaultName::from_static(VAULT),
                        verb: WriteVerb::Put {
                            key: record_key(id),
                            value: vec![index as u8],
                            if_revision: None,
                        },
                        priority: Priority::Interactive,
                    },
                    arrives: start + offset,
                    timeout: rng.millis(300, 4_000),
                    deadline: start,
                    machine: None,
                    phase: Phase::NotArrived,
                    left: false,
                    runs: 0,
                }
            })
            .collect();
        Self {
            seed,
            rng,
            start,
            now: start,
            caller: NodeKey::from_secret_bytes([2; 32]).node_id(),
            owner: Owner::open(),
            writes,
            in_flight: Vec::new(),
            stats: Stats {
                writes: WRITES_PER_SEED as u64,
                ..Stats::default()
            },
            trace: Vec::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        BASE_UNIX_MS + self.elapsed_ms()
    }

    fn elapsed_ms(&self) -> u64 {
        (self.now - self.start).as_millis() as u64
    }

    fn log(&mut self, line: String) {
        let line = format!("{:>6}ms {line}", self.elapsed_ms());
        self.trace.push(line);
    }

    fn fail(&self, what: String) -> ! {
        panic!(
            "seed {seed}: {what}\nreplay: {REPLAY_VAR}={seed} cargo test -p ferry-gateway --test interleavings -- --nocapture\ntrace:\n{}",
            self.trace.join("\n"),
            seed = self.seed,
        )
    }

    /// Runs the seed to the end and checks it; returns its counts and trace.
    fn run(mut self) -> (Stats, Vec<String>) {
        let mut actions = 0;
        while !self.all_finished() {
            actions += 1;
            if actions > MAX_ACTIONS {
                self.fail(format!("not finished after {MAX_ACTIONS} actions"));
            }
            let action = self.pick_action(true);
            self.act(action);
            self.expire_waits();
        }
        self.log("every write finished; the network and the owner drain".into());
        let mut drain_actions = 0;
        while !(self.owner.admitted.is_empty()
            && self.owner.zombies.is_empty()
            && self.in_flight.is_empty())
        {
            actions += 1;
            drain_actions += 1;
            if drain_actions > MAX_ACTIONS {
                self.fail(format!(
                    "the network and the owner not drained after {MAX_ACTIONS} actions"
                ));
            }
            let action = self.pick_action(false);
            self.act(action);
        }
        self.stats.actions = actions as u64;
        self.check();
        (self.stats, self.trace)
    }

    fn all_finished(&self) -> bool {
        self.writes
            .iter()
            .all(|write| matches!(write.phase, Phase::Finished(_)))
    }

    /// Writes whose next step the driver may perform now.
    fn ready_writes(&self) -> Vec<usize> {
        (0..self.writes.len())
            .filter(|&w| match self.writes[w].phase {
                Phase::NotArrived => self.now >= self.writes[w].arrives,
                Phase::Ready(_) => true,
                Phase::Waiting(_) | Phase::Finished(_) => false,
            })
            .collect()
    }

    fn pick_action(&mut self, callers_active: bool) -> Action {
        let mut choices = Vec::with_capacity(6);
        if callers_active {
            choices.push((Action::Tick, 4));
            if !self.ready_writes().is_empty() {
                choices.push((Action::Drive, 12));
            }
        }
        if !self.owner.admitted.is_empty() {
            choices.push((Action::Execute, 5));
            choices.push((Action::Crash, 1));
        }
        if !self.in_flight.is_empty() {
            choices.push((Action::Deliver, 2));
        }
        if !self.owner.zombies.is_empty() {
            choices.push((Action::Zombie, 2));
        }
        self.rng
            .weighted(&choices)
            .expect("an action is picked only while one is possible")
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Drive => {
                let ready = self.ready_writes();
                let w = ready[self.rng.index(ready.len())];
                self.drive(w);
            }
            Action::Execute => self.execute_admitted(),
            Action::Crash => self.crash(),
            Action::Deliver => self.deliver_late_copy(),
            Action::Zombie => self.run_zombie(),
            Action::Tick => {
                // Mostly small steps; now and then a stall long enough to pass deadlines.
                self.now += if self.rng.one_in(12) {
                    self.rng.millis(500, 3_000)
                } else {
                    self.rng.millis(1, 150)
                };
            }
        }
    }

    /// Performs write `w`'s next step.
    fn drive(&mut self, w: usize) {
        match self.writes[w].phase.clone() {
            Phase::NotArrived => {
                let write = &mut self.writes[w];
                write.deadline = self.now + write.timeout;
                // A LAN route and a tailnet one: every send races them, as the gateway's does.
                let (machine, step) = WriteMachine::start(
                    write.deadline,
                    self.now,
                    &[RouteKind::Lan, RouteKind::Tailnet],
                );
                write.machine = Some(machine);
                let line = format!(
                    "w{w} arrives: {}, timeout {}ms",
                    write.call.request_id,
                    write.timeout.as_millis()
                );
                self.log(line);
                self.enter(w, step);
            }
            Phase::Ready(Step::GetTicket { renew }) => {
                let event = if self.rng.one_in(8) {
                    Event::TicketUnavailable {
                        detail: format!(
                            "the owner could not be reached for a ticket (renew {renew})"
                        ),
                    }
                } else {
                    Event::TicketReady
                };
                self.feed(w, event);
            }
            Phase::Ready(Step::Send { route, .. }) => self.send(w, route),
            Phase::Ready(Step::Settle { .. }) => self.settle(w),
            other => self.fail(format!("w{w} driven in phase {other:?}")),
        }
    }

    /// Moves write `w` to the step its machine asked for.
    fn enter(&mut self, w: usize, step: Step) {
        self.writes[w].phase = match step {
            Step::Finish(outcome) => Phase::Finished(outcome),
            step => Phase::Ready(step),
        };
    }

    /// Reports `event` to write `w`'s machine and takes its next step.
    fn feed(&mut self, w: usize, event: Event) {
        let now = self.now;
        let Some(machine) = self.writes[w].machine.as_mut() else {
            self.fail(format!("w{w} got {event:?} before it started"));
        };
        let step = machine.on(event.clone(), now);
        self.log(format!("w{w} <- {event:?} -> {step:?}"));
        self.enter(w, step);
    }

    /// The caller learns its request is lost: at once, or only at its deadline.
    fn break_now_or_silence(&mut self, w: usize) {
        if self.rng.one_in(2) {
            self.feed(w, connection_lost());
        } else {
            self.writes[w].phase = Phase::Waiting(Wait::Silence);
        }
    }

    /// Write `w` (or a late copy of it) reaches the owner and waits for the next batch.
    fn arrive(&mut self, w: usize, late: bool) {
        self.owner.admitted.push((w, late));
    }

    fn send(&mut self, w: usize, route: usize) {
        if self.writes[w].left {
            self.fail(format!(
                "w{w} was sent again (route {route}) after an earlier send may have reached the owner"
            ));
        }
        let fate = self.rng.weighted(&FATES).expect("every fate has a weight");
        self.log(format!("w{w} send on route {route}: {fate:?}"));
        match fate {
            Fate::NotSent => {
                let reasons = [
                    NotSentReason::ConnectFailed,
                    NotSentReason::ConnectTimedOut,
                    NotSentReason::KeyMismatch,
                    NotSentReason::NoRoute,
                ];
                let event = Event::NotSent {
                    reason: reasons[self.rng.index(reasons.len())],
                    detail: "failed before the first byte".into(),
                };
                self.feed(w, event);
            }
            Fate::DoorRefused => self.feed(w, Event::Answered(door_refusal())),
            Fate::Dropped => {
                self.writes[w].left = true;
                self.break_now_or_silence(w);
            }
            Fate::Late => {
                self.writes[w].left = true;
                self.in_flight.push(w);
                self.break_now_or_silence(w);
            }
            Fate::Answered => {
                self.writes[w].left = true;
                self.arrive(w, false);
                self.writes[w].phase = Phase::Waiting(Wait::ForAnswer);
            }
            Fate::AnswerLost => {
                self.writes[w].left = true;
                self.arrive(w, false);
                // The break comes before the owner runs it, when it answers, or never (the
                // caller times out).
                match self.rng.index(3) {
                    0 => self.feed(w, connection_lost()),
                    1 => self.writes[w].phase = Phase::Waiting(Wait::ForBreak),
                    _ => self.writes[w].phase = Phase::Waiting(Wait::Silence),
                }
            }
            Fate::OwnerCrashes => {
                self.writes[w].left = true;
                self.arrive(w, false);
                self.writes[w].phase = Phase::Waiting(Wait::ForBreak);
                self.crash();
            }
        }
    }

    fn settle(&mut self, w: usize) {
        if self.rng.one_in(4) {
            let event = Event::SettleFailed {
                detail: "the owner could not be reached".into(),
            };
            self.feed(w, event);
            return;
        }
        let now_ms = self.now_ms();
        let state = self
            .owner
            .status(self.caller, self.writes[w].call.request_id, now_ms);
        // A query about a write the owner took and has not run yet fences it (it never arrived,
        // as far as any batch knows); its batch must then leave it unrun.
        let waiting = self.owner.admitted.iter().any(|&(queued, _)| queued == w);
        if waiting && matches!(state, CallState::NotCarriedOut { .. }) {
            self.stats.settled_before_run += 1;
        }
        self.feed(w, Event::Settled(state));
    }

    /// The owner's batch of everything it took; the answers go back to whoever waits.
    fn execute_admitted(&mut self) {
        let batch = std::mem::take(&mut self.owner.admitted);
        let calls: Vec<WriteCall> = batch
            .iter()
            .map(|&(w, _)| self.writes[w].call.clone())
            .collect();
        let now_ms = self.now_ms();
        let executions = self.owner.execute(self.caller, &calls, now_ms);
        for ((w, late), execution) in batch.into_iter().zip(executions) {
            self.log(format!("owner ran w{w}: {execution:?}"));
            if late {
                match execution {
                    Execution::Recorded(_) => self.stats.late_admitted += 1,
                    Execution::Fenced(_) => self.stats.late_refused += 1,
                }
            }
            let answer = match execution {
                Execution::Recorded(answer) | Execution::Fenced(answer) => answer,
            };
            if matches!(answer, WriteAnswer::Done { .. }) {
                self.writes[w].runs += 1;
            }
            match self.writes[w].phase {
                Phase::Waiting(Wait::ForAnswer) => self.feed(w, Event::Answered(answer)),
                Phase::Waiting(Wait::ForBreak) => self.feed(w, connection_lost()),
                // A late copy, or a caller that already gave up: the answer goes nowhere.
                _ => {}
            }
        }
    }

    /// The owner crashes before its batch commits and restarts. Most of what it took was in
    /// the batch and marked; the rest still waited in its queue, unmarked, and is gone.
    fn crash(&mut self) {
        self.stats.crashes += 1;
        let lost = std::mem::take(&mut self.owner.admitted);
        let mut marks = Vec::new();
        for &(w, _) in &lost {
            if self.rng.one_in(4) {
                self.stats.lost_unmarked += 1;
                continue;
            }
            let call = &self.writes[w].call;
            marks.push(Mark {
                caller: self.caller,
                request_id: call.request_id,
                vault: call.vault.to_string(),
            });
            if self.rng.one_in(3) {
                self.owner.zombies.push(w);
            }
        }
        let now_ms = self.now_ms();
        let interrupted = self.owner.recover(&marks, now_ms);
        self.log(format!(
            "owner crashed before running {lost:?} ({} marked); restart fenced {interrupted} as interrupted",
            marks.len()
        ));
        // A restarted owner answers every old connection with a stateless reset: every caller
        // waiting on it sees its connection break.
        let waiting: Vec<usize> = (0..self.writes.len())
            .filter(|&w| matches!(self.writes[w].phase, Phase::Waiting(_)))
            .collect();
        for w in waiting {
            self.feed(w, connection_lost());
        }
    }

    fn deliver_late_copy(&mut self) {
        let w = self
            .in_flight
            .swap_remove(self.rng.index(self.in_flight.len()));
        self.arrive(w, true);
        self.log(format!("late copy of w{w} reached the owner"));
    }

    fn run_zombie(&mut self) {
        let w = self
            .owner
            .zombies
            .swap_remove(self.rng.index(self.owner.zombies.len()));
        let call = self.writes[w].call.clone();
        let now_ms = self.now_ms();
        let execution = self.owner.execute(self.caller, &[call], now_ms).remove(0);
        self.log(format!("pre-crash execution of w{w} landed: {execution:?}"));
        match execution {
            Execution::Fenced(_) => self.stats.zombies_fenced += 1,
            Execution::Recorded(answer) => {
                if matches!(answer, WriteAnswer::Done { .. }) {
                    self.writes[w].runs += 1;
                }
                self.fail(format!(
                    "w{w} was interrupted by the restart, yet its pre-crash execution was recorded: {answer:?}"
                ));
            }
        }
    }

    /// Callers still waiting at their deadline give up: the request left, no answer came.
    fn expire_waits(&mut self) {
        for w in 0..self.writes.len() {
            if matches!(self.writes[w].phase, Phase::Waiting(_))
                && self.now >= self.writes[w].deadline
            {
                self.stats.timeouts += 1;
                let event = Event::Lost {
                    reason: UnknownReason::TimedOut,
                    detail: "no answer came back before the deadline".into(),
                };
                self.feed(w, event);
            }
        }
    }

    /// A very late duplicate of write `w`, whose outcome is settled: it must not run.
    fn send_once_more(&mut self, w: usize) {
        let before = self.owner.vault_revision();
        self.arrive(w, false);
        self.execute_admitted();
        let after = self.owner.vault_revision();
        if after != before {
            self.fail(format!(
                "w{w}: a copy sent after its outcome was settled ran (vault revision {before} -> {after})"
            ));
        }
    }

    /// The promises, checked against the store once everything has drained.
    fn check(&mut self) {
        let ran: Vec<Option<u64>> = self
            .writes
            .iter()
            .map(|write| self.owner.record_revision(&write.key()))
            .collect();
        let ran_count = ran.iter().filter(|revision| revision.is_some()).count() as u64;
        let vault_revision = self.owner.vault_revision();
        // Every run moves the vault's revision on by one, and each id puts its own key.
        if vault_revision != ran_count {
            self.fail(format!(
                "the vault is at revision {vault_revision} but {ran_count} distinct request ids ran: an id ran twice"
            ));
        }
        for (w, &revision) in ran.iter().enumerate() {
            let runs = self.writes[w].runs;
            if runs != u32::from(revision.is_some()) {
                self.fail(format!(
                    "w{w}: the owner answered done {runs} times; its record is {revision:?}"
                ));
            }
            let outcome = match &self.writes[w].phase {
                Phase::Finished(outcome) => outcome.clone(),
                other => self.fail(format!("w{w} never finished: {other:?}")),
            };
            self.log(format!("w{w} ended {outcome:?}; record {revision:?}"));
            match outcome {
                WriteOutcome::NotSent { .. } => {
                    self.stats.not_sent += 1;
                    if revision.is_some() {
                        self.fail(format!("w{w} was answered `unavailable` yet it ran"));
                    }
                }
                WriteOutcome::NotCarriedOut { .. } => {
                    self.stats.not_carried_out += 1;
                    if revision.is_some() {
                        self.fail(format!("w{w} was answered `not_carried_out` yet it ran"));
                    }
                    self.send_once_more(w);
                }
                WriteOutcome::Answered(WriteAnswer::Done { revision: told }) => {
                    self.stats.done += 1;
                    if revision != Some(told) {
                        self.fail(format!(
                            "w{w} was answered done at revision {told}; its record is {revision:?}"
                        ));
                    }
                    self.send_once_more(w);
                }
                WriteOutcome::Answered(answer) => {
                    self.stats.refused += 1;
                    if revision.is_some() {
                        self.fail(format!("w{w} was answered {answer:?} yet it ran"));
                    }
                }
                WriteOutcome::Unknown { .. } => {
                    self.stats.unknown += 1;
                    let now_ms = self.now_ms();
                    let state =
                        self.owner
                            .status(self.caller, self.writes[w].call.request_id, now_ms);
                    match (&state, revision) {
                        (CallState::Answered(WriteAnswer::Done { revision: told }), Some(r))
                            if *told == r =>
                        {
                            self.stats.unknown_that_ran += 1;
                        }
                        (CallState::NotCarriedOut { .. }, None) => {
                            self.stats.unknown_that_did_not += 1;
                        }
                        _ => self.fail(format!(
                            "w{w} was `outcome_unknown` and settles to {state:?}, but its record is {revision:?}"
                        )),
                    }
                    self.send_once_more(w);
                }
            }
        }
    }
}

/// The seeds to run: the default list, or the one named in the environment.
fn seeds() -> Vec<u64> {
    match std::env::var(REPLAY_VAR) {
        Ok(seed) => vec![seed
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{REPLAY_VAR} must be a seed number, not {seed:?}"))],
        Err(_) => (0..SEEDS).collect(),
    }
}

#[test]
fn no_interleaving_runs_a_request_twice_or_misreports_its_outcome() {
    let seeds = seeds();
    let replaying = seeds.len() == 1;
    let mut total = Stats::default();
    for &seed in &seeds {
        let (stats, trace) = Sim::new(seed).run();
        if replaying {
            println!("seed {seed}:\n{}", trace.join("\n"));
        }
        total.add(&stats);
    }
    println!("{} seeds: {total:#?}", seeds.len());
    if replaying {
        return;
    }
    // The run must have explored every outcome, or its checks prove little.
    for (what, count) in [
        ("unavailable", total.not_sent),
        ("done", total.done),
        ("refused at the door", total.refused),
        ("not_carried_out", total.not_carried_out),
        ("outcome_unknown", total.unknown),
        ("outcome_unknown that had run", total.unknown_that_ran),
        ("outcome_unknown that had not", total.unknown_that_did_not),
        (
            "settle fenced a write before it ran",
            total.settled_before_run,
        ),
        ("write lost unmarked in a crash", total.lost_unmarked),
        ("late copy refused by the journal", total.late_refused),
        ("late copy admitted", total.late_admitted),
        ("owner crash", total.crashes),
        ("pre-crash execution fenced", total.zombies_fenced),
        ("timeout", total.timeouts),
    ] {
        assert!(
            count >= 10,
            "only {count} × {what} across {} seeds",
            seeds.len()
        );
    }
}

#[test]
fn a_seed_replays_exactly() {
    let (first_stats, first) = Sim::new(7).run();
    let (_, second) = Sim::new(7).run();
    assert!(first_stats.writes > 0);
    assert_eq!(first, second, "the same seed took a different path");
}
