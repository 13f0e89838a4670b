//! The scale report: each part's figures, the targets judged once, the markdown for people and
//! the same object as JSON.

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Serialize, Serializer};

use super::Plan;
use crate::load::Sample;
use crate::memory::MIB;
use crate::overload::report::Machine;
use crate::placement::{Placement, Placements};
use crate::targets::{self, Bound, Judged, Unit};

/// A gateway with nothing to do.
#[derive(Debug, Clone, Serialize)]
pub struct Idle {
    /// From the spawn to answering `/v1/status`, with a fresh home (a new node key).
    pub start_s: f64,
    /// Resident bytes once settled, mDNS on (the shipped default) and off.
    pub resident_mdns: Option<u64>,
    pub resident_no_mdns: Option<u64>,
}

/// The latency of requests one at a time, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latencies {
    pub count: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

impl Latencies {
    pub fn of(sample: &Sample) -> Self {
        let ms = |p| {
            sample
                .percentile(p)
                .map(|d: Duration| d.as_secs_f64() * 1e3)
        };
        Self {
            count: sample.ok(),
            p50_ms: ms(50.0),
            p99_ms: ms(99.0),
            max_ms: ms(100.0),
        }
    }
}

/// Point reads and writes through the owner's API on one vault, by placement of the
/// benchmark's client against the owner (one placement, unpinned, where the cores could not
/// be set).
#[derive(Debug, Clone, Serialize)]
pub struct OnVault {
    pub placed: Vec<Placed>,
}

/// The same point reads and writes on bare SQLite, one at a time on the benchmark's thread.
#[derive(Debug, Clone, Serialize)]
pub struct FloorOnVault {
    pub read: Latencies,
    pub write: Latencies,
}

/// The owner's figures in one placement of the benchmark's client against it (`None`:
/// unpinned, where the cores could not be set), over its starts, each start's p50 beside.
#[derive(Debug, Clone, Serialize)]
pub struct Placed {
    pub placement: Option<Placement>,
    pub read: Latencies,
    pub write: Latencies,
    pub read_p50_by_start_ms: Vec<f64>,
    pub write_p50_by_start_ms: Vec<f64>,
}

impl Placed {
    fn name(&self) -> &'static str {
        crate::placement::name(self.placement)
    }
}

/// The big vault's p50 over the small one's: the worse over the placements both were
/// measured in (figures from different placements are never compared).
fn size_ratio(big: &BigVault, pick: fn(&Placed) -> &Latencies) -> Option<f64> {
    same_placement(big)
        .filter_map(|(small, large)| ratio(pick(large).p50_ms, pick(small).p50_ms))
        .reduce(f64::max)
}

/// The placements some figures were taken in, in order.
fn placements(placed: &[Placed]) -> Vec<Option<Placement>> {
    placed.iter().map(|p| p.placement).collect()
}

/// Each placement's figures on the small vault and on the big one.
fn same_placement(big: &BigVault) -> impl Iterator<Item = (&Placed, &Placed)> {
    big.small.placed.iter().filter_map(|small| {
        let large = big
            .big
            .placed
            .iter()
            .find(|l| l.placement == small.placement)?;
        Some((small, large))
    })
}

/// The same work on bare SQLite: the owner's database file after the run, one request at a
/// time on the benchmark's thread.
#[derive(Debug, Clone, Serialize)]
pub struct SqliteFloor {
    pub small: FloorOnVault,
    pub big: FloorOnVault,
    pub page: Latencies,
}

/// The big-vault part.
#[derive(Debug, Clone, Serialize)]
pub struct BigVault {
    pub records: u64,
    pub small_records: u64,
    pub floor: SqliteFloor,
    /// Filling both vaults through the store while the owner was stopped.
    pub seed_s: f64,
    pub database_bytes: Option<u64>,
    /// The owner's start with the filled vaults, from the spawn to answering `/v1/status`.
    pub start_s: f64,
    pub small: OnVault,
    pub big: OnVault,
    /// Pages of 1,000 keys at places spread over the big vault.
    pub page: Latencies,
    /// A fresh replica's sync of the big vault: its records and revisions, and the time from
    /// `ferry vault follow` to the replica at the owner's revision.
    pub sync_records: u64,
    pub sync_revisions: u64,
    pub sync_s: f64,
    /// The replica's catch-up after this many changes while it was stopped: from its restart
    /// to the owner's revision.
    pub catch_up_changes: u64,
    pub catch_up_s: f64,
    /// The highest resident set each gateway reached, in bytes.
    pub owner_peak_resident: Option<u64>,
    pub replica_peak_resident: Option<u64>,
}

impl BigVault {
    fn sync_per_s(&self) -> f64 {
        self.sync_records as f64 / self.sync_s.max(1e-9)
    }
}

/// The hub while some of its peers call it.
#[derive(Debug, Clone, Serialize)]
pub struct UnderCalls {
    pub callers: usize,
    pub calls_per_s: f64,
    /// The hub's CPU over the phase, as a share of one core.
    pub core_share: Option<f64>,
    /// Resident bytes at the phase's end.
    pub resident: Option<u64>,
}

/// The hub with some number of peers.
#[derive(Debug, Clone, Serialize)]
pub struct AtSize {
    pub peers: usize,
    pub called: UnderCalls,
    /// The hub's CPU over the idle phase, as a share of one core.
    pub idle_core_share: Option<f64>,
    /// Resident bytes after the idle phase, after the writes, and the highest so far.
    pub idle_resident: Option<u64>,
    pub busy_resident: Option<u64>,
    pub peak_resident: Option<u64>,
    /// The hub's CPU per write (all its threads, in microseconds; its heartbeats over the
    /// writes included).
    pub write_cpu_us: Option<f64>,
    /// Writes through the hub to the first peer's vault, one at a time, by placement of the
    /// benchmark's client against the hub and that peer.
    pub write: Vec<PlacedWrites>,
}

/// Writes in one placement (`None`: unpinned, where the cores could not be set).
#[derive(Debug, Clone, Serialize)]
pub struct PlacedWrites {
    pub placement: Option<Placement>,
    pub write: Latencies,
}

/// The many-peers part.
#[derive(Debug, Clone, Serialize)]
pub struct ManyPeers {
    pub few: AtSize,
    pub many: AtSize,
}

/// `ferry-bench scale`, for the markdown and `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    pub bench: &'static str,
    pub plan: Plan,
    pub idle: Result<Idle, String>,
    pub big_vault: Result<BigVault, String>,
    pub many_peers: Result<ManyPeers, String>,
    pub targets: Vec<Judged>,
    pub machine: Machine,
}

fn mib(bytes: Option<u64>) -> Option<f64> {
    bytes.map(|b| b as f64 / MIB)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b)
}

impl ScaleReport {
    pub fn new(
        plan: Plan,
        idle: Result<Idle, String>,
        big_vault: Result<BigVault, String>,
        many_peers: Result<ManyPeers, String>,
        machine: Machine,
    ) -> Self {
        let targets = judge(
            idle.as_ref().ok(),
            big_vault.as_ref().ok(),
            many_peers.as_ref().ok(),
        );
        Self {
            bench: "scale",
            plan,
            idle,
            big_vault,
            many_peers,
            targets,
            machine,
        }
    }

    /// Whether every part was measured.
    pub fn clean(&self) -> bool {
        self.idle.is_ok() && self.big_vault.is_ok() && self.many_peers.is_ok()
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Scale (`ferry-bench scale`)\n");
        render_idle(&mut out, &self.idle);
        render_big(&mut out, &self.big_vault);
        render_peers(&mut out, &self.many_peers);
        targets::render_judged(&mut out, &self.targets);
        let _ = writeln!(out, "\n{}", self.machine.summary());
        out
    }
}

/// The targets, in its order.
fn judge(idle: Option<&Idle>, big: Option<&BigVault>, peers: Option<&ManyPeers>) -> Vec<Judged> {
    let big_peak = big.and_then(|b| mib(b.owner_peak_resident.max(b.replica_peak_resident)));
    // The high-water mark, read last, is at or above every reading before it.
    let many_peak = peers.and_then(|p| mib(p.many.peak_resident));
    vec![
        Judged::new(
            "big_vault_read_p50_ratio",
            Unit::Ratio,
            Bound::AtMost(1.5),
            big.and_then(|b| size_ratio(b, |p| &p.read)),
        ),
        Judged::new(
            "big_vault_write_p50_ratio",
            Unit::Ratio,
            Bound::AtMost(1.5),
            big.and_then(|b| size_ratio(b, |p| &p.write)),
        ),
        Judged::new(
            "big_vault_page_max_ms",
            Unit::Millis,
            Bound::AtMost(20.0),
            big.and_then(|b| b.page.max_ms),
        ),
        Judged::new(
            "replica_sync_records_per_s",
            Unit::PerSecond,
            Bound::AtLeast(50_000.0),
            big.map(BigVault::sync_per_s),
        ),
        Judged::new(
            "big_vault_start_s",
            Unit::Seconds,
            Bound::AtMost(2.0),
            big.map(|b| b.start_s),
        ),
        Judged::new(
            "big_vault_peak_resident_mib",
            Unit::Mebibytes,
            Bound::AtMost(100.0),
            big_peak,
        ),
        Judged::new(
            "many_peers_idle_core_share",
            Unit::CoreShare,
            Bound::AtMost(0.02),
            peers.and_then(|p| p.many.idle_core_share),
        ),
        Judged::new(
            "many_peers_peak_resident_mib",
            Unit::Mebibytes,
            Bound::AtMost(64.0),
            many_peak,
        ),
        Judged::new(
            "many_peers_write_p50_ratio",
            Unit::Ratio,
            Bound::AtMost(1.2),
            peers.and_then(|p| {
                // The worse placement; figures of different placements are never compared.
                p.many
                    .write
                    .iter()
                    .filter_map(|many| {
                        let few = p.few.write.iter().find(|f| f.placement == many.placement)?;
                        ratio(many.write.p50_ms, few.write.p50_ms)
                    })
                    .reduce(f64::max)
            }),
        ),
        Judged::new(
            "idle_resident_mib",
            Unit::Mebibytes,
            Bound::AtMost(20.0),
            idle.and_then(|i| mib(i.resident_mdns.max(i.resident_no_mdns))),
        ),
    ]
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.3} ms"))
}

fn mib_shown(bytes: Option<u64>) -> String {
    mib(bytes).map_or_else(|| "-".into(), |v| format!("{v:.1} MiB"))
}

fn render_idle(out: &mut String, idle: &Result<Idle, String>) {
    let _ = writeln!(out, "## An idle gateway with no vaults\n");
    match idle {
        Ok(idle) => {
            let _ = writeln!(
                out,
                "Started (fresh home) in {:.2} s; resident once settled: {} with mDNS, {} \
                 without.\n",
                idle.start_s,
                mib_shown(idle.resident_mdns),
                mib_shown(idle.resident_no_mdns)
            );
        }
        Err(why) => {
            let _ = writeln!(out, "Not measured: {why}\n");
        }
    }
}

fn render_big(out: &mut String, big: &Result<BigVault, String>) {
    let _ = writeln!(out, "## A big vault\n");
    let big = match big {
        Ok(big) => big,
        Err(why) => {
            let _ = writeln!(out, "Not measured: {why}\n");
            return;
        }
    };
    let _ = writeln!(
        out,
        "{} records (64-byte values), filled in {:.0} s beside a vault of {} (measured alone \
         first); database {}. The owner started with them in {:.2} s.\n",
        crate::figures::count(big.records),
        big.seed_s,
        crate::figures::count(big.small_records),
        big.database_bytes
            .map_or_else(|| "-".into(), |b| format!("{:.2} GB", b as f64 / 1e9)),
        big.start_s
    );
    let _ = writeln!(
        out,
        "| one at a time | {} records p50 | p99 | {} records p50 | p99 | big over small, p50 |",
        crate::figures::count(big.small_records),
        crate::figures::count(big.records)
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    let floor = &big.floor;
    let owner_rows = |what: &'static str, pick: fn(&Placed) -> &Latencies| {
        same_placement(big).map(move |(small, large)| {
            let row = format!("{what}, owner's API, {}", small.name());
            (row, pick(small), pick(large))
        })
    };
    let mut rows: Vec<(String, &Latencies, &Latencies)> =
        owner_rows("point read", |p| &p.read).collect();
    rows.push((
        "point read, bare SQLite".into(),
        &floor.small.read,
        &floor.big.read,
    ));
    rows.extend(owner_rows("write over an existing record", |p| &p.write));
    rows.push((
        "write, bare SQLite (an upsert per FULL commit)".into(),
        &floor.small.write,
        &floor.big.write,
    ));
    for (what, small, large) in rows {
        let _ = writeln!(
            out,
            "| {what} | {} | {} | {} | {} | {} |",
            ms(small.p50_ms),
            ms(small.p99_ms),
            ms(large.p50_ms),
            ms(large.p99_ms),
            ratio(large.p50_ms, small.p50_ms).map_or_else(|| "-".into(), |r| format!("{r:.2}x"))
        );
    }
    let by_start = |p50s: &[f64]| {
        p50s.iter()
            .map(|p| format!("{p:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        out,
        "\nThe owner's API figures: {}; each placement over {} starts of the owner per vault, \
         pooled. Each start's p50, ms:\n",
        Placements::describe(&placements(&big.small.placed)),
        big.small
            .placed
            .first()
            .map_or(0, |p| p.read_p50_by_start_ms.len()),
    );
    for (small, large) in same_placement(big) {
        let _ = writeln!(
            out,
            "- {}: reads {} (small) and {} (big), writes {} (small) and {} (big).",
            small.name(),
            by_start(&small.read_p50_by_start_ms),
            by_start(&large.read_p50_by_start_ms),
            by_start(&small.write_p50_by_start_ms),
            by_start(&large.write_p50_by_start_ms)
        );
    }
    let _ = writeln!(
        out,
        "\nA page of 1,000 keys, {} places across the big vault: p50 {}, p99 {}, max {} through \
         the owner's API; bare SQLite p50 {}, max {}.\n",
        big.page.count,
        ms(big.page.p50_ms),
        ms(big.page.p99_ms),
        ms(big.page.max_ms),
        ms(floor.page.p50_ms),
        ms(floor.page.max_ms)
    );
    let _ = writeln!(
        out,
        "A fresh replica synced {} records ({} revisions) in {:.1} s: {} records/s. After {} \
         changes while it was stopped, it caught up {:.2} s after its restart. Peak resident \
         memory: owner {}, replica {}.\n",
        crate::figures::count(big.sync_records),
        crate::figures::count(big.sync_revisions),
        big.sync_s,
        crate::figures::count(big.sync_per_s().round() as u64),
        crate::figures::count(big.catch_up_changes),
        big.catch_up_s,
        mib_shown(big.owner_peak_resident),
        mib_shown(big.replica_peak_resident)
    );
}

fn render_peers(out: &mut String, peers: &Result<ManyPeers, String>) {
    let _ = writeln!(out, "## Many peers\n");
    let peers = match peers {
        Ok(peers) => peers,
        Err(why) => {
            let _ = writeln!(out, "Not measured: {why}\n");
            return;
        }
    };
    let _ = writeln!(
        out,
        "| trusted peers | hub CPU, idle | resident, idle | after writes | write p50 / p99 | hub CPU per write | called: calls/s | hub CPU | resident |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    for size in [&peers.few, &peers.many] {
        let writes = size
            .write
            .iter()
            .map(|placed| {
                format!(
                    "{} / {} ({})",
                    ms(placed.write.p50_ms),
                    ms(placed.write.p99_ms),
                    crate::placement::name(placed.placement)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.0} from {} peers | {} | {} |",
            size.peers,
            size.idle_core_share
                .map_or_else(|| "-".into(), |s| format!("{:.2}% of a core", s * 100.0)),
            mib_shown(size.idle_resident),
            mib_shown(size.busy_resident),
            writes,
            size.write_cpu_us
                .map_or_else(|| "-".into(), |us| format!("{us:.0} us")),
            size.called.calls_per_s,
            size.called.callers,
            size.called
                .core_share
                .map_or_else(|| "-".into(), |s| format!("{:.2}% of a core", s * 100.0)),
            mib_shown(size.called.resident)
        );
    }
    let _ = writeln!(
        out,
        "\nWrites one at a time from the benchmark's client through the hub to the first peer \
         (the measured gateways: the hub and that peer; the other peers are never pinned): \
         {}.\n",
        Placements::describe(
            &peers
                .few
                .write
                .iter()
                .map(|w| w.placement)
                .collect::<Vec<_>>()
        )
    );
}

/// A duration as seconds (a float), for the JSON.
pub fn as_seconds<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(value.as_secs_f64())
}
