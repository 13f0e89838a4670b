//! A replica of a 100,000-record vault converges to exactly the owner's content, resumes from
//! its cursor after a SIGKILL halfway, and receives deletes (SPEC 10). Prints the sync
//! throughput in records per second.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::time::{Duration, Instant};

use harness::{wait_for, Gateway};

const RECORDS: u64 = 100_000;

fn replica_revision(c: &Gateway) -> u64 {
    let (_, vaults) = c.cli_json(&["vault", "list"]);
    vaults
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "notes"))
        .and_then(|v| v["revision"].as_u64())
        .unwrap_or(0)
}

#[test]
fn a_replica_of_100k_records_converges_resumes_after_sigkill_and_applies_deletes() {
    // The owner's vault, filled directly in its database while it is stopped.
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
            for i in 1..=RECORDS {
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
            [RECORDS as i64],
        )
        .unwrap();
        tx.commit().unwrap();
    }
    a.restart();

    let mut c = Gateway::start("c");
    a.trust_each_other(&c);
    let started = Instant::now();
    let out = c.cli(&["vault", "follow", "notes", "--owner", "a"]);
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
