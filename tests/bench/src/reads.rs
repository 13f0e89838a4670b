//! `ferry-bench reads`: the read path, Ferry against the least the same libraries can do, in
//! one run.
//!
//! Two kinds of read, each with its own yardstick:
//! - **cache hits**: `GET` on `b` of a few keys `b` has already read (its read cache answers,
//!   once wired in), against [`BareHttp`]: a hyper server answering from memory;
//! - **owner reads**: `GET` on `b` of keys `b` has never read, so each goes `b` -> QUIC -> `a`,
//!   against the bare read relay: hyper -> one pooled quinn connection -> a map in memory.
//!
//! The keys are numbered `r-0000000000`, ... and laid out once for every system: the first
//! [`Plan::hot`] are the cache-hit keys, read again and again; the next `warmup + sequential`
//! are read once each by the sequential owner reads; the rest are read once each by the
//! concurrent owner reads, whose count is bounded by how many are left. Ferry's keys are written
//! on the owner `a` through its own API before anything is measured (never through `b`, whose
//! cache writes passing through would fill).
//!
//! Order: build the `ferry` binary, start every system and fill the owners, then every
//! system's sequential cache hits, sequential owner reads, concurrent cache hits, concurrent
//! owner reads, one system at a time, so the figures compared are taken seconds apart.
//!
//! The sequential cache hits are taken in each placement of the load generator against the
//! server ([`crate::placement`]: on one core, then on two, every thread pinned): a request
//! across cores wakes an idle core each way, which on a VM is most of a cache hit's time, and
//! which placement a run got was the kernel's choice, so yardstick and Ferry landed in
//! different modes and the ratio swung from 0.5x to 4x. Both placements are real ones for an
//! app and its gateway; the ratio is taken placement by placement and judged on the worse.
//! The owner reads stay unpinned: they cross two gateways that in use run on two machines,
//! and on one core the comparison would be Ferry's two processes switching against the
//! relay's threads of one process, which no deployment has. The concurrent phases run
//! unpinned, on every core.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bare_relay::{BareHttp, BareRelay, Layout, Records, RelayError};
use crate::cpu::{self, Machine, Sides};
use crate::ferry_procs::{self, GatewayError, Pair};
use crate::figures::latency;
use crate::load::{self, Keys, LoadError, Sample, Target, Verb};
use crate::placement::{self, Pinned, Placement, Placements};
use crate::progress;
use crate::reads_report::{ReadsReport, Row};
use crate::report::Measured;

/// The vault and app every read names.
const VAULT: &str = "bench";
const APP: &str = "bench";
/// Every key read: `r-<n:010>`.
const PREFIX: &str = "r-";
/// The owner reads' sequential phase: one, unpinned (see the module's docs).
const OWNER_READ_PLACEMENTS: usize = 1;
/// Writers filling the owner.
const FILL_WRITERS: usize = 64;
/// How long `b` may take to read from `a` once both are up, and how often to try.
const CALLER_READY_BOUND: Duration = Duration::from_secs(15);
const CALLER_READY_POLL: Duration = Duration::from_millis(50);
/// How much of each gateway's log an error quotes.
const LOG_TAIL_LINES: usize = 20;

/// How much to run.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub quick: bool,
    /// Keys on every owner (`r-0` to `r-<keys - 1>`).
    pub keys: u64,
    /// The cache-hit keys: `r-0` to `r-<hot - 1>`.
    pub hot: u64,
    pub warmup: usize,
    pub sequential: usize,
    pub sequential_bound: Duration,
    pub readers: usize,
    /// The most cache hits in the concurrent phase; owner reads are also bounded by the keys
    /// left.
    pub concurrent_max: u64,
    pub concurrent_bound: Duration,
    /// How long filling Ferry's owner may take.
    pub fill_bound: Duration,
}

impl Plan {
    pub fn full() -> Self {
        Self {
            quick: false,
            keys: 150_000,
            hot: 100,
            warmup: 200,
            sequential: 2000,
            sequential_bound: Duration::from_secs(60),
            readers: 64,
            concurrent_max: 500_000,
            concurrent_bound: Duration::from_secs(10),
            fill_bound: Duration::from_secs(120),
        }
    }

    /// A few hundred reads per system, for smoke tests.
    pub fn quick() -> Self {
        Self {
            quick: true,
            keys: 2_000,
            hot: 50,
            warmup: 50,
            sequential: 300,
            sequential_bound: Duration::from_secs(20),
            readers: 64,
            concurrent_max: 640,
            concurrent_bound: Duration::from_secs(5),
            fill_bound: Duration::from_secs(60),
        }
    }

    /// The first key of the sequential owner reads (warm-up included).
    fn sequential_first(&self, placement_index: usize) -> u64 {
        self.hot + (placement_index * (self.warmup + self.sequential)) as u64
    }

    /// The first key of the concurrent owner reads, after those of the sequential ones in
    /// each of `placements`.
    fn concurrent_first(&self, placements: usize) -> u64 {
        self.hot + (placements * (self.warmup + self.sequential)) as u64
    }

    /// How many owner reads the concurrent phase may make: one per key left.
    fn concurrent_owner_reads(&self, placements: usize) -> u64 {
        self.keys.saturating_sub(self.concurrent_first(placements))
    }

    /// Warm-up reads of the cache-hit keys: enough to read each once.
    fn hit_warmup(&self) -> usize {
        self.warmup
            .max(usize::try_from(self.hot).unwrap_or(usize::MAX))
    }

    fn describe(&self, placements: &[Option<Placement>]) -> String {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        format!(
            "{} run on {cores} cores. Each read: `GET /v1/vaults/{VAULT}/records/<key>` of a \
             {}-byte value, on keep-alive HTTP/1.1 from a load generator on its own thread; \
             only `200` with the value counts. {} keys on every owner. **Cache hits**: the same \
             {} keys over and over, each read once first ({} warm-up reads); sequential: {} \
             reads in each placement (bound {:?}): {}; concurrent: {} readers, each on its own \
             connection, until {:?} or {} reads. **Owner reads**: every read a key never read \
             before on that system; sequential: {} reads after {} warm-up (bound {:?}); \
             concurrent: {} readers until {:?} or {} reads (the keys left). Owner reads and \
             concurrent reads unpinned.",
            if self.quick { "Quick" } else { "Full" },
            load::VALUE_BYTES,
            self.keys,
            self.hot,
            self.hit_warmup(),
            self.sequential,
            self.sequential_bound,
            Placements::describe(placements),
            self.readers,
            self.concurrent_bound,
            self.concurrent_max,
            self.sequential,
            self.warmup,
            self.sequential_bound,
            self.readers,
            self.concurrent_bound,
            self.concurrent_owner_reads(OWNER_READ_PLACEMENTS),
        )
    }
}

/// What to compare.
pub type Options = crate::Options<Plan>;

/// Why the run stopped before it could report.
#[derive(Debug, thiserror::Error)]
pub enum ReadsError {
    #[error("the bare {what} ({layout}): {source}")]
    Bare {
        what: &'static str,
        layout: &'static str,
        source: RelayError,
    },
    #[error("the load generator: {0}")]
    Load(#[from] LoadError),
    #[error(transparent)]
    Proc(#[from] GatewayError),
    #[error(
        "b still cannot read {key} from the owner a after {CALLER_READY_BOUND:?} (last answer: \
         {status} {body}); b may never have learned the route to a (the QUIC address given to \
         `ferry trust --addr`) or that a owns the vault: look for a connection to a in b's log.\n\
         b's log ends:\n{caller_log}\na's log ends:\n{owner_log}"
    )]
    CallerCannotRead {
        key: String,
        status: u16,
        body: String,
        caller_log: String,
        owner_log: String,
    },
    #[error(
        "filling the owner a: {written} of {wanted} keys written in {took:?}: {why}; first \
         failure: {first}"
    )]
    Fill {
        written: usize,
        wanted: u64,
        took: Duration,
        /// What stopped the fill, and what to do about it.
        why: String,
        first: String,
    },
}

/// Which kind of read a subject measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hits,
    OwnerReads,
}

/// One measured series: a system and a kind of read, where to send them, whose CPU to read.
struct Subject {
    kind: Kind,
    /// The bare layout, or `None` for Ferry.
    layout: Option<Layout>,
    target: Target,
    sides: Option<Sides>,
    /// One sequential run per placement, in the order they were taken.
    sequential: Vec<(Option<Placement>, Result<Sample, LoadError>)>,
    concurrent: Option<Result<(Sample, Option<cpu::Usage>), LoadError>>,
    /// Placements this subject could not be pinned in, and why.
    notes: Vec<String>,
}

impl Subject {
    fn new(kind: Kind, layout: Option<Layout>, target: Target, sides: Option<Sides>) -> Self {
        Self {
            kind,
            layout,
            target,
            sides,
            sequential: Vec::new(),
            concurrent: None,
            notes: Vec::new(),
        }
    }

    fn name(&self) -> String {
        match (self.layout, self.kind) {
            (Some(layout), Kind::Hits) => format!("HTTP from memory, {} layout", layout.name()),
            (Some(layout), Kind::OwnerReads) => {
                format!("bare relay, {} layout", layout.name())
            }
            (None, Kind::Hits) => "Ferry, cache-hit keys".into(),
            (None, Kind::OwnerReads) => "Ferry, owner reads".into(),
        }
    }

    /// The keys of the sequential phase in the placement numbered `placement_index` (its
    /// warm-up first): owner reads never read a key twice.
    fn sequential_keys(&self, plan: &Plan, placement_index: usize) -> Keys {
        match self.kind {
            Kind::Hits => Keys::cycling(PREFIX, 0, plan.hot),
            Kind::OwnerReads => Keys::starting_at(PREFIX, plan.sequential_first(placement_index)),
        }
    }

    /// Pins the load generator and this subject's serving side as `placement` says, until the
    /// guard drops: Ferry's two processes, or the yardstick's threads in this process.
    fn pin<'a>(
        &self,
        placements: &'a Placements,
        placement: Option<Placement>,
    ) -> Result<Option<Pinned<'a>>, String> {
        match &self.sides {
            _ if placement.is_none() => Ok(None),
            Some(Sides::Processes { caller, owner }) => {
                placements.pin(placement, &[*caller, *owner])
            }
            Some(Sides::Threads { caller, owner }) => {
                let names: Vec<&str> = caller.iter().chain(owner).copied().collect();
                let threads = placement::threads_named(&names)?;
                if threads.is_empty() {
                    return Err(format!("no thread of this process is named {names:?}"));
                }
                placements.pin_with_threads(placement, &[], &threads)
            }
            None => Err("its processes are not known".into()),
        }
    }

    fn measured(self) -> (Kind, Option<Layout>, Result<Measured, LoadError>) {
        let mut pooled = Vec::new();
        let mut by_placement = Vec::new();
        let mut failed = None;
        let mut notes = self.notes;
        for (placement, sample) in self.sequential {
            match sample {
                Ok(sample) => {
                    notes.push(format!(
                        "sequential, {}: p50 {}, p99 {}",
                        placement::name(placement),
                        latency(sample.percentile(50.0)),
                        latency(sample.percentile(99.0)),
                    ));
                    if let Some(placement) = placement {
                        by_placement.push((placement, sample.clone()));
                    }
                    pooled.push(sample);
                }
                Err(err) => {
                    failed.get_or_insert(err);
                }
            }
        }
        let sequential = match failed {
            Some(err) => Some(Err(err)),
            None if pooled.is_empty() => None,
            None => Some(Ok(Sample::pooled(pooled))),
        };
        let measured = Measured::from_phases(sequential, self.concurrent).map(|mut measured| {
            measured.sequential_by_placement = by_placement;
            measured.notes = notes;
            measured
        });
        (self.kind, self.layout, measured)
    }
}

/// The systems under test, up and idle until their turn; dropping them stops them.
#[derive(Default)]
struct Systems {
    memory: Vec<BareHttp>,
    relays: Vec<BareRelay>,
    ferry: Option<Box<Pair>>,
}

/// Runs everything and returns the report. A Ferry failure is reported, not raised, so the
/// bare figures of the same run are not lost.
pub fn run(options: &Options) -> Result<ReadsReport, ReadsError> {
    let plan = options.plan;
    let placements = Placements::here("reads");
    let load_before = cpu::load_average();
    let (binary, ready) = ferry_procs::prepare_binary(options.ferry_binary.clone(), options.build);

    // Measured after the build, which is not part of the run.
    let machine_before = Machine::now();
    let records: Records = Arc::new(
        (0..plan.keys)
            .map(|n| (Keys::key(PREFIX, n), load::value()))
            .collect::<HashMap<_, _>>(),
    );
    let bare = |what: &'static str, layout: Layout| {
        move |source| ReadsError::Bare {
            what,
            layout: layout.name(),
            source,
        }
    };
    let mut systems = Systems::default();
    let mut subjects = Vec::new();
    for &layout in &options.layouts {
        progress(&format!(
            "starting the bare systems, {} layout",
            layout.name()
        ));
        let memory = BareHttp::start(layout, records.clone())
            .map_err(bare("HTTP server from memory", layout))?;
        subjects.push(Subject::new(
            Kind::Hits,
            Some(layout),
            bare_target(&memory.http_addr),
            Some(memory.cpu_sides()),
        ));
        systems.memory.push(memory);
        let relay =
            BareRelay::start_reads(layout, records.clone()).map_err(bare("read relay", layout))?;
        subjects.push(Subject::new(
            Kind::OwnerReads,
            Some(layout),
            bare_target(&relay.http_addr),
            Some(relay.cpu_sides()),
        ));
        systems.relays.push(relay);
    }
    drop(records);

    progress("starting two ferry serve processes and filling the owner a");
    // Killed on drop from here on, whatever happens.
    let mut ferry_notes = Vec::new();
    let ferry_failed = match ready
        .and_then(|()| start_ferry(&binary, &plan, &mut ferry_notes).map_err(|err| err.to_string()))
    {
        Ok(pair) => {
            let target = pair.target(APP, VAULT);
            let sides = pair.sides();
            subjects.push(Subject::new(
                Kind::Hits,
                None,
                target.clone(),
                sides.clone(),
            ));
            subjects.push(Subject::new(Kind::OwnerReads, None, target, sides));
            systems.ferry = Some(Box::new(pair));
            None
        }
        Err(why) => Some(why),
    };

    // Each placement in turn, every system of a kind in it, so the figures compared are taken
    // in the same placement seconds apart.
    for kind in [Kind::Hits, Kind::OwnerReads] {
        for (index, &placement) in pinned_placements(kind, &placements).iter().enumerate() {
            for subject in subjects.iter_mut().filter(|s| s.kind == kind) {
                progress(&format!(
                    "{}: {} reads one at a time, {}",
                    subject.name(),
                    plan.sequential,
                    placement::name(placement)
                ));
                // A run that could not be pinned is filed as unpinned, and so is not compared
                // placement by placement.
                let (_pinned, taken_in) = match subject.pin(&placements, placement) {
                    Ok(pinned) => (pinned, placement),
                    Err(why) => {
                        let note = format!("not pinned {}: {why}", placement::name(placement));
                        progress(&format!("{}: {note}", subject.name()));
                        subject.notes.push(note);
                        (None, None)
                    }
                };
                let warmup = match kind {
                    Kind::Hits => plan.hit_warmup(),
                    Kind::OwnerReads => plan.warmup,
                };
                let sample = load::sequential(
                    &subject.target,
                    Verb::Read,
                    &subject.sequential_keys(&plan, index),
                    warmup,
                    plan.sequential,
                    plan.sequential_bound,
                );
                subject.sequential.push((taken_in, sample));
            }
        }
    }
    for kind in [Kind::Hits, Kind::OwnerReads] {
        for subject in subjects.iter_mut().filter(|s| s.kind == kind) {
            progress(&format!("{}: {} readers", subject.name(), plan.readers));
            let (keys, max) = match kind {
                Kind::Hits => (Keys::cycling(PREFIX, 0, plan.hot), plan.concurrent_max),
                Kind::OwnerReads => (
                    Keys::starting_at(PREFIX, plan.concurrent_first(OWNER_READ_PLACEMENTS)),
                    plan.concurrent_owner_reads(OWNER_READ_PLACEMENTS),
                ),
            };
            let keys = Arc::new(keys);
            subject.concurrent = Some(load::concurrent_with_cpu(
                subject.sides.as_ref(),
                &subject.target,
                Verb::Read,
                &keys,
                plan.readers,
                max,
                plan.concurrent_bound,
            ));
        }
    }

    // The bare systems first: their threads stop here, before Ferry's processes are asked to.
    drop(std::mem::take(&mut systems.memory));
    drop(std::mem::take(&mut systems.relays));
    if let Some(pair) = systems.ferry.take() {
        if let Err(err) = (*pair).stop() {
            ferry_notes.push(format!("did not stop cleanly: {err}"));
        }
    }

    let mut report = ReadsReport {
        quick: plan.quick,
        plan: plan.describe(&placements.each),
        hits: Vec::new(),
        owner_reads: Vec::new(),
        ferry_hits: Err(ferry_failed.clone().unwrap_or_default()),
        ferry_owner_reads: Err(ferry_failed.unwrap_or_default()),
        ferry_notes,
        ferry_layout: ferry_procs::layout(&binary),
        load_before,
        load_after: cpu::load_average(),
        // The ferry processes were waited for above: their CPU counts as this run's.
        others_cores: machine_before
            .zip(Machine::now())
            .map(|(before, after)| before.others_since(&after)),
    };
    for subject in subjects {
        match subject.measured() {
            (kind, Some(layout), measured) => {
                let row = Row {
                    layout,
                    measured: measured?,
                };
                match kind {
                    Kind::Hits => report.hits.push(row),
                    Kind::OwnerReads => report.owner_reads.push(row),
                }
            }
            (Kind::Hits, None, measured) => {
                report.ferry_hits = measured.map_err(|err| err.to_string());
            }
            (Kind::OwnerReads, None, measured) => {
                report.ferry_owner_reads = measured.map_err(|err| err.to_string());
            }
        }
    }
    Ok(report)
}

/// The placements a kind's sequential reads are taken in (see the module's docs).
fn pinned_placements(kind: Kind, placements: &Placements) -> Vec<Option<Placement>> {
    match kind {
        Kind::Hits => placements.each.clone(),
        Kind::OwnerReads => vec![None; OWNER_READ_PLACEMENTS],
    }
}

fn bare_target(api: &std::net::SocketAddr) -> Target {
    Target {
        api: *api,
        token: "bare".into(),
        app: APP.into(),
        vault: VAULT.into(),
    }
}

/// Starts the pair and writes every key on the owner `a`, through `a`'s own API with
/// [`FILL_WRITERS`] writers, then checks that `b` reads one back from `a`.
fn start_ferry(binary: &Path, plan: &Plan, notes: &mut Vec<String>) -> Result<Pair, ReadsError> {
    let pair = Pair::start(binary, VAULT)?;
    let owner = Target {
        api: pair.owner.api_addr(),
        token: pair.owner.token.clone(),
        app: APP.into(),
        vault: VAULT.into(),
    };
    let started = Instant::now();
    let fill = load::concurrent(
        &owner,
        Verb::Write,
        &Arc::new(Keys::new(PREFIX)),
        FILL_WRITERS,
        plan.keys,
        plan.fill_bound,
    )?;
    let took = started.elapsed();
    if fill.ok() as u64 != plan.keys {
        let why = if took >= plan.fill_bound {
            format!(
                "the time allowed (Plan::fill_bound, {:?}) ran out; raise it or lower Plan::keys",
                plan.fill_bound
            )
        } else {
            format!(
                "{} writes were not answered 200 with a revision",
                fill.failures()
            )
        };
        return Err(ReadsError::Fill {
            written: fill.ok(),
            wanted: plan.keys,
            took,
            why,
            first: fill.first_failure.unwrap_or_else(|| "-".into()),
        });
    }
    notes.push(format!(
        "setup: {} keys written on the owner a through its own API by {FILL_WRITERS} writers in \
         {:.1} s ({})",
        plan.keys,
        took.as_secs_f64(),
        crate::figures::rate(fill.per_second()),
    ));
    wait_until_caller_reads(&pair, &Keys::key(PREFIX, 0))?;
    Ok(pair)
}

/// Waits (bounded) until `b` answers a read of `key` with `200`: `b` learns where the vault
/// lives from its peers, which may take a moment after the trust is set up. `key` is a
/// cache-hit key, read again in the warm-up anyway.
fn wait_until_caller_reads(pair: &Pair, key: &str) -> Result<(), ReadsError> {
    let path = format!("/v1/vaults/{VAULT}/records/{key}");
    let started = Instant::now();
    loop {
        let (status, body) = load::request_once(
            pair.caller.api_addr(),
            "GET",
            &path,
            &pair.caller.token,
            Some(APP),
        )?;
        if status == 200 {
            return Ok(());
        }
        if started.elapsed() >= CALLER_READY_BOUND {
            return Err(ReadsError::CallerCannotRead {
                key: key.to_string(),
                status,
                body: String::from_utf8_lossy(&body).into_owned(),
                caller_log: pair.caller.log_tail(LOG_TAIL_LINES),
                owner_log: pair.owner.log_tail(LOG_TAIL_LINES),
            });
        }
        std::thread::sleep(CALLER_READY_POLL);
    }
}
