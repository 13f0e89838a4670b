//! The owner's capacity budget (SPEC 7 rules 5 and 7): which write the owner takes, which it
//! refuses `busy` or `rate_limited` (both not carried out, neither journaled, the same id may
//! be sent again), and in what order the ones it takes run.
//!
//! Three pieces, each a plain state machine with time passed in:
//! - [`Gate`]: at arrival, the per-caller cap (writes of one caller node and app queued or
//!   running), the per-node cap (writes of every app of one caller node together), the bound of
//!   the queue, the wait bound (no more interactive writes held than the owner answers in
//!   [`CapacityRules::interactive_wait`] at the pace it has been running), and the rate limits
//!   (per caller, per node; off by default). The app is a name
//!   the caller chooses and the node is its TLS key, so the per-node bounds are what an app
//!   that names itself anew for each write runs into. A refusal `busy` spends nothing of the
//!   rate budget, and a request the owner later refuses `busy` (it waited past its deadline)
//!   gets its spending back: a busy write costs the caller nothing.
//! - [`ClassQueue`]: two classes, interactive first, except that a background request that has
//!   waited [`CapacityRules::aging`] goes before them (aging instead of absolute priority, so a
//!   replica's catch-up is slowed by apps' writes, never starved by them).
//! - [`at_start`]: the budget per request: a write starts only if it can still finish and be
//!   answered before its deadline.
//!
//! Why a hand-written limiter and not `governor`: the limit must give a refused request its
//! spending back (governor has no refund), and it must read the same clock as every other
//! decision here (the simulation's virtual one); the GCRA below is governor's algorithm in
//! twenty lines.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::outcome::{self, RefusalCode};
use crate::wire::Priority;

/// The capacity rules, with SPEC 7's defaults except the rate limit, which is off
/// (`docs/decisions.md`, "Capacity per calling node, and no rate limit by default").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityRules {
    /// Off: one first-come-first-served queue, no per-caller cap, no rate limit (what the
    /// overload benchmark compares against). Deadlines and the queue's bound still hold.
    pub enabled: bool,
    /// Writes of one caller node and app queued or running at once.
    pub per_caller: u32,
    /// Writes of one caller node, all its apps together, queued or running at once; 0: no
    /// bound but the per-caller one. By default [`CapacityRules::node_cap_for`] `per_caller`.
    pub per_node: u32,
    /// Writes one caller node and app may start per minute; 0: no limit.
    pub rate_per_minute: u32,
    /// How many of them may come at once after a quiet spell.
    pub rate_burst: u32,
    /// Writes one caller node, all its apps together, may start per minute, a minute's worth
    /// of them at once after a quiet spell; 0: no limit.
    pub node_rate_per_minute: u32,
    /// How long a background request waits before it goes ahead of interactive ones.
    pub aging: Duration,
    /// Writes queued (both classes together) before more are refused `busy`.
    pub queue_depth: usize,
    /// Background writes queued or running at once, from every caller together (0: no bound
    /// but the queue's): a bounded share of the owner for bulk work, for an owner whose own
    /// time is what apps wait for.
    pub background_in_flight: u32,
    /// Background writes queued or running at once while interactive writes are about (held,
    /// or one arrived within [`INTERACTIVE_LINGERS`]), from every caller together; 0: no such
    /// bound. Past it a background write is refused `busy` (`background_full`), and the calling
    /// gateway holds its background writes to this owner for a while ([`send_gate`]). An owner
    /// whose own time is short serves its writes about in the order they reach it, so each
    /// background write it holds beside an app's interactive one delays that one; this keeps
    /// the interactive writes' wait near what it is without the background work
    /// (`docs/decisions.md`, "Background beside interactive writes").
    pub background_beside_interactive: u32,
    /// The wait bound: interactive writes are held (queued or running) only as many as the
    /// owner answers in this long at the pace its batches have been running, and never fewer
    /// than [`WAIT_BOUND_FLOOR`]; past it an interactive write is refused `busy`
    /// ([`Refused::Saturated`]), and the calling gateway holds its writes to this owner for a
    /// while ([`send_gate`]). Zero: no such bound. An overloaded owner then admits what it can
    /// carry instead of queueing it (`docs/decisions.md`, "The wait bound").
    pub interactive_wait: Duration,
}

/// The wait bound never holds fewer interactive writes than this: six machines at their
/// whole default per-node share (16) at once. A person's work, and an owner that has not yet
/// run a batch, never meet the bound; it holds only an owner past its pace.
pub const WAIT_BOUND_FLOOR: u32 = 96;
/// The default of [`CapacityRules::background_beside_interactive`]: one machine's whole
/// default per-node share. One app's import never meets it (its own cap is 4); it holds only
/// when many apps' background work crowds an owner that interactive writes are waiting on.
pub const BACKGROUND_BESIDE_INTERACTIVE: u32 = 16;
/// How long after an interactive write arrived the owner still counts interactive writes as
/// about, for [`CapacityRules::background_beside_interactive`]: a few of a busy app's writes
/// apart, so an app that writes in steps is not taken for gone between them.
pub const INTERACTIVE_LINGERS: Duration = Duration::from_millis(100);
/// The default of [`CapacityRules::interactive_wait`]: a few batches of a busy owner, far
/// under any deadline an app sets, so the writes an overloaded owner holds are answered about
/// as fast as at its full load.
pub const INTERACTIVE_WAIT: Duration = Duration::from_millis(10);

/// How many apps' worth of writes one calling node may hold at the owner when its cap is not
/// set: enough for a few busy apps of one machine at once, few enough that a caller naming
/// itself anew for each write gets four apps' share and no more.
pub const NODE_SHARE_IN_APPS: u32 = 4;

impl CapacityRules {
    /// The per-node cap that goes with a per-caller cap: [`NODE_SHARE_IN_APPS`] of them, so an
    /// owner that raises `per_caller` for one busy app does not find its node capped at it.
    pub fn node_cap_for(per_caller: u32) -> u32 {
        per_caller.saturating_mul(NODE_SHARE_IN_APPS)
    }
}

impl Default for CapacityRules {
    fn default() -> Self {
        let per_caller = 4;
        Self {
            enabled: true,
            per_caller,
            per_node: Self::node_cap_for(per_caller),
            rate_per_minute: 0,
            rate_burst: 600,
            node_rate_per_minute: 0,
            aging: Duration::from_secs(10),
            queue_depth: 4096,
            background_in_flight: 0,
            background_beside_interactive: BACKGROUND_BESIDE_INTERACTIVE,
            interactive_wait: INTERACTIVE_WAIT,
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refused {
    /// `503 busy`: its deadline passed (or would pass) before it could start and be answered.
    DeadlinePassed,
    /// `503 busy`: the queue is full.
    QueueFull,
    /// `503 busy`: this caller node and app already has [`CapacityRules::per_caller`] writes
    /// queued or running.
    CallerCap,
    /// `503 busy`: this caller node, all its apps together, already has
    /// [`CapacityRules::per_node`] writes queued or running.
    NodeCap,
    /// `503 busy`: [`CapacityRules::background_in_flight`] background writes are already
    /// queued or running, or [`CapacityRules::background_beside_interactive`] while
    /// interactive writes are about.
    BackgroundFull,
    /// `503 busy`: the owner already holds as many interactive writes as it answers within
    /// [`CapacityRules::interactive_wait`] at its pace.
    Saturated,
    /// `429 rate_limited`: this caller node and app spent its rate budget.
    RateLimited,
    /// `429 rate_limited`: this caller node, all its apps together, spent its rate budget.
    NodeRateLimited,
}

impl Refused {
    /// The refusal's reason as metrics and logs name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::DeadlinePassed => "deadline",
            Self::QueueFull => "queue_full",
            Self::CallerCap => "caller_cap",
            Self::NodeCap => "node_cap",
            Self::BackgroundFull => "background_full",
            Self::Saturated => "saturated",
            Self::RateLimited => "rate_limited",
            Self::NodeRateLimited => "node_rate_limited",
        }
    }

    /// One sentence for the refusal's detail.
    pub fn detail(self) -> &'static str {
        match self {
            Self::DeadlinePassed => {
                "the request's deadline would pass before the owner could run and answer it"
            }
            Self::QueueFull => "the owner's write queue is full",
            Self::CallerCap => "this app already has as many writes waiting at the owner as it may",
            Self::NodeCap => {
                "this app's machine, all its apps together, already has as many writes waiting \
                 at the owner as it may"
            }
            Self::BackgroundFull => {
                "the owner is already running as much background work as it takes at once \
                 (less while interactive writes are waiting on it)"
            }
            Self::Saturated => {
                "the owner already holds as many writes as it can answer promptly at its pace"
            }
            Self::RateLimited => "this app has sent more writes than the owner's rate limit allows",
            Self::NodeRateLimited => {
                "this app's machine, all its apps together, has sent more writes than the \
                 owner's rate limit allows"
            }
        }
    }

    /// Whether the answer is `429 rate_limited` (else `503 busy`).
    pub fn is_rate_limited(self) -> bool {
        matches!(self, Self::RateLimited | Self::NodeRateLimited)
    }
}

/// A refusal and when the same request may usefully be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub why: Refused,
    pub retry_after: Duration,
}

impl Refusal {
    /// The owner's answer: `busy`, or `rate_limited` when the caller spent its rate budget.
    /// Not carried out, not journaled; the same request id may be sent again after
    /// `retry_after`.
    pub fn answer(self) -> outcome::Refusal {
        let detail = format!(
            "{}; not carried out, send it again with the same request id",
            self.why.detail()
        );
        let code = if self.why.is_rate_limited() {
            RefusalCode::RateLimited
        } else {
            RefusalCode::Busy
        };
        outcome::Refusal {
            retry_after_ms: Some(self.retry_after.as_millis() as u64),
            // Which rule refused it: a calling gateway learns the owner's cap from
            // `caller_cap` ([`send_gate`]), and an app can tell a full queue from its own cap.
            reason: Some(self.why.name().to_string()),
            ..outcome::Refusal::new(code, detail)
        }
    }
}

/// How long a caller refused `busy` for a full queue or its cap waits: about a batch or two.
pub const BUSY_RETRY: Duration = Duration::from_millis(100);
/// How long a caller whose request waited past its deadline waits before sending again.
pub const LATE_RETRY: Duration = Duration::from_secs(1);
/// How many callers' (and nodes') rate state the gate keeps before it forgets the idle ones.
const MAX_TRACKED: usize = 4096;

/// A caller as the gate counts it: an app of a node. The app is whatever name the caller
/// sends; the node is what the owner knows for sure (the connection's TLS key, or the owner
/// itself for its local apps), so every app of one node together is held to the per-node
/// bounds and a new name buys no more of the owner.
pub trait Caller: Ord + Clone {
    type Node: Ord + Clone;
    fn node(&self) -> Self::Node;
}

/// `(node, app)`, the owner's name for a caller.
impl<N: Ord + Clone, A: Ord + Clone> Caller for (N, A) {
    type Node = N;
    fn node(&self) -> N {
        self.0.clone()
    }
}

/// What one caller, or one node (all its apps together), holds at the gate.
#[derive(Debug, Clone, Copy, Default)]
struct Held {
    /// Writes queued or running.
    in_flight: u32,
    /// GCRA's theoretical arrival time: the rate budget is spent up to here.
    tat: Option<Instant>,
}

/// One caller's state at the gate.
#[derive(Debug, Clone, Copy, Default)]
struct CallerState {
    held: Held,
    admitted: u64,
    refused: u64,
}

/// A rate limit: `per_minute` sustained (0: none), `burst` at once after a quiet spell.
#[derive(Debug, Clone, Copy)]
struct Rate {
    per_minute: u32,
    burst: u32,
}

impl Rate {
    /// The time between two writes at the sustained rate.
    fn emission(self) -> Duration {
        Duration::from_secs(60) / self.per_minute.max(1)
    }

    /// GCRA: the new theoretical arrival time, or how long until the budget allows one more.
    fn spend(self, tat: Option<Instant>, now: Instant) -> Result<Option<Instant>, Duration> {
        if self.per_minute == 0 {
            return Ok(tat);
        }
        let emission = self.emission();
        let tolerance = emission * self.burst.max(1).saturating_sub(1);
        let tat = tat.map_or(now, |tat| tat.max(now));
        let ahead = tat - now;
        if ahead > tolerance {
            return Err(ahead - tolerance);
        }
        Ok(Some(tat + emission))
    }

    /// One write's spending given back.
    fn give_back(self, tat: Option<Instant>) -> Option<Instant> {
        if self.per_minute == 0 {
            return tat;
        }
        tat.and_then(|tat| tat.checked_sub(self.emission()))
    }
}

/// What the gate knows of one caller, for `ferry status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerLoad<K> {
    pub caller: K,
    pub in_flight: u32,
    pub admitted: u64,
    pub refused: u64,
}

/// The gate in front of the owner's queue: the per-caller and per-node caps, the queue's
/// bound, the rate limits. `K` names a caller (its node and app).
#[derive(Debug)]
pub struct Gate<K: Caller> {
    rules: CapacityRules,
    callers: BTreeMap<K, CallerState>,
    nodes: BTreeMap<K::Node, Held>,
    queued: [usize; 2],
    /// Background writes admitted and not yet finished.
    background: u32,
    /// Interactive writes admitted and not yet finished.
    interactive: u32,
    /// When the last interactive write arrived (admitted or not).
    interactive_arrived: Option<Instant>,
    /// The pace of the owner's batches, for the wait bound.
    pace: BatchPace,
}

/// The shortest batch whose pace [`BatchPace`] believes.
pub const PACE_GRAIN: Duration = Duration::from_micros(50);

/// Writes a second the owner's batches carried while they ran: an exponentially weighted
/// average, 1/8 per batch. The wait bound multiplies it by its wait.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchPace {
    writes_per_second: f64,
}

impl BatchPace {
    /// One batch of `writes` ran in `took`. A batch that took less than [`PACE_GRAIN`] says
    /// nothing: a clock's grain, a virtual clock that does not move while a batch runs (the
    /// simulation's), or a batch answered without running (its marks could not be written).
    pub fn observe(&mut self, writes: usize, took: Duration) {
        if writes == 0 || took < PACE_GRAIN {
            return;
        }
        let sample = writes as f64 / took.as_secs_f64();
        self.writes_per_second = if self.writes_per_second == 0.0 {
            sample
        } else {
            (self.writes_per_second * 7.0 + sample) / 8.0
        };
    }

    pub fn writes_per_second(&self) -> f64 {
        self.writes_per_second
    }

    /// How many writes the owner answers in `wait` at this pace, never fewer than the floor.
    pub fn held_within(&self, wait: Duration) -> u32 {
        let at_pace = (self.writes_per_second * wait.as_secs_f64()).min(u32::MAX as f64);
        (at_pace as u32).max(WAIT_BOUND_FLOOR)
    }
}

fn class_index(class: Priority) -> usize {
    match class {
        Priority::Interactive => 0,
        Priority::Background => 1,
    }
}

impl<K: Caller> Gate<K> {
    pub fn new(rules: CapacityRules) -> Self {
        Self {
            rules,
            callers: BTreeMap::new(),
            nodes: BTreeMap::new(),
            queued: [0, 0],
            background: 0,
            interactive: 0,
            interactive_arrived: None,
            pace: BatchPace::default(),
        }
    }

    /// A batch of `writes` ran in `took`: the pace the wait bound reckons with.
    pub fn batch_ran(&mut self, writes: usize, took: Duration) {
        self.pace.observe(writes, took);
    }

    /// How many interactive writes the wait bound lets the owner hold now; `None` without one.
    pub fn interactive_bound(&self) -> Option<u32> {
        (self.rules.enabled && !self.rules.interactive_wait.is_zero())
            .then(|| self.pace.held_within(self.rules.interactive_wait))
    }

    /// How many background writes the owner holds at once now; `None` without a bound.
    pub fn background_bound(&self, now: Instant) -> Option<u32> {
        let about = self.interactive > 0
            || self
                .interactive_arrived
                .is_some_and(|at| now.saturating_duration_since(at) < INTERACTIVE_LINGERS);
        let beside = self.rules.background_beside_interactive;
        [
            self.rules.background_in_flight,
            if about { beside } else { 0 },
        ]
        .into_iter()
        .filter(|&bound| bound > 0)
        .min()
        .filter(|_| self.rules.enabled)
    }

    pub fn rules(&self) -> &CapacityRules {
        &self.rules
    }

    fn caller_rate(&self) -> Rate {
        Rate {
            per_minute: self.rules.rate_per_minute,
            burst: self.rules.rate_burst,
        }
    }

    fn node_rate(&self) -> Rate {
        Rate {
            per_minute: self.rules.node_rate_per_minute,
            burst: self.rules.node_rate_per_minute,
        }
    }

    /// A request arrives: admitted (it now counts as queued, and against its caller's and its
    /// node's caps and rate budgets) or refused (it counts for nothing).
    pub fn arrive(
        &mut self,
        caller: &K,
        class: Priority,
        deadline: Instant,
        now: Instant,
    ) -> Result<(), Refusal> {
        if deadline <= now {
            return Err(Refusal {
                why: Refused::DeadlinePassed,
                retry_after: LATE_RETRY,
            });
        }
        if self.queued[0] + self.queued[1] >= self.rules.queue_depth {
            return self.refuse(caller, Refused::QueueFull, BUSY_RETRY);
        }
        if !self.rules.enabled {
            self.queued[class_index(class)] += 1;
            return Ok(());
        }
        if class == Priority::Interactive {
            self.interactive_arrived = Some(now);
        }
        let node = caller.node();
        let state = self.callers.get(caller).copied().unwrap_or_default();
        let node_held = self.nodes.get(&node).copied().unwrap_or_default();
        if state.held.in_flight >= self.rules.per_caller {
            return self.refuse(caller, Refused::CallerCap, BUSY_RETRY);
        }
        if self.rules.per_node > 0 && node_held.in_flight >= self.rules.per_node {
            return self.refuse(caller, Refused::NodeCap, BUSY_RETRY);
        }
        if class == Priority::Background
            && self
                .background_bound(now)
                .is_some_and(|bound| self.background >= bound)
        {
            return self.refuse(caller, Refused::BackgroundFull, BUSY_RETRY);
        }
        if class == Priority::Interactive
            && self
                .interactive_bound()
                .is_some_and(|bound| self.interactive >= bound)
        {
            return self.refuse(caller, Refused::Saturated, BUSY_RETRY);
        }
        // Both budgets are checked before either is spent: a refused write spends nothing.
        let tat = match self.caller_rate().spend(state.held.tat, now) {
            Ok(tat) => tat,
            Err(wait) => return self.refuse(caller, Refused::RateLimited, wait),
        };
        let node_tat = match self.node_rate().spend(node_held.tat, now) {
            Ok(tat) => tat,
            Err(wait) => return self.refuse(caller, Refused::NodeRateLimited, wait),
        };
        let full = |len: usize, known: bool| len >= MAX_TRACKED && !known;
        if full(self.callers.len(), self.callers.contains_key(caller))
            || full(self.nodes.len(), self.nodes.contains_key(&node))
        {
            self.forget_idle(now);
        }
        let entry = self.callers.entry(caller.clone()).or_default();
        entry.held.in_flight += 1;
        entry.held.tat = tat;
        entry.admitted += 1;
        let node_entry = self.nodes.entry(node).or_default();
        node_entry.in_flight += 1;
        node_entry.tat = node_tat;
        self.queued[class_index(class)] += 1;
        match class {
            Priority::Background => self.background += 1,
            Priority::Interactive => self.interactive += 1,
        }
        Ok(())
    }

    /// Counts a request as admitted without any check: only for the injected bug
    /// `RunAfterBusy` (a write refused and queued anyway), so its place is given back like any
    /// other's.
    #[doc(hidden)]
    pub fn admit_unchecked(&mut self, caller: &K, class: Priority) {
        if self.rules.enabled {
            self.callers
                .entry(caller.clone())
                .or_default()
                .held
                .in_flight += 1;
            self.nodes.entry(caller.node()).or_default().in_flight += 1;
            match class {
                Priority::Background => self.background += 1,
                Priority::Interactive => self.interactive += 1,
            }
        }
        self.queued[class_index(class)] += 1;
    }

    fn refuse(&mut self, caller: &K, why: Refused, retry_after: Duration) -> Result<(), Refusal> {
        if let Some(state) = self.callers.get_mut(caller) {
            state.refused += 1;
        }
        Err(Refusal { why, retry_after })
    }

    /// Forgets callers and nodes with nothing in flight whose rate budget has refilled: they
    /// are indistinguishable from ones never seen.
    fn forget_idle(&mut self, now: Instant) {
        let busy = |held: &Held| held.in_flight > 0 || held.tat.is_some_and(|tat| tat > now);
        self.callers.retain(|_, state| busy(&state.held));
        self.nodes.retain(|_, held| busy(held));
    }

    /// An admitted request left the queue (to run, or refused at its start).
    pub fn dequeued(&mut self, class: Priority) {
        let queued = &mut self.queued[class_index(class)];
        *queued = queued.saturating_sub(1);
    }

    /// An admitted request was refused `busy` after all (it waited past its deadline): it
    /// spent nothing, so its caller's and its node's rate budgets are given back.
    pub fn refund(&mut self, caller: &K) {
        if !self.rules.enabled {
            return;
        }
        let (rate, node_rate) = (self.caller_rate(), self.node_rate());
        if let Some(state) = self.callers.get_mut(caller) {
            state.admitted = state.admitted.saturating_sub(1);
            state.refused += 1;
            state.held.tat = rate.give_back(state.held.tat);
        }
        if let Some(node) = self.nodes.get_mut(&caller.node()) {
            node.tat = node_rate.give_back(node.tat);
        }
    }

    /// An admitted request was answered (or dropped): it no longer counts against its
    /// caller's and its node's caps (nor, if it was background work, against the background
    /// bound).
    pub fn finished(&mut self, caller: &K, class: Priority) {
        if !self.rules.enabled {
            return;
        }
        match class {
            Priority::Background => self.background = self.background.saturating_sub(1),
            Priority::Interactive => self.interactive = self.interactive.saturating_sub(1),
        }
        if let Some(state) = self.callers.get_mut(caller) {
            state.held.in_flight = state.held.in_flight.saturating_sub(1);
        }
        if let Some(node) = self.nodes.get_mut(&caller.node()) {
            node.in_flight = node.in_flight.saturating_sub(1);
        }
    }

    /// Requests waiting in each class: (interactive, background).
    pub fn queued(&self) -> (usize, usize) {
        (self.queued[0], self.queued[1])
    }

    /// The `n` callers with the most writes in flight, then the most admitted.
    pub fn top_callers(&self, n: usize) -> Vec<CallerLoad<K>> {
        let mut all: Vec<CallerLoad<K>> = self
            .callers
            .iter()
            .map(|(caller, state)| CallerLoad {
                caller: caller.clone(),
                in_flight: state.held.in_flight,
                admitted: state.admitted,
                refused: state.refused,
            })
            .collect();
        all.sort_by(|a, b| {
            (b.in_flight, b.admitted + b.refused).cmp(&(a.in_flight, a.admitted + a.refused))
        });
        all.truncate(n);
        all
    }
}

/// The owner's queue: interactive first, but a background request that waited `aging` goes
/// before them. First come, first served within a class.
#[derive(Debug)]
pub struct ClassQueue<T> {
    interactive: VecDeque<(Instant, T)>,
    background: VecDeque<(Instant, T)>,
    aging: Duration,
    /// Rules off: one queue in arrival order, whatever the class.
    fifo: bool,
}

impl<T> ClassQueue<T> {
    pub fn new(rules: &CapacityRules) -> Self {
        Self {
            interactive: VecDeque::new(),
            background: VecDeque::new(),
            aging: rules.aging,
            fifo: !rules.enabled,
        }
    }

    pub fn push(&mut self, class: Priority, arrived: Instant, item: T) {
        match class {
            Priority::Background if !self.fifo => self.background.push_back((arrived, item)),
            _ => self.interactive.push_back((arrived, item)),
        }
    }

    /// The next request to run, with the instant it arrived. `background_room`: whether a
    /// background request that has not aged may be taken now (the executor keeps background
    /// work to a part of each batch, so an app's write arriving during one waits little).
    pub fn pop(&mut self, now: Instant, background_room: bool) -> Option<(Instant, T)> {
        let aged = self
            .background
            .front()
            .is_some_and(|(arrived, _)| now.saturating_duration_since(*arrived) >= self.aging);
        if aged {
            return self.background.pop_front();
        }
        match self.interactive.pop_front() {
            Some(next) => Some(next),
            None if background_room => self.background.pop_front(),
            None => None,
        }
    }

    pub fn len(&self) -> usize {
        self.interactive.len() + self.background.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The budget per request, at the head of the queue: a write starts only if it can still run
/// and be answered before its deadline, `service` being what a batch takes now. A request
/// refused here never runs afterwards (it has left the queue).
pub fn at_start(deadline: Instant, now: Instant, service: Duration) -> Result<(), Refusal> {
    if deadline <= now + service {
        return Err(Refusal {
            why: Refused::DeadlinePassed,
            retry_after: LATE_RETRY,
        });
    }
    Ok(())
}

/// How long before its deadline a write still waiting in the queue is withdrawn and answered
/// `busy`: room for the answer to travel back before the caller's deadline passes, so a full
/// queue reads as busy, never as `outcome_unknown`.
const ANSWER_MARGIN: Duration = Duration::from_millis(50);

/// When a write admitted at `now` and still waiting is withdrawn: [`ANSWER_MARGIN`] before its
/// deadline, or a quarter of its budget before it if that is less (a short budget keeps three
/// quarters of itself for the queue); never before `now`.
pub fn withdraw_at(deadline: Instant, now: Instant) -> Instant {
    let margin = ANSWER_MARGIN.min(deadline.saturating_duration_since(now) / 4);
    deadline.checked_sub(margin).unwrap_or(now).max(now)
}

/// Background writes (not yet aged) in one batch at most: a batch's time is what an app's
/// write arriving during it waits, so background work comes in small batches.
pub const MAX_BACKGROUND_PER_BATCH: usize = 32;

/// The pause of a replica catching up after a page (pull and apply) that took `page_took`: as
/// long again, at most a second, so catching up takes at most half of what the owner and the
/// replica's machine have.
pub fn catch_up_pause(page_took: Duration) -> Duration {
    page_took.min(Duration::from_secs(1))
}

/// The most a caller keeps back of its deadline for the owner's answer to come home.
const RETURN_ALLOWANCE: Duration = Duration::from_millis(250);

/// The budget a caller gives the owner (the frame's `deadline_ms`) when `remaining` is left of
/// its own deadline: less by a return allowance (a fifth of it, at most 250 ms), so an owner that
/// refuses a write `busy` at its budget's end is heard before the caller's deadline passes,
/// even on a loaded caller, and overload reads as busy rather than `outcome_unknown`.
pub fn owner_budget(remaining: Duration) -> Duration {
    remaining.saturating_sub(RETURN_ALLOWANCE.min(remaining / 5))
}

/// A smoothed estimate of how long a batch takes (start to durable commit), the `service` of
/// [`at_start`]. Capped, so one stall (a slow fsync) does not refuse every request behind it.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServiceTime {
    micros: u64,
}

/// The most [`ServiceTime`] assumes a batch takes.
const SERVICE_CAP: Duration = Duration::from_millis(250);

impl ServiceTime {
    /// Adds one batch's duration (an exponentially weighted average, 1/8 per batch).
    pub fn observe(&mut self, batch: Duration) {
        let sample = batch.min(SERVICE_CAP).as_micros() as u64;
        self.micros = if self.micros == 0 {
            sample
        } else {
            (self.micros * 7 + sample) / 8
        };
    }

    pub fn estimate(&self) -> Duration {
        Duration::from_micros(self.micros)
    }
}

pub mod send_gate;

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests;
