//! A stranger on the LAN forging mDNS announcements for a trusted peer (issue 43), in the
//! network-namespace lab. h1 owns `notes`; h2 trusts it (configured LAN and tailnet routes, mDNS
//! on) and writes to it; h3 runs no gateway, only the forger (`ferry_tests::lab_forge`), which
//! announces h1's node id at a new address with every packet. h2 must keep at most
//! `MAX_DISCOVERED_PER_PEER` discovered routes to h1, never take an address from outside the
//! subnet the announcement came in on (or a tailnet address outside the tailnet's range), keep
//! its configured routes up, and go on serving writes as fast as before.
//!
//! Every forged address is inside the lab: 10.77.0.10-250 and 100.77.0.10-250 are the lab's
//! own (empty) subnets, and 192.0.2.0/24 and 203.0.113.0/24 are documentation ranges the lab's
//! hosts have no route to, so nothing leaves them.
//!
//! Run: `cargo test -p ferry-tests --test integration lab_discovery:: -- --nocapture` (as root).

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use ferry_core::discovered::MAX_DISCOVERED_PER_PEER;
use ferry_harness::{wait_for, Gateway};
use ferry_tests::lab;
use ferry_tests::lab::{trust_all, Lab};
use serde_json::{json, Value};

/// Forged announcements a second: what one unprivileged program on the LAN sends without
/// trying (a stranger could send more; every one of these is a new address).
const FORGED_PER_SECOND: u64 = 200;
/// How long writes are measured, before the forging and during it.
const PHASE: Duration = Duration::from_secs(10);
/// One write from h2 to h1 this often.
const WRITE_EVERY: Duration = Duration::from_millis(200);
/// The thread mdns-sd runs its daemon on.
const MDNS_THREAD: &str = "mDNS_daemon";

/// CPU time the process `pid` has used so far (user and system), or only its threads named
/// `thread`, from `/proc`.
fn cpu_used(pid: u32, thread: Option<&str>) -> Duration {
    let ticks = |stat: &str| -> u64 {
        // After the command (which may hold spaces, in parentheses): utime and stime are the
        // 14th and 15th fields, in clock ticks (100 a second on Linux).
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|f| f.parse::<u64>().unwrap())
            .sum()
    };
    let total = match thread {
        None => ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap()),
        Some(name) => std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .map(|task| std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap())
            .filter(|stat| stat.contains(&format!("({name})")))
            .map(|stat| ticks(&stat))
            .sum(),
    };
    Duration::from_millis(total * 10)
}

/// The resident memory of process `pid`, from `/proc/PID/status`.
fn resident(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// The bytes queued for sending on host `host`'s peer socket (UDP port 7420) and the most
/// it may hold, from `ss` (`skmem` `t` and `tb`). Packets to an on-link address where no host
/// answers wait there for address resolution; when they fill it, no call gets out.
fn peer_socket_queue(lab: &Lab, host: usize) -> (u64, u64) {
    let port = format!("sport = :{}", lab::FERRY_PORT);
    let out = lab.exec(host, "ss", &["-uamn", &port]);
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> u64 {
        text.split(['(', ',', ')'])
            .find_map(|f| f.strip_prefix(name)?.parse().ok())
            .unwrap_or_else(|| panic!("no skmem {name} in ss's output: {text}"))
    };
    (field("t"), field("tb"))
}

/// What one phase of writes saw.
struct Phase {
    /// Each write's own time (`elapsed_ms` of `ferry put --json`).
    writes_ms: Vec<f64>,
    /// The most discovered routes to h1 seen at once.
    most_discovered: usize,
    /// The most bytes seen queued on h2's peer socket, and its limit.
    most_queued: (u64, u64),
    /// CPU used by h1's and h2's gateways (and h2's mDNS thread) during the phase.
    cpu: [Duration; 3],
    /// h2's resident memory at the end of the phase.
    resident: u64,
}

impl Phase {
    fn median_ms(&self) -> f64 {
        let mut sorted = self.writes_ms.clone();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    }

    fn worst_ms(&self) -> f64 {
        self.writes_ms.iter().copied().fold(0.0, f64::max)
    }
}

/// For [`PHASE`]: a write from h2 to h1's vault every [`WRITE_EVERY`], then a look at h2's
/// routes to h1 and its peer socket. Every write must be `done`; the routes must stay within
/// the bounds at every look.
fn writes_and_looks(lab: &Lab, h1: &Gateway, h2: &Gateway, name: &str) -> Phase {
    let configured = [h1.lan_addr(), h1.tailnet_addr()];
    let cpu = || {
        [
            cpu_used(h1.pid(), None),
            cpu_used(h2.pid(), None),
            cpu_used(h2.pid(), Some(MDNS_THREAD)),
        ]
    };
    let cpu_before = cpu();
    let started = Instant::now();
    let mut phase = Phase {
        writes_ms: Vec::new(),
        most_discovered: 0,
        most_queued: (0, 0),
        cpu: [Duration::ZERO; 3],
        resident: 0,
    };
    let mut n = 0u32;
    while started.elapsed() < PHASE {
        n += 1;
        // Paced so the owner's rate limit (600 a minute) never answers instead.
        let next = started + WRITE_EVERY * n;
        let (code, answer) = h2.cli_json(&["put", "notes", &format!("{name}-{n}"), "v"]);
        assert_eq!(
            code,
            0,
            "{name}: write {n} after {:?}: {answer}",
            started.elapsed()
        );
        phase.writes_ms.push(
            answer["elapsed_ms"]
                .as_f64()
                .unwrap_or_else(|| panic!("no elapsed_ms in {answer}")),
        );
        let routes = h2.routes_to("h1");
        let discovered: Vec<&Value> = routes.iter().filter(|r| r["source"] != "config").collect();
        phase.most_discovered = phase.most_discovered.max(discovered.len());
        assert!(
            discovered.len() <= MAX_DISCOVERED_PER_PEER,
            "{name}: h2 holds {} discovered routes to h1, more than {MAX_DISCOVERED_PER_PEER}: \
             {discovered:?}",
            discovered.len()
        );
        for route in &discovered {
            let address = route["address"].as_str().unwrap();
            let on_lan = route["kind"] == "lan" && address.starts_with("10.77.0.");
            let on_tailnet = route["kind"] == "tailnet" && address.starts_with("100.77.0.");
            assert!(
                on_lan || on_tailnet,
                "{name}: a route from outside the subnets the announcements came in on: {route}"
            );
        }
        for address in configured {
            let route = routes.iter().find(|r| r["address"] == address);
            assert!(
                route.is_some_and(|r| r["source"] == "config" && r["state"] == "up"),
                "{name}: configured route {address} not up after {:?}: {route:?}",
                started.elapsed()
            );
        }
        let queued = peer_socket_queue(lab, 2);
        phase.most_queued = phase.most_queued.max(queued);
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    let cpu_after = cpu();
    phase.cpu = std::array::from_fn(|i| cpu_after[i] - cpu_before[i]);
    phase.resident = resident(h2.pid());
    phase
}

#[test]
fn forged_announcements_for_a_trusted_peer_stay_within_the_bounds_and_writes_go_on() {
    let Some(lab) = Lab::new(3) else { return };
    let tailnet = |host| format!("{}:{}", lab.addr(host, lab::Nic::Tailnet), lab::FERRY_PORT);
    let h1 = lab.start_ferry(1, "h1", &["--tailnet", &tailnet(1)]);
    let h2 = lab.start_ferry(2, "h2", &["--tailnet", &tailnet(2)]);
    trust_all(&[&h1, &h2]);
    let out = h1.cli(&["vault", "create", "notes"]);
    assert!(out.status.success(), "{}", ferry_harness::describe(&out));
    let configured = [h1.lan_addr(), h1.tailnet_addr()];
    wait_for(
        "h2's configured routes to h1 to be up",
        Duration::from_secs(15),
        || {
            let routes = h2.routes_to("h1");
            configured
                .iter()
                .all(|a| {
                    routes
                        .iter()
                        .any(|r| r["address"] == *a && r["state"] == "up")
                })
                .then_some(())
        },
    );
    let quiet = writes_and_looks(&lab, &h1, &h2, "quiet");

    // The stranger: h3, on the LAN, with a route for multicast and no gateway.
    let out = lab.exec(3, "ip", &["route", "add", "224.0.0.0/4", "dev", "lan0"]);
    assert!(out.status.success(), "{}", ferry_harness::describe(&out));
    let files = tempfile::tempdir().unwrap();
    let port = lab::FERRY_PORT;
    let mut lan: Vec<String> = (10..=250).map(|i| format!("10.77.0.{i}")).collect();
    let mut ts: Vec<String> = (10..=250).map(|i| format!("100.77.0.{i}:{port}")).collect();
    // One in ten from outside every lab subnet (documentation ranges: no route in the lab).
    for i in 1..=25 {
        lan.insert(i * 10, format!("192.0.2.{i}"));
        ts.insert(i * 10, format!("203.0.113.{i}:{port}"));
    }
    let settings = json!({
        "mode": "mdns-forge",
        "node": h1.node_id,
        "port": port,
        "lan": lan,
        "tailnet": ts,
        "per_second": FORGED_PER_SECOND,
        "stop": files.path().join("stop"),
    })
    .to_string();
    let log = files.path().join("forger.log");
    let mut forger = lab.spawn_in(
        3,
        Path::new(env!("CARGO_BIN_EXE_ferry-lab-app")),
        &[],
        &[(ferry_tests::lab_app::SETTINGS_VAR, &settings)],
        &log,
    );
    let forger_log = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for(
        "h2 to take a route from a forged announcement",
        Duration::from_secs(10),
        || {
            assert!(
                forger.try_wait().unwrap().is_none(),
                "the forger ended: {}",
                forger_log()
            );
            h2.routes_to("h1")
                .iter()
                .any(|r| r["source"] != "config")
                .then_some(())
        },
    );
    let flooded = writes_and_looks(&lab, &h1, &h2, "flooded");
    std::fs::write(files.path().join("stop"), b"").unwrap();
    let ended = wait_for("the forger to stop", Duration::from_secs(10), || {
        forger.try_wait().unwrap()
    });
    assert!(ended.success(), "the forger: {}", forger_log());
    eprintln!("measured: {}", forger_log().trim());

    for (name, phase) in [("quiet", &quiet), ("flooded", &flooded)] {
        let [h1_cpu, h2_cpu, h2_mdns] = phase.cpu;
        eprintln!(
            "figure: {name}: {} writes from h2 to h1 in {PHASE:?}, median {:.1} ms, worst {:.1} \
             ms; at most {} discovered routes to h1; at most {} of {} bytes queued on h2's peer \
             socket; CPU used by h1's gateway {h1_cpu:?}, by h2's {h2_cpu:?} ({h2_mdns:?} of it \
             mdns-sd's thread); h2's resident memory then {:.1} MiB",
            phase.writes_ms.len(),
            phase.median_ms(),
            phase.worst_ms(),
            phase.most_discovered,
            phase.most_queued.0,
            phase.most_queued.1,
            phase.resident as f64 / f64::from(1 << 20),
        );
    }
    assert_eq!(
        flooded.most_discovered, MAX_DISCOVERED_PER_PEER,
        "the forged announcements filled the discovered routes to their cap"
    );
    // Loose: the box is shared; a write held up behind the flood would take far longer.
    assert!(
        flooded.median_ms() <= quiet.median_ms() * 3.0 + 20.0,
        "writes slowed under the forged announcements: median {:.1} ms, {:.1} ms before",
        flooded.median_ms(),
        quiet.median_ms()
    );
}
