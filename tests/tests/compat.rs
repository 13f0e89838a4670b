//! Deploy skew (SPEC 11) with real processes on loopback: a gateway of this build beside one of
//! the previous release (`ferry_tests::previous::PREVIOUS`: protocol 1, database schema 2), in
//! both directions (an old owner with a new caller and a new replica; a new owner with an old
//! caller and an old replica). Across the two versions: writes land on the owner with a
//! revision, reads go through the caller, settlement is answered by the owner (a done write,
//! an id never sent, and an `outcome_unknown` write held by a fault point), a ticket is renewed
//! after the owner rotates its epoch, heartbeats keep the routes `up`, and a replica converges.
//! What protocol 2 adds degrades as documented: this build shows an old peer as `protocol: 1`
//! with no release, a peer of this build as `protocol: 2` with its release.
//!
//! And the database: this build migrates a home the previous release wrote (schema 2 to this
//! build's `SCHEMA_VERSION`) in place, keeping its vault, records and peers; the previous
//! release refuses a home this build wrote ("newer Ferry") and leaves its database byte for byte
//! as it was.
//!
//! The previous release is built from this repository's history on first use, into
//! `target/compat/<commit>/` (`ferry_tests::previous::previous_build`): the first run takes
//! minutes; later runs find the binary and each test takes seconds.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferry_gateway::store::SCHEMA_VERSION;
use ferry_harness::{
    ferry_bin, fresh_request_id, pair_with_notes, serve_refused, wait_for, Gateway,
};
use ferry_tests::previous::{previous_build, PREVIOUS};
use serde_json::{json, Value};

/// This build's release, as its hello names it to peers of protocol 2.
const THIS_RELEASE: &str = ferry_peer::wire::RELEASE;
/// The protocol two gateways of this build agree on.
const THIS_PROTOCOL: u16 = ferry_peer::wire::PROTOCOL_VERSION;

/// How long anything on loopback (a hello, a route coming up, a replica catching up on a few
/// records) may take before the test gives up.
const SETTLE_BOUND: Duration = Duration::from_secs(15);

/// Which build a gateway runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Build {
    /// The release before this one (protocol 1, schema 2).
    Previous,
    /// The build under test.
    This,
}

impl Build {
    fn bin(self) -> &'static Path {
        match self {
            Build::Previous => previous_build(),
            Build::This => Path::new(ferry_bin()),
        }
    }

    /// A gateway of `self`'s build in a fresh home.
    fn start(self, label: &str, env: &[(&str, &str)]) -> Gateway {
        Gateway::start_built(self.bin(), label, env)
    }

    /// The build `gateway` runs.
    fn of(gateway: &Gateway) -> Self {
        if gateway.bin() == previous_build() {
            Build::Previous
        } else {
            Build::This
        }
    }
}

/// Waits until `from`'s route to `to` is `up` with an RTT, which only an answered heartbeat
/// sets, and returns the route.
fn route_up_by_heartbeat(from: &Gateway, to: &str) -> Value {
    wait_for(
        &format!(
            "{}'s route to {to} to be up with a heartbeat answered (an RTT)",
            from.label
        ),
        SETTLE_BOUND,
        || {
            let route = from.route_to(to);
            (route["state"] == "up" && route["rtt_ms"].as_f64().is_some()).then_some(route)
        },
    )
}

/// `gateway`'s `/v1/peers` row for the peer labelled `label`.
fn peer_row(gateway: &Gateway, label: &str) -> Value {
    let peers = gateway.get_json("/v1/peers");
    peers
        .as_array()
        .and_then(|rows| rows.iter().find(|row| row["label"] == label).cloned())
        .unwrap_or(Value::Null)
}

/// Waits until `gateway` (of this build) shows `label` with `protocol` and `release` in
/// `/v1/peers`, and returns the row; fails with the last row seen.
fn wait_for_peer_version(
    gateway: &Gateway,
    label: &str,
    protocol: u16,
    release: Option<&str>,
) -> Value {
    let started = Instant::now();
    loop {
        let row = peer_row(gateway, label);
        if row["protocol"] == json!(protocol) && row["release"] == json!(release) {
            return row;
        }
        assert!(
            started.elapsed() < SETTLE_BOUND,
            "after {SETTLE_BOUND:?}, {} still shows peer {label} as {row} \
             (expected protocol {protocol}, release {release:?})",
            gateway.label
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a peer of build `build` should look like to a gateway of this build.
fn expected_version(build: Build) -> (u16, Option<&'static str>) {
    match build {
        // A protocol 1 hello names no release.
        Build::Previous => (PREVIOUS.protocol, None),
        Build::This => (THIS_PROTOCOL, Some(THIS_RELEASE)),
    }
}

/// Checks what `gateway` says of itself in `/v1/status`: its release, and, for this build, the
/// protocols it speaks and no version mismatch with any peer.
fn check_status(gateway: &Gateway) {
    let status = gateway.get_json("/v1/status");
    match Build::of(gateway) {
        Build::Previous => assert_eq!(status["version"], PREVIOUS.version, "{status}"),
        Build::This => {
            assert_eq!(
                (
                    status["version"].as_str(),
                    status["protocols"].as_str(),
                    &status["version_mismatches"]
                ),
                (
                    Some(THIS_RELEASE),
                    Some(format!("{}-{THIS_PROTOCOL}", PREVIOUS.protocol).as_str()),
                    &json!([])
                ),
                "{}'s status: {status}",
                gateway.label
            );
        }
    }
}

/// Writes, reads, settlement, ticket renewal, heartbeats, replication and the peers' versions
/// between an owner `a` of build `owner` and a caller `b` (then a replica `c`) of build `caller`.
fn side_by_side(owner: Build, caller: Build) {
    let (a, b) = pair_with_notes(owner.start("a", &[]), caller.start("b", &[]));

    // Heartbeats cross the versions both ways: each side's route to the other is up, with an
    // RTT that only a heartbeat's answer gives.
    route_up_by_heartbeat(&a, "b");
    route_up_by_heartbeat(&b, "a");
    for (from, to) in [(&a, "b"), (&b, "a")] {
        let (code, routes) = from.cli_json(&["routes"]);
        let states: Vec<&Value> = routes
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["peer"] == to)
            .map(|r| &r["state"])
            .collect();
        assert_eq!(
            (code, states),
            (0, vec![&json!("up")]),
            "`ferry routes --json` on {}: {routes}",
            from.label
        );
    }

    // A write through the caller lands on the owner, done with a revision.
    let (status, body) = b.put("notes", "from-b", b"written through b", &[]);
    assert_eq!(status, 200, "a write through b: {body}");
    assert_eq!(body["revision"].as_u64(), Some(1), "{body}");
    let written = body["request_id"]
        .as_str()
        .expect("a request id")
        .to_string();
    assert_eq!(
        a.stored("notes", "from-b"),
        Some((Some(b"written through b".to_vec()), 1))
    );
    assert_eq!(
        a.journal_row(&written),
        Some(("answered".to_string(), None)),
        "the owner journaled the caller's write"
    );

    // Reads through the caller are answered by the owner.
    let (status, body) = a.put("notes", "from-a", b"written on a", &[]);
    assert_eq!(
        (status, body["revision"].as_u64()),
        (200, Some(2)),
        "{body}"
    );
    let (status, value, revision, source) = b.get("notes", "from-a");
    assert_eq!(
        (status, value.as_slice(), revision, source.as_deref()),
        (200, &b"written on a"[..], Some(2), Some("owner")),
        "a read through b of a record b never saw"
    );
    assert_eq!(b.get("notes", "nobody-wrote-this").0, 404);
    let (code, list) = b.cli_json(&["list", "notes"]);
    assert_eq!(
        (code, list),
        (
            0,
            json!([{"key": "from-a", "revision": 2}, {"key": "from-b", "revision": 1}])
        ),
        "`ferry list` through b"
    );

    // Settlement: the write b sent is done (b's call log keeps the owner's answer; a write
    // whose answer never came is asked of the owner, in `unknown_write_settles`); an id b never
    // sent is asked of the owner, which fences it (a tombstone), so it can never run.
    let (status, settled) = b.settle(&written, None);
    assert_eq!(
        (
            status,
            settled["state"].as_str(),
            settled["revision"].as_u64()
        ),
        (200, Some("done"), Some(1)),
        "{settled}"
    );
    let never = fresh_request_id();
    let (status, settled) = b.settle(&format!("{never}?vault=notes"), None);
    assert_eq!(
        (
            status,
            settled["state"].as_str(),
            settled["reason"].as_str()
        ),
        (200, Some("not_carried_out"), Some("never_arrived")),
        "settling an id never sent: {settled}"
    );
    a.wait_for_log_line(&[&never, "settle query answered"], SETTLE_BOUND);
    assert_eq!(
        a.journal_row(&never),
        Some((
            "not_carried_out".to_string(),
            Some("never_arrived".to_string())
        ))
    );
    let (status, body) = b.put("notes", "fenced", b"x", &[("x-ferry-request-id", &never)]);
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("not_carried_out")),
        "a fenced id sent after all: {body}"
    );
    assert_eq!(a.stored("notes", "fenced"), None);

    // Tickets: b holds one of epoch 0; the owner rotates its epoch, b's next write is refused
    // at the door once, renews its ticket and is carried out.
    let (code, tickets) = b.cli_json(&["tickets"]);
    assert_eq!(
        (code, tickets[0]["epoch"].as_u64()),
        (0, Some(0)),
        "{tickets}"
    );
    assert!(
        tickets[0]["expires_in_s"]
            .as_u64()
            .is_some_and(|s| s > 60 && s <= 600),
        "a ticket of the owner's ten-minute lifetime: {tickets}"
    );
    assert_eq!(b.metric("ferry_ticket_renewals_total"), 0);
    let out = a.cli(&["tickets", "rotate"]);
    assert!(out.status.success(), "{}", ferry_harness::describe(&out));
    let (status, body) = b.put("notes", "after-rotation", b"renewed", &[]);
    assert_eq!(
        (status, body["revision"].as_u64()),
        (200, Some(3)),
        "a write after the owner rotated its tickets: {body}"
    );
    assert_eq!(b.metric("ferry_ticket_renewals_total"), 1, "one renewal");
    assert_eq!(
        a.metric("ferry_door_refusals_total"),
        1,
        "one old ticket refused"
    );
    let (_, tickets) = b.cli_json(&["tickets"]);
    assert_eq!(tickets[0]["epoch"].as_u64(), Some(1), "{tickets}");

    // A replica of the caller's build follows the vault and converges to the owner.
    let c = ferry_harness::follow_notes(caller.start("c", &[]), &a, &b);
    let (status, body) = b.put("notes", "while-following", b"later", &[]);
    assert_eq!(
        (status, body["revision"].as_u64()),
        (200, Some(4)),
        "{body}"
    );
    wait_for(
        "the replica c to reach the owner's revision 4",
        SETTLE_BOUND,
        || (c.vault_revision("notes") == 4).then_some(()),
    );
    assert_eq!(
        c.records("notes"),
        a.records("notes"),
        "the replica holds exactly the owner's records"
    );
    let (_, vaults) = c.cli_json(&["vault", "list"]);
    let row = vaults
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "notes"))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(
        (row["role"].as_str(), row["revision"].as_u64()),
        (Some("replica"), Some(4)),
        "{vaults}"
    );
    let (status, value, revision, source) = c.get("notes", "from-b");
    assert_eq!(
        (status, value.as_slice(), revision, source.as_deref()),
        (200, &b"written through b"[..], Some(1), Some("local"))
    );

    // The versions: this build shows a peer of the previous release as protocol 1 with no
    // release, one of this build as protocol 2 with its release; no mismatch anywhere.
    let all = [&a, &b, &c];
    for me in all {
        check_status(me);
        if Build::of(me) == Build::Previous {
            continue;
        }
        for peer in all.iter().filter(|p| p.label != me.label) {
            let (protocol, release) = expected_version(Build::of(peer));
            let row = wait_for_peer_version(me, &peer.label, protocol, release);
            assert_eq!(
                (&row["trusted"], &row["last_error"]),
                (&json!(true), &Value::Null),
                "{} shows {}: {row}",
                me.label,
                peer.label
            );
            // The CLI shows the same, and names a protocol 1 peer's release "before 0.2.0".
            let (code, peers) = me.cli_json(&["peers"]);
            let cli_row = peers
                .as_array()
                .and_then(|rows| rows.iter().find(|r| r["label"] == peer.label.as_str()));
            assert_eq!(
                (code, cli_row.map(|r| (&r["protocol"], &r["release"]))),
                (0, Some((&json!(protocol), &json!(release)))),
                "`ferry peers --json` on {}: {peers}",
                me.label
            );
            let table = me.cli(&["peers"]);
            let text = String::from_utf8_lossy(&table.stdout);
            let line = text
                .lines()
                .find(|line| line.starts_with(peer.label.as_str()))
                .unwrap_or_default();
            let shown = release.map_or_else(|| format!("before {THIS_RELEASE}"), String::from);
            assert!(
                line.contains(&shown),
                "`ferry peers` on {} should show {} as {shown:?}:\n{text}",
                me.label,
                peer.label
            );
        }
    }
}

#[test]
fn an_old_owner_serves_a_new_caller_and_feeds_a_new_replica() {
    side_by_side(Build::Previous, Build::This);
}

#[test]
fn a_new_owner_serves_an_old_caller_and_feeds_an_old_replica() {
    side_by_side(Build::This, Build::Previous);
}

/// `b`'s write of notes/held, which `a` holds past `b`'s 1 s deadline: `outcome_unknown`,
/// once `a` has it. Returns its request id.
fn held_write(a: &Gateway, b: &Gateway) -> String {
    let id = fresh_request_id();
    let (status, body) = b.put(
        "notes",
        "held",
        b"carried out late",
        &[("x-ferry-request-id", &id), ("x-ferry-timeout", "1")],
    );
    assert_eq!(
        (status, body["error"].as_str(), body["owner"].as_str()),
        (502, Some("outcome_unknown"), Some("a")),
        "a write held past the caller's deadline: {body}"
    );
    a.wait_for_log_line(&[&id, "received at the door"], SETTLE_BOUND);
    id
}

/// The held write sent again under `id` is answered from `a`'s journal, and ran once.
fn ran_once(a: &Gateway, b: &Gateway, id: &str) {
    let (status, again) = b.put(
        "notes",
        "held",
        b"carried out late",
        &[("x-ferry-request-id", id)],
    );
    assert_eq!(
        (status, again["revision"].as_u64()),
        (200, Some(2)),
        "the same id again is answered from the journal: {again}"
    );
    assert_eq!(a.vault_revision("notes"), 2, "it ran once");
}

/// An owner of build `owner` whose every write batch is held 1.5 s before its commit; a caller
/// of build `caller` that gives up after 1 s: `outcome_unknown`, then settled by the owner to
/// the truth (done), and the same id sent again is answered from the owner's journal.
fn unknown_write_settles(owner: Build, caller: Build) {
    let (a, b) = pair_with_notes(
        owner.start(
            "a",
            &[("FERRY_DANGEROUS_FAULT", "before_commit=stall:1500")],
        ),
        caller.start("b", &[]),
    );
    // A ticket and a proven connection first.
    let (status, body) = b.put("notes", "warm-up", b"x", &[]);
    assert_eq!(status, 200, "warm-up: {body}");

    let id = held_write(&a, &b);

    let settled = wait_for(
        "the unknown write to settle through b",
        Duration::from_secs(30),
        || {
            let (status, body) = b.settle(&id, Some(5));
            matches!(body["state"].as_str(), Some("done" | "not_carried_out"))
                .then_some((status, body))
        },
    );
    let stored = a.stored("notes", "held");
    assert_eq!(
        (
            settled.0,
            settled.1["state"].as_str(),
            settled.1["revision"].as_u64()
        ),
        (200, Some("done"), Some(2)),
        "settled {settled:?}; the owner holds {stored:?}"
    );
    assert_eq!(stored, Some((Some(b"carried out late".to_vec()), 2)));
    // The owner answered the caller's settle query (its own or the background settler's).
    a.wait_for_log_line(&[&id, "settle query answered"], SETTLE_BOUND);

    ran_once(&a, &b, &id);
}

#[test]
fn an_old_owner_settles_a_new_callers_outcome_unknown_write_to_done() {
    unknown_write_settles(Build::Previous, Build::This);
}

#[test]
fn a_new_owner_settles_an_old_callers_outcome_unknown_write_to_done() {
    unknown_write_settles(Build::This, Build::Previous);
}

/// An owner of a newer release answers a settle query with a state the caller does not know
/// (moving a vault's owner will add one). A caller of this build reads the answer whole and
/// settles nothing on it; the previous release (protocol 1, whose decoder has only the four
/// states) is sent no answer at all. Either way the app hears "ask again later", the call
/// stays listed as unknown, and the id is never taken for a fence. The write itself is
/// untouched: sent again, it is answered from the owner's journal.
fn a_newer_state_settles_nothing(caller: Build) {
    let (a, b) = pair_with_notes(
        Build::This.start(
            "a",
            &[
                ("FERRY_DANGEROUS_FAULT", "before_commit=stall:1500"),
                ("FERRY_DANGEROUS_SETTLE_STATE", "4"),
            ],
        ),
        caller.start("b", &[]),
    );
    let (status, body) = b.put("notes", "warm-up", b"x", &[]);
    assert_eq!(status, 200, "warm-up: {body}");
    let id = held_write(&a, &b);

    let (status, body) = b.settle(&id, None);
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("unavailable")),
        "a state the caller cannot read settles nothing: {body}"
    );
    let unknown = b.get_json("/v1/calls?state=unknown");
    assert!(
        unknown
            .as_array()
            .is_some_and(|calls| calls.iter().any(|call| call["request_id"] == id.as_str())),
        "still listed as unknown: {unknown}"
    );
    if caller == Build::This {
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("does not know"), "{detail}");
        // An id this gateway never sent, located by vault: the owner's answer is not a fence.
        let (status, body) = b.settle_in("notes", &fresh_request_id());
        assert_eq!(
            (status, body["error"].as_str()),
            (503, Some("unavailable")),
            "{body}"
        );
    }

    ran_once(&a, &b, &id);
}

#[test]
fn a_settle_state_from_a_newer_owner_leaves_the_write_unknown() {
    a_newer_state_settles_nothing(Build::This);
}

#[test]
fn a_settle_state_protocol_1_lacks_is_withheld_and_the_old_callers_write_stays_unknown() {
    a_newer_state_settles_nothing(Build::Previous);
}

#[test]
fn each_build_names_its_release_and_this_one_the_protocols_it_speaks() {
    let version = |bin: &Path| {
        let out = Command::new(bin)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", ferry_harness::describe(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        version(previous_build()),
        format!("ferry {}", PREVIOUS.version)
    );
    assert_eq!(
        version(Build::This.bin()),
        format!(
            "ferry {THIS_RELEASE} (protocols {}-{THIS_PROTOCOL})",
            PREVIOUS.protocol
        )
    );
}

/// The schema version `gateway`'s database records (`meta.schema_version`).
fn schema_version(gateway: &Gateway) -> u32 {
    let text: String = gateway
        .db()
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    text.parse().unwrap()
}

/// The columns of `table` in `gateway`'s database.
fn columns(gateway: &Gateway, table: &str) -> Vec<String> {
    let conn = gateway.db();
    let mut stmt = conn
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .unwrap();
    stmt.query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_home_the_previous_release_wrote_is_migrated_in_place_and_keeps_its_vault_records_and_peers() {
    let (mut a, b) = pair_with_notes(Build::Previous.start("a", &[]), Build::This.start("b", &[]));
    let (status, body) = a.put("notes", "k", b"written by the old build", &[]);
    assert_eq!(
        (status, body["revision"].as_u64()),
        (200, Some(1)),
        "{body}"
    );
    let (status, body) = b.put("notes", "from-b", b"through b", &[]);
    assert_eq!(
        (status, body["revision"].as_u64()),
        (200, Some(2)),
        "{body}"
    );
    wait_for_peer_version(&b, "a", PREVIOUS.protocol, None);
    assert_eq!(
        a.stop(),
        Some(0),
        "the old build's `ferry stop`: {}",
        a.log()
    );
    assert_eq!(schema_version(&a), PREVIOUS.schema);
    assert!(!columns(&a, "peers").contains(&"protocol".to_string()));

    a.restart_on(Build::This.bin(), &[]);
    assert_eq!(
        schema_version(&a),
        SCHEMA_VERSION,
        "migrated to this build's schema"
    );
    let peer_columns = columns(&a, "peers");
    assert!(
        ["protocol", "release"]
            .iter()
            .all(|c| peer_columns.contains(&c.to_string())),
        "the peers table after the migration: {peer_columns:?}"
    );

    // The vault and its records are still there and served, here and to b.
    let (status, value, revision, source) = a.get("notes", "k");
    assert_eq!(
        (status, value.as_slice(), revision, source.as_deref()),
        (
            200,
            &b"written by the old build"[..],
            Some(1),
            Some("local")
        )
    );
    let (_, vaults) = a.cli_json(&["vault", "list"]);
    assert_eq!(
        (
            vaults[0]["name"].as_str(),
            vaults[0]["role"].as_str(),
            vaults[0]["revision"].as_u64()
        ),
        (Some("notes"), Some("owner"), Some(2)),
        "{vaults}"
    );
    assert_eq!(
        a.records("notes"),
        vec![
            ("from-b".to_string(), 2, Some(b"through b".to_vec())),
            (
                "k".to_string(),
                1,
                Some(b"written by the old build".to_vec())
            ),
        ]
    );
    let (status, value, revision, source) = b.get("notes", "k");
    assert_eq!(
        (status, value.as_slice(), revision, source.as_deref()),
        (
            200,
            &b"written by the old build"[..],
            Some(1),
            Some("owner")
        )
    );

    // The trust store survived: b still writes, and each side now sees the other on protocol
    // 2, which the upgraded owner writes down in its new columns.
    let (status, body) = b.put("notes", "after-upgrade", b"v", &[]);
    assert_eq!(
        (status, body["revision"].as_u64()),
        (200, Some(3)),
        "{body}"
    );
    wait_for_peer_version(&b, "a", THIS_PROTOCOL, Some(THIS_RELEASE));
    wait_for_peer_version(&a, "b", THIS_PROTOCOL, Some(THIS_RELEASE));
    wait_for(
        "a to write down b's protocol and release",
        SETTLE_BOUND,
        || {
            a.db()
                .query_row(
                    "SELECT protocol, release FROM peers WHERE label = 'b'",
                    [],
                    |row| {
                        Ok((
                            row.get::<_, Option<i64>>(0)?,
                            row.get::<_, Option<String>>(1)?,
                        ))
                    },
                )
                .ok()
                .filter(|row| *row == (Some(i64::from(THIS_PROTOCOL)), Some(THIS_RELEASE.into())))
        },
    );
}

/// A home's database and its write-ahead log, byte for byte (a log that is absent and one that
/// is empty hold the same: nothing).
#[derive(PartialEq, Eq)]
struct DatabaseBytes {
    db: Vec<u8>,
    wal: Vec<u8>,
}

impl DatabaseBytes {
    fn of(home: &Path) -> Self {
        let read = |name: &str| std::fs::read(home.join(name)).unwrap_or_default();
        let bytes = Self {
            db: read("ferry.db"),
            wal: read("ferry.db-wal"),
        };
        assert!(!bytes.db.is_empty(), "no database in {}", home.display());
        bytes
    }

    /// What differs from `before`, for a failure message.
    fn changes_since(&self, before: &Self) -> String {
        let file = |name: &str, before: &[u8], now: &[u8]| {
            let first = before.iter().zip(now).position(|(b, n)| b != n);
            format!(
                "{name}: {} bytes before, {} now, first difference at byte {first:?}",
                before.len(),
                now.len()
            )
        };
        format!(
            "{}; {}",
            file("ferry.db", &before.db, &self.db),
            file("ferry.db-wal", &before.wal, &self.wal)
        )
    }
}

/// Every row of every table of the database in `home`, as SQLite reads it (with its log);
/// opened read-only, which never checkpoints.
fn database_content(home: &Path) -> Vec<(String, Vec<Vec<rusqlite::types::Value>>)> {
    let conn = rusqlite::Connection::open_with_flags(
        home.join("ferry.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    tables
        .into_iter()
        .map(|table| {
            // Ordered by every column: a table without a rowid (the journal) has no other order
            // common to all tables.
            let width = conn
                .prepare(&format!("SELECT * FROM \"{table}\""))
                .unwrap()
                .column_count();
            let order = (1..=width)
                .map(|column| column.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let mut stmt = conn
                .prepare(&format!("SELECT * FROM \"{table}\" ORDER BY {order}"))
                .unwrap();
            let rows = stmt
                .query_map([], |row| (0..width).map(|i| row.get(i)).collect())
                .unwrap()
                .map(Result::unwrap)
                .collect();
            (table, rows)
        })
        .collect()
}

/// What a bare SQLite open and close does to a copy of `home`'s database and log: the last
/// connection's close checkpoints the log into the database and removes it. Any program that
/// opens the database at all leaves at least this.
fn after_a_bare_open(home: &Path) -> DatabaseBytes {
    let copy = tempfile::tempdir().unwrap();
    for name in ["ferry.db", "ferry.db-wal"] {
        if home.join(name).exists() {
            std::fs::copy(home.join(name), copy.path().join(name)).unwrap();
        }
    }
    let conn = rusqlite::Connection::open(copy.path().join("ferry.db")).unwrap();
    let _: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
        .unwrap();
    drop(conn);
    DatabaseBytes::of(copy.path())
}

#[test]
fn a_home_this_build_wrote_is_refused_by_the_previous_release_which_changes_nothing() {
    let (mut a, b) = pair_with_notes(Build::This.start("a", &[]), Build::This.start("b", &[]));
    let (status, body) = b.put("notes", "k", b"written by the new build", &[]);
    assert_eq!(
        (status, body["revision"].as_u64()),
        (200, Some(1)),
        "{body}"
    );
    // Schema 3's new columns hold something too.
    wait_for_peer_version(&a, "b", THIS_PROTOCOL, Some(THIS_RELEASE));
    assert_eq!(a.stop(), Some(0), "{}", a.log());
    assert_eq!(schema_version(&a), SCHEMA_VERSION);
    let content = database_content(&a.home);
    let before = DatabaseBytes::of(&a.home);
    let bare_open = after_a_bare_open(&a.home);

    let (code, said) = serve_refused(previous_build(), &a.home, "a home of a newer build");
    assert!(
        code.is_some_and(|code| code != 0),
        "the previous release on a schema {SCHEMA_VERSION} home exited {code:?}:\n{said}"
    );
    assert!(said.contains("newer Ferry"), "it said:\n{said}");
    assert!(
        database_content(&a.home) == content,
        "the refused start changed the database's content"
    );
    let refused = DatabaseBytes::of(&a.home);
    assert!(
        refused == bare_open,
        "the refused start left other bytes than a bare SQLite open and close would: {}",
        refused.changes_since(&bare_open)
    );
    assert!(refused.wal.is_empty(), "the refused start left a log");

    // The previous release's CLI, writing to the store itself with no gateway running, is
    // refused the same way.
    let stranger = ferry_ticket::NodeKey::generate()
        .unwrap()
        .node_id()
        .to_string();
    for args in [
        vec![
            "trust",
            stranger.as_str(),
            "--label",
            "other",
            "--addr",
            "127.0.0.1:9",
        ],
        vec!["vault", "create", "other"],
    ] {
        let out = Command::new(previous_build())
            .arg("--home")
            .arg(&a.home)
            .args(&args)
            .env_remove("FERRY_HOME")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let said = ferry_harness::describe(&out);
        assert!(
            !out.status.success() && said.contains("newer Ferry"),
            "the previous release's `ferry {args:?}` offline: {said}"
        );
        let now = DatabaseBytes::of(&a.home);
        assert!(
            now == refused,
            "the previous release's `ferry {args:?}` changed the database or its log: {}",
            now.changes_since(&refused)
        );
    }

    // This build still runs the home as it left it.
    a.restart();
    let (status, value, revision, source) = a.get("notes", "k");
    assert_eq!(
        (status, value.as_slice(), revision, source.as_deref()),
        (
            200,
            &b"written by the new build"[..],
            Some(1),
            Some("local")
        )
    );

    // Byte for byte, too: which holds only if this build's `ferry stop` left every committed
    // page in ferry.db. Checked last, so that everything above is shown either way.
    assert!(
        refused == before,
        "ferry.db's bytes changed though its content did not: this build's `ferry stop` left \
         {} bytes of write-ahead log whose pages were not yet in ferry.db, and the previous \
         release's refused open checkpointed them into it, as SQLite does when the last \
         connection closes (ferry.db is now what a bare SQLite open and close makes of the \
         same files): {}",
        before.wal.len(),
        refused.changes_since(&before)
    );
}
