//! The sent mark: a bound on the request ids this home ever sent to an owner, kept in a small
//! file so a later process knows which ids an earlier one cannot have sent.
//!
//! Why: the send gate (`ferry_core::capacity::send_gate`) answers `busy` without sending only
//! for an id that cannot have left before, since `busy` says "not carried out". Within one
//! process it remembers what it sent. Across a restart it needs this: every id sent from this
//! home is stamped (UUIDv7) at or below the mark, so an id stamped above it was never sent from
//! here, whatever the wall clock did between the two runs (a clock set back would otherwise make
//! an earlier run's ids look new).
//!
//! The mark is raised, with one `pwrite` and an `fdatasync`, before an id stamped above it
//! leaves, and raised a minute past that stamp, so a gateway sending all day writes it about
//! once a minute; an id whose mark cannot be written is not sent. Unlike a slot of the call
//! log, a raised mark is on disk before the id leaves: a power cut must not bring back an older
//! mark that would read as certain. A mark that is missing or torn after an earlier run reads as
//! unknown: the gate then judges no id stamped before the process's start plus the skew the API
//! accepts, and the call log writes that bound as the mark at once, so the next run does not
//! read a lower one as certain.
//!
//! Layout: `FSM1`, four zero bytes, the mark (u64 LE, Unix ms), FNV-1a 64 of the mark (u64 LE).

use std::fs::File;
use std::path::Path;

use crate::platform;

const MAGIC: &[u8; 4] = b"FSM1";
const BYTES: usize = 24;
/// How far past an id's stamp the mark is raised, so it is written about once a minute.
const AHEAD_MS: u64 = 60_000;

/// What an earlier process of this home may have sent, as the file told at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EarlierSends {
    /// No earlier process: a new home.
    None,
    /// Ids stamped up to this (Unix ms), none later.
    UpTo(u64),
    /// An earlier process ran, but its mark is missing or torn.
    Unknown,
}

/// The open mark file and the mark it holds.
#[derive(Debug)]
pub struct SentMark {
    file: File,
    mark_ms: u64,
}

impl SentMark {
    /// Opens (or makes, mode 0600) the file at `path`. `earlier_process_ran` says whether this
    /// home was used before (the call log's slot file was there), for a file that is missing.
    pub fn open(path: &Path, earlier_process_ran: bool) -> std::io::Result<(Self, EarlierSends)> {
        let file = platform::open_private_in_place(path)?;
        let mut bytes = [0u8; BYTES];
        let found = match platform::read_exact_at(&file, &mut bytes, 0) {
            Ok(()) => decode(&bytes),
            Err(_) => None,
        };
        let earlier = match (found, earlier_process_ran) {
            (Some(mark_ms), _) => EarlierSends::UpTo(mark_ms),
            (None, false) => EarlierSends::None,
            (None, true) => EarlierSends::Unknown,
        };
        Ok((
            Self {
                file,
                mark_ms: found.unwrap_or(0),
            },
            earlier,
        ))
    }

    /// The mark: no id stamped above it was ever sent from this home.
    pub fn mark_ms(&self) -> u64 {
        self.mark_ms
    }

    /// Makes the mark cover an id stamped `stamp_ms`; call before that id leaves, and send it
    /// only if this succeeds, so the mark on disk always bounds every id sent. Raised a minute
    /// past the stamp, so a gateway sending all day writes it about once a minute.
    pub fn cover(&mut self, stamp_ms: u64) -> std::io::Result<()> {
        if stamp_ms <= self.mark_ms {
            return Ok(());
        }
        self.raise_to(stamp_ms.saturating_add(AHEAD_MS))
    }

    /// Sets the mark to `mark_ms` if that is higher, durably. A write that fails leaves the file
    /// as it was, or torn (then read as unknown): never lower than what was sent.
    pub fn raise_to(&mut self, mark_ms: u64) -> std::io::Result<()> {
        if mark_ms <= self.mark_ms {
            return Ok(());
        }
        platform::write_all_at(&self.file, &encode(mark_ms), 0)?;
        self.file.sync_data()?;
        self.mark_ms = mark_ms;
        Ok(())
    }
}

/// What the mark file at `path` says, read without opening it for writing (for a command run
/// while no gateway runs): `Ok(None)` if there is no file (this home never sent), `Err` if it
/// is there and cannot be read or is torn (nothing certain).
pub fn read_at(path: &Path) -> std::io::Result<Option<u64>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    let mut bytes = [0u8; BYTES];
    platform::read_exact_at(&file, &mut bytes, 0)?;
    decode(&bytes)
        .map(Some)
        .ok_or_else(|| std::io::Error::other("the sent mark is torn"))
}

fn encode(mark_ms: u64) -> [u8; BYTES] {
    let mut bytes = [0u8; BYTES];
    bytes[..4].copy_from_slice(MAGIC);
    bytes[8..16].copy_from_slice(&mark_ms.to_le_bytes());
    bytes[16..].copy_from_slice(&crate::checksum::fnv1a(&mark_ms.to_le_bytes()).to_le_bytes());
    bytes
}

fn decode(bytes: &[u8; BYTES]) -> Option<u64> {
    if &bytes[..4] != MAGIC {
        return None;
    }
    let mark: [u8; 8] = bytes[8..16].try_into().ok()?;
    let sum: [u8; 8] = bytes[16..].try_into().ok()?;
    (crate::checksum::fnv1a(&mark) == u64::from_le_bytes(sum)).then(|| u64::from_le_bytes(mark))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_home_has_no_earlier_sends_and_a_raised_mark_is_found_by_the_next_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.sent");
        let (mut mark, earlier) = SentMark::open(&path, false).unwrap();
        assert_eq!(earlier, EarlierSends::None);
        mark.cover(1_000).unwrap();
        mark.cover(2_000).unwrap(); // under the mark: nothing written
        drop(mark);
        let (_, earlier) = SentMark::open(&path, true).unwrap();
        assert_eq!(earlier, EarlierSends::UpTo(1_000 + AHEAD_MS));
    }

    #[test]
    fn a_missing_or_torn_mark_after_an_earlier_process_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.sent");
        assert_eq!(
            SentMark::open(&path, true).unwrap().1,
            EarlierSends::Unknown
        );
        let mut torn = encode(5_000);
        torn[10] ^= 1;
        std::fs::write(&path, torn).unwrap();
        assert_eq!(
            SentMark::open(&path, true).unwrap().1,
            EarlierSends::Unknown
        );
        std::fs::write(&path, encode(5_000)).unwrap();
        let (mut mark, earlier) = SentMark::open(&path, true).unwrap();
        assert_eq!(earlier, EarlierSends::UpTo(5_000));
        mark.raise_to(4_000).unwrap(); // lower: kept as it was
        mark.raise_to(9_000).unwrap();
        drop(mark);
        assert_eq!(
            SentMark::open(&path, true).unwrap().1,
            EarlierSends::UpTo(9_000)
        );
    }
}
