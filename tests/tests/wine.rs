//! Ferry on Windows, run for real: the Windows build (`ferry.exe`, `x86_64-pc-windows-gnu`)
//! under Wine and a native Linux gateway, on loopback, walk the README's short tour across each
//! other. The Windows gateway runs with no `--home`, so its state is where a person's would
//! be (`%LOCALAPPDATA%\ferry`, in a Wine prefix of the test's own), and every command on its
//! side is its own CLI under Wine. Wine 8.0 refuses a socket option quinn-udp sets, so the
//! gateway takes the plain UDP path (`peer/src/udp_io.rs`) and must say so once.
//!
//! The build is named by `FERRY_WINDOWS_FERRY` and the DLLs Wine lacks by `FERRY_WINDOWS_DLLS`;
//! `tests/windows/run-wine-tests` builds both and runs this module. Without them the test says
//! SKIPPED, unless `FERRY_WINE_REQUIRED` is set (as CI sets it), when it fails.

use std::io::Read;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use ferry_harness::wine::{WINDOWS_DLLS_VAR, WINDOWS_FERRY_VAR};
use ferry_harness::{fresh_request_id, wait_for, Gateway, Options, Place, WinePrefix};

/// The Windows build and the DLLs' directory, or `None` (said loudly) when not given.
fn windows_build() -> Option<(PathBuf, PathBuf)> {
    let var = |name| std::env::var_os(name).map(PathBuf::from);
    match (var(WINDOWS_FERRY_VAR), var(WINDOWS_DLLS_VAR)) {
        (Some(exe), Some(dlls)) => Some((exe, dlls)),
        _ if std::env::var_os("FERRY_WINE_REQUIRED").is_some() => panic!(
            "FERRY_WINE_REQUIRED is set but {WINDOWS_FERRY_VAR} and {WINDOWS_DLLS_VAR} are not: \
             run this through tests/windows/run-wine-tests"
        ),
        _ => {
            eprintln!(
                "*** SKIPPED: the Windows gateway under Wine ({WINDOWS_FERRY_VAR} and \
                 {WINDOWS_DLLS_VAR} are not set; tests/windows/run-wine-tests sets them) ***"
            );
            None
        }
    }
}

/// `ferry ARGS` on `gateway`'s side, which must succeed; its standard output.
fn said(gateway: &Gateway, args: &[&str]) -> String {
    gateway
        .cli_stdout(args)
        .unwrap_or_else(|err| panic!("{err}\n{}'s log:\n{}", gateway.label, gateway.log_tail(30)))
}

/// Asserts `ferry ARGS` on `gateway`'s side printed a line starting with `starts`.
fn assert_says(gateway: &Gateway, args: &[&str], starts: &str) {
    let out = said(gateway, args);
    assert!(
        out.lines().any(|line| line.starts_with(starts)),
        "`ferry {}` on {} printed {out:?}, not a line starting {starts:?}",
        args.join(" "),
        gateway.label
    );
}

#[test]
fn a_windows_gateway_under_wine_and_a_linux_gateway_walk_the_tour_across_each_other() {
    let Some((exe, dlls)) = windows_build() else {
        return;
    };
    let prefix = WinePrefix::boot(&dlls).unwrap_or_else(|err| panic!("{err}"));
    let wine = prefix.host();
    let mut w = Gateway::start_at(Place::Wine(wine.clone()), "w", Options::new().binary(&exe));
    let mut l = Gateway::start("l");

    // Its home is the Windows default, and its CLI finds it there with no --home.
    assert_eq!(w.home, wine.default_home());
    assert!(
        w.home.join("node.key").is_file(),
        "no node key in {}",
        w.home.display()
    );
    assert_eq!(said(&w, &["id"]).trim(), w.node_id);

    // The fallback, said once in the log and by the doctor, with Wine's refusal.
    let warning = w.wait_for_log_line(&["plain datagrams", "10045"], Duration::from_secs(10));
    // Shown in CI's log (it runs this with --nocapture).
    println!("the Windows gateway under Wine said: {}", warning.trim());
    assert_eq!(
        w.log().matches("plain datagrams").count(),
        1,
        "the fallback is said once:\n{}",
        w.log()
    );
    let doctor = String::from_utf8_lossy(&w.cli(&["doctor"]).stdout).into_owned();
    assert!(
        doctor.contains("udp path") && doctor.contains("plain datagrams"),
        "{doctor}"
    );

    // Trust both ways, a vault owned by each side.
    w.trust_each_other(&l);
    assert_says(
        &w,
        &["vault", "create", "desk"],
        "created vault desk (owned here)",
    );
    assert_says(
        &l,
        &["vault", "create", "notes"],
        "created vault notes (owned here)",
    );

    // Writes across, each way, and reads of them: from the cache of the side that wrote, from
    // the owner for a key the reader never saw.
    assert_says(&w, &["put", "notes", "hello", "world"], "done: revision 1");
    assert_says(&l, &["put", "desk", "from-linux", "hi"], "done: revision 1");
    assert_says(
        &w,
        &["put", "desk", "from-windows", "there"],
        "done: revision 2",
    );
    assert_eq!(said(&l, &["get", "notes", "hello"]).trim(), "world");
    assert_eq!(said(&w, &["get", "notes", "hello"]).trim(), "world");
    let (code, read) = l.cli_json(&["get", "desk", "from-windows"]);
    assert_eq!(
        (code, read["value"].as_str(), read["source"].as_str()),
        (0, Some("there"), Some("owner")),
        "{read}"
    );
    // An app on the Windows machine calls its gateway's local API.
    let (status, body) = w.put("notes", "from-an-app", b"v", &[]);
    assert_eq!(status, 200, "{body}");
    // The change feed of the vault the Windows side owns.
    assert_eq!(
        said(&w, &["watch", "desk", "--count", "1"]).trim(),
        "1 from-linux"
    );

    // The Windows caller killed mid-call: the owner holds every write 1.5 s before its commit,
    // so the write has arrived when the owner's log says so and the kill comes before the
    // answer. The CLI (under Wine too) must say outcome_unknown, never "nothing was sent",
    // and after a restart the Windows gateway settles it to what the owner did.
    l.restart_with(&[("FERRY_DANGEROUS_FAULT", "before_commit=stall:1500")]);
    wait_for(
        "the Windows side to write through the restarted owner",
        Duration::from_secs(30),
        || (w.put("notes", "warm-up", b"x", &[]).0 == 200).then_some(()),
    );
    let id = fresh_request_id();
    let mut cli = w
        .place()
        .command(w.bin())
        .args(["--json", "put", "notes", "victim", "carried-out"])
        .args(["--timeout", "20", "--request-id", &id])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the Windows CLI starts under Wine");
    l.wait_for_log_line(&[&id, "received at the door"], Duration::from_secs(20));
    w.kill();
    let status = wait_for(
        "the Windows CLI to give up",
        Duration::from_secs(30),
        || cli.try_wait().expect("the CLI's status"),
    );
    let mut out = String::new();
    cli.stdout
        .take()
        .expect("piped")
        .read_to_string(&mut out)
        .expect("the CLI's output");
    let printed: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|err| panic!("the CLI printed no JSON ({err}): {out:?}"));
    assert_eq!(
        (
            status.code(),
            printed["outcome"].as_str(),
            printed["request_id"].as_str()
        ),
        (Some(4), Some("outcome_unknown"), Some(id.as_str())),
        "{printed}"
    );
    let revision = wait_for("the owner to carry it out", Duration::from_secs(10), || {
        l.stored("notes", "victim").map(|(_, revision)| revision)
    });
    w.restart();
    let settled = wait_for(
        "the write to settle under Wine",
        Duration::from_secs(60),
        || {
            let (code, answer) = w.cli_json(&["settle", &id, "--wait", "5"]);
            (code == 0).then_some(answer)
        },
    );
    assert_eq!(
        (settled["state"].as_str(), settled["revision"].as_u64()),
        (Some("done"), Some(revision)),
        "{settled}"
    );

    // Both stop in order: `ferry stop` under Wine ends the Windows gateway with 0.
    assert_eq!(w.stop(), Some(0), "{}", w.log_tail(20));
    assert_eq!(l.stop(), Some(0), "{}", l.log_tail(20));
}
