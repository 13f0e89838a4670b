//! The call log's slot file: a fixed array of 512-byte slots, one per write in flight, each
//! written with one `pwrite` before the write's first byte leaves and cleared when it ends.
//!
//! Why not a SQLite row: a commit writes and checksums a whole WAL page, about 25 us of CPU
//! per write on this machine, a fifth of what a whole remote write costs the calling gateway;
//! a 512-byte `pwrite` into the page cache costs a few microseconds. Like a commit with
//! `synchronous=NORMAL`, the slot survives the process being killed (it is in the kernel's page
//! cache when `pwrite` returns) but not a power cut of this machine; each slot carries a
//! checksum, so a torn one reads as empty rather than as garbage.
//!
//! At start every occupied slot is a call a crash cut short: it becomes an `unknown` row of the
//! calls table (to be settled with its owner) and the file is cleared.
//!
//! Layout of a slot: `FCL1` (4 bytes; zeros for a free slot), payload length (u32 LE),
//! checksum (FNV-1a 64 of the payload, u64 LE), then the payload: request id (16), owner node
//! id (32), since (u64 LE, Unix ms), and three strings each as u16 LE length + UTF-8: vault,
//! app, owner label.

use std::fs::File;
use std::path::Path;
use std::sync::Mutex;

use ferry_peer::wire::RequestId;
use ferry_ticket::NodeId;

use crate::checksum::fnv1a;
use crate::platform;
use crate::store::calls::{CallRow, RowState};

/// Bytes per slot: the largest record (names at their limits) fits with room to spare.
pub const SLOT_BYTES: usize = 512;
/// Slots in the file: writes in flight at once before the log falls back to SQLite rows.
pub const SLOTS: u32 = 4096;
const MAGIC: &[u8; 4] = b"FCL1";
const HEADER: usize = 16;

/// The slot file and its free slots.
#[derive(Debug)]
pub struct SlotFile {
    file: File,
    free: Mutex<Vec<u32>>,
    /// Whether the file was there before this open: an earlier process of this home ran (and
    /// may have sent writes). After its first start the file always has its full length.
    found: bool,
}

impl SlotFile {
    /// Opens (or makes, mode 0600) the file at `path`; returns it with every slot free, and the
    /// calls its occupied slots held (a crash cut them short).
    pub fn open(path: &Path) -> std::io::Result<(Self, Vec<CallRow>)> {
        let file = platform::open_private_in_place(path)?;
        let mut cut_short = Vec::new();
        let mut slot = vec![0u8; SLOT_BYTES];
        let len = file.metadata()?.len();
        for index in 0..SLOTS {
            let offset = u64::from(index) * SLOT_BYTES as u64;
            if offset + SLOT_BYTES as u64 > len {
                break;
            }
            platform::read_exact_at(&file, &mut slot, offset)?;
            if let Some(row) = decode(&slot) {
                cut_short.push(row);
            }
        }
        Ok((
            Self {
                file,
                free: Mutex::new((0..SLOTS).rev().collect()),
                found: len > 0,
            },
            cut_short,
        ))
    }

    /// Whether an earlier process of this home had made the file (see [`SlotFile::open`]).
    pub fn found_at_open(&self) -> bool {
        self.found
    }

    /// Clears every slot (after their calls were moved to the calls table).
    pub fn clear_all(&self) -> std::io::Result<()> {
        self.file.set_len(0)?;
        self.file.set_len(u64::from(SLOTS) * SLOT_BYTES as u64)
    }

    /// Writes `row` into a free slot; `None` when every slot is taken.
    pub fn take(&self, row: &CallRow) -> std::io::Result<Option<u32>> {
        let Some(index) = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop() else {
            return Ok(None);
        };
        let record = encode(row);
        if let Err(err) =
            platform::write_all_at(&self.file, &record, u64::from(index) * SLOT_BYTES as u64)
        {
            self.release(index);
            return Err(err);
        }
        Ok(Some(index))
    }

    /// Clears slot `index` and makes it free again.
    pub fn clear(&self, index: u32) -> std::io::Result<()> {
        let cleared =
            platform::write_all_at(&self.file, &[0u8; 4], u64::from(index) * SLOT_BYTES as u64);
        // Even if the write failed the slot is reused: its next record overwrites it whole.
        self.release(index);
        cleared
    }

    fn release(&self, index: u32) {
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(index);
    }
}

fn push_text(out: &mut Vec<u8>, text: &str) {
    // Names are at most 128 bytes (checked before a call is recorded); cut anything longer so
    // a record always fits its slot.
    let bytes = &text.as_bytes()[..text.len().min(150)];
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// A slot's bytes for `row` (exactly [`SLOT_BYTES`]).
pub fn encode(row: &CallRow) -> [u8; SLOT_BYTES] {
    let mut payload = Vec::with_capacity(SLOT_BYTES);
    payload.extend_from_slice(&row.request_id.0);
    payload.extend_from_slice(row.owner.as_bytes());
    payload.extend_from_slice(&row.since_ms.to_le_bytes());
    push_text(&mut payload, &row.vault);
    push_text(&mut payload, &row.app);
    push_text(&mut payload, &row.owner_label);
    let mut slot = [0u8; SLOT_BYTES];
    slot[..4].copy_from_slice(MAGIC);
    slot[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    slot[8..16].copy_from_slice(&fnv1a(&payload).to_le_bytes());
    slot[HEADER..HEADER + payload.len()].copy_from_slice(&payload);
    slot
}

/// The call a slot holds; `None` for a free, torn or unreadable slot.
pub fn decode(slot: &[u8]) -> Option<CallRow> {
    if slot.get(..4)? != MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(slot.get(4..8)?.try_into().ok()?) as usize;
    let checksum = u64::from_le_bytes(slot.get(8..16)?.try_into().ok()?);
    let payload = slot.get(HEADER..HEADER.checked_add(len)?)?;
    if fnv1a(payload) != checksum {
        return None;
    }
    let mut rest = payload;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = rest.split_at_checked(n)?;
        rest = tail;
        Some(head)
    };
    let request_id = RequestId(take(16)?.try_into().ok()?);
    let owner = NodeId::from_bytes(take(32)?.try_into().ok()?);
    let since_ms = u64::from_le_bytes(take(8)?.try_into().ok()?);
    let mut text = || -> Option<String> {
        let len = u16::from_le_bytes(take(2)?.try_into().ok()?) as usize;
        String::from_utf8(take(len)?.to_vec()).ok()
    };
    Some(CallRow {
        request_id,
        owner,
        since_ms,
        vault: text()?,
        app: text()?,
        owner_label: text()?,
        state: RowState::Unknown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_ticket::NodeKey;

    fn row() -> CallRow {
        CallRow {
            request_id: RequestId::generate(),
            owner: NodeKey::from_secret_bytes([9; 32]).node_id(),
            owner_label: "studio".into(),
            vault: "notes".into(),
            app: "x".repeat(64),
            state: RowState::InFlight,
            since_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn a_slot_round_trips_and_a_torn_one_reads_as_empty() {
        let row = row();
        let slot = encode(&row);
        assert_eq!(
            decode(&slot),
            Some(CallRow {
                state: RowState::Unknown,
                ..row
            })
        );
        for flip in [0, 5, 20, 100] {
            let mut torn = slot;
            torn[flip] ^= 0x40;
            assert_eq!(decode(&torn), None, "byte {flip} flipped");
        }
        assert_eq!(decode(&[0u8; SLOT_BYTES]), None);
    }

    #[test]
    fn calls_left_in_slots_are_found_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.slots");
        let (slots, found) = SlotFile::open(&path).unwrap();
        assert!(found.is_empty());
        slots.clear_all().unwrap();
        let (left, done) = (row(), row());
        slots.take(&left).unwrap().unwrap();
        let index = slots.take(&done).unwrap().unwrap();
        slots.clear(index).unwrap();
        drop(slots);
        let (slots, found) = SlotFile::open(&path).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].request_id, left.request_id);
        slots.clear_all().unwrap();
        drop(slots);
        assert!(SlotFile::open(&path).unwrap().1.is_empty());
    }

    #[test]
    fn the_file_says_whether_an_earlier_process_made_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.slots");
        let (first, _) = SlotFile::open(&path).unwrap();
        assert!(!first.found_at_open(), "a new home");
        // What every start does once its cut-short calls are moved: the file gets its length.
        first.clear_all().unwrap();
        drop(first);
        let (second, _) = SlotFile::open(&path).unwrap();
        assert!(second.found_at_open(), "an earlier process ran here");
    }
}
