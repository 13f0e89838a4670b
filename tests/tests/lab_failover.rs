//! Fast failover (issue 13), in the network-namespace lab: h1 owns `notes`; an app on h2 and
//! one on h3 (`ferry-lab-app` in steady mode, `ferry_tests::lab_steady`) each write a fresh key
//! and read back the newest one every 10 ms through their own gateway, while the test cuts h1's
//! LAN silently, kills h1's gateway, powers h1 off or flaps its LAN link. The readers' gateways
//! run with `cache_fresh_ms = 0`, so every read asks the owner; the owner's rate limit is off.
//!
//! Each timing scenario repeats [`RUNS`] times and prints its medians as `figure:` lines; the
//! history of every run (what the apps were told, settled, and what h1's database holds) is
//! checked against Ferry's promises (`ferry_tests::history`). The bounds asserted are loose
//! (a regression to the old seconds fails them); the targets are in `docs/performance.md`,
//! "Measured in the lab".
//!
//! Run: `FERRY_LAB_REQUIRED=1 cargo test -p ferry-tests --test integration lab_failover:: -- --nocapture`
//! (as root).

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use ferry_harness::{vault_revision, wait_for};
use ferry_harness::{Cli, Gateway, Options};
use ferry_tests::history::{self, History, OwnerState, Read, Write, WriteFate};
use ferry_tests::lab::{trust_all, Lab, Nic};
use ferry_tests::lab_app::now_ms;
use ferry_tests::lab_steady::APP;
use ferry_tests::owner_db::{journal, open_read_only, records, settled_fate, told_fate};
use serde_json::{json, Value};

/// How many times a timed scenario repeats for its median.
const RUNS: usize = 5;
/// The pause between an app's writes, and between its reads.
const PACE_MS: u64 = 10;
const VAULT: &str = "notes";
/// How long the flapping link flaps (`FERRY_LAB_FLAP_SECONDS` overrides it).
const FLAP_FOR: Duration = Duration::from_secs(60);

/// h1 (the owner, rate limit off) and the two callers (no cache freshness: every read asks).
const OWNER_CONFIG: &str = "[capacity]\nrate_per_minute = 0\n";
const CALLER_CONFIG: &str = "cache_fresh_ms = 0\n";

/// An app running inside a caller's host.
struct App {
    host: usize,
    label: String,
    child: Child,
    out: PathBuf,
}

/// A lab of three hosts with the apps running.
struct Scene {
    lab: Lab,
    /// h1, h2, h3.
    gateways: Vec<Gateway>,
    apps: Vec<App>,
    files: tempfile::TempDir,
}

impl Scene {
    /// Builds the lab, starts the gateways and the apps, and waits until every app has been
    /// served writes and owner reads for a while (every route to h1 in use and warm). `None`
    /// when the lab is skipped. The lab is alone (a timed scenario).
    fn start() -> Option<Scene> {
        Scene::start_in(Lab::new(3)?)
    }

    /// As [`Scene::start`], in a lab beside others: for a scenario that checks promises and
    /// measures no time.
    fn start_beside_others() -> Option<Scene> {
        Scene::start_in(Lab::new_beside_others(3)?)
    }

    fn start_in(lab: Lab) -> Option<Scene> {
        let start = |host: usize, config: &str| {
            lab.start_ferry_with(
                host,
                &format!("h{host}"),
                Options::new().config(config).args(&["--no-mdns"]),
            )
        };
        let gateways = vec![
            start(1, OWNER_CONFIG),
            start(2, CALLER_CONFIG),
            start(3, CALLER_CONFIG),
        ];
        trust_all(&gateways.iter().collect::<Vec<_>>());
        let out = gateways[0].cli(&["vault", "create", VAULT]);
        assert!(out.status.success(), "{}", ferry_harness::describe(&out));
        for caller in &gateways[1..] {
            wait_routes(&caller.cli_handle(), "h1", "up", &["lan", "tailnet"]);
        }
        let files = tempfile::tempdir().unwrap();
        let exe = Path::new(env!("CARGO_BIN_EXE_ferry-lab-app"));
        let apps = gateways[1..]
            .iter()
            .map(|gateway| {
                let out = files.path().join(format!("{}.jsonl", gateway.label));
                let settings = json!({
                    "mode": "steady",
                    "label": gateway.label,
                    "home": gateway.home,
                    "vault": VAULT,
                    "out": out,
                    "stop": files.path().join("stop"),
                    "pace_ms": PACE_MS,
                })
                .to_string();
                let log = files.path().join(format!("{}.log", gateway.label));
                let child = lab.spawn_in(
                    gateway.host(),
                    exe,
                    &[],
                    &[(ferry_tests::lab_app::SETTINGS_VAR, &settings)],
                    &log,
                );
                App {
                    host: gateway.host(),
                    label: gateway.label.to_string(),
                    child,
                    out,
                }
            })
            .collect();
        let scene = Scene {
            lab,
            gateways,
            apps,
            files,
        };
        wait_for(
            "every app to be served 30 writes and 30 owner reads",
            Duration::from_secs(30),
            || {
                scene
                    .apps
                    .iter()
                    .all(|app| {
                        let events = events_of(app);
                        count(&events, |e| e["kind"] == "write" && e["code"] == "done") >= 30
                            && count(&events, served_by_owner) >= 30
                    })
                    .then_some(())
            },
        );
        Some(scene)
    }

    fn h1(&mut self) -> &mut Gateway {
        &mut self.gateways[0]
    }

    /// Tells the apps to stop, waits (bounded) for them to settle and end, and returns what
    /// each did, by host.
    fn stop_apps(&mut self) -> BTreeMap<usize, Vec<Value>> {
        std::fs::write(self.files.path().join("stop"), b"").unwrap();
        for app in &mut self.apps {
            let started = Instant::now();
            loop {
                if let Some(status) = app.child.try_wait().unwrap() {
                    assert!(status.success(), "the app on {} ended {status}", app.label);
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "the app on {} did not end within a minute of being told to stop",
                    app.label
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.apps
            .iter()
            .map(|app| (app.host, events_of(app)))
            .collect()
    }

    /// Checks every app's history against h1's database: no write ran twice or unasked, every
    /// `done` is there with its revision and value, nothing that did not run is, every unknown
    /// outcome settled, and no app read a revision older than one it had seen.
    fn check_history(&self, events: &BTreeMap<usize, Vec<Value>>) {
        let node_ids: BTreeMap<usize, String> = self
            .gateways
            .iter()
            .map(|g| (g.host(), g.node_id.to_string()))
            .collect();
        let mut history = History::default();
        for (host, events) in events {
            let settles: BTreeMap<&str, &Value> = events
                .iter()
                .filter(|e| e["kind"] == "settle")
                .map(|e| (e["id"].as_str().unwrap(), e))
                .collect();
            for e in events {
                let at_ms = e["sent_ms"].as_u64().unwrap_or(0);
                match e["kind"].as_str() {
                    Some("write") => {
                        let id = e["id"].as_str().unwrap();
                        let told = told_fate(e["code"].as_str().unwrap(), e["revision"].as_u64());
                        let settled = settles.get(id).and_then(|s| settled_fate(&s["body"]));
                        history.writes.push(Write {
                            request_id: id.to_string(),
                            host: format!("h{host}"),
                            caller: node_ids[host].clone(),
                            app: APP.into(),
                            incarnation: 0,
                            vault: VAULT.into(),
                            key: e["key"].as_str().unwrap().into(),
                            what: "put".into(),
                            told: Some(told),
                            settled,
                            at_ms,
                            // The app's reader runs beside its writer: a write's revision is
                            // seen when its answer came.
                            told_ms: e["answered_ms"].as_u64(),
                            answered_ms: None,
                            effect: None,
                            if_match: None,
                        });
                    }
                    Some("read") => history.reads.push(Read {
                        host: format!("h{host}"),
                        app: APP.into(),
                        incarnation: 0,
                        vault: VAULT.into(),
                        key: e["key"].as_str().unwrap().into(),
                        answer: (e["code"] == "found").then(|| {
                            (
                                e["revision"]
                                    .as_u64()
                                    .expect("a found record has a revision"),
                                e["source"].as_str().unwrap_or("?").to_string(),
                                e["stale"] == true,
                            )
                        }),
                        not_found_at: (e["code"] == "not_found").then_some(0),
                        at_ms,
                    }),
                    _ => {}
                }
            }
        }
        let conn = open_read_only(&self.gateways[0].home.join("ferry.db"));
        let owner = OwnerState {
            journal: journal(&conn, "h1"),
            revision: vault_revision(&conn, VAULT),
            records: records(&conn, VAULT),
        };
        for write in &history.writes {
            let stored = owner.records.get(&write.key).map(|(revision, _)| *revision);
            match write.fate() {
                Some(WriteFate::Done(revision)) => assert_eq!(
                    stored,
                    Some(*revision),
                    "{} ({} via {}) was told done at {revision}",
                    write.request_id,
                    write.key,
                    write.host
                ),
                Some(_) => assert_eq!(
                    stored, None,
                    "{} ({} via {}) did not run, yet its key is on the owner",
                    write.request_id, write.key, write.host
                ),
                None => panic!(
                    "{} ({} via {}) told {:?} never settled",
                    write.request_id, write.key, write.host, write.told
                ),
            }
        }
        let owners = BTreeMap::from([(VAULT.to_string(), owner)]);
        let violations = history::check(&history, &owners, &BTreeMap::new());
        assert!(
            violations.is_empty(),
            "the history breaks Ferry's promises:\n{}",
            violations
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// What an app has written to its output so far (a line being written is skipped).
fn events_of(app: &App) -> Vec<Value> {
    std::fs::read_to_string(&app.out)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

fn count(events: &[Value], what: impl Fn(&Value) -> bool) -> usize {
    events.iter().filter(|e| what(e)).count()
}

/// A read the owner answered (not the cache's or a replica's stale value).
fn served_by_owner(e: &Value) -> bool {
    e["kind"] == "read" && e["code"] == "found" && e["stale"] == false && e["source"] == "owner"
}

fn ms(e: &Value, field: &str) -> u64 {
    e[field].as_u64().unwrap_or(0)
}

/// `cli`'s gateway's routes to `peer`.
fn routes_to(cli: &Cli, peer: &str) -> Vec<Value> {
    let (code, routes) = cli.run(&["--json", "routes"]);
    assert_eq!(code, 0, "{routes}");
    routes
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["peer"] == peer)
        .cloned()
        .collect()
}

fn wait_routes(cli: &Cli, peer: &str, state: &str, kinds: &[&str]) {
    wait_for(
        &format!("{kinds:?} routes to {peer} to be {state}"),
        Duration::from_secs(20),
        || {
            let routes = routes_to(cli, peer);
            kinds
                .iter()
                .all(|kind| {
                    routes
                        .iter()
                        .any(|r| r["kind"] == *kind && r["state"] == state)
                })
                .then_some(())
        },
    );
}

fn carried_by(cli: &Cli, peer: &str) -> Option<String> {
    routes_to(cli, peer)
        .into_iter()
        .find(|r| r["carried_last_call"] == true)
        .and_then(|r| r["kind"].as_str().map(String::from))
}

/// A thread that notes how long after its start `cli`'s gateway took to mark every route to
/// `peer` down (polling `ferry routes`, which takes a few milliseconds a look).
fn watch_all_down(cli: Cli, peer: &'static str) -> std::thread::JoinHandle<Option<Duration>> {
    std::thread::spawn(move || {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            let routes = routes_to(&cli, peer);
            if !routes.is_empty() && routes.iter().all(|r| r["state"] == "down") {
                return Some(started.elapsed());
            }
        }
        None
    })
}

fn median(mut samples: Vec<u64>) -> u64 {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn figure(what: &str, samples: &[u64]) -> u64 {
    let m = median(samples.to_vec());
    eprintln!("figure: {what}: median {m} ms of {samples:?}");
    m
}

/// Writes that left and did not come back `done` or refused: the costly honest outcomes.
fn lost(e: &Value) -> bool {
    e["kind"] == "write"
        && matches!(
            e["code"].as_str(),
            Some("not_carried_out" | "outcome_unknown" | "app_unknown")
        )
}

#[test]
fn a_silent_lan_cut_moves_writes_within_300_ms_and_reads_within_100_ms_and_heals_back() {
    let (mut writes, mut reads, mut heals, mut lost_counts) = (vec![], vec![], vec![], vec![]);
    for run in 0..RUNS {
        let Some(mut scene) = Scene::start() else {
            return;
        };
        let clis: Vec<Cli> = scene.gateways[1..].iter().map(|g| g.cli_handle()).collect();
        for cli in &clis {
            assert_eq!(carried_by(cli, "h1").as_deref(), Some("lan"));
        }
        scene.lab.silent_drop(1, Nic::Lan);
        // Taken once `nft` has returned, so the rule is in force: a call sent after this
        // instant cannot have slipped through on the LAN before the cut.
        let cut_ms = now_ms();
        // Every app served a write and an owner read that were asked after the cut.
        let firsts = wait_for(
            "every app to be served over the tailnet after the cut",
            Duration::from_secs(20),
            || {
                let firsts: Option<Vec<(u64, u64)>> = scene
                    .apps
                    .iter()
                    .map(|app| {
                        let events = events_of(app);
                        let after = |e: &&Value| ms(e, "sent_ms") >= cut_ms;
                        let write = events
                            .iter()
                            .filter(after)
                            .find(|e| e["kind"] == "write" && e["code"] == "done")?;
                        let read = events.iter().filter(after).find(|e| served_by_owner(e))?;
                        Some((
                            ms(write, "answered_ms") - cut_ms,
                            ms(read, "answered_ms") - cut_ms,
                        ))
                    })
                    .collect();
                firsts
            },
        );
        writes.push(firsts.iter().map(|f| f.0).max().unwrap());
        reads.push(firsts.iter().map(|f| f.1).max().unwrap());
        // Let the tailnet carry for a while, then plug the cable back in.
        wait_for(
            "h2's LAN route to h1 to go down",
            Duration::from_secs(10),
            || {
                routes_to(&clis[0], "h1")
                    .iter()
                    .any(|r| r["kind"] == "lan" && r["state"] == "down")
                    .then_some(())
            },
        );
        let heal_ms = now_ms();
        scene.lab.clear_drop(1);
        heals.push(wait_for(
            "calls to return to the LAN",
            Duration::from_secs(10),
            || {
                clis.iter()
                    .all(|cli| carried_by(cli, "h1").as_deref() == Some("lan"))
                    .then(|| now_ms() - heal_ms)
            },
        ));
        let events = scene.stop_apps();
        let mut codes: BTreeMap<String, usize> = BTreeMap::new();
        for (host, events) in &events {
            let at_cut: Vec<&Value> = events
                .iter()
                // Every write sent before the heal: one in flight at the cut may have left
                // before `cut_ms`, and nothing before the cut may be lost either.
                .filter(|e| ms(e, "sent_ms") < heal_ms && lost(e))
                .collect();
            assert!(
                at_cut.len() <= 1,
                "run {run}: more than the one write in flight at the cut was lost on h{host}: {at_cut:?}"
            );
            lost_counts.push(at_cut.len() as u64);
            for e in events.iter().filter(|e| ms(e, "sent_ms") >= cut_ms) {
                let kind = e["kind"].as_str().unwrap_or("?");
                *codes
                    .entry(format!("{kind} {}", e["code"].as_str().unwrap_or("?")))
                    .or_default() += 1;
            }
        }
        eprintln!(
            "run {run}: first write {} ms, first read {} ms after the cut; back on the LAN {} ms after the heal; calls from the cut on: {codes:?}",
            writes[run], reads[run], heals[run]
        );
        scene.check_history(&events);
    }
    let write = figure(
        "silent LAN cut to the first write served (slower of two apps)",
        &writes,
    );
    let read = figure(
        "silent LAN cut to the first owner read served (slower of two apps)",
        &reads,
    );
    let heal = figure(
        "cable healed until both callers' calls are on the LAN again",
        &heals,
    );
    eprintln!("figure: writes lost at the cut, per writer and run: {lost_counts:?}");
    // Loose bounds: the old behaviour (seconds) fails them; the targets are medians in
    // docs/performance.md, "Measured in the lab".
    assert!(write < 1_000, "first write after a cut took {write} ms");
    assert!(read < 500, "first read after a cut took {read} ms");
    assert!(heal < 2_000, "calls came back to the LAN after {heal} ms");
}

#[test]
fn a_killed_owner_is_down_within_100_ms_and_the_next_write_is_refused_at_once() {
    let (mut detects, mut refusals) = (vec![], vec![]);
    for run in 0..RUNS {
        let Some(mut scene) = Scene::start() else {
            return;
        };
        let watcher = watch_all_down(scene.gateways[1].cli_handle(), "h1");
        let kill_ms = now_ms();
        scene.h1().kill();
        let detect = watcher
            .join()
            .unwrap()
            .expect("h2 never marked h1's routes down");
        let down_ms = kill_ms + detect.as_millis() as u64;
        detects.push(detect.as_millis() as u64);
        // Writes asked once the routes are down are refused at once: nothing was sent.
        let refused = wait_for(
            "h2's app to ask a write after h1's routes went down",
            Duration::from_secs(10),
            || {
                let events = events_of(&scene.apps[0]);
                let asked: Vec<&Value> = events
                    .iter()
                    .filter(|e| e["kind"] == "write" && ms(e, "sent_ms") > down_ms)
                    .collect();
                (asked.len() >= 5).then(|| {
                    for e in &asked {
                        assert_eq!(e["code"], "unavailable", "run {run}: {e}");
                        assert!(
                            e["detail"]
                                .as_str()
                                .unwrap_or("")
                                .ends_with("nothing was sent"),
                            "{e}"
                        );
                    }
                    ms(asked[0], "answered_ms") - ms(asked[0], "sent_ms")
                })
            },
        );
        refusals.push(refused);
        eprintln!("run {run}: routes down {detect:?} after the kill; the next write refused in {refused} ms");
        // The owner comes back: every write left in doubt settles.
        scene.h1().restart();
        for gateway in &scene.gateways[1..] {
            wait_routes(&gateway.cli_handle(), "h1", "up", &["lan", "tailnet"]);
        }
        let events = scene.stop_apps();
        scene.check_history(&events);
    }
    let detect = figure(
        "owner killed while calls flow until its routes are down on a caller",
        &detects,
    );
    let refused = figure(
        "the next write after that answered unavailable in",
        &refusals,
    );
    assert!(detect < 500, "a killed owner was known after {detect} ms");
    assert!(
        refused < 50,
        "a write to a known-dead owner took {refused} ms"
    );
}

#[test]
fn a_powered_off_owner_is_unavailable_within_500_ms_and_never_unknown_after() {
    let mut detects = vec![];
    for run in 0..RUNS {
        let Some(scene) = Scene::start() else {
            return;
        };
        let watchers: Vec<_> = scene.gateways[1..]
            .iter()
            .map(|g| watch_all_down(g.cli_handle(), "h1"))
            .collect();
        let off_ms = now_ms();
        scene.lab.power_off(1);
        let detect = watchers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap()
                    .expect("a caller never marked h1's routes down")
            })
            .max()
            .unwrap();
        let down_ms = off_ms + detect.as_millis() as u64;
        detects.push(detect.as_millis() as u64);
        // Every write asked after that, on both callers, is `unavailable`, never unknown.
        wait_for(
            "both apps to ask writes after h1's routes went down",
            Duration::from_secs(10),
            || {
                scene
                    .apps
                    .iter()
                    .all(|app| {
                        let events = events_of(app);
                        count(&events, |e| {
                            e["kind"] == "write" && ms(e, "sent_ms") > down_ms
                        }) >= 5
                    })
                    .then_some(())
            },
        );
        let mut scene = scene;
        let on_ms = now_ms();
        scene.lab.power_on(1);
        for gateway in &scene.gateways[1..] {
            wait_routes(&gateway.cli_handle(), "h1", "up", &["lan", "tailnet"]);
        }
        let events = scene.stop_apps();
        let mut before: BTreeMap<String, usize> = BTreeMap::new();
        for (host, events) in &events {
            for e in events.iter().filter(|e| e["kind"] == "write") {
                let sent = ms(e, "sent_ms");
                if (down_ms..on_ms).contains(&sent) {
                    assert_eq!(e["code"], "unavailable", "run {run}, h{host}: {e}");
                } else if (off_ms..down_ms).contains(&sent) {
                    *before
                        .entry(e["code"].as_str().unwrap_or("?").into())
                        .or_default() += 1;
                }
            }
        }
        eprintln!("run {run}: routes down {detect:?} after the power-off; writes asked before that: {before:?}");
        scene.check_history(&events);
    }
    let detect = figure(
        "owner powered off while calls flow until both callers mark it down",
        &detects,
    );
    assert!(
        detect < 1_500,
        "a powered-off owner was known after {detect} ms"
    );
}

#[test]
fn a_flapping_lan_link_never_runs_a_write_twice_and_the_route_follows_the_link() {
    // Its bound counts route switches against cuts, not milliseconds: it runs beside the
    // campaigns, whose minute it matches.
    let Some(mut scene) = Scene::start_beside_others() else {
        return;
    };
    let flap_for = std::env::var("FERRY_LAB_FLAP_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(FLAP_FOR, Duration::from_secs);
    let cli = scene.gateways[1].cli_handle();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The route h2's calls use, sampled as often as `ferry routes` allows.
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut samples: Vec<(u64, String)> = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(kind) = carried_by(&cli, "h1") {
                    samples.push((now_ms(), kind));
                }
            }
            samples
        })
    };
    let started = Instant::now();
    let mut cuts = 0;
    while started.elapsed() < flap_for {
        // The fault schedule itself: cut 200 ms, then 1.8 s of link.
        scene.lab.silent_drop(1, Nic::Lan);
        cuts += 1;
        std::thread::sleep(Duration::from_millis(200));
        scene.lab.clear_drop(1);
        std::thread::sleep(Duration::from_millis(1_800));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let samples = sampler.join().unwrap();
    let switches = samples.windows(2).filter(|w| w[0].1 != w[1].1).count();
    let events = scene.stop_apps();
    let mut codes: BTreeMap<String, usize> = BTreeMap::new();
    for e in events.values().flatten().filter(|e| e["kind"] == "write") {
        *codes
            .entry(e["code"].as_str().unwrap_or("?").into())
            .or_default() += 1;
    }
    eprintln!(
        "figure: flapping LAN ({cuts} cuts of 200 ms in {flap_for:?}): h2's calls switched route {switches} times ({} samples); writes by outcome: {codes:?}",
        samples.len()
    );
    assert!(
        switches <= 2 * cuts + 2,
        "the route choice switched {switches} times for {cuts} cuts: faster than the link"
    );
    scene.check_history(&events);
}
