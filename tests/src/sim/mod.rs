//! A deterministic simulation of several whole gateways (issue 10): the real components, the
//! owner executor's own steps on a real SQLite file, real QUIC with real TLS, joined by turmoil's
//! simulated network in virtual time, under a random schedule of faults drawn from a seed.
//!
//! Three gateways (`g1`, `g2`, `g3`) each own a vault (`v1`, `v2`, `v3`) and replicate the next
//! one's; each reaches each other by two routes (`lan`, `tailnet`; see [`net`]). On each, two
//! apps write (puts with and without compare-and-swap, deletes) and read any vault, recording
//! what they asked and were told in a [`History`]. A schedule of faults runs meanwhile: a route
//! cut, a route slowed (which also reorders), a host partitioned from the others, loss on a
//! link, a host's links held (its messages wait: what a frozen process looks like from outside),
//! a host crashed and restarted (keeping its database). Then everything heals, every write whose
//! outcome was unknown (or never heard, because the app's host crashed) is settled by its
//! request id, the replicas catch up, and [`crate::history::check`] judges it all against the
//! owners' and replicas' databases.
//!
//! Each host's gateway runs with `Blocking::Inline` (the executor and the call log are tasks,
//! reads run inline), so nothing escapes the single thread turmoil runs everything on; its
//! clock is tokio's (paused, moved by turmoil), and its wall clock starts at a fixed epoch.
//! Everything random is drawn from the seed: the schedule, the apps' choices and request ids,
//! turmoil's latencies and loss, the node keys, and QUIC's own randomness
//! (`TransportTuning::rng_seed`); every `select!` in Ferry is `biased`, and no map whose order
//! reaches the wire is a `HashMap`. So a seed replays exactly (`a_seed_replays_exactly`), and a
//! failing run prints its own schedule and history. Nothing here reads a real clock but
//! `wall_clock`, for the run's own cost: the library allows it, this module denies it again.
//!
//! Faults overlap; each thing a fault holds (a route's cut, a pair's partition, a host's crash)
//! is undone only when the last fault holding it ends (`Holds`). What the simulation cannot
//! see: a crashed host's files live on, every write already on tmpfs, so "answered before the
//! fsync" is left to the executor's crash-point and strace tests.

#![deny(clippy::disallowed_methods)]

pub mod net;

use ferry_names::Label;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ferry_core::bugs::Bug;
use ferry_gateway::config::{CapacityConfig, Config};
use ferry_gateway::env::{Blocking, Env};
use ferry_gateway::gateway::{Gateway, Parts};
use ferry_gateway::home::Home;
use ferry_gateway::network::book::PeerBook;
use ferry_gateway::reads::RecordRead;
use ferry_gateway::settlement::SettleError;
use ferry_peer::clock::TokioClock;
use ferry_peer::outcome::WriteOutcome;
use ferry_peer::probe::NoProbe;
use ferry_peer::routes::{Route, RouteKind};
use ferry_peer::transport::{PeerEndpoint, TransportTuning};
use ferry_peer::wire::{CallState, RequestId, WriteAnswer, WriteVerb};
use ferry_ticket::NodeKey;

use crate::history::{
    self, Effect, History, JournalState, OwnerState, Read, Records, ReplicaState, Write, WriteFate,
};
use ferry_core::rng::Rng;
use ferry_harness::vault_revision;
use net::{Links, SimSocket, BASE_PORT};

/// The gateways.
pub const HOSTS: [&str; 3] = ["g1", "g2", "g3"];
/// Apps per gateway.
const APPS: usize = 2;
/// Keys per vault: few, so writes meet each other (conflicts, deletes of what another wrote).
const KEYS: u64 = 4;
/// The wall clock every simulated host starts from (2026-01-01).
const EPOCH_MS: u64 = 1_767_225_600_000;
/// A write's timeout is drawn between these (milliseconds): impatient apps meet faults that
/// outlast them, and their writes end `outcome_unknown`, to be settled.
const WRITE_TIMEOUT_MS: (u64, u64) = (400, 4000);
/// A read's timeout.
const READ_TIMEOUT: Duration = Duration::from_secs(3);
/// How long, in simulated time, settling and the replicas' catch-up may take after the heal.
const SETTLE_BOUND: Duration = Duration::from_secs(60);

/// One run's settings.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    /// How long the apps run (simulated time) while faults happen.
    pub workload: Duration,
    /// A known-wrong behaviour to switch on (the checker must catch it).
    pub bug: Option<Bug>,
    /// Where the hosts' state directories go (one per run beneath it).
    pub scratch: PathBuf,
}

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub schedule: Vec<String>,
    pub history: History,
    pub violations: Vec<history::Violation>,
    /// Writes by how their apps were told, reads answered and unavailable.
    pub counts: BTreeMap<String, usize>,
    pub simulated: Duration,
    pub wall: Duration,
}

impl Report {
    /// The schedule and the history, for a failing seed.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "seed {}: {} violations\nschedule:\n",
            self.seed,
            self.violations.len()
        );
        for line in &self.schedule {
            text.push_str(&format!("  {line}\n"));
        }
        text.push_str("violations:\n");
        for violation in &self.violations {
            text.push_str(&format!("  {violation}\n"));
        }
        text.push_str("history (writes):\n");
        for write in &self.history.writes {
            text.push_str(&format!(
                "  {:>6} ms {} {}#{} {} {}/{} {}: told {:?}, settled {:?}\n",
                write.at_ms,
                write.host,
                write.app,
                write.incarnation,
                write.request_id,
                write.vault,
                write.key,
                write.what,
                write.told,
                write.settled
            ));
        }
        text.push_str("history (reads):\n");
        for read in &self.history.reads {
            text.push_str(&format!(
                "  {:>6} ms {} {}#{} {}/{}: {:?}\n",
                read.at_ms,
                read.host,
                read.app,
                read.incarnation,
                read.vault,
                read.key,
                read.answer
            ));
        }
        text
    }
}

/// Where the run stands, for every host's apps and settler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Workload,
    Settle,
}

/// What the hosts and the driver share (all on one thread; the locks are for the types).
#[derive(Debug)]
struct Shared {
    seed: u64,
    phase: Mutex<Phase>,
    history: Mutex<History>,
    links: Arc<Links>,
    keys: Vec<NodeKey>,
    dirs: Vec<PathBuf>,
    gateways: Mutex<HashMap<usize, Weak<Gateway>>>,
    incarnations: Mutex<Vec<u32>>,
    /// Hosts whose settler found nothing left to settle, this incarnation.
    settled: Mutex<Vec<bool>>,
    setup_done: Vec<AtomicBool>,
}

impl Shared {
    fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn history(&self) -> std::sync::MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A UUIDv7 for `unix_ms`, its random bits from `rng`.
fn request_id(unix_ms: u64, rng: &mut Rng) -> RequestId {
    let random = rng.next_u64().to_be_bytes();
    let more = rng.next_u64().to_be_bytes();
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&unix_ms.to_be_bytes()[2..]);
    bytes[6] = 0x70 | (random[0] & 0x0f);
    bytes[7] = random[1];
    bytes[8] = 0x80 | (random[2] & 0x3f);
    bytes[9..16].copy_from_slice(&more[..7]);
    RequestId::from_bytes(bytes)
}

/// One fault, as the schedule draws it.
#[derive(Debug, Clone)]
enum Fault {
    CutRoute {
        a: usize,
        b: usize,
        route: u8,
    },
    SlowRoute {
        a: usize,
        b: usize,
        route: u8,
        delay: Duration,
    },
    Partition {
        host: usize,
    },
    Loss {
        a: usize,
        b: usize,
        rate: f64,
    },
    Hold {
        host: usize,
    },
    Crash {
        host: usize,
    },
}

/// A fault and when it starts and ends (simulated milliseconds).
#[derive(Debug, Clone)]
struct Scheduled {
    start_ms: u64,
    end_ms: u64,
    fault: Fault,
}

fn draw_schedule(seed: u64, workload: Duration) -> Vec<Scheduled> {
    let mut rng = Rng::new(seed ^ 0x5CED);
    let mut schedule = Vec::new();
    let mut at = 300 + rng.below(300);
    let end = workload.as_millis() as u64;
    while at < end {
        let a = rng.below(3) as usize;
        let b = (a + 1 + rng.below(2) as usize) % 3;
        let route = rng.below(2) as u8;
        let lasts = rng.millis(200, 3500).as_millis() as u64;
        let fault = match rng.below(10) {
            0..=2 => Fault::CutRoute { a, b, route },
            3 => Fault::SlowRoute {
                a,
                b,
                route,
                delay: rng.millis(500, 4000),
            },
            4 | 5 => Fault::Partition { host: a },
            6 => Fault::Loss {
                a,
                b,
                rate: 0.01 + rng.below(30) as f64 / 100.0,
            },
            7 => Fault::Hold { host: a },
            _ => Fault::Crash { host: a },
        };
        schedule.push(Scheduled {
            start_ms: at,
            end_ms: (at + lasts).min(end),
            fault,
        });
        at += 200 + rng.below(900);
    }
    schedule
}

/// Runs one seed; the report says what happened and what the checker found.
pub fn run(options: &Options) -> Result<Report, String> {
    ferry_core::bugs::inject(options.bug);
    let result = run_inner(options);
    ferry_core::bugs::inject(None);
    result
}

/// The real clock, for what a run costs in wall time ([`Report`]'s `wall`); the hosts read
/// turmoil's.
#[allow(clippy::disallowed_methods)]
fn wall_clock() -> Instant {
    Instant::now()
}

fn run_inner(options: &Options) -> Result<Report, String> {
    let wall = wall_clock();
    let scratch = tempfile::Builder::new()
        .prefix(&format!("sim-{}-", options.seed))
        .tempdir_in(&options.scratch)
        .map_err(|err| format!("scratch directory: {err}"))?;
    let keys: Vec<NodeKey> = (0..HOSTS.len())
        .map(|i| {
            let mut seed = [0u8; 32];
            seed[..8].copy_from_slice(&options.seed.to_le_bytes());
            seed[8] = i as u8 + 1;
            NodeKey::from_secret_bytes(seed)
        })
        .collect();
    let dirs: Vec<PathBuf> = HOSTS.iter().map(|h| scratch.path().join(h)).collect();
    for dir in &dirs {
        std::fs::create_dir_all(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    }
    let shared = Arc::new(Shared {
        seed: options.seed,
        phase: Mutex::new(Phase::Workload),
        history: Mutex::new(History::default()),
        links: Arc::new(Links::default()),
        keys,
        dirs,
        gateways: Mutex::new(HashMap::new()),
        incarnations: Mutex::new(vec![0; HOSTS.len()]),
        settled: Mutex::new(vec![false; HOSTS.len()]),
        setup_done: HOSTS.iter().map(|_| AtomicBool::new(false)).collect(),
    });
    let mut sim = turmoil::Builder::new()
        .rng_seed(options.seed)
        .epoch(std::time::UNIX_EPOCH + Duration::from_millis(EPOCH_MS))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_micros(200))
        .max_message_latency(Duration::from_millis(3))
        .udp_capacity(4096)
        .simulation_duration(options.workload + SETTLE_BOUND + Duration::from_secs(30))
        .build();
    for (i, host) in HOSTS.iter().enumerate() {
        let shared = shared.clone();
        sim.host(*host, move || host_main(shared.clone(), i));
    }
    let schedule = draw_schedule(options.seed, options.workload);
    let mut described: Vec<String> = schedule
        .iter()
        .map(|s| format!("{:>6}..{:>6} ms: {:?}", s.start_ms, s.end_ms, s.fault))
        .collect();
    let mut active: Vec<usize> = Vec::new();
    let mut holds = Holds::default();
    let mut readers = Vec::new();
    let mut next = 0;
    let workload_ms = options.workload.as_millis() as u64;
    let mut healed_at: Option<u64> = None;
    loop {
        let now_ms = sim.elapsed().as_millis() as u64;
        // Start the faults that are due, end those whose time is over.
        while next < schedule.len() && schedule[next].start_ms <= now_ms {
            apply(&mut sim, &shared, &mut holds, &schedule[next].fault, true);
            active.push(next);
            next += 1;
        }
        active.retain(|&i| {
            if schedule[i].end_ms <= now_ms {
                apply(&mut sim, &shared, &mut holds, &schedule[i].fault, false);
                false
            } else {
                true
            }
        });
        if healed_at.is_none() && now_ms >= workload_ms {
            for i in active.drain(..) {
                apply(&mut sim, &shared, &mut holds, &schedule[i].fault, false);
            }
            heal(&mut sim, &shared);
            *shared.phase.lock().unwrap_or_else(|p| p.into_inner()) = Phase::Settle;
            described.push(format!("{now_ms:>6} ms: everything healed; settling"));
            healed_at = Some(now_ms);
        }
        if let Some(healed) = healed_at {
            if now_ms.is_multiple_of(100)
                && all_settled(&shared)
                && replicas_caught_up(&shared, &mut readers)
            {
                described.push(format!("{now_ms:>6} ms: settled and caught up"));
                break;
            }
            if now_ms - healed > SETTLE_BOUND.as_millis() as u64 {
                described.push(format!(
                    "{now_ms:>6} ms: gave up waiting to settle and catch up"
                ));
                break;
            }
        }
        sim.step()
            .map_err(|err| format!("seed {}: {err}", options.seed))?;
    }
    let simulated = sim.elapsed();
    let history = shared.history().clone();
    let (owners, replicas) = read_stores(&shared)?;
    drop(sim);
    let violations = history::check(&history, &owners, &replicas);
    if std::env::var("FERRY_SIM_DEBUG").is_ok() {
        for (vault, owner) in &owners {
            let done = owner
                .journal
                .values()
                .filter(|s| matches!(s, JournalState::Done(_)))
                .count();
            eprintln!(
                "{vault}: revision {}, {} journal rows, {done} done",
                owner.revision,
                owner.journal.len()
            );
        }
    }
    let mut counts = BTreeMap::new();
    for write in &history.writes {
        let name = match &write.told {
            None => "write: never heard (host crashed)",
            Some(WriteFate::Done(_)) => "write: done",
            Some(WriteFate::Refused(code)) => {
                *counts.entry(format!("write: refused {code}")).or_insert(0) += 1;
                continue;
            }
            Some(WriteFate::NothingSent(_)) => "write: nothing sent",
            Some(WriteFate::NotCarriedOut(_)) => "write: not carried out",
            Some(WriteFate::Unknown) => "write: outcome unknown",
        };
        *counts.entry(name.to_string()).or_insert(0) += 1;
    }
    for read in &history.reads {
        let name = match &read.answer {
            Some((_, _, true)) => "read: stale",
            Some(_) => "read: answered",
            None if read.not_found_at.is_some() => "read: not found",
            None => "read: unavailable",
        };
        *counts.entry(name.to_string()).or_insert(0) += 1;
    }
    Ok(Report {
        seed: options.seed,
        schedule: described,
        history,
        violations,
        counts,
        simulated,
        wall: wall_clock().saturating_duration_since(wall),
    })
}

fn ip(i: usize) -> IpAddr {
    turmoil::lookup(HOSTS[i])
}

/// How many scheduled faults hold each thing (a route's cut, a pair's partition, a host's
/// crash...) now. Faults overlap; one ending must not end another still running on the same
/// link, so a thing is undone only when the last fault holding it ends.
#[derive(Debug, Default)]
struct Holds(HashMap<String, u32>);

impl Holds {
    /// Takes a hold on `thing`.
    fn take(&mut self, thing: String) {
        *self.0.entry(thing).or_insert(0) += 1;
    }

    /// Gives a hold on `thing` back; whether it was the last.
    fn give_back(&mut self, thing: String) -> bool {
        match self.0.get_mut(&thing) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            _ => {
                self.0.remove(&thing);
                true
            }
        }
    }
}

/// The unordered pair of hosts `a` and `b`, as a key.
fn pair(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}

/// Starts (`on`) or ends a fault; a thing another running fault still holds stays as it is.
fn apply(sim: &mut turmoil::Sim<'_>, shared: &Shared, holds: &mut Holds, fault: &Fault, on: bool) {
    // Takes or gives back the hold on `thing`; whether to act (always to start, only for the
    // last hold to end).
    let mut act = |thing: String| {
        if on {
            holds.take(thing);
            true
        } else {
            holds.give_back(thing)
        }
    };
    match *fault {
        Fault::CutRoute { a, b, route } => {
            if act(format!("cut {:?} {route}", pair(a, b))) {
                let (a, b) = (sim.lookup(HOSTS[a]), sim.lookup(HOSTS[b]));
                if on {
                    shared.links.cut(a, b, route);
                } else {
                    shared.links.uncut(a, b, route);
                }
            }
        }
        Fault::SlowRoute { a, b, route, delay } => {
            if act(format!("slow {:?} {route}", pair(a, b))) {
                let (a, b) = (sim.lookup(HOSTS[a]), sim.lookup(HOSTS[b]));
                if on {
                    shared.links.slow(a, b, route, delay);
                } else {
                    shared.links.unslow(a, b, route);
                }
            }
        }
        Fault::Partition { host } => {
            for (other, name) in others_indexed(host) {
                if act(format!("partition {:?}", pair(host, other))) {
                    if on {
                        sim.partition(HOSTS[host], name);
                    } else {
                        sim.repair(HOSTS[host], name);
                    }
                }
            }
        }
        Fault::Loss { a, b, rate } => {
            if act(format!("loss {:?}", pair(a, b))) {
                sim.set_link_fail_rate(HOSTS[a], HOSTS[b], if on { rate } else { 0.0 });
            }
        }
        Fault::Hold { host } => {
            for (other, name) in others_indexed(host) {
                if act(format!("hold {:?}", pair(host, other))) {
                    if on {
                        sim.hold(HOSTS[host], name);
                    } else {
                        sim.release(HOSTS[host], name);
                    }
                }
            }
        }
        Fault::Crash { host } => {
            if act(format!("crash {host}")) {
                if on {
                    sim.crash(HOSTS[host]);
                } else {
                    sim.bounce(HOSTS[host]);
                }
            }
        }
    }
}

/// Every host but `host`, with its index.
fn others_indexed(host: usize) -> impl Iterator<Item = (usize, &'static str)> {
    HOSTS
        .iter()
        .enumerate()
        .filter(move |(i, _)| *i != host)
        .map(|(i, name)| (i, *name))
}

/// Every host but `host`.
fn others(host: usize) -> impl Iterator<Item = &'static str> {
    others_indexed(host).map(|(_, name)| name)
}

/// Ends every fault: routes, partitions, holds, loss; crashed hosts start again.
fn heal(sim: &mut turmoil::Sim<'_>, shared: &Shared) {
    shared.links.heal_all();
    for (a, host) in HOSTS.iter().enumerate() {
        for other in others(a) {
            sim.repair(*host, other);
            sim.release(*host, other);
            sim.set_link_fail_rate(*host, other, 0.0);
        }
        if !sim.is_host_running(*host) {
            sim.bounce(*host);
        }
    }
}

fn all_settled(shared: &Shared) -> bool {
    shared
        .settled
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .all(|done| *done)
}

/// Which vault each host owns, and which it replicates.
fn owned(i: usize) -> String {
    format!("v{}", i + 1)
}

/// A name the simulation made up (`owned`, `app{n}`), as the gateway's type.
fn checked<N: TryFrom<String, Error = ferry_names::NameError>>(text: &str) -> N {
    N::try_from(text.to_string())
        .unwrap_or_else(|err| panic!("the simulation's name {text:?}: {err}"))
}

fn replicated(i: usize) -> (String, usize) {
    let owner = (i + 1) % HOSTS.len();
    (owned(owner), owner)
}

fn db_path(shared: &Shared, i: usize) -> PathBuf {
    shared.dirs[i].join("ferry.db")
}

fn open(path: &Path) -> Result<rusqlite::Connection, String> {
    rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|err| format!("{}: {err}", path.display()))
}

/// Whether every replica holds its owner's revision, read through `readers` (one read-only
/// connection per host's database, opened on first use and kept: opening one reads the
/// schema, which every 100 ms of a long settle adds up).
fn replicas_caught_up(shared: &Shared, readers: &mut Vec<rusqlite::Connection>) -> bool {
    if readers.is_empty() {
        match (0..HOSTS.len())
            .map(|i| open(&db_path(shared, i)))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(opened) => *readers = opened,
            Err(_) => return false,
        }
    }
    (0..HOSTS.len()).all(|i| {
        let (vault, owner) = replicated(i);
        vault_revision(&readers[i], &vault) == vault_revision(&readers[owner], &vault)
    })
}

fn records(conn: &rusqlite::Connection, vault: &str) -> Result<Records, String> {
    let mut stmt = conn
        .prepare("SELECT key, revision, value FROM records WHERE vault = ?1")
        .map_err(|err| err.to_string())?;
    let rows = stmt
        .query_map([vault], |row| {
            Ok((
                row.get::<_, String>(0)?,
                (
                    row.get::<_, i64>(1)? as u64,
                    row.get::<_, Option<Vec<u8>>>(2)?,
                ),
            ))
        })
        .map_err(|err| err.to_string())?;
    rows.collect::<Result<_, _>>()
        .map_err(|err| err.to_string())
}

/// Each vault's owner's state.
type Owners = BTreeMap<String, OwnerState>;
/// Each vault's replicas' states.
type Replicas = BTreeMap<String, Vec<ReplicaState>>;

/// What every owner and replica holds, read from their databases.
fn read_stores(shared: &Shared) -> Result<(Owners, Replicas), String> {
    let mut owners = BTreeMap::new();
    let mut replicas: Replicas = BTreeMap::new();
    for (i, host) in HOSTS.iter().enumerate() {
        let conn = open(&db_path(shared, i))?;
        let vault = owned(i);
        let mut journal = HashMap::new();
        let mut stmt = conn
            .prepare("SELECT caller, request_id, state, answer FROM journal")
            .map_err(|err| err.to_string())?;
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, Vec<u8>>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, Option<String>>(3)?,
                ))
            })
            .map_err(|err| err.to_string())?;
        for row in rows {
            let (caller, id, state, answer) = row.map_err(|err| err.to_string())?;
            let id: [u8; 16] = id
                .try_into()
                .map_err(|_| "a journal request id is not 16 bytes".to_string())?;
            let entry = match state.as_str() {
                "running" => JournalState::Running,
                "not_carried_out" => JournalState::NotCarriedOut,
                _ => match answer
                    .as_deref()
                    .and_then(|a| serde_json::from_str::<WriteAnswer>(a).ok())
                {
                    Some(WriteAnswer::Done { revision }) => JournalState::Done(revision),
                    Some(WriteAnswer::NotCarriedOut { .. }) => JournalState::NotCarriedOut,
                    _ => JournalState::Refused,
                },
            };
            journal.insert((caller, RequestId::from_bytes(id).to_string()), entry);
        }
        owners.insert(
            vault.clone(),
            OwnerState {
                journal,
                revision: vault_revision(&conn, &vault),
                records: records(&conn, &vault)?,
            },
        );
        let (replica_of, _) = replicated(i);
        replicas
            .entry(replica_of.clone())
            .or_default()
            .push(ReplicaState {
                host: host.to_string(),
                cursor: vault_revision(&conn, &replica_of),
                records: records(&conn, &replica_of)?,
            });
    }
    Ok((owners, replicas))
}

/// One host's software: its gateway, its apps, its settler. Runs again after every restart,
/// on the same database.
async fn host_main(shared: Arc<Shared>, i: usize) -> turmoil::Result {
    let incarnation = {
        let mut incarnations = shared
            .incarnations
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        incarnations[i] += 1;
        incarnations[i]
    };
    shared.settled.lock().unwrap_or_else(|p| p.into_inner())[i] = false;
    let gateway = start_gateway(&shared, i, incarnation).await?;
    shared
        .gateways
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(i, Arc::downgrade(&gateway));
    if !shared.setup_done[i].load(Ordering::SeqCst) {
        set_up(&gateway, &shared, i).await?;
        shared.setup_done[i].store(true, Ordering::SeqCst);
    }
    for app in 0..APPS {
        tokio::spawn(app_main(
            gateway.clone(),
            shared.clone(),
            i,
            app,
            incarnation,
        ));
    }
    settle_main(gateway, shared, i).await;
    std::future::pending::<()>().await;
    Ok(())
}

/// The seed of host `i`'s QUIC randomness in one incarnation.
fn quic_seed(seed: u64, i: usize, incarnation: u32) -> [u8; 32] {
    let mut rng = Rng::new(seed ^ ((i as u64 + 1) << 48) ^ (u64::from(incarnation) << 20));
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    bytes
}

async fn start_gateway(
    shared: &Arc<Shared>,
    i: usize,
    incarnation: u32,
) -> Result<Arc<Gateway>, Box<dyn std::error::Error>> {
    let socket = SimSocket::bind(ip(i), shared.links.clone()).await?;
    let book = Arc::new(PeerBook::default());
    let key = shared.keys[i].clone();
    let endpoint = PeerEndpoint::with_socket(
        Arc::new(socket),
        Arc::new(quinn::TokioRuntime),
        key.clone(),
        book.clone(),
        TransportTuning {
            rng_seed: Some(quic_seed(shared.seed, i, incarnation)),
            ..TransportTuning::default()
        },
    )?;
    let dir = shared.dirs[i].clone();
    let config = Config {
        mdns: false,
        label: Some(Label::from_static(HOSTS[i])),
        // A tight budget, so the owners refuse busy (an app's next write while its last one,
        // which outlived the app's patience, still runs) and rate_limited, and the checker
        // sees that none of those ever ran.
        capacity: CapacityConfig {
            per_caller: 1,
            rate_per_minute: 600,
            rate_burst: 8,
            ..CapacityConfig::default()
        },
        ..Config::default()
    };
    let elapsed = turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64;
    let env = Env {
        clock: Arc::new(TokioClock::virtual_from(EPOCH_MS + elapsed)),
        blocking: Blocking::Inline,
        probe: Arc::new(NoProbe),
    };
    let gateway = Gateway::start(
        Parts {
            db_path: dir.join("ferry.db"),
            slots_path: dir.join("calls.slots"),
            config,
            key,
            label: Label::from_static(HOSTS[i]),
            home: Home::locate(Some(dir))?,
            token: "sim".into(),
            endpoint,
            book,
        },
        env,
    )?;
    Ok(gateway)
}

/// First start: trust the others (both routes each), create the owned vault, follow one.
async fn set_up(
    gateway: &Arc<Gateway>,
    shared: &Arc<Shared>,
    i: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    for (j, host) in HOSTS.iter().enumerate() {
        if j == i {
            continue;
        }
        let peer_ip = ip(j);
        let routes = vec![
            Route {
                kind: RouteKind::Lan,
                addr: SocketAddr::new(peer_ip, BASE_PORT),
            },
            Route {
                kind: RouteKind::Tailnet,
                addr: SocketAddr::new(peer_ip, BASE_PORT + 1),
            },
        ];
        gateway
            .admin()
            .trust(Label::from_static(host), shared.keys[j].node_id(), routes)
            .await?;
    }
    if gateway.vaults().get(&owned(i)).is_none() {
        gateway.admin().create_vault(checked(&owned(i))).await?;
    }
    // The replica syncs once its owner has created the vault (it retries until then).
    let (vault, owner) = replicated(i);
    if gateway.vaults().get(&vault).is_none() {
        gateway
            .admin()
            .follow(checked(&vault), Label::from_static(HOSTS[owner]))
            .await?;
    }
    Ok(())
}

/// An app: writes and reads until the workload ends.
/// One write in this many is not awaited before the app's next call.
const OVERLAP_ONE_IN: u64 = 6;

async fn app_main(
    gateway: Arc<Gateway>,
    shared: Arc<Shared>,
    i: usize,
    app: usize,
    incarnation: u32,
) {
    let name = format!("app{app}");
    let mut rng =
        Rng::new(shared.seed ^ ((i as u64) << 40) ^ ((app as u64) << 32) ^ u64::from(incarnation));
    let mut known: HashMap<(String, String), u64> = HashMap::new();
    while shared.phase() == Phase::Workload {
        tokio::time::sleep(rng.millis(5, 60)).await;
        if shared.phase() != Phase::Workload {
            break;
        }
        let vault = owned(rng.below(HOSTS.len() as u64) as usize);
        let key = format!("k{}", rng.below(KEYS));
        let now_ms = gateway.clock().unix_ms();
        let at_ms = now_ms - EPOCH_MS;
        let roll = rng.below(100);
        if roll < 30 {
            let deadline = gateway.clock().now() + READ_TIMEOUT;
            let answer = match gateway
                .reads()
                .read_record(&checked(&name), &checked(&vault), &key, deadline)
                .await
            {
                Ok(RecordRead::Found(found)) => {
                    known.insert((vault.clone(), key.clone()), found.revision);
                    Some((
                        found.revision,
                        found.source.header().into_owned(),
                        found.stale,
                    ))
                }
                // "Not found" as of a vault revision: the checker holds it to what the app saw.
                Ok(RecordRead::NotFound { vault_revision, .. }) => {
                    shared.history().reads.push(Read {
                        host: HOSTS[i].to_string(),
                        app: name.clone(),
                        incarnation,
                        vault,
                        key,
                        answer: None,
                        not_found_at: Some(vault_revision),
                        at_ms,
                    });
                    continue;
                }
                Err(_) => None,
            };
            shared.history().reads.push(Read {
                host: HOSTS[i].to_string(),
                app: name.clone(),
                incarnation,
                vault,
                key,
                answer,
                not_found_at: None,
                at_ms,
            });
            continue;
        }
        let id = request_id(now_ms, &mut rng);
        let cas = rng.one_in(3).then(|| {
            known
                .get(&(vault.clone(), key.clone()))
                .copied()
                .unwrap_or(0)
        });
        let (verb, what) = if roll < 85 {
            (
                WriteVerb::Put {
                    key: key.clone(),
                    value: id.to_string().into_bytes(),
                    if_revision: cas,
                },
                format!("put{}", cas.map(|c| format!(" if {c}")).unwrap_or_default()),
            )
        } else {
            (
                WriteVerb::Delete {
                    key: key.clone(),
                    if_revision: cas,
                },
                format!(
                    "delete{}",
                    cas.map(|c| format!(" if {c}")).unwrap_or_default()
                ),
            )
        };
        let index = {
            let mut history = shared.history();
            history.writes.push(Write {
                request_id: id.to_string(),
                host: HOSTS[i].to_string(),
                caller: shared.keys[i].node_id().to_string(),
                app: name.clone(),
                incarnation,
                vault: vault.clone(),
                key: key.clone(),
                what,
                told: None,
                settled: None,
                at_ms,
                told_ms: None,
                answered_ms: None,
                effect: Some(match &verb {
                    WriteVerb::Put { value, .. } => Effect::Put(value.clone()),
                    WriteVerb::Delete { .. } => Effect::Delete,
                }),
                if_match: cas,
            });
            history.writes.len() - 1
        };
        let deadline = gateway.clock().now() + rng.millis(WRITE_TIMEOUT_MS.0, WRITE_TIMEOUT_MS.1);
        // Now and then the app does not wait for the answer before its next call, as an app
        // with calls in parallel would: so writes of one app overlap at the owner, and its
        // per-caller cap refuses some (`busy`), which must then never run.
        let overlapped = rng.one_in(OVERLAP_ONE_IN);
        let write = {
            let (gateway, shared, name, vault) =
                (gateway.clone(), shared.clone(), name.clone(), vault.clone());
            async move {
                let written = gateway
                    .writes()
                    .spawn_write(
                        checked(&name),
                        checked(&vault),
                        verb,
                        id,
                        ferry_peer::wire::Priority::Interactive,
                        deadline,
                    )
                    .await;
                let fate = match written {
                    Ok(Ok((outcome, _))) => fate_of(outcome),
                    Ok(Err(refusal)) => WriteFate::NothingSent(refusal.detail),
                    Err(_) => WriteFate::Unknown,
                };
                let told_ms = gateway.clock().unix_ms() - EPOCH_MS;
                let mut history = shared.history();
                history.writes[index].told = Some(fate.clone());
                if overlapped {
                    history.writes[index].told_ms = Some(told_ms);
                }
                fate
            }
        };
        if overlapped {
            tokio::spawn(write);
            continue;
        }
        if let WriteFate::Done(revision) = write.await {
            known.insert((vault, key), revision);
        }
    }
}

fn fate_of(outcome: WriteOutcome) -> WriteFate {
    match outcome {
        WriteOutcome::Answered(WriteAnswer::Done { revision }) => WriteFate::Done(revision),
        WriteOutcome::Answered(WriteAnswer::Refused(refusal)) => {
            WriteFate::Refused(refusal.code.as_str().to_string())
        }
        WriteOutcome::Answered(WriteAnswer::NotCarriedOut { reason })
        | WriteOutcome::NotCarriedOut { reason } => {
            WriteFate::NotCarriedOut(reason.as_str().into())
        }
        WriteOutcome::NotSent { reason, .. } => WriteFate::NothingSent(reason.as_str().into()),
        WriteOutcome::Unknown { .. } => WriteFate::Unknown,
    }
}

/// Once everything is healed: settles every write of this host whose app does not know how it
/// ended, by its request id, naming the vault.
async fn settle_main(gateway: Arc<Gateway>, shared: Arc<Shared>, i: usize) {
    loop {
        while shared.phase() != Phase::Settle {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let open: Vec<(usize, String, String)> = shared
            .history()
            .writes
            .iter()
            .enumerate()
            .filter(|(_, w)| w.host == HOSTS[i] && w.fate().is_none())
            .map(|(n, w)| (n, w.request_id.clone(), w.vault.clone()))
            .collect();
        if open.is_empty() {
            shared.settled.lock().unwrap_or_else(|p| p.into_inner())[i] = true;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        for (n, id, vault) in open {
            let Ok(request_id) = RequestId::parse(&id) else {
                continue;
            };
            let settled = gateway
                .settlement()
                .settle(request_id, Some(checked(&vault)), Duration::from_secs(1))
                .await;
            let fate = match settled {
                Ok((CallState::Answered(answer), _)) => Some(match answer {
                    WriteAnswer::Done { revision } => WriteFate::Done(revision),
                    WriteAnswer::Refused(refusal) => {
                        WriteFate::Refused(refusal.code.as_str().into())
                    }
                    WriteAnswer::NotCarriedOut { reason } => {
                        WriteFate::NotCarriedOut(reason.as_str().into())
                    }
                }),
                Ok((CallState::NotCarriedOut { reason }, _)) => {
                    Some(WriteFate::NotCarriedOut(reason.as_str().into()))
                }
                Ok((
                    CallState::Running { .. }
                    | CallState::Forgotten { .. }
                    | CallState::Unrecognized { .. },
                    _,
                ))
                | Err(SettleError::Unavailable { .. } | SettleError::Forgotten { .. }) => None,
                Err(SettleError::UnknownCall { detail }) => Some(WriteFate::NothingSent(detail)),
            };
            if let Some(fate) = fate {
                shared.history().writes[n].settled = Some(fate);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
