//! Writes are sent at most once, and every outcome settles to the truth (SPEC 5, 6, 7), with
//! real processes on loopback: the owner killed, frozen, crashed at each step of a write,
//! restarted under a pooled connection, and its tickets rotated.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ferry_harness::{
    fresh_request_id, pair_with_notes, two_with_notes, wait_for, Gateway, SIGCONT, SIGSTOP,
};
use serde_json::Value;

fn header<'a>(name: &'a str, value: &'a str) -> (&'a str, &'a str) {
    (name, value)
}

#[test]
fn the_same_request_id_gets_the_same_answer_byte_for_byte_and_runs_once() {
    let (a, b) = two_with_notes();
    let id = fresh_request_id();
    let send = |value: &[u8]| {
        let response = b
            .request(reqwest::Method::PUT, "/v1/vaults/notes/records/once")
            .header("x-ferry-request-id", &id)
            .body(value.to_vec())
            .send()
            .unwrap();
        (
            response.status().as_u16(),
            response.bytes().unwrap().to_vec(),
        )
    };
    let first = send(b"first");
    let again = send(b"second");
    assert_eq!(first.0, 200);
    assert_eq!(
        first, again,
        "the repeat is answered from the journal, byte for byte"
    );
    assert_eq!(
        a.stored("notes", "once"),
        Some((Some(b"first".to_vec()), 1))
    );
    assert_eq!(a.vault_revision("notes"), 1, "the vault changed once");
}

#[test]
fn a_killed_owner_means_unavailable_within_the_connect_timeout_and_the_id_settles_never_arrived() {
    let (mut a, b) = two_with_notes();
    let (warm_status, warm_body) = b.put("notes", "warm", b"x", &[]);
    assert_eq!(warm_status, 200, "warm the pool: {warm_body}");
    a.kill();
    // The pooled connection was alive a moment ago; wait (bounded) until B no longer has proof
    // of life within the write-liveness window (1 s), so the write must dial afresh.
    wait_for(
        "B's pooled connection to A to go unproven",
        Duration::from_secs(10),
        || {
            let route = b.route_to("a");
            (route["last_heard_ms_ago"]
                .as_u64()
                .is_none_or(|ms| ms > 1_000))
            .then_some(())
        },
    );
    let id = fresh_request_id();
    let started = Instant::now();
    let (status, body) = put_k(&b, &id, "10");
    let took = started.elapsed();
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .ends_with("nothing was sent"),
        "{body}"
    );
    assert!(
        took < Duration::from_millis(2_600),
        "answered after {took:?}; the connect timeout is 2 s"
    );

    a.restart();
    assert_eq!(a.journal_row(&id), None, "the owner never saw it");
    let (status, settled) = b.settle(&id, None);
    assert_eq!(status, 200, "{settled}");
    assert_eq!(
        (settled["state"].as_str(), settled["reason"].as_str()),
        (Some("not_carried_out"), Some("never_arrived"))
    );
    assert_eq!(
        a.journal_row(&id),
        Some(("not_carried_out".into(), Some("never_arrived".into())))
    );
    // Fenced: the same id sent again never runs.
    assert_fenced(&a, &b, &id);
}

#[test]
fn a_fence_is_filed_under_the_vault_of_the_write_the_callers_log_remembers() {
    // So that when a vault moves to another owner its fences can go with its rows
    // (docs/ownership.md): the caller names the vault in its settle query (extension tag 4),
    // from its call log, never from the app's word.
    let (mut a, b) = two_with_notes();
    let (warm_status, warm_body) = b.put("notes", "warm", b"x", &[]);
    assert_eq!(warm_status, 200, "warm the pool: {warm_body}");
    // Frozen, then killed: the write reaches its socket and is never read.
    a.signal(SIGSTOP);
    let stopped = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| stat.rsplit(") ").next().map(|rest| rest.starts_with('T')))
            .unwrap_or(false)
    };
    let pid = a.pid();
    wait_for("a to be stopped", Duration::from_secs(5), || {
        stopped(pid).then_some(())
    });
    let logged = fresh_request_id();
    let (status, body) = put_k(&b, &logged, "1");
    assert_eq!(
        (status, body["error"].as_str()),
        (502, Some("outcome_unknown")),
        "{body}"
    );
    a.restart();
    let (status, settled) = b.settle(&logged, None);
    assert_eq!(status, 200, "{settled}");
    assert_eq!(
        (settled["state"].as_str(), settled["reason"].as_str()),
        (Some("not_carried_out"), Some("never_arrived"))
    );
    assert_eq!(a.journal_vault(&logged).as_deref(), Some("notes"));
    // An id this gateway has no record of: the app's `?vault=` finds the owner, but the fence
    // is not filed under the app's word.
    let unlogged = fresh_request_id();
    let (status, settled) = b.settle_in("notes", &unlogged);
    assert_eq!(status, 200, "{settled}");
    assert_eq!(a.journal_vault(&unlogged).as_deref(), Some(""));
    // The fence holds either way.
    assert_fenced(&a, &b, &logged);
    assert_fenced(&a, &b, &unlogged);
}

/// B's write of `notes/k` under `id` with a timeout of `timeout_s` seconds.
fn put_k(b: &Gateway, id: &str, timeout_s: &str) -> (u16, Value) {
    b.put(
        "notes",
        "k",
        b"v",
        &[
            header("x-ferry-request-id", id),
            header("x-ferry-timeout", timeout_s),
        ],
    )
}

/// `id`, fenced on the owner `a`, sent again through `b`: answered not carried out, and the
/// record it would have written is not there.
fn assert_fenced(a: &Gateway, b: &Gateway, id: &str) {
    let (status, body) = b.put("notes", "k", b"v", &[header("x-ferry-request-id", id)]);
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("not_carried_out")),
        "{body}"
    );
    assert_eq!(a.stored("notes", "k"), None);
}

#[test]
fn a_frozen_owner_gives_outcome_unknown_which_settles_on_its_own_to_the_truth() {
    let (a, b) = two_with_notes();
    let (warm_status, warm_body) = b.put("notes", "warm", b"x", &[]);
    assert_eq!(warm_status, 200, "warm the pool: {warm_body}");
    a.signal(SIGSTOP);
    let id = fresh_request_id();
    let started = Instant::now();
    let (status, body) = put_k(&b, &id, "1");
    let took = started.elapsed();
    a.signal(SIGCONT);
    assert_eq!(
        (status, body["error"].as_str(), body["owner"].as_str()),
        (502, Some("outcome_unknown"), Some("a")),
        "{body}"
    );
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_millis(1_800),
        "answered after {took:?}"
    );
    assert!(b.metric("ferry_writes_total{outcome=\"outcome_unknown\"}") >= 1);
    // The peer socket's catcher reports, whether or not it had anything to do (`metric` fails
    // on a missing series).
    for series in [
        "ferry_peer_datagrams_caught_total",
        "ferry_peer_socket_catches_total",
        "ferry_peer_calls_held_total",
        "ferry_peer_dials_joined_total",
    ] {
        b.metric(series);
    }
    assert!(
        b.metric("ferry_peer_dials_total") >= 1,
        "b dialed a to warm its pool"
    );

    // Remembered, then settled in the background with no action from the app.
    let settled = wait_for(
        "the unknown call to settle in the background",
        Duration::from_secs(20),
        || {
            let (code, calls) = b.cli_json(&["calls"]);
            assert_eq!(code, 0);
            calls
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["request_id"] == id.as_str())
                .filter(|c| c["state"] != "unknown")
                .cloned()
        },
    );
    let (_, body) = b.settle(&id, None);
    assert_eq!(
        body["state"], settled["state"],
        "the API answers from the remembered settlement"
    );
    match settled["state"].as_str() {
        Some("done") => {
            let revision = settled["revision"].as_u64().unwrap();
            assert_eq!(
                a.stored("notes", "k"),
                Some((Some(b"v".to_vec()), revision))
            );
            let (status, again) =
                b.put("notes", "k", b"other", &[header("x-ferry-request-id", &id)]);
            assert_eq!(
                (status, again["revision"].as_u64()),
                (200, Some(revision)),
                "{again}"
            );
        }
        Some("not_carried_out") => {
            assert_eq!(
                a.stored("notes", "k"),
                None,
                "settled not_carried_out, and it did not run"
            );
            let (status, again) = b.put("notes", "k", b"v", &[header("x-ferry-request-id", &id)]);
            assert_eq!(
                (status, again["error"].as_str()),
                (503, Some("not_carried_out")),
                "{again}"
            );
            assert_eq!(
                a.stored("notes", "k"),
                None,
                "a settled not_carried_out id never runs"
            );
        }
        other => panic!("settled to {other:?}: {settled}"),
    }
    let (code, unknown) = b.cli_json(&["calls", "--state", "unknown"]);
    assert_eq!((code, unknown.as_array().map(Vec::len)), (0, Some(0)));
    assert_eq!(
        a.vault_revision("notes"),
        1 + u64::from(settled["state"] == "done"),
        "nothing ran twice"
    );
}

/// The whole path around a stall of the calling gateway (stopped here with SIGSTOP, as a
/// loaded or suspended machine is): when it runs again, its route to the owner has not failed
/// and the next write goes through. The owner is stopped across the caller's stall and
/// resumes a little after it, so nothing new from the owner reaches the caller before the
/// prober's next looks. The prober's stall rule itself is held by `ferry_core::health`'s unit
/// tests (until 2026-12-03 it counted the stall as silence a millisecond after noticing it);
/// this test does not reliably catch that old fault, because the connection pool's sampler,
/// looking at resumption, counts packets that arrived just before the stop as heard then.
#[test]
fn a_caller_stalled_for_seconds_does_not_take_its_owner_for_silent() {
    let (a, b) = two_with_notes();
    let (status, body) = b.put("notes", "warm", b"x", &[]);
    assert_eq!(status, 200, "warm the route: {body}");
    let route_to_a = || {
        let route = b.route_to("a");
        assert!(!route.is_null(), "b has no route to a");
        (
            route["last_error"].clone(),
            route["last_heard_ms_ago"].as_u64(),
        )
    };
    assert_eq!(
        route_to_a().0,
        Value::Null,
        "the route failed before the stall"
    );

    a.signal(SIGSTOP);
    b.signal(SIGSTOP);
    // The stall itself, not a wait for an event: neither can do anything meanwhile.
    std::thread::sleep(Duration::from_secs(2));
    b.signal(SIGCONT);
    // Well inside the six 50 ms intervals b now allows from its resumption, leaving most
    // of them to answer b's heartbeat.
    std::thread::sleep(Duration::from_millis(50));
    a.signal(SIGCONT);

    let (status, body) = b.put("notes", "after", b"y", &[]);
    assert_eq!(status, 200, "the write after the stall: {body}");
    // A heartbeat sent after both resumed has been answered: the prober has looked since.
    let (error, _) = wait_for(
        "a heartbeat after the stall",
        Duration::from_secs(5),
        || Some(route_to_a()).filter(|(_, heard)| heard.is_some_and(|ms| ms < 100)),
    );
    assert_eq!(error, Value::Null, "b took its own stall for a's silence");
    assert_eq!(a.vault_revision("notes"), 2, "each write ran once");
}

/// Crashes the owner at `point` during B's write, restarts it, and returns the write's first
/// answer and its settled state.
fn crash_during_a_write(point: &str) -> (u16, Value, Value, Gateway, Gateway, String) {
    let fault = format!("{point}=crash");
    let a = Gateway::start_with_env("a", &[("FERRY_DANGEROUS_FAULT", fault.as_str())]);
    let (mut a, b) = pair_with_notes(a, Gateway::start("b"));
    let id = fresh_request_id();
    let (status, first) = put_k(&b, &id, "2");
    a.wait_exit(Duration::from_secs(10));
    // Without the fault: a restart keeps the environment a gateway was started with.
    a.restart_with(&[]);
    let (code, settled) = b.settle(&id, None);
    assert_eq!(code, 200, "{settled}");
    (status, first, settled, a, b, id)
}

#[test]
fn a_crash_before_the_commit_settles_to_interrupted_and_never_runs() {
    let (status, first, settled, a, b, id) = crash_during_a_write("before_commit");
    assert_eq!(
        (status, first["error"].as_str()),
        (502, Some("outcome_unknown")),
        "{first}"
    );
    assert_eq!(
        (settled["state"].as_str(), settled["reason"].as_str()),
        (Some("not_carried_out"), Some("interrupted")),
        "{settled}"
    );
    assert_eq!(a.stored("notes", "k"), None);
    let (status, again) = b.put("notes", "k", b"v", &[header("x-ferry-request-id", &id)]);
    assert_eq!(
        (status, again["error"].as_str()),
        (503, Some("not_carried_out")),
        "{again}"
    );
    assert_eq!(a.vault_revision("notes"), 0, "nothing ran");
}

#[test]
fn a_crash_between_commit_and_answer_settles_to_done() {
    let (status, first, settled, a, b, id) = crash_during_a_write("after_commit");
    assert_eq!(
        (status, first["error"].as_str()),
        (502, Some("outcome_unknown")),
        "{first}"
    );
    assert_eq!(
        (settled["state"].as_str(), settled["revision"].as_u64()),
        (Some("done"), Some(1)),
        "{settled}"
    );
    let (status, again) = b.put("notes", "k", b"v", &[header("x-ferry-request-id", &id)]);
    assert_eq!(
        (status, again["revision"].as_u64()),
        (200, Some(1)),
        "{again}"
    );
    assert_eq!(a.vault_revision("notes"), 1, "ran once");
}

#[test]
fn a_crash_after_the_answer_settles_to_the_same_done() {
    // After the answer left, no fault point is needed: the caller has its 200, then the owner
    // dies hard and comes back.
    let (mut a, b) = two_with_notes();
    let id = fresh_request_id();
    let (status, first) = b.put("notes", "k", b"v", &[header("x-ferry-request-id", &id)]);
    assert_eq!(
        (status, first["revision"].as_u64()),
        (200, Some(1)),
        "{first}"
    );
    a.kill();
    a.restart();
    let (code, settled) = b.settle(&id, None);
    assert_eq!(code, 200, "{settled}");
    assert_eq!(
        (settled["state"].as_str(), settled["revision"].as_u64()),
        (Some("done"), Some(1)),
        "{settled}"
    );
    let (status, again) = b.put("notes", "k", b"v", &[header("x-ferry-request-id", &id)]);
    assert_eq!(again["revision"].as_u64(), Some(1), "{status} {again}");
    assert_eq!(a.vault_revision("notes"), 1, "ran once");
}

#[test]
fn rotated_tickets_cost_exactly_one_renewal_and_an_untrusted_caller_is_refused() {
    let (a, b) = two_with_notes();
    assert_eq!(b.put("notes", "k1", b"1", &[]).0, 200);
    assert_eq!(b.metric("ferry_ticket_renewals_total"), 0);
    let out = a.cli(&["tickets", "rotate"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(b.put("notes", "k2", b"2", &[]).0, 200);
    assert_eq!(
        b.metric("ferry_ticket_renewals_total"),
        1,
        "one renewal after the rotation"
    );
    assert_eq!(a.metric("ferry_door_refusals_total"), 1);
    assert_eq!(b.put("notes", "k3", b"3", &[]).0, 200);
    assert_eq!(
        b.metric("ferry_ticket_renewals_total"),
        1,
        "the renewed ticket is cached"
    );
    let (_, tickets) = b.cli_json(&["tickets"]);
    assert_eq!(tickets[0]["epoch"].as_u64(), Some(1), "{tickets}");

    let out = a.cli(&["untrust", "b"]);
    assert!(out.status.success());
    // A closes B's connections at once; a write racing that close could have reached A just
    // before it and, with B no longer allowed to ask, honestly be `outcome_unknown`. The
    // contract under test is the steady state: once B has seen the close, writes are refused.
    wait_for(
        "B to see A close its connection",
        Duration::from_secs(5),
        || (b.route_to("a")["state"] != "up").then_some(()),
    );
    for i in 0..3 {
        let before = b.metric("ferry_ticket_renewals_total");
        let (status, body) = b.put(
            "notes",
            &format!("u{i}"),
            b"x",
            &[header("x-ferry-timeout", "5")],
        );
        let refused = (status, body["error"].as_str());
        assert!(
            refused == (401, Some("ticket_refused")) || refused == (503, Some("unavailable")),
            "an untrusted caller's write: {status} {body}"
        );
        assert!(
            b.metric("ferry_ticket_renewals_total") - before <= 1,
            "at most one renewal per call"
        );
    }
    assert_eq!(
        a.vault_revision("notes"),
        3,
        "none of the refused writes ran"
    );
}

#[test]
fn an_owner_restarted_under_a_pooled_connection_never_causes_outcome_unknown() {
    let (mut a, b) = two_with_notes();
    let (warm_status, warm_body) = b.put("notes", "warm", b"x", &[]);
    assert_eq!(warm_status, 200, "warm the pool: {warm_body}");
    a.kill();
    a.restart();
    let mut done = 0;
    for i in 0..5 {
        let (status, body) = b.put(
            "notes",
            &format!("k{i}"),
            b"v",
            &[header("x-ferry-timeout", "5")],
        );
        assert_ne!(
            status, 502,
            "a stale pooled connection made the outcome unknown: {body}"
        );
        if status == 200 {
            done += 1;
        } else {
            // Honest and settled: the stale connection's write was confirmed not carried out.
            assert!(
                matches!(
                    body["error"].as_str(),
                    Some("not_carried_out" | "unavailable")
                ),
                "{status} {body}"
            );
        }
    }
    assert!(
        done >= 4,
        "only {done} of 5 writes went through after the restart"
    );
    assert_eq!(
        a.vault_revision("notes"),
        1 + done,
        "every done write ran once, the others never"
    );
}
