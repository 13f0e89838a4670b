//! The kit (the app library) against real gateways: typed write outcomes, typed settlement,
//! and `local_gateway_down` when its gateway is not running.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_gateway::home::Home;
use ferry_gateway::read_around;
use ferry_harness::two_with_notes;
use ferry_kit::contract::ErrorCode;
use ferry_kit::{Settlement, WriteOptions, WriteResult};

#[test]
fn the_kit_types_every_outcome_and_never_writes_around_a_stopped_gateway() {
    let (a, mut b) = two_with_notes();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let kit = read_around::kit(&Home::locate(Some(b.home.clone())).unwrap(), "kit-test");
    runtime.block_on(async {
        let WriteResult::Done {
            revision,
            request_id,
        } = kit
            .put("notes", "k", &b"v"[..], &WriteOptions::default())
            .await
        else {
            panic!("expected done")
        };
        assert_eq!(revision, 1);
        assert_eq!(
            kit.settle(&request_id, Some("notes"), None).await.unwrap(),
            Settlement::Done { revision: 1 }
        );
        let conflict = kit
            .put(
                "notes",
                "k",
                &b"w"[..],
                &WriteOptions {
                    if_revision: Some(0),
                    ..WriteOptions::default()
                },
            )
            .await;
        assert!(
            matches!(
                &conflict,
                WriteResult::Refused {
                    status: 409,
                    code: ErrorCode::Conflict,
                    ..
                }
            ),
            "{conflict:?}"
        );
        let record = kit.get("notes", "k").await.unwrap();
        assert_eq!(
            (
                record.value.as_slice(),
                record.revision,
                record.source.as_str()
            ),
            (&b"v"[..], 1, "owner")
        );
        let bad = kit
            .put(
                "notes",
                "k",
                &b"v"[..],
                &WriteOptions {
                    timeout: Some("0".into()),
                    ..WriteOptions::default()
                },
            )
            .await;
        assert!(
            matches!(bad, WriteResult::Invalid { status: 400, .. }),
            "{bad:?}"
        );
    });

    assert_eq!(b.stop(), Some(0));
    runtime.block_on(async {
        let down = kit
            .put("notes", "k2", &b"v"[..], &WriteOptions::default())
            .await;
        let WriteResult::LocalGatewayDown { detail } = down else {
            panic!("expected local_gateway_down, got {down:?}")
        };
        assert!(detail.ends_with("nothing was sent"), "{detail}");
        // Reads (only reads) go around a stopped local gateway, to a trusted peer: the owner.
        let around = kit.get("notes", "k").await.unwrap();
        assert_eq!(
            (around.revision, around.source.as_str(), around.stale),
            (1, "owner", false)
        );
    });
    assert_eq!(
        a.vault_revision("notes"),
        1,
        "the kit never wrote around its gateway"
    );
}
