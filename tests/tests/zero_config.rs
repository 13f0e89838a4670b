//! `ferry serve` with no arguments and no config just works (SPEC 2): it makes its key, token
//! and database in the platform data directory and listens on the default ports.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::process::{Command, Stdio};
use std::time::Duration;

use harness::{ferry_bin, wait_for, START_BOUND};

#[test]
fn serve_with_no_arguments_makes_its_state_and_listens_on_the_defaults() {
    if std::net::TcpListener::bind("127.0.0.1:7420").is_err() {
        eprintln!("SKIPPED serve_with_no_arguments...: port 7420 is in use on this machine");
        return;
    }
    let fake_home = tempfile::tempdir().unwrap();
    let ferry = |args: &[&str]| {
        let mut command = Command::new(ferry_bin());
        command
            .args(args)
            .env("HOME", fake_home.path())
            .env_remove("FERRY_HOME")
            .env_remove("XDG_DATA_HOME")
            .stdin(Stdio::null());
        command
    };
    let mut serve = ferry(&["serve"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let state = fake_home.path().join(".local/share/ferry");
    let api = wait_for(
        "the zero-config gateway to write api.addr",
        START_BOUND,
        || {
            std::fs::read_to_string(state.join("api.addr"))
                .ok()
                .filter(|s| s.ends_with('\n'))
        },
    );
    assert_eq!(api.trim(), "127.0.0.1:7420");
    for file in ["node.key", "local-token", "ferry.db"] {
        assert!(state.join(file).exists(), "{file} was made");
    }
    let status = ferry(&["status", "--json"]).output().unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let id = ferry(&["id"]).output().unwrap();
    assert_eq!(
        String::from_utf8(id.stdout).unwrap().trim(),
        status["node_id"].as_str().unwrap()
    );
    assert_eq!(status["addresses"][0].as_str(), Some("0.0.0.0:7420"));
    assert!(ferry(&["stop"]).output().unwrap().status.success());
    let exit = wait_for(
        "the gateway to exit after `ferry stop`",
        Duration::from_secs(10),
        || serve.try_wait().unwrap(),
    );
    assert_eq!(exit.code(), Some(0));
}
