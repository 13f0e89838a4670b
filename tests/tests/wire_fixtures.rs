//! Golden bytes of every frame this build speaks, in every protocol version it speaks (SPEC 11).
//!
//! `tests/fixtures/wire/v<N>/<frame>.bin` holds the bytes of one sample frame as protocol N
//! encodes it. For each one this test checks both ways: today's encoder gives exactly those
//! bytes, and the bytes decode to the sample. A released protocol version never changes, so a
//! failure here means a change to a type that travels in frames altered what peers of that
//! version send or expect: add a protocol version for it instead (`docs/protocol.md`,
//! "Evolution"). The protocol 1 files were checked against the protocol 1 release itself
//! (commit d07b2c7) when they were made: its decoder reads each one and its encoder gives the
//! same bytes back.
//!
//! A frame type new in a version gets its file with `FERRY_BLESS_FIXTURES=1 cargo test -p
//! ferry-tests --test integration wire_fixtures::`, which writes only files that do not exist yet: a released
//! file is never rewritten.

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_names::{AppName, VaultName};
use std::path::PathBuf;

use ferry_core::outcome::{NotCarriedOutReason, Refusal, RefusalCode, WriteAnswer};
use ferry_peer::codec;
use ferry_peer::frames;
use ferry_peer::wire::{
    CallState, CallStatusRequest, Extension, Extensions, Heartbeat, Hello, KeyRevision, Priority,
    ProtocolFailure, ReadAnswer, ReadRequest, ReadVerb, Request, RequestFrame, RequestId, Response,
    ResponseFrame, TicketAnswer, TicketRequest, WireChange, WireRecord, WriteRequest, WriteVerb,
    OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use ferry_ticket::{NodeKey, Ticket, Verb, VerbSet};

const BLESS_VAR: &str = "FERRY_BLESS_FIXTURES";

fn fixtures(version: u16) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/wire")
        .join(format!("v{version}"))
}

fn request_id() -> RequestId {
    RequestId::parse("01939a2b-7c4d-7e5f-8a6b-0c1d2e3f4a5b").unwrap()
}

fn ticket() -> Ticket {
    let owner = NodeKey::from_secret_bytes([7; 32]);
    let holder = NodeKey::from_secret_bytes([9; 32]).node_id();
    Ticket::issue(
        &owner,
        holder,
        "editor",
        "notes",
        VerbSet::from_verbs(&[Verb::Put, Verb::Delete]),
        1_764_547_200_000,
        3_600_000,
        2,
    )
}

fn hello(version: u16) -> Hello {
    Hello {
        label_hint: "laptop".into(),
        owned_vaults: vec![VaultName::from_static("notes")],
        replicated_vaults: vec![
            VaultName::from_static("photos"),
            VaultName::from_static("music"),
        ],
        // Protocol 1 has no release in a hello: that sample decodes without one.
        release: (version >= 2).then(|| "0.2.0".into()),
    }
}

fn busy() -> Refusal {
    Refusal::busy(
        "owner busy: 4 writes of this app in flight",
        std::time::Duration::from_millis(250),
    )
}

/// Every request kind, with the variants inside it that change its layout.
fn requests(version: u16) -> Vec<(&'static str, Request)> {
    let write = |verb, priority| {
        Request::Write(Box::new(WriteRequest {
            request_id: request_id(),
            app: AppName::from_static("editor"),
            vault: VaultName::from_static("notes"),
            verb,
            deadline_ms: 5_000,
            priority,
            ticket: ticket(),
        }))
    };
    let read = |verb| {
        Request::Read(ReadRequest {
            app: AppName::from_static("viewer"),
            vault: VaultName::from_static("notes"),
            verb,
            deadline_ms: 2_000,
        })
    };
    vec![
        ("request-hello", Request::Hello(hello(version))),
        (
            "request-write-put",
            write(
                WriteVerb::Put {
                    key: "todo/1".into(),
                    value: b"buy milk".to_vec(),
                    if_revision: Some(3),
                },
                Priority::Interactive,
            ),
        ),
        (
            "request-write-delete",
            write(
                WriteVerb::Delete {
                    key: "todo/2".into(),
                    if_revision: None,
                },
                Priority::Background,
            ),
        ),
        (
            "request-read-get",
            read(ReadVerb::Get {
                key: "todo/1".into(),
                known_revision: Some(4),
            }),
        ),
        (
            "request-read-list",
            read(ReadVerb::List {
                prefix: "todo/".into(),
                after: Some("todo/1".into()),
                limit: 100,
            }),
        ),
        (
            "request-read-changes",
            read(ReadVerb::Changes {
                since_revision: 17,
                limit: 500,
            }),
        ),
        (
            "request-issue-ticket",
            Request::IssueTicket(TicketRequest {
                app: AppName::from_static("editor"),
                vault: VaultName::from_static("notes"),
                verbs: VerbSet::from_verbs(&[Verb::Put]),
            }),
        ),
        (
            "request-call-status",
            Request::CallStatus(CallStatusRequest {
                request_id: request_id(),
            }),
        ),
        (
            "request-heartbeat",
            Request::Heartbeat(Heartbeat { interval_ms: 250 }),
        ),
    ]
}

/// Every answer kind, with the variants inside it that change its layout.
fn responses(version: u16) -> Vec<(&'static str, Response)> {
    let read = |answer| Response::Read(answer);
    let mut all = vec![
        ("response-hello", Response::Hello(hello(version))),
        (
            "response-write-done",
            Response::Write(WriteAnswer::Done { revision: 42 }),
        ),
        (
            "response-write-conflict",
            Response::Write(WriteAnswer::Refused(Refusal::conflict(41))),
        ),
        (
            "response-write-busy",
            Response::Write(WriteAnswer::Refused(busy())),
        ),
        (
            "response-write-ticket-refused",
            Response::Write(WriteAnswer::Refused(Refusal {
                reason: Some("expired".into()),
                at_door: true,
                ..Refusal::new(RefusalCode::TicketRefused, "the ticket expired")
            })),
        ),
        (
            "response-write-not-carried-out",
            Response::Write(WriteAnswer::NotCarriedOut {
                reason: NotCarriedOutReason::Interrupted,
            }),
        ),
        (
            "response-read-record",
            read(ReadAnswer::Record {
                record: WireRecord {
                    key: "todo/1".into(),
                    revision: 4,
                    value: b"buy milk".to_vec(),
                },
                vault_revision: 9,
            }),
        ),
        (
            "response-read-not-modified",
            read(ReadAnswer::NotModified {
                revision: 4,
                vault_revision: 9,
            }),
        ),
        (
            "response-read-not-found",
            read(ReadAnswer::NotFound { vault_revision: 9 }),
        ),
        (
            "response-read-page",
            read(ReadAnswer::Page {
                keys: vec![
                    KeyRevision {
                        key: "todo/1".into(),
                        revision: 4,
                    },
                    KeyRevision {
                        key: "todo/3".into(),
                        revision: 8,
                    },
                ],
                more: true,
                vault_revision: 9,
            }),
        ),
        (
            "response-read-changes",
            read(ReadAnswer::Changes {
                changes: vec![
                    WireChange {
                        key: "todo/1".into(),
                        revision: 18,
                        value: Some(b"buy oat milk".to_vec()),
                    },
                    WireChange {
                        key: "todo/2".into(),
                        revision: 19,
                        value: None,
                    },
                ],
                more: false,
                vault_revision: 19,
            }),
        ),
        (
            "response-read-refused",
            read(ReadAnswer::Refused(Refusal::new(
                RefusalCode::UnknownVault,
                "no vault called notes here",
            ))),
        ),
        (
            "response-failed-unsupported-version",
            Response::Failed(ProtocolFailure::UnsupportedVersion {
                oldest: 1,
                newest: 2,
            }),
        ),
        (
            "response-failed-going-away",
            Response::Failed(ProtocolFailure::GoingAway),
        ),
        (
            "response-ticket-issued",
            Response::Ticket(TicketAnswer::Issued(ticket())),
        ),
        (
            "response-ticket-refused",
            Response::Ticket(TicketAnswer::Refused(Refusal::new(
                RefusalCode::Forbidden,
                "app editor may not write notes",
            ))),
        ),
        (
            "response-call-answered",
            Response::CallStatus(CallState::Answered(WriteAnswer::Done { revision: 42 })),
        ),
        (
            "response-call-running",
            Response::CallStatus(CallState::Running {
                since_ms: 1_764_547_200_000,
                heartbeat_age_ms: 120,
            }),
        ),
        (
            "response-call-not-carried-out",
            Response::CallStatus(CallState::NotCarriedOut {
                reason: NotCarriedOutReason::NeverArrived,
            }),
        ),
        (
            "response-call-forgotten",
            Response::CallStatus(CallState::Forgotten {
                retention_ms: 86_400_000,
            }),
        ),
        (
            "response-heartbeat",
            Response::Heartbeat(Heartbeat { interval_ms: 250 }),
        ),
    ];
    if version >= 2 {
        all.push((
            "response-failed-unknown-request",
            Response::Failed(ProtocolFailure::UnknownRequest { kind: 77 }),
        ));
    }
    all
}

/// The extensions every sample carries: one unknown tag, which every version must pass through.
fn ext() -> Extensions {
    Extensions(vec![Extension {
        tag: 9_001,
        value: vec![1, 2, 3],
    }])
}

/// What was wrong with one fixture, or `None` if it matched.
fn check(
    version: u16,
    name: &str,
    encoded: Vec<u8>,
    decodes: impl Fn(&[u8]) -> bool,
) -> Option<String> {
    let path = fixtures(version).join(format!("{name}.bin"));
    let golden = match std::fs::read(&path) {
        Ok(golden) => golden,
        Err(_) if std::env::var_os(BLESS_VAR).is_some() => {
            std::fs::create_dir_all(fixtures(version)).unwrap();
            std::fs::write(&path, &encoded).unwrap();
            eprintln!("wrote the new fixture {}", path.display());
            return None;
        }
        Err(err) => {
            return Some(format!(
                "{}: no fixture ({err}); a frame type new in this version gets one with \
                 {BLESS_VAR}=1",
                path.display()
            ))
        }
    };
    if golden != encoded {
        return Some(format!(
            "{name} in protocol {version}: today's encoding differs from the released bytes in \
             {}.\n  released: {}\n  today:    {}\nA released frame never changes: put the \
             change in a new protocol version and keep this one's layout (docs/protocol.md, \
             \"Evolution\").",
            path.display(),
            hex::encode(&golden),
            hex::encode(&encoded)
        ));
    }
    if !decodes(&golden) {
        return Some(format!(
            "{name} in protocol {version}: the released bytes no longer decode to the sample"
        ));
    }
    None
}

#[test]
fn every_frame_of_every_spoken_version_encodes_to_its_released_bytes_and_back() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for version in OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION {
        for (name, body) in requests(version) {
            let frame = RequestFrame { body, ext: ext() };
            let encoded = frames::encode_request(version, &frame).unwrap();
            wrong.extend(check(version, name, encoded, |bytes| {
                frames::decode_request_frame(bytes).ok() == Some((version, frame.clone()))
            }));
            checked += 1;
        }
        for (name, body) in responses(version) {
            let frame = ResponseFrame { body, ext: ext() };
            let encoded = frames::encode_response(version, &frame).unwrap();
            wrong.extend(check(version, name, encoded, |bytes| {
                frames::decode_response_frame(bytes).ok() == Some((version, frame.clone()))
            }));
            checked += 1;
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    assert!(checked >= 60, "only {checked} fixtures checked");
}

#[test]
fn a_fixture_directory_holds_no_file_this_build_does_not_check() {
    for version in OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION {
        let names: Vec<&str> = requests(version)
            .iter()
            .map(|(name, _)| *name)
            .chain(responses(version).iter().map(|(name, _)| *name))
            .collect();
        for entry in std::fs::read_dir(fixtures(version)).unwrap() {
            let file = entry.unwrap().file_name().to_string_lossy().into_owned();
            let name = file.trim_end_matches(".bin");
            assert!(
                names.contains(&name),
                "v{version}/{file} is a released frame this build no longer checks: a version \
                 this build speaks may not drop a frame"
            );
        }
    }
}

/// A request and an answer of a kind no version has yet (a newer peer's), in protocol 2's
/// envelope: both are read whole, as unknown, with their extensions.
#[test]
fn a_newer_peers_request_and_answer_of_unknown_kinds_decode_as_unknown_in_protocol_2() {
    #[derive(serde::Serialize)]
    struct Envelope<'a> {
        kind: u32,
        #[serde(with = "serde_bytes")]
        payload: &'a [u8],
        ext: Extensions,
    }
    let future = codec::encode_frame(
        2,
        &Envelope {
            kind: 40,
            payload: b"a verb from the future",
            ext: ext(),
        },
    )
    .unwrap();
    assert_eq!(
        frames::decode_request_frame(&future).unwrap(),
        (
            2,
            RequestFrame {
                body: Request::Unknown { kind: 40 },
                ext: ext()
            }
        )
    );
    assert_eq!(
        frames::decode_response_frame(&future).unwrap(),
        (
            2,
            ResponseFrame {
                body: Response::Unknown { kind: 40 },
                ext: ext()
            }
        )
    );
    // Protocol 1 has no envelope: the same bytes under its header are not a frame there.
    let mut as_v1 = future.clone();
    as_v1[4..6].copy_from_slice(&1u16.to_be_bytes());
    assert!(frames::decode_request_frame(&as_v1).is_err());
    // Unknown kinds are never sent, in any version.
    for version in [1, 2] {
        let unknown = RequestFrame {
            body: Request::Unknown { kind: 40 },
            ext: Extensions::default(),
        };
        assert!(frames::encode_request(version, &unknown).is_err());
    }
}

/// A refusal code from a newer owner is a refusal this build cannot name, not an undecodable
/// answer: the write's outcome stays "the owner answered, not carried out". Protocol 2 carries
/// the number; to a protocol 1 peer, whose decoder knows nine codes, it goes as `BadRequest`
/// (still a refusal) with the number in the detail.
#[test]
fn a_refusal_code_this_build_does_not_know_stays_a_refusal_in_both_versions() {
    let mut refusal = busy();
    refusal.code = RefusalCode::Unrecognized(31);
    let frame = ResponseFrame {
        body: Response::Write(WriteAnswer::Refused(refusal.clone())),
        ext: Extensions::default(),
    };
    let bytes = frames::encode_response(2, &frame).unwrap();
    assert_eq!(
        frames::decode_response_frame(&bytes).unwrap(),
        (2, frame.clone())
    );

    let bytes = frames::encode_response(1, &frame).unwrap();
    let (_, decoded) = frames::decode_response_frame(&bytes).unwrap();
    let Response::Write(WriteAnswer::Refused(sent)) = decoded.body else {
        panic!("a refusal stays a refusal in protocol 1: {decoded:?}");
    };
    assert_eq!(sent.code, RefusalCode::BadRequest);
    assert!(sent.detail.contains("code 31"), "{}", sent.detail);
    assert_eq!(sent.retry_after_ms, refusal.retry_after_ms);
    // The code byte is protocol 1's own (BadRequest is its fifth): its release decodes it.
    assert_eq!(RefusalCode::BadRequest.number(), 4);
    // The journal keeps codes as JSON names, as before the enum was opened.
    let json = serde_json::to_string(&WriteAnswer::Refused(busy())).unwrap();
    assert!(json.contains("\"Busy\""), "{json}");
    let back: WriteAnswer = serde_json::from_str(&json).unwrap();
    assert_eq!(back, WriteAnswer::Refused(busy()));
}

/// A settle state from a newer owner (moving a vault's owner will add one) is read whole and
/// decodes as `CallState::Unrecognized`, which settles nothing; the four states every release
/// knows keep their bytes (the fixtures above pin them) and their JSON.
#[test]
fn a_call_state_this_build_does_not_know_is_read_whole_and_settles_nothing() {
    /// What a newer release's `CallState` looks like to bincode: the known four, then a state
    /// whose fields travel as one byte string (the rule for every state numbered 4 or more).
    #[derive(serde::Serialize)]
    #[allow(dead_code)]
    enum NewerCallState {
        Answered(WriteAnswer),
        Running {
            since_ms: u64,
            heartbeat_age_ms: u64,
        },
        NotCarriedOut {
            reason: NotCarriedOutReason,
        },
        Forgotten {
            retention_ms: u64,
        },
        LostWithOwner(#[serde(with = "serde_bytes")] Vec<u8>),
    }
    let fields = codec::encode_body(&(1_700_000_000_000u64, "laptop".to_string())).unwrap();
    // Followed by a field, to show the decoder took exactly the state's bytes.
    let newer = codec::encode_body(&(NewerCallState::LostWithOwner(fields), 77u64)).unwrap();
    let (state, after): (CallState, u64) = codec::decode_body(&newer).unwrap();
    assert_eq!(
        (state, after),
        (CallState::Unrecognized { number: 4 }, 77),
        "an unknown state is skipped whole"
    );

    // A frame carrying one round-trips, and the known states' bytes are the derive's.
    let frame = ResponseFrame {
        body: Response::CallStatus(CallState::Unrecognized { number: 9 }),
        ext: Extensions::default(),
    };
    let bytes = frames::encode_response(2, &frame).unwrap();
    assert_eq!(
        frames::decode_response_frame(&bytes).unwrap(),
        (2, frame.clone())
    );
    // Protocol 1's decoder knows four states: a later one is withheld, not misread there.
    assert!(frames::encode_response(1, &frame).is_err());
    // Under a known state's number an empty byte string would read as that state (2, then 0,
    // is "never arrived"): refused.
    for known in 0..4 {
        assert!(codec::encode_body(&CallState::Unrecognized { number: known }).is_err());
    }
    assert!(
        !CallState::Unrecognized { number: 4 }.is_final(),
        "never kept as settled"
    );
    let running = NewerCallState::Running {
        since_ms: 5,
        heartbeat_age_ms: 6,
    };
    assert_eq!(
        codec::encode_body(&running).unwrap(),
        codec::encode_body(&CallState::Running {
            since_ms: 5,
            heartbeat_age_ms: 6
        })
        .unwrap()
    );
    // A state's declared length is checked like every other (4 GiB here): an error, not an
    // allocation.
    let mut huge = codec::encode_body(&NewerCallState::LostWithOwner(Vec::new())).unwrap();
    huge.truncate(1);
    huge.extend_from_slice(&[0xfc, 0xff, 0xff, 0xff, 0xff]);
    assert!(codec::decode_body::<CallState>(&huge).is_err());

    // The calls table keeps states as JSON, in the derive's form.
    let stored = CallState::NotCarriedOut {
        reason: NotCarriedOutReason::NeverArrived,
    };
    let json = serde_json::to_string(&stored).unwrap();
    assert_eq!(json, r#"{"NotCarriedOut":{"reason":"NeverArrived"}}"#);
    assert_eq!(serde_json::from_str::<CallState>(&json).unwrap(), stored);
    let json =
        serde_json::to_string(&CallState::Answered(WriteAnswer::Done { revision: 3 })).unwrap();
    assert_eq!(json, r#"{"Answered":{"Done":{"revision":3}}}"#);
}
