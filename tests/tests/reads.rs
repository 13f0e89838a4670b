//! Reads that try hard (SPEC 9, 10), with real processes on loopback: the cache, replicas
//! that converge and survive a crash, the replica and stale-cache fallbacks when the owner is
//! gone, a retry after a pooled connection dies, and monotonic reads.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ferry_harness::{replica_of_notes, two_with_notes, wait_for, Gateway};

/// `GET` a record of `notes`: status, value, revision, source, stale.
fn read(g: &Gateway, key: &str) -> (u16, Vec<u8>, Option<u64>, String, bool) {
    let (status, value, revision, source, stale) = g.get_with_staleness("notes", key);
    (status, value, revision, source.unwrap_or_default(), stale)
}

/// Waits (bounded) until `gateway` has heard that `replica` replicates `notes`.
fn knows_replica(gateway: &Gateway, replica: &str, bound: Duration) {
    wait_for(
        &format!("{} to know {replica} replicates notes", gateway.label),
        bound,
        || {
            let (_, vaults) = gateway.cli_json(&["vault", "list"]);
            let notes = vaults
                .as_array()?
                .iter()
                .find(|v| v["name"] == "notes")?
                .clone();
            notes["replicas"]
                .as_array()?
                .iter()
                .any(|r| r == replica)
                .then_some(())
        },
    );
}

fn caught_up(c: &Gateway, revision: u64) {
    wait_for(
        &format!("{} to catch up to revision {revision}", c.label),
        Duration::from_secs(30),
        || {
            let (_, vaults) = c.cli_json(&["vault", "list"]);
            let row = vaults
                .as_array()?
                .iter()
                .find(|v| v["name"] == "notes")?
                .clone();
            (row["role"] == "replica"
                && row["revision"].as_u64() == Some(revision)
                && row["lag_revisions"] == 0)
                .then_some(())
        },
    );
}

#[test]
fn a_second_read_is_served_from_the_cache_and_a_write_through_this_gateway_updates_it() {
    let (_a, b) = two_with_notes();
    assert_eq!(b.put("notes", "k", b"one", &[]).0, 200);
    let first = read(&b, "k");
    assert_eq!(
        (first.0, first.1.as_slice(), first.2),
        (200, &b"one"[..], Some(1))
    );
    let second = read(&b, "k");
    assert_eq!(
        (second.0, second.3.as_str(), second.4),
        (200, "cache", false),
        "the second read is a cache hit"
    );
    assert!(b.metric("ferry_cache_hits_total") >= 1);
    assert_eq!(b.put("notes", "k", b"two", &[]).0, 200);
    let after = read(&b, "k");
    assert_eq!(
        (after.1.as_slice(), after.2),
        (&b"two"[..], Some(2)),
        "the write through b replaced the cached value"
    );
}

#[test]
fn a_replica_converges_with_puts_and_deletes_and_reads_locally() {
    let (a, b) = two_with_notes();
    for i in 0..20 {
        assert_eq!(
            b.put(
                "notes",
                &format!("k{i:02}"),
                format!("v{i}").as_bytes(),
                &[]
            )
            .0,
            200
        );
    }
    let c = replica_of_notes(&a, &b);
    let out = a.cli(&["delete", "notes", "k03"]);
    assert!(out.status.success());
    caught_up(&c, 21);
    assert_eq!(
        c.stored("notes", "k03").map(|(v, _)| v),
        Some(None),
        "the delete arrived as a tombstone"
    );
    for i in [0, 7, 19] {
        let (status, value, revision, source, _) = read(&c, &format!("k{i:02}"));
        assert_eq!(
            (status, value, source.as_str()),
            (200, format!("v{i}").into_bytes(), "local")
        );
        assert_eq!(
            revision,
            a.stored("notes", &format!("k{i:02}")).map(|(_, r)| r)
        );
    }
    assert_eq!(read(&c, "k03").0, 404);
    // A write through the replica goes to the owner.
    let (status, body) = c.put("notes", "from-c", b"x", &[]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        a.stored("notes", "from-c").map(|(v, _)| v),
        Some(Some(b"x".to_vec()))
    );
}

#[test]
fn with_the_owner_dead_reads_fall_back_to_a_replica_then_the_stale_cache_then_503() {
    // b's cache entries are fresh for 1 ms only, so every read asks a source first and the
    // stale-cache fallback is what a dead owner and a dead replica leave.
    let (mut a, b) = ferry_harness::pair_with_notes(
        Gateway::start("a"),
        Gateway::start_with_config("b", "cache_fresh_ms = 1\n"),
    );
    assert_eq!(b.put("notes", "cached", b"c1", &[]).0, 200);
    // Written on the owner itself: b has never seen it.
    assert_eq!(a.put("notes", "uncached", b"u1", &[]).0, 200);
    let c = replica_of_notes(&a, &b);
    caught_up(&c, 2);
    // b learns that c replicates `notes` (c said so when it followed).
    knows_replica(&b, "c", Duration::from_secs(5));
    assert_eq!(read(&b, "cached").0, 200);
    a.kill();
    // The write path notices quickly; the read path must not wait for the deadline either.
    let started = Instant::now();
    let (status, value, revision, source, stale) = read(&b, "uncached");
    let took = started.elapsed();
    assert_eq!(
        (status, value.as_slice(), revision),
        (200, &b"u1"[..], Some(2)),
        "read through the replica"
    );
    assert_eq!((source.as_str(), stale), ("replica:c", true));
    assert!(
        took < Duration::from_millis(200),
        "the replica answered after {took:?}"
    );
    eprintln!("figure: owner killed, read through a replica in {took:?}");

    drop(c);
    let (status, value, _, source, stale) = read(&b, "cached");
    assert_eq!(
        (status, value.as_slice(), source.as_str(), stale),
        (200, &b"c1"[..], "cache", true),
        "the stale cache"
    );
    let response = b
        .request(reqwest::Method::GET, "/v1/vaults/notes/records/never-read")
        .header("x-ferry-timeout", "3")
        .send()
        .unwrap();
    assert_eq!(
        response.status().as_u16(),
        503,
        "no source and nothing cached"
    );
}

#[test]
fn a_pooled_connection_killed_under_the_reader_costs_one_retry_not_an_error() {
    let (mut a, b) = two_with_notes();
    assert_eq!(b.put("notes", "k", b"v", &[]).0, 200);
    assert_eq!(read(&b, "k").0, 200);
    a.kill();
    a.restart();
    // The cache would answer without asking anyone: read a key b never cached.
    assert_eq!(a.put("notes", "fresh", b"f", &[]).0, 200);
    let (status, value, _, source, _) = read(&b, "fresh");
    assert_eq!(
        (status, value.as_slice(), source.as_str()),
        (200, &b"f"[..], "owner")
    );
}

/// `GET` as a given app: status, revision, source.
fn read_as(g: &Gateway, app: &str, key: &str) -> (u16, Option<u64>, String) {
    let (status, _, revision, source, _) = g.get_as(app, "notes", key, &[("x-ferry-timeout", "5")]);
    (status, revision, source.unwrap_or_default())
}

#[test]
fn an_app_never_sees_a_revision_go_backwards_even_when_a_stale_replica_answers() {
    let (mut a, b) = ferry_harness::pair_with_notes(
        Gateway::start("a"),
        Gateway::start_with_config("b", "cache_fresh_ms = 1\n"),
    );
    assert_eq!(a.put("notes", "k", b"v1", &[]).0, 200);
    let mut c = replica_of_notes(&a, &b);
    caught_up(&c, 1);
    // The replica stops at revision 1; the owner moves on to 2, and the app sees 2.
    assert_eq!(c.stop(), Some(0));
    assert_eq!(a.put("notes", "k", b"v2", &[]).0, 200);
    assert_eq!(read_as(&b, "seen-two", "k"), (200, Some(2), "owner".into()));
    // The owner dies; the stale replica comes back (it cannot sync) and says revision 1.
    a.kill();
    c.restart();
    knows_replica(&b, "c", Duration::from_secs(10));
    for _ in 0..5 {
        let (status, revision, source) = read_as(&b, "seen-two", "k");
        assert_eq!(status, 200);
        assert_eq!(
            revision,
            Some(2),
            "an app that saw revision 2 never gets 1 (source {source})"
        );
    }
    // An app that never saw the record may get the replica's older answer, marked as such.
    let (status, revision, source) = read_as(&b, "fresh-app", "k");
    assert_eq!(
        (status, revision, source.as_str()),
        (200, Some(1), "replica:c")
    );
}
