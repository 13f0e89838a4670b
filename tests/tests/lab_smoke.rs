//! The first lab test: three gateways on three hosts, each reachable over a LAN and a tailnet.
//! A write through one host reaches the owner on another and reads agree on a third; with the
//! owner's LAN cable pulled a write still completes over the tailnet; with the owner's process
//! killed a write answers exit 3 (nothing was written) within its timeout. Prints what it
//! measured.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ferry_harness::{wait_for, Gateway};
use ferry_tests::lab::{trust_all, Dropped, Lab, Nic};
use serde_json::Value;

/// The last lines of a gateway's log, for failure messages.
fn log_tail(gateway: &Gateway) -> String {
    let log = gateway.log();
    let lines: Vec<&str> = log.lines().collect();
    let from = lines.len().saturating_sub(40);
    format!(
        "--- last lines of {}'s log ---\n{}",
        gateway.label,
        lines[from..].join("\n")
    )
}

/// `ferry --json put VAULT KEY VALUE --timeout S` through `gateway`: exit code, answer, time.
fn timed_put(gateway: &Gateway, key: &str, value: &str, timeout_s: &str) -> (i32, Value, Duration) {
    let started = Instant::now();
    let (code, answer) = gateway.cli_json(&["put", "notes", key, value, "--timeout", timeout_s]);
    (code, answer, started.elapsed())
}

#[test]
fn three_hosts_a_write_through_one_reaches_the_owner_on_another_and_a_third_reads_it() {
    let Some(lab) = Lab::new(3) else { return };
    let started = Instant::now();
    let h1 = lab.start_ferry(1, "h1", &["--no-mdns"]);
    let h2 = lab.start_ferry(2, "h2", &["--no-mdns"]);
    let h3 = lab.start_ferry(3, "h3", &["--no-mdns"]);
    eprintln!(
        "measured: three gateways started in {:?}",
        started.elapsed()
    );
    trust_all(&[&h1, &h2, &h3]);
    let out = h1.cli(&["vault", "create", "notes"]);
    assert!(
        out.status.success(),
        "vault create on h1: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, answer, took) = timed_put(&h2, "k", "v", "10");
    assert_eq!(
        (code, answer["outcome"].as_str()),
        (0, Some("done")),
        "{answer}\n{}",
        log_tail(&h2)
    );
    eprintln!("measured: put through h2 to the owner h1 in {took:?}");
    let revision = answer["revision"].as_u64();
    let (code, read) = h3.cli_json(&["get", "notes", "k"]);
    assert_eq!(code, 0, "{read}");
    assert_eq!(
        (
            read["value"].as_str(),
            read["revision"].as_u64(),
            read["source"].as_str()
        ),
        (Some("v"), revision, Some("owner"))
    );
}

#[test]
fn the_lab_s_faults_act_on_the_links_they_name() {
    let Some(lab) = Lab::new(2) else { return };
    let bound = Duration::from_secs(5);

    let addrs = lab.exec(1, "ip", &["-o", "addr", "show"]);
    let addrs = String::from_utf8_lossy(&addrs.stdout);
    for expected in ["lan0    inet 10.77.0.1/24", "ts0    inet 100.77.0.1/24"] {
        assert!(addrs.contains(expected), "h1 has {expected}: {addrs}");
    }
    assert!(
        !addrs.contains("inet6"),
        "IPv6 is off in the hosts: {addrs}"
    );

    let carriers = |host| {
        (
            lab.has_carrier(host, Nic::Lan),
            lab.has_carrier(host, Nic::Tailnet),
        )
    };
    let wait_carriers = |what: &str, host, want| {
        wait_for(what, bound, || (carriers(host) == want).then_some(()));
    };
    assert_eq!((carriers(1), carriers(2)), ((true, true), (true, true)));
    lab.cut_cable(1);
    wait_carriers("h1's lan0 to lose its carrier", 1, (false, true));
    assert_eq!(carriers(2), (true, true), "h2 is untouched");
    lab.heal_cable(1);
    wait_carriers("h1's lan0 to get its carrier back", 1, (true, true));
    lab.cut_tailnet(1);
    wait_carriers("h1's ts0 to lose its carrier", 1, (true, false));
    lab.heal_tailnet(1);
    lab.power_off(1);
    wait_carriers("h1 to lose both carriers", 1, (false, false));
    lab.power_on(1);
    wait_carriers("h1 to get both carriers back", 1, (true, true));

    // 200 datagrams from h2 to h1's LAN address (port 9, discard).
    let send = |to: &str| {
        let script = format!("for i in $(seq 200); do echo x > /dev/udp/{to}/9; done; true");
        let out = lab.exec(2, "bash", &["-c", &script]);
        assert!(out.status.success(), "bash in h2: {out:?}");
    };
    lab.silent_drop(1, Nic::Lan);
    assert!(
        lab.has_carrier(1, Nic::Lan),
        "a silent drop keeps the link up"
    );
    send("10.77.0.1");
    let dropped = lab.dropped_packets(1);
    assert!(
        dropped.inbound >= 200,
        "h1 dropped all 200 datagrams: {dropped:?}"
    );
    send("100.77.0.1");
    assert_eq!(lab.dropped_packets(1), dropped, "ts0 is not dropped");
    lab.clear_drop(1);
    assert_eq!(lab.dropped_packets(1), Dropped::default(), "no rules left");
    lab.clear_drop(1); // idempotent

    // Inbound only: the datagrams that get through are answered with ICMP, which the outbound
    // rule then loses at random too.
    lab.random_loss(1, 50);
    send("10.77.0.1");
    let lost = lab.dropped_packets(1);
    eprintln!("measured: random_loss 50% dropped {lost:?} (of 200 datagrams in)");
    assert!(
        (40..=160).contains(&lost.inbound),
        "50% loss of 200 datagrams dropped {lost:?}"
    );
    lab.clear_drop(1);
}

/// The harness's handle on a gateway: the pid is ferry's own, stop and restart keep the
/// identity, and a kill is final.
#[test]
fn a_lab_gateway_stops_restarts_and_dies_on_request() {
    let Some(lab) = Lab::new(1) else { return };
    let mut h1 = lab.start_ferry(1, "h1", &["--no-mdns"]);
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", h1.pid())).unwrap();
    assert!(
        comm.starts_with("ferry"),
        "the pid is ferry's own, not `ip`'s: {comm:?}"
    );
    let (code, status) = h1.cli_json(&["status"]);
    assert_eq!(code, 0, "{status}");
    assert_eq!(status["node_id"].as_str(), Some(h1.node_id.as_str()));

    h1.signal(ferry_harness::SIGSTOP);
    h1.signal(ferry_harness::SIGCONT);
    assert!(h1.running());

    let started = Instant::now();
    assert_eq!(h1.stop(), Some(0), "ferry stop exits 0\n{}", log_tail(&h1));
    eprintln!("measured: ferry stop took {:?}", started.elapsed());
    let started = Instant::now();
    h1.restart();
    eprintln!("measured: restart took {:?}", started.elapsed());
    let (_, id) = h1.cli_json(&["id"]);
    assert_eq!(
        id["node_id"].as_str(),
        Some(h1.node_id.as_str()),
        "same identity"
    );
    assert_eq!(
        id["addresses"][0].as_str(),
        Some("0.0.0.0:7420"),
        "same port: {id}"
    );

    h1.kill();
    assert!(!h1.running());
    let out = h1.cli(&["status"]);
    assert_eq!(out.status.code(), Some(3), "no gateway runs after a kill");
}
