//! A replica of a 100,000-record vault converges to exactly the owner's content, resumes from
//! its cursor after a SIGKILL halfway, and receives deletes (SPEC 10). Prints the sync
//! throughput in records per second.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ferry_harness::{wait_for, Gateway};

const RECORDS: u64 = 100_000;

fn replica_revision(c: &Gateway) -> u64 {
    let (_, vaults) = c.cli_json(&["vault", "list"]);
    vaults
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "notes"))
        .and_then(|v| v["revision"].as_u64())
        .unwrap_or(0)
}

/// A gateway `a` owning vault `notes` with `records` records, filled directly in its database
/// while it was stopped (writing them one by one would take minutes).
fn owner_with(records: u64) -> Gateway {
    let mut a = Gateway::start("a");
    assert!(a.cli(&["vault", "create", "notes"]).status.success());
    assert_eq!(a.stop(), Some(0));
    {
        let mut conn = rusqlite::Connection::open(a.home.join("ferry.db")).unwrap();
        let tx = conn.transaction().unwrap();
        {
            let mut insert = tx
                .prepare("INSERT INTO records (vault, key, revision, value) VALUES ('notes', ?1, ?2, ?3)")
                .unwrap();
            for i in 1..=records {
                let value = format!("value-{i}-{}", "x".repeat((i % 64) as usize));
                insert
                    .execute(rusqlite::params![
                        format!("key/{i:07}"),
                        i as i64,
                        value.as_bytes()
                    ])
                    .unwrap();
            }
        }
        tx.execute(
            "UPDATE vaults SET revision = ?1 WHERE name = 'notes'",
            [records as i64],
        )
        .unwrap();
        tx.commit().unwrap();
    }
    a.restart();
    a
}

#[test]
fn ferry_vault_follow_waits_for_the_catch_up_and_says_how_far_it_is() {
    let a = owner_with(20_000);
    // One key written twice more: the owner's revision (20,002) is then ahead of the number of
    // changes a replica applies (20,000 keys, each once): caught up is judged by revision.
    for value in ["again", "and again"] {
        let (status, body) = a.put("notes", "key/0000001", value.as_bytes(), &[]);
        assert_eq!(status, 200, "{body}");
    }
    let c = Gateway::start("c");
    a.trust_each_other(&c);
    let out = c.cli(&["vault", "follow", "notes", "--owner", "a"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("following vault notes from a"), "{stdout}");
    // Not a terminal: plain lines, no bar, then the end.
    let progress: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("notes: "))
        .collect();
    assert!(
        !progress.is_empty() && progress.iter().all(|line| !line.contains('[')),
        "{stderr}"
    );
    assert!(
        progress
            .last()
            .unwrap()
            .contains("20,002 / 20,002 revisions"),
        "{stderr}"
    );
    assert!(
        stderr.contains("caught up with the owner at revision 20002"),
        "{stderr}"
    );
    assert_eq!(
        replica_revision(&c),
        20_002,
        "the command returned before the replica had caught up"
    );
}

#[test]
fn a_replica_of_100k_records_converges_resumes_after_sigkill_and_applies_deletes() {
    let a = owner_with(RECORDS);

    let mut c = Gateway::start("c");
    a.trust_each_other(&c);
    let started = Instant::now();
    // Detached: the test kills the replica halfway through its catch-up.
    let out = c.cli(&["vault", "follow", "notes", "--owner", "a", "--detach"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // SIGKILL halfway; the cursor moved with every applied page, so it resumes from there.
    let halfway = wait_for(
        "the replica to get halfway",
        Duration::from_secs(120),
        || {
            let revision = replica_revision(&c);
            (revision >= RECORDS / 2).then_some(revision)
        },
    );
    let first_half = started.elapsed();
    c.kill();
    let cursor_on_disk = c.records("notes").len() as u64;
    assert!(cursor_on_disk >= halfway, "the applied pages are on disk");
    c.restart();
    let resumed = Instant::now();
    wait_for(
        "the replica to converge after its restart",
        Duration::from_secs(120),
        || (replica_revision(&c) == RECORDS).then_some(()),
    );
    let second_half = resumed.elapsed();
    let rate = |records: u64, took: Duration| (records as f64 / took.as_secs_f64()).round();
    eprintln!(
        "figure: replica sync of {RECORDS} records: first {halfway} in {first_half:?} ({} records/s), the rest after a SIGKILL in {second_half:?} ({} records/s)",
        rate(halfway, first_half),
        rate(RECORDS - halfway, second_half)
    );
    assert_eq!(
        c.records("notes"),
        a.records("notes"),
        "the replica equals the owner, in full"
    );

    // Deletes propagate as tombstones.
    for i in (1..=100).map(|i| i * 997) {
        let out = a.cli(&["delete", "notes", &format!("key/{i:07}")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    wait_for(
        "the deletes to reach the replica",
        Duration::from_secs(30),
        || (replica_revision(&c) == RECORDS + 100).then_some(()),
    );
    let (on_a, on_c) = (a.records("notes"), c.records("notes"));
    assert_eq!(on_c, on_a, "the replica equals the owner, deletes included");
    assert_eq!(on_c.iter().filter(|(_, _, v)| v.is_none()).count(), 100);
}

/// `notes`' entry in `gateway`'s `ferry vault list --json`.
fn vault_row(gateway: &Gateway) -> serde_json::Value {
    let (_, vaults) = gateway.cli_json(&["vault", "list"]);
    vaults
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "notes"))
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_replica_nobody_reads_asks_long_questions_gets_news_at_once_and_its_first_read_wakes_it() {
    let a = Gateway::start("a");
    let b = Gateway::start("b");
    a.trust_each_other(&b);
    assert!(a.cli(&["vault", "create", "notes"]).status.success());
    let follow = b.cli(&["vault", "follow", "notes", "--owner", "a"]);
    assert!(follow.status.success(), "{follow:?}");

    // At rest a change still arrives as soon as it is committed: the owner answers the held
    // question.
    let (status, body) = a.put("notes", "k", b"v", &[]);
    assert_eq!(status, 200, "{body}");
    wait_for(
        "the change to reach the replica",
        Duration::from_secs(5),
        || (replica_revision(&b) == 1).then_some(()),
    );

    // Nobody reads it here, so its question is a long one: no answer for well past the 800 ms
    // of a replica in use (its catch-up then too old to answer reads first).
    wait_for(
        "the replica's question to be held past 2.5 s",
        Duration::from_secs(20),
        || {
            let row = vault_row(&b);
            let ago = row["sync"]["last_pull_ms_ago"].as_u64()?;
            (ago > 2_500).then_some(())
        },
    );

    // The first read asks the owner, and wakes the replica's job: within a few short
    // questions it is fresh and answers reads itself.
    let (status, value, _, source) = b.get("notes", "k");
    assert_eq!(
        (status, value.as_slice(), source.as_deref()),
        (200, &b"v"[..], Some("owner"))
    );
    wait_for(
        "the read replica to answer reads itself",
        Duration::from_secs(5),
        || {
            let (status, _, _, source) = b.get("notes", "k");
            (status == 200 && source.as_deref() == Some("local")).then_some(())
        },
    );
}
