//! `ferry doctor` with real gateways on loopback (issue 17): one gateway trusting five peers,
//! each broken a different way, names each fault with a fix, and says the healthy one is
//! reachable. Loopback has no multicast to drop and one clock for every process; those two
//! faults are the lab's.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_harness::Gateway;
use serde_json::Value;

const SIGSTOP: i32 = 19;
const SIGCONT: i32 = 18;

#[test]
fn the_doctor_names_each_fault_of_a_peer_with_a_fix() {
    let a = Gateway::start("a");
    let healthy = Gateway::start("healthy");
    let mut down = Gateway::start("down");
    let frozen = Gateway::start("frozen");
    let future = Gateway::start_with_env("future", &[("FERRY_DANGEROUS_PROTOCOLS", "3-4")]);
    for peer in [&healthy, &down, &frozen, &future] {
        a.trust_each_other(peer);
    }
    // A peer trusted under a key that is not the one at its address.
    let stranger = ferry_ticket::NodeKey::generate()
        .unwrap()
        .node_id()
        .to_string();
    let out = a.cli(&[
        "trust",
        &stranger,
        "--label",
        "imposter",
        "--addr",
        &healthy.quic,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    down.kill();
    frozen.signal(SIGSTOP);
    let out = a.cli(&["--json", "doctor"]);
    frozen.signal(SIGCONT);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(1), "problems found: exit 1");
    assert_eq!(report["ok"], false);

    let (ok, says, fix) = ferry_tests::doctor_finding(&report, "peer healthy");
    assert!(
        ok && says.starts_with("reachable: lan") && fix.is_none(),
        "{says}"
    );
    for (peer, words) in [
        ("peer down", "no gateway is running there"),
        ("peer frozen", "silent: nothing answers"),
        ("peer future", "protocol mismatch"),
        ("peer imposter", "wrong key"),
    ] {
        let (ok, says, fix) = ferry_tests::doctor_finding(&report, peer);
        assert!(!ok, "{peer}: {says}");
        assert!(says.contains(words), "{peer} should say {words:?}: {says}");
        assert!(fix.is_some_and(|fix| !fix.is_empty()), "{peer}: no fix");
    }
    let (ok, says, _) = ferry_tests::doctor_finding(&report, "mdns");
    assert!(
        ok && says.starts_with("off"),
        "the tests run with --no-mdns: {says}"
    );
    let (ok, says, _) = ferry_tests::doctor_finding(&report, "quic");
    assert!(ok && says.contains(&a.quic), "{says}");
    // The peer socket asks for a 4 MiB receive buffer; the kernel's limit decides what it got,
    // and the finding says which, as advice either way.
    let (ok, says, _) = ferry_tests::doctor_finding(&report, "udp buffer");
    let rmem_max = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok());
    match rmem_max {
        Some(max) if max >= 4 * 1024 * 1024 => {
            assert!(
                ok && says == "receive buffer 8 MiB",
                "rmem_max {max}: {says}"
            )
        }
        Some(max) => assert!(
            ok && says.contains("below the 8 MiB asked for"),
            "rmem_max {max}: {says}"
        ),
        None => assert!(ok, "{says}"),
    }
    assert!(report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["subject"] == "interface lo"));

    // The text form: each problem on a line of its own with its fix under it.
    let text = a.cli(&["doctor"]);
    assert_eq!(text.status.code(), Some(1), "problems found exit 1");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("PROBLEM  peer down: refused"), "{text}");
    assert!(text.contains("         fix: start the gateway"), "{text}");
    // (`frozen` runs again by now, so it may or may not be counted.)
    assert!(text.trim_end().ends_with("problems found"), "{text}");
    // Discovery's state is in the status too.
    assert_eq!(a.get_json("/v1/status")["discovery"], "off");
}
