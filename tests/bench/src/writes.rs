//! `ferry-bench writes`: the write path, Ferry against the bare relay, in one run.
//!
//! Order: build the `ferry` binary (before anything is timed), measure the SQLite floor, start
//! every system (the bare relay in each layout, two `ferry serve` processes), then run every
//! system's sequential phase and every system's concurrent phase, one system at a time.
//! Progress goes to standard error; the report to standard output.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::bare_relay::{BareRelay, Layout, RelayError};
use crate::cpu::{self, Machine, Sides, Usage};
use crate::ferry_procs::{self, GatewayError, Pair};
use crate::load::{self, Keys, LoadError, Sample, Target, Verb};
use crate::report::{Measured, Report};
use crate::{progress, sqlite};

/// The vault and app every write names.
const VAULT: &str = "bench";
const APP: &str = "bench";

/// How much to run.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub quick: bool,
    pub warmup: usize,
    pub sequential: usize,
    pub sequential_bound: Duration,
    pub writers: usize,
    pub concurrent_max: u64,
    pub concurrent_bound: Duration,
    pub floor: usize,
}

impl Plan {
    pub fn full() -> Self {
        Self {
            quick: false,
            warmup: 200,
            sequential: 2000,
            sequential_bound: Duration::from_secs(60),
            writers: 64,
            concurrent_max: 500_000,
            concurrent_bound: Duration::from_secs(10),
            floor: 2000,
        }
    }

    /// A few hundred writes per system, for smoke tests.
    pub fn quick() -> Self {
        Self {
            quick: true,
            warmup: 50,
            sequential: 300,
            sequential_bound: Duration::from_secs(20),
            writers: 64,
            concurrent_max: 640,
            concurrent_bound: Duration::from_secs(5),
            floor: 300,
        }
    }

    fn describe(&self) -> String {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        format!(
            "{} run on {cores} cores. Each write: `PUT /v1/vaults/{VAULT}/records/<fresh key>` with a \
             {}-byte value, on keep-alive HTTP/1.1 from a load generator on its own thread. \
             Sequential: {} writes one at a time after {} warm-up (bound {:?}). Concurrent: {} \
             writers, each on its own connection, until {:?} or {} writes. SQLite floor: {} \
             inserts.",
            if self.quick { "Quick" } else { "Full" },
            load::VALUE_BYTES,
            self.sequential,
            self.warmup,
            self.sequential_bound,
            self.writers,
            self.concurrent_bound,
            self.concurrent_max,
            self.floor,
        )
    }
}

/// What to compare.
pub type Options = crate::Options<Plan>;

/// Why the run stopped before it could report.
#[derive(Debug, thiserror::Error)]
pub enum WritesError {
    #[error("cannot make the benchmark's temporary directory: {0}")]
    Temp(std::io::Error),
    #[error("the SQLite floor: {0}")]
    Floor(rusqlite::Error),
    #[error("the bare relay ({layout}): {source}")]
    Relay {
        layout: &'static str,
        source: RelayError,
    },
    #[error("the load generator: {0}")]
    Load(#[from] LoadError),
    #[error(transparent)]
    Proc(#[from] GatewayError),
}

/// A system under test, up and idle until its turn.
enum System {
    Bare(Layout, BareRelay),
    Ferry(Box<Pair>),
}

/// One system's place in the run: where to send writes, whose CPU to read, what it gave.
struct Slot {
    system: System,
    target: Target,
    sides: Option<Sides>,
    keys: String,
    sequential: Option<Result<Sample, LoadError>>,
    concurrent: Option<Result<(Sample, Option<Usage>), LoadError>>,
}

impl Slot {
    fn name(&self) -> String {
        match &self.system {
            System::Bare(layout, _) => format!("bare relay, {} layout", layout.name()),
            System::Ferry(_) => "Ferry".into(),
        }
    }
}

/// Runs everything and returns the report. A Ferry failure is reported, not raised, so the
/// bare figures of the same run are not lost.
///
/// Every system is started first and the phases are interleaved (every system's sequential
/// phase, then every system's concurrent phase), so the figures compared with each other are
/// seconds apart, not minutes: on a shared machine the speed drifts. An idle system costs next
/// to nothing (no QUIC keep-alives; Ferry's heartbeats every 15 s once quiet).
pub fn run(options: &Options) -> Result<Report, WritesError> {
    let plan = options.plan;
    let load_before = cpu::load_average();
    let (binary, built) = ferry_procs::prepare_binary(options.ferry_binary.clone(), options.build);

    // Measured after the build, which is not part of the run.
    let machine_before = Machine::now();
    let dir = tempfile::Builder::new()
        .prefix("ferry-bench-")
        .tempdir()
        .map_err(WritesError::Temp)?;
    progress("SQLite floor");
    let floor = sqlite::floor(
        &dir.path().join("floor.db"),
        plan.floor,
        plan.sequential_bound,
    )
    .map_err(WritesError::Floor)?;

    let mut slots = Vec::new();
    for &layout in &options.layouts {
        progress(&format!(
            "starting the bare relay, {} layout",
            layout.name()
        ));
        let relay_dir = dir.path().join(layout.name());
        std::fs::create_dir_all(&relay_dir).map_err(WritesError::Temp)?;
        let relay = BareRelay::start(&relay_dir, layout).map_err(|source| WritesError::Relay {
            layout: layout.name(),
            source,
        })?;
        slots.push(Slot {
            target: Target {
                api: relay.http_addr,
                token: "bare".into(),
                app: APP.into(),
                vault: VAULT.into(),
            },
            sides: Some(relay.cpu_sides()),
            keys: format!("bare-{}-", layout.name()),
            system: System::Bare(layout, relay),
            sequential: None,
            concurrent: None,
        });
    }
    progress("starting two ferry serve processes");
    // Killed on drop from here on, whatever happens.
    let ferry_start = built.and_then(|()| start_ferry(&binary).map_err(|err| err.to_string()));
    let ferry_failed = match ferry_start {
        Ok(slot) => {
            slots.push(slot);
            None
        }
        Err(why) => Some(why),
    };

    for slot in &mut slots {
        progress(&format!(
            "{}: {} writes one at a time",
            slot.name(),
            plan.sequential
        ));
        let keys = Keys::new(format!("{}s-", slot.keys));
        slot.sequential = Some(load::sequential(
            &slot.target,
            Verb::Write,
            &keys,
            plan.warmup,
            plan.sequential,
            plan.sequential_bound,
        ));
    }
    for slot in &mut slots {
        progress(&format!("{}: {} writers", slot.name(), plan.writers));
        let keys = Arc::new(Keys::new(format!("{}c-", slot.keys)));
        slot.concurrent = Some(load::concurrent_with_cpu(
            slot.sides.as_ref(),
            &slot.target,
            Verb::Write,
            &keys,
            plan.writers,
            plan.concurrent_max,
            plan.concurrent_bound,
        ));
    }

    let mut bare = Vec::new();
    let mut ferry = Err(ferry_failed.unwrap_or_default());
    for slot in slots {
        let measured =
            Measured::from_phases(slot.sequential, slot.concurrent).map_err(WritesError::Load);
        match slot.system {
            System::Bare(layout, relay) => {
                drop(relay);
                bare.push((layout, measured?));
            }
            System::Ferry(pair) => {
                let mut notes = Vec::new();
                if measured.is_ok() {
                    notes.push(check_owner_has(
                        &pair,
                        &format!("{}s-0000000000", slot.keys),
                    ));
                }
                if let Err(err) = (*pair).stop() {
                    notes.push(format!("did not stop cleanly: {err}"));
                }
                ferry = measured
                    .map(|mut measured| {
                        measured.notes = notes;
                        measured
                    })
                    .map_err(|err| err.to_string());
            }
        }
    }

    Ok(Report {
        quick: plan.quick,
        plan: plan.describe(),
        floor,
        bare,
        ferry,
        ferry_layout: ferry_procs::layout(&binary),
        load_before,
        load_after: cpu::load_average(),
        // The ferry processes were waited for above: their CPU counts as this run's.
        others_cores: machine_before
            .zip(Machine::now())
            .map(|(before, after)| before.others_since(&after)),
    })
}

fn start_ferry(binary: &Path) -> Result<Slot, WritesError> {
    let pair = Pair::start(binary, VAULT)?;
    let target = pair.target(APP, VAULT);
    let sides = pair.sides();
    Ok(Slot {
        system: System::Ferry(Box::new(pair)),
        target,
        sides,
        keys: "ferry-".into(),
        sequential: None,
        concurrent: None,
    })
}

/// Proves the writes went to the owner: a key written through `b` reads back on `a`.
fn check_owner_has(pair: &Pair, key: &str) -> String {
    let path = format!("/v1/vaults/{VAULT}/records/{key}");
    match load::request_once(
        pair.owner.api_addr(),
        "GET",
        &path,
        &pair.owner.token,
        Some(APP),
    ) {
        Ok((200, _)) => format!("check: {key}, written through b, reads back on the owner a"),
        Ok((status, body)) => format!(
            "check FAILED: {key} on the owner a answered {status}: {}",
            String::from_utf8_lossy(&body)
        ),
        Err(err) => format!("check FAILED: {err}"),
    }
}
