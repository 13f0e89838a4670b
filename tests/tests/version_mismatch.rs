//! Two real gateways with no protocol version in common (SPEC 11): the owner is restarted as a
//! future release that speaks only protocols 3-4 (`FERRY_DANGEROUS_PROTOCOLS`, a test-build
//! switch). They are refused at the TLS handshake, so no request can leave: a write to the
//! owner is `unavailable` with reason `version_mismatch`, and nothing reaches its journal. The
//! error names both ranges and which side to upgrade, in `ferry routes`, `ferry peers`,
//! `/v1/status` and the `unknown_vault` detail; once the owner speaks a common version again,
//! the status stops reporting it, apps are no longer told of it, and writes flow.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ferry_harness::{wait_for, Gateway};
use serde_json::Value;

const MISMATCH_BOUND: Duration = Duration::from_secs(15);
const FUTURE: (&str, &str) = ("FERRY_DANGEROUS_PROTOCOLS", "3-4");

/// `gateway`'s `version_mismatches` in `/v1/status`.
fn mismatches(gateway: &Gateway) -> Vec<String> {
    gateway.get_json("/v1/status")["version_mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

fn assert_names(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{text:?} lacks {part:?}");
    }
}

#[test]
fn gateways_with_no_common_protocol_version_say_so_everywhere_and_send_nothing() {
    let a = Gateway::start("a");
    let mut owner = Gateway::start("owner");
    a.trust_each_other(&owner);
    let out = owner.cli(&["vault", "create", "notes"]);
    assert!(
        out.status.success(),
        "vault create on owner: {}",
        ferry_harness::describe(&out)
    );
    let (status, body) = a.put("notes", "before", b"v", &[]);
    assert_eq!(status, 200, "a knows the owner and writes: {body}");

    owner.restart_with(&[FUTURE]);
    let ours = [
        "no protocol version in common",
        "it speaks 3-4",
        "this one speaks 1-2",
        "upgrade this gateway",
    ];

    // A write to the owner a knows: refused in the handshake, nothing sent. (Until a's next
    // probe of the route, its pooled connection to the old process may still be taken and
    // found dead: that too sends nothing, so the write is retried until the mismatch shows.)
    let request_id = ferry_harness::fresh_request_id();
    let body = wait_for(
        "a write to the owner to be refused for the protocol mismatch",
        MISMATCH_BOUND,
        || {
            let (status, body) = a.put(
                "notes",
                "k",
                b"v",
                &[("x-ferry-request-id", request_id.as_str())],
            );
            assert_ne!(
                status, 200,
                "a write reached a gateway it cannot speak to: {body}"
            );
            (body["reason"] == "version_mismatch").then_some(body)
        },
    );
    assert_eq!(body["error"], "unavailable", "{body}");
    assert_names(body["detail"].as_str().unwrap_or_default(), &ours);
    assert!(
        owner.journal_row(&request_id).is_none(),
        "nothing reached the owner's journal"
    );
    assert_eq!(
        owner.records("notes").len(),
        1,
        "only the write from before"
    );

    // The route, the peer and the status all say it, naming both ranges.
    let (_, routes) = a.cli_json(&["routes"]);
    let route_error = routes
        .as_array()
        .unwrap()
        .iter()
        .find_map(|r| r["last_error"].as_str())
        .unwrap_or_default()
        .to_string();
    assert_names(&route_error, &ours);
    let (code, peers) = a.cli_json(&["peers"]);
    assert_eq!(code, 0);
    let row = peers
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["label"] == "owner")
        .cloned()
        .unwrap_or(Value::Null);
    assert_names(row["last_error"].as_str().unwrap_or_default(), &ours);
    let status = a.get_json("/v1/status");
    assert_eq!(status["protocols"], "1-2");
    let seen = mismatches(&a);
    assert!(
        seen.iter().any(|m| m.starts_with("owner: no protocol")),
        "{seen:?}"
    );
    // The owner sees the same from its side: the older gateway must be upgraded.
    let theirs = wait_for(
        "the owner's route to a to fail with a protocol mismatch",
        MISMATCH_BOUND,
        || mismatches(&owner).into_iter().next(),
    );
    assert_names(
        &theirs,
        &[
            "it speaks 1-2",
            "this one speaks 3-4",
            "upgrade the gateway there",
        ],
    );

    // A vault nobody could be asked about: the app is told who could not be asked.
    let (status, body) = a.put("elsewhere", "k", b"v", &[]);
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("unknown_vault"))
    );
    assert_names(
        body["detail"].as_str().unwrap_or_default(),
        &["lack of a common protocol version", "it speaks 3-4"],
    );

    // Back on a common version: the routes come up, every report clears, writes flow.
    owner.restart_with(&[]);
    wait_for(
        "a's protocol mismatch to clear once the owner speaks 1-2 again",
        MISMATCH_BOUND,
        || mismatches(&a).is_empty().then_some(()),
    );
    let (status, body) = a.put("notes", "after", b"v", &[]);
    assert_eq!(status, 200, "{body}");
    let (status, body) = a.put("elsewhere", "k", b"v", &[]);
    assert_eq!(status, 404, "{body}");
    assert!(
        !body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("protocol"),
        "a cleared mismatch is not reported again: {body}"
    );
}
