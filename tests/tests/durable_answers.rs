//! Every answer the owner gives about a journal entry follows a durable commit (SPEC 7 rules 4
//! and 6, issue 9 point 4), checked by what the process actually does: the owner runs under
//! `strace`, and between one settle query's `never_arrived` answer leaving on the API socket
//! and the next, the log must show an `fsync`/`fdatasync` of the database (`ferry.db`, its
//! WAL) that returned, the commit of that query's tombstone. A tombstone committed with `synchronous=NORMAL` and answered without an fsync
//! could be lost to a power cut, and the id could then run after the owner said it never will.
//!
//! Needs `strace` and the right to trace a child (root in CI); otherwise it says SKIPPED
//! loudly, and fails under `FERRY_LAB_REQUIRED`, which CI sets.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

use ferry_harness::{fresh_request_id, Gateway};

/// How many tombstones to ask for, one after the other.
const QUERIES: usize = 10;

fn strace_works() -> bool {
    Command::new("strace")
        .args(["-qq", "-e", "trace=none", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

#[test]
fn a_tombstone_is_fsynced_before_it_is_answered() {
    const TEST: &str = "a_tombstone_is_fsynced_before_it_is_answered";
    if !strace_works() {
        ferry_tests::skip_or_fail(TEST, "strace is missing or may not trace here");
        return;
    }
    let log = tempfile::NamedTempFile::new().unwrap();
    let log_path = log.path().to_str().unwrap().to_string();
    let mut a = Gateway::start_under(
        "a",
        &[
            "strace",
            "-f",
            "-y",
            "-qq",
            "-s",
            "4096",
            "-e",
            "trace=fsync,fdatasync,write,writev,sendto,sendmsg",
            "-o",
            &log_path,
        ],
    );
    assert!(a.cli(&["vault", "create", "notes"]).status.success());
    for _ in 0..QUERIES {
        let (status, body) = a.settle(&fresh_request_id(), None);
        assert_eq!(
            (status, body["reason"].as_str()),
            (200, Some("never_arrived")),
            "{body}"
        );
    }
    assert_eq!(a.stop(), Some(0));

    let trace = std::fs::read_to_string(log.path()).unwrap();
    let mut answers = 0;
    let mut synced_since_last_answer = false;
    // Threads whose sync of the database (`-y` names the file) has started and not returned.
    let mut syncing = std::collections::HashSet::new();
    for line in trace.lines() {
        let pid = line.split_whitespace().next().unwrap_or("");
        let sync = line.contains("fsync(") || line.contains("fdatasync(");
        let resumed = line.contains("fsync resumed>") || line.contains("fdatasync resumed>");
        // strace pads a short line's result to its column (`-a`, 40 by default), so a
        // `<... fsync resumed>)              = 0` has more than one space before the `=`.
        let returned = line.trim_end().ends_with("= 0");
        if sync && line.contains("ferry.db") && line.contains("<unfinished ...>") {
            syncing.insert(pid.to_string());
        } else if (sync && line.contains("ferry.db") || resumed && syncing.remove(pid)) && returned
        {
            // Only a sync of the database that returned counts: one still running when the
            // answer left proves nothing.
            synced_since_last_answer = true;
        } else if line.contains("never_arrived") && line.contains("HTTP/1.1 200") {
            answers += 1;
            assert!(
                synced_since_last_answer,
                "settle answer {answers} left without an fsync since the one before:\n{line}"
            );
            synced_since_last_answer = false;
        }
    }
    assert_eq!(answers, QUERIES, "every answer was seen in the trace");
}
