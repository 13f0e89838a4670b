//! What two gateways cost at rest (issue 47): a laptop pair, one owning vaults the other
//! follows, idle after a burst of writes, with an app's change-feed long poll open on the
//! follower. Measured with one followed vault and with twenty, beside a floor of bare quinn
//! (`crate::liveness`'s): one connection kept alive every 15 s from both ends, as the
//! peer-to-peer tools people use today keep their peers.
//!
//! Each figure is a window of idleness after a settling time: CPU from `/proc/<pid>/stat` (both
//! processes, every thread, 10 ms ticks, so a full run's 60 s window reads 0.15% of a core as
//! 9 ticks), and wake-ups as context switches summed over the threads alive at both ends of
//! the window (`/proc/<pid>/task/*/status`): each is a thread woken to run.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use ferry_harness::Gateway;
use ferry_peer::health::QUIET_INTERVAL;
use serde::Serialize;

use crate::cpu::{self, Side, Sides};
use crate::ferry_procs::{self, GatewayError};
use crate::liveness::floor::{Floor, HUB_THREAD};
use crate::targets::{self, Bound, Judged, Unit};
use crate::Options;

/// The most a pair at rest may cost, with one followed vault or twenty: what two Syncthing
/// 1.19 instances sharing a folder cost on this machine (0.07-0.13% of a core, issue 47).
const PAIR_AT_REST_AT_MOST: f64 = 0.0015;
/// Writes through the follower before the rest.
const BURST: usize = 100;
const APP: &str = "bench-rest";
/// The app's change-feed long poll on the follower, in seconds.
const FEED_WAIT_S: u32 = 25;

/// How long each phase settles and is measured.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    #[serde(serialize_with = "crate::liveness::report::as_seconds")]
    pub settle: Duration,
    #[serde(serialize_with = "crate::liveness::report::as_seconds")]
    pub window: Duration,
}

impl Plan {
    pub fn quick() -> Self {
        Self {
            settle: Duration::from_secs(3),
            window: Duration::from_secs(10),
        }
    }

    /// The issue's: idle for 60 s after the burst.
    pub fn full() -> Self {
        Self {
            settle: Duration::from_secs(5),
            window: Duration::from_secs(60),
        }
    }
}

/// One window's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Rested {
    /// CPU of both sides as a share of one core.
    pub cpu_share: f64,
    /// The owner's and the follower's (the floor: the hub's and the peer's) shares.
    pub sides: [f64; 2],
    /// Context switches a second, both sides.
    pub wakeups_per_second: f64,
}

/// The whole run.
#[derive(Debug, Serialize)]
pub struct RestReport {
    pub plan: Plan,
    pub floor: Result<Rested, String>,
    pub one_vault: Result<Rested, String>,
    pub twenty_vaults: Result<Rested, String>,
    pub targets: Vec<Judged>,
}

impl RestReport {
    /// Whether every part was measured.
    pub fn clean(&self) -> bool {
        self.floor.is_ok() && self.one_vault.is_ok() && self.twenty_vaults.is_ok()
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# At rest (`ferry-bench rest`)\n");
        let _ = writeln!(
            out,
            "Two gateways idle for {:?} after {BURST} writes and {:?} of settling, an app's \
             change feed open on the follower; the floor is one bare quinn connection kept \
             alive every {:?} from both ends.\n",
            self.plan.window, self.plan.settle, QUIET_INTERVAL
        );
        let _ = writeln!(
            out,
            "| pair | CPU, both (% of a core) | owner / follower | wake-ups/s |"
        );
        let _ = writeln!(out, "|---|---|---|---|");
        for (name, rested) in [
            ("bare quinn, 15 s keep-alives", &self.floor),
            ("Ferry, 1 vault followed", &self.one_vault),
            ("Ferry, 20 vaults followed", &self.twenty_vaults),
        ] {
            let _ = match rested {
                Ok(r) => writeln!(
                    out,
                    "| {name} | {:.3}% | {:.3}% / {:.3}% | {:.1} |",
                    r.cpu_share * 100.0,
                    r.sides[0] * 100.0,
                    r.sides[1] * 100.0,
                    r.wakeups_per_second
                ),
                Err(why) => writeln!(out, "| {name} | not measured: {why} | | |"),
            };
        }
        let _ = writeln!(out);
        targets::render_judged(&mut out, &self.targets);
        out
    }
}

/// Runs the floor, then the pair with one followed vault and with twenty.
pub fn run(options: &Options<Plan>) -> RestReport {
    let plan = options.plan.clone();
    let (binary, ready) = ferry_procs::prepare_binary(options.ferry_binary.clone(), options.build);
    crate::progress("rest: the floor, one bare quinn connection");
    let floor = measure_floor(&plan);
    let pair = |vaults| match &ready {
        Ok(()) => {
            crate::progress(&format!("rest: a pair following {vaults} vault(s)"));
            measure_pair(&binary, vaults, &plan).map_err(|err| err.to_string())
        }
        Err(why) => Err(why.clone()),
    };
    let one_vault = pair(1);
    let twenty_vaults = pair(20);
    let share = |rested: &Result<Rested, String>| rested.as_ref().ok().map(|r| r.cpu_share);
    let targets = vec![
        Judged::new(
            "rest_pair_cpu_one_vault",
            Unit::CoreShare,
            Bound::AtMost(PAIR_AT_REST_AT_MOST),
            share(&one_vault),
        ),
        Judged::new(
            "rest_pair_cpu_twenty_vaults",
            Unit::CoreShare,
            Bound::AtMost(PAIR_AT_REST_AT_MOST),
            share(&twenty_vaults),
        ),
    ];
    RestReport {
        plan,
        floor,
        one_vault,
        twenty_vaults,
        targets,
    }
}

fn measure_floor(plan: &Plan) -> Result<Rested, String> {
    let floor = Floor::start(&[QUIET_INTERVAL]).map_err(|err| err.to_string())?;
    std::thread::sleep(plan.settle);
    let sides = Sides::Threads {
        caller: vec!["floor-peers"],
        owner: vec![HUB_THREAD],
    };
    let threads = |prefixes: &[&str]| wakeups(Path::new("/proc/self"), prefixes);
    let before = (sides.snapshot(), threads(&["floor-"]), Instant::now());
    std::thread::sleep(plan.window);
    let after = (sides.snapshot(), threads(&["floor-"]), Instant::now());
    drop(floor);
    let wall = after.2.duration_since(before.2).as_secs_f64();
    let (Some(cpu_before), Some(cpu_after)) = (before.0, after.0) else {
        return Err("/proc cannot tell this process's threads' CPU".into());
    };
    let usage = cpu_before.until(&cpu_after);
    let (hub, peer) = (usage.of(Side::Owner), usage.of(Side::Caller));
    Ok(Rested {
        cpu_share: (hub + peer).as_secs_f64() / wall,
        sides: [hub.as_secs_f64() / wall, peer.as_secs_f64() / wall],
        wakeups_per_second: after.1.saturating_sub(before.1) as f64 / wall,
    })
}

/// A pair following `vaults` vaults, after a burst and its settling, over the window.
fn measure_pair(binary: &Path, vaults: usize, plan: &Plan) -> Result<Rested, GatewayError> {
    let owner = ferry_procs::start(binary, "a", None)?;
    let follower = ferry_procs::start(binary, "b", None)?;
    owner.try_trust_each_other(&follower)?;
    let names: Vec<String> = (0..vaults).map(|i| format!("v{i}")).collect();
    for name in &names {
        owner.cli_stdout(&["vault", "create", name])?;
        follower.cli_stdout(&["vault", "follow", name, "--owner", &owner.label])?;
    }
    // The burst: writes through the follower to the owner, so the peer was in use.
    for i in 0..BURST {
        let (status, body) = follower.put("v0", &format!("k{i}"), b"burst", &[]);
        if status != 200 {
            return Err(GatewayError::Answer {
                who: follower.label.clone(),
                detail: format!("a burst write answered {status}: {body}"),
            });
        }
    }
    open_change_feed(&follower, BURST as u64);
    std::thread::sleep(plan.settle);
    let pids = [owner.process_id(), follower.process_id()];
    let [Some(owner_pid), Some(follower_pid)] = pids else {
        return Err(GatewayError::NotRunning {
            who: "the pair".into(),
        });
    };
    let read = || {
        (
            cpu::process_cpu(owner_pid),
            cpu::process_cpu(follower_pid),
            process_wakeups(owner_pid) + process_wakeups(follower_pid),
            Instant::now(),
        )
    };
    let before = read();
    std::thread::sleep(plan.window);
    let after = read();
    let wall = after.3.duration_since(before.3).as_secs_f64();
    let spent = |a: Option<Duration>, b: Option<Duration>| {
        a.zip(b)
            .map_or(0.0, |(a, b)| b.saturating_sub(a).as_secs_f64() / wall)
    };
    let sides = [spent(before.0, after.0), spent(before.1, after.1)];
    Ok(Rested {
        cpu_share: sides[0] + sides[1],
        sides,
        wakeups_per_second: after.2.saturating_sub(before.2) as f64 / wall,
    })
}

/// An app's change feed on `gateway`'s `v0`, long-polling past `after` from a thread of its
/// own until the gateway goes (its request then fails and the thread ends).
fn open_change_feed(gateway: &Gateway, after: u64) {
    let path = format!("/v1/vaults/v0/changes?after={after}&wait={FEED_WAIT_S}");
    let request = gateway.request_as(APP, hyper::Method::GET, &path);
    std::thread::spawn(move || {
        while let Some(request) = request.try_clone() {
            if request.send().is_err() {
                return;
            }
        }
    });
}

/// Context switches of every live thread of `pid`.
fn process_wakeups(pid: u32) -> u64 {
    wakeups(&Path::new("/proc").join(pid.to_string()), &[])
}

/// Context switches of the live threads under `proc_dir` whose names start with one of
/// `prefixes` (all when empty).
fn wakeups(proc_dir: &Path, prefixes: &[&str]) -> u64 {
    let Ok(tasks) = std::fs::read_dir(proc_dir.join("task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter(|task| {
            prefixes.is_empty()
                || std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|name| prefixes.iter().any(|p| name.starts_with(p)))
        })
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .map(|status| {
            status
                .lines()
                .filter(|line| line.contains("ctxt_switches"))
                .filter_map(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}
