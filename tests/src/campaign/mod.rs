//! The fault campaign (issue 14): real `ferry serve` processes on five lab hosts (network
//! namespaces on a LAN and a tailnet), three vaults with different owners and replicas following
//! each, ten apps calling their own gateways' HTTP APIs, and a nemesis injecting faults drawn
//! from a seed, until the apps have made the operations asked for. Then it heals everything,
//! has every app settle what it does not know, waits for the replicas, and checks the whole
//! history against what the owners' and replicas' databases hold (`crate::history`).
//!
//! Run by `ferry-campaign` (`tests/src/bin/ferry-campaign.rs`) and, short, by the
//! `lab_campaign` test. The design, how to run it longer and the latest report are in
//! `docs/campaign.md`.

pub mod app;
pub mod nemesis;
pub mod report;

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use ferry_core::bugs::{Bug, BUG_VAR};
use serde_json::{json, Value};

use crate::history::{self, Effect, History, OwnerState, Read, ReplicaState, Write, WriteFate};
use crate::lab::{trust_all, Lab};
use crate::lab_app::now_ms;
use crate::owner_db::{journal, open_read_only, records, settled_fate, told_fate};
use ferry_harness::{sibling_binary, Gateway};
use ferry_harness::{vault_revision, wait_for, SIGCONT, SIGSTOP};
use nemesis::{Choice, Fault, Nemesis};
pub use report::Report;

/// Hosts in the lab.
pub const HOSTS: usize = 5;

/// The vaults: name, owner host, replica hosts.
pub const VAULTS: [(&str, usize, &[usize]); 3] = [
    ("v1", 1, &[2, 4]),
    ("v2", 2, &[3, 5]),
    ("v3", 3, &[1, 4, 5]),
];

/// Apps per host.
pub const APPS_PER_HOST: usize = 2;

/// The host of the stranger gateway of the `collide` fault, its QUIC port (beside that host's
/// own gateway) and label: it owns vaults named as the campaign's, and no app writes to it.
const STRANGER_HOST: usize = HOSTS;
const STRANGER_PORT: u16 = crate::lab::FERRY_PORT + 1;
const STRANGER: &str = "stranger";

/// How much older than an acknowledged write a read not marked stale may be: a local replica
/// answers while its last catch-up, dated from when it asked, is under 2 s old
/// (`replica_fresh_ms`); the cache's freshness (1 s) is inside it; the rest is margin.
pub const READ_FRESHNESS_MS: u64 = 5_000;

/// How long the replicas may take to reach their owners once the apps are done.
const CONVERGE_BOUND: Duration = Duration::from_secs(120);

/// How long the apps may take to settle and end once told to stop.
const APPS_END_BOUND: Duration = Duration::from_secs(900);

/// How long setting the lab up (routes, following) may take.
const SETUP_BOUND: Duration = Duration::from_secs(60);

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    /// Operations (writes and reads, all apps together) to make before healing.
    pub ops: u64,
    /// Faults to inject at least, whatever the operations.
    pub min_faults: u64,
    /// The fault kinds the nemesis may pick (empty: all).
    pub kinds: Vec<String>,
    /// A test-only bug to switch on in every gateway (see `ferry_core::bugs`).
    pub bug: Option<Bug>,
    /// Each app's pause between calls.
    pub pace: Duration,
    /// Where the apps' files go; a temporary directory when `None`.
    pub dir: Option<PathBuf>,
    /// Whether the lab may run beside other campaigns' labs of this process
    /// ([`Lab::new_beside_others`]): a campaign checks promises, not timings, so the tests run
    /// theirs at once; `ferry-campaign` runs alone.
    pub beside_others: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 1,
            ops: 5_000,
            min_faults: 20,
            kinds: Vec::new(),
            bug: None,
            pace: Duration::from_millis(5),
            dir: None,
            beside_others: false,
        }
    }
}

/// A fault as injected: its kind, what it was, and when it began and was healed.
#[derive(Debug, Clone)]
pub struct Injected {
    pub fault: Fault,
    pub at_ms: u64,
    pub healed_ms: u64,
}

/// An app as started.
struct AppProcess {
    host: usize,
    name: String,
    out: PathBuf,
    child: Child,
}

/// Whether an app's output line is an operation that reached its gateway (a write or a read;
/// not a settle query, and not a call that found no gateway running).
fn is_op(line: &str) -> bool {
    (line.contains("\"kind\":\"write\"") || line.contains("\"kind\":\"read\""))
        && !line.contains("\"code\":\"local_gateway_down\"")
}

/// Counts the operations in a growing app output file without reading it all again.
struct LineCounter {
    path: PathBuf,
    offset: u64,
    /// Operations counted so far ([`is_op`]).
    lines: u64,
}

impl LineCounter {
    fn count(&mut self) -> u64 {
        if let Ok(mut file) = std::fs::File::open(&self.path) {
            use std::io::Seek as _;
            if file.seek(std::io::SeekFrom::Start(self.offset)).is_ok() {
                let mut rest = Vec::new();
                if file.read_to_end(&mut rest).is_ok() {
                    // Whole lines only: a line being written is counted next time.
                    let whole = rest.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                    self.offset += whole as u64;
                    self.lines += String::from_utf8_lossy(&rest[..whole])
                        .lines()
                        .filter(|line| is_op(line))
                        .count() as u64;
                }
            }
        }
        self.lines
    }
}

/// Runs a campaign; `Err` when the lab cannot be built (not root: said on standard error).
pub fn run(options: &Options) -> Result<Report, String> {
    let started = Instant::now();
    let lab = if options.beside_others {
        Lab::new_beside_others(HOSTS)
    } else {
        Lab::new(HOSTS)
    };
    let Some(lab) = lab else {
        return Err("the campaign needs root, for the lab's network namespaces".into());
    };
    let temp = tempfile::Builder::new()
        .prefix("ferry-campaign-")
        .tempdir()
        .map_err(|err| format!("a temporary directory: {err}"))?;
    let dir = options
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    let app_exe = PathBuf::from(sibling_binary("ferry-lab-app", "FERRY_LAB_APP")?);
    eprintln!(
        "campaign: seed {}, {} operations, at least {} faults{}; files in {}",
        options.seed,
        options.ops,
        options.min_faults,
        options
            .bug
            .map(|b| format!(", bug {} switched on", b.name()))
            .unwrap_or_default(),
        dir.display()
    );
    let mut gateways = start_gateways(&lab, options.bug);
    let stranger = start_stranger(&lab, options.bug);
    let stop_file = dir.join("stop");
    let _ = std::fs::remove_file(&stop_file);
    let mut apps = start_apps(&lab, &gateways, &dir, &app_exe, &stop_file, options);
    let mut counters: Vec<LineCounter> = apps
        .iter()
        .map(|app| LineCounter {
            path: app.out.clone(),
            offset: 0,
            lines: 0,
        })
        .collect();
    let mut ops = || counters.iter_mut().map(LineCounter::count).sum::<u64>();

    // The nemesis, round after round, until enough operations and faults.
    let owners: Vec<usize> = VAULTS.iter().map(|(_, owner, _)| *owner).collect();
    let choice = Choice {
        kinds: options.kinds.clone(),
    };
    let mut nemesis = Nemesis::new(options.seed, HOSTS, &owners, choice);
    let mut injected: Vec<Injected> = Vec::new();
    let mut restarts: Vec<(usize, u64)> = Vec::new();
    let mut last_report = Instant::now();
    let run_bound = Duration::from_secs(600 + options.ops / 10);
    while ops() < options.ops || (injected.len() as u64) < options.min_faults {
        if started.elapsed() > run_bound {
            return Err(format!(
                "the apps made {} of {} operations in {run_bound:?}: too slow to finish",
                ops(),
                options.ops
            ));
        }
        check_apps_alive(&mut apps)?;
        let round = nemesis.next_round();
        let mut begun = Vec::new();
        for fault in &round.faults {
            let at_ms = now_ms();
            inject(&lab, &mut gateways, &stranger, fault);
            if matches!(fault, Fault::Kill { .. } | Fault::Stop { .. }) {
                // The old process is gone once `inject` returns (a kill reaps it, a stop waits
                // for its exit): calls before this were served by it.
                restarts.push((fault.hosts(HOSTS)[0], now_ms()));
            }
            begun.push((fault.clone(), at_ms));
        }
        std::thread::sleep(round.hold);
        for (fault, at_ms) in begun {
            heal(&lab, &mut gateways, &stranger, &fault);
            injected.push(Injected {
                fault,
                at_ms,
                healed_ms: now_ms(),
            });
        }
        std::thread::sleep(round.rest);
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "campaign: {} operations, {} faults, {:.0} s",
                ops(),
                injected.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    let healed_ms = now_ms();
    eprintln!(
        "campaign: healed after {} operations and {} faults; the apps settle",
        ops(),
        injected.len()
    );

    // Settle: every app settles what it does not know, then ends.
    std::fs::write(&stop_file, b"stop").map_err(|err| format!("the stop file: {err}"))?;
    let apps_started = Instant::now();
    for app in &mut apps {
        let status = wait_for(
            &format!("{} on h{} to settle and end", app.name, app.host),
            APPS_END_BOUND.saturating_sub(apps_started.elapsed()),
            || app.child.try_wait().ok().flatten(),
        );
        if !status.success() {
            return Err(format!(
                "{} on h{} ended with {status}; its log: {}",
                app.name,
                app.host,
                std::fs::read_to_string(app.out.with_extension("log")).unwrap_or_default()
            ));
        }
    }
    let apps_done_ms = now_ms();

    // The replicas reach their owners.
    let converge_started = Instant::now();
    let converged = converge(&gateways);
    let convergence_ms = converge_started.elapsed().as_millis() as u64;

    let events = read_events(&apps)?;
    let history = history_of(&events, &gateways, &restarts);
    let (mut owner_states, replica_states) = states(&gateways);
    // The stranger's vaults, keyed apart from the campaign's: nothing may have run there.
    let conn = db(&stranger);
    owner_states.insert(
        format!("{STRANGER}'s v1, v2 and v3"),
        OwnerState {
            journal: journal(&conn, STRANGER),
            revision: VAULTS
                .iter()
                .map(|(vault, _, _)| vault_revision(&conn, vault))
                .sum(),
            records: BTreeMap::new(),
        },
    );
    drop(conn);
    let mut violations: Vec<String> = history::check(&history, &owner_states, &replica_states)
        .into_iter()
        .map(|v| v.0)
        .collect();
    if let Err(lagging) = converged {
        violations.push(lagging);
    }
    for (host, app, events) in &events {
        if !events.iter().any(|e| e["kind"] == "end") {
            violations.push(format!("{app} on h{host} never ended"));
        }
    }
    let report = report::build(
        options,
        &events,
        &injected,
        violations,
        report::Timing {
            healed_ms,
            apps_done_ms,
            convergence_ms,
            elapsed: started.elapsed(),
        },
    );
    drop(gateways);
    drop(lab);
    Ok(report)
}

fn label(host: usize) -> String {
    format!("h{host}")
}

/// Every host's gateway, trusting each other, the vaults made and followed.
fn start_gateways(lab: &Lab, bug: Option<Bug>) -> Vec<Gateway> {
    let env: Vec<(&str, &str)> = bug.map(|b| (BUG_VAR, b.name())).into_iter().collect();
    let gateways: Vec<Gateway> = (1..=HOSTS)
        .map(|host| {
            lab.start_ferry_with(host, &label(host), ferry_harness::Options::new().env(&env))
        })
        .collect();
    trust_all(&gateways.iter().collect::<Vec<_>>());
    for (vault, owner, _) in VAULTS {
        let out = gateways[owner - 1].cli(&["vault", "create", vault]);
        assert!(
            out.status.success(),
            "vault create {vault} on h{owner}: {}",
            ferry_harness::describe(&out)
        );
    }
    for (vault, owner, replicas) in VAULTS {
        for gateway in replicas.iter().map(|r| &gateways[r - 1]) {
            let follow = ["vault", "follow", vault, "--owner", &label(owner)];
            wait_for(
                &format!("{} to follow {vault}", gateway.label),
                SETUP_BOUND,
                || gateway.cli(&follow).status.success().then_some(()),
            );
        }
    }
    gateways
}

/// The `collide` fault's stranger: a second gateway on [`STRANGER_HOST`], owning vaults of the
/// campaign's names, trusted by nobody until the fault.
fn start_stranger(lab: &Lab, bug: Option<Bug>) -> Gateway {
    let env: Vec<(&str, &str)> = bug.map(|b| (BUG_VAR, b.name())).into_iter().collect();
    let stranger = Gateway::start_at(
        lab.place_on_port(STRANGER_HOST, STRANGER_PORT),
        STRANGER,
        ferry_harness::Options::new().env(&env),
    );
    for (vault, _, _) in VAULTS {
        let out = stranger.cli(&["vault", "create", vault]);
        assert!(
            out.status.success(),
            "vault create {vault} on the stranger: {}",
            ferry_harness::describe(&out)
        );
    }
    stranger
}

/// `me` trusts `them` by both routes.
fn trust(me: &Gateway, them: &Gateway) {
    let out = crate::lab::trust_by_both_routes(me, them);
    if !out.status.success() {
        eprintln!(
            "campaign: {} trusting {} failed: {}",
            me.label,
            them.label,
            ferry_harness::describe(&out)
        );
    }
}

/// `me` untrusts the peer called `label`.
fn untrust(me: &Gateway, label: &str) {
    let out = me.cli(&["untrust", label]);
    if !out.status.success() {
        eprintln!(
            "campaign: {} untrusting {label} failed: {}",
            me.label,
            ferry_harness::describe(&out)
        );
    }
}

/// [`APPS_PER_HOST`] apps on every host, each with a seed of its own.
fn start_apps(
    lab: &Lab,
    gateways: &[Gateway],
    dir: &Path,
    exe: &Path,
    stop: &Path,
    options: &Options,
) -> Vec<AppProcess> {
    let mut apps = Vec::new();
    for gateway in gateways {
        for n in 0..APPS_PER_HOST {
            let name = format!("{}{}", gateway.label, ["a", "b", "c", "d"][n % 4]);
            let out = dir.join(format!("{name}.jsonl"));
            let _ = std::fs::remove_file(&out);
            let settings = json!({
                "mode": "campaign",
                "host": gateway.label,
                "app": name,
                "home": gateway.home,
                "vaults": VAULTS.iter().map(|(v, _, _)| *v).collect::<Vec<_>>(),
                "out": out,
                "stop": stop,
                "pace_ms": options.pace.as_millis() as u64,
                "seed": options.seed.wrapping_mul(1_000).wrapping_add(apps.len() as u64),
            })
            .to_string();
            let child = lab.spawn_in(
                gateway.host(),
                exe,
                &[],
                &[(crate::lab_app::SETTINGS_VAR, &settings)],
                &out.with_extension("log"),
            );
            apps.push(AppProcess {
                host: gateway.host(),
                name,
                out,
                child,
            });
        }
    }
    apps
}

/// Fails the campaign, with its log, if an app died before it was told to stop.
fn check_apps_alive(apps: &mut [AppProcess]) -> Result<(), String> {
    for app in apps {
        if let Some(status) = app.child.try_wait().ok().flatten() {
            return Err(format!(
                "{} on h{} exited with {status} before the end; its log: {}",
                app.name,
                app.host,
                std::fs::read_to_string(app.out.with_extension("log")).unwrap_or_default()
            ));
        }
    }
    Ok(())
}

fn gateway(gateways: &mut [Gateway], host: usize) -> &mut Gateway {
    &mut gateways[host - 1]
}

fn inject(lab: &Lab, gateways: &mut [Gateway], stranger: &Gateway, fault: &Fault) {
    match fault {
        Fault::Untrust { host, owner } => untrust(&gateways[host - 1], &label(*owner)),
        Fault::Collide => {
            // Each host first, then the stranger: its trust greets each host, so they learn
            // its vaults (a hello goes both ways once both trust).
            for gateway in gateways.iter() {
                trust(gateway, stranger);
            }
            for gateway in gateways.iter() {
                trust(stranger, gateway);
            }
        }
        Fault::Kill { host } => gateway(gateways, *host).kill(),
        Fault::Stop { host } => {
            let _ = gateway(gateways, *host).stop();
        }
        Fault::Freeze { host } => gateway(gateways, *host).signal(SIGSTOP),
        Fault::CutLan { host } => lab.cut_cable(*host),
        Fault::CutTailnet { host } => lab.cut_tailnet(*host),
        Fault::Partition { side } => lab.partition(side),
        Fault::Loss { host, percent } => lab.random_loss_everywhere(*host, *percent),
        Fault::RotateTickets { host } => {
            let out = gateway(gateways, *host).cli(&["tickets", "rotate"]);
            if !out.status.success() {
                eprintln!(
                    "campaign: ticket rotation on h{host} failed: {}",
                    ferry_harness::describe(&out)
                );
            }
        }
    }
}

fn heal(lab: &Lab, gateways: &mut [Gateway], stranger: &Gateway, fault: &Fault) {
    match fault {
        Fault::Untrust { host, owner } => trust(&gateways[host - 1], &gateways[owner - 1]),
        Fault::Collide => {
            for gateway in gateways.iter() {
                untrust(gateway, STRANGER);
                untrust(stranger, &gateway.label);
            }
        }
        Fault::Kill { host } | Fault::Stop { host } => gateway(gateways, *host).restart(),
        Fault::Freeze { host } => gateway(gateways, *host).signal(SIGCONT),
        Fault::CutLan { host } => lab.heal_cable(*host),
        Fault::CutTailnet { host } => lab.heal_tailnet(*host),
        Fault::Partition { .. } => (1..=HOSTS).for_each(|h| lab.clear_drop(h)),
        Fault::Loss { host, .. } => lab.clear_drop(*host),
        Fault::RotateTickets { .. } => {}
    }
}

/// Waits (bounded) until every replica's revision is its owner's; `Err` names those behind.
fn converge(gateways: &[Gateway]) -> Result<(), String> {
    let started = Instant::now();
    loop {
        let mut behind = Vec::new();
        for (vault, owner, replicas) in VAULTS {
            let at = vault_revision(&db(&gateways[owner - 1]), vault);
            for replica in replicas {
                let there = vault_revision(&db(&gateways[replica - 1]), vault);
                if there != at {
                    behind.push(format!(
                        "{vault} on h{replica} at {there} (owner h{owner} at {at})"
                    ));
                }
            }
        }
        if behind.is_empty() {
            return Ok(());
        }
        if started.elapsed() > CONVERGE_BOUND {
            return Err(format!(
                "replicas still behind {CONVERGE_BOUND:?} after the apps ended: {}",
                behind.join("; ")
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn db(gateway: &Gateway) -> rusqlite::Connection {
    open_read_only(&gateway.home.join("ferry.db"))
}

/// What every owner and replica holds now.
fn states(
    gateways: &[Gateway],
) -> (
    BTreeMap<String, OwnerState>,
    BTreeMap<String, Vec<ReplicaState>>,
) {
    let mut owners = BTreeMap::new();
    let mut replicas: BTreeMap<String, Vec<ReplicaState>> = BTreeMap::new();
    for (vault, owner, followers) in VAULTS {
        let conn = db(&gateways[owner - 1]);
        // Each owner owns one vault (VAULTS), so its whole journal is that vault's.
        let rows = journal(&conn, &label(owner));
        owners.insert(
            vault.to_string(),
            OwnerState {
                journal: rows,
                revision: vault_revision(&conn, vault),
                records: records(&conn, vault),
            },
        );
        for replica in followers {
            let conn = db(&gateways[replica - 1]);
            replicas
                .entry(vault.to_string())
                .or_default()
                .push(ReplicaState {
                    host: label(*replica),
                    cursor: vault_revision(&conn, vault),
                    records: records(&conn, vault),
                });
        }
    }
    (owners, replicas)
}

/// Each app's lines: (host, app name, events).
type Events = Vec<(usize, String, Vec<Value>)>;

fn read_events(apps: &[AppProcess]) -> Result<Events, String> {
    apps.iter()
        .map(|app| {
            let text = std::fs::read_to_string(&app.out)
                .map_err(|err| format!("{}: {err}", app.out.display()))?;
            let events = text
                .lines()
                .map(|line| {
                    serde_json::from_str::<Value>(line).map_err(|err| {
                        format!(
                            "{}: a line that is not JSON ({err}): {line}",
                            app.out.display()
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((app.host, app.name.clone(), events))
        })
        .collect()
}

/// An app's `settle` lines by request id (the last one of each id: what it ended as).
pub(crate) fn settles_by_id(events: &[Value]) -> HashMap<&str, &Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "settle")
        .filter_map(|e| Some((e["id"].as_str()?, e)))
        .collect()
}

/// The history the apps lived, as the checker reads it.
fn history_of(events: &Events, gateways: &[Gateway], restarts: &[(usize, u64)]) -> History {
    // A gateway that restarts forgets what its apps saw: a new incarnation from the moment
    // its process ended.
    let incarnation = |host: usize, at: u64| {
        restarts
            .iter()
            .filter(|(h, ended)| *h == host && *ended <= at)
            .count() as u32
    };
    let mut history = History {
        read_freshness_ms: Some(READ_FRESHNESS_MS),
        ..History::default()
    };
    for (host, app, events) in events {
        let caller = gateways[host - 1].node_id.to_string();
        let settles = settles_by_id(events);
        for e in events {
            let at = e["sent_ms"].as_u64().unwrap_or(0);
            let text = |field: &str| e[field].as_str().unwrap_or_default().to_string();
            match e["kind"].as_str() {
                Some("write") => {
                    let id = text("id");
                    let code = text("code");
                    let revision = e["revision"].as_u64();
                    let told = if code == "done" && revision.is_none() {
                        WriteFate::Unknown
                    } else {
                        told_fate(&code, revision)
                    };
                    let settled = settles
                        .get(id.as_str())
                        .and_then(|s| settled_fate(&s["body"]));
                    history.writes.push(Write {
                        request_id: id.clone(),
                        host: label(*host),
                        caller: caller.clone(),
                        app: app.clone(),
                        incarnation: incarnation(*host, at),
                        vault: text("vault"),
                        key: text("key"),
                        what: text("what"),
                        told: Some(told),
                        settled,
                        at_ms: at,
                        // One call at a time: the app heard before its next call.
                        told_ms: None,
                        answered_ms: e["answered_ms"].as_u64(),
                        effect: Some(if e["put"] == true {
                            Effect::Put(id.into_bytes())
                        } else {
                            Effect::Delete
                        }),
                        if_match: e["if_match"].as_u64(),
                    });
                }
                Some("read") => {
                    let found = e["code"] == "found";
                    history.reads.push(Read {
                        host: label(*host),
                        app: app.clone(),
                        incarnation: incarnation(*host, at),
                        vault: text("vault"),
                        key: text("key"),
                        answer: found
                            .then(|| {
                                Some((
                                    e["revision"].as_u64()?,
                                    e["source"].as_str().unwrap_or("?").to_string(),
                                    e["stale"] == true,
                                ))
                            })
                            .flatten(),
                        not_found_at: None,
                        at_ms: at,
                    });
                }
                _ => {}
            }
        }
    }
    history
}

/// `--bug` names: every bug a campaign can switch on.
pub fn bug_names() -> Vec<&'static str> {
    Bug::ALL.iter().map(|b| b.name()).collect()
}

/// A one-line summary of `value`, for the report's seed line.
pub fn replay_command(options: &Options) -> String {
    let mut command = format!(
        "sudo ./target/release/ferry-campaign --seed {} --ops {} --faults {}",
        options.seed, options.ops, options.min_faults
    );
    if !options.kinds.is_empty() {
        command.push_str(&format!(" --kinds {}", options.kinds.join(",")));
    }
    if let Some(bug) = options.bug {
        command.push_str(&format!(" --bug {}", bug.name()));
    }
    command
}
