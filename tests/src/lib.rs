//! Ferry's cross-crate and multi-process tests live in `tests/` of this package. They start
//! real gateways through `ferry_harness` (one `Gateway` type, on loopback or in a lab host;
//! the benchmarks use it too). This library holds the [`lab`] (hosts as network namespaces;
//! here, since the fault campaign's binary, [`campaign`], uses it too), the history checker,
//! the lab apps and the simulation.

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

use std::process::{Command, Stdio};

/// The environment variable that turns a missing lab prerequisite (root, `ip`, a network
/// namespace) from a SKIPPED line into a failure; CI sets it to `1`.
pub const LAB_REQUIRED_VAR: &str = "FERRY_LAB_REQUIRED";

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

/// Lowers the calling thread's CPU priority (nice 10), for test work that computes in virtual
/// time and measures nothing real: the simulation's seeds keep both cores busy for minutes,
/// and beside them a test that measures real time (the lab's failover) saw its gateways starved
/// and its routes flap. At nice 10 such a thread gets about a tenth of a core another wants, and
/// all of an idle one. renice(1) on the thread's own id rather than libc keeps the harnesses free
/// of unsafe code; where it cannot be done the work simply runs at its usual priority.
pub fn yield_the_cpu_to_tests_that_measure_time() {
    let Ok(link) = std::fs::read_link("/proc/thread-self") else {
        return;
    };
    // `/proc/thread-self` is `<pid>/task/<tid>`.
    let Some(tid) = link.file_name().and_then(|name| name.to_str()) else {
        return;
    };
    let _ = Command::new("renice")
        .args(["-n", "10", "-p", tid])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
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
