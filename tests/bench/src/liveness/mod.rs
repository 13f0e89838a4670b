//! What liveness costs: one gateway (the hub) trusting many peers, every one a real
//! `ferry serve` on loopback, each pair probing the other (SPEC 8). Two phases:
//!
//! - **idle**: no calls; every route heartbeats at the quiet interval of a peer never called
//!   (`ferry_core::health::QUIET_INTERVAL`, 15 s);
//! - **busy**: the hub reads once a second from a vault on each of a few peers, so its routes
//!   to them are in use and heartbeat every 50 ms (`ferry_core::health::ACTIVE_INTERVAL`).
//!
//! Each phase gives the hub's CPU (`/proc/<pid>/stat`, all threads, the ended ones included)
//! and the UDP datagrams on the machine (`/proc/net/snmp`: every datagram of the run has the hub
//! at one end, so this counts the hub's packets, sent and received; anything else on the
//! machine sending UDP in those seconds would be counted too, and the report says how busy the
//! machine was). The floor ([`floor`]) is the same number of bare quinn connections kept alive
//! at the same intervals, with one tiny request a second on each busy one.

pub mod floor;
pub mod report;

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bare_relay::RelayError;
use crate::cpu::{self, Side};
use crate::ferry_procs::{self, Gateway, GatewayError};
use crate::load::request_once;
use crate::overload::report::MachineWatch;
use crate::Options;
use floor::Floor;
use report::{LivenessReport, Measured};

/// How long the hub may take to see every peer's route up, and a busy vault to be readable.
const READY_BOUND: Duration = Duration::from_secs(60);
const READY_POLL: Duration = Duration::from_millis(200);
const APP: &str = "bench-liveness";

/// How many peers, how many of them busy, and how long each phase is measured.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub peers: usize,
    pub busy: usize,
    #[serde(serialize_with = "report::as_seconds")]
    pub phase: Duration,
    /// Run before a phase is measured, so every route has settled to the phase's interval.
    #[serde(serialize_with = "report::as_seconds")]
    pub warm: Duration,
}

impl Plan {
    pub fn quick() -> Self {
        Self {
            peers: 10,
            busy: 2,
            phase: Duration::from_secs(5),
            warm: Duration::from_secs(2),
        }
    }

    pub fn full() -> Self {
        Self {
            peers: 100,
            busy: 10,
            phase: Duration::from_secs(30),
            warm: Duration::from_secs(3),
        }
    }
}

/// Why the benchmark could not run at all (a phase that fails is reported, not raised).
#[derive(Debug, thiserror::Error)]
pub enum LivenessError {
    #[error(transparent)]
    Proc(#[from] GatewayError),
    #[error(transparent)]
    Floor(#[from] RelayError),
    #[error("{0}")]
    Setup(String),
}

/// Runs the floor, then Ferry, and reports both.
pub fn run(options: &Options<Plan>) -> Result<LivenessReport, LivenessError> {
    let plan = options.plan.clone();
    let (binary, ready) = ferry_procs::prepare_binary(options.ferry_binary.clone(), options.build);
    let watch = MachineWatch::start();

    crate::progress(&format!(
        "floor: {} bare quinn connections, {} of them busy",
        plan.peers, plan.busy
    ));
    let floor = measure_floor(&plan)?;
    let ferry = match ready {
        Ok(()) => measure_ferry(&binary, &plan),
        Err(why) => Err(why),
    };

    Ok(LivenessReport::new(
        plan,
        floor,
        ferry,
        watch.end(ferry_procs::layout(&binary)),
    ))
}

/// The floor's two phases: every connection at the quiet interval, then the busy ones at the
/// active interval with a request a second.
fn measure_floor(plan: &Plan) -> Result<(Measured, Measured), LivenessError> {
    use ferry_peer::health::{ACTIVE_INTERVAL, QUIET_INTERVAL};
    let idle = {
        let floor = Floor::start(&vec![QUIET_INTERVAL; plan.peers])?;
        std::thread::sleep(plan.warm);
        let measured = measure_phase(plan.phase, floor_cpu, || 0);
        check_connected(&floor, plan.peers)?;
        measured
    };
    let busy = {
        let intervals: Vec<Duration> = (0..plan.peers)
            .map(|i| {
                if i < plan.busy {
                    ACTIVE_INTERVAL
                } else {
                    QUIET_INTERVAL
                }
            })
            .collect();
        let floor = Floor::start(&intervals)?;
        let calls = floor.call_every_second(plan.busy);
        std::thread::sleep(plan.warm);
        let before = calls.done();
        let measured = measure_phase(plan.phase, floor_cpu, || calls.done() - before);
        check_connected(&floor, plan.peers)?;
        measured
    };
    Ok((idle, busy))
}

fn floor_cpu() -> Option<Duration> {
    let snapshot = Floor::hub_side().snapshot()?;
    Some(cpu::Snapshot::default().until(&snapshot).of(Side::Owner))
}

fn check_connected(floor: &Floor, peers: usize) -> Result<(), LivenessError> {
    let connected = floor.connected();
    if connected == peers {
        Ok(())
    } else {
        Err(LivenessError::Setup(format!(
            "the floor lost connections: {connected} of {peers} still open"
        )))
    }
}

/// Ferry's two phases, or why they could not be measured.
fn measure_ferry(binary: &Path, plan: &Plan) -> Result<(Measured, Measured), String> {
    crate::progress(&format!(
        "ferry: starting a hub and {} peers (`ferry serve` on loopback, no mDNS)",
        plan.peers
    ));
    let mesh = Mesh::start(binary, plan).map_err(|err| err.to_string())?;
    let hub_pid = mesh
        .hub
        .process_id()
        .ok_or_else(|| "the hub is not running".to_string())?;
    let hub_cpu = || cpu::process_cpu(hub_pid);

    crate::progress("ferry: idle phase");
    std::thread::sleep(plan.warm);
    let idle = measure_phase(plan.phase, hub_cpu, || 0);
    mesh.all_routes_up()
        .map_err(|err| format!("after the idle phase: {err}"))?;

    crate::progress("ferry: busy phase");
    mesh.make_busy_vaults().map_err(|err| err.to_string())?;
    let reader = Reader::start(&mesh.hub, plan.busy);
    std::thread::sleep(plan.warm);
    let before = reader.done();
    let busy = measure_phase(plan.phase, hub_cpu, || reader.done() - before);
    let failures = reader.stop();
    if failures > 0 {
        return Err(format!(
            "{failures} reads through the hub failed in the busy phase"
        ));
    }
    mesh.all_routes_up()
        .map_err(|err| format!("after the busy phase: {err}"))?;
    Ok((idle, busy))
}

/// CPU and datagrams over one phase of `length`, and the calls `done` counted in it.
fn measure_phase(
    length: Duration,
    cpu: impl Fn() -> Option<Duration>,
    done: impl Fn() -> u64,
) -> Measured {
    let (cpu_before, udp_before, started) = (cpu(), udp_datagrams(), Instant::now());
    std::thread::sleep(length);
    let (cpu_after, udp_after, wall) = (cpu(), udp_datagrams(), started.elapsed());
    Measured {
        wall,
        cpu: cpu_before
            .zip(cpu_after)
            .map(|(before, after)| after.saturating_sub(before)),
        datagrams: udp_before
            .zip(udp_after)
            .map(|(before, after)| after.saturating_sub(before)),
        calls: done(),
    }
}

/// UDP datagrams sent on this machine (its network namespace) so far, from `/proc/net/snmp`.
fn udp_datagrams() -> Option<u64> {
    parse_udp_out(&std::fs::read_to_string("/proc/net/snmp").ok()?)
}

/// `OutDatagrams` of the `Udp:` lines (a header line naming the fields, then the values).
fn parse_udp_out(snmp: &str) -> Option<u64> {
    let mut udp = snmp.lines().filter(|line| line.starts_with("Udp:"));
    let (names, values) = (udp.next()?, udp.next()?);
    let at = names
        .split_whitespace()
        .position(|name| name == "OutDatagrams")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// The hub, its peers, and the vaults the busy peers own.
struct Mesh {
    hub: Gateway,
    peers: Vec<Gateway>,
    busy: usize,
}

impl Mesh {
    fn start(binary: &Path, plan: &Plan) -> Result<Self, LivenessError> {
        let hub = ferry_procs::start(binary, "hub", None)?;
        let mut peers = Vec::with_capacity(plan.peers);
        for i in 0..plan.peers {
            let peer = ferry_procs::start(binary, &format!("p{i:03}"), None)?;
            hub.try_trust(&peer)?;
            peer.try_trust(&hub)?;
            peers.push(peer);
        }
        let mesh = Self {
            hub,
            peers,
            busy: plan.busy,
        };
        let started = Instant::now();
        loop {
            match mesh.all_routes_up() {
                Ok(()) => return Ok(mesh),
                Err(why) if started.elapsed() >= READY_BOUND => {
                    return Err(LivenessError::Setup(format!(
                        "after {READY_BOUND:?}: {why}; the hub's log ends:\n{}",
                        mesh.hub.log_tail(20)
                    )))
                }
                Err(_) => std::thread::sleep(READY_POLL),
            }
        }
    }

    /// Whether the hub holds an `up` route to every peer, and if not, how many it does.
    fn all_routes_up(&self) -> Result<(), String> {
        ferry_procs::routes_up(&self.hub, &self.peers)
    }

    /// Each busy peer creates a vault and writes a record; waits (bounded) until the hub can
    /// read each one.
    fn make_busy_vaults(&self) -> Result<(), LivenessError> {
        for (i, peer) in self.peers.iter().take(self.busy).enumerate() {
            let vault = busy_vault(i);
            peer.cli_stdout(&["vault", "create", &vault])?;
            peer.cli_stdout(&["put", &vault, "k", "v"])?;
            let started = Instant::now();
            loop {
                let answer = request_once(
                    self.hub.api_addr(),
                    "GET",
                    &format!("/v1/vaults/{vault}/records/k"),
                    &self.hub.token,
                    Some(APP),
                );
                match answer {
                    Ok((200, _)) => break,
                    _ if started.elapsed() < READY_BOUND => std::thread::sleep(READY_POLL),
                    other => {
                        return Err(LivenessError::Setup(format!(
                            "the hub cannot read {vault} from {} after {READY_BOUND:?}: \
                             {other:?}",
                            peer.label
                        )))
                    }
                }
            }
        }
        Ok(())
    }
}

fn busy_vault(i: usize) -> String {
    format!("busy-{i:03}")
}

/// Reads through the hub, one a second from each busy peer's vault, on a thread of its own.
struct Reader {
    done: std::sync::Arc<std::sync::atomic::AtomicU64>,
    failed: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reader {
    fn start(hub: &Gateway, busy: usize) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let (done, failed, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (api, token) = (hub.api_addr(), hub.token.clone());
        let pace = Duration::from_secs(1) / busy.max(1) as u32;
        let thread = {
            let (done, failed, stop) = (done.clone(), failed.clone(), stop.clone());
            std::thread::spawn(move || {
                let started = Instant::now();
                let mut n: u32 = 0;
                while !stop.load(Ordering::Relaxed) {
                    let path = format!("/v1/vaults/{}/records/k", busy_vault(n as usize % busy));
                    match request_once(api, "GET", &path, &token, Some(APP)) {
                        Ok((200, _)) => done.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                    n += 1;
                    // Paced from the start, so a slow answer does not lower the rate.
                    if let Some(wait) = (pace * n).checked_sub(started.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
            })
        };
        Self {
            done,
            failed,
            stop,
            thread: Some(thread),
        }
    }

    fn done(&self) -> u64 {
        self.done.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops the reader and returns how many reads failed.
    fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.failed.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_out_datagrams_are_read_from_the_udp_lines() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\n\
                    Udp: 120 3 0 118 0\n\
                    UdpLite: InDatagrams NoPorts InErrors OutDatagrams\nUdpLite: 0 0 0 0\n";
        assert_eq!(parse_udp_out(snmp), Some(118));
        assert_eq!(parse_udp_out("Ip: a\nIp: 1\n"), None);
        assert_eq!(parse_udp_out("Udp: InDatagrams\nUdp: 5\n"), None);
    }
}
