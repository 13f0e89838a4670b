//! Issue 9's reproduction, kept as tests with real processes: a write that left must never be
//! reported "nothing was sent", and it must settle to the truth by its request id whatever
//! happened to the caller gateway (killed mid-call, restarted) or to the app's HTTP client
//! (gave up).
//!
//! The owner `a` either runs with a stalled executor (a fault point holds each batch 1.5 s
//! before its commit: the write has surely arrived when `a`'s log says so, and it will be
//! carried out), or is frozen (SIGSTOP) right after a warm-up write, so `b` sends on a
//! connection still proven alive and no answer can come back. Then the damage is done.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use ferry_gateway::home::Home;
use ferry_gateway::read_around;
use ferry_kit::{Settlement, WriteOptions, WriteResult};
use harness::{
    ferry_bin, fresh_request_id, pair_with_notes, two_with_notes, wait_for, Gateway, SIGCONT,
    SIGSTOP,
};

/// Until `gateway`'s log has a line about `request_id` that says `what`.
fn wait_for_log(gateway: &Gateway, request_id: &str, what: &str) {
    gateway.wait_for_log_line(&[request_id, what], Duration::from_secs(10));
}

/// Until the caller handed the write to QUIC (it may reach the owner from then on).
fn wait_until_sent(caller: &Gateway, request_id: &str) {
    wait_for_log(caller, request_id, "request handed to QUIC");
}

/// Until the owner's door received the write.
fn wait_until_received(owner: &Gateway, request_id: &str) {
    wait_for_log(owner, request_id, "received at the door");
}

/// `a` (owner of `notes`, every write batch held 1.5 s before its commit) and `b`.
fn slow_owner_pair() -> (Gateway, Gateway) {
    let a = Gateway::start_with_env(
        "a",
        &[("FERRY_DANGEROUS_FAULT", "before_commit=stall:1500")],
    );
    pair_with_notes(a, Gateway::start("b"))
}

/// Runs `ferry put` through `b` as a child process.
fn spawn_cli_put(b: &Gateway, key: &str, id: &str) -> std::process::Child {
    Command::new(ferry_bin())
        .args([
            "--home",
            b.home.to_str().unwrap(),
            "--json",
            "put",
            "notes",
            key,
        ])
        .args(["carried-out", "--timeout", "20", "--request-id", id])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for the CLI to exit, and checks it said `outcome_unknown` with `id` and exit 4: the
/// write left, so never "nothing was sent".
fn assert_cli_unknown(mut cli: std::process::Child, id: &str) {
    let status = wait_for("the CLI to give up", Duration::from_secs(10), || {
        cli.try_wait().unwrap()
    });
    let mut out = String::new();
    cli.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let printed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (
            status.code(),
            printed["outcome"].as_str(),
            printed["request_id"].as_str()
        ),
        (Some(4), Some("outcome_unknown"), Some(id)),
        "the write left: its outcome is unknown, never `nothing was sent` ({printed})"
    );
}

/// A warm-up write through `b`, so its ticket is cached and its connection to `a` proven.
fn warm_up(b: &Gateway) {
    let (status, body) = b.put("notes", "warm-up", b"x", &[]);
    assert_eq!(status, 200, "{body}");
}

/// `ferry settle` through `b` until the owner's answer is final; returns its JSON.
fn settle_with_cli(b: &Gateway, request_id: &str, vault: Option<&str>) -> serde_json::Value {
    wait_for(
        "the write to settle through the CLI",
        Duration::from_secs(30),
        || {
            let mut args = vec!["settle", request_id, "--wait", "5"];
            if let Some(vault) = vault {
                args.extend(["--vault", vault]);
            }
            let (code, answer) = b.cli_json(&args);
            (code == 0 || code == 1 || code == 3).then_some(answer)
        },
    )
}

#[test]
fn a_caller_killed_mid_call_never_says_nothing_was_sent_and_the_write_settles_after_restart() {
    let (a, mut b) = slow_owner_pair();
    warm_up(&b);
    let id = fresh_request_id();
    let cli = spawn_cli_put(&b, "victim", &id);
    wait_until_received(&a, &id);
    b.kill();
    assert_cli_unknown(cli, &id);
    let revision = wait_for("the owner to carry it out", Duration::from_secs(10), || {
        a.stored("notes", "victim").map(|(_, revision)| revision)
    });
    b.restart();
    // The restarted caller remembers the call (its log had it before the send) and asks `a`.
    let settled = settle_with_cli(&b, &id, None);
    assert_eq!(
        (settled["state"].as_str(), settled["revision"].as_u64()),
        (Some("done"), Some(revision)),
        "{settled}"
    );
    // Naming the vault gives the same answer.
    let settled = settle_with_cli(&b, &id, Some("notes"));
    assert_eq!(settled["revision"].as_u64(), Some(revision), "{settled}");
    assert_eq!(
        a.stored("notes", "victim"),
        Some((Some(b"carried-out".to_vec()), revision))
    );
}

#[test]
fn a_frozen_owner_and_a_killed_caller_settle_to_what_the_owner_holds() {
    let (a, mut b) = two_with_notes();
    warm_up(&b);
    let id = fresh_request_id();
    a.signal(SIGSTOP);
    let cli = spawn_cli_put(&b, "victim", &id);
    wait_until_sent(&b, &id);
    b.kill();
    assert_cli_unknown(cli, &id);
    a.signal(SIGCONT);
    b.restart();
    // Whether the packet left `b` before the kill is not known; the settled answer must be
    // the truth either way, and final.
    let settled = settle_with_cli(&b, &id, None);
    match (settled["state"].as_str(), a.stored("notes", "victim")) {
        (Some("done"), Some((_, revision))) => {
            assert_eq!(settled["revision"].as_u64(), Some(revision), "{settled}")
        }
        (Some("not_carried_out"), None) => {
            // Fenced: it can never run now, even if its packet is still somewhere.
            let (status, body) = b.put("notes", "victim", b"late", &[("x-ferry-request-id", &id)]);
            assert_eq!(
                (status, body["error"].as_str()),
                (503, Some("not_carried_out")),
                "{body}"
            );
            assert_eq!(a.stored("notes", "victim"), None);
        }
        (state, stored) => panic!("settled {state:?} but the owner holds {stored:?}: {settled}"),
    }
}

#[test]
fn the_kit_killed_caller_is_outcome_unknown_and_settles_by_vault() {
    let (a, mut b) = slow_owner_pair();
    warm_up(&b);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let kit = read_around::kit(&Home::locate(Some(b.home.clone())).unwrap(), "kit-test");
    let id = fresh_request_id();
    let options = WriteOptions {
        request_id: Some(id.clone()),
        timeout: Some("20".into()),
        ..WriteOptions::default()
    };
    let write = runtime.spawn({
        let kit = kit.clone();
        async move { kit.put("notes", "kit-victim", &b"v"[..], &options).await }
    });
    wait_until_received(&a, &id);
    b.kill();
    let result = runtime.block_on(write).unwrap();
    assert!(
        matches!(&result, WriteResult::OutcomeUnknown { request_id, vault, .. } if *request_id == id && vault == "notes"),
        "{result:?}"
    );
    let revision = wait_for("the owner to carry it out", Duration::from_secs(10), || {
        a.stored("notes", "kit-victim")
            .map(|(_, revision)| revision)
    });
    b.restart();
    let settled = wait_for(
        "the kit to settle it",
        Duration::from_secs(30),
        || match runtime.block_on(kit.settle(&id, Some("notes"), Some(Duration::from_secs(5)))) {
            Ok(Settlement::Done { revision }) => Some(revision),
            Ok(Settlement::Running | Settlement::Unavailable { .. }) | Err(_) => None,
            Ok(other) => panic!("settled to {other:?}, but the owner carried it out"),
        },
    );
    assert_eq!(settled, revision);
}

#[test]
fn an_app_that_gives_up_at_half_a_second_learns_the_outcome_by_its_request_id() {
    let (a, b) = two_with_notes();
    warm_up(&b);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let kit = read_around::kit(&Home::locate(Some(b.home.clone())).unwrap(), "kit-test");

    // Through the kit: it gives up at 0.5 s, the gateway carries on.
    a.signal(SIGSTOP);
    let id = fresh_request_id();
    let result = runtime.block_on(kit.put(
        "notes",
        "patient",
        &b"v"[..],
        &WriteOptions {
            request_id: Some(id.clone()),
            timeout: Some("20".into()),
            client_timeout: Some(Duration::from_millis(500)),
            ..WriteOptions::default()
        },
    ));
    assert!(
        matches!(&result, WriteResult::OutcomeUnknown { request_id, .. } if *request_id == id),
        "{result:?}"
    );
    // Asked while it is still on its way: running, never "never sent".
    let early = runtime
        .block_on(kit.settle(&id, Some("notes"), None))
        .unwrap();
    assert_eq!(early, Settlement::Running);
    a.signal(SIGCONT);
    let settled = runtime
        .block_on(kit.settle(&id, Some("notes"), Some(Duration::from_secs(20))))
        .unwrap();
    let revision = a.stored("notes", "patient").expect("carried out").1;
    assert_eq!(settled, Settlement::Done { revision });

    // A raw HTTP client that hangs up at 0.5 s: the same.
    a.signal(SIGSTOP);
    let id = fresh_request_id();
    let hung_up = b
        .request(reqwest::Method::PUT, "/v1/vaults/notes/records/raw")
        .header("x-ferry-request-id", &id)
        .header("x-ferry-timeout", "20")
        .timeout(Duration::from_millis(500))
        .body("v")
        .send();
    assert!(hung_up.is_err(), "the client gave up: {hung_up:?}");
    a.signal(SIGCONT);
    let (status, body) = b.settle(&id, Some(20));
    let revision = a.stored("notes", "raw").expect("carried out").1;
    assert_eq!(
        (status, body["state"].as_str(), body["revision"].as_u64()),
        (200, Some("done"), Some(revision)),
        "{body}"
    );
}

#[test]
fn an_id_the_caller_has_no_memory_of_is_asked_of_every_owner_never_unknown_call() {
    let (a, b) = two_with_notes();
    warm_up(&b);
    // Sent straight to the owner by `b`'s peer would be the real case (a power cut that took
    // `b`'s log); here the id simply never went through `b`.
    let id = fresh_request_id();
    let (status, body) = b.settle(&id, None);
    assert_eq!(
        (status, body["state"].as_str(), body["reason"].as_str()),
        (200, Some("not_carried_out"), Some("never_arrived")),
        "{body}"
    );
    // And it is fenced at the owner: it can never run now.
    let (status, body) = b.put("notes", "fenced", b"v", &[("x-ferry-request-id", &id)]);
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("not_carried_out")),
        "{body}"
    );
    assert_eq!(a.stored("notes", "fenced"), None);
    // With one possible owner unreachable, the answer is "ask again", not a guess.
    a.signal(SIGSTOP);
    let (status, body) = b.settle(&fresh_request_id(), None);
    a.signal(SIGCONT);
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
}

/// A settle query that cannot reach the local gateway says nothing about the write: `ferry
/// settle` exits 4 (outcome still unknown), never 3 ("nothing written"), which would invite a
/// script to send the write again under a new id.
#[test]
fn settling_with_the_gateway_down_is_still_unknown_never_nothing_written() {
    let (a, mut b) = two_with_notes();
    let id = fresh_request_id();
    let (status, body) = b.put("notes", "settle-down", b"v", &[("X-Ferry-Request-Id", &id)]);
    assert_eq!(status, 200, "{body}");
    b.stop();
    for args in [
        vec!["settle", id.as_str(), "--vault", "notes"],
        vec!["--json", "settle", id.as_str()],
    ] {
        let out = b.cli(&args);
        let said = ferry_tests::describe(&out);
        assert_eq!(out.status.code(), Some(4), "ferry {args:?}: {said}");
        assert!(!said.contains("nothing was sent"), "ferry {args:?}: {said}");
        assert!(said.contains("still unknown"), "ferry {args:?}: {said}");
    }
    drop(a);
}
