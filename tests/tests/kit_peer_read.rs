//! The kit with its local gateway stopped (SPEC 9, last point): `get` reads straight from a
//! trusted peer's gateway, as this machine's node; writes never go that way (SPEC 6 rule 9).

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ferry_gateway::home::Home;
use ferry_gateway::read_around;
use ferry_harness::{two_with_notes, wait_for, Gateway};
use ferry_kit::contract::ErrorCode;
use ferry_kit::{KitError, ReadRecord, WriteOptions, WriteResult};

/// A stopped peer's port refuses at once, so giving up on it costs far less than the deadline.
const GIVE_UP_BOUND: Duration = Duration::from_secs(10);

/// A put through `gateway`, sent again while it is `unavailable` (nothing was sent, so sending
/// again is safe): right after the gateways start, their first connection may still be settling.
fn put_until_done(gateway: &Gateway, key: &str, value: &[u8]) -> u64 {
    wait_for("a put to be carried out", Duration::from_secs(15), || {
        let (status, body) = gateway.put("notes", key, value, &[]);
        match status {
            200 => body["revision"].as_u64(),
            503 if body["error"] == "unavailable" => None,
            _ => panic!("put through {}: {status} {body}", gateway.label),
        }
    })
}

fn is_not_found(result: &Result<ReadRecord, KitError>) -> bool {
    matches!(
        result,
        Err(KitError::Answered {
            status: 404,
            code: ErrorCode::NotFound,
            ..
        })
    )
}

#[test]
fn with_its_gateway_stopped_the_kit_reads_from_the_owner_and_never_writes() {
    // `notes` is owned by a; b is this machine.
    let (mut a, mut b) = two_with_notes();
    assert_eq!(put_until_done(&b, "k", b"v1"), 1);
    assert_eq!(put_until_done(&b, "k", b"v2"), 2);
    let b_home = Home::locate(Some(b.home.clone())).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Made while b runs: it knows b's API address, whose connect is refused after the stop.
    let kit = read_around::kit(&b_home, "kit-test");
    let missing_through_b = runtime.block_on(kit.get("notes", "missing"));
    assert!(is_not_found(&missing_through_b), "{missing_through_b:?}");

    assert_eq!(b.stop(), Some(0));
    runtime.block_on(async {
        let expected = ReadRecord {
            value: b"v2".to_vec(),
            revision: 2,
            source: "owner".into(),
            stale: false,
        };
        assert_eq!(
            kit.get("notes", "k").await.unwrap(),
            expected,
            "connect refused"
        );
        // Made after the stop: b removed api.addr, so there is no address to try at all.
        let late = read_around::kit(&b_home, "kit-test");
        assert_eq!(
            late.get("notes", "k").await.unwrap(),
            expected,
            "no api.addr"
        );

        let missing = kit.get("notes", "missing").await;
        assert!(is_not_found(&missing), "{missing:?}");

        let unknown = kit.get("nosuch", "k").await;
        let Err(KitError::LocalGatewayDown { detail }) = &unknown else {
            panic!("a vault no peer has: {unknown:?}")
        };
        assert!(detail.contains("neither owns nor replicates"), "{detail}");

        let put = kit
            .put("notes", "k", b"v3".to_vec(), &WriteOptions::default())
            .await;
        let WriteResult::LocalGatewayDown { detail } = &put else {
            panic!("a write with the local gateway down: {put:?}")
        };
        assert!(detail.ends_with("nothing was sent"), "{detail}");
        let delete = late.delete("notes", "k", &WriteOptions::default()).await;
        assert!(
            matches!(delete, WriteResult::LocalGatewayDown { .. }),
            "{delete:?}"
        );
    });
    assert_eq!(
        a.vault_revision("notes"),
        2,
        "the kit never wrote around its gateway"
    );
    assert_eq!(a.stored("notes", "k"), Some((Some(b"v2".to_vec()), 2)));

    assert_eq!(a.stop(), Some(0));
    runtime.block_on(async {
        let started = Instant::now();
        let down = kit.get("notes", "k").await;
        let Err(KitError::LocalGatewayDown { detail }) = &down else {
            panic!("expected local_gateway_down with every gateway stopped, got {down:?}")
        };
        assert!(
            detail.contains("no trusted peer could answer either"),
            "{detail}"
        );
        assert!(
            detail.contains("a did not answer"),
            "names the peer: {detail}"
        );
        assert!(
            started.elapsed() < GIVE_UP_BOUND,
            "took {:?}",
            started.elapsed()
        );
    });
}

#[test]
fn the_kit_prefers_the_owner_and_falls_back_to_a_replica_marked_stale() {
    // `notes` is owned by a and replicated by c; b is this machine and trusts both.
    let (mut a, mut b) = two_with_notes();
    let c = ferry_harness::replica_of_notes(&a, &b);
    assert_eq!(put_until_done(&b, "k", b"v1"), 1);
    wait_for("c to replicate revision 1", Duration::from_secs(30), || {
        (c.vault_revision("notes") >= 1).then_some(())
    });
    let kit = read_around::kit(&Home::locate(Some(b.home.clone())).unwrap(), "kit-test");
    let runtime = tokio::runtime::Runtime::new().unwrap();

    assert_eq!(b.stop(), Some(0));
    let from_owner = runtime.block_on(kit.get("notes", "k")).unwrap();
    assert_eq!(
        (from_owner.source.as_str(), from_owner.stale),
        ("owner", false),
        "the owner answers while it runs, whoever greets first"
    );

    assert_eq!(a.stop(), Some(0));
    let from_replica = runtime.block_on(kit.get("notes", "k")).unwrap();
    assert_eq!(
        from_replica,
        ReadRecord {
            value: b"v1".to_vec(),
            revision: 1,
            source: "replica:c".into(),
            stale: true,
        }
    );
    let put = runtime.block_on(kit.put("notes", "k", b"v2".to_vec(), &WriteOptions::default()));
    assert!(
        matches!(put, WriteResult::LocalGatewayDown { .. }),
        "{put:?}"
    );
    assert_eq!(
        c.vault_revision("notes"),
        1,
        "nothing was written to the replica"
    );
}
