//! The gateways most tests begin with, and a start that must be refused.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Gateway, START_BOUND};

/// Two gateways on loopback that trust each other, with vault `notes` owned by `a`.
pub fn two_with_notes() -> (Gateway, Gateway) {
    pair_with_notes(Gateway::start("a"), Gateway::start("b"))
}

/// `a` and `b` (both already started, e.g. with fault points or a config), trusting each
/// other, with vault `notes` owned by `a`.
pub fn pair_with_notes(a: Gateway, b: Gateway) -> (Gateway, Gateway) {
    a.trust_each_other(&b);
    if let Err(err) = a.cli_stdout(&["vault", "create", "notes"]) {
        panic!("{err}");
    }
    (a, b)
}

/// A third gateway `c` that trusts `a` and `b` and is trusted by them, replicating `notes`
/// (owned by `a`).
pub fn replica_of_notes(a: &Gateway, b: &Gateway) -> Gateway {
    follow_notes(Gateway::start("c"), a, b)
}

/// `c` (already started, of any build) made to trust `a` and `b` and be trusted by them, and to
/// replicate `notes` (owned by `a`).
pub fn follow_notes(c: Gateway, a: &Gateway, b: &Gateway) -> Gateway {
    a.trust_each_other(&c);
    b.trust_each_other(&c);
    if let Err(err) = c.cli_stdout(&["vault", "follow", "notes", "--owner", "a"]) {
        panic!("{err}");
    }
    c
}

/// Runs `ferry serve` of the build at `bin` on `home`, on loopback ports of its own, which
/// must refuse to start: waits at most [`START_BOUND`] for it to exit and returns its exit
/// code and what it printed. A process that starts serving instead (it writes `api.addr` anew)
/// or hangs is killed and the test fails, naming `home_is` ("a home in use", say).
pub fn serve_refused(bin: &Path, home: &Path, home_is: &str) -> (Option<i32>, String) {
    let api_addr = home.join("api.addr");
    let api_addr_before = std::fs::read_to_string(&api_addr).ok();
    let out_dir = tempfile::tempdir().unwrap_or_else(|err| panic!("a temporary dir: {err}"));
    let out_path = out_dir.path().join("serve.out");
    let out = std::fs::File::create(&out_path)
        .and_then(|out| Ok((out.try_clone()?, out)))
        .unwrap_or_else(|err| panic!("{}: {err}", out_path.display()));
    let mut child = Command::new(bin)
        .arg("--home")
        .arg(home)
        .arg("serve")
        .args(["--api", "127.0.0.1:0", "--listen", "127.0.0.1:0"])
        .args(["--no-mdns", "--label", "refused"])
        .env("RUST_LOG", "info")
        .env_remove("FERRY_DANGEROUS_FAULT")
        .env_remove("FERRY_HOME")
        .stdin(Stdio::null())
        .stdout(out.0)
        .stderr(out.1)
        .spawn()
        .unwrap_or_else(|err| panic!("run {} serve: {err}", bin.display()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            break status;
        }
        let serving = std::fs::read_to_string(&api_addr).ok() != api_addr_before;
        if started.elapsed() > START_BOUND || serving {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the build at {} started on (or hung for {:?} over) {home_is}; it printed:\n{}",
                bin.display(),
                started.elapsed(),
                std::fs::read_to_string(&out_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (
        status.code(),
        std::fs::read_to_string(&out_path).unwrap_or_default(),
    )
}
