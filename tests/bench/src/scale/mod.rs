//! `ferry-bench scale`: what Ferry costs as it grows, in three parts, each with real
//! `ferry serve` processes on loopback.
//!
//! - **idle**: one gateway with no vaults and no peers, with mDNS on (the shipped default)
//!   and off: its resident memory once settled.
//! - **big vault** ([`big_vault`]): one owner holding a vault of millions of records (10
//!   million; `--quick`: 200,000) and one of 10,000, the same keys and values: point reads,
//!   writes and pages of keys on both through the owner's API, its start-up with the big one,
//!   a fresh replica syncing the big one from scratch, then catching up after a burst of
//!   changes; every gateway's peak resident memory throughout.
//! - **many peers** ([`peers`]): one hub trusting 2 peers, then 100 (`--quick`: 10): its idle
//!   CPU and memory, the p50 of a write through it to one peer's vault, and its CPU and
//!   memory while ten peers call it, at both sizes.
//!
//! The figures are judged against the targets in [`report`].

mod big_vault;
mod peers;
pub mod report;

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::ferry_procs::{self, Gateway, GatewayError, Place};
use crate::memory;
use crate::overload::report::MachineWatch;
use crate::Options;
use report::{Idle, ScaleReport};

/// The app name every request of this benchmark carries.
const APP: &str = "bench-scale";
/// Readings of an idle gateway's resident set, a second apart.
const IDLE_READINGS: usize = 5;

/// How big each part is.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Records in the big vault.
    pub big_records: u64,
    /// Records in the small vault the big one's figures are compared with.
    pub small_records: u64,
    /// Point reads and writes measured on each vault at each of its owner's starts, one at a
    /// time.
    pub reads: usize,
    pub writes: usize,
    /// Owner processes the reads and writes of each vault are spread over (started afresh
    /// for each): one process's figures on this VM sit in one of two modes, by start.
    pub starts_per_vault: usize,
    /// Pages of keys listed at places spread over the big vault.
    pub pages: usize,
    /// Changes written while the replica is stopped, for its catch-up.
    pub catch_up_changes: u64,
    /// Peers the hub trusts at first, and at the end.
    pub base_peers: usize,
    pub peers: usize,
    /// How long an idle phase is measured, after settling for `settle`.
    #[serde(serialize_with = "report::as_seconds")]
    pub idle_phase: Duration,
    #[serde(serialize_with = "report::as_seconds")]
    pub settle: Duration,
}

impl Plan {
    pub fn quick() -> Self {
        Self {
            big_records: 200_000,
            small_records: 10_000,
            reads: 300,
            writes: 200,
            starts_per_vault: 2,
            pages: 40,
            catch_up_changes: 1_000,
            base_peers: 2,
            peers: 10,
            idle_phase: Duration::from_secs(5),
            settle: Duration::from_secs(2),
        }
    }

    pub fn full() -> Self {
        Self {
            big_records: 10_000_000,
            small_records: 10_000,
            reads: 3_000,
            writes: 1_000,
            starts_per_vault: 3,
            pages: 200,
            catch_up_changes: 10_000,
            base_peers: 2,
            peers: 100,
            idle_phase: Duration::from_secs(30),
            settle: Duration::from_secs(5),
        }
    }
}

/// Why the benchmark could not run (a part that fails is reported, not raised).
#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    /// No `ferry` binary to run (the build failed, or the given path holds none).
    #[error("{why}")]
    NoBinary { why: String },
}

/// Runs the three parts and reports them.
pub fn run(options: &Options<Plan>) -> Result<ScaleReport, ScaleError> {
    let plan = options.plan.clone();
    let (binary, ready) = ferry_procs::prepare_binary(options.ferry_binary.clone(), options.build);
    ready.map_err(|why| ScaleError::NoBinary { why })?;
    let watch = MachineWatch::start();

    crate::progress("idle: one gateway with no vaults, mDNS on and off");
    let idle = measure_idle(&binary, &plan).map_err(|err| err.to_string());
    let big = big_vault::measure(&binary, &plan);
    let peers = peers::measure(&binary, &plan);

    Ok(ScaleReport::new(
        plan,
        idle,
        big,
        peers,
        watch.end(ferry_procs::layout(&binary)),
    ))
}

/// A gateway with nothing to do, with mDNS on and off: how long it took to start and what it
/// holds resident once settled.
fn measure_idle(binary: &Path, plan: &Plan) -> Result<Idle, GatewayError> {
    let mut figures = Vec::new();
    for mdns in [true, false] {
        let started = Instant::now();
        let options = ferry_procs::options(binary).mdns(mdns);
        let mut gateway = Gateway::launch(Place::Loopback, "idle", options)?;
        let start = started.elapsed();
        std::thread::sleep(plan.settle);
        // The most of a few readings a second apart, so a moment's dip is not the figure.
        let mut resident = None;
        for _ in 0..IDLE_READINGS {
            let now = gateway
                .process_id()
                .and_then(memory::resident)
                .map(|(now, _)| now);
            resident = resident.max(now);
            std::thread::sleep(Duration::from_secs(1));
        }
        gateway.stop_cleanly()?;
        figures.push((start, resident));
    }
    Ok(Idle {
        start_s: figures[0].0.as_secs_f64(),
        resident_mdns: figures[0].1,
        resident_no_mdns: figures[1].1,
    })
}

/// Polls `gateway`'s `/v1/vaults` until `vault` there is at `revision` or later, printing its
/// progress now and then; the time it took, or why it did not get there within `bound`.
fn wait_for_revision(
    gateway: &Gateway,
    vault: &str,
    revision: u64,
    bound: Duration,
) -> Result<Duration, String> {
    const POLL: Duration = Duration::from_millis(20);
    const SAY_EVERY: Duration = Duration::from_secs(10);
    let started = Instant::now();
    let mut said = started;
    loop {
        let now = vault_revision(gateway, vault)?.unwrap_or(0);
        if now >= revision {
            return Ok(started.elapsed());
        }
        if started.elapsed() >= bound {
            return Err(format!(
                "{} reached revision {now} of {vault}, not {revision}, within {bound:?}; its \
                 log ends:\n{}",
                gateway.label,
                gateway.log_tail(10)
            ));
        }
        if said.elapsed() >= SAY_EVERY {
            crate::progress(&format!(
                "{}: {vault} at revision {now} of {revision}",
                gateway.label
            ));
            said = Instant::now();
        }
        std::thread::sleep(POLL);
    }
}

/// `vault`'s revision on `gateway`; `None` while it holds none of it.
fn vault_revision(gateway: &Gateway, vault: &str) -> Result<Option<u64>, String> {
    let (status, body) = crate::load::request_once(
        gateway.api_addr(),
        "GET",
        "/v1/vaults",
        &gateway.token,
        Some(APP),
    )
    .map_err(|err| err.to_string())?;
    if status != 200 {
        return Err(format!(
            "GET /v1/vaults on {} answered {status}: {}",
            gateway.label,
            String::from_utf8_lossy(&body)
        ));
    }
    let rows: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|err| format!("/v1/vaults on {} is not JSON: {err}", gateway.label))?;
    Ok(rows
        .as_array()
        .into_iter()
        .flatten()
        .find(|row| row["name"] == vault)
        .and_then(|row| row["revision"].as_u64()))
}
