//! Routes, discovery and failure detection across real hosts (issue 4), in the network-namespace
//! lab: three (or four) hosts on a `lan` switch and a `tailnet` switch (no multicast there).
//! Each test prints the figures it measured as `figure: ...` lines; the scenarios that report
//! figures repeat a few times and print the median.
//!
//! Run: `cargo test -p ferry-tests --test integration lab_routes:: -- --nocapture` (as root).

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::time::{Duration, Instant};

use ferry_harness::{wait_for, Gateway};
use ferry_tests::lab;
use ferry_tests::lab::Lab;
use serde_json::Value;

/// How many times a measured scenario repeats for its median.
const RUNS: usize = 3;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn figure(what: &str, samples: &[Duration]) {
    let shown: Vec<String> = samples.iter().map(|d| format!("{:.0?}", d)).collect();
    eprintln!(
        "figure: {what}: median {:?} over {} runs ({})",
        median(samples.to_vec()),
        samples.len(),
        shown.join(", ")
    );
}

/// `--tailnet` so each gateway announces its tailnet address in its mDNS TXT record.
fn tailnet_arg(lab: &Lab, host: usize) -> String {
    format!("{}:{}", lab.addr(host, lab::Nic::Tailnet), lab::FERRY_PORT)
}

fn start(lab: &Lab, host: usize, extra: &[&str]) -> Gateway {
    let tailnet = tailnet_arg(lab, host);
    let mut args = vec!["--tailnet", tailnet.as_str()];
    args.extend_from_slice(extra);
    lab.start_ferry(host, &format!("h{host}"), &args)
}

fn route_state(gateway: &Gateway, peer: &str, kind: &str) -> Option<String> {
    gateway
        .routes_to(peer)
        .into_iter()
        .find(|r| r["kind"] == kind)
        .and_then(|r| r["state"].as_str().map(String::from))
}

fn all_routes_down(gateway: &Gateway, peer: &str) -> bool {
    let routes = gateway.routes_to(peer);
    !routes.is_empty() && routes.iter().all(|r| r["state"] == "down")
}

fn carried_by(gateway: &Gateway, peer: &str) -> Option<String> {
    gateway
        .routes_to(peer)
        .into_iter()
        .find(|r| r["carried_last_call"] == true)
        .and_then(|r| r["kind"].as_str().map(String::from))
}

fn put(gateway: &Gateway, key: &str, timeout_s: &str) -> (i32, Value) {
    gateway.cli_json(&["put", "notes", key, "v", "--timeout", timeout_s])
}

fn create_notes(owner: &Gateway) {
    let out = owner.cli(&["vault", "create", "notes"]);
    assert!(
        out.status.success(),
        "vault create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Three gateways (mDNS on) that trust each other by node id only: every route comes from
/// discovery.
fn three_trusting_by_id(lab: &Lab) -> (Gateway, Gateway, Gateway) {
    let (h1, h2, h3) = (start(lab, 1, &[]), start(lab, 2, &[]), start(lab, 3, &[]));
    for me in [&h1, &h2, &h3] {
        for them in [&h1, &h2, &h3] {
            if me.node_id != them.node_id {
                let out = me.cli(&["trust", &them.node_id, "--label", &them.label]);
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    (h1, h2, h3)
}

/// A three-host lab of gateways trusting each other by node id, `notes` created on h1, h2's
/// LAN and tailnet routes to h1 up, and one write of `first_key` from h2 done; `None` when
/// the lab is skipped.
fn three_with_a_first_write(first_key: &str) -> Option<(Lab, Gateway, Gateway, Gateway)> {
    let lab = Lab::new(3)?;
    let (h1, h2, h3) = three_trusting_by_id(&lab);
    create_notes(&h1);
    wait_routes_up(&h2, "h1", &["lan", "tailnet"]);
    assert_eq!(put(&h2, first_key, "10").0, 0);
    Some((lab, h1, h2, h3))
}

fn wait_routes_up(gateway: &Gateway, peer: &str, kinds: &[&str]) {
    wait_for(
        &format!("{} to have {kinds:?} routes up to {peer}", gateway.label),
        Duration::from_secs(15),
        || {
            kinds
                .iter()
                .all(|k| route_state(gateway, peer, k).as_deref() == Some("up"))
                .then_some(())
        },
    );
}

#[test]
fn gateways_find_each_other_by_mdns_and_learn_lan_and_tailnet_routes() {
    let mut found = Vec::new();
    for _ in 0..RUNS {
        let Some(lab) = Lab::new(3) else { return };
        let started = Instant::now();
        let gateways = [
            start(&lab, 1, &[]),
            start(&lab, 2, &[]),
            start(&lab, 3, &[]),
        ];
        let took = wait_for(
            "every gateway to see the two others on mDNS",
            Duration::from_secs(10),
            || {
                gateways
                    .iter()
                    .all(|g| {
                        let (_, peers) = g.cli_json(&["peers"]);
                        peers.as_array().map(|p| p.len()) == Some(2)
                    })
                    .then(|| started.elapsed())
            },
        );
        // A bound that fails clearly, not the figure: the figure (the median, printed below)
        // is about 1.2 s here, and a CI run beside cold builds of other targets has taken
        // 2.2 s in one run of three.
        assert!(took < Duration::from_secs(5), "discovery took {took:?}");
        found.push(took);
        let (_, peers) = gateways[0].cli_json(&["peers"]);
        assert!(
            peers
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["trusted"] == false),
            "{peers}"
        );
        drop(gateways);
    }
    figure(
        "three gateways started together found each other by mDNS in",
        &found,
    );

    let Some(lab) = Lab::new(3) else { return };
    let (h1, h2, h3) = three_trusting_by_id(&lab);
    for (me, others) in [
        (&h1, ["h2", "h3"]),
        (&h2, ["h1", "h3"]),
        (&h3, ["h1", "h2"]),
    ] {
        for peer in others {
            wait_routes_up(me, peer, &["lan", "tailnet"]);
        }
    }
    let (code, routes) = h2.cli_json(&["routes"]);
    assert_eq!(code, 0);
    eprintln!("h2's routes after trust by id only: {routes}");
}

#[test]
fn an_untrusted_fourth_gateway_is_listed_untrusted_and_never_carries_a_call() {
    let Some(lab) = Lab::new(4) else { return };
    let (h1, h2, h3) = three_trusting_by_id(&lab);
    let h4 = start(&lab, 4, &[]);
    create_notes(&h1);
    wait_for(
        "h1 to list h4 as untrusted",
        Duration::from_secs(10),
        || {
            let (_, peers) = h1.cli_json(&["peers"]);
            peers
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["node_id"] == h4.node_id)
                .filter(|p| p["trusted"] == false)
                .map(|_| ())
        },
    );
    wait_routes_up(&h2, "h1", &["lan"]);
    for i in 0..5 {
        assert_eq!(put(&h2, &format!("k{i}"), "10").0, 0);
        assert_eq!(put(&h3, &format!("j{i}"), "10").0, 0);
    }
    // h4 trusts h1, one-sided: its calls are refused at h1's TLS layer and never run.
    let out = h4.cli(&["trust", &h1.node_id, "--label", "h1"]);
    assert!(out.status.success());
    let (code, answer) = put(&h4, "intruder", "5");
    assert_ne!(code, 0, "an untrusted gateway's write: {answer}");
    assert!(
        h1.routes_to("h4").is_empty(),
        "h1 has no route to an untrusted gateway"
    );
    let (_, vaults) = h1.cli_json(&["vault", "list"]);
    assert_eq!(
        vaults[0]["revision"].as_u64(),
        Some(10),
        "only the ten trusted writes ran: {vaults}"
    );
    let (_, h4_peers) = h4.cli_json(&["peers"]);
    eprintln!("h4 sees: {h4_peers}");
}

#[test]
fn a_cut_lan_cable_fails_over_to_the_tailnet_and_heals_back() {
    let mut failover = Vec::new();
    let mut detected = Vec::new();
    for run in 0..RUNS {
        let Some((lab, _h1, h2, h3)) = three_with_a_first_write("before") else {
            return;
        };
        assert_eq!(carried_by(&h2, "h1").as_deref(), Some("lan"));

        // A watcher notes when h2 marks its LAN route to h1 down, while the writer below works.
        let watcher = {
            let cli = h2.cli_handle();
            std::thread::spawn(move || {
                let started = Instant::now();
                while started.elapsed() < Duration::from_secs(20) {
                    let (_, routes) = cli.run(&["--json", "routes"]);
                    let lan_down =
                        routes.as_array().into_iter().flatten().any(|r| {
                            r["peer"] == "h1" && r["kind"] == "lan" && r["state"] == "down"
                        });
                    if lan_down {
                        return Some(started.elapsed());
                    }
                    // The same pause as `wait_for`: poll, don't spin.
                    std::thread::sleep(Duration::from_millis(10));
                }
                None
            })
        };
        lab.cut_cable(1);
        let cut = Instant::now();
        // Calls right after the cut may honestly fail (a write on the LAN connection that was
        // still proven alive settles to not_carried_out); the figure is the time until calls
        // are served over the tailnet.
        let mut outcomes = Vec::new();
        let took = wait_for(
            "a write from h2 to be served over the tailnet",
            Duration::from_secs(20),
            || {
                let (code, answer) = put(&h2, &format!("after-{}", outcomes.len()), "10");
                outcomes.push(answer["outcome"].as_str().unwrap_or("?").to_string());
                assert!(
                    code != 4 || answer["outcome"] == "outcome_unknown",
                    "{answer}"
                );
                (code == 0 && carried_by(&h2, "h1").as_deref() == Some("tailnet"))
                    .then(|| cut.elapsed())
            },
        );
        failover.push(took);
        detected.push(
            watcher
                .join()
                .unwrap()
                .expect("h2 never marked the cut LAN route down"),
        );
        eprintln!("run {run}: outcomes from the cut until the first tailnet call: {outcomes:?}");
        let (code, read) = h3.cli_json(&["get", "notes", "before"]);
        assert_eq!(
            (code, read["value"].as_str()),
            (0, Some("v")),
            "reads keep working: {read}"
        );

        lab.heal_cable(1);
        wait_for(
            "h2's LAN route to h1 to come back up",
            Duration::from_secs(15),
            || (route_state(&h2, "h1", "lan").as_deref() == Some("up")).then_some(()),
        );
        // A route back up is trusted with calls once it has answered steadily for a moment
        // (ferry_core::health's STEADY_FOR), so calls move back within a bounded wait.
        let mut healed = 0;
        wait_for(
            "calls from h2 to move back to the LAN",
            Duration::from_secs(5),
            || {
                healed += 1;
                assert_eq!(put(&h2, &format!("healed-{healed}"), "10").0, 0);
                (carried_by(&h2, "h1").as_deref() == Some("lan")).then_some(())
            },
        );
    }
    figure(
        "LAN cable cut until a peer marks that route down",
        &detected,
    );
    figure(
        "LAN cable cut to the first write served over the tailnet",
        &failover,
    );
}

#[test]
fn a_killed_owner_is_marked_down_fast_and_a_powered_off_one_is_unavailable_never_unknown() {
    let mut detect = Vec::new();
    let mut answer_times = Vec::new();
    for _ in 0..RUNS {
        let Some((_lab, mut h1, h2, _h3)) = three_with_a_first_write("warm") else {
            return;
        };
        h1.kill();
        let killed = Instant::now();
        let took = wait_for(
            "h2 to mark every route to the killed h1 down",
            Duration::from_secs(10),
            || all_routes_down(&h2, "h1").then(|| killed.elapsed()),
        );
        assert!(
            took < Duration::from_secs(2),
            "kill detected after {took:?}"
        );
        detect.push(took);
        let (code, answer) = put(&h2, "after-kill", "10");
        assert_eq!(
            (code, answer["outcome"].as_str()),
            (3, Some("unavailable")),
            "{answer}"
        );
        assert!(answer["detail"]
            .as_str()
            .unwrap()
            .ends_with("nothing was sent"));
        let elapsed = Duration::from_secs_f64(answer["elapsed_ms"].as_f64().unwrap() / 1000.0);
        assert!(
            elapsed < Duration::from_millis(50),
            "unavailable after {elapsed:?}"
        );
        answer_times.push(elapsed);
    }
    figure("owner killed until its routes are down on a peer", &detect);
    figure("write after that answered unavailable in", &answer_times);

    // Power off: both links cut, no ICMP comes back.
    let Some((lab, _h1, h2, _h3)) = three_with_a_first_write("warm") else {
        return;
    };
    lab.power_off(1);
    let off = Instant::now();
    // Silent for longer than the write liveness window (1 s): no pooled connection is proven
    // alive any more.
    wait_for("h2 to stop hearing h1", Duration::from_secs(10), || {
        h2.routes_to("h1")
            .iter()
            .all(|r| r["last_heard_ms_ago"].as_u64().is_none_or(|ms| ms > 1_000))
            .then_some(())
    });
    for i in 0..3 {
        let (code, answer) = put(&h2, &format!("off-{i}"), "10");
        assert_eq!(
            (code, answer["outcome"].as_str()),
            (3, Some("unavailable")),
            "{answer}"
        );
        let elapsed = answer["elapsed_ms"].as_f64().unwrap();
        assert!(
            elapsed < 2_500.0,
            "unavailable after {elapsed} ms; the connect timeout is 2 s"
        );
    }
    eprintln!(
        "figure: powered-off owner: routes down after {:?}",
        wait_for(
            "h2 to mark every route to the powered-off h1 down",
            Duration::from_secs(15),
            || all_routes_down(&h2, "h1").then(|| off.elapsed())
        )
    );
}

#[test]
fn a_stopped_owner_is_down_at_once_and_no_write_in_flight_is_lost() {
    let mut detect = Vec::new();
    for _ in 0..RUNS {
        let Some((_lab, mut h1, h2, _h3)) = three_with_a_first_write("warm") else {
            return;
        };
        // Writes in flight around the stop: each must be done, or honestly not carried out.
        let writer = {
            let h2_cli = h2.cli_handle();
            std::thread::spawn(move || {
                let mut results = Vec::new();
                for i in 0..40 {
                    let out = h2_cli.run(&[
                        "--json",
                        "put",
                        "notes",
                        &format!("race-{i}"),
                        "v",
                        "--timeout",
                        "5",
                    ]);
                    results.push((format!("race-{i}"), out));
                }
                results
            })
        };
        wait_for(
            "the writer to be under way",
            Duration::from_secs(10),
            || {
                let (_, vaults) = h1.cli_json(&["vault", "list"]);
                (vaults[0]["revision"].as_u64().unwrap_or(0) >= 4).then_some(())
            },
        );
        let out = h1.cli(&["stop"]);
        let stopped = Instant::now();
        assert!(out.status.success());
        let took = wait_for(
            "h2 to see h1's routes down after `ferry stop`",
            Duration::from_secs(5),
            || all_routes_down(&h2, "h1").then(|| stopped.elapsed()),
        );
        detect.push(took);
        let (code, answer) = put(&h2, "after-stop", "5");
        assert_eq!(
            (code, answer["outcome"].as_str()),
            (3, Some("unavailable")),
            "{answer}"
        );
        let results = writer.join().unwrap();
        assert_eq!(h1.wait_exit(Duration::from_secs(10)), Some(0));
        h1.restart();
        let mut done = HashSet::new();
        let mut unknown = Vec::new();
        for (key, (code, answer)) in &results {
            match (*code, answer["outcome"].as_str()) {
                (0, Some("done")) => {
                    done.insert(key.clone());
                }
                (3, Some("unavailable" | "not_carried_out")) => {}
                (1, Some("refused")) if answer["error"] == "busy" => {}
                // A request that left in the last moment before the owner's close (on the wire,
                // or not yet taken from QUIC by the door) has no answer to come back: honestly
                // unknown, and it must settle once the owner is back.
                (4, Some("outcome_unknown")) => {
                    let id = answer["request_id"].as_str().unwrap();
                    let settled =
                        wait_for(&format!("{key} to settle"), Duration::from_secs(30), || {
                            let (_, s) = h2.cli_json(&["settle", id]);
                            (s["state"] == "done" || s["state"] == "not_carried_out").then_some(s)
                        });
                    if settled["state"] == "done" {
                        done.insert(key.clone());
                    }
                    unknown.push(key.clone());
                }
                other => panic!("write {key} around the stop ended {other:?}: {answer}"),
            }
        }
        // One writer, one write at a time: at most the one in flight at the close is unknown.
        assert!(
            unknown.len() <= 1,
            "more than the write in flight at the close ended unknown: {unknown:?}"
        );
        for (key, _) in &results {
            let (code, _) = h1.cli_json(&["get", "notes", key]);
            assert_eq!(
                code == 0,
                done.contains(key),
                "{key}: on the owner iff answered done"
            );
        }
    }
    figure("`ferry stop` on the owner until its routes are down on a peer (CLI polling granularity included)", &detect);
}

#[test]
fn under_five_percent_loss_every_write_ends_honestly_and_none_runs_twice() {
    let Some(lab) = Lab::new(3) else { return };
    let (h1, h2, h3) = three_trusting_by_id(&lab);
    create_notes(&h1);
    wait_routes_up(&h2, "h1", &["lan"]);
    wait_routes_up(&h3, "h1", &["lan"]);
    lab.random_loss(1, 5);
    let started = Instant::now();
    let writers: Vec<_> = [(h2.cli_handle(), "b"), (h3.cli_handle(), "c")]
        .into_iter()
        .map(|(cli, who)| {
            std::thread::spawn(move || {
                (0..250)
                    .map(|i| {
                        let key = format!("{who}{i}");
                        let (code, answer) =
                            cli.run(&["--json", "put", "notes", &key, "v", "--timeout", "10"]);
                        (key, code, answer)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<_> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let took = started.elapsed();
    let dropped = lab.dropped_packets(1);
    lab.clear_drop(1);
    let mut counts = std::collections::BTreeMap::new();
    let mut ran = 0u64;
    for (key, code, answer) in &results {
        let outcome = answer["outcome"].as_str().unwrap_or("?").to_string();
        *counts.entry(outcome.clone()).or_insert(0) += 1;
        let gateway = if key.starts_with('b') { &h2 } else { &h3 };
        let truth = match (code, outcome.as_str()) {
            (0, "done") => true,
            (3, "unavailable" | "not_carried_out") => false,
            (4, "outcome_unknown") => {
                let id = answer["request_id"].as_str().unwrap();
                let settled =
                    wait_for(&format!("{key} to settle"), Duration::from_secs(30), || {
                        let (_, s) = gateway.cli_json(&["settle", id]);
                        (s["state"] == "done" || s["state"] == "not_carried_out").then_some(s)
                    });
                settled["state"] == "done"
            }
            other => panic!("write {key} ended {other:?}: {answer}"),
        };
        let (code, _) = h1.cli_json(&["get", "notes", key]);
        assert_eq!(
            code == 0,
            truth,
            "{key}: on the owner iff it settled done ({answer})"
        );
        ran += u64::from(truth);
    }
    let (_, vaults) = h1.cli_json(&["vault", "list"]);
    assert_eq!(
        vaults[0]["revision"].as_u64(),
        Some(ran),
        "every write that ran, ran once"
    );
    eprintln!("figure: 500 writes from two hosts under 5% loss on the owner's LAN in {took:?}: {counts:?}, dropped {dropped:?}");
    assert!(
        dropped.inbound + dropped.outbound > 0,
        "the loss rule dropped nothing"
    );
}

#[test]
fn with_the_owners_lan_cable_cut_a_reader_reads_through_a_replica_fast() {
    let mut took = Vec::new();
    for _ in 0..RUNS {
        let Some(lab) = Lab::new(3) else { return };
        // LAN routes only, so a cut cable leaves no way to the owner.
        let gateways: Vec<Gateway> = (1..=3)
            .map(|h| lab.start_ferry(h, &format!("h{h}"), &["--no-mdns"]))
            .collect();
        for me in &gateways {
            for them in &gateways {
                if me.node_id != them.node_id {
                    let lan = format!("{},lan", them.lan_addr());
                    let out = me.cli(&[
                        "trust",
                        &them.node_id,
                        "--label",
                        &them.label,
                        "--addr",
                        &lan,
                    ]);
                    assert!(out.status.success());
                }
            }
        }
        let (h1, h2, h3) = (&gateways[0], &gateways[1], &gateways[2]);
        create_notes(h1);
        assert_eq!(put(h1, "k", "10").0, 0);
        let out = h2.cli(&["vault", "follow", "notes", "--owner", "h1"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_for(
            "h2's replica to catch up and h3 to know of it",
            Duration::from_secs(15),
            || {
                let (_, replica) = h2.cli_json(&["vault", "list"]);
                let (_, seen) = h3.cli_json(&["vault", "list"]);
                let caught_up = replica[0]["lag_revisions"] == 0 && replica[0]["revision"] == 1;
                let known = seen[0]["replicas"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|l| l == "h2"));
                (caught_up && known).then_some(())
            },
        );
        lab.cut_cable(1);
        let started = Instant::now();
        let (code, read) = h3.cli_json(&["get", "notes", "k"]);
        let elapsed = started.elapsed();
        assert_eq!(code, 0, "{read}");
        assert_eq!(
            (
                read["value"].as_str(),
                read["source"].as_str(),
                read["stale"].as_bool()
            ),
            (Some("v"), Some("replica:h2"), Some(true))
        );
        // The CLI's own start is in `elapsed`; the read itself must not wait for a deadline.
        assert!(
            elapsed < Duration::from_millis(400),
            "read through the replica after {elapsed:?}"
        );
        took.push(elapsed);
    }
    figure(
        "owner's LAN cable cut, a read through a replica (CLI included)",
        &took,
    );
}

#[test]
fn a_tailnet_address_from_the_tailnet_client_reaches_peers_as_a_route() {
    let Some(lab) = Lab::new(2) else { return };
    // A fake `tailscale` first on PATH, answering `status --json` with h1's tailnet address.
    let bin = tempfile::tempdir().unwrap();
    let tailnet_ip = lab.addr(1, lab::Nic::Tailnet);
    let script = format!(
        "#!/bin/sh\n[ \"$1 $2\" = \"status --json\" ] || exit 2\necho '{{\"Self\": {{\"TailscaleIPs\": [\"{tailnet_ip}\", \"fd7a:115c:a1e0::1\"]}}}}'\n"
    );
    let fake = bin.path().join("tailscale");
    std::fs::write(&fake, script).unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&fake)
        .status()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // No --tailnet flag: the address can only come from the (fake) tailnet client.
    let h1 = lab.start_ferry_with_env(1, "h1", &[], &[("PATH", path.as_str())]);
    let h2 = start(&lab, 2, &[]);
    for (me, them) in [(&h1, &h2), (&h2, &h1)] {
        let out = me.cli(&["trust", &them.node_id, "--label", &them.label]);
        assert!(out.status.success());
    }
    let expected = format!("{tailnet_ip}:{}", lab::FERRY_PORT);
    wait_for(
        "h2 to learn h1's tailnet route from its TXT record",
        Duration::from_secs(10),
        || {
            h2.routes_to("h1")
                .into_iter()
                .find(|r| {
                    r["kind"] == "tailnet"
                        && r["address"] == expected.as_str()
                        && r["source"] == "txt"
                })
                .map(|_| ())
        },
    );
    wait_routes_up(&h2, "h1", &["tailnet"]);
}
