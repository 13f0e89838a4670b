//! One hub trusting many peers: its idle CPU and memory, the p50 of a write through it, and its
//! CPU and memory while some peers call it, with a few peers and then with many. Every peer is
//! a real `ferry serve` on loopback that trusts the hub back, so each route heartbeats both
//! ways; the writes go from the hub's API to a vault the first peer owns (the hub is the
//! calling gateway), the calls from ten peers' APIs to a vault the hub owns.

use std::path::Path;
use std::time::{Duration, Instant};

use super::report::{AtSize, Latencies, ManyPeers, PlacedWrites, UnderCalls};
use super::{Plan, APP};
use crate::cpu;
use crate::ferry_procs::{self, Gateway, GatewayError, PATH_OWNER_CONFIG};
use crate::load::{self, request_once, Keys, Target, Verb};
use crate::memory;
use crate::placement::Placements;
use ferry_peer::health::ACTIVE_FOR;

const VAULT: &str = "shared";
/// How long the hub may take to see every route up, and the vault to be readable.
const READY_BOUND: Duration = Duration::from_secs(120);
/// How often the hub is asked whether it is ready.
const READY_POLL: Duration = Duration::from_millis(200);
/// Bound on each run of writes.
const WRITE_BOUND: Duration = Duration::from_secs(300);
/// Unmeasured writes before each measured run.
const WARMUP: usize = 100;
/// The vault the hub owns, which some peers list while the hub is measured under calls.
const HUB_VAULT: &str = "hub-notes";
/// How many peers call the hub in that phase, and how often each.
const CALLERS: usize = 10;
const CALLS_PER_CALLER_PER_S: u32 = 10;

/// The many-peers part, or why it could not finish.
pub fn measure(binary: &Path, plan: &Plan) -> Result<ManyPeers, String> {
    run(binary, plan).map_err(|err| err.to_string())
}

fn run(binary: &Path, plan: &Plan) -> Result<ManyPeers, Failure> {
    crate::progress(&format!(
        "many peers: a hub and {} peers, then {}",
        plan.base_peers, plan.peers
    ));
    let hub = ferry_procs::start(binary, "hub", None)?;
    hub.cli_stdout(&["vault", "create", HUB_VAULT])?;
    hub.cli_stdout(&["put", HUB_VAULT, "k", "v"])?;
    let mut peers = Vec::with_capacity(plan.peers);
    // The first peer owns the vault the hub writes to; the rules are sized not to bind on one
    // app's writes one at a time.
    add_peer(&hub, &mut peers, binary, Some(PATH_OWNER_CONFIG))?;
    peers[0].cli_stdout(&["vault", "create", VAULT])?;
    while peers.len() < plan.base_peers {
        add_peer(&hub, &mut peers, binary, None)?;
    }
    wait_ready(&hub, &peers)?;
    let few = at_size(&hub, &peers, plan)?;

    crate::progress(&format!("many peers: adding peers up to {}", plan.peers));
    while peers.len() < plan.peers {
        add_peer(&hub, &mut peers, binary, None)?;
    }
    wait_ready(&hub, &peers)?;
    let many = at_size(&hub, &peers, plan)?;
    Ok(ManyPeers { few, many })
}

/// Why the part stopped.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Proc(#[from] GatewayError),
    #[error("{0}")]
    Setup(String),
    /// Writes through the hub failed: a part measured with failures is no figure.
    #[error("writes through the hub: {done} of {asked} done; first failure: {first:?}")]
    Writes {
        done: usize,
        asked: usize,
        first: Option<String>,
    },
}

fn add_peer(
    hub: &Gateway,
    peers: &mut Vec<Gateway>,
    binary: &Path,
    config: Option<&str>,
) -> Result<(), Failure> {
    let peer = ferry_procs::start(binary, &format!("p{:03}", peers.len()), config)?;
    hub.try_trust(&peer)?;
    peer.try_trust(hub)?;
    peers.push(peer);
    Ok(())
}

/// Waits (bounded) until the hub has an up route to every peer and can read the vault.
fn wait_ready(hub: &Gateway, peers: &[Gateway]) -> Result<(), Failure> {
    let started = Instant::now();
    loop {
        let routes = ferry_procs::routes_up(hub, peers);
        let read = request_once(
            hub.api_addr(),
            "GET",
            &format!("/v1/vaults/{VAULT}/records?limit=1"),
            &hub.token,
            Some(APP),
        );
        let why = match (routes, read) {
            (Ok(()), Ok((200, _))) => return Ok(()),
            (Err(why), _) => why,
            (Ok(()), other) => format!("the hub cannot list {VAULT}: {other:?}"),
        };
        if started.elapsed() >= READY_BOUND {
            return Err(Failure::Setup(format!(
                "after {READY_BOUND:?}: {why}; the hub's log ends:\n{}",
                hub.log_tail(20)
            )));
        }
        std::thread::sleep(READY_POLL);
    }
}

/// The hub's figures with `peers`: idle first (CPU over the phase, memory after it), then
/// writes one at a time, then memory again.
fn at_size(hub: &Gateway, peers: &[Gateway], plan: &Plan) -> Result<AtSize, Failure> {
    let pid = hub
        .process_id()
        .ok_or_else(|| Failure::Setup("the hub is not running".into()))?;
    crate::progress(&format!("many peers: {} peers, idle", peers.len()));
    // Past the 50 ms heartbeats of a route just used (the last reads and writes), so the phase
    // sees what an idle hub spends: routes used lately at 1 s, the rest at 15 s.
    std::thread::sleep(plan.settle.max(ACTIVE_FOR + Duration::from_secs(1)));
    let ((), idle_cpu, wall) = cpu::process_cpu_over(pid, || std::thread::sleep(plan.idle_phase));
    let idle_core_share = idle_cpu.map(|cpu| cpu.as_secs_f64() / wall.as_secs_f64());
    let idle_resident = memory::resident(pid).map(|(now, _)| now);

    crate::progress(&format!(
        "many peers: {} peers, writes through the hub",
        peers.len()
    ));
    let target = Target {
        api: hub.api_addr(),
        token: hub.token.clone(),
        app: APP.into(),
        vault: VAULT.into(),
    };
    let keys = Keys::new(format!("n{}/", peers.len()));
    let owner = peers[0]
        .process_id()
        .ok_or_else(|| Failure::Setup("the vault's owner is not running".into()))?;
    let placements = Placements::here("many peers");
    let (placed, write_cpu, _) = cpu::process_cpu_over(pid, || {
        placements
            .each
            .iter()
            .map(|placement| {
                let _pinned = placements
                    .pin(*placement, &[pid, owner])
                    .map_err(|why| Failure::Setup(format!("pinning: {why}")))?;
                let writes = load::sequential(
                    &target,
                    Verb::Write,
                    &keys,
                    WARMUP,
                    plan.writes,
                    WRITE_BOUND,
                )
                .map_err(|err| Failure::Setup(err.to_string()))?;
                if writes.failures() > 0 || writes.ok() < plan.writes {
                    return Err(Failure::Writes {
                        done: writes.ok(),
                        asked: plan.writes,
                        first: writes.first_failure,
                    });
                }
                Ok(PlacedWrites {
                    placement: *placement,
                    write: Latencies::of(&writes),
                })
            })
            .collect::<Result<Vec<_>, Failure>>()
    });
    let placed = placed?;
    // The warm-ups' writes are in the CPU too, and so are the hub's heartbeats meanwhile
    // (with 100 peers, a few hundredths of its CPU per write).
    let written = placed.len() * (WARMUP + plan.writes);
    let write_cpu_us = write_cpu.map(|cpu| cpu.as_secs_f64() * 1e6 / written.max(1) as f64);
    let (busy_resident, _) = memory::resident(pid).unzip();
    let called = under_calls(peers.len(), pid, &peers[..CALLERS.min(peers.len())], plan)?;
    let (_, peak_resident) = memory::resident(pid).unzip();
    Ok(AtSize {
        called,
        peers: peers.len(),
        idle_core_share,
        idle_resident,
        busy_resident,
        peak_resident,
        write_cpu_us,
        write: placed,
    })
}

/// The hub while `callers` each list a page of its vault [`CALLS_PER_CALLER_PER_S`] times a
/// second (a listing always goes to the owner; a point read could come from a caller's cache):
/// its CPU over a third of the idle phase, and its resident set after.
fn under_calls(
    trusted: usize,
    pid: u32,
    callers: &[Gateway],
    plan: &Plan,
) -> Result<UnderCalls, Failure> {
    let path = format!("/v1/vaults/{HUB_VAULT}/records?limit=10");
    let list = |peer: &Gateway| request_once(peer.api_addr(), "GET", &path, &peer.token, Some(APP));
    let started = Instant::now();
    for peer in callers {
        while !matches!(list(peer), Ok((200, _))) {
            if started.elapsed() >= READY_BOUND {
                return Err(Failure::Setup(format!(
                    "{} cannot list {HUB_VAULT} on the hub after {READY_BOUND:?}",
                    peer.label
                )));
            }
            std::thread::sleep(READY_POLL);
        }
    }
    crate::progress(&format!(
        "many peers: {trusted} peers, {} of them calling the hub",
        callers.len()
    ));
    let phase = plan.idle_phase / 3;
    let pace = Duration::from_secs(1) / (CALLS_PER_CALLER_PER_S * callers.len() as u32).max(1);
    let ((done, failed), calls_cpu, wall) = cpu::process_cpu_over(pid, || {
        let (mut done, mut failed) = (0u64, 0u64);
        let started = Instant::now();
        let mut n: u32 = 0;
        while started.elapsed() < phase {
            match list(&callers[n as usize % callers.len()]) {
                Ok((200, _)) => done += 1,
                _ => failed += 1,
            }
            n += 1;
            // Paced from the start, so a slow answer does not lower the rate.
            if let Some(wait) = (pace * n).checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        (done, failed)
    });
    let wall = wall.as_secs_f64();
    if failed > 0 {
        return Err(Failure::Setup(format!(
            "{failed} of {} listings of the hub's vault failed",
            done + failed
        )));
    }
    Ok(UnderCalls {
        callers: callers.len(),
        calls_per_s: done as f64 / wall,
        core_share: calls_cpu.map(|cpu| cpu.as_secs_f64() / wall),
        resident: memory::resident(pid).map(|(now, _)| now),
    })
}
