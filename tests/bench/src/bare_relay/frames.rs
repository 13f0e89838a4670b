//! The relay's frames: the least that carries a key, a value and an answer, with no codec.
//!
//! - write: `[u16 key length][key][value]` one way, `[u8 code][i64 revision]` back;
//! - read: `[u16 key length][key]` one way, `[u8 code][value]` back.
//!
//! Decoding never panics and refuses what it cannot read: the relay's own two ends are the only
//! peers, but the rule costs nothing.

/// The size of a write's answer.
pub const WRITE_ANSWER_BYTES: usize = 9;

/// The owner's answer to a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteAnswer {
    Written(i64),
    Busy,
    Failed,
    Malformed,
}

/// The owner's answer to a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadAnswer<'a> {
    Found(&'a [u8]),
    NotFound,
    Malformed,
}

/// A write's request; `None` if the key is longer than a `u16` can say.
pub fn encode_request(key: &str, value: &[u8]) -> Option<Vec<u8>> {
    let len = u16::try_from(key.len()).ok()?;
    let mut frame = Vec::with_capacity(2 + key.len() + value.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(key.as_bytes());
    frame.extend_from_slice(value);
    Some(frame)
}

/// A write's key and value, or a read's key (and an empty value).
pub fn decode_request(frame: &[u8]) -> Option<(&str, &[u8])> {
    let (len, rest) = frame.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_be_bytes(*len));
    let key = rest.get(..len)?;
    let value = rest.get(len..)?;
    Some((std::str::from_utf8(key).ok()?, value))
}

pub fn encode_write_answer(answer: WriteAnswer) -> [u8; WRITE_ANSWER_BYTES] {
    let (code, revision) = match answer {
        WriteAnswer::Written(revision) => (0, revision),
        WriteAnswer::Busy => (1, 0),
        WriteAnswer::Failed => (2, 0),
        WriteAnswer::Malformed => (3, 0),
    };
    let mut bytes = [0u8; WRITE_ANSWER_BYTES];
    bytes[0] = code;
    bytes[1..].copy_from_slice(&i64::to_be_bytes(revision));
    bytes
}

pub fn decode_write_answer(bytes: &[u8]) -> Option<WriteAnswer> {
    let (code, revision) = bytes.split_first()?;
    let revision = i64::from_be_bytes(revision.try_into().ok()?);
    match code {
        0 => Some(WriteAnswer::Written(revision)),
        1 => Some(WriteAnswer::Busy),
        2 => Some(WriteAnswer::Failed),
        3 => Some(WriteAnswer::Malformed),
        _ => None,
    }
}

pub fn encode_read_answer(answer: &ReadAnswer<'_>) -> Vec<u8> {
    match answer {
        ReadAnswer::Found(value) => {
            let mut bytes = Vec::with_capacity(1 + value.len());
            bytes.push(0);
            bytes.extend_from_slice(value);
            bytes
        }
        ReadAnswer::NotFound => vec![1],
        ReadAnswer::Malformed => vec![2],
    }
}

pub fn decode_read_answer(bytes: &[u8]) -> Option<ReadAnswer<'_>> {
    match bytes.split_first()? {
        (0, value) => Some(ReadAnswer::Found(value)),
        (1, []) => Some(ReadAnswer::NotFound),
        (2, []) => Some(ReadAnswer::Malformed),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_frames_round_trip_and_refuse_short_input() {
        let frame = encode_request("k-1", b"value").unwrap();
        assert_eq!(decode_request(&frame), Some(("k-1", &b"value"[..])));
        assert_eq!(decode_request(&frame[..3]), None);
        assert_eq!(decode_request(&[0]), None);
        assert!(encode_request(&"k".repeat(70_000), b"").is_none());
        let read = encode_request("k-2", b"").unwrap();
        assert_eq!(decode_request(&read), Some(("k-2", &b""[..])));
    }

    #[test]
    fn write_answers_round_trip_and_refuse_other_shapes() {
        for answer in [
            WriteAnswer::Written(42),
            WriteAnswer::Busy,
            WriteAnswer::Failed,
            WriteAnswer::Malformed,
        ] {
            assert_eq!(
                decode_write_answer(&encode_write_answer(answer)),
                Some(answer)
            );
        }
        assert_eq!(decode_write_answer(&[0; 4]), None);
        assert_eq!(decode_write_answer(&[9; WRITE_ANSWER_BYTES]), None);
    }

    #[test]
    fn read_answers_round_trip_and_refuse_other_shapes() {
        for answer in [
            ReadAnswer::Found(b"value"),
            ReadAnswer::Found(b""),
            ReadAnswer::NotFound,
            ReadAnswer::Malformed,
        ] {
            assert_eq!(
                decode_read_answer(&encode_read_answer(&answer)),
                Some(answer)
            );
        }
        assert_eq!(decode_read_answer(&[]), None);
        assert_eq!(decode_read_answer(&[1, 0]), None);
        assert_eq!(decode_read_answer(&[7]), None);
    }
}
