//! The codec and the frames of every protocol version on hostile input: round trips, and no
//! panic or large allocation on truncated, bit-flipped, or length-forged frames.

// Tests measure real time (`clippy.toml` bans reading a clock outside the clock modules).
#![allow(clippy::disallowed_methods)]
// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_names::{AppName, NameError, NameKind, VaultName};
use ferry_peer::codec::{self, DecodeError, MAX_FRAME_LEN};
use ferry_peer::frames;
use ferry_peer::outcome::NotCarriedOutReason;
use ferry_peer::wire::{
    CallState, Extension, Extensions, Hello, NamedRequest, Priority, ReadRequest, ReadVerb,
    Request, RequestFrame, RequestId, Response, ResponseFrame, TicketRequest, WriteAnswer,
    WriteRequest, WriteVerb, FIRST_OPEN_CALL_STATE, OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use ferry_peer::{NodeId, NodeKey};
use ferry_ticket::{Ticket, VerbSet};
use proptest::prelude::*;

fn ticket() -> Ticket {
    let owner = NodeKey::from_secret_bytes([5; 32]);
    let holder = NodeId::from_bytes([6; 32]);
    Ticket::issue(
        &owner,
        holder,
        "notes-app",
        "notes",
        VerbSet::all_writes(),
        1_700_000_000_000,
        600_000,
        3,
    )
}

fn write_frame(
    key: String,
    value: Vec<u8>,
    if_revision: Option<u64>,
    deadline_ms: u32,
) -> RequestFrame {
    RequestFrame {
        body: Request::Write(Box::new(WriteRequest {
            // Fixed, so no random byte pair can look like the key the hostile test looks for.
            request_id: RequestId::from_bytes([0; 16]),
            app: AppName::from_static("notes-app"),
            vault: VaultName::from_static("notes"),
            verb: WriteVerb::Put {
                key,
                value,
                if_revision,
            },
            deadline_ms,
            priority: Priority::Interactive,
            ticket: ticket(),
        })),
        ext: Extensions(vec![Extension {
            tag: 7,
            value: vec![1, 2, 3],
        }]),
    }
}

/// Any settle state: the four every release knows, with any fields, or a later one.
fn call_state() -> impl Strategy<Value = CallState> {
    let reason = prop_oneof![
        Just(NotCarriedOutReason::NeverArrived),
        Just(NotCarriedOutReason::Expired),
        Just(NotCarriedOutReason::Interrupted),
    ];
    prop_oneof![
        any::<u64>().prop_map(|revision| CallState::Answered(WriteAnswer::Done { revision })),
        (any::<u64>(), any::<u64>()).prop_map(|(since_ms, heartbeat_age_ms)| CallState::Running {
            since_ms,
            heartbeat_age_ms
        }),
        reason.prop_map(|reason| CallState::NotCarriedOut { reason }),
        any::<u64>().prop_map(|retention_ms| CallState::Forgotten { retention_ms }),
        (FIRST_OPEN_CALL_STATE..).prop_map(|number| CallState::Unrecognized { number }),
    ]
}

proptest! {
    /// A settle answer reads back as sent in every version that may carry it; a later state
    /// is never put on a protocol 1 connection.
    #[test]
    fn settle_answers_round_trip(state in call_state(),
                                 version in OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION) {
        let frame = ResponseFrame { body: Response::CallStatus(state.clone()), ext: Extensions::default() };
        match frames::encode_response(version, &frame) {
            Ok(bytes) => prop_assert_eq!(frames::decode_response_frame(&bytes).unwrap(), (version, frame)),
            Err(_) => {
                let later = matches!(state, CallState::Unrecognized { .. });
                prop_assert!(version == 1 && later, "refused: {:?} in protocol {}", state, version);
            }
        }
    }

    #[test]
    fn frames_round_trip(key in ".{0,64}", value in proptest::collection::vec(any::<u8>(), 0..2048),
                         rev in proptest::option::of(any::<u64>()), deadline in any::<u32>(),
                         version in OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION) {
        let frame = write_frame(key, value, rev, deadline);
        let bytes = frames::encode_request(version, &frame).unwrap();
        prop_assert_eq!(u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize, bytes.len() - 4);
        let (got_version, decoded) = frames::decode_request_frame(&bytes).unwrap();
        prop_assert_eq!(got_version, version);
        prop_assert_eq!(decoded, frame);
    }

    #[test]
    fn truncated_frames_are_refused(value in proptest::collection::vec(any::<u8>(), 0..512), cut in any::<prop::sample::Index>(),
                                    version in OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION) {
        let bytes = frames::encode_request(version, &write_frame("k".into(), value, None, 1000)).unwrap();
        let cut = cut.index(bytes.len());
        prop_assert!(frames::decode_request_frame(&bytes[..cut]).is_err());
    }

    #[test]
    fn bit_flips_never_panic(value in proptest::collection::vec(any::<u8>(), 0..512), bit in any::<prop::sample::Index>(),
                             version in OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION) {
        let mut bytes = frames::encode_request(version, &write_frame("k".into(), value, Some(3), 1000)).unwrap();
        let bit = bit.index(bytes.len() * 8);
        bytes[bit / 8] ^= 1 << (bit % 8);
        // Either a clean error or some other valid frame; never a panic or an abort.
        let _ = frames::decode_request_frame(&bytes);
        let _ = frames::decode_response_frame(&bytes);
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        let _ = frames::decode_request_frame(&bytes);
        let _ = frames::decode_response_frame(&bytes);
        for version in OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION {
            let _ = frames::decode_request(version, &bytes);
            let _ = frames::decode_response(version, &bytes);
        }
    }
}

#[test]
fn a_length_prefix_over_the_cap_is_refused_before_reading() {
    let prefix = ((MAX_FRAME_LEN + 1) as u32).to_be_bytes();
    assert_eq!(
        codec::frame_len(prefix),
        Err(DecodeError::TooLong {
            len: MAX_FRAME_LEN + 1,
            cap: MAX_FRAME_LEN
        })
    );
}

#[test]
fn a_hostile_length_inside_the_body_is_a_clean_error() {
    // A Write request whose value claims u64::MAX bytes: bincode's u64 varint marker (253)
    // then 8 bytes. Without the decode limit this aborts the process trying to allocate.
    // Protocol 1: the value's length is inside the frame itself.
    let good = frames::encode_request(1, &write_frame("k".into(), vec![], None, 1)).unwrap();
    let body = &good[6..];
    // Find the value's length byte (0 for an empty value) after the key "k" (len 1, 'k').
    let at = body
        .windows(2)
        .position(|w| w == [1, b'k'])
        .expect("key in body")
        + 2;
    let mut hostile = body[..at].to_vec();
    hostile.push(253);
    hostile.extend_from_slice(&u64::MAX.to_le_bytes());
    hostile.extend_from_slice(&body[at + 1..]);
    let err = frames::decode_request(1, &hostile).expect_err("refused");
    match err {
        DecodeError::Malformed { reason } => {
            assert!(reason.to_lowercase().contains("limit"), "{reason}")
        }
        other => panic!("expected the size limit to refuse it, got {other:?}"),
    }
}

#[test]
fn trailing_bytes_are_refused() {
    for version in OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION {
        let frame = write_frame("k".into(), vec![1], None, 1);
        let mut bytes = frames::encode_request(version, &frame).unwrap();
        bytes.push(0);
        let len = u32::from_be_bytes(bytes[..4].try_into().unwrap()) + 1;
        bytes[..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(
            frames::decode_request_frame(&bytes),
            Err(DecodeError::TrailingBytes { extra: 1 }),
            "protocol {version}"
        );
    }
}

#[test]
fn request_ids_must_be_hyphenated_uuid_v7() {
    let id = RequestId::generate();
    assert_eq!(RequestId::parse(&id.to_string()), Ok(id));
    assert!(RequestId::parse("not-a-uuid").is_err());
    assert!(
        RequestId::parse("67e55044-10b1-426f-9247-bb680e5fe0c8").is_err(),
        "v4 refused"
    );
    let simple = id.to_string().replace('-', "");
    assert!(
        RequestId::parse(&simple).is_err(),
        "only the hyphenated form"
    );
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(id.unix_ms().abs_diff(now_ms) < 60_000);
}

/// `bytes` with the one occurrence of `from` replaced by `to` (of the same length).
fn replaced(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let at: Vec<usize> = bytes
        .windows(from.len())
        .enumerate()
        .filter(|(_, window)| *window == from)
        .map(|(at, _)| at)
        .collect();
    assert_eq!(at.len(), 1, "{from:?} must occur once");
    let mut out = bytes.to_vec();
    out[at[0]..at[0] + to.len()].copy_from_slice(to);
    out
}

/// A write, a read and a ticket request that name an invalid vault or app decode, in every
/// version spoken, as `Request::BadName` (the door refuses it, nothing runs), never as a
/// malformed frame (a reset stream, which a write's caller could only take as outcome
/// unknown). With valid names, each round trips: the names' layout is the strings'.
#[test]
fn a_request_naming_an_invalid_vault_or_app_decodes_as_bad_name() {
    let mut write = write_frame("k".into(), vec![1], None, 1);
    if let Request::Write(request) = &mut write.body {
        request.vault = VaultName::from_static("vxyzq");
    }
    let read = RequestFrame {
        body: Request::Read(ReadRequest {
            app: AppName::from_static("appqq"),
            vault: VaultName::from_static("vxyzq"),
            verb: ReadVerb::Get {
                key: "k".into(),
                known_revision: None,
            },
            deadline_ms: 1,
        }),
        ext: Extensions::default(),
    };
    let ticket_request = RequestFrame {
        body: Request::IssueTicket(TicketRequest {
            app: AppName::from_static("appqq"),
            vault: VaultName::from_static("vxyzq"),
            verbs: VerbSet::all_writes(),
        }),
        ext: Extensions::default(),
    };
    for version in OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION {
        for (frame, kind) in [
            (&write, NamedRequest::Write),
            (&read, NamedRequest::Read),
            (&ticket_request, NamedRequest::IssueTicket),
        ] {
            let good = frames::encode_request(version, frame).unwrap();
            assert_eq!(&frames::decode_request_frame(&good).unwrap().1, frame);
            let bad_vault = replaced(&good, b"vxyzq", b"v/yzq");
            let (_, decoded) = frames::decode_request_frame(&bad_vault).unwrap();
            assert!(
                matches!(
                    &decoded.body,
                    Request::BadName {
                        kind: got,
                        error: NameError::BadCharacter { kind: NameKind::Vault, ch: '/', .. },
                    } if *got == kind
                ),
                "protocol {version}: {:?}",
                decoded.body
            );
            if kind != NamedRequest::Write {
                let dots = replaced(&good, b"appqq", b".....");
                let (_, decoded) = frames::decode_request_frame(&dots).unwrap();
                assert!(
                    matches!(
                        &decoded.body,
                        Request::BadName {
                            error: NameError::DotsOnly {
                                kind: NameKind::App
                            },
                            ..
                        }
                    ),
                    "protocol {version}: {:?}",
                    decoded.body
                );
            }
        }
    }
}

/// A hello naming an invalid vault is read, without that name: a hello only informs.
#[test]
fn a_hellos_invalid_vault_names_are_dropped() {
    let hello = RequestFrame {
        body: Request::Hello(Hello {
            label_hint: "any text".into(),
            owned_vaults: vec![
                VaultName::from_static("vxyzq"),
                VaultName::from_static("notes"),
            ],
            replicated_vaults: vec![VaultName::from_static("wxyzq")],
            release: None,
        }),
        ext: Extensions::default(),
    };
    for version in OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION {
        let good = frames::encode_request(version, &hello).unwrap();
        assert_eq!(frames::decode_request_frame(&good).unwrap().1, hello);
        let bad = replaced(&replaced(&good, b"vxyzq", b"v/yzq"), b"wxyzq", b".....");
        let (_, decoded) = frames::decode_request_frame(&bad).unwrap();
        let Request::Hello(decoded) = decoded.body else {
            panic!("protocol {version}: not a hello");
        };
        assert_eq!(decoded.owned_vaults, vec![VaultName::from_static("notes")]);
        assert!(decoded.replicated_vaults.is_empty(), "protocol {version}");
    }
}
