//! The liveness report: the figures of both phases for Ferry and the floor, per peer and per
//! second, the target judged once, the markdown for people and the same object as JSON.

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::overload::report::Machine;
use crate::targets::{self, Bound, Judged, Unit};

use super::Plan;

/// The bound: a gateway with 100 idle trusted peers spends under 1% of a core on
/// liveness.
const IDLE_SHARE_TARGET: f64 = 0.01;

/// One measured phase.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    #[serde(serialize_with = "as_seconds")]
    pub wall: Duration,
    /// The hub's CPU over the phase; `None` where `/proc` could not tell.
    #[serde(serialize_with = "as_seconds_or_null")]
    pub cpu: Option<Duration>,
    /// UDP datagrams on the machine over the phase (each has the hub at one end).
    pub datagrams: Option<u64>,
    /// Calls done in the phase (busy phase only).
    pub calls: u64,
}

impl Measured {
    /// The hub's CPU as a share of one core.
    fn core_share(&self) -> Option<f64> {
        self.cpu
            .map(|cpu| cpu.as_secs_f64() / self.wall.as_secs_f64().max(1e-9))
    }

    fn datagrams_per_second(&self) -> Option<f64> {
        self.datagrams
            .map(|n| n as f64 / self.wall.as_secs_f64().max(1e-9))
    }
}

/// One system's figures, per peer.
#[derive(Debug, Clone, Serialize)]
pub struct PerPeer {
    /// The hub's CPU with every peer idle, as a share of one core.
    pub idle_core_share: Option<f64>,
    /// The hub's CPU per idle peer, in microseconds per second.
    pub idle_cpu_us_per_s: Option<f64>,
    /// Datagrams per idle peer per second, both directions.
    pub idle_datagrams_per_s: Option<f64>,
    /// What each busy peer adds to the hub's CPU over being idle, in microseconds per second
    /// (its 50 ms heartbeats and its one call a second).
    pub busy_extra_cpu_us_per_s: Option<f64>,
    /// What each busy peer adds in datagrams per second.
    pub busy_extra_datagrams_per_s: Option<f64>,
    /// Calls a second in the busy phase, all busy peers together.
    pub busy_calls_per_s: f64,
    pub idle: Measured,
    pub busy: Measured,
}

impl PerPeer {
    fn of(plan: &Plan, idle: Measured, busy: Measured) -> Self {
        let peers = plan.peers.max(1) as f64;
        let busy_peers = plan.busy.max(1) as f64;
        let idle_cpu = idle.core_share().map(|share| share * 1e6);
        let busy_cpu = busy.core_share().map(|share| share * 1e6);
        let idle_datagrams = idle.datagrams_per_second();
        let busy_datagrams = busy.datagrams_per_second();
        Self {
            idle_core_share: idle.core_share(),
            idle_cpu_us_per_s: idle_cpu.map(|us| us / peers),
            idle_datagrams_per_s: idle_datagrams.map(|n| n / peers),
            busy_extra_cpu_us_per_s: busy_cpu
                .zip(idle_cpu)
                .map(|(busy, idle)| (busy - idle) / busy_peers),
            busy_extra_datagrams_per_s: busy_datagrams
                .zip(idle_datagrams)
                .map(|(busy, idle)| (busy - idle) / busy_peers),
            busy_calls_per_s: busy.calls as f64 / busy.wall.as_secs_f64().max(1e-9),
            idle,
            busy,
        }
    }
}

/// `ferry-bench liveness`, for the markdown and `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct LivenessReport {
    pub bench: &'static str,
    pub plan: Plan,
    pub floor: Result<PerPeer, String>,
    pub ferry: Result<PerPeer, String>,
    pub targets: Vec<Judged>,
    pub machine: Machine,
}

impl LivenessReport {
    pub fn new(
        plan: Plan,
        floor: (Measured, Measured),
        ferry: Result<(Measured, Measured), String>,
        machine: Machine,
    ) -> Self {
        let floor = Ok(PerPeer::of(&plan, floor.0, floor.1));
        let ferry = ferry.map(|(idle, busy)| PerPeer::of(&plan, idle, busy));
        let idle_share = ferry.as_ref().ok().and_then(|f| f.idle_core_share);
        Self {
            bench: "liveness",
            targets: vec![Judged::new(
                "idle_liveness_core_share",
                Unit::CoreShare,
                Bound::AtMost(IDLE_SHARE_TARGET),
                idle_share,
            )],
            plan,
            floor,
            ferry,
            machine,
        }
    }

    /// Whether Ferry was measured.
    pub fn clean(&self) -> bool {
        self.ferry.is_ok()
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let plan = &self.plan;
        let _ = writeln!(out, "# What liveness costs (`ferry-bench liveness`)\n");
        let _ = writeln!(
            out,
            "One hub trusting {} peers on loopback; {} of them busy (one read a second each) in \
             the busy phase. Each phase measured for {:.0} s after {:.0} s to settle.\n",
            plan.peers,
            plan.busy,
            plan.phase.as_secs_f64(),
            plan.warm.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "| system | hub CPU, all idle | per idle peer | datagrams per idle peer | \
             per busy peer, over idle | datagrams per busy peer, over idle | calls/s |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|");
        for (name, system) in [
            ("bare quinn keep-alive", &self.floor),
            ("Ferry", &self.ferry),
        ] {
            match system {
                Ok(f) => {
                    let _ = writeln!(
                        out,
                        "| {name} | {} | {} | {} | {} | {} | {:.1} |",
                        share(f.idle_core_share),
                        per_second(f.idle_cpu_us_per_s, "us"),
                        per_second(f.idle_datagrams_per_s, ""),
                        per_second(f.busy_extra_cpu_us_per_s, "us"),
                        per_second(f.busy_extra_datagrams_per_s, ""),
                        f.busy_calls_per_s
                    );
                }
                Err(why) => {
                    let _ = writeln!(out, "| {name} | not measured: {why} | | | | | |");
                }
            }
        }
        if let (Ok(floor), Ok(ferry)) = (&self.floor, &self.ferry) {
            let ratio = |a: Option<f64>, b: Option<f64>| {
                a.zip(b)
                    .filter(|(_, b)| *b > 0.0)
                    .map_or_else(|| "-".into(), |(a, b)| format!("{:.2}x", a / b))
            };
            let _ = writeln!(
                out,
                "\nFerry over the floor: {} of the CPU per idle peer, {} per busy peer.\n",
                ratio(ferry.idle_cpu_us_per_s, floor.idle_cpu_us_per_s),
                ratio(ferry.busy_extra_cpu_us_per_s, floor.busy_extra_cpu_us_per_s)
            );
        }
        targets::render_judged(&mut out, &self.targets);
        let _ = writeln!(out, "\n{}", self.machine.summary());
        out
    }
}

fn share(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{:.2}% of a core", v * 100.0))
}

fn per_second(value: Option<f64>, unit: &str) -> String {
    value.map_or_else(
        || "-".into(),
        |v| format!("{v:.1} {unit}/s").replace(" /s", "/s"),
    )
}

/// A duration as seconds (a float), for the JSON.
pub fn as_seconds<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(value.as_secs_f64())
}

fn as_seconds_or_null<S: Serializer>(
    value: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serializer.serialize_f64(value.as_secs_f64()),
        None => serializer.serialize_none(),
    }
}
