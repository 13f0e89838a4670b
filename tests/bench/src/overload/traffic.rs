//! The overload benchmark's traffic: writes as apps send them, on one OS thread with its own
//! single-threaded runtime (as in [`crate::load`]), so the generator never takes more than one
//! of the machine's cores.
//!
//! Every write is a `PUT` of the 64-byte value under a fresh key, with a fresh UUIDv7
//! `X-Ferry-Request-Id`, an `X-Ferry-Timeout` and, for background writes, `X-Ferry-Class:
//! background`. It is counted by its final answer's status and JSON `error` code
//! ([`Answer`]). A [`Group`] of writes is paced closed loop (each writer sends its next write
//! when the last is answered) or open loop (arrivals at a rate, each its own task, whatever
//! the answers; a cap on outstanding writes, arrivals past it skipped and counted). A group
//! may resend a write refused `busy` or `rate_limited` under the same request id, as an app
//! should.
//!
//! Every wait is bounded: each request by its timeout plus a margin, each phase by its window
//! plus a drain bound, after which writes still out are abandoned and counted as unanswered.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use ferry_core::rng::mix64;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::load::{self, Conn, LoadError};

/// How long past its own timeout a write may take before it counts as unanswered: the
/// gateway answers by the deadline; this is room for a loaded machine.
const ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// Answers are a few hundred bytes.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// A write refused `busy` or `rate_limited` is resent after a pause in this range (jittered,
/// so resends do not arrive in lockstep). Shorter than the `Retry-After` of whole seconds, so
/// the greedy app pushes harder than a well-behaved one would.
const RESEND_PAUSE_MS: (u64, u64) = (50, 100);
/// The most one write may spend being resent.
const RESEND_BOUND: Duration = Duration::from_secs(10);
/// Connections opened before a phase: at most this many per gateway every [`CONNECT_PACE`].
const CONNECTS_PER_TICK: usize = 2;
const CONNECT_PACE: Duration = Duration::from_millis(1);
/// How often the open-loop pacer wakes to start the arrivals due.
const PACER_TICK: Duration = Duration::from_millis(1);

/// A calling gateway's local API.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub api: SocketAddr,
    pub token: String,
}

/// `X-Ferry-Class`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Interactive,
    Background,
}

/// How a group's writes are paced.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// Closed loop: `per_app` writers for each app, each sending its next write when the last
    /// was answered.
    Closed { per_app: usize },
    /// Open loop: `per_second` arrivals, each its own task, spread over the apps in turn.
    Open { per_second: f64 },
}

/// Writes of one kind in a phase, tallied together.
#[derive(Debug, Clone)]
pub struct Group {
    /// How the report names it: `interactive`, `background`, `polite`, `greedy`, ...
    pub name: &'static str,
    /// Each app with the index of the endpoint (calling gateway) it writes through.
    pub apps: Vec<(usize, String)>,
    pub pace: Pace,
    pub class: Class,
    /// `X-Ferry-Timeout`.
    pub timeout: Duration,
    /// Resend a write refused `busy` or `rate_limited` under the same request id, after a
    /// pause, while the phase runs (and at most [`RESEND_BOUND`]).
    pub resend_refused: bool,
}

/// One phase: groups writing at once for a window.
#[derive(Debug, Clone)]
pub struct Spec {
    pub endpoints: Vec<Endpoint>,
    pub vault: String,
    /// Keys are `<prefix><n:010>`, fresh for every write of the phase.
    pub key_prefix: String,
    pub groups: Vec<Group>,
    /// How long writes are started.
    pub window: Duration,
    /// Writes started at most (closed loop: then the writers stop); `None`: the window alone.
    pub max_writes: Option<u64>,
    /// Open loop: writes out at once; arrivals past it are skipped (and counted).
    pub max_outstanding: usize,
}

/// How one write ended, by HTTP status and JSON `error` code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `200` with a revision.
    Done,
    /// `503 busy`, with the `Retry-After` seconds if given.
    Busy,
    /// `429 rate_limited`.
    RateLimited,
    /// `503 unavailable`: nothing was sent.
    Unavailable(String),
    /// `502 outcome_unknown`.
    OutcomeUnknown(String),
    /// Any other answer.
    Other(String),
    /// No answer: connection refused or broken, or no answer in time.
    Unanswered(String),
}

impl Answer {
    /// Reads an answer's status and body.
    pub fn classify(status: u16, body: &[u8]) -> Self {
        let json = serde_json::from_slice::<serde_json::Value>(body).ok();
        let code = json
            .as_ref()
            .and_then(|json| json.get("error"))
            .and_then(serde_json::Value::as_str);
        let text = || format!("{status} {}", String::from_utf8_lossy(body));
        match (status, code) {
            (200, _) => {
                let revision = json
                    .as_ref()
                    .and_then(|json| json.get("revision"))
                    .and_then(serde_json::Value::as_u64);
                match revision {
                    Some(_) => Self::Done,
                    None => Self::Other(format!("200 without a revision: {}", text())),
                }
            }
            (503, Some("busy")) => Self::Busy,
            (429, Some("rate_limited")) => Self::RateLimited,
            (503, Some("unavailable")) => Self::Unavailable(text()),
            (502, Some("outcome_unknown")) => Self::OutcomeUnknown(text()),
            _ => Self::Other(text()),
        }
    }

    fn refused(&self) -> bool {
        matches!(self, Self::Busy | Self::RateLimited)
    }
}

/// Final answers of a group's writes, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub done: u64,
    pub busy: u64,
    pub rate_limited: u64,
    pub unavailable: u64,
    pub outcome_unknown: u64,
    /// Every other answer, and writes with no answer at all.
    pub other: u64,
    /// Of `other`: writes with no answer (connection broken, no answer in time, abandoned).
    pub no_answer: u64,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.done
            + self.busy
            + self.rate_limited
            + self.unavailable
            + self.outcome_unknown
            + self.other
    }

    fn add(&mut self, answer: &Answer) {
        match answer {
            Answer::Done => self.done += 1,
            Answer::Busy => self.busy += 1,
            Answer::RateLimited => self.rate_limited += 1,
            Answer::Unavailable(_) => self.unavailable += 1,
            Answer::OutcomeUnknown(_) => self.outcome_unknown += 1,
            Answer::Other(_) => self.other += 1,
            Answer::Unanswered(_) => {
                self.other += 1;
                self.no_answer += 1;
            }
        }
    }
}

/// What one group's writes gave.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub counts: Counts,
    /// Every done write: when it was first sent (from the phase's start) and how long it took
    /// to be answered `200`, resends included.
    pub done: Vec<(Duration, Duration)>,
    /// The longest any write took to its final answer, whatever the answer.
    pub max_any: Duration,
    /// Requests sent, resends included.
    pub sent: u64,
    /// Resends of a refused write (same request id).
    pub resends: u64,
    /// Open-loop arrivals not sent: the generator's cap on outstanding writes was reached.
    pub skipped: u64,
    /// The first answer of each unexpected kind, for the report: `unavailable`,
    /// `outcome_unknown`, `other`, `no_answer`.
    pub first: BTreeMap<&'static str, String>,
}

impl Tally {
    fn add(&mut self, written: Written) {
        self.counts.add(&written.answer);
        self.sent += 1 + written.resends;
        self.resends += written.resends;
        self.max_any = self.max_any.max(written.took);
        let note = |kind: &'static str, detail: &str, first: &mut BTreeMap<_, _>| {
            first.entry(kind).or_insert_with(|| detail.to_string());
        };
        match &written.answer {
            Answer::Done => self.done.push((written.at, written.took)),
            Answer::Unavailable(d) => note("unavailable", d, &mut self.first),
            Answer::OutcomeUnknown(d) => note("outcome_unknown", d, &mut self.first),
            Answer::Other(d) => note("other", d, &mut self.first),
            Answer::Unanswered(d) => note("no_answer", d, &mut self.first),
            Answer::Busy | Answer::RateLimited => {}
        }
    }

    fn merge(&mut self, other: Tally) {
        let c = &mut self.counts;
        let o = other.counts;
        c.done += o.done;
        c.busy += o.busy;
        c.rate_limited += o.rate_limited;
        c.unavailable += o.unavailable;
        c.outcome_unknown += o.outcome_unknown;
        c.other += o.other;
        c.no_answer += o.no_answer;
        self.done.extend(other.done);
        self.max_any = self.max_any.max(other.max_any);
        self.sent += other.sent;
        self.resends += other.resends;
        self.skipped += other.skipped;
        for (kind, detail) in other.first {
            self.first.entry(kind).or_insert(detail);
        }
    }

    /// The latencies of done writes first sent within `from..to` (from the phase's start),
    /// sorted.
    pub fn done_within(&self, from: Duration, to: Duration) -> Vec<Duration> {
        let mut within: Vec<Duration> = self
            .done
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, took)| *took)
            .collect();
        within.sort_unstable();
        within
    }

    /// Done writes answered within `from..=to` (from the phase's start), whenever sent.
    pub fn done_answered_within(&self, from: Duration, to: Duration) -> u64 {
        self.done
            .iter()
            .filter(|(at, took)| {
                let answered = *at + *took;
                answered >= from && answered <= to
            })
            .count() as u64
    }

    /// The latencies of every done write, sorted.
    pub fn done_sorted(&self) -> Vec<Duration> {
        self.done_within(Duration::ZERO, Duration::MAX)
    }
}

/// What a phase gave: each group's tally, in the spec's order.
#[derive(Debug, Clone)]
pub struct Run {
    pub groups: Vec<(&'static str, Tally)>,
    /// How long writes were started (the window, or less when stopped early or out of writes).
    pub window: Duration,
    /// The generator thread's CPU time over the phase, where `/proc` could tell.
    pub generator_cpu: Option<Duration>,
    /// How long opening the phase's connections took (before its clock started).
    pub connecting: Duration,
    /// How long the phase ran, drain included.
    pub ran: Duration,
}

impl Run {
    /// The tally of the group named `name` (an empty one if there is none).
    pub fn group(&self, name: &str) -> Tally {
        self.groups
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, tally)| tally.clone())
            .unwrap_or_default()
    }
}

/// A phase running on its own thread.
#[derive(Debug)]
pub struct Running {
    stop: Arc<Stop>,
    started: Instant,
    thread: std::thread::JoinHandle<Result<Run, LoadError>>,
}

impl Running {
    /// When the phase's clock started (the writers' `at` counts from here).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Asks the writers to start no more writes; the phase then drains and ends.
    pub fn stop(&self) {
        self.stop.at(self.started);
    }

    /// Waits for the phase to end: its window (or a [`Running::stop`]) and then its drain,
    /// both bounded.
    pub fn join(self) -> Result<Run, LoadError> {
        self.thread.join().map_err(|_| LoadError::Panicked)?
    }
}

/// Runs a phase to its end.
pub fn run(spec: Spec) -> Result<Run, LoadError> {
    start(spec)?.join()
}

/// Starts a phase on its own thread: opens its connections, starts its clock, and returns.
pub fn start(spec: Spec) -> Result<Running, LoadError> {
    let stop = Arc::new(Stop::default());
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<Instant, LoadError>>();
    let thread = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("overload-gen".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(LoadError::Runtime)?;
                let connecting = Instant::now();
                let pools = match runtime.block_on(open_connections(&spec)) {
                    Ok(pools) => pools,
                    Err(err) => {
                        let _ = ready_tx.send(Err(LoadError::Connect {
                            addr: err.0,
                            detail: err.1.clone(),
                        }));
                        return Err(LoadError::Connect {
                            addr: err.0,
                            detail: err.1,
                        });
                    }
                };
                let cpu_before = crate::cpu::this_thread_cpu();
                let started = Instant::now();
                let _ = ready_tx.send(Ok(started));
                let run = runtime.block_on(phase(spec, pools, stop, started));
                let cpu = crate::cpu::this_thread_cpu()
                    .zip(cpu_before)
                    .map(|(after, before)| after.saturating_sub(before));
                Ok(Run {
                    generator_cpu: cpu,
                    connecting: started.saturating_duration_since(connecting),
                    ran: started.elapsed(),
                    ..run
                })
            })
            .map_err(LoadError::Runtime)?
    };
    // Opening the connections is bounded by the connect timeout of each.
    match ready_rx.recv() {
        Ok(Ok(started)) => Ok(Running {
            stop,
            started,
            thread,
        }),
        Ok(Err(err)) => {
            let _ = thread.join();
            Err(err)
        }
        Err(_) => match thread.join() {
            Ok(Err(err)) => Err(err),
            _ => Err(LoadError::Panicked),
        },
    }
}

/// Connections opened before a phase's clock starts, per endpoint: one per closed-loop
/// writer, and for open-loop groups the cap on outstanding writes, shared by the endpoints as
/// the groups' apps are.
async fn open_connections(spec: &Spec) -> Result<Vec<Mutex<Vec<Conn>>>, (SocketAddr, String)> {
    let mut wanted = vec![0usize; spec.endpoints.len()];
    let mut open_apps = vec![0usize; spec.endpoints.len()];
    for group in &spec.groups {
        for (endpoint, _) in &group.apps {
            match group.pace {
                Pace::Closed { per_app } => {
                    if let Some(n) = wanted.get_mut(*endpoint) {
                        *n += per_app;
                    }
                }
                Pace::Open { .. } => {
                    if let Some(n) = open_apps.get_mut(*endpoint) {
                        *n += 1;
                    }
                }
            }
        }
    }
    let all_open: usize = open_apps.iter().sum();
    for (n, apps) in wanted.iter_mut().zip(&open_apps) {
        *n += (spec.max_outstanding * apps)
            .checked_div(all_open)
            .unwrap_or(0);
    }
    // Paced: a gateway accepts a burst of connects more slowly than they complete in the
    // kernel, and once its accept queue (4096 for the local API) is full the kernel drops the
    // next SYN, which the client sends again only a second later.
    let mut conns: Vec<Vec<Conn>> = wanted.iter().map(|n| Vec::with_capacity(*n)).collect();
    let mut ticker = tokio::time::interval(CONNECT_PACE);
    loop {
        let mut left = false;
        for ((endpoint, conns), wanted) in spec.endpoints.iter().zip(&mut conns).zip(&wanted) {
            for _ in 0..CONNECTS_PER_TICK {
                if conns.len() >= *wanted {
                    break;
                }
                conns.push(
                    load::connect(endpoint.api)
                        .await
                        .map_err(|d| (endpoint.api, d))?,
                );
            }
            left |= conns.len() < *wanted;
        }
        if !left {
            break;
        }
        ticker.tick().await;
    }
    let pools = conns.into_iter().map(Mutex::new).collect();
    Ok(pools)
}

/// A request to stop early, and when it came.
#[derive(Debug, Default)]
struct Stop {
    asked: AtomicBool,
    /// Nanoseconds from the phase's start to the request.
    after_nanos: AtomicU64,
}

impl Stop {
    fn at(&self, started: Instant) {
        let nanos = started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        // The first request counts.
        if !self.asked.swap(true, Ordering::SeqCst) {
            self.after_nanos.store(nanos, Ordering::SeqCst);
        }
    }

    /// How long after the start the stop came, if it did.
    fn after(&self) -> Option<Duration> {
        self.asked
            .load(Ordering::SeqCst)
            .then(|| Duration::from_nanos(self.after_nanos.load(Ordering::SeqCst)))
    }
}

/// What a phase's writers share.
#[derive(Debug)]
struct Shared {
    spec: Spec,
    /// Idle keep-alive connections, per endpoint.
    pools: Vec<Mutex<Vec<Conn>>>,
    next_key: AtomicU64,
    started_writes: AtomicU64,
    stop: Arc<Stop>,
    started: Instant,
    window_end: Instant,
}

impl Shared {
    /// Whether no write may start now (resends of writes already started included).
    fn over(&self) -> bool {
        self.stop.asked.load(Ordering::Relaxed) || Instant::now() >= self.window_end
    }

    /// Whether every write allowed was started.
    fn out_of_writes(&self) -> bool {
        self.spec
            .max_writes
            .is_some_and(|max| self.started_writes.load(Ordering::Relaxed) >= max)
    }

    /// Claims one more write, within `max_writes`.
    fn claim(&self) -> bool {
        let n = self.started_writes.fetch_add(1, Ordering::Relaxed);
        self.spec.max_writes.is_none_or(|max| n < max)
    }

    fn take_conn(&self, endpoint: usize) -> Option<Conn> {
        self.pools
            .get(endpoint)?
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop()
    }

    fn put_conn(&self, endpoint: usize, conn: Conn) {
        if let Some(pool) = self.pools.get(endpoint) {
            pool.lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(conn);
        }
    }

    /// One write, resent while refused if the group says so.
    async fn write(&self, group: &Group, endpoint: usize, app: &str) -> Written {
        let n = self.next_key.fetch_add(1, Ordering::Relaxed);
        let key = format!("{}{n:010}", self.spec.key_prefix);
        let id = request_id();
        let first_sent = Instant::now();
        let mut resends = 0;
        loop {
            let answer = self.attempt(group, endpoint, app, &key, &id).await;
            let again = group.resend_refused
                && answer.refused()
                && !self.over()
                && first_sent.elapsed() < RESEND_BOUND;
            if !again {
                return Written {
                    at: first_sent.saturating_duration_since(self.started),
                    took: first_sent.elapsed(),
                    answer,
                    resends,
                };
            }
            resends += 1;
            tokio::time::sleep(resend_pause(n + resends)).await;
        }
    }

    /// One request on a pooled connection (a new one if none is idle).
    async fn attempt(
        &self,
        group: &Group,
        endpoint: usize,
        app: &str,
        key: &str,
        id: &str,
    ) -> Answer {
        let Some(target) = self.spec.endpoints.get(endpoint) else {
            return Answer::Other(format!("no endpoint {endpoint}"));
        };
        let mut conn = match self.take_conn(endpoint) {
            Some(conn) => conn,
            None => match load::connect(target.api).await {
                Ok(conn) => conn,
                Err(detail) => return Answer::Unanswered(format!("connect: {detail}")),
            },
        };
        let bound = group.timeout + ANSWER_MARGIN;
        let exchange = exchange(&mut conn, target, &self.spec.vault, group, app, key, id);
        let answer = match tokio::time::timeout(bound, exchange).await {
            Ok(answer) => answer,
            Err(_) => Answer::Unanswered(format!("no answer within {bound:?}")),
        };
        // A request with no answer leaves the connection in an unknown state: drop it.
        if !matches!(answer, Answer::Unanswered(_)) {
            self.put_conn(endpoint, conn);
        }
        answer
    }
}

/// One write's end.
#[derive(Debug)]
struct Written {
    at: Duration,
    took: Duration,
    answer: Answer,
    resends: u64,
}

async fn exchange(
    conn: &mut Conn,
    target: &Endpoint,
    vault: &str,
    group: &Group,
    app: &str,
    key: &str,
    id: &str,
) -> Answer {
    let mut request = Request::put(format!("/v1/vaults/{vault}/records/{key}"))
        .header(hyper::header::HOST, target.api.to_string())
        .header(
            hyper::header::AUTHORIZATION,
            format!("Bearer {}", target.token),
        )
        .header("x-ferry-app", app)
        .header("x-ferry-request-id", id)
        .header("x-ferry-timeout", timeout_header(group.timeout));
    if group.class == Class::Background {
        request = request.header("x-ferry-class", "background");
    }
    let request = match request.body(Full::new(load::value())) {
        Ok(request) => request,
        Err(err) => return Answer::Other(format!("cannot build the request: {err}")),
    };
    if let Err(err) = conn.sender.ready().await {
        return Answer::Unanswered(format!("connection closed: {err}"));
    }
    let response = match conn.sender.send_request(request).await {
        Ok(response) => response,
        Err(err) => return Answer::Unanswered(format!("request failed: {err}")),
    };
    let status = response.status().as_u16();
    let body: Bytes = match Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(err) => return Answer::Unanswered(format!("answer body broke: {err}")),
    };
    Answer::classify(status, &body)
}

/// `X-Ferry-Timeout` in decimal seconds: `2`, `0.5`.
pub fn timeout_header(timeout: Duration) -> String {
    if timeout.subsec_nanos() == 0 {
        format!("{}", timeout.as_secs())
    } else {
        format!("{:.3}", timeout.as_secs_f64())
    }
}

async fn phase(spec: Spec, pools: Vec<Mutex<Vec<Conn>>>, stop: Arc<Stop>, started: Instant) -> Run {
    let window = spec.window;
    let groups = spec.groups.clone();
    let max_outstanding = spec.max_outstanding;
    let drain_bound = groups
        .iter()
        .map(|g| g.timeout + ANSWER_MARGIN)
        .max()
        .unwrap_or(ANSWER_MARGIN)
        + if groups.iter().any(|g| g.resend_refused) {
            RESEND_BOUND
        } else {
            Duration::ZERO
        };
    let shared = Arc::new(Shared {
        pools,
        spec,
        next_key: AtomicU64::new(0),
        started_writes: AtomicU64::new(0),
        stop,
        started,
        window_end: started + window,
    });
    // Each task returns its group's index and what it tallied.
    let mut tasks: JoinSet<(usize, Tally)> = JoinSet::new();
    let mut open = Vec::new();
    for (index, group) in groups.iter().enumerate() {
        match group.pace {
            Pace::Closed { per_app } => {
                for (endpoint, app) in &group.apps {
                    for _ in 0..per_app {
                        let (shared, group, app) = (shared.clone(), group.clone(), app.clone());
                        let endpoint = *endpoint;
                        tasks.spawn(async move {
                            let mut tally = Tally::default();
                            while !shared.over() && shared.claim() {
                                tally.add(shared.write(&group, endpoint, &app).await);
                            }
                            (index, tally)
                        });
                    }
                }
            }
            Pace::Open { per_second } => open.push((index, per_second)),
        }
    }
    let mut tallies: Vec<Tally> = groups.iter().map(|_| Tally::default()).collect();
    if !open.is_empty() {
        let outstanding = Arc::new(AtomicUsize::new(0));
        let mut issued: Vec<u64> = vec![0; open.len()];
        let mut ticker = tokio::time::interval(PACER_TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            ticker.tick().await;
            if shared.over() {
                break;
            }
            let elapsed = started.elapsed().as_secs_f64();
            for ((index, per_second), issued) in open.iter().zip(issued.iter_mut()) {
                let due = (elapsed * per_second) as u64;
                let Some(group) = groups.get(*index) else {
                    continue;
                };
                while *issued < due {
                    let (endpoint, app) = &group.apps[(*issued as usize) % group.apps.len()];
                    *issued += 1;
                    if outstanding.load(Ordering::Relaxed) >= max_outstanding || !shared.claim() {
                        if let Some(tally) = tallies.get_mut(*index) {
                            tally.skipped += 1;
                        }
                        continue;
                    }
                    outstanding.fetch_add(1, Ordering::Relaxed);
                    let (shared, group, app) = (shared.clone(), group.clone(), app.clone());
                    let (endpoint, index, outstanding) = (*endpoint, *index, outstanding.clone());
                    tasks.spawn(async move {
                        let mut tally = Tally::default();
                        tally.add(shared.write(&group, endpoint, &app).await);
                        outstanding.fetch_sub(1, Ordering::Relaxed);
                        (index, tally)
                    });
                }
            }
            while let Some(joined) = tasks.try_join_next() {
                absorb(joined, &mut tallies);
            }
        }
    }
    // Closed-loop writers stop by themselves at the window's end; every write still out gets
    // until its timeout (and the margin) to be answered.
    let drain = async {
        while let Some(joined) = tasks.join_next().await {
            absorb(joined, &mut tallies);
        }
    };
    let bound = tokio::time::Instant::from_std(started + window + drain_bound);
    let finished = tokio::time::timeout_at(bound, drain).await;
    if finished.is_err() {
        let abandoned = tasks.len() as u64;
        tasks.abort_all();
        if let Some(tally) = tallies.first_mut() {
            tally.counts.other += abandoned;
            tally.counts.no_answer += abandoned;
            tally.first.entry("no_answer").or_insert_with(|| {
                format!(
                    "{abandoned} writes (or writers) still out after the drain bound; abandoned"
                )
            });
        }
    }
    // The writes ran until the window's end, the stop, or the last write allowed was answered.
    let mut window_used = window;
    if let Some(after) = shared.stop.after() {
        window_used = window_used.min(after);
    }
    if shared.out_of_writes() {
        window_used = window_used.min(started.elapsed());
    }
    Run {
        groups: groups.iter().map(|g| g.name).zip(tallies).collect(),
        window: window_used,
        generator_cpu: None,
        connecting: Duration::ZERO,
        ran: Duration::ZERO,
    }
}

fn absorb(joined: Result<(usize, Tally), tokio::task::JoinError>, tallies: &mut [Tally]) {
    if let Ok((index, tally)) = joined {
        if let Some(slot) = tallies.get_mut(index) {
            slot.merge(tally);
        }
    }
}

/// A fresh UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, version 7, 12 random bits, the
/// variant `10`, 62 random bits. The random bits come from a counter mixed by
/// `ferry_core::rng::mix64` with a per-process seed: distinct within a run, and unlike any
/// other run's.
pub fn request_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let random = mix64(seed() ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let rand_a = (mix64(random) & 0x0fff) as u16;
    let rand_b = random & 0x3fff_ffff_ffff_ffff;
    uuid_v7(millis, rand_a, rand_b)
}

/// The text form of a UUIDv7 from its parts.
fn uuid_v7(millis: u64, rand_a: u16, rand_b: u64) -> String {
    let high: u64 = ((millis & 0xffff_ffff_ffff) << 16) | 0x7000 | u64::from(rand_a & 0x0fff);
    let low: u64 = 0x8000_0000_0000_0000 | (rand_b & 0x3fff_ffff_ffff_ffff);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        high >> 32,
        (high >> 16) & 0xffff,
        high & 0xffff,
        low >> 48,
        low & 0xffff_ffff_ffff
    )
}

/// A per-process seed: the clock's nanoseconds and the process id.
fn seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        mix64(nanos ^ (u64::from(std::process::id()) << 32))
    })
}

/// The pause before a resend: within [`RESEND_PAUSE_MS`], varied by `n`.
fn resend_pause(n: u64) -> Duration {
    let (low, high) = RESEND_PAUSE_MS;
    Duration::from_millis(low + mix64(n ^ seed()) % (high - low + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_counted_by_status_and_code() {
        let cases = [
            (200, r#"{"revision": 7}"#, "done"),
            (200, r#"{}"#, "other"),
            (503, r#"{"error": "busy", "detail": "x"}"#, "busy"),
            (429, r#"{"error": "rate_limited"}"#, "rate_limited"),
            (503, r#"{"error": "unavailable"}"#, "unavailable"),
            (502, r#"{"error": "outcome_unknown"}"#, "outcome_unknown"),
            (503, r#"{"error": "not_carried_out"}"#, "other"),
            (503, "not json", "other"),
            (404, r#"{"error": "busy"}"#, "other"),
        ];
        for (status, body, kind) in cases {
            let mut counts = Counts::default();
            counts.add(&Answer::classify(status, body.as_bytes()));
            let got = [
                ("done", counts.done),
                ("busy", counts.busy),
                ("rate_limited", counts.rate_limited),
                ("unavailable", counts.unavailable),
                ("outcome_unknown", counts.outcome_unknown),
                ("other", counts.other),
            ]
            .into_iter()
            .find(|(_, n)| *n == 1)
            .map(|(name, _)| name);
            assert_eq!(got, Some(kind), "{status} {body}");
            assert_eq!(counts.total(), 1);
        }
        let mut counts = Counts::default();
        counts.add(&Answer::Unanswered("reset".into()));
        assert_eq!((counts.other, counts.no_answer), (1, 1));
    }

    #[test]
    fn request_ids_are_uuid_v7_with_the_rfc_variant() {
        assert_eq!(
            uuid_v7(0x0189_0a0b_0c0d, 0xabc, 0x0123_4567_89ab_cdef),
            "01890a0b-0c0d-7abc-8123-456789abcdef"
        );
        let a = request_id();
        let b = request_id();
        assert_ne!(a, b);
        for id in [&a, &b] {
            let hex: String = id.chars().filter(|c| *c != '-').collect();
            assert_eq!(hex.len(), 32, "{id}");
            assert_eq!(&id[14..15], "7", "version: {id}");
            assert!(
                matches!(&id[19..20], "8" | "9" | "a" | "b"),
                "variant: {id}"
            );
        }
    }

    #[test]
    fn timeouts_are_written_as_decimal_seconds() {
        assert_eq!(timeout_header(Duration::from_secs(2)), "2");
        assert_eq!(timeout_header(Duration::from_millis(500)), "0.500");
    }

    #[test]
    fn done_writes_are_windowed_by_when_they_were_sent() {
        let ms = Duration::from_millis;
        let mut tally = Tally::default();
        for (at, took) in [(0, 5), (10, 3), (20, 9), (30, 1)] {
            tally.add(Written {
                at: ms(at),
                took: ms(took),
                answer: Answer::Done,
                resends: 0,
            });
        }
        tally.add(Written {
            at: ms(15),
            took: ms(40),
            answer: Answer::Busy,
            resends: 2,
        });
        assert_eq!(tally.done_within(ms(10), ms(30)), vec![ms(3), ms(9)]);
        assert_eq!(tally.done_sorted(), vec![ms(1), ms(3), ms(5), ms(9)]);
        // Answered at 5, 13, 29 and 31 ms.
        assert_eq!(tally.done_answered_within(ms(5), ms(29)), 3);
        assert_eq!((tally.sent, tally.resends, tally.max_any), (7, 2, ms(40)));
        assert_eq!(tally.counts.busy, 1);
    }
}
