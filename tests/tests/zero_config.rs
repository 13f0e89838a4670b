//! `ferry serve` with no arguments and no config just works (SPEC 2): it makes its key, token
//! and database in the platform data directory and listens on the default ports.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::Duration;

use ferry_harness::{ferry_bin, wait_for, START_BOUND};

/// A network namespace with only loopback, removed on drop.
struct PrivateNetns {
    name: String,
}

impl PrivateNetns {
    /// The namespace, or why this box cannot make one (not root, no `ip`). A namespace that
    /// `ip` fails to make is a failure, not a reason.
    fn new() -> Result<Self, String> {
        if !ferry_tests::running_as_root() {
            return Err(
                "needs root for a private network namespace (CI runs it as root)".to_string(),
            );
        }
        if !ferry_tests::have_ip() {
            return Err(
                "needs `ip` (iproute2) for a private network namespace, and it is missing"
                    .to_string(),
            );
        }
        let name = format!("fzc{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        let made = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .map_err(|err| format!("could not run `ip netns add {name}`: {err}"))?;
        assert!(made.success(), "ip netns add {name} failed");
        // From here on, dropping `netns` deletes the namespace.
        let netns = Self { name };
        let up = Command::new("ip")
            .args(["-n", &netns.name, "link", "set", "lo", "up"])
            .status()
            .map_err(|err| format!("could not run `ip -n {} link set lo up`: {err}", netns.name))?;
        assert!(up.success(), "bringing lo up in {} failed", netns.name);
        Ok(netns)
    }
}

impl Drop for PrivateNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

#[test]
fn serve_with_no_arguments_makes_its_state_and_listens_on_the_defaults() {
    // With no arguments mDNS is on: run inside a network namespace of its own (only `lo`), so
    // nothing multicasts onto this machine's real network. That needs root.
    // Without root or `ip` this says SKIPPED, unless FERRY_LAB_REQUIRED=1 makes it a failure.
    let netns = match PrivateNetns::new() {
        Ok(netns) => netns,
        Err(why) => {
            ferry_tests::skip_or_fail(
                "serve_with_no_arguments_makes_its_state_and_listens_on_the_defaults",
                &why,
            );
            return;
        }
    };
    let fake_home = tempfile::tempdir().unwrap();
    let ferry = |args: &[&str]| {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &netns.name, ferry_bin()])
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
