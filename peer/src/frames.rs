//! Request and answer frames in each protocol version this build speaks: which layout a
//! version uses, in both directions. The bytes themselves are [`codec`]'s.
//!
//! - Protocol 1: the frame is the derived layout of its request or answer enum (frozen in
//!   [`ferry_core::wire::v1`]).
//! - Protocol 2: an envelope of the kind's number, the kind's own bytes (length-prefixed) and
//!   the extensions, so a kind the receiver does not know is read whole and answered, never a
//!   stream reset. Kind numbers are the protocol 1 variant indices and are never reused.
//!
//! A frame is decoded in the version its header names, which must be the connection's
//! ([`crate::transport::read_request`] checks).

use serde::{Deserialize, Serialize};

use crate::codec::{self, DecodeError, EncodeError};
use crate::wire::v1::{self, RequestFrameRef, RequestFrameV1, ResponseFrameRef, ResponseFrameV1};
use crate::wire::{Extensions, Received, Request, RequestFrame, Response, ResponseFrame};

/// Protocol 2's frame body.
#[derive(Debug, Serialize)]
struct EnvelopeRef<'a> {
    kind: u32,
    #[serde(with = "serde_bytes")]
    payload: &'a [u8],
    ext: &'a Extensions,
}

#[derive(Debug, Deserialize)]
struct Envelope {
    kind: u32,
    #[serde(with = "serde_bytes")]
    payload: Vec<u8>,
    ext: Extensions,
}

fn not_in(version: u16, what: &str) -> EncodeError {
    EncodeError::NotInVersion {
        what: what.to_string(),
        version,
    }
}

/// The whole request frame, header included, in protocol `version`.
pub fn encode_request(version: u16, frame: &RequestFrame) -> Result<Vec<u8>, EncodeError> {
    match version {
        1 => {
            let v1 = RequestFrameRef::of(frame).map_err(|err| not_in(1, err.what))?;
            codec::encode_frame(1, &v1)
        }
        2 => {
            let (kind, payload) = match &frame.body {
                Request::Hello(hello) => (0, codec::encode_body(hello)?),
                Request::Write(write) => (1, codec::encode_body(write.as_ref())?),
                Request::Read(read) => (2, codec::encode_body(read)?),
                Request::IssueTicket(ticket) => (3, codec::encode_body(ticket)?),
                Request::CallStatus(status) => (4, codec::encode_body(status)?),
                Request::Heartbeat(beat) => (5, codec::encode_body(beat)?),
                Request::Unknown { .. } => return Err(not_in(2, "a request of an unknown kind")),
                Request::BadName { .. } => {
                    return Err(not_in(2, "a request naming an invalid vault or app"))
                }
            };
            envelope(2, kind, &payload, &frame.ext)
        }
        other => Err(not_in(other, "any frame")),
    }
}

/// The whole answer frame, header included, in protocol `version`.
pub fn encode_response(version: u16, frame: &ResponseFrame) -> Result<Vec<u8>, EncodeError> {
    match version {
        1 => {
            let mapped = v1::with_v1_codes(frame);
            let frame = mapped.as_ref().unwrap_or(frame);
            let v1 = ResponseFrameRef::of(frame).map_err(|err| not_in(1, err.what))?;
            codec::encode_frame(1, &v1)
        }
        2 => {
            let (kind, payload) = match &frame.body {
                Response::Hello(hello) => (0, codec::encode_body(hello)?),
                Response::Write(answer) => (1, codec::encode_body(answer)?),
                Response::Read(answer) => (2, codec::encode_body(answer)?),
                Response::Failed(failure) => (3, codec::encode_body(failure)?),
                Response::Ticket(answer) => (4, codec::encode_body(answer)?),
                Response::CallStatus(state) => (5, codec::encode_body(state)?),
                Response::Heartbeat(beat) => (6, codec::encode_body(beat)?),
                Response::Unknown { .. } => return Err(not_in(2, "an answer of an unknown kind")),
            };
            envelope(2, kind, &payload, &frame.ext)
        }
        other => Err(not_in(other, "any frame")),
    }
}

fn envelope(
    version: u16,
    kind: u32,
    payload: &[u8],
    ext: &Extensions,
) -> Result<Vec<u8>, EncodeError> {
    codec::encode_frame(version, &EnvelopeRef { kind, payload, ext })
}

/// A request frame's body (the bytes after the version) in protocol `version`.
pub fn decode_request(version: u16, body: &[u8]) -> Result<RequestFrame, DecodeError> {
    match version {
        1 => codec::decode_body::<RequestFrameV1>(body).map(RequestFrame::from),
        2 => {
            let envelope: Envelope = codec::decode_body(body)?;
            let payload = envelope.payload.as_slice();
            let body = match envelope.kind {
                0 => Request::Hello(codec::decode_body(payload)?),
                // Names checked once read: an invalid one is a refusal, not a reset stream.
                1 => codec::decode_body::<Received<_>>(payload)?
                    .into_request(|write| Request::Write(Box::new(write))),
                2 => codec::decode_body::<Received<_>>(payload)?.into_request(Request::Read),
                3 => codec::decode_body::<Received<_>>(payload)?.into_request(Request::IssueTicket),
                4 => Request::CallStatus(codec::decode_body(payload)?),
                5 => Request::Heartbeat(codec::decode_body(payload)?),
                kind => Request::Unknown { kind },
            };
            Ok(RequestFrame {
                body,
                ext: envelope.ext,
            })
        }
        other => Err(unspoken(other)),
    }
}

/// An answer frame's body (the bytes after the version) in protocol `version`.
pub fn decode_response(version: u16, body: &[u8]) -> Result<ResponseFrame, DecodeError> {
    match version {
        1 => codec::decode_body::<ResponseFrameV1>(body).map(ResponseFrame::from),
        2 => {
            let envelope: Envelope = codec::decode_body(body)?;
            let payload = envelope.payload.as_slice();
            let body = match envelope.kind {
                0 => Response::Hello(codec::decode_body(payload)?),
                1 => Response::Write(codec::decode_body(payload)?),
                2 => Response::Read(codec::decode_body(payload)?),
                3 => Response::Failed(codec::decode_body(payload)?),
                4 => Response::Ticket(codec::decode_body(payload)?),
                5 => Response::CallStatus(codec::decode_body(payload)?),
                6 => Response::Heartbeat(codec::decode_body(payload)?),
                kind => Response::Unknown { kind },
            };
            Ok(ResponseFrame {
                body,
                ext: envelope.ext,
            })
        }
        other => Err(unspoken(other)),
    }
}

fn unspoken(version: u16) -> DecodeError {
    DecodeError::Malformed {
        reason: format!("protocol {version} has no frame layout in this build"),
    }
}

/// Decodes one complete request frame held in memory (header included), in the version its
/// header names. For tests, fixtures and fuzzers.
pub fn decode_request_frame(bytes: &[u8]) -> Result<(u16, RequestFrame), DecodeError> {
    let (version, body) = codec::split_frame(bytes)?;
    Ok((version, decode_request(version, body)?))
}

/// Decodes one complete answer frame held in memory (header included), in the version its
/// header names. For tests, fixtures and fuzzers.
pub fn decode_response_frame(bytes: &[u8]) -> Result<(u16, ResponseFrame), DecodeError> {
    let (version, body) = codec::split_frame(bytes)?;
    Ok((version, decode_response(version, body)?))
}
