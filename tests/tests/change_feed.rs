//! The change feed (`GET /v1/vaults/{vault}/changes`, issue 16) with real gateways: the owner's
//! feed answers at once, waits for news and wakes on the commit, pages and resumes; a replica's
//! feed follows what it applied, and an app following it through the kit's `ChangeFeed` sees
//! every change once, in order, across a restart of the replica and of the owner; `ferry watch`.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ferry_harness::{replica_of_notes, two_with_notes, Gateway};
use ferry_kit::contract::FeedChange;
use ferry_kit::{ChangeFeed, Kit, KitError};
use serde_json::Value;

/// GET the feed; status and body.
fn feed(g: &Gateway, vault: &str, query: &str) -> (u16, Value) {
    let response = g
        .request(
            reqwest::Method::GET,
            &format!("/v1/vaults/{vault}/changes?{query}"),
        )
        .send()
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn keys(page: &Value) -> Vec<(String, u64, bool)> {
    page["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["key"].as_str().unwrap().to_string(),
                c["revision"].as_u64().unwrap(),
                c["deleted"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn put(g: &Gateway, key: &str) -> u64 {
    let (status, body) = g.put("notes", key, key.as_bytes(), &[]);
    assert_eq!(status, 200, "put {key}: {body}");
    body["revision"].as_u64().unwrap()
}

#[test]
fn the_owner_feed_answers_at_once_pages_waits_for_news_and_wakes_on_the_commit() {
    let (a, b) = two_with_notes();
    for key in ["k1", "k2", "k3"] {
        put(&a, key);
    }
    let (status, page) = feed(&a, "notes", "after=0");
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        keys(&page),
        vec![
            ("k1".into(), 1, false),
            ("k2".into(), 2, false),
            ("k3".into(), 3, false)
        ]
    );
    assert_eq!(
        (page["next"].as_u64(), page["more"].as_bool()),
        (Some(3), Some(false))
    );
    // Pages, resumed by revision.
    let (_, first) = feed(&a, "notes", "after=0&limit=2");
    assert_eq!(
        (first["next"].as_u64(), first["more"].as_bool()),
        (Some(2), Some(true))
    );
    let (_, rest) = feed(&a, "notes", "after=2&limit=2");
    assert_eq!(keys(&rest), vec![("k3".into(), 3, false)]);
    // Nothing new: it waits the time asked, then answers empty at the same cursor.
    let asked = Instant::now();
    let (_, empty) = feed(&a, "notes", "after=3&wait=0.3");
    let waited = asked.elapsed();
    assert!(keys(&empty).is_empty() && empty["next"] == 3, "{empty}");
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_secs(5),
        "a wait of 0.3 s took {waited:?}"
    );
    // A long poll wakes when a write (from another gateway) commits, not when its wait ends.
    let poller = {
        let (api, token) = (a.api.clone(), a.token.clone());
        std::thread::spawn(move || {
            let answer: Value = reqwest::blocking::Client::new()
                .get(format!(
                    "http://{api}/v1/vaults/notes/changes?after=3&wait=20"
                ))
                .bearer_auth(token)
                .header("x-ferry-app", "feed-test")
                .timeout(Duration::from_secs(60))
                .send()
                .unwrap()
                .json()
                .unwrap();
            (answer, Instant::now())
        })
    };
    // Written only once the poll waits (a put before it would be answered at once, which
    // proves nothing about waking).
    ferry_harness::wait_for("the long poll to wait", Duration::from_secs(10), || {
        (a.metric("ferry_feed_waiting") == 1).then_some(())
    });
    let revision = put(&b, "k4");
    let written = Instant::now();
    let (woken, at) = poller.join().unwrap();
    assert_eq!(
        a.metric("ferry_feed_waiting"),
        0,
        "the answered poll waits no more"
    );
    assert_eq!(keys(&woken), vec![("k4".into(), revision, false)]);
    let after_commit = at.saturating_duration_since(written);
    eprintln!("figure: the owner's long poll answered {after_commit:?} after the write's 200");
    assert!(
        after_commit < Duration::from_secs(2),
        "the long poll answered {after_commit:?} after the write: it was not woken by the commit"
    );
    // Deletions show as such.
    assert_eq!(a.cli(&["delete", "notes", "k1"]).status.code(), Some(0));
    let (_, deleted) = feed(&a, "notes", "after=4");
    assert_eq!(keys(&deleted), vec![("k1".into(), 5, true)]);
    // A gateway with no copy has no feed; bad waits are refused.
    let (status, body) = feed(&b, "notes", "after=0");
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("unknown_vault")),
        "{body}"
    );
    let (status, body) = feed(&a, "notes", "wait=61");
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    let (status, body) = feed(&a, "notes", "after=x");
    assert_eq!(status, 400, "{body}");
    // `ferry watch` prints each change, one JSON line each.
    let out = a.cli(&["--json", "watch", "notes", "--after", "2", "--count", "3"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let watched: Vec<u64> = lines
        .iter()
        .map(|l| l["revision"].as_u64().unwrap())
        .collect();
    assert_eq!(watched, vec![3, 4, 5], "{lines:?}");
}

/// The next changes of `feed`, waiting out a gateway that is restarting (bounded).
fn next_changes(runtime: &tokio::runtime::Runtime, feed: &mut ChangeFeed) -> Vec<FeedChange> {
    let started = Instant::now();
    loop {
        match runtime.block_on(feed.next()) {
            Ok(changes) => return changes,
            Err(KitError::LocalGatewayDown { .. })
                if started.elapsed() < Duration::from_secs(30) =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(err) => panic!("the feed failed: {err}"),
        }
    }
}

/// Follows `feed` until it has seen `count` more changes (bounded); checks each comes once, in
/// revision order.
fn collect(
    runtime: &tokio::runtime::Runtime,
    feed: &mut ChangeFeed,
    count: usize,
    seen: &mut Vec<FeedChange>,
) {
    let want = seen.len() + count;
    let started = Instant::now();
    while seen.len() < want {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the feed gave {} of {want} changes in a minute",
            seen.len()
        );
        for change in next_changes(runtime, feed) {
            if let Some(last) = seen.last() {
                assert!(
                    change.revision > last.revision,
                    "{change:?} came after {last:?}: out of order or twice"
                );
            }
            seen.push(change);
        }
    }
}

#[test]
fn a_replica_feed_through_the_kit_gives_every_change_once_across_restarts() {
    let (mut a, b) = two_with_notes();
    let mut c = replica_of_notes(&a, &b);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let kit = Kit::from_home(c.home.clone(), "feed-test");
    let mut feed = ChangeFeed::new(kit, "notes", 0, Duration::from_secs(2));
    let mut seen = Vec::new();
    let mut written = Vec::new();
    for i in 0..50 {
        written.push(put(&a, &format!("first-{i:02}")));
    }
    collect(&runtime, &mut feed, 50, &mut seen);
    // The replica was caught up and asking when the writes began, so commits woke its long
    // polls: the push is measured on both sides (the owner's commit to the page leaving, the
    // page's arrival to its apply).
    assert!(a.metric("ferry_feed_push_seconds_count{}") > 0);
    assert!(c.metric("ferry_replica_apply_seconds_count{}") > 0);
    // And the whole way, on the replica: the owner sent each page's age of its news, so the
    // replica counts them, every one well under a second on loopback.
    let propagated = c.metric("ferry_propagation_seconds_count{}");
    assert!(propagated > 0, "no news counted end to end");
    assert_eq!(
        c.metric("ferry_propagation_seconds_bucket{le=\"1\"}"),
        propagated,
        "a change took over a second from the owner's commit to the replica's"
    );

    // The replica restarts: the app keeps its cursor and loses nothing.
    c.kill();
    for i in 0..20 {
        written.push(put(&a, &format!("second-{i:02}")));
    }
    c.restart();
    collect(&runtime, &mut feed, 20, &mut seen);

    // The owner restarts: the replica catches up and the feed goes on.
    assert_eq!(a.stop(), Some(0));
    a.restart();
    for i in 0..10 {
        written.push(put(&a, &format!("third-{i:02}")));
    }
    collect(&runtime, &mut feed, 10, &mut seen);

    let revisions: Vec<u64> = seen.iter().map(|c| c.revision).collect();
    assert_eq!(
        revisions, written,
        "the feed gave exactly the writes, in order"
    );
    let keys: BTreeSet<&str> = seen.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(keys.len(), 80);
    assert_eq!(feed.cursor(), *written.last().unwrap());
}
