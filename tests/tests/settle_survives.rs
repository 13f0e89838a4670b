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

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use ferry_gateway::home::Home;
use ferry_gateway::read_around;
use ferry_harness::{
    ferry_bin, fresh_request_id, pair_with_notes, two_with_notes, wait_for, Gateway, SIGCONT,
    SIGSTOP,
};
use ferry_kit::{Settlement, WriteOptions, WriteResult};

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
        let said = ferry_harness::describe(&out);
        assert_eq!(out.status.code(), Some(4), "ferry {args:?}: {said}");
        assert!(!said.contains("nothing was sent"), "ferry {args:?}: {said}");
        assert!(said.contains("still unknown"), "ferry {args:?}: {said}");
    }
    drop(a);
}

/// The write `c` sends for `id` to `notes` (owned by `a` only, as `c` sees it then): done.
fn write_through(c: &Gateway, key: &str, id: &str) -> u64 {
    let (status, body) = c.put("notes", key, b"v", &[("X-Ferry-Request-Id", id)]);
    assert_eq!(status, 200, "{body}");
    body["revision"].as_u64().unwrap()
}

/// Until `c` lists a collision for `notes` (it heard the second owner's hello).
fn wait_for_collision(c: &Gateway) -> serde_json::Value {
    wait_for(
        "the caller to hear the second claim of `notes`",
        Duration::from_secs(10),
        || {
            let vaults = c.get_json("/v1/vaults");
            vaults
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["name"] == "notes" && v["collision"].is_string())
                .then_some(vaults)
        },
    )
}

/// Issue 43: two trusted peers each own a vault called `notes`. A write through `c` ran on
/// `a`; `a` went down and `c` restarted (so nothing in `c`'s memory says where it went). The
/// settle must not ask `b` alone and fence the id there: `b` never had it, `a` ran it. The
/// answer is "unavailable, ask again" until `a` is back, then the truth.
#[test]
fn a_vault_name_two_peers_own_never_lets_the_other_fence_a_write_that_ran() {
    let (mut a, c) = two_with_notes();
    let id = fresh_request_id();
    let revision = write_through(&c, "k", &id);
    let b = Gateway::start("b");
    b.trust_each_other(&c);
    let out = b.cli(&["vault", "create", "notes"]);
    assert!(out.status.success(), "{}", ferry_harness::describe(&out));
    let vaults = wait_for_collision(&c);
    // Both are listed, each with the collision said; a call by the bare name is refused.
    let notes: Vec<&serde_json::Value> = vaults
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["name"] == "notes")
        .collect();
    assert_eq!(notes.len(), 2, "{vaults}");
    let (status, body) = c.put("notes", "k2", b"v", &[]);
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("vault_ambiguous")),
        "{body}"
    );
    let listed = String::from_utf8_lossy(&c.cli(&["vault", "list"]).stdout).into_owned();
    assert!(listed.contains("collision: notes"), "{listed}");
    let (_, doctor) = c.cli_json(&["doctor"]);
    assert!(
        doctor.to_string().contains("vault notes"),
        "doctor says nothing of the collision: {doctor}"
    );

    a.stop();
    let mut c = c;
    c.restart();
    let (status, body) = c.settle_in("notes", &id);
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("unavailable")),
        "a settle that could only ask b must not fence: {body}"
    );
    assert!(
        body["detail"].as_str().unwrap_or("").contains("a ("),
        "the answer must name a as the machine it could not ask: {body}"
    );
    // Without the vault named, the same.
    let (status, body) = c.settle(&id, None);
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    // b may have fenced it (it was asked); it never ran it.
    assert_ne!(
        b.journal_row(&id).map(|(state, _)| state).as_deref(),
        Some("answered"),
        "b ran a write it never received"
    );

    a.restart();
    let settled = settle_with_cli(&c, &id, Some("notes"));
    assert_eq!(settled["state"], "done", "{settled}");
    assert_eq!(settled["revision"].as_u64(), Some(revision), "{settled}");
}

/// Issue 43: a write done on `a` through `c`, then `ferry untrust a` on `c`. `c` can no longer
/// ask `a`, so it cannot know: "unavailable", never `not_carried_out` from asking the rest.
/// Trusted again, the id settles `done`.
#[test]
fn an_owner_untrusted_after_the_write_left_is_never_fenced_by_the_others() {
    let (a, c) = two_with_notes();
    let b = Gateway::start("b");
    b.trust_each_other(&c);
    let id = fresh_request_id();
    let revision = write_through(&c, "k", &id);
    let out = c.cli(&["untrust", "a"]);
    assert!(out.status.success(), "{}", ferry_harness::describe(&out));
    for (how, (status, body)) in [
        ("with the vault named", c.settle_in("notes", &id)),
        ("with no vault named", c.settle(&id, None)),
    ] {
        assert_eq!(
            (status, body["error"].as_str()),
            (503, Some("unavailable")),
            "{how}: an untrusted owner's write must not be fenced by the others: {body}"
        );
    }
    // Even an id made just after the untrust may be dated up to five minutes ahead of when
    // it left, so it may have gone to `a` while trusted: not fenced either.
    let later = fresh_request_id();
    let (status, body) = c.settle(&later, None);
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    // Trusted again: asked, and the truth.
    a.trust_each_other(&c);
    let settled = settle_with_cli(&c, &id, Some("notes"));
    assert_eq!(settled["state"], "done", "{settled}");
    assert_eq!(settled["revision"].as_u64(), Some(revision), "{settled}");
}
