//! `ferry doctor` in the lab (issue 17): five hosts on a LAN whose switch drops mDNS
//! multicast. From host 1 the doctor names each fault of the others with a fix: host 2 answers
//! at its address but its announcements never arrive (multicast dropped on the LAN), host 3 is
//! powered off (silent), host 4's gateway is killed (refused: process down), host 5's clock is
//! ten minutes ahead (`FERRY_DANGEROUS_CLOCK_OFFSET_MS`, a test-build fault: a namespace has
//! no clock of its own), and a peer trusted at host 2's address under another key (wrong key). Needs root; says SKIPPED without
//! it (a failure with `FERRY_LAB_REQUIRED=1`).

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ferry_harness::wait_for;
use ferry_tests::lab::{self, trust_all, Lab};

#[test]
fn the_doctor_names_multicast_dropped_a_silent_host_a_dead_gateway_a_wrong_clock_and_a_wrong_key() {
    // It checks what the doctor says, not how fast: beside the campaigns.
    let Some(lab) = Lab::new_beside_others(5) else {
        return;
    };
    lab.drop_lan_multicast();
    let ten_minutes_ahead = [("FERRY_DANGEROUS_CLOCK_OFFSET_MS", "600000")];
    let gateways: Vec<_> = (1..=5)
        .map(|host| {
            let tailnet = format!("{}:{}", lab.addr(host, lab::Nic::Tailnet), lab::FERRY_PORT);
            let env: &[(&str, &str)] = if host == 5 { &ten_minutes_ahead } else { &[] };
            lab.start_ferry_with_env(host, &format!("h{host}"), &["--tailnet", &tailnet], env)
        })
        .collect();
    let refs: Vec<_> = gateways.iter().collect();
    trust_all(&refs);
    let (h1, h2) = (&gateways[0], &gateways[1]);
    let stranger = ferry_ticket::NodeKey::generate()
        .unwrap()
        .node_id()
        .to_string();
    let at_h2 = format!("{},lan", h2.lan_addr());
    let out = h1.cli(&["trust", &stranger, "--label", "imposter", "--addr", &at_h2]);
    assert!(out.status.success(), "{}", ferry_harness::describe(&out));

    // Multicast works inside host 1 (its own announcement comes back) before the doctor can
    // blame the network between the hosts.
    wait_for(
        "h1 to hear its own mDNS announcement and run 8 s",
        Duration::from_secs(20),
        || {
            let (_, status) = h1.cli_json(&["status"]);
            // And long enough for every running peer's announcement to have arrived, had the
            // network let it through: discovery must have run `doctor::MDNS_SETTLE` (5 s), and
            // it starts after the tailnet's detection, which may take up to 2 s of the uptime.
            (status["discovery"] == "running (own announcement heard)"
                && status["uptime_s"].as_u64() >= Some(8))
            .then_some(())
        },
    );
    lab.power_off(3);
    let mut gateways = gateways;
    gateways[3].kill();
    let h1 = &gateways[0];

    let (code, report) = h1.cli_json(&["doctor"]);
    assert_eq!(code, 1, "problems found: {report:#}");
    for (peer, words) in [
        ("peer h2", "multicast is dropped between the two machines"),
        ("peer h3", "silent: nothing answers"),
        ("peer h4", "no gateway is running there"),
        (
            "peer h5",
            "clock skew: its clock is 10 min 0 s ahead of this machine's",
        ),
        ("peer imposter", "wrong key"),
    ] {
        let (ok, says, fix) = ferry_tests::doctor_finding(&report, peer);
        assert!(!ok, "{peer}: {says}");
        assert!(says.contains(words), "{peer} should say {words:?}: {says}");
        assert!(fix.is_some_and(|fix| !fix.is_empty()), "{peer}: no fix");
        eprintln!("{peer}: {says}");
    }
    let (_, says, _) = ferry_tests::doctor_finding(&report, "peer h2");
    assert!(
        says.contains(&format!("at {}:", lab.addr(2, lab::Nic::Lan))),
        "names h2's LAN address: {says}"
    );
    let (ok, says, _) = ferry_tests::doctor_finding(&report, "mdns");
    assert!(ok, "multicast works inside host 1: {says}");
    let (ok, says, _) = ferry_tests::doctor_finding(&report, "interface lan0");
    assert!(ok && says.starts_with("LAN 10.77.0.1"), "{says}");
}
