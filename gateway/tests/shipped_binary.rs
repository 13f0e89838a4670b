//! The `ferry` binary obeys none of the test build's switches (issue 43). In a workspace-wide
//! build (`cargo test --workspace`, which builds this very binary for this test) feature
//! unification compiles the gateway's test-only fault points and bugs into `ferry`; still
//! nothing in it reads a `FERRY_DANGEROUS_*` or `FERRY_INJECT_BUG` variable (only the test
//! build's `main` arms them), so a `ferry` started with every one of them set writes, speaks
//! its own protocols and logs no fault. The root build, which has no such points at all, is
//! held by `tests/tests/crate_boundaries.rs`.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const FERRY: &str = env!("CARGO_BIN_EXE_ferry");

/// Every test-only switch a test build obeys, each set to a value that would show.
const SWITCHES: &[(&str, &str)] = &[
    ("FERRY_DANGEROUS_FAULT", "before_commit=crash,call_log=fail"),
    ("FERRY_DANGEROUS_PROTOCOLS", "3-4"),
    ("FERRY_DANGEROUS_CLOCK_OFFSET_MS", "600000"),
    ("FERRY_DANGEROUS_SETTLE_STATE", "4"),
    ("FERRY_INJECT_BUG", "answer_before_commit"),
];

/// How long a fresh gateway may take to listen, and to exit after `ferry stop`.
const BOUND: Duration = Duration::from_secs(20);

#[test]
fn the_ferry_binary_names_no_test_switch() {
    let binary = std::fs::read(FERRY).unwrap();
    for name in ["FERRY_DANGEROUS_", "FERRY_INJECT_BUG"] {
        assert!(
            !binary
                .windows(name.len())
                .any(|window| window == name.as_bytes()),
            "{FERRY} holds the name {name}: something in the shipped binary reads a test-only \
             switch"
        );
    }
}

/// A `ferry serve` killed when dropped, so a failing test leaves nothing running.
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cli(home: &Path, args: &[&str]) -> Output {
    let out = Command::new(FERRY)
        .arg("--home")
        .arg(home)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ferry {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn a_ferry_started_with_every_test_switch_set_ignores_them() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let log = home.join("serve.log");
    let mut serving = Serving(
        Command::new(FERRY)
            .arg("--home")
            .arg(home)
            .args(["serve", "--api", "127.0.0.1:0", "--listen", "127.0.0.1:0"])
            .args(["--no-mdns", "--label", "shipped"])
            .envs(SWITCHES.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while !home.join("api.addr").exists() {
        if let Some(status) = serving.0.try_wait().unwrap() {
            panic!(
                "ferry serve exited ({status}) before listening:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(
            started.elapsed() < BOUND,
            "ferry serve did not listen within {BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    cli(home, &["vault", "create", "notes"]);
    // With the fault points armed, the call log would refuse this write and the owner crash
    // before its commit.
    let put = cli(home, &["put", "notes", "k", "v"]);
    assert!(
        String::from_utf8_lossy(&put.stdout).contains("done"),
        "{}",
        String::from_utf8_lossy(&put.stdout)
    );
    let status: serde_json::Value =
        serde_json::from_slice(&cli(home, &["--json", "status"]).stdout).unwrap();
    assert_ne!(status["protocols"], "3-4", "{status}");

    cli(home, &["stop"]);
    let started = Instant::now();
    while serving.0.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < BOUND,
            "ferry did not exit within {BOUND:?} of `ferry stop`"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        !said.contains("fault injection"),
        "the shipped binary obeyed a test switch:\n{said}"
    );
}
