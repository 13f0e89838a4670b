//! The local API's edges, tried as an adversary would (issue 9): keys and vault names that
//! look like paths, request ids that are not quite UUIDv7 or are dated oddly, malformed paths
//! and query strings, unknown routes, oversized admin bodies. Each is stored literally where it
//! was meant, or refused with the documented JSON error before anything is sent.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_gateway::home::Home;
use ferry_gateway::read_around;
use std::time::Duration;

use ferry_harness::{two_with_notes, Gateway};
use ferry_kit::http::{self, Method};
use ferry_kit::{WriteOptions, WriteResult};

/// Keys that a URL library would rewrite if sent as raw path segments.
const PATH_LIKE_KEYS: [&str; 7] = [
    "../../other/records/planted",
    "a/../b",
    "./x",
    "..",
    ".",
    "a/./b/",
    "%2e%2e/%2F",
];

fn keys_in(gateway: &Gateway, vault: &str) -> Vec<String> {
    let db = gateway.db();
    let mut stmt = db
        .prepare("SELECT key FROM records WHERE vault = ?1 AND value IS NOT NULL ORDER BY key")
        .unwrap();
    let keys = stmt
        .query_map([vault], |row| row.get(0))
        .unwrap()
        .collect::<Result<Vec<String>, _>>()
        .unwrap();
    keys
}

#[test]
fn path_like_keys_are_stored_literally_in_their_vault_through_the_kit_and_the_cli() {
    let (a, b) = two_with_notes();
    // A second vault a key might try to escape into.
    assert!(a.cli(&["vault", "create", "other"]).status.success());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let kit = read_around::kit(&Home::locate(Some(b.home.clone())).unwrap(), "edges");
    for key in PATH_LIKE_KEYS {
        let put = runtime.block_on(kit.put(
            "notes",
            key,
            key.as_bytes().to_vec(),
            &WriteOptions::default(),
        ));
        assert!(
            matches!(put, WriteResult::Done { .. }),
            "kit put {key:?}: {put:?}"
        );
        let read = runtime.block_on(kit.get("notes", key)).unwrap();
        assert_eq!(read.value, key.as_bytes(), "kit get {key:?}");
        let listed = runtime.block_on(kit.list("notes", key, None)).unwrap();
        assert!(
            listed.iter().any(|k| k.key == key),
            "kit list {key:?}: {listed:?}"
        );
    }
    for key in PATH_LIKE_KEYS {
        let cli_key = format!("cli/{key}");
        let (code, put) = b.cli_json(&["put", "notes", &cli_key, "v"]);
        assert_eq!(
            (code, put["outcome"].as_str()),
            (0, Some("done")),
            "cli put {cli_key:?}: {put}"
        );
        let (code, got) = b.cli_json(&["get", "notes", &cli_key]);
        assert_eq!(
            (code, got["value"].as_str()),
            (0, Some("v")),
            "cli get {cli_key:?}: {got}"
        );
        let (code, deleted) = b.cli_json(&["delete", "notes", &cli_key]);
        assert_eq!(
            (code, deleted["outcome"].as_str()),
            (0, Some("done")),
            "cli delete {cli_key:?}: {deleted}"
        );
    }
    let mut expected: Vec<String> = PATH_LIKE_KEYS.iter().map(|k| k.to_string()).collect();
    expected.sort();
    assert_eq!(
        keys_in(&a, "notes"),
        expected,
        "every key literally, in its vault"
    );
    assert!(
        keys_in(&a, "other").is_empty(),
        "nothing landed in another vault"
    );

    // Deleting through the kit finds the same literal keys.
    for key in PATH_LIKE_KEYS {
        let deleted = runtime.block_on(kit.delete("notes", key, &WriteOptions::default()));
        assert!(
            matches!(deleted, WriteResult::Done { .. }),
            "kit delete {key:?}: {deleted:?}"
        );
    }
    assert!(keys_in(&a, "notes").is_empty());
}

#[test]
fn dot_vault_names_are_refused_at_creation_and_in_every_route() {
    let (a, b) = two_with_notes();
    for name in [".", ".."] {
        let out = a.cli(&["vault", "create", name]);
        assert_eq!(out.status.code(), Some(2), "vault create {name:?}: {out:?}");
        let (status, body) = post(&a, "/v1/admin/vaults", &format!(r#"{{"name":"{name}"}}"#));
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("bad_request")),
            "{body}"
        );
        let (status, body) = post(
            &b,
            "/v1/admin/vaults/follow",
            &format!(r#"{{"name":"{name}","owner":"a"}}"#),
        );
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("bad_request")),
            "{body}"
        );
        // Sent raw (a URL library would drop the dot segment before sending): the gateway sees
        // the dot name, encoded or not, and refuses it.
        let encoded = name.replace('.', "%2E");
        let runtime = tokio::runtime::Runtime::new().unwrap();
        for vault in [name.to_string(), encoded] {
            for (method, path) in [
                (Method::PUT, format!("/v1/vaults/{vault}/records/k")),
                (Method::GET, format!("/v1/vaults/{vault}/records/k")),
                (Method::DELETE, format!("/v1/vaults/{vault}/records/k")),
                (Method::GET, format!("/v1/vaults/{vault}/records")),
            ] {
                let (status, body) = runtime.block_on(raw(&b, method.clone(), &path));
                assert!(
                    status == 400 && body["error"] == "bad_request"
                        || status == 404 && body["error"] == "unknown_route",
                    "{method} {path}: {status} {body}"
                );
            }
        }
    }
    assert_eq!(a.vault_revision("notes"), 0, "nothing was written anywhere");
}

/// A request sent exactly as written (no path normalisation), through the kit's HTTP layer.
async fn raw(gateway: &Gateway, method: Method, path: &str) -> (u16, serde_json::Value) {
    let call = http::Call {
        method,
        path_and_query: path.to_string(),
        headers: Vec::new(),
        body: bytes::Bytes::from_static(b"v"),
        token: &gateway.token,
        app: "edges",
    };
    let answer = http::exchange(gateway.api.parse().unwrap(), call, Duration::from_secs(10))
        .await
        .unwrap();
    (
        answer.status.as_u16(),
        serde_json::from_slice(&answer.body).unwrap_or(serde_json::Value::Null),
    )
}

fn post(gateway: &Gateway, path: &str, body: &str) -> (u16, serde_json::Value) {
    let response = gateway
        .request(reqwest::Method::POST, path)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(serde_json::Value::Null))
}

#[test]
fn every_error_is_the_documented_json_even_from_the_router() {
    let (_a, b) = two_with_notes();
    let cases: [(reqwest::Method, &str, u16, &str); 6] = [
        (
            reqwest::Method::GET,
            "/v1/vaults/notes/records/%FF",
            400,
            "bad_request",
        ),
        (
            reqwest::Method::PUT,
            "/v1/vaults/notes/records/%FF%FE",
            400,
            "bad_request",
        ),
        (
            reqwest::Method::GET,
            "/v1/vaults/notes/records?limit=-1",
            400,
            "bad_request",
        ),
        (
            reqwest::Method::GET,
            "/v1/vaults/notes/records?limit=x",
            400,
            "bad_request",
        ),
        (reqwest::Method::GET, "/v1/nowhere", 404, "unknown_route"),
        (
            reqwest::Method::PATCH,
            "/v1/vaults/notes/records/k",
            405,
            "method_not_allowed",
        ),
    ];
    for (method, path, status, code) in cases {
        let response = b.request(method.clone(), path).send().unwrap();
        let got = response.status().as_u16();
        let text = response.text().unwrap();
        let body: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {path}: not JSON: {text:?}"));
        assert_eq!(
            (got, body["error"].as_str()),
            (status, Some(code)),
            "{method} {path}: {body}"
        );
        assert!(
            body["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{body}"
        );
    }
    // Without the token, an unknown route is the same 401 as any other.
    let response = reqwest::blocking::Client::new()
        .get(b.url("/v1/nowhere"))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let body: serde_json::Value = response.json().unwrap();
    assert_eq!(body["error"], "unauthorized");
}

#[test]
fn request_ids_with_the_wrong_variant_or_odd_dates_are_refused_and_nothing_is_sent() {
    let (a, b) = two_with_notes();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let id_at = |ms: u64, variant: char| {
        format!(
            "{:08x}-{:04x}-7abc-{variant}def-0123456789ab",
            ms >> 16,
            ms & 0xffff
        )
    };
    let cases = [
        (id_at(now_ms, 'c'), "bad_request"), // variant bits 11: not RFC 9562
        (id_at(now_ms, '0'), "bad_request"), // variant bits 0x: NCS
        (id_at(now_ms + 10 * 60_000, '8'), "bad_request"), // 10 minutes ahead
        (id_at(now_ms - 8 * 86_400_000, '8'), "stale_request_id"), // older than 7 days
    ];
    for (id, code) in &cases {
        let (status, body) = b.put("notes", "k", b"v", &[("x-ferry-request-id", id)]);
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some(*code)),
            "{id}: {body}"
        );
        let (status, body) = b.settle(id, None);
        assert_eq!(status, 400, "settle {id}: {body}");
    }
    // A fine id from 4 minutes ahead (clock skew) is accepted.
    let (status, body) = b.put(
        "notes",
        "k",
        b"v",
        &[("x-ferry-request-id", &id_at(now_ms + 4 * 60_000, '9'))],
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(a.vault_revision("notes"), 1, "only the good id ran");
    assert_eq!(
        a.metric("ferry_peer_requests_served_total{kind=\"write\"}"),
        1,
        "nothing else reached the owner"
    );
}

/// Each refusal below comes before the body is read, while the client may still be writing
/// it. Without the gateway reading the rest before it answers, the client's write could fail
/// with a broken pipe and the answer be lost to the reset (this test once failed in CI that
/// way), leaving the app a transport error instead of the refusal. Repeated, since it is a race.
#[test]
fn early_refusals_arrive_whole_while_the_body_is_still_being_sent() {
    let (a, b) = two_with_notes();
    let huge_admin = format!(r#"{{"name":"{}"}}"#, "x".repeat(1 << 20));
    let over_value = vec![b'v'; ferry_gateway::config::DEFAULT_MAX_VALUE_BYTES + (256 << 10)];
    let stranger = reqwest::blocking::Client::new();
    for round in 0..10 {
        let (status, body) = post(&b, "/v1/admin/vaults", &huge_admin);
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("bad_request")),
            "round {round}, admin body over its limit: {body}"
        );

        let response = b
            .request(reqwest::Method::PUT, "/v1/vaults/notes/records/big")
            .body(over_value.clone())
            .send()
            .unwrap_or_else(|err| panic!("round {round}, value over the limit: {err}"));
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().unwrap_or(serde_json::Value::Null);
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("bad_request")),
            "round {round}, value over the limit: {body}"
        );

        let response = stranger
            .put(b.url("/v1/vaults/notes/records/big"))
            .body(vec![b'v'; 1 << 20])
            .send()
            .unwrap_or_else(|err| panic!("round {round}, no token: {err}"));
        assert_eq!(response.status().as_u16(), 401, "round {round}, no token");
    }
    // Declared past the drain's 16 MiB, but refused after its first 4 MiB were read: what is
    // left is what counts, so this refusal arrives too.
    let response = b
        .request(reqwest::Method::PUT, "/v1/vaults/notes/records/big")
        .body(vec![b'v'; 18 << 20])
        .send()
        .unwrap_or_else(|err| panic!("a value of 18 MiB: {err}"));
    assert_eq!(response.status().as_u16(), 400, "a value of 18 MiB");
    assert_eq!(
        a.metric("ferry_peer_requests_served_total{kind=\"write\"}"),
        0,
        "no refused write reached the owner"
    );
}

/// A client that sends `Expect: 100-continue` holds its body back until asked. Refused before
/// anything was read (no token here), it gets the refusal at once, not a `100 Continue` that
/// asks for a body nobody will use.
#[test]
fn a_client_that_waits_to_send_is_refused_without_being_asked_for_its_body() {
    use std::io::{Read, Write};
    let (_a, b) = two_with_notes();
    let mut socket = std::net::TcpStream::connect(&b.api).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        socket,
        "PUT /v1/vaults/notes/records/big HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        ferry_gateway::config::DEFAULT_MAX_VALUE_BYTES + 1
    )
    .unwrap();
    let mut head = [0u8; 12];
    socket
        .read_exact(&mut head)
        .expect("an answer within 10 s, with no body sent");
    assert_eq!(&head, b"HTTP/1.1 401", "{}", String::from_utf8_lossy(&head));
}

/// Two gateways on one home would each settle the other's calls in flight at start and write
/// over each other's call-log slots and sent mark. A second `ferry serve` on a home in use, on
/// ports of its own so nothing else stops it, is refused before it reads the home, naming the
/// first; the first keeps serving; and a gateway killed outright leaves no lock behind.
#[test]
fn a_second_gateway_on_a_home_in_use_is_refused_and_the_first_keeps_serving() {
    let (mut a, b) = two_with_notes();
    let api_before = std::fs::read_to_string(a.home.join("api.addr")).unwrap();
    let (code, said) = ferry_harness::serve_refused(
        std::path::Path::new(ferry_harness::ferry_bin()),
        &a.home,
        "a home in use",
    );
    assert!(code.is_some_and(|code| code != 0), "exit {code:?}: {said}");
    assert!(
        said.contains("is in use by another ferry process")
            && (cfg!(windows) || said.contains(&format!("(pid {})", a.pid()))),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(a.home.join("api.addr")).unwrap(),
        api_before,
        "the refused start left api.addr alone"
    );
    let (status, body) = b.put("notes", "after-second", b"v", &[]);
    assert_eq!(status, 200, "{body}");

    // Killed, the first leaves no stale lock: it starts again on its home at once.
    a.kill();
    a.restart();
    let (status, body) = a.put("notes", "after-restart", b"v", &[]);
    assert_eq!(status, 200, "{body}");
}

/// With no gateway answering, `ferry trust` writes the home itself; while another process holds
/// the home's lock (a gateway starting or stopping, which would not see the write until its
/// next start) it says so, exits 3 and writes nothing; once the lock is free it writes.
#[test]
fn an_offline_trust_waits_for_the_home_lock_and_writes_nothing_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::locate(Some(dir.path().to_path_buf())).unwrap();
    home.ensure().unwrap();
    let stranger = ferry_ticket::NodeKey::generate()
        .unwrap()
        .node_id()
        .to_string();
    let trust = || {
        std::process::Command::new(ferry_harness::ferry_bin())
            .args(["--home", dir.path().to_str().unwrap()])
            .args([
                "trust",
                &stranger,
                "--label",
                "later",
                "--addr",
                "127.0.0.1:9",
            ])
            .env_remove("FERRY_HOME")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let held = home.lock().unwrap();
    let refused = trust();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(3), "{said}");
    assert!(
        said.contains("is in use by another ferry process"),
        "{said}"
    );
    assert!(
        !home.db_path().exists(),
        "the refused trust made no database"
    );
    drop(held);
    let written = trust();
    assert!(
        written.status.success(),
        "{}",
        String::from_utf8_lossy(&written.stderr)
    );
    let conn = rusqlite::Connection::open(home.db_path()).unwrap();
    let trusted: i64 = conn
        .query_row(
            "SELECT count(*) FROM peers WHERE label = 'later'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(trusted, 1, "written once the lock was free");
}

/// A calling gateway that cannot write down what it must before a write leaves (the call's
/// record for settling, or the home's sent mark: a full or failing disk, injected here) says
/// `unavailable`, reason `cannot_record`, nothing sent; and nothing reached the owner.
#[test]
fn a_caller_that_cannot_record_a_write_does_not_send_it_and_says_so() {
    for fault in ["call_log=fail", "sent_mark=fail"] {
        let a = Gateway::start("a");
        let b = Gateway::start_with_env("b", &[("FERRY_DANGEROUS_FAULT", fault)]);
        let (a, b) = ferry_harness::pair_with_notes(a, b);
        let id = ferry_harness::fresh_request_id();
        let (status, body) = b.put("notes", "k", b"v", &[("X-Ferry-Request-Id", &id)]);
        assert_eq!(status, 503, "{fault}: {body}");
        assert_eq!(body["error"], "unavailable", "{fault}: {body}");
        assert_eq!(body["reason"], "cannot_record", "{fault}: {body}");
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|detail| detail.contains("nothing was sent")),
            "{fault}: {body}"
        );
        assert_eq!(
            a.metric("ferry_peer_requests_served_total{kind=\"write\"}"),
            0,
            "{fault}: no write reached the owner"
        );
        assert_eq!(
            a.journal_row(&id),
            None,
            "{fault}: the owner never saw {id}"
        );
    }
}
