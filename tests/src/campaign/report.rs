//! The campaign's report: operations by outcome, faults by kind, the checker's verdict, how long
//! unknown outcomes took to settle, how long the replicas took to catch up, how many reads were
//! answered while faults were on, and the command that replays the run.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::{replay_command, settles_by_id, Injected, Options};

/// When the campaign's phases ended.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// The last fault healed (wall-clock ms).
    pub healed_ms: u64,
    /// The last app ended (every unknown settled or given up).
    pub apps_done_ms: u64,
    /// From the apps' end until every replica held its owner's revision.
    pub convergence_ms: u64,
    pub elapsed: Duration,
}

/// The report, as `ferry-campaign --json` prints it (see [`Report::to_json`]).
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub bug: Option<String>,
    /// Writes and reads the apps made that reached their gateway.
    pub ops: u64,
    /// Calls that found no gateway running on their host (killed or stopped): not counted in
    /// `ops`, and "nothing was sent" for the writes among them.
    pub not_reached: u64,
    /// By kind of call and outcome (`write:done`, `read:found`, ...).
    pub outcomes: BTreeMap<String, u64>,
    pub faults: u64,
    pub faults_by_kind: BTreeMap<String, u64>,
    pub violations: Vec<String>,
    /// Writes answered `outcome_unknown` (or whose app's call broke after sending), how many
    /// settled, and how long settling took after the answer (ms: median, 99th, largest).
    pub unknown: u64,
    pub unknown_settled: u64,
    pub settle_ms: [u64; 3],
    /// Settled afterwards, by what the owner said.
    pub settled_as: BTreeMap<String, u64>,
    pub convergence_ms: u64,
    /// Reads that reached their gateway while a fault was on, and the share of them answered
    /// (found or not found); the same share for the other reads.
    pub reads_during_faults: u64,
    pub read_availability_during_faults: f64,
    pub read_availability_otherwise: f64,
    pub elapsed_s: f64,
    pub replay: String,
}

impl Report {
    /// `ok` or `violations`.
    pub fn verdict(&self) -> &'static str {
        if self.violations.is_empty() {
            "ok"
        } else {
            "violations"
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "verdict": self.verdict(),
            "ops": self.ops,
            "faults": self.faults,
            "not_reached": self.not_reached,
            "violations": self.violations,
            "seed": self.seed,
            "bug": self.bug,
            "outcomes": self.outcomes,
            "faults_by_kind": self.faults_by_kind,
            "unknown": {
                "count": self.unknown,
                "settled": self.unknown_settled,
                "settled_as": self.settled_as,
                "settle_ms_p50": self.settle_ms[0],
                "settle_ms_p99": self.settle_ms[1],
                "settle_ms_max": self.settle_ms[2],
            },
            "replicas_converged_ms": self.convergence_ms,
            "reads_during_faults": self.reads_during_faults,
            "read_availability_during_faults": self.read_availability_during_faults,
            "read_availability_otherwise": self.read_availability_otherwise,
            "elapsed_s": self.elapsed_s,
            "replay": self.replay,
        })
    }

    /// The report in plain words.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line(format!(
            "campaign seed {}{}: {} after {} operations and {} faults in {:.0} s",
            self.seed,
            self.bug
                .as_ref()
                .map(|b| format!(" (bug {b} switched on)"))
                .unwrap_or_default(),
            self.verdict().to_uppercase(),
            self.ops,
            self.faults,
            self.elapsed_s
        ));
        line(format!(
            "  operations by outcome: {} ({} more found their own gateway down)",
            pairs(&self.outcomes),
            self.not_reached
        ));
        line(format!(
            "  faults by kind:        {}",
            pairs(&self.faults_by_kind)
        ));
        line(format!(
            "  unknown outcomes:      {} ({} settled: {}); settled {} ms after the answer at the median, {} ms at p99, {} ms at most",
            self.unknown,
            self.unknown_settled,
            pairs(&self.settled_as),
            self.settle_ms[0],
            self.settle_ms[1],
            self.settle_ms[2]
        ));
        line(format!(
            "  replicas caught up:    {} ms after the last app ended",
            self.convergence_ms
        ));
        line(format!(
            "  reads answered:        {:.1}% of {} that reached a gateway while a fault was on, {:.1}% otherwise",
            self.read_availability_during_faults * 100.0,
            self.reads_during_faults,
            self.read_availability_otherwise * 100.0
        ));
        if self.violations.is_empty() {
            line("  checker: every promise held".into());
        } else {
            line(format!("  checker: {} violations:", self.violations.len()));
            for v in self.violations.iter().take(40) {
                line(format!("    - {v}"));
            }
            if self.violations.len() > 40 {
                line(format!("    ... and {} more", self.violations.len() - 40));
            }
        }
        line(format!("  replay: {}", self.replay));
        out
    }
}

fn pairs(map: &BTreeMap<String, u64>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The value at quantile `q` of `sorted` (0 when empty).
fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The report of a finished campaign.
pub fn build(
    options: &Options,
    events: &[(usize, String, Vec<Value>)],
    injected: &[Injected],
    violations: Vec<String>,
    timing: Timing,
) -> Report {
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut settle_ms: Vec<u64> = Vec::new();
    let mut settled_as: BTreeMap<String, u64> = BTreeMap::new();
    let (mut unknown, mut unknown_settled) = (0u64, 0u64);
    let (mut reached, mut not_reached) = (0u64, 0u64);
    let during = |at: u64| injected.iter().any(|f| f.at_ms <= at && at <= f.healed_ms);
    let (mut reads_during, mut answered_during) = (0u64, 0u64);
    let (mut reads_otherwise, mut answered_otherwise) = (0u64, 0u64);
    for (_, _, events) in events {
        let settles = settles_by_id(events);
        for e in events {
            let kind = e["kind"].as_str().unwrap_or("?");
            if kind != "write" && kind != "read" {
                continue;
            }
            let code = e["code"].as_str().unwrap_or("?");
            *outcomes.entry(format!("{kind}:{code}")).or_default() += 1;
            if code == "local_gateway_down" {
                not_reached += 1;
                continue;
            }
            reached += 1;
            if kind == "read" {
                let answered = code == "found" || code == "not_found";
                let at = e["sent_ms"].as_u64().unwrap_or(0);
                if during(at) {
                    reads_during += 1;
                    answered_during += u64::from(answered);
                } else {
                    reads_otherwise += 1;
                    answered_otherwise += u64::from(answered);
                }
            }
            if code == "outcome_unknown" || code == "app_unknown" {
                unknown += 1;
                let settle = e["id"].as_str().and_then(|id| settles.get(id));
                if let Some(settle) = settle {
                    let state = settle["body"]["state"].as_str().unwrap_or("unsettled");
                    if state == "done" || state == "not_carried_out" {
                        unknown_settled += 1;
                        let answered = e["answered_ms"].as_u64().unwrap_or(0);
                        let at = settle["at_ms"].as_u64().unwrap_or(answered);
                        settle_ms.push(at.saturating_sub(answered));
                    }
                    *settled_as.entry(state.to_string()).or_default() += 1;
                }
            }
        }
    }
    settle_ms.sort_unstable();
    let mut faults_by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for fault in injected {
        *faults_by_kind
            .entry(fault.fault.kind().to_string())
            .or_default() += 1;
    }
    let share = |answered: u64, all: u64| {
        if all == 0 {
            1.0
        } else {
            answered as f64 / all as f64
        }
    };
    Report {
        seed: options.seed,
        bug: options.bug.map(|b| b.name().to_string()),
        ops: reached,
        not_reached,
        outcomes,
        faults: injected.len() as u64,
        faults_by_kind,
        violations,
        unknown,
        unknown_settled,
        settle_ms: [
            quantile(&settle_ms, 0.5),
            quantile(&settle_ms, 0.99),
            settle_ms.last().copied().unwrap_or(0),
        ],
        settled_as,
        convergence_ms: timing.convergence_ms,
        reads_during_faults: reads_during,
        read_availability_during_faults: share(answered_during, reads_during),
        read_availability_otherwise: share(answered_otherwise, reads_otherwise),
        elapsed_s: timing.elapsed.as_secs_f64(),
        replay: replay_command(options),
    }
}
