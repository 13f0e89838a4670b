//! The status page (issue 17) in a real headless browser: the system's Chromium, driven by
//! `tests/browser/status_page.mjs` (Node with playwright-core), against real gateways.
//!
//! 1. Opened as `ferry ui` opens it, on a replica of a pair, the page shows the owner's route
//!    up with an RTT chart and the vault with its sync progress, takes the one-time code out of
//!    the address bar, and refuses the same link a second time. Its screenshot is kept in
//!    `target/artifacts/status-page.png`.
//! 2. A page of another origin cannot read the status, the page or anything else, cannot stop
//!    the gateway or trade a code it somehow learned, and cannot frame the page; the same
//!    gateway reached under a name rebound to 127.0.0.1 refuses everything.
//! 3. `ferry ui` puts no secret on the command line it runs (which other users can read in
//!    `/proc`): it hands the opener a file only this user can read, and that file, opened in
//!    the browser, logs the page in.
//!
//! Needs Chromium (`/usr/bin/chromium`, or `CHROMIUM`), Node and `npm ci` in `tests/browser`;
//! `.ci/run` installs them. Without them each test says SKIPPED, unless
//! `FERRY_BROWSER_REQUIRED=1` (set in CI) makes that a failure.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_harness::{ferry_bin, replica_of_notes, two_with_notes, Gateway};
use serde_json::Value;

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
    let out = Command::new("node")
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
    let out = g.cli(&["ui", "--print"]);
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
    let (a, _b) = two_with_notes();
    // A code the other page somehow learned (from history, say), not yet traded.
    let code = code_from_ferry_ui(&a);
    let report = drive(&["other", &a.api, &code]);

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
    for attempt in ["rebound_page_status", "rebound_trade", "rebound_status"] {
        assert_eq!(report[attempt], 403, "{attempt}: {report:#}");
    }

    // None of it acted: the gateway still runs, and the code was never traded, so it still
    // trades (once) for this machine's own client.
    assert_eq!(a.get_json("/v1/status")["label"], "a");
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
