//! Bytes straight to the owner's QUIC port from a trusted key: a hostile length prefix, a
//! truncated frame, garbage, and a hostile length inside a well-framed body. Each stream is
//! reset, nothing runs, and the owner keeps serving (SPEC 7 rule 1, SPEC 12).

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use ferry_harness::two_with_notes;
use ferry_names::{AppName, VaultName};
use ferry_peer::frames;
use ferry_peer::outcome::{NotCarriedOutReason, RefusalCode};
use ferry_peer::tls::TrustedKeys;
use ferry_peer::transport::{self, PeerEndpoint, TransportTuning, RESET_MALFORMED};
use ferry_peer::wire::{
    CallState, CallStatusRequest, Extensions, Hello, Priority, ProtocolFailure, ProtocolRange,
    ReadAnswer, ReadRequest, ReadVerb, Request, RequestFrame, RequestId, Response, TicketAnswer,
    TicketRequest, WriteAnswer, WriteRequest, WriteVerb,
};
use ferry_peer::{NodeId, NodeKey};
use ferry_ticket::VerbSet;

#[derive(Debug)]
struct OnlyThis(NodeId);

impl TrustedKeys for OnlyThis {
    fn is_trusted(&self, id: &NodeId) -> bool {
        *id == self.0
    }
}

/// A fresh key `a` trusts as `prober`, and `a`'s node id and QUIC address.
fn trusted_prober(a: &ferry_harness::Gateway) -> (NodeKey, NodeId, std::net::SocketAddr) {
    let prober = NodeKey::generate().unwrap();
    let out = a.cli(&["trust", &prober.node_id().to_string(), "--label", "prober"]);
    assert!(out.status.success());
    (prober, a.node_id.parse().unwrap(), a.quic.parse().unwrap())
}

/// A connection to `owner` at `addr` from a fresh endpoint with the key `prober`.
async fn dial_as(
    prober: &NodeKey,
    owner: NodeId,
    addr: std::net::SocketAddr,
) -> (PeerEndpoint, quinn::Connection) {
    dial_speaking(prober, owner, addr, ProtocolRange::THIS_BUILD).await
}

/// [`dial_as`], offering only the protocol versions `protocols`.
async fn dial_speaking(
    prober: &NodeKey,
    owner: NodeId,
    addr: std::net::SocketAddr,
    protocols: ProtocolRange,
) -> (PeerEndpoint, quinn::Connection) {
    let endpoint = PeerEndpoint::bind(
        "127.0.0.1:0".parse().unwrap(),
        prober.clone(),
        Arc::new(OnlyThis(owner)),
        TransportTuning {
            protocols,
            ..TransportTuning::default()
        },
    )
    .unwrap();
    let conn = endpoint
        .dial(addr, owner, Duration::from_secs(5))
        .await
        .unwrap();
    (endpoint, conn)
}

/// Sends `bytes` on a new stream and reports how the owner ended it: `Ok(bytes)` if it
/// answered, `Err(code)` if it reset the stream.
async fn send_raw(conn: &quinn::Connection, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(bytes).await.unwrap();
    let _ = send.finish();
    match tokio::time::timeout(Duration::from_secs(15), recv.read_to_end(1 << 20)).await {
        Err(_) => panic!("the owner neither answered nor reset the stream within 15 s"),
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(err)) => Err(err.to_string()),
    }
}

#[test]
fn malformed_frames_are_reset_and_the_owner_keeps_serving_with_nothing_run() {
    let (a, _b) = two_with_notes();
    let (prober, owner, owner_addr) = trusted_prober(&a);
    let served_before = a.metric("ferry_peer_requests_served_total{kind=\"write\"}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Each protocol version the owner speaks: the newest, and the first (a 0.1.0 caller).
    for protocols in [ProtocolRange::THIS_BUILD, ProtocolRange::FIRST_RELEASES] {
        runtime.block_on(async {
        let (_endpoint, conn) = dial_speaking(&prober, owner, owner_addr, protocols).await;
        let version = transport::protocol_of(&conn).expect("a protocol version");
        assert_eq!(version, protocols.newest);
        let header = version.to_be_bytes();

        let hostile_prefix = [0xff, 0xff, 0xff, 0xff, 0, 1, 2, 3];
        let mut truncated = 100u32.to_be_bytes().to_vec();
        truncated.extend_from_slice(&header);
        truncated.extend_from_slice(&[9, 9, 9]);
        let mut garbage = 40u32.to_be_bytes().to_vec();
        garbage.extend_from_slice(&header);
        garbage.extend((0..38u8).map(|i| i.wrapping_mul(37).wrapping_add(11)));
        // A Hello whose first length claims u64::MAX bytes (varint marker 253 + 8 bytes): the
        // envelope's payload in protocol 2, the label in protocol 1. The decode limit must
        // refuse it instead of allocating.
        let mut hostile_inner = vec![0u8; 4];
        hostile_inner.extend_from_slice(&header);
        hostile_inner.push(0); // the kind: a hello
        hostile_inner.push(253);
        hostile_inner.extend_from_slice(&u64::MAX.to_le_bytes());
        let len = (hostile_inner.len() - 4) as u32;
        hostile_inner[..4].copy_from_slice(&len.to_be_bytes());

        for (what, bytes) in [
            ("a length prefix over the cap", hostile_prefix.to_vec()),
            ("a truncated frame", truncated),
            ("garbage in a well-sized frame", garbage),
            ("a hostile length inside the body", hostile_inner),
        ] {
            let result = send_raw(&conn, &bytes).await;
            let err =
                result.expect_err(&format!("{what}: the owner answered instead of resetting"));
            assert!(
                err.contains(&RESET_MALFORMED.to_string()) || err.contains("reset"),
                "protocol {version}, {what}: expected a reset with code {RESET_MALFORMED}, got {err}"
            );
        }

        // A whole frame in the other version than the connection agreed on: answered, not run.
        let other = if version == 1 { 2 } else { 1 };
        let beat = RequestFrame {
            body: Request::Heartbeat(ferry_peer::wire::Heartbeat { interval_ms: 1000 }),
            ext: Extensions::default(),
        };
        let answer = send_raw(&conn, &frames::encode_request(other, &beat).unwrap())
            .await
            .expect("a frame of the other version is answered");
        let (_, frame) = frames::decode_response_frame(&answer).unwrap();
        assert!(
            matches!(frame.body, Response::Failed(ProtocolFailure::UnsupportedVersion { .. })),
            "protocol {other} on a protocol {version} connection: {:?}",
            frame.body
        );

        // Still serving on the same connection.
        let hello = frames::encode_request(
            version,
            &RequestFrame {
                body: Request::Hello(Hello {
                    label_hint: "prober".into(),
                    owned_vaults: vec![],
                    replicated_vaults: vec![],
                    release: None,
                }),
                ext: Extensions::default(),
            },
        )
        .unwrap();
        let answer = send_raw(&conn, &hello)
            .await
            .expect("a valid hello is answered");
        let (_, frame) = frames::decode_response_frame(&answer).unwrap();
        let Response::Hello(theirs) = frame.body else {
            panic!("expected a hello back, got {:?}", frame.body)
        };
        assert_eq!(theirs.owned_vaults, vec![VaultName::from_static("notes")]);
    });
    }

    assert_eq!(
        a.metric("ferry_peer_requests_served_total{kind=\"write\"}"),
        served_before
    );
    assert_eq!(a.vault_revision("notes"), 0, "nothing ran");
    let (status, _) = a.put("notes", "after", b"ok", &[]);
    assert_eq!(status, 200, "the owner still takes writes");
}

/// The owner process's data segment (`VmData`), in KiB.
fn vm_data_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmData:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Streams open at once, each announcing a frame of the largest size and sending a few bytes.
const GREEDY_STREAMS: usize = 64;

#[test]
fn frames_announced_huge_cost_only_the_bytes_that_arrive() {
    let (a, _b) = two_with_notes();
    let (prober, owner, owner_addr) = trusted_prober(&a);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let before = vm_data_kib(a.pid());
    runtime.block_on(async {
        let (_endpoint, conn) = dial_as(&prober, owner, owner_addr).await;
        let mut held = Vec::new();
        for _ in 0..GREEDY_STREAMS {
            // Bounded: an owner that allowed fewer streams would otherwise hang the test.
            let (mut send, recv) =
                tokio::time::timeout(std::time::Duration::from_secs(10), conn.open_bi())
                    .await
                    .expect("the owner allows this many streams at once")
                    .unwrap();
            let mut bytes = (ferry_peer::codec::MAX_FRAME_LEN as u32)
                .to_be_bytes()
                .to_vec();
            bytes.extend_from_slice(&ferry_peer::wire::PROTOCOL_VERSION.to_be_bytes());
            bytes.extend_from_slice(&[0u8; 100]);
            send.write_all(&bytes).await.unwrap();
            // Not finished: the owner waits for the rest, holding whatever it allocated.
            held.push((send, recv));
        }
        // A heartbeat on a later stream is answered once the door took every stream above.
        let version = transport::protocol_of(&conn).expect("a protocol version");
        let beat = frames::encode_request(
            version,
            &RequestFrame {
                body: Request::Heartbeat(ferry_peer::wire::Heartbeat { interval_ms: 1000 }),
                ext: Extensions::default(),
            },
        )
        .unwrap();
        send_raw(&conn, &beat)
            .await
            .expect("a heartbeat is answered");
        let grown_mib = vm_data_kib(a.pid()).saturating_sub(before) / 1024;
        assert!(
            grown_mib < 256,
            "{GREEDY_STREAMS} streams announcing {} MiB each grew the owner by {grown_mib} MiB",
            ferry_peer::codec::MAX_FRAME_LEN >> 20
        );
        drop(held);
    });
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

/// Sends `bytes` and decodes the answer (a reset fails the test).
async fn answer_to(conn: &quinn::Connection, bytes: &[u8]) -> Response {
    let answer = send_raw(conn, bytes)
        .await
        .unwrap_or_else(|err| panic!("the owner reset the stream ({err}) instead of answering"));
    frames::decode_response_frame(&answer)
        .unwrap_or_else(|err| panic!("the owner's answer does not decode: {err}"))
        .1
        .body
}

/// A write, a read and a ticket request that name an invalid vault or app are refused at the
/// door (`bad_request`, nothing ran), in every protocol version: never a reset stream, which a
/// write's caller could only take as `outcome_unknown`. A copy of the write is refused the
/// same way, and a settle query for its id then finds it never arrived: the id is fenced, the
/// write can never run.
#[test]
fn a_request_naming_an_invalid_vault_or_app_is_refused_at_the_door_and_never_runs() {
    let (a, _b) = two_with_notes();
    let (prober, owner, owner_addr) = trusted_prober(&a);
    let served_before = a.metric("ferry_peer_requests_served_total{kind=\"write\"}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for protocols in [ProtocolRange::THIS_BUILD, ProtocolRange::FIRST_RELEASES] {
        runtime.block_on(async {
            let (_endpoint, conn) = dial_speaking(&prober, owner, owner_addr, protocols).await;
            let version = transport::protocol_of(&conn).expect("a protocol version");
            let frame = |body| RequestFrame {
                body,
                ext: Extensions::default(),
            };
            // A real ticket of this owner's, for `notes`.
            let ask = frame(Request::IssueTicket(TicketRequest {
                app: AppName::from_static("appqq"),
                vault: VaultName::from_static("notes"),
                verbs: VerbSet::all_writes(),
            }));
            let ticket_bytes = frames::encode_request(version, &ask).unwrap();
            let Response::Ticket(TicketAnswer::Issued(ticket)) =
                answer_to(&conn, &ticket_bytes).await
            else {
                panic!("protocol {version}: no ticket for a valid request");
            };
            let refused_as_bad_name = |answer: &Response, what: &str| {
                let refusal = match answer {
                    Response::Write(WriteAnswer::Refused(refusal))
                    | Response::Read(ReadAnswer::Refused(refusal))
                    | Response::Ticket(TicketAnswer::Refused(refusal)) => refusal,
                    other => panic!("protocol {version}, {what}: not refused: {other:?}"),
                };
                assert_eq!(
                    refusal.code,
                    RefusalCode::BadRequest,
                    "protocol {version}, {what}"
                );
                assert!(refusal.at_door, "protocol {version}, {what}");
                refusal.detail.clone()
            };

            let id = RequestId::generate();
            let write = frame(Request::Write(Box::new(WriteRequest {
                request_id: id,
                app: AppName::from_static("appqq"),
                vault: VaultName::from_static("vxyzq"),
                verb: WriteVerb::Put {
                    key: "k".into(),
                    value: b"never".to_vec(),
                    if_revision: None,
                },
                deadline_ms: 5_000,
                priority: Priority::Interactive,
                ticket,
            })));
            let bad_write = replaced(
                &frames::encode_request(version, &write).unwrap(),
                b"vxyzq",
                b"v/yzq",
            );
            for copy in ["a write", "its copy"] {
                let detail = refused_as_bad_name(&answer_to(&conn, &bad_write).await, copy);
                assert!(
                    detail.starts_with("a vault name \"v/yzq\""),
                    "protocol {version}: {detail}"
                );
            }
            let settle = frame(Request::CallStatus(CallStatusRequest { request_id: id }));
            let settled =
                answer_to(&conn, &frames::encode_request(version, &settle).unwrap()).await;
            assert_eq!(
                settled,
                Response::CallStatus(CallState::NotCarriedOut {
                    reason: NotCarriedOutReason::NeverArrived
                }),
                "protocol {version}: the refused write's id"
            );

            let read = frame(Request::Read(ReadRequest {
                app: AppName::from_static("appqq"),
                vault: VaultName::from_static("notes"),
                verb: ReadVerb::Get {
                    key: "k".into(),
                    known_revision: None,
                },
                deadline_ms: 5_000,
            }));
            let bad_read = replaced(
                &frames::encode_request(version, &read).unwrap(),
                b"appqq",
                b".....",
            );
            refused_as_bad_name(&answer_to(&conn, &bad_read).await, "a read");
            let bad_ask = replaced(&ticket_bytes, b"appqq", b"app q");
            let detail = refused_as_bad_name(&answer_to(&conn, &bad_ask).await, "a ticket request");
            assert!(
                detail.starts_with("an app name (X-Ferry-App)"),
                "protocol {version}: {detail}"
            );
        });
    }
    assert_eq!(
        a.metric("ferry_peer_requests_served_total{kind=\"write\"}"),
        served_before,
        "no write reached the owner's executor"
    );
    assert_eq!(a.vault_revision("notes"), 0, "nothing ran");
}
