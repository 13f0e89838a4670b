//! A rolling upgrade in the lab (SPEC 11): three hosts start on the previous release
//! (`ferry_tests::previous`: protocol 1, schema 2), trusting each other; `alpha` is owned by h1
//! and replicated by h2 and h3, `beta` is owned by h2 and replicated by h1. An app on every host
//! calls its own gateway's HTTP API all the time: writes (each with a fresh UUIDv7 request id
//! and a key of its own; one in ten a compare-and-swap whose right answer is the owner's
//! `conflict`), reads of its own writes (new ones, mostly cached, and ones older than the
//! cache's freshness, which h3 asks `beta`'s owner for), and settle probes (a request id never
//! sent, settled naming a vault: its owner fences it and answers `not_carried_out`). Then each
//! host in turn is stopped with the new release's `ferry stop` and started on this build in
//! the same home; before the next one goes, its routes must be up both ways, every app must
//! have written through the mixed cluster and every replica must have caught up with its owner.
//!
//! Afterwards every `outcome_unknown` (and every probe that could not settle at once) is
//! settled by request id on the host that sent it, and a few writes of the old era are settled
//! and sent again with their old ids through this build: each must answer as it did then. The
//! whole history is checked against the owners' databases (`ferry_tests::history`): no request
//! id ran twice (one journal row each, every vault's revision is the count of writes that ran,
//! each key written once), every write told or settled `done` is on its owner with its value
//! and revision, nothing told "not run" ran, every unknown settled, no app read older than it
//! had seen, and the replicas hold what their owners hold. Each host's upgrade gets a window,
//! from the first to the last write around it that did not end as it should, printed by
//! answer and bounded; outside the restarts themselves (from `ferry stop` until the routes are
//! up again) every call must end as in a healthy cluster. At the end every host runs this
//! build, speaks protocols 1-2 and sees every peer on protocol 2.
//!
//! The apps run inside the hosts' network namespaces, where the gateways' APIs are: the test
//! starts the `ferry-lab-app` binary there (`ferry_tests::lab_app`) and reads what each app did
//! from a file of JSON lines.
//!
//! Run: `cargo test -p ferry-tests --test integration lab_upgrade:: -- --nocapture` (as root).

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use ferry_gateway::store::SCHEMA_VERSION;
use ferry_harness::vault_revision;
use ferry_harness::{Gateway, Options};
use ferry_peer::wire::{ProtocolRange, PROTOCOL_VERSION, RELEASE};
use ferry_tests::history::{self, History, OwnerState, Read, ReplicaState, Write, WriteFate};
use ferry_tests::lab::{trust_all, Lab};
use ferry_tests::lab_app::{now_ms, APP, OLD_ERA_SAMPLE, PROBE};
use ferry_tests::owner_db::{journal, records, settled_fate, told_fate};
use ferry_tests::previous::{previous_build, PREVIOUS};
use serde_json::{json, Value};

/// The vaults, the host that owns each and the hosts that replicate it. h3 does not replicate
/// `beta`, so its app's reads of `beta` go to the owner (or the cache): reads cross versions too.
const VAULTS: [(&str, usize, &[usize]); 2] = [("alpha", 1, &[2, 3]), ("beta", 2, &[1])];

/// The upgrade order. h3 first: it owns nothing, so its restart costs only its own apps their
/// local gateway (the order the docs recommend: callers and replicas before owners). Then the
/// owners one at a time, h1 (the first vault's owner) last. Every owner is upgraded, since
/// every owner is eventually, and each owner's restart is measured on its own.
const UPGRADE_ORDER: [usize; 3] = [3, 2, 1];

/// Every gateway's settings: the apps write faster than the owner's default rate limit of 600
/// a minute per caller app allows, and a `rate_limited` is not what this test is about.
const CONFIG: &str = "[capacity]\nrate_per_minute = 0\n";

/// Writes each app makes to each vault before the first upgrade, and after each host is up
/// again (the mixed cluster at work) before the next one goes.
const WRITES_PER_STEADY: usize = 15;

/// The loose bound on each host's window of writes that did not end as they should.
const WINDOW_BOUND_MS: u64 = 10_000;
/// How long routes may take to come up after a start.
const ROUTES_BOUND: Duration = Duration::from_secs(20);
/// How long the apps may take to do the writes of a steady spell.
const STEADY_BOUND: Duration = Duration::from_secs(20);
/// How long the apps may take to settle and finish once told to stop.
const FINISH_BOUND: Duration = Duration::from_secs(90);
/// How long replicas may take to catch up with their owners.
const CONVERGE_BOUND: Duration = Duration::from_secs(30);
/// How often the test looks again while it waits (each look runs CLIs or reads files).
const POLL_EVERY: Duration = Duration::from_millis(50);

/// The environment variable that carries an app's settings.
const DRIVER_VAR: &str = ferry_tests::lab_app::SETTINGS_VAR;
/// The file whose appearance tells the apps to stop (in their output directory).
const STOP_FILE: &str = "stop";

/// Polls `done` every [`POLL_EVERY`] until it returns `Some`, at most `bound`.
fn poll<T>(what: &str, bound: Duration, done: impl FnMut() -> Option<T>) -> T {
    poll_explained(what, bound, done, String::new)
}

/// [`poll`], and when the bound passes, the failure says what `explain` finds then.
fn poll_explained<T>(
    what: &str,
    bound: Duration,
    mut done: impl FnMut() -> Option<T>,
    explain: impl FnOnce() -> String,
) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = done() {
            return value;
        }
        if started.elapsed() > bound {
            panic!("gave up after {bound:?} waiting for {what}\n{}", explain());
        }
        std::thread::sleep(POLL_EVERY);
    }
}

fn log_tail(gateway: &Gateway) -> String {
    let log = gateway.log();
    let lines: Vec<&str> = log.lines().collect();
    let from = lines.len().saturating_sub(60);
    format!(
        "--- last lines of {}'s log ---\n{}",
        gateway.label,
        lines[from..].join("\n")
    )
}

/// What `gateway` says of its routes and peers (its own CLI), and the end of its log.
fn explain(gateway: &Gateway) -> String {
    let cli = |what: &str| {
        let out = gateway.cli(&["--json", what]);
        format!(
            "{} `ferry {what}`: {}",
            gateway.label,
            ferry_harness::describe(&out)
        )
    };
    format!("{}\n{}\n{}", cli("routes"), cli("peers"), log_tail(gateway))
}

// ---------------------------------------------------------------------------------------------
// The test.

/// A running app inside one host.
struct Driver {
    host: usize,
    label: String,
    child: Child,
    out: PathBuf,
    log: PathBuf,
}

impl Driver {
    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// Fails, with the app's own output, if it is no longer running.
    fn check_running(&mut self) {
        if let Some(status) = self.child.try_wait().ok().flatten() {
            panic!(
                "the app on {} exited with {status} before it was told to stop:\n{}",
                self.label,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}

/// One host's upgrade, in wall-clock milliseconds.
#[derive(Debug, Clone)]
struct Phase {
    host: usize,
    /// `ferry stop` was run.
    stop_at: u64,
    /// The old process had exited.
    stopped_at: u64,
    /// The new one listened for apps.
    started_at: u64,
    /// Its routes were up both ways with every peer.
    ready_at: u64,
    /// Every app had written through the cluster since: the next upgrade may start.
    end_at: u64,
}

fn label(host: usize) -> String {
    format!("h{host}")
}

/// `gateway`'s routes to `peer` as (kind, state), from `ferry routes --json`.
fn route_states(gateway: &Gateway, peer: &str) -> Vec<(String, String)> {
    let (code, routes) = gateway.cli_json(&["routes"]);
    assert_eq!(code, 0, "ferry routes on {}: {routes}", gateway.label);
    routes
        .as_array()
        .map(|all| {
            all.iter()
                .filter(|r| r["peer"] == peer)
                .map(|r| {
                    (
                        r["kind"].as_str().unwrap_or("?").to_string(),
                        r["state"].as_str().unwrap_or("?").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn routes_up(gateway: &Gateway, peer: &str) -> bool {
    let routes = route_states(gateway, peer);
    !routes.is_empty() && routes.iter().all(|(_, state)| state == "up")
}

/// Waits until `gateways[i]` has every route up to every other gateway, and each of them
/// every route up to it.
fn wait_routes_up_around(gateways: &[Gateway], i: usize) {
    for (j, other) in gateways.iter().enumerate() {
        if j == i {
            continue;
        }
        let me = &gateways[i];
        poll_explained(
            &format!(
                "the routes between {} and {} to be up both ways",
                me.label, other.label
            ),
            ROUTES_BOUND,
            || (routes_up(me, &other.label) && routes_up(other, &me.label)).then_some(()),
            || format!("{}\n{}", explain(me), explain(other)),
        );
    }
}

fn db(gateway: &Gateway) -> rusqlite::Connection {
    ferry_tests::owner_db::open_read_only(&gateway.home.join("ferry.db"))
}

fn schema_version(gateway: &Gateway) -> String {
    db(gateway)
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |row| row.get::<_, String>(0),
        )
        .unwrap_or_else(|err| panic!("{}'s schema version: {err}", gateway.label))
}

/// Whether an app's call ended as it does in a healthy cluster: a write done (a
/// compare-and-swap refused `conflict`), a read found, a settle probe `not_carried_out` at once.
fn as_expected(call: &Value) -> bool {
    match call["kind"].as_str() {
        Some("write") if call["if_match"].is_null() => call["code"] == "done",
        Some("write") => call["code"] == "conflict",
        Some("read") => call["code"] == "found",
        Some("probe") => call["status"] == 200 && call["body"]["state"] == "not_carried_out",
        _ => true,
    }
}

/// A call's answer in a word: a write's or read's code; for a settle probe, the error or
/// state its gateway answered, or `local_gateway_down`.
fn answer_code(call: &Value) -> String {
    let code = match call["kind"].as_str() {
        Some("probe") if call["status"].is_null() => Some("local_gateway_down"),
        Some("probe") => call["body"]["error"]
            .as_str()
            .or(call["body"]["state"].as_str()),
        _ => call["code"].as_str(),
    };
    code.unwrap_or("?").to_string()
}

/// One line about an app's call, for failure messages.
fn describe_call(host: usize, call: &Value) -> String {
    let answer = match call["kind"].as_str() {
        Some("probe") => call["body"].to_string(),
        _ => format!("{} {}", call["code"], call["detail"]),
    };
    format!(
        "{} via h{host} at {} ms: {} {} -> {answer}",
        call["kind"], call["sent_ms"], call["vault"], call["key"]
    )
}

fn ms(value: &Value, field: &str) -> u64 {
    value[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} in {value}"))
}

/// Waits until every replica holds at least the revision its owner has now (the owners move
/// on meanwhile): replication works across whatever versions the hosts run.
fn replicas_catch_up(gateways: &[Gateway], what: &str) {
    let started = Instant::now();
    for (vault, owner, replicas) in VAULTS {
        let owner_revision = vault_revision(&db(&gateways[owner - 1]), vault);
        for replica in replicas.iter().map(|r| &gateways[r - 1]) {
            poll_explained(
                &format!(
                    "{}'s replica of {vault} to reach the owner's revision {owner_revision} {what}",
                    replica.label
                ),
                CONVERGE_BOUND,
                || (vault_revision(&db(replica), vault) >= owner_revision).then_some(()),
                || {
                    let listed = replica.cli(&["--json", "vault", "list"]);
                    format!(
                        "{} `ferry vault list`: {}\n{}\n{}",
                        replica.label,
                        ferry_harness::describe(&listed),
                        explain(replica),
                        explain(&gateways[owner - 1])
                    )
                },
            );
        }
    }
    eprintln!(
        "measured: replicas caught up with their owners {what} in {:?}",
        started.elapsed()
    );
}

/// Waits until every app has made [`WRITES_PER_STEADY`] writes to each vault sent at or after
/// `since` (whatever their answers); fails at once if an app exited.
fn steady(drivers: &mut [Driver], since: u64, what: &str) {
    poll(
        &format!("every app to make {WRITES_PER_STEADY} writes to each vault {what}"),
        STEADY_BOUND,
        || {
            drivers.iter_mut().for_each(Driver::check_running);
            drivers
                .iter()
                .all(|d| {
                    let events = d.events();
                    VAULTS.iter().all(|(vault, _, _)| {
                        events
                            .iter()
                            .filter(|e| {
                                e["kind"] == "write"
                                    && e["vault"] == *vault
                                    && e["sent_ms"].as_u64() >= Some(since)
                            })
                            .count()
                            >= WRITES_PER_STEADY
                    })
                })
                .then_some(())
        },
    );
}

#[test]
fn a_rolling_upgrade_from_the_previous_release_keeps_every_write_at_most_once() {
    let Some(lab) = Lab::new(3) else { return };
    let run_started = Instant::now();
    let new_binary = Path::new(ferry_harness::ferry_bin());
    let mut gateways = start_previous_release(&lab);
    eprintln!(
        "measured: three hosts on release {} ready in {:?}",
        PREVIOUS.version,
        run_started.elapsed()
    );
    let files = tempfile::tempdir().expect("a directory for the apps' output");
    let mut drivers = start_apps(&lab, &gateways, files.path());
    // Every app writes through the whole cluster of the previous release.
    steady(&mut drivers, 0, "before the upgrade");
    replicas_catch_up(&gateways, "before the upgrade");

    let mut phases: Vec<Phase> = Vec::new();
    for host in UPGRADE_ORDER {
        let phase = upgrade(&mut gateways, host, new_binary, &phases, &mut drivers);
        phases.push(phase);
    }

    // Heal (every host runs, on this build): the apps settle and finish.
    let events = finish_apps(&mut drivers, files.path(), &phases);
    check_windows(&events, &phases);
    let history = history_of(&events, &gateways, &phases);
    replicas_catch_up(&gateways, "after the upgrade");
    check_history(&history, &events, &gateways);
    check_old_era(&events);
    check_all_on_this_build(&gateways, new_binary);
    eprintln!(
        "measured: rolling upgrade test took {:?}",
        run_started.elapsed()
    );
}

/// Three hosts on the previous release, trusting each other, routes up, the vaults made and
/// followed.
fn start_previous_release(lab: &Lab) -> Vec<Gateway> {
    let old_binary = previous_build();
    let gateways: Vec<Gateway> = (1..=3)
        .map(|host| {
            lab.start_ferry_with(
                host,
                &label(host),
                Options::new()
                    .binary(old_binary)
                    .config(CONFIG)
                    .args(&["--no-mdns"]),
            )
        })
        .collect();
    for gateway in &gateways {
        let (code, status) = gateway.cli_json(&["status"]);
        assert_eq!(code, 0, "{status}");
        assert_eq!(
            (status["version"].as_str(), status.get("protocols")),
            (Some(PREVIOUS.version), None),
            "{} runs the previous release: {status}",
            gateway.label
        );
        assert_eq!(
            schema_version(gateway),
            PREVIOUS.schema.to_string(),
            "the previous release writes schema {}",
            PREVIOUS.schema
        );
    }
    trust_all(&gateways.iter().collect::<Vec<_>>());
    for i in 0..gateways.len() {
        wait_routes_up_around(&gateways, i);
    }
    for (vault, owner, _) in VAULTS {
        let out = gateways[owner - 1].cli(&["vault", "create", vault]);
        assert!(
            out.status.success(),
            "vault create {vault}: {}",
            ferry_harness::describe(&out)
        );
    }
    for (vault, owner, replicas) in VAULTS {
        for gateway in replicas.iter().map(|r| &gateways[r - 1]) {
            let follow = ["vault", "follow", vault, "--owner", &label(owner)];
            poll_explained(
                &format!("{} to follow {vault}", gateway.label),
                ROUTES_BOUND,
                || gateway.cli(&follow).status.success().then_some(()),
                || ferry_harness::describe(&gateway.cli(&follow)),
            );
        }
    }
    gateways
}

/// An app on every host (`ferry-lab-app`, `ferry_tests::lab_app`), started inside the host,
/// writing its calls to `files`.
fn start_apps(lab: &Lab, gateways: &[Gateway], files: &Path) -> Vec<Driver> {
    let exe = Path::new(env!("CARGO_BIN_EXE_ferry-lab-app"));
    gateways
        .iter()
        .map(|gateway| {
            let out = files.join(format!("{}.jsonl", gateway.label));
            let log = files.join(format!("{}.log", gateway.label));
            let settings = json!({
                "label": gateway.label,
                "home": gateway.home,
                "vaults": VAULTS.iter().map(|(v, _, _)| *v).collect::<Vec<_>>(),
                "out": out,
                "stop": files.join(STOP_FILE),
            })
            .to_string();
            let child = lab.spawn_in(gateway.host(), exe, &[], &[(DRIVER_VAR, &settings)], &log);
            Driver {
                host: gateway.host(),
                label: gateway.label.to_string(),
                child,
                out,
                log,
            }
        })
        .collect()
}

/// Upgrades `host` (the hosts of `before` are upgraded already): this build's CLI reads the
/// old gateway's status and stops it, the same home starts on this build, and the test waits
/// until its routes are up both ways, every upgraded host sees each peer on the right
/// protocol, every app has written through the mixed cluster and every replica caught up.
fn upgrade(
    gateways: &mut [Gateway],
    host: usize,
    new_binary: &Path,
    before: &[Phase],
    drivers: &mut [Driver],
) -> Phase {
    let i = host - 1;
    // The operator has installed the new release: its CLI talks to the old gateway (and
    // stops it) before the new gateway starts.
    let status = gateways[i].cli_of(new_binary, &["--json", "status"]);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap_or_else(|_| {
        panic!(
            "this build's `ferry status` against h{host} on the previous release: {}",
            ferry_harness::describe(&status)
        )
    });
    assert_eq!(
        status["version"].as_str(),
        Some(PREVIOUS.version),
        "this build's CLI reads the previous release's status: {status}"
    );
    let stop_at = now_ms();
    let exit = gateways[i].stop_with_cli(new_binary);
    assert_eq!(
        exit,
        Some(0),
        "h{host} (previous release) exits 0 after this build's `ferry stop`\n{}",
        log_tail(&gateways[i])
    );
    let stopped_at = now_ms();
    gateways[i].restart_on(new_binary, &[]);
    let started_at = now_ms();
    wait_routes_up_around(gateways, i);
    let ready_at = now_ms();

    let gateway = &gateways[i];
    assert_eq!(
        schema_version(gateway),
        SCHEMA_VERSION.to_string(),
        "h{host} migrated its database in place"
    );
    let (code, status) = gateway.cli_json(&["status"]);
    assert_eq!(code, 0, "{status}");
    assert_eq!(
        (
            status["version"].as_str(),
            status["protocols"].as_str(),
            status["version_mismatches"].as_array().map(Vec::len),
        ),
        (
            Some(RELEASE),
            Some(ProtocolRange::THIS_BUILD.to_string().as_str()),
            Some(0)
        ),
        "h{host} after its upgrade: {status}"
    );
    // Every upgraded host sees each peer on the protocol they share: the previous release's
    // with the hosts still on it, this build's with the upgraded ones.
    let upgraded: Vec<usize> = before
        .iter()
        .map(|p| p.host)
        .chain(std::iter::once(host))
        .collect();
    for &seer in &upgraded {
        let seer = &gateways[seer - 1];
        poll_explained(
            &format!(
                "{} to see each peer on its protocol (upgraded: {upgraded:?})",
                seer.label
            ),
            ROUTES_BOUND,
            || {
                let (_, peers) = seer.cli_json(&["peers"]);
                let peers = peers.as_array()?.clone();
                (1..=3)
                    .filter(|p| label(*p) != seer.label)
                    .all(|p| {
                        let (protocol, release) = if upgraded.contains(&p) {
                            (PROTOCOL_VERSION, Some(RELEASE))
                        } else {
                            (PREVIOUS.protocol, None)
                        };
                        peers.iter().any(|row| {
                            row["label"] == label(p).as_str()
                                && row["protocol"].as_u64() == Some(u64::from(protocol))
                                && row["release"].as_str() == release
                        })
                    })
                    .then_some(())
            },
            || explain(seer),
        );
    }
    steady(
        drivers,
        ready_at,
        &format!("after h{host}'s upgrade (upgraded: {upgraded:?})"),
    );
    replicas_catch_up(gateways, &format!("after h{host}'s upgrade"));
    let phase = Phase {
        host,
        stop_at,
        stopped_at,
        started_at,
        ready_at,
        end_at: now_ms(),
    };
    eprintln!(
        "measured: h{host} upgraded: ferry stop took {} ms, the new build listened {} ms later, routes up both ways {} ms after that",
        phase.stopped_at - phase.stop_at,
        phase.started_at - phase.stopped_at,
        phase.ready_at - phase.started_at
    );
    phase
}

/// Tells the apps to stop (with what they need for their last work), waits for them, and
/// returns each host's app's calls.
fn finish_apps(
    drivers: &mut [Driver],
    files: &Path,
    phases: &[Phase],
) -> BTreeMap<usize, Vec<Value>> {
    let told = json!({
        "old_era_before_ms": phases[0].stop_at,
        "settle_bound_s": 60,
    });
    // Written whole, then renamed: an app never reads half of it.
    let partial = files.join("stop.partial");
    std::fs::write(&partial, told.to_string()).unwrap();
    std::fs::rename(&partial, files.join(STOP_FILE)).unwrap();
    for driver in drivers.iter_mut() {
        let label = driver.label.clone();
        let log = driver.log.clone();
        let status = poll(
            &format!("the app on {label} to finish"),
            FINISH_BOUND,
            || driver.child.try_wait().ok().flatten(),
        );
        assert!(
            status.success(),
            "the app on {label} failed ({status}):\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    let events: BTreeMap<usize, Vec<Value>> =
        drivers.iter().map(|d| (d.host, d.events())).collect();
    for (host, events) in &events {
        assert!(
            events.last().is_some_and(|e| e["kind"] == "finished"),
            "the app on h{host} did not finish its work"
        );
    }
    events
}

/// Every call of `kind` of every app, with its host.
fn calls_of<'a>(events: &'a BTreeMap<usize, Vec<Value>>, kind: &str) -> Vec<(usize, &'a Value)> {
    events
        .iter()
        .flat_map(|(host, events)| {
            events
                .iter()
                .filter(move |e| e["kind"] == kind)
                .map(move |e| (*host, e))
        })
        .collect()
}

/// Each host's window (the writes around its upgrade that did not end as they should),
/// printed and bounded; outside the restarts, every call ended as in a healthy cluster.
fn check_windows(events: &BTreeMap<usize, Vec<Value>>, phases: &[Phase]) {
    let writes = calls_of(events, "write");
    let others: Vec<(usize, &Value)> = calls_of(events, "read")
        .into_iter()
        .chain(calls_of(events, "probe"))
        .collect();
    let mut windows = Vec::new();
    for phase in phases {
        let in_phase = |call: &Value| (phase.stop_at..phase.end_at).contains(&ms(call, "sent_ms"));
        let off: Vec<&(usize, &Value)> = writes
            .iter()
            .filter(|(_, w)| in_phase(w) && !as_expected(w))
            .collect();
        let mut by_answer: BTreeMap<(String, String), usize> = BTreeMap::new();
        for (host, w) in &off {
            *by_answer.entry((label(*host), answer_code(w))).or_default() += 1;
        }
        let window = match (
            off.iter().map(|(_, w)| ms(w, "sent_ms")).min(),
            off.iter().map(|(_, w)| ms(w, "answered_ms")).max(),
        ) {
            (Some(first), Some(last)) => last - first,
            _ => 0,
        };
        let shown: Vec<String> = by_answer
            .iter()
            .map(|((host, code), n)| format!("{code} {n} (via {host})"))
            .collect();
        let mut others_off: BTreeMap<String, usize> = BTreeMap::new();
        for (_, call) in others
            .iter()
            .filter(|(_, c)| in_phase(c) && !as_expected(c))
        {
            *others_off
                .entry(format!(
                    "{} {}",
                    call["kind"].as_str().unwrap_or("?"),
                    answer_code(call)
                ))
                .or_default() += 1;
        }
        eprintln!(
            "figure: h{}'s upgrade: window of writes not done {window} ms: {} of {} writes in the phase: {}; other calls that failed: {others_off:?}",
            phase.host,
            off.len(),
            writes.iter().filter(|(_, w)| in_phase(w)).count(),
            if shown.is_empty() { "none".to_string() } else { shown.join(", ") }
        );
        windows.push((phase.host, window));
    }
    // Outside a host's restart (from its `ferry stop` until its routes are up again), the
    // mixed cluster answers every call as a healthy one does.
    let in_transition = |at: u64| phases.iter().any(|p| (p.stop_at..p.ready_at).contains(&at));
    let stray: Vec<String> = writes
        .iter()
        .chain(&others)
        .filter(|(_, call)| !as_expected(call) && !in_transition(ms(call, "sent_ms")))
        .map(|(host, call)| describe_call(*host, call))
        .collect();
    assert!(
        stray.is_empty(),
        "{} calls outside every restart did not end as they should (phases {phases:?}):\n{}",
        stray.len(),
        stray.join("\n")
    );
    for (host, window) in windows {
        assert!(
            window < WINDOW_BOUND_MS,
            "h{host}'s upgrade left writes failing for {window} ms (bound {WINDOW_BOUND_MS} ms)"
        );
    }
}

/// The history, as the apps were told and as settling said; also checks every value read and
/// that every unknown and every probe settled.
fn history_of(
    events: &BTreeMap<usize, Vec<Value>>,
    gateways: &[Gateway],
    phases: &[Phase],
) -> History {
    let node_ids: HashMap<usize, String> = gateways
        .iter()
        .map(|g| (g.host(), g.node_id.to_string()))
        .collect();
    // A host's gateway forgets what its apps saw when it restarts: a new incarnation.
    let incarnation = |host: usize, at: u64| {
        phases
            .iter()
            .filter(|p| p.host == host && p.stop_at <= at)
            .count() as u32
    };
    let mut history = History::default();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (host, events) in events {
        let settles: HashMap<&str, &Value> = events
            .iter()
            .filter(|e| e["kind"] == "settle")
            .map(|e| (e["id"].as_str().unwrap(), e))
            .collect();
        for e in events {
            let at = e["sent_ms"].as_u64().unwrap_or(0);
            match e["kind"].as_str() {
                Some("write") => {
                    let id = e["id"].as_str().unwrap();
                    let code = e["code"].as_str().unwrap();
                    *counts.entry(code.to_string()).or_default() += 1;
                    let told = told_fate(code, e["revision"].as_u64());
                    let settled = settles.get(id).map(|s| {
                        settled_fate(&s["body"]).unwrap_or_else(|| {
                            panic!(
                                "{id} (h{host}, {}) told {code} did not settle: {s}",
                                e["vault"]
                            )
                        })
                    });
                    assert!(
                        told != WriteFate::Unknown || settled.is_some(),
                        "{id} (h{host}) told {code} was never settled"
                    );
                    history.writes.push(Write {
                        request_id: id.to_string(),
                        host: label(*host),
                        caller: node_ids[host].clone(),
                        app: APP.into(),
                        incarnation: incarnation(*host, at),
                        vault: e["vault"].as_str().unwrap().into(),
                        key: e["key"].as_str().unwrap().into(),
                        what: "put".into(),
                        told: Some(told),
                        settled,
                        at_ms: at,
                        told_ms: None,
                        answered_ms: None,
                        effect: None,
                        if_match: None,
                    });
                }
                Some("read") => {
                    let found = e["code"] == "found";
                    if found {
                        // The app reads back only its own writes, each key's value its own.
                        let value = format!("{} by {}", e["key"].as_str().unwrap(), label(*host));
                        assert_eq!(
                            e["value"].as_str(),
                            Some(value.as_str()),
                            "a read through h{host} answered another value: {e}"
                        );
                    }
                    history.reads.push(Read {
                        host: label(*host),
                        app: APP.into(),
                        incarnation: incarnation(*host, at),
                        vault: e["vault"].as_str().unwrap().into(),
                        key: e["key"].as_str().unwrap().into(),
                        answer: found.then(|| {
                            (
                                e["revision"]
                                    .as_u64()
                                    .expect("a found record has a revision"),
                                e["source"].as_str().unwrap_or("?").to_string(),
                                e["stale"] == true,
                            )
                        }),
                        // No app ever deletes: "not found" of a key it saw is going back.
                        not_found_at: (e["code"] == "not_found").then_some(0),
                        at_ms: at,
                    });
                }
                Some("probe") => {
                    let id = e["id"].as_str().unwrap();
                    let settled = settled_fate(&e["body"])
                        .or_else(|| settles.get(id).and_then(|s| settled_fate(&s["body"])));
                    assert!(
                        matches!(settled, Some(WriteFate::NotCarriedOut(_))),
                        "settle probe {id} (h{host}, {}), never sent, must settle not_carried_out: {e}; settled again: {:?}",
                        e["vault"],
                        settles.get(id)
                    );
                    *counts.entry(PROBE.into()).or_default() += 1;
                    // The owner fenced the id: its journal holds it, as sent by this host.
                    history.writes.push(Write {
                        request_id: id.to_string(),
                        host: label(*host),
                        caller: node_ids[host].clone(),
                        app: APP.into(),
                        incarnation: incarnation(*host, at),
                        vault: e["vault"].as_str().unwrap().into(),
                        key: String::new(),
                        what: PROBE.into(),
                        told: None,
                        settled,
                        at_ms: at,
                        told_ms: None,
                        answered_ms: None,
                        effect: None,
                        if_match: None,
                    });
                }
                _ => {}
            }
        }
    }
    let mut sources: BTreeMap<String, usize> = BTreeMap::new();
    for read in &history.reads {
        let source = match &read.answer {
            Some((_, source, _)) => source.clone(),
            None => "none".into(),
        };
        *sources.entry(source).or_default() += 1;
    }
    eprintln!(
        "measured: {} writes and settle probes ({counts:?}), {} reads (by source: {sources:?})",
        history.writes.len(),
        history.reads.len()
    );
    assert!(
        sources.get("owner").copied().unwrap_or(0) > 0,
        "no read was answered by an owner (h3's reads of beta older than the cache's freshness \
         should be), so reads never crossed versions: {sources:?}"
    );
    history
}

/// The history against what every owner and replica holds (`ferry_tests::history::check`),
/// and each write's own key: a write that ran is on its owner with its value and revision, one
/// that did not is not there, and nothing else is.
fn check_history(history: &History, events: &BTreeMap<usize, Vec<Value>>, gateways: &[Gateway]) {
    let mut owners = BTreeMap::new();
    let mut replica_states: BTreeMap<String, Vec<ReplicaState>> = BTreeMap::new();
    for (vault, owner, replicas) in VAULTS {
        let conn = db(&gateways[owner - 1]);
        owners.insert(
            vault.to_string(),
            OwnerState {
                journal: journal(&conn, &label(owner)),
                revision: vault_revision(&conn, vault),
                records: records(&conn, vault),
            },
        );
        for replica in replicas.iter().map(|r| &gateways[r - 1]) {
            let conn = db(replica);
            replica_states
                .entry(vault.to_string())
                .or_default()
                .push(ReplicaState {
                    host: replica.label.to_string(),
                    cursor: vault_revision(&conn, vault),
                    records: records(&conn, vault),
                });
        }
    }
    let violations = history::check(history, &owners, &replica_states);
    assert!(
        violations.is_empty(),
        "the history breaks Ferry's promises:\n{}",
        violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let writes = calls_of(events, "write");
    let by_id: HashMap<&str, &Value> = writes
        .iter()
        .map(|(_, e)| (e["id"].as_str().unwrap(), *e))
        .collect();
    let mut ran: BTreeMap<&str, usize> = BTreeMap::new();
    for write in history.writes.iter().filter(|w| w.what != PROBE) {
        let e = by_id[write.request_id.as_str()];
        let stored = owners[&write.vault].records.get(&write.key);
        match write.fate() {
            Some(WriteFate::Done(revision)) => {
                *ran.entry(write.vault.as_str()).or_default() += 1;
                assert_eq!(
                    stored,
                    Some(&(
                        *revision,
                        Some(e["value"].as_str().unwrap().as_bytes().to_vec())
                    )),
                    "{} ({} via {}) is done at revision {revision}: {e}",
                    write.request_id,
                    write.vault,
                    write.host
                );
            }
            _ => assert_eq!(
                stored, None,
                "{} ({} via {}) did not run, yet its key is on the owner: {e}",
                write.request_id, write.vault, write.host
            ),
        }
    }
    for (vault, owner) in &owners {
        assert_eq!(
            owner.records.len(),
            ran.get(vault.as_str()).copied().unwrap_or(0),
            "{vault}: the owner holds records no write was told or settled done for"
        );
    }
}

/// Old-era writes (answered by the previous release), settled and sent again by id through
/// this build, answer as they did then.
fn check_old_era(events: &BTreeMap<usize, Vec<Value>>) {
    for (host, events) in events {
        let originals: HashMap<&str, &Value> = events
            .iter()
            .filter(|e| e["kind"] == "write")
            .map(|e| (e["id"].as_str().unwrap(), e))
            .collect();
        let mut old_era = 0;
        for e in events
            .iter()
            .filter(|e| e["kind"] == "settle_old" || e["kind"] == "repeat")
        {
            let id = e["id"].as_str().unwrap();
            let original = originals[id];
            let (status, code, revision) = if e["kind"] == "settle_old" {
                let body = &e["body"];
                assert_eq!(
                    (e["status"].as_u64(), body["state"].as_str()),
                    (Some(200), Some("done")),
                    "settling old-era {id} (h{host}) through this build: {e}"
                );
                (
                    body["status"].as_u64(),
                    body["error"].as_str().unwrap_or("done"),
                    body["revision"].as_u64(),
                )
            } else {
                (
                    e["status"].as_u64(),
                    e["code"].as_str().unwrap(),
                    e["revision"].as_u64(),
                )
            };
            assert_eq!(
                (status, code, revision),
                (
                    original["status"].as_u64(),
                    original["code"].as_str().unwrap(),
                    original["revision"].as_u64()
                ),
                "old-era {id} (h{host}) {}: it answers otherwise than it did then ({original})",
                e["kind"]
            );
            old_era += 1;
        }
        assert_eq!(
            old_era,
            2 * VAULTS.len() * (OLD_ERA_SAMPLE + 1),
            "the app on h{host} settles and sends again {OLD_ERA_SAMPLE} done writes and one conflict of the old era per vault"
        );
    }
}

/// Every host runs this build, speaks protocols 1-2 and talks protocol 2 with every peer.
fn check_all_on_this_build(gateways: &[Gateway], new_binary: &Path) {
    for gateway in gateways {
        let exe = std::fs::read_link(format!("/proc/{}/exe", gateway.pid())).unwrap();
        assert_eq!(
            exe.canonicalize().unwrap(),
            new_binary.canonicalize().unwrap(),
            "{} runs this build",
            gateway.label
        );
        let (_, status) = gateway.cli_json(&["status"]);
        assert_eq!(
            (status["version"].as_str(), status["protocols"].as_str()),
            (
                Some(RELEASE),
                Some(ProtocolRange::THIS_BUILD.to_string().as_str())
            ),
            "{}: {status}",
            gateway.label
        );
        let (_, peers) = gateway.cli_json(&["peers"]);
        let seen: Vec<(String, Option<u64>)> = peers
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["label"].as_str().unwrap().to_string(),
                    p["protocol"].as_u64(),
                )
            })
            .collect();
        assert_eq!(seen.len(), 2, "{} trusts two peers: {peers}", gateway.label);
        assert!(
            seen.iter()
                .all(|(_, protocol)| *protocol == Some(u64::from(PROTOCOL_VERSION))),
            "{} sees every peer on protocol 2: {seen:?}",
            gateway.label
        );
    }
}
