//! The one way Ferry's tests, lab, fault campaign and benchmarks start a real `ferry serve`:
//! a [`Gateway`], in its own state directory, at a [`Place`] — this machine's loopback, a lab
//! host's network namespace (then every command it runs goes through `ip netns exec`), or
//! Windows under Wine on loopback (a Windows build, in a Wine prefix of its own).
//!
//! The core methods return a [`GatewayError`] (the benchmarks report it and go on); each has a
//! panicking convenience for tests, named without the `try_`. Every wait is bounded and says
//! what did not happen, with the gateway's log when it helps. A gateway's process is killed
//! when its handle drops, so a failing test or a benchmark's early return leaves nothing
//! running.
//!
//! - [`gateway`]: [`Gateway`], its [`Options`], its CLI ([`Cli`]); the tests' panicking
//!   conveniences, HTTP helpers and database views are further `impl Gateway` blocks beside
//!   it, with the pairs of gateways most tests begin with ([`two_with_notes`]).
//! - [`place`]: where a gateway runs ([`Place`], [`LabHost`]); [`wine`]: Wine's prefixes.
//! - [`process`]: bounded waits on child processes.

// Tests, the lab and the benchmarks wait on real processes for real time, so `clippy.toml`'s
// ban on reading a clock outside the clock modules does not apply here.
#![allow(clippy::disallowed_methods)]

mod api;
mod convenient;
mod db;
mod error;
pub mod gateway;
mod http;
mod pairs;
pub mod place;
pub mod process;
pub mod wine;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use api::header_text;
pub use db::Record;
pub use error::GatewayError;
pub use gateway::{Cli, Gateway, Log, Options};
pub use pairs::{follow_notes, pair_with_notes, replica_of_notes, serve_refused, two_with_notes};
pub use place::{LabHost, Place};
pub use process::wait_until_listening;
pub use wine::{WineHost, WinePrefix};

/// How long a gateway may take to start listening.
pub const START_BOUND: Duration = Duration::from_secs(15);

/// How long a gateway may take to exit after `ferry stop` (its drain is 5 s by default).
pub const STOP_BOUND: Duration = Duration::from_secs(15);

/// How long one CLI command may take (generous: some wait for a peer or a settle).
pub const CLI_BOUND: Duration = Duration::from_secs(120);

/// Signals by number (Linux), for [`Gateway::signal`].
pub const SIGSTOP: i32 = 19;
pub const SIGCONT: i32 = 18;
pub const SIGTERM: i32 = 15;

/// The variable that names the gateway binary to run, when it is not found beside this program.
pub const FERRY_BIN_VAR: &str = "FERRY_UNDER_TEST";

/// The binary under test: `$FERRY_UNDER_TEST` (to run the tests against another build, an
/// older one say, to show a regression test failing), else `ferry-under-test` beside the
/// running program or one directory up (an integration test runs from `target/<profile>/deps`,
/// the campaign from `target/<profile>`; cargo builds `ferry-tests`' binaries for its tests).
/// The benchmarks never use it: they name the binary they measure.
pub fn ferry_bin() -> &'static str {
    static FOUND: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| {
        sibling_binary("ferry-under-test", FERRY_BIN_VAR).unwrap_or_else(|why| panic!("{why}"))
    })
}

/// The test package's binary `name`, found as [`ferry_bin`] finds the gateway (`var` names it
/// outright); the error says where it looked and how to build it.
pub fn sibling_binary(name: &str, var: &str) -> Result<String, String> {
    if let Some(path) = std::env::var_os(var) {
        return Ok(PathBuf::from(path).display().to_string());
    }
    let exe = std::env::current_exe().map_err(|err| format!("where am I? {err}"))?;
    let dirs: Vec<&Path> = exe.ancestors().skip(1).take(2).collect();
    dirs.iter()
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .map(|path| path.display().to_string())
        .ok_or_else(|| {
            format!(
                "no {name} in {dirs:?}: build it (`cargo build -p ferry-tests --bins`, with \
                 --release for a release campaign) or name it in {var}"
            )
        })
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
/// rather than libc keeps the harness free of unsafe code.
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

/// A fresh UUIDv7 in its text form, stamped with the current time.
pub fn fresh_request_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

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
