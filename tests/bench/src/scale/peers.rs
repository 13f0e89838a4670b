//! One hub trusting many peers: its idle CPU and memory and the p50 of a write through it, with
//! a few peers and then with many. Every peer is a real `ferry serve` on loopback that trusts
//! the hub back, so each route heartbeats both ways; the writes go from the hub's API to a
//! vault the first peer owns, so the hub is the calling gateway.

use std::path::Path;
use std::time::{Duration, Instant};

use super::report::{AtSize, ManyPeers};
use super::{Plan, APP};
use crate::cpu;
use crate::ferry_procs::{self, Gateway, ProcError, PATH_OWNER_CONFIG};
use crate::load::{self, request_once, Keys, Target, Verb};
use crate::memory;
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

/// The many-peers part, or why it could not finish.
pub fn measure(binary: &Path, plan: &Plan) -> Result<ManyPeers, String> {
    run(binary, plan).map_err(|err| err.to_string())
}

fn run(binary: &Path, plan: &Plan) -> Result<ManyPeers, Failure> {
    crate::progress(&format!(
        "many peers: a hub and {} peers, then {}",
        plan.base_peers, plan.peers
    ));
    let hub = Gateway::start(binary, "hub")?;
    let mut peers = Vec::with_capacity(plan.peers);
    // The first peer owns the vault the hub writes to; the rules are sized not to bind on one
    // app's writes one at a time.
    add_peer(&hub, &mut peers, binary, Some(PATH_OWNER_CONFIG))?;
    peers[0].cli(&["vault", "create", VAULT])?;
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
    Proc(#[from] ProcError),
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
    let peer = Gateway::start_with_config(binary, &format!("p{:03}", peers.len()), config)?;
    hub.trust(&peer)?;
    peer.trust(hub)?;
    peers.push(peer);
    Ok(())
}

/// Waits (bounded) until the hub has an up route to every peer and can read the vault.
fn wait_ready(hub: &Gateway, peers: &[Gateway]) -> Result<(), Failure> {
    let started = Instant::now();
    loop {
        let routes = ferry_procs::routes_up(hub, peers);
        let read = request_once(
            hub.api,
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
        .pid()
        .ok_or_else(|| Failure::Setup("the hub is not running".into()))?;
    crate::progress(&format!("many peers: {} peers, idle", peers.len()));
    // Past the 50 ms heartbeats of a route just used (the last reads and writes), so the phase
    // sees what an idle hub spends: routes used lately at 1 s, the rest at 15 s.
    std::thread::sleep(plan.settle.max(ACTIVE_FOR + Duration::from_secs(1)));
    let (cpu_before, started) = (cpu::process_cpu(pid), Instant::now());
    std::thread::sleep(plan.idle_phase);
    let idle_core_share = cpu_before
        .zip(cpu::process_cpu(pid))
        .map(|(before, after)| {
            after.saturating_sub(before).as_secs_f64() / started.elapsed().as_secs_f64()
        });
    let idle_resident = memory::resident(pid).map(|(now, _)| now);

    crate::progress(&format!(
        "many peers: {} peers, writes through the hub",
        peers.len()
    ));
    let target = Target {
        api: hub.api,
        token: hub.token.clone(),
        app: APP.into(),
        vault: VAULT.into(),
    };
    let keys = Keys::new(format!("n{}/", peers.len()));
    let cpu_before = cpu::process_cpu(pid);
    let writes = load::sequential(
        &target,
        Verb::Write,
        &keys,
        WARMUP,
        plan.writes,
        WRITE_BOUND,
    )
    .map_err(|err| Failure::Setup(err.to_string()))?;
    // The warm-up's writes are in the CPU too, and so are the hub's heartbeats meanwhile
    // (with 100 peers, a few hundredths of its CPU per write).
    let write_cpu_us = cpu_before
        .zip(cpu::process_cpu(pid))
        .map(|(before, after)| {
            after.saturating_sub(before).as_secs_f64() * 1e6 / (WARMUP + writes.ok()).max(1) as f64
        });
    if writes.failures() > 0 || writes.ok() < plan.writes {
        return Err(Failure::Writes {
            done: writes.ok(),
            asked: plan.writes,
            first: writes.first_failure,
        });
    }
    let (busy_resident, peak_resident) = memory::resident(pid).unzip();
    Ok(AtSize {
        peers: peers.len(),
        idle_core_share,
        idle_resident,
        busy_resident,
        peak_resident,
        write_cpu_us,
        write: super::report::Latencies::of(&writes),
    })
}
