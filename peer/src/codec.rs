//! The one place that turns wire types into bytes and back.
//!
//! Every frame on a Ferry stream is `[u32 BE length][u16 BE protocol version][bincode body]`.
//! The length is checked against a cap *before* any byte of the body is read or allocated, the
//! body is decoded by bincode under a size limit (a hostile length prefix inside the body is then
//! a clean error instead of an 8 TiB allocation), and a body that decodes with bytes left over is
//! refused: two encoders that disagree on a layout must fail loudly, not half-succeed.
//!
//! bincode is pinned at `=2.0.1` (unmaintained; 3.0.0 does not build) and nothing outside this
//! module names it, so replacing it later touches one file.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The largest frame body any peer may send: a 4 MiB value plus room for the request's other
/// fields, with headroom for a raised value limit. Anything longer is refused unread.
pub const MAX_FRAME_LEN: usize = 16 * 1024 * 1024;

/// Bytes before the body: the length prefix and the protocol version.
pub const HEADER_LEN: usize = 6;

/// bincode's configuration: varint integers, and a decode limit equal to the frame cap so no
/// field inside a frame can claim more memory than the frame itself could hold.
fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_FRAME_LEN>()
}

/// What went wrong turning bytes into a frame. Every variant means the peer sent something this
/// gateway will not act on; the stream that carried it is reset and nothing runs.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The length prefix is over the cap; the body was not read.
    #[error("frame of {len} bytes is over the {cap}-byte cap")]
    TooLong { len: usize, cap: usize },
    /// The frame ended before its declared length (or before its header).
    #[error("frame truncated: expected {expected} bytes, got {got}")]
    Truncated { expected: usize, got: usize },
    /// The body is not a valid encoding of the expected type (or claims too much memory).
    #[error("frame body does not decode: {reason}")]
    Malformed { reason: String },
    /// The body decoded but bytes were left over.
    #[error("frame body has {extra} trailing bytes")]
    TrailingBytes { extra: usize },
}

/// Encoding failed: a frame this gateway built is too large to send. A bug or a value over the
/// configured limit that slipped past validation; nothing was sent.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum EncodeError {
    #[error("frame body of {len} bytes is over the {cap}-byte cap; nothing was sent")]
    TooLong { len: usize, cap: usize },
    #[error("frame body could not be encoded: {reason}")]
    Unencodable { reason: String },
    /// The frame holds something the connection's protocol version cannot carry (a bug: such
    /// values are sent only to peers that speak a version that has them).
    #[error("not sent: {what} in protocol {version}")]
    NotInVersion { what: String, version: u16 },
}

/// Encodes `value` alone (no header), under the frame cap: a part of a frame (an envelope's
/// payload) or a value sized as one.
pub fn encode_body<T: Serialize>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let out =
        bincode::serde::encode_to_vec(value, config()).map_err(|err| EncodeError::Unencodable {
            reason: err.to_string(),
        })?;
    if out.len() > MAX_FRAME_LEN {
        return Err(EncodeError::TooLong {
            len: out.len(),
            cap: MAX_FRAME_LEN,
        });
    }
    Ok(out)
}

/// Encodes `body` as a complete frame (header included) for protocol `version`.
pub fn encode_frame<T: Serialize>(version: u16, body: &T) -> Result<Vec<u8>, EncodeError> {
    let mut out = vec![0u8; HEADER_LEN];
    bincode::serde::encode_into_std_write(body, &mut out, config()).map_err(|err| {
        EncodeError::Unencodable {
            reason: err.to_string(),
        }
    })?;
    let body_len = out.len() - 4;
    if body_len > MAX_FRAME_LEN {
        return Err(EncodeError::TooLong {
            len: body_len,
            cap: MAX_FRAME_LEN,
        });
    }
    // body_len <= MAX_FRAME_LEN < u32::MAX, so the cast cannot truncate.
    out[..4].copy_from_slice(&(body_len as u32).to_be_bytes());
    out[4..6].copy_from_slice(&version.to_be_bytes());
    Ok(out)
}

/// Reads the length prefix of a frame: how many bytes follow it (version + body), refusing
/// anything over the cap before a byte of it is read.
pub fn frame_len(prefix: [u8; 4]) -> Result<usize, DecodeError> {
    let len = u32::from_be_bytes(prefix) as usize;
    if len > MAX_FRAME_LEN {
        return Err(DecodeError::TooLong {
            len,
            cap: MAX_FRAME_LEN,
        });
    }
    if len < 2 {
        return Err(DecodeError::Truncated {
            expected: 2,
            got: len,
        });
    }
    Ok(len)
}

/// Splits the bytes after the length prefix into the protocol version and the body.
pub fn split_version(after_prefix: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    match after_prefix {
        [hi, lo, body @ ..] => Ok((u16::from_be_bytes([*hi, *lo]), body)),
        _ => Err(DecodeError::Truncated {
            expected: 2,
            got: after_prefix.len(),
        }),
    }
}

/// Decodes a body (the bytes after the version) as `T`, under the size limit, refusing
/// trailing bytes.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    let (value, used) =
        bincode::serde::decode_from_slice::<T, _>(body, config()).map_err(|err| match err {
            bincode::error::DecodeError::UnexpectedEnd { additional } => DecodeError::Truncated {
                expected: body.len() + additional,
                got: body.len(),
            },
            other => DecodeError::Malformed {
                reason: other.to_string(),
            },
        })?;
    if used != body.len() {
        return Err(DecodeError::TrailingBytes {
            extra: body.len() - used,
        });
    }
    Ok(value)
}

/// Splits one complete frame held in memory (tests, fixtures, fuzzers; streams use
/// [`frame_len`] and [`split_version`]) into its version and body, checking the prefix
/// against the frame's length.
pub fn split_frame(bytes: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    let Some((prefix, rest)) = bytes.split_first_chunk::<4>() else {
        return Err(DecodeError::Truncated {
            expected: 4,
            got: bytes.len(),
        });
    };
    let len = frame_len(*prefix)?;
    if rest.len() < len {
        return Err(DecodeError::Truncated {
            expected: len,
            got: rest.len(),
        });
    }
    if rest.len() > len {
        return Err(DecodeError::TrailingBytes {
            extra: rest.len() - len,
        });
    }
    split_version(rest)
}
