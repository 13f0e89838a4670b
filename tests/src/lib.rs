//! Ferry's cross-crate and multi-process tests live in `tests/` of this package. Their two
//! harnesses are `tests/harness/mod.rs` (gateways on loopback; it finds the binary under test
//! with `env!("CARGO_BIN_EXE_...")`, which only integration tests are told) and [`lab`]
//! (gateways in network namespaces; here in the library, since the fault campaign's binary,
//! [`campaign`], uses it too, and it finds the binary beside the running program). This
//! library holds what they share, the history checker, the lab apps and the simulation.

// Tests, the lab and the campaign measure real time by design (bounds on real waits, real
// processes), so `clippy.toml`'s ban on reading a clock outside the clock modules is lifted
// here; the simulation ([`sim`]) reads only its virtual time and denies it again.
#![allow(clippy::disallowed_methods)]

pub mod campaign;
pub mod history;
pub mod lab;
pub mod lab_api;
pub mod lab_app;
pub mod lab_forge;
pub mod lab_steady;
pub mod owner_db;
pub mod previous;
pub mod sim;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a gateway may take to start listening.
pub const START_BOUND: Duration = Duration::from_secs(15);

/// Signals by number (Linux), for the harnesses' `signal`.
pub const SIGSTOP: i32 = 19;
pub const SIGCONT: i32 = 18;
pub const SIGTERM: i32 = 15;

/// The environment variable that turns a missing lab prerequisite (root, `ip`, a network
/// namespace) from a SKIPPED line into a failure; CI sets it to `1`.
pub const LAB_REQUIRED_VAR: &str = "FERRY_LAB_REQUIRED";

/// The revision `vault` has in the database `conn` is open on (0 if it has none).
pub fn vault_revision(conn: &rusqlite::Connection, vault: &str) -> u64 {
    conn.query_row(
        "SELECT revision FROM vaults WHERE name = ?1",
        [vault],
        |row| row.get::<_, i64>(0),
    )
    .map(|r| r as u64)
    .unwrap_or(0)
}

/// Polls `done` until it returns `Some`, at most `bound`; panics with `what` otherwise.
pub fn wait_for<T>(what: &str, bound: Duration, mut done: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = done() {
            return value;
        }
        assert!(
            started.elapsed() < bound,
            "gave up after {bound:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether tests that need namespaces must run rather than skip: [`LAB_REQUIRED_VAR`] is set
/// to anything but empty or `0`.
pub fn lab_required() -> bool {
    std::env::var_os(LAB_REQUIRED_VAR).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Reports a missing prerequisite of `test`: a panic when [`lab_required`], otherwise a
/// SKIPPED line on standard error (the caller then returns without testing anything).
pub fn skip_or_fail(test: &str, why: &str) {
    assert!(
        !lab_required(),
        "{test} cannot run: {why}; {LAB_REQUIRED_VAR} is set, so this is a failure, not a skip"
    );
    eprintln!("\n*** SKIPPED {test}: {why} ***\n");
}

/// Whether this process runs as root (effective uid 0), from `/proc/self/status`.
pub fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            // Real, effective, saved, filesystem.
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false)
}

/// Whether `ip` (iproute2) can be run at all.
pub fn have_ip() -> bool {
    Command::new("ip")
        .arg("-V")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// A finished command's exit code and output, for failure messages.
pub fn describe(output: &Output) -> String {
    format!(
        "exit {:?}, stdout {:?}, stderr {:?}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).trim(),
        String::from_utf8_lossy(&output.stderr).trim()
    )
}

/// Sends signal number `signal` to process `pid`; panics unless it was delivered. kill(1)
/// rather than libc keeps the harnesses free of unsafe code.
pub fn send_signal(pid: u32, signal: i32) {
    let output = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("could not run kill -{signal} {pid}: {err}"));
    assert!(
        output.status.success(),
        "kill -{signal} {pid} failed: {}",
        describe(&output)
    );
}

/// Waits, at most [`START_BOUND`], for the just-spawned `ferry serve` `child` to write a whole
/// `api.addr` in `home`, and returns that file. Fails at once, with its log (`serve.log` in
/// `home`), if the process exits first; kills and reaps it, then fails, when the bound passes.
/// `who` names the gateway in those messages.
pub fn wait_until_listening(child: &mut Child, home: &Path, who: &str) -> String {
    let log = || std::fs::read_to_string(home.join("serve.log")).unwrap_or_default();
    let started = Instant::now();
    loop {
        if let Some(api) = std::fs::read_to_string(home.join("api.addr"))
            .ok()
            .filter(|s| s.ends_with('\n'))
        {
            return api;
        }
        if let Some(status) = child.try_wait().ok().flatten() {
            panic!(
                "ferry serve for {who} exited with {status} before listening; its log:\n{}",
                log()
            );
        }
        if started.elapsed() > START_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "gave up after {START_BOUND:?} waiting for {who} to write api.addr; its log:\n{}",
                log()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `ferry doctor --json`'s finding about `subject`: (ok, says, fix); fails naming the subject
/// when there is none.
pub fn doctor_finding(report: &serde_json::Value, subject: &str) -> (bool, String, Option<String>) {
    let found = report["findings"]
        .as_array()
        .and_then(|all| all.iter().find(|f| f["subject"] == subject))
        .unwrap_or_else(|| panic!("no finding about {subject}: {report:#}"));
    (
        found["ok"].as_bool().unwrap_or(false),
        found["says"].as_str().unwrap_or("").to_string(),
        found["fix"].as_str().map(str::to_string),
    )
}
