//! The service definitions in `dist/` start a `ferry` command this build parses, and systemd's
//! own checker accepts the unit when it is on the machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use ferry_gateway::cli::{Cli, Command as Ferry};

fn dist(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../dist")
        .join(file)
}

fn read(file: &str) -> String {
    std::fs::read_to_string(dist(file)).unwrap_or_else(|err| panic!("dist/{file}: {err}"))
}

/// Parses `ferry ARGS...` as the binary would and insists it is `serve`.
fn assert_serves(args: &[&str], from: &str) {
    let cli = Cli::try_parse_from(std::iter::once("ferry").chain(args.iter().copied()))
        .unwrap_or_else(|err| panic!("{from}: `ferry {}` does not parse: {err}", args.join(" ")));
    assert!(
        matches!(cli.command, Ferry::Serve(_)),
        "{from} must run `ferry serve`"
    );
}

const SYSTEMD_BINARY: &str = "%h/.cargo/bin/ferry";

/// The local API's connection bound, as the service's file limit leaves it: the default must
/// fit, or a local process holding connections could take every file the gateway may open.
fn assert_files_fit_the_bound(files: Option<u64>, from: &str) {
    let files = files.unwrap_or_else(|| panic!("{from} sets no open-file limit"));
    let configured = ferry_gateway::config::Config::default()
        .local_api
        .max_connections;
    assert_eq!(
        ferry_gateway::api::connections::bound(configured, Some(files)),
        configured,
        "{from}: {files} open files hold the local API below its {configured} connections"
    );
}

#[test]
fn the_systemd_unit_runs_ferry_serve_and_gives_the_drain_room() {
    let unit = read("systemd/ferry.service");
    let exec = unit
        .lines()
        .find_map(|line| line.strip_prefix("ExecStart="))
        .expect("an ExecStart line");
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some(SYSTEMD_BINARY));
    assert_serves(&words.collect::<Vec<_>>(), "ferry.service");
    let stop_timeout: u64 = unit
        .lines()
        .find_map(|line| line.strip_prefix("TimeoutStopSec="))
        .and_then(|secs| secs.trim().parse().ok())
        .expect("a TimeoutStopSec in seconds");
    let drain_secs = ferry_gateway::config::Config::default().drain().as_secs();
    assert!(
        stop_timeout >= 2 * drain_secs,
        "SIGKILL must not cut a drain short: stop timeout {stop_timeout} s, drain {drain_secs} s"
    );
    let files = unit
        .lines()
        .find_map(|line| line.strip_prefix("LimitNOFILE="))
        .and_then(|files| files.trim().parse().ok());
    assert_files_fit_the_bound(files, "ferry.service");
}

#[test]
fn systemd_accepts_the_unit() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED systemd_accepts_the_unit: no systemd-analyze on this machine");
        return;
    }
    // The unit names the binary where `cargo install` puts it; point it at this build's.
    let dir = tempfile::tempdir().unwrap();
    let unit = read("systemd/ferry.service").replace(SYSTEMD_BINARY, env!("CARGO_BIN_EXE_ferry"));
    let path = dir.path().join("ferry.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !said.contains("ferry.service"),
        "systemd-analyze verify: {}\n{said}",
        out.status
    );
}

#[test]
fn the_launchd_agent_runs_ferry_serve_and_gives_the_drain_room() {
    let plist = read("launchd/dev.ferry.gateway.plist");
    // The shell line after `-c`: exec "$HOME/.cargo/bin/ferry" ARGS 2>>"LOG"
    let line = plist
        .lines()
        .map(str::trim)
        .find_map(|line| line.strip_prefix("<string>exec "))
        .and_then(|line| line.strip_suffix("</string>"))
        .expect("a ProgramArguments string starting `exec `")
        .replace("&gt;", ">");
    let rest = line
        .strip_prefix("\"$HOME/.cargo/bin/ferry\" ")
        .expect("exec of ~/.cargo/bin/ferry");
    let (args, log) = rest
        .split_once(" 2>>")
        .expect("standard error to a log file");
    assert_eq!(log, "\"$HOME/Library/Logs/ferry.log\"");
    assert_serves(
        &args.split_whitespace().collect::<Vec<_>>(),
        "the launchd agent",
    );
    assert!(plist.contains("<key>ExitTimeOut</key>\n    <integer>20</integer>"));
    let files = plist
        .split_once("<key>SoftResourceLimits</key>")
        .and_then(|(_, limits)| limits.split_once("<key>NumberOfFiles</key>"))
        .and_then(|(_, rest)| rest.trim_start().strip_prefix("<integer>"))
        .and_then(|rest| rest.split_once("</integer>"))
        .and_then(|(files, _)| files.trim().parse().ok());
    assert_files_fit_the_bound(files, "the launchd agent");
}
