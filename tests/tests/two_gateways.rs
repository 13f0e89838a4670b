//! The walking skeleton, end to end with real processes: two gateways on loopback trust each
//! other, a vault lives on A, a write enters through B, and both read the same record.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::readme_tour;
use ferry_harness::{ferry_bin, pair_with_notes, two_with_notes, Gateway, START_BOUND};
use serde_json::Value;

#[test]
fn a_write_through_b_reaches_the_owner_a_and_reads_agree_everywhere() {
    let (a, b) = two_with_notes();

    let (status, body) = b.put("notes", "hello", b"world", &[]);
    assert_eq!(status, 200, "{body}");
    let revision = body["revision"].as_u64().expect("a revision");
    assert_eq!(revision, 1);
    assert!(body["request_id"].as_str().is_some_and(|id| id.len() == 36));

    let (status, value, rev, source) = a.get("notes", "hello");
    assert_eq!(
        (status, value.as_slice(), rev, source.as_deref()),
        (200, &b"world"[..], Some(revision), Some("local"))
    );
    // b wrote it, so b's cache holds it (write-through).
    let (status, value, rev, source) = b.get("notes", "hello");
    assert_eq!(
        (status, value.as_slice(), rev, source.as_deref()),
        (200, &b"world"[..], Some(revision), Some("cache"))
    );

    for gateway in [&a, &b] {
        let out = gateway.cli(&["get", "notes", "hello"]);
        assert_eq!(out.stdout, b"world", "{} CLI get", gateway.label);
        let (code, json) = gateway.cli_json(&["get", "notes", "hello"]);
        assert_eq!(code, 0);
        assert_eq!(
            (
                json["value"].as_str(),
                json["revision"].as_u64(),
                json["stale"].as_bool()
            ),
            (Some("world"), Some(revision), Some(false))
        );
        let (code, list) = gateway.cli_json(&["list", "notes"]);
        assert_eq!(code, 0);
        assert_eq!(
            list,
            serde_json::json!([{"key": "hello", "revision": revision}])
        );
    }

    // The owner carried it out once: one peer write served, vault revision 1.
    assert_eq!(
        a.metric("ferry_peer_requests_served_total{kind=\"write\"}"),
        1
    );
    let (_, vaults) = a.cli_json(&["vault", "list"]);
    assert_eq!(vaults[0]["revision"].as_u64(), Some(1));
    assert_eq!(vaults[0]["role"].as_str(), Some("owner"));
    let (_, vaults) = b.cli_json(&["vault", "list"]);
    assert_eq!(
        (vaults[0]["name"].as_str(), vaults[0]["owner"].as_str()),
        (Some("notes"), Some("a"))
    );
}

#[test]
fn cli_writes_report_outcomes_and_exit_codes() {
    let (a, b) = two_with_notes();
    let (code, json) = b.cli_json(&["put", "notes", "k", "v1"]);
    assert_eq!(
        (code, json["outcome"].as_str(), json["revision"].as_u64()),
        (0, Some("done"), Some(1))
    );
    // Compare-and-swap: "must not exist" fails now, with the current revision.
    let (code, json) = b.cli_json(&["put", "notes", "k", "v2", "--if-revision", "0"]);
    assert_eq!(
        (code, json["outcome"].as_str(), json["error"].as_str()),
        (1, Some("refused"), Some("conflict"))
    );
    assert_eq!(json["current_revision"].as_u64(), Some(1));
    let (code, json) = b.cli_json(&["put", "notes", "k", "v2", "--if-revision", "1"]);
    assert_eq!((code, json["revision"].as_u64()), (0, Some(2)));
    let (code, json) = a.cli_json(&["delete", "notes", "k"]);
    assert_eq!((code, json["revision"].as_u64()), (0, Some(3)));
    let (code, json) = b.cli_json(&["delete", "notes", "k"]);
    assert_eq!((code, json["error"].as_str()), (1, Some("not_found")));
    let out = b.cli(&["get", "notes", "k"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a missing record is the owner's not_found"
    );
    // A usage error is exit 2.
    let (code, json) = b.cli_json(&["put", "notes", "k", "v", "--timeout", "0"]);
    assert_eq!((code, json["error"].as_str()), (2, Some("bad_request")));
}

#[test]
fn compare_and_swap_over_http_refuses_with_409_and_the_current_revision() {
    let (_a, b) = two_with_notes();
    assert_eq!(b.put("notes", "cas", b"1", &[("if-match", "0")]).0, 200);
    let (status, body) = b.put("notes", "cas", b"2", &[("if-match", "0")]);
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        (body["error"].as_str(), body["current_revision"].as_u64()),
        (Some("conflict"), Some(1))
    );
    let (_, value, rev, _) = b.get("notes", "cas");
    assert_eq!(
        (value.as_slice(), rev),
        (&b"1"[..], Some(1)),
        "the refused write changed nothing"
    );
}

#[test]
fn a_repeated_request_id_is_answered_from_the_journal_and_runs_once() {
    let (a, b) = two_with_notes();
    let id = ferry_harness::fresh_request_id();
    let first = b.put("notes", "once", b"x", &[("x-ferry-request-id", &id)]);
    let again = b.put("notes", "once", b"y", &[("x-ferry-request-id", &id)]);
    assert_eq!(first.0, 200);
    assert_eq!(first, again, "the same id gets the first answer");
    let (_, value, rev, _) = a.get("notes", "once");
    assert_eq!((value.as_slice(), rev), (&b"x"[..], Some(1)));
}

#[test]
fn bad_input_is_refused_before_anything_is_sent() {
    let (a, b) = two_with_notes();
    let path = "/v1/vaults/notes/records/k";
    let send = |builder: reqwest::blocking::RequestBuilder| {
        let response = builder.send().unwrap();
        let status = response.status().as_u16();
        (status, response.json::<Value>().unwrap_or(Value::Null))
    };

    // No token, a wrong token: 401 and nothing else.
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .build()
        .unwrap();
    let (status, body) = send(client.put(b.url(path)).header("x-ferry-app", "t").body("v"));
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    let (status, _) = send(
        client
            .put(b.url(path))
            .bearer_auth("0".repeat(64))
            .header("x-ferry-app", "t")
            .body("v"),
    );
    assert_eq!(status, 401);

    // A key over 1 KiB, a value over 4 MiB, malformed headers: 400 with a detail.
    let long_key = "k".repeat(1025);
    let (status, body) = b.put("notes", &long_key, b"v", &[]);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    assert!(body["detail"].as_str().unwrap().contains("1024"));
    let (status, body) = b.put("notes", "big", &vec![0u8; 4 * 1024 * 1024 + 1], &[]);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains("nothing was sent"));
    for (header, value) in [
        ("x-ferry-timeout", "0"),
        ("x-ferry-timeout", "-1"),
        ("x-ferry-timeout", "601"),
        ("x-ferry-timeout", "abc"),
        ("x-ferry-timeout", ""),
        ("x-ferry-request-id", "not-a-uuid"),
        ("x-ferry-request-id", "67e55044-10b1-426f-9247-bb680e5fe0c8"),
        ("if-match", "seven"),
    ] {
        let (status, body) = b.put("notes", "k", b"v", &[(header, value)]);
        assert_eq!(status, 400, "{header}: {value:?} gave {body}");
        assert!(!body["detail"].as_str().unwrap_or_default().is_empty());
    }
    let (status, body) = send(
        client
            .put(b.url(path))
            .bearer_auth(&b.token)
            .header("x-ferry-app", "bad app!")
            .body("v"),
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = send(client.put(b.url(path)).bearer_auth(&b.token).body("v"));
    assert_eq!(status, 400, "a missing X-Ferry-App: {body}");

    // An unknown vault: 404, nothing sent.
    let (status, body) = b.put("nope", "k", b"v", &[]);
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("unknown_vault")),
        "{body}"
    );

    // The owner saw none of it.
    assert_eq!(
        a.metric("ferry_peer_requests_served_total{kind=\"write\"}"),
        0
    );
    let (_, vaults) = a.cli_json(&["vault", "list"]);
    assert_eq!(vaults[0]["revision"].as_u64(), Some(0));
}

#[test]
fn an_untrusted_gateway_is_refused_at_the_tls_layer() {
    let (a, _b) = two_with_notes();
    let c = Gateway::start("c");
    // C trusts A, but A does not trust C: C's handshake is refused, so C never learns of
    // `notes` and nothing reaches A.
    let out = c.cli(&["trust", &a.node_id, "--label", "a", "--addr", &a.quic]);
    assert!(out.status.success());
    let (status, body) = c.put("notes", "k", b"v", &[]);
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("unknown_vault")),
        "{body}"
    );
    assert_eq!(
        a.metric("ferry_peer_requests_served_total{kind=\"write\"}"),
        0
    );
    assert_eq!(
        a.metric("ferry_peer_requests_served_total{kind=\"read\"}"),
        0
    );
    let log = c.log();
    assert!(
        log.contains("refused") || log.contains("hello not answered"),
        "C's log should show the refusal:\n{log}"
    );
}

#[test]
fn stop_drains_removes_api_addr_and_exits_zero_then_writes_are_local_gateway_down() {
    let (mut a, b) = two_with_notes();
    assert_eq!(a.stop(), Some(0), "{}", a.log());
    assert!(!a.home.join("api.addr").exists());
    let (code, json) = a.cli_json(&["put", "notes", "k", "v"]);
    assert_eq!(
        (code, json["error"].as_str()),
        (3, Some("local_gateway_down"))
    );
    assert!(json["detail"]
        .as_str()
        .unwrap()
        .ends_with("nothing was sent"));
    // B's write to the stopped owner never left: unavailable, exit 3.
    let (code, json) = b.cli_json(&["put", "notes", "k", "v", "--timeout", "3"]);
    assert_eq!(
        (code, json["outcome"].as_str()),
        (3, Some("unavailable")),
        "{json}"
    );
    // Trust and vaults are on disk: the owner comes back with them.
    a.restart();
    ferry_harness::wait_for(
        "B to see A's route up again",
        std::time::Duration::from_secs(10),
        || (b.route_to("a")["state"] == "up").then_some(()),
    );
    let (code, json) = b.cli_json(&["put", "notes", "k", "v"]);
    assert_eq!(
        (code, json["outcome"].as_str()),
        (0, Some("done")),
        "{json}"
    );
}

/// SPEC 14: with `RUST_LOG=ferry=debug`, one write can be followed by its request id across
/// both gateways: on the caller under `write` (with the app and the owner's label) and `send`
/// (with the route), on the owner under `door` (with the caller's label and the address it came
/// in by) and `owner_write` (with the request id and the app).
#[test]
fn one_write_can_be_followed_across_both_logs_by_its_request_id() {
    let env = [("RUST_LOG", "ferry=debug")];
    let (a, b) = ferry_harness::pair_with_notes(
        Gateway::start_with_env("a", &env),
        Gateway::start_with_env("b", &env),
    );
    let id = ferry_harness::fresh_request_id();
    let (status, body) = b.put("notes", "traced", b"v", &[("X-Ferry-Request-Id", &id)]);
    assert_eq!(status, 200, "{body}");

    // Lines are written as the work happens; the answer is given after both wrote theirs, but
    // wait (bounded) rather than trust the order of two processes' buffers.
    let request = format!("request_id={id}");
    let caller = b.wait_for_log_line(
        &[&request, "write{", "app=test-app", "peer=a", "send{route="],
        START_BOUND,
    );
    let owner = a.wait_for_log_line(
        &[
            &request,
            "door{peer=b route=127.0.0.1:",
            "owner_write{",
            "app=test-app",
        ],
        START_BOUND,
    );
    eprintln!("caller: {caller}\nowner: {owner}");
}

#[test]
fn a_gateway_runs_on_the_runtime_threads_it_is_given_and_carries_concurrent_writes() {
    let (a, b) = pair_with_notes(
        Gateway::start_with_env("a", &[("FERRY_RUNTIME_THREADS", "3")]),
        Gateway::start("b"),
    );
    assert_eq!(
        a.get_json("/v1/status")["runtime_threads"].as_u64(),
        Some(3)
    );
    assert_eq!(
        b.get_json("/v1/status")["runtime_threads"].as_u64(),
        Some(1),
        "one thread by default"
    );
    // Four writers at once (the owner's cap for one app) through b (one thread) to a
    // (three), eight writes each: each carried out once.
    let mut revisions: Vec<u64> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..4)
            .map(|writer| {
                let b = &b;
                scope.spawn(move || {
                    (0..8)
                        .map(|n| {
                            let key = format!("k{writer}-{n}");
                            let (status, body) = b.put("notes", &key, b"v", &[]);
                            assert_eq!(status, 200, "{body}");
                            body["revision"].as_u64().expect("a revision")
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    revisions.sort_unstable();
    assert_eq!(revisions, (1..=32).collect::<Vec<u64>>());
    assert_eq!(a.vault_revision("notes"), 32);

    // A thread count out of range is refused before anything starts.
    let refused = std::process::Command::new(ferry_bin())
        .args(["serve", "--runtime-threads", "0"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--runtime-threads"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// The README's short tour, read from README.md and run as written against the built binary
/// (`readme_tour` says what of the shell it understands), so the tour cannot drift from the CLI.
#[test]
fn the_readme_tour_runs_as_written() {
    let path = readme_tour::readme_path();
    let readme = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
    readme_tour::run(&readme, ferry_bin());
}

/// The tour's reading of the README: steps, comments, words and what a step prints.
#[test]
fn the_readme_tour_reads_commands_comments_and_outputs() {
    let readme = "# R\n\n## A short tour\n\nText:\n\n    \
                  ferry --home /tmp/a get k  # world  (a note)\n    \
                  curl -H 'A: b' \\\n      \"x\"    # (only a note)\n\n## Next\n\n    not this\n";
    let steps = readme_tour::steps(readme, "## A short tour");
    assert_eq!(
        steps,
        vec![
            readme_tour::Step {
                command: "ferry --home /tmp/a get k".into(),
                prints: Some("world".into())
            },
            readme_tour::Step {
                command: "curl -H 'A: b' \"x\"".into(),
                prints: None
            },
        ]
    );
    assert_eq!(
        readme_tour::statements("ferry a stop; ferry b serve &"),
        vec![
            ("ferry a stop".to_string(), false),
            ("ferry b serve".to_string(), true)
        ]
    );
    let words = readme_tour::words(
        r#"trust "$(ferry id)" -H 'X: y' "http://$(cat f)/v1""#,
        &mut |inner| format!("<{inner}>"),
    );
    assert_eq!(
        words,
        ["trust", "<ferry id>", "-H", "X: y", "http://<cat f>/v1"]
    );

    use readme_tour::check_prints;
    assert!(check_prints(
        "done: revision 1 (request ...)",
        "done: revision 1 (request 0191)\n"
    )
    .is_ok());
    assert!(check_prints(
        "done: revision 1 (request ...)",
        "done: revision 2 (request 0191)"
    )
    .is_err());
    assert!(check_prints("world", "world").is_ok());
    assert!(check_prints("world", "worlds").is_err());
    let json = "{\n  \"revision\": 1,\n  \"source\": \"cache\",\n  \"value\": \"world\"\n}\n";
    assert!(check_prints(r#"{"value": "world", "source": "cache", ...}"#, json).is_ok());
    assert!(check_prints(r#"{"value": "world", "source": "owner", ...}"#, json).is_err());
}
