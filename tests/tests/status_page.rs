//! The status page (issue 17) in a real headless browser: the system's Chromium, driven by
//! `tests/browser/status_page.mjs` (Node with playwright-core), against real gateways.
//!
//! 1. Opened as `ferry ui` opens it, on a replica of a pair, the page shows the owner's route
//!    up with an RTT chart and the vault with its sync progress, takes the one-time code out of
//!    the address bar, and refuses the same link a second time. Its screenshot is kept in
//!    `target/artifacts/status-page.png`.
//! 2. A page of another origin cannot read the status, the page or anything else, cannot stop
//!    the gateway or trade a code it somehow learned, cannot trust, untrust, follow or
//!    unfollow even with a session it somehow learned, and cannot frame the page; the same
//!    gateway reached under a name rebound to 127.0.0.1 refuses everything.
//! 3. `ferry ui` puts no secret on the command line it runs (which other users can read in
//!    `/proc`): it hands the opener a file only this user can read, and that file, opened in
//!    the browser, logs the page in.
//! 4. The page acts (issue 46): in a lab of two hosts, where each gateway sees the other on
//!    mDNS, the page trusts the discovered peer (showing its whole node id), follows a vault
//!    it owns until caught up, stops following it and untrusts the peer, each confirmed in a
//!    dialog, and the CLI sees each change; a read-only page shows no buttons and its session
//!    is refused. Screenshots of each step go to `target/status-page-shots/`.
//! 5. Each action is refused, and changes nothing, from another origin, under a rebound name,
//!    from a read-only session, without `Origin` and without a JSON body (raw HTTP, no browser
//!    needed), and goes through from the page's own origin.
//!
//! Needs Chromium (`/usr/bin/chromium`, or `CHROMIUM`), Node and `npm ci` in `tests/browser`;
//! `.ci/run` installs them. Without them each browser test says SKIPPED, unless
//! `FERRY_BROWSER_REQUIRED=1` (set in CI) makes that a failure. The lab's test needs root, as
//! every lab test does (`ferry_tests::lab`).

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ferry_harness::{ferry_bin, replica_of_notes, two_with_notes, wait_for, Gateway};
use ferry_tests::lab::Lab;
use serde_json::{json, Value};

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("browser")
}

fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

/// Whether the browser, Node and playwright-core are here; says SKIPPED (or fails, when
/// required) if not.
fn browser_available(test: &str) -> bool {
    let node = Command::new("node").arg("--version").output();
    let missing = if !chromium().is_file() {
        Some(format!("no Chromium at {}", chromium().display()))
    } else if !node.is_ok_and(|out| out.status.success()) {
        Some("no node".to_string())
    } else if !browser_dir().join("node_modules/playwright-core").is_dir() {
        Some("no tests/browser/node_modules (run `npm ci` there)".to_string())
    } else {
        None
    };
    match missing {
        None => true,
        Some(why) if std::env::var("FERRY_BROWSER_REQUIRED").as_deref() == Ok("1") => {
            panic!("{test}: {why}, and FERRY_BROWSER_REQUIRED=1")
        }
        Some(why) => {
            eprintln!(
                "\n*** SKIPPED {test}: {why}. Install Chromium and Node, run `npm ci` in \
                 tests/browser (as .ci/run does) to run it. ***\n"
            );
            false
        }
    }
}

/// Runs the driver; its one line of JSON.
fn drive(args: &[&str]) -> Value {
    drive_in(None, args)
}

/// Runs the driver inside the network namespace `ns` (a lab host, whose local API only a
/// process inside it can reach), or here; its one line of JSON.
fn drive_in(ns: Option<&str>, args: &[&str]) -> Value {
    let mut command = match ns {
        Some(ns) => {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", ns, "node"]);
            command
        }
        None => Command::new("node"),
    };
    let out = command
        .current_dir(browser_dir())
        .arg("status_page.mjs")
        .args(args)
        .env("CHROMIUM", chromium())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the browser driver failed ({}):\n{said}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("the driver printed no JSON ({err}):\n{said}"))
}

/// A one-time code from `ferry ui --print`, as a user would get it.
fn code_from_ferry_ui(g: &Gateway) -> String {
    code_from(g, &["ui", "--print"])
}

/// A one-time code from `ferry ui --print --read-only`.
fn read_only_code_from_ferry_ui(g: &Gateway) -> String {
    code_from(g, &["ui", "--print", "--read-only"])
}

fn code_from(g: &Gateway, command: &[&str]) -> String {
    let out = g.cli(command);
    assert!(
        out.status.success(),
        "ferry ui --print: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = String::from_utf8(out.stdout).unwrap();
    let url = url.trim();
    assert!(
        url.starts_with(&format!("http://{}/ui#code=", g.api)),
        "ferry ui --print printed {url:?}"
    );
    url.rsplit_once("#code=").unwrap().1.to_string()
}

fn put(g: &Gateway, key: &str) {
    let (status, body) = g.put("notes", key, key.as_bytes(), &[]);
    assert_eq!(status, 200, "put {key}: {body}");
}

fn cells(rows: &Value) -> Vec<Vec<String>> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|cell| cell.as_str().unwrap_or("").trim().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn the_page_shows_the_pairs_routes_and_the_vault_and_its_link_works_once() {
    if !browser_available("the_page_shows_the_pairs_routes_and_the_vault_and_its_link_works_once") {
        return;
    }
    let (a, b) = two_with_notes();
    for key in ["k1", "k2", "k3"] {
        put(&a, key);
    }
    let c = replica_of_notes(&a, &b);
    // A call from the replica's gateway to the owner, so a route has carried one.
    let (status, _, _, _) = c.get("notes", "k1");
    assert_eq!(status, 200);

    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let screenshot = artifacts.join("status-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let code = code_from_ferry_ui(&c);
    let shown = drive(&[
        "page",
        &c.api,
        &code,
        screenshot.to_str().unwrap(),
        "a",
        "notes",
    ]);

    assert_eq!(shown["title"], "Ferry · c", "{shown:#}");
    assert_eq!(shown["problem"], Value::Null, "{shown:#}");
    assert_eq!(shown["console_errors"], serde_json::json!([]), "{shown:#}");
    let machine = shown["machine"].as_str().unwrap();
    assert!(
        machine.contains(env!("CARGO_PKG_VERSION")) && machine.contains("2 trusted peers"),
        "{machine}"
    );
    // The code is gone from the address bar; the tab keeps its own session.
    let address = shown["address_bar"].as_str().unwrap();
    assert!(
        !address.contains("code"),
        "the code stayed in the URL: {address}"
    );
    assert_eq!(shown["session_stored"], true);

    let routes = cells(&shown["routes"]);
    let to_a = routes
        .iter()
        .find(|row| row[0].trim_end_matches(" ★") == "a")
        .unwrap_or_else(|| panic!("no route to a: {routes:?}"));
    assert_eq!(
        (to_a[1].as_str(), to_a[3].as_str()),
        ("lan", "up"),
        "{to_a:?}"
    );
    assert!(to_a[4].ends_with(" ms"), "an RTT: {to_a:?}");
    assert!(
        routes.iter().any(|row| row[0].starts_with('b')),
        "{routes:?}"
    );
    assert!(shown["sparklines"].as_u64().unwrap() >= 2, "{shown:#}");

    let vaults = cells(&shown["vaults"]);
    let notes = vaults
        .iter()
        .find(|row| row[0] == "notes")
        .unwrap_or_else(|| panic!("no vault notes: {vaults:?}"));
    assert_eq!(
        (notes[1].as_str(), notes[2].as_str()),
        ("a", "replica"),
        "{notes:?}"
    );
    let bars = shown["progress_bars"].as_array().unwrap();
    assert_eq!(bars.len(), 1, "{shown:#}");
    assert!(
        bars[0][0].as_f64() == bars[0][1].as_f64() && bars[0][1].as_f64() >= Some(3.0),
        "caught up to the owner's 3 revisions: {bars:?}"
    );
    let peers = cells(&shown["peers"]);
    assert!(
        peers.iter().any(|row| row[0] == "a" && row[2] == "yes"),
        "{peers:?}"
    );
    assert!(
        shown["reused_link_problem"]
            .as_str()
            .unwrap()
            .contains("has been used"),
        "{shown:#}"
    );
    let png = std::fs::metadata(&screenshot).unwrap().len();
    assert!(png > 10_000, "a screenshot of {png} bytes");
    eprintln!("status page screenshot: {}", screenshot.display());
}

#[test]
fn another_web_page_can_neither_read_the_status_nor_act() {
    if !browser_available("another_web_page_can_neither_read_the_status_nor_act") {
        return;
    }
    let (a, b) = two_with_notes();
    // `a` replicates `journal` from `b` (something to unfollow) and knows `b`'s `diary`
    // (something to follow).
    held(&b, &a, "journal");
    create(&b, "diary");
    knows(&a, "diary");
    // A code the other page somehow learned (from history, say), not yet traded, and a
    // session it somehow learned too.
    let code = code_from_ferry_ui(&a);
    let session = session_for(&a, &code_from_ferry_ui(&a)).0;
    let stranger = stranger();
    let before = state(&a);
    let report = drive(&["other", &a.api, &code, &session, &stranger]);

    for attempt in ["read_status", "read_status_with_credentials", "read_page"] {
        assert!(
            report[attempt]["error"].is_string(),
            "{attempt}: another origin read an answer: {report:#}"
        );
    }
    for attempt in ["stop", "trade"] {
        assert_eq!(
            (
                report[attempt]["type"].as_str(),
                report[attempt]["status"].as_u64()
            ),
            (Some("opaque"), Some(0)),
            "{attempt}: {report:#}"
        );
    }
    let framed = report["framed_page_text"].as_str().unwrap_or("");
    assert!(
        !framed.contains("Vaults"),
        "the page rendered inside another site: {framed:?}"
    );
    // The form's kind of request left the browser and was refused (the page cannot see the
    // answer); with the session, the browser asked first (a preflight), was refused, and never
    // sent them.
    assert_eq!(
        (
            report["trust_simple"]["type"].as_str(),
            report["trust_simple"]["status"].as_u64()
        ),
        (Some("opaque"), Some(0)),
        "{report:#}"
    );
    for attempt in [
        "trust_with_session",
        "untrust_with_session",
        "follow_with_session",
        "unfollow_with_session",
    ] {
        assert!(
            report[attempt]["error"]
                .as_str()
                .is_some_and(|err| err.contains("Failed to fetch")),
            "{attempt}: the browser sent it, or read an answer: {report:#}"
        );
    }
    for attempt in [
        "rebound_page_status",
        "rebound_trade",
        "rebound_status",
        "rebound_trust",
    ] {
        assert_eq!(report[attempt], 403, "{attempt}: {report:#}");
    }

    // None of it acted: the gateway still runs, trusts whom it did, follows what it did, and
    // the stranger is nowhere; the session still works for the page itself; and the code was
    // never traded, so it still trades (once) for this machine's own client.
    assert_eq!(a.get_json("/v1/status")["label"], "a");
    assert_eq!(state(&a), before, "another web page changed something");
    assert!(
        !a.get_json("/v1/peers").to_string().contains(&stranger),
        "the stranger was trusted"
    );
    assert_eq!(
        as_page(
            &a,
            &session,
            "/v1/admin/untrust",
            &json!({"label": "nobody"}),
            &[]
        )
        .0,
        404,
        "the session itself still acts from the page's own origin"
    );
    let trade = |code: &str| {
        reqwest::blocking::Client::new()
            .post(a.url("/v1/ui/session"))
            .json(&serde_json::json!({ "code": code }))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(
        trade(&code),
        200,
        "the other page's trade must not have used the code"
    );
    assert_eq!(trade(&code), 401, "a code trades once");
}

#[test]
#[cfg(unix)]
fn ferry_ui_puts_no_code_on_a_command_line_and_its_handover_logs_the_page_in() {
    use std::os::unix::fs::PermissionsExt;
    if !browser_available(
        "ferry_ui_puts_no_code_on_a_command_line_and_its_handover_logs_the_page_in",
    ) {
        return;
    }
    let a = Gateway::start("a");
    // A desktop whose opener records the command line `ferry ui` gives it, and the user's
    // runtime directory.
    let desktop = tempfile::tempdir().unwrap();
    let bin = desktop.path().join("bin");
    let runtime = desktop.path().join("runtime");
    for dir in [&bin, &runtime] {
        std::fs::create_dir(dir).unwrap();
    }
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let opened = desktop.path().join("opened");
    let opener = bin.join("xdg-open");
    std::fs::write(
        &opener,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > '{}'\n",
            opened.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();

    let out = Command::new(ferry_bin())
        .arg("--home")
        .arg(&a.home)
        .arg("ui")
        .env("PATH", path)
        .env("XDG_RUNTIME_DIR", &runtime)
        .env_remove("FERRY_HOME")
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("opened"),
        "ferry ui: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let command_line: Vec<String> = std::fs::read_to_string(&opened)
        .unwrap_or_else(|err| panic!("ferry ui ran no opener ({err})"))
        .lines()
        .map(str::to_string)
        .collect();
    assert!(
        command_line
            .iter()
            .all(|argument| !argument.contains("code=")),
        "the one-time link is on the opener's command line: {command_line:?}"
    );
    let [program, handed] = command_line.as_slice() else {
        panic!("ferry ui ran {command_line:?}, not the opener with one argument");
    };
    assert_eq!(Path::new(program), opener);

    // What it handed over: a file in the user's runtime directory that only they can read,
    // holding the one-time link; the code in it is nowhere on the command line.
    let handed = Path::new(handed);
    assert_eq!(handed.parent(), Some(runtime.as_path()), "{command_line:?}");
    let mode = std::fs::metadata(handed).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the handover file's mode is {mode:o}");
    let page = std::fs::read_to_string(handed).unwrap();
    let link = format!("http://{}/ui#code=", a.api);
    let code: String = page
        .split_once(&link)
        .unwrap_or_else(|| panic!("no link to {link} in the handover page:\n{page}"))
        .1
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    assert_eq!(code.len(), 64, "{page}");
    assert!(
        command_line
            .iter()
            .all(|argument| !argument.contains(&code)),
        "the code is on the opener's command line: {command_line:?}"
    );

    // The browser, given that file, ends on the status page, logged in, the code out of its
    // address bar; the code is spent.
    let shown = drive(&["handover", &a.api, handed.to_str().unwrap(), "a"]);
    assert_eq!(shown["title"], "Ferry · a", "{shown:#}");
    assert_eq!(shown["problem"], Value::Null, "{shown:#}");
    assert_eq!(shown["console_errors"], serde_json::json!([]), "{shown:#}");
    assert_eq!(
        shown["address_bar"],
        format!("http://{}/ui", a.api),
        "{shown:#}"
    );
    assert_eq!(shown["session_stored"], true, "{shown:#}");
    let again = reqwest::blocking::Client::new()
        .post(a.url("/v1/ui/session"))
        .json(&serde_json::json!({ "code": code }))
        .send()
        .unwrap()
        .status();
    assert_eq!(again, 401, "the browser traded the handed-over code");
}

/// `owner` creates `vault` and `follower` follows it (without waiting for it to catch up).
fn held(owner: &Gateway, follower: &Gateway, vault: &str) {
    create(owner, vault);
    let out = follower.cli(&[
        "vault",
        "follow",
        vault,
        "--owner",
        &owner.label,
        "--detach",
    ]);
    assert!(
        out.status.success(),
        "{} follows {vault}: {}",
        follower.label,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn create(owner: &Gateway, vault: &str) {
    let out = owner.cli(&["vault", "create", vault]);
    assert!(
        out.status.success(),
        "{} creates {vault}: {}",
        owner.label,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until `g` lists `vault` (a peer's, say).
fn knows(g: &Gateway, vault: &str) {
    wait_for(
        &format!("{} to list {vault}", g.label),
        Duration::from_secs(10),
        || {
            state(g)
                .vaults
                .iter()
                .any(|(name, _)| name == vault)
                .then_some(())
        },
    );
}

/// A node id no gateway here has.
fn stranger() -> String {
    ferry_ticket::NodeKey::generate()
        .unwrap()
        .node_id()
        .to_string()
}

/// Trades `code` at `g` as the page does: the session, and whether it is read-only.
fn session_for(g: &Gateway, code: &str) -> (String, bool) {
    let traded = reqwest::blocking::Client::new()
        .post(g.url("/v1/ui/session"))
        .json(&json!({ "code": code }))
        .send()
        .unwrap();
    assert_eq!(traded.status(), 200);
    let traded: Value = traded.json().unwrap();
    (
        traded["session"].as_str().unwrap().to_string(),
        traded["read_only"].as_bool().unwrap(),
    )
}

/// What the actions change at a gateway, as the token reads it: each peer (label, node id,
/// trusted) and each vault (name, role).
#[derive(Debug, PartialEq, Eq)]
struct Acted {
    peers: Vec<(String, String, bool)>,
    vaults: Vec<(String, String)>,
}

fn state(g: &Gateway) -> Acted {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let peers = g
        .get_json("/v1/peers")
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (text(&p["label"]), text(&p["node_id"]), p["trusted"] == true))
        .collect();
    let vaults = g
        .get_json("/v1/vaults")
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (text(&v["name"]), text(&v["role"])))
        .collect();
    Acted { peers, vaults }
}

/// `POST path` at `g` with `body` (JSON text), the bearer `bearer` if any and exactly the
/// headers `headers` besides; the status and the answer.
fn post_raw(
    g: &Gateway,
    bearer: Option<&str>,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut request = reqwest::blocking::Client::new()
        .post(g.url(path))
        .body(body.to_string());
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let answer = request.send().unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().unwrap_or(Value::Null))
}

/// `POST path` as the page sends it: the session, this API's own `Origin`, a JSON body, and
/// `headers` besides.
fn as_page(
    g: &Gateway,
    session: &str,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let origin = format!("http://{}", g.api);
    let mut all = vec![
        ("origin", origin.as_str()),
        ("content-type", "application/json"),
    ];
    all.extend_from_slice(headers);
    post_raw(g, Some(session), path, body, &all)
}

#[test]
fn each_action_is_refused_from_another_origin_a_rebound_name_a_read_only_session_or_without_origin()
{
    let (a, b) = two_with_notes();
    // At `a`: `b` trusted, `journal` (b's, two records) followed, `diary` (b's) not, a
    // stranger untrusted.
    held(&b, &a, "journal");
    for key in ["j1", "j2"] {
        let (status, body) = b.put("journal", key, key.as_bytes(), &[]);
        assert_eq!(status, 200, "put {key}: {body}");
    }
    wait_for(
        "a's replica of journal to hold both records",
        Duration::from_secs(10),
        || (a.records("journal").len() == 2).then_some(()),
    );
    create(&b, "diary");
    knows(&a, "diary");
    let stranger = stranger();
    let (acting, read_only) = session_for(&a, &code_from_ferry_ui(&a));
    assert!(!read_only, "`ferry ui` mints an acting session by default");
    let (reader, read_only) = session_for(&a, &read_only_code_from_ferry_ui(&a));
    assert!(read_only, "`ferry ui --read-only` mints a read-only one");

    let actions = [
        (
            "/v1/admin/trust",
            json!({"node_id": stranger, "label": "stranger"}),
        ),
        ("/v1/admin/untrust", json!({"label": "b"})),
        (
            "/v1/admin/vaults/follow",
            json!({"name": "diary", "owner": "b"}),
        ),
        ("/v1/admin/vaults/unfollow", json!({"name": "journal"})),
    ];
    let port = a.api.rsplit_once(':').unwrap().1;
    let rebound_host = format!("evil.example:{port}");
    let rebound_origin = format!("http://{rebound_host}");
    let own_origin = format!("http://{}", a.api);
    let before = state(&a);
    for (path, body) in &actions {
        // How each is sent: what it is, its bearer, and its headers.
        let refused = [
            (
                "from another origin",
                &acting,
                vec![
                    ("origin", "http://127.0.0.1:1"),
                    ("content-type", "application/json"),
                ],
            ),
            (
                "through a rebound name",
                &acting,
                vec![
                    ("host", rebound_host.as_str()),
                    ("origin", rebound_origin.as_str()),
                    ("content-type", "application/json"),
                ],
            ),
            (
                "from a read-only session",
                &reader,
                vec![
                    ("origin", own_origin.as_str()),
                    ("content-type", "application/json"),
                ],
            ),
            (
                "without Origin",
                &acting,
                vec![("content-type", "application/json")],
            ),
            (
                "as a form's text/plain",
                &acting,
                vec![
                    ("origin", own_origin.as_str()),
                    ("content-type", "text/plain"),
                ],
            ),
        ];
        for (how, bearer, headers) in refused {
            let (status, answer) = post_raw(&a, Some(bearer), path, body, &headers);
            assert_eq!(
                (status, answer["error"].as_str()),
                (403, Some("forbidden")),
                "{path} {how}: {answer}"
            );
            assert_eq!(state(&a), before, "{path} {how} changed something");
        }
        let (status, _) = post_raw(
            &a,
            None,
            path,
            body,
            &[
                ("origin", &own_origin),
                ("content-type", "application/json"),
            ],
        );
        assert_eq!(status, 401, "{path} with no session at all");
    }
    // A session is no bearer for the other admin routes, whatever it sends.
    let (status, _) = as_page(&a, &acting, "/v1/admin/stop", &json!({}), &[]);
    assert_eq!(status, 401, "a session stopping the gateway");
    let (status, _) = as_page(&a, &acting, "/v1/admin/ui-code", &json!({}), &[]);
    assert_eq!(status, 401, "a session minting codes");
    assert_eq!(state(&a), before);
    // The read-only session still reads.
    let read = reqwest::blocking::Client::new()
        .get(a.url("/v1/peers"))
        .bearer_auth(&reader)
        .send()
        .unwrap();
    assert_eq!(read.status(), 200, "a read-only session reads");

    // From the page's own origin each goes through, and changes what it says.
    let (status, trusted) = as_page(&a, &acting, actions[0].0, &actions[0].1, &[]);
    assert_eq!(
        (status, trusted["node_id"].as_str()),
        (200, Some(stranger.as_str())),
        "{trusted}"
    );
    let (status, followed) = as_page(&a, &acting, actions[2].0, &actions[2].1, &[]);
    assert_eq!(
        (status, followed["role"].as_str()),
        (200, Some("replica")),
        "{followed}"
    );
    let (status, gone) = as_page(&a, &acting, actions[3].0, &actions[3].1, &[]);
    assert_eq!(
        (status, gone["name"].as_str()),
        (200, Some("journal")),
        "{gone}"
    );
    let (status, untrusted) = as_page(&a, &acting, actions[1].0, &actions[1].1, &[]);
    assert_eq!(
        (status, untrusted["label"].as_str()),
        (200, Some("b")),
        "{untrusted}"
    );
    let Acted { peers, vaults } = state(&a);
    assert!(
        peers.contains(&("stranger".into(), stranger.clone(), true))
            && !peers.iter().any(|(label, _, _)| label == "b"),
        "{peers:?}"
    );
    assert!(
        vaults.contains(&("diary".into(), "replica".into()))
            && !vaults.contains(&("journal".into(), "replica".into())),
        "{vaults:?}"
    );
    assert!(
        a.records("journal").is_empty(),
        "the unfollowed replica's records stayed"
    );
}

/// Where the action screenshots go: `target/status-page-shots/`, emptied first.
fn shots_dir() -> PathBuf {
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/status-page-shots");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    shots
}

/// `g`'s view of the peer `node` in `ferry peers`: (label, trusted), if listed.
fn listed(g: &Gateway, node: &str) -> Option<(String, bool)> {
    let (code, peers) = g.cli_json(&["peers"]);
    assert_eq!(code, 0, "ferry peers: {peers}");
    peers
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["node_id"] == node)
        .map(|p| {
            (
                p["label"].as_str().unwrap_or("").to_string(),
                p["trusted"] == true,
            )
        })
}

/// `g`'s role for `vault` in `ferry vault list` (`owner`, `replica`, `remote`), and its
/// revision.
fn role(g: &Gateway, vault: &str) -> Option<(String, Option<u64>)> {
    let (code, vaults) = g.cli_json(&["vault", "list"]);
    assert_eq!(code, 0, "ferry vault list: {vaults}");
    vaults
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == vault)
        .map(|v| {
            (
                v["role"].as_str().unwrap_or("").to_string(),
                v["revision"].as_u64(),
            )
        })
}

#[test]
fn the_page_trusts_a_discovered_peer_follows_its_vault_stops_following_and_untrusts_it() {
    let test =
        "the_page_trusts_a_discovered_peer_follows_its_vault_stops_following_and_untrusts_it";
    if !browser_available(test) {
        return;
    }
    // A lab: the two gateways announce themselves on mDNS, which the loopback tests run
    // without, so each lists the other as seen, not trusted. Beside other labs: it checks
    // what happens, not how fast.
    let Some(lab) = Lab::new_beside_others(2) else {
        return;
    };
    let h1 = lab.start_ferry(1, "h1", &[]);
    let h2 = lab.start_ferry(2, "h2", &[]);
    // h2 trusts h1 (by id, its routes from mDNS) and owns `notes`, three records in it.
    let out = h2.cli(&["trust", &h1.node_id, "--label", "h1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    create(&h2, "notes");
    for key in ["k1", "k2", "k3"] {
        let out = h2.cli(&["put", "notes", key, &format!("value of {key}")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    wait_for("h1 to see h2 on mDNS", Duration::from_secs(15), || {
        listed(&h1, &h2.node_id).filter(|(_, trusted)| !trusted)
    });
    let ns = h1.lab_host().ns.clone();
    let shots = shots_dir();
    let shots_arg = shots.to_str().unwrap().to_string();
    let step = |args: &[&str]| {
        let code = code_from_ferry_ui(&h1);
        let mut all = vec!["act", h1.api.as_str(), code.as_str(), shots_arg.as_str()];
        all.extend_from_slice(args);
        let shown = drive_in(Some(&ns), &all);
        assert_eq!(shown["problem"], Value::Null, "{shown:#}");
        assert_eq!(shown["console_errors"], json!([]), "{shown:#}");
        shown
    };

    // Trust: the dialog shows h2's whole node id, as `ferry id` prints it there, and offers
    // the label h2 announced; cancelled, nothing happened; confirmed, `ferry peers` says so.
    let trusted = step(&["trust", &h2.node_id, "h2"]);
    let (code, id) = h2.cli_json(&["id"]);
    assert_eq!(code, 0);
    assert_eq!(trusted["dialog"]["node_id"], id["node_id"], "{trusted:#}");
    assert_eq!(
        trusted["dialog"]["node_id"].as_str(),
        Some(h2.node_id.as_str())
    );
    assert_eq!(trusted["dialog"]["label"], "h2", "{trusted:#}");
    assert!(
        trusted["dialog"]["body"]
            .as_str()
            .unwrap()
            .contains("ferry id"),
        "{trusted:#}"
    );
    assert_eq!(trusted["still_untrusted_after_cancel"], true, "{trusted:#}");
    assert!(
        trusted["notice"].as_str().unwrap().contains(&h2.node_id),
        "{trusted:#}"
    );
    assert_eq!(listed(&h1, &h2.node_id), Some(("h2".to_string(), true)));

    // Follow: the replica catches up with h2's three revisions; the CLI sees the replica and
    // reads its records.
    wait_for("h1 to learn h2's vaults", Duration::from_secs(10), || {
        role(&h1, "notes").filter(|(role, _)| role == "remote")
    });
    let followed = step(&["follow", "notes"]);
    assert!(
        followed["dialog"]["title"]
            .as_str()
            .unwrap()
            .contains("notes"),
        "{followed:#}"
    );
    assert_eq!(role(&h1, "notes"), Some(("replica".into(), Some(3))));
    assert_eq!(h1.records("notes").len(), 3, "the replica's records");
    let out = h1.cli(&["get", "notes", "k2"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "value of k2");

    // Stop following: the replica and its records are gone here; h2 still owns the vault.
    let unfollowed = step(&["unfollow", "notes"]);
    assert!(
        unfollowed["notice"].as_str().unwrap().contains("notes"),
        "{unfollowed:#}"
    );
    assert_eq!(
        role(&h1, "notes").map(|(role, _)| role),
        Some("remote".into())
    );
    assert!(
        h1.records("notes").is_empty(),
        "the replica's records stayed"
    );
    assert_eq!(role(&h2, "notes"), Some(("owner".into(), Some(3))));

    // A read-only page shows no button, and its session is refused what the page hides.
    let code = read_only_code_from_ferry_ui(&h1);
    let read_only = drive_in(
        Some(&ns),
        &["act", &h1.api, &code, &shots_arg, "read-only", "notes"],
    );
    assert_eq!(read_only["buttons"], json!([]), "{read_only:#}");
    assert_eq!(read_only["badge"], true, "{read_only:#}");
    assert_eq!(read_only["unfollow_anyway"]["status"], 403, "{read_only:#}");
    assert_eq!(read_only["unfollow_anyway"]["body"]["error"], "forbidden");

    // Untrust: h2 is listed as seen, not trusted, again.
    let untrusted = step(&["untrust", &h2.node_id, "h2"]);
    assert!(
        untrusted["dialog"]["body"]
            .as_str()
            .unwrap()
            .contains(&h2.node_id),
        "{untrusted:#}"
    );
    assert_eq!(listed(&h1, &h2.node_id), Some(("h2".to_string(), false)));

    for shot in [
        "01-discovered",
        "02-trust-confirm",
        "03-trusted",
        "04-follow-confirm",
        "05-following",
        "06-unfollow-confirm",
        "07-unfollowed",
        "08-untrust-confirm",
        "09-untrusted",
        "10-read-only",
    ] {
        let png = shots.join(format!("{shot}.png"));
        let size = std::fs::metadata(&png)
            .unwrap_or_else(|err| panic!("{}: {err}", png.display()))
            .len();
        assert!(size > 10_000, "{} is {size} bytes", png.display());
    }
    eprintln!("status page action screenshots: {}", shots.display());
}
