//! The call log's slot file: a fixed array of 512-byte slots, one per write in flight, each
//! written before the write's first byte leaves and cleared when it ends.
//!
//! Why not a SQLite row: a commit writes and checksums a whole WAL page, about 25 us of CPU
//! per write on this machine, a fifth of what a whole remote write costs the calling gateway.
//! A slot is copied into the file mapped in memory ([`danger_mapped`](super::danger_mapped)),
//! which costs tens of nanoseconds; where the file cannot be mapped, a 512-byte `pwrite` does
//! the same for a few microseconds. Either way the bytes are in the kernel's page cache when
//! the write returns: like a commit with `synchronous=NORMAL`, the slot survives the process
//! being killed but not a power cut of this machine. Each slot carries a checksum, so a torn
//! one reads as empty rather than as garbage.
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

use tracing::warn;

use super::danger_mapped::{overwrites_in_place, MappedFile};
use crate::checksum::fnv1a;
use crate::platform;
use crate::store::calls::{CallRow, RowState};

/// Bytes per slot: the largest record (names at their limits) fits with room to spare.
pub const SLOT_BYTES: usize = 512;
/// Slots in the file: writes in flight at once before the log falls back to SQLite rows.
pub const SLOTS: u32 = 4096;
/// The file's length once cleared: every slot.
const FILE_BYTES: u64 = SLOTS as u64 * SLOT_BYTES as u64;
/// Zeros written at a time when the file is cleared.
const ZERO_CHUNK: u64 = 64 * 1024;
const _: () = assert!(
    FILE_BYTES.is_multiple_of(ZERO_CHUNK),
    "the file is cleared in whole chunks"
);
const MAGIC: &[u8; 4] = b"FCL1";
const HEADER: usize = 16;

/// The slot file and its free slots.
#[derive(Debug)]
pub struct SlotFile {
    file: File,
    slots: Mutex<Slots>,
    /// Whether the file was there before this open: an earlier process of this home ran (and
    /// may have sent writes). After its first start the file always has its full length.
    found: bool,
}

#[derive(Debug)]
struct Slots {
    free: Vec<u32>,
    /// The file in memory, from the first [`SlotFile::clear_all`] on (when it has its full
    /// length); `None` before, or where it cannot be mapped: slots are then `pwrite`n.
    mapped: Option<MappedFile>,
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
                slots: Mutex::new(Slots {
                    free: (0..SLOTS).rev().collect(),
                    mapped: None,
                }),
                found: len > 0,
            },
            cut_short,
        ))
    }

    /// Whether an earlier process of this home had made the file (see [`SlotFile::open`]).
    pub fn found_at_open(&self) -> bool {
        self.found
    }

    /// Clears every slot (after their calls were moved to the calls table, before any slot is
    /// taken), and maps the file the first time where that is safe
    /// ([`overwrites_in_place`]).
    ///
    /// A file to be mapped is cleared by writing zeros over it, not by truncating and regrowing
    /// it: a mapped file must keep its length (see [`danger_mapped`](super::danger_mapped)),
    /// and zeros written have their disk blocks, so a later copy into the mapping never needs a
    /// block a full disk cannot give. If the zeros cannot be written (a full disk), or the
    /// filesystem is not one to map, the file is emptied the old way, which needs no blocks,
    /// and slots are `pwrite`n: each then gets its own error (`503 cannot_record`).
    pub(super) fn clear_all(&self) -> std::io::Result<()> {
        let mut slots = self.lock();
        debug_assert_eq!(
            slots.free.len(),
            SLOTS as usize,
            "cleared before any slot is taken"
        );
        if slots.mapped.is_some() {
            return self.write_zeros();
        }
        if overwrites_in_place(&self.file) {
            match self.zero_whole() {
                Ok(()) => {
                    slots.mapped = self.map_whole();
                    return Ok(());
                }
                Err(err) => warn!(
                    %err,
                    "cannot write the call log's slot file whole (a full disk?); writing slots with pwrite"
                ),
            }
        }
        self.file.set_len(0)?;
        self.file.set_len(FILE_BYTES)
    }

    /// The zeroed file mapped, at its full length; `None` (said in the log) if it cannot be.
    fn map_whole(&self) -> Option<MappedFile> {
        match MappedFile::map(&self.file) {
            Ok(mapped) if mapped.len() as u64 == FILE_BYTES => Some(mapped),
            Ok(mapped) => {
                warn!(
                    mapped = mapped.len(),
                    expected = FILE_BYTES,
                    "the call log's slot file mapped at another length than it was written to; writing slots with pwrite"
                );
                None
            }
            Err(err) => {
                warn!(%err, "cannot map the call log's slot file; writing slots with pwrite");
                None
            }
        }
    }

    /// The file at its full length, every byte a written zero.
    fn zero_whole(&self) -> std::io::Result<()> {
        if self.file.metadata()?.len() != FILE_BYTES {
            self.file.set_len(FILE_BYTES)?;
        }
        self.write_zeros()
    }

    fn write_zeros(&self) -> std::io::Result<()> {
        let zeros = vec![0u8; ZERO_CHUNK as usize];
        for chunk in 0..FILE_BYTES / ZERO_CHUNK {
            platform::write_all_at(&self.file, &zeros, chunk * ZERO_CHUNK)?;
        }
        Ok(())
    }

    /// Whether slots are copied into the mapped file (else `pwrite`n).
    #[cfg(test)]
    fn is_mapped(&self) -> bool {
        self.lock().mapped.is_some()
    }

    /// Writes `row` into a free slot; `None` when every slot is taken.
    pub fn take(&self, row: &CallRow) -> std::io::Result<Option<u32>> {
        let Some(index) = self.lock().free.pop() else {
            return Ok(None);
        };
        if let Err(err) = self.write_slot(index, &encode(row)) {
            self.release(index);
            return Err(err);
        }
        Ok(Some(index))
    }

    /// Clears slot `index` and makes it free again.
    pub fn clear(&self, index: u32) -> std::io::Result<()> {
        let cleared = self.write_slot(index, &[0u8; 4]);
        // Even if the write failed the slot is reused: its next record overwrites it whole.
        self.release(index);
        cleared
    }

    /// `bytes` at the start of slot `index`: copied into the mapping, or `pwrite`n.
    fn write_slot(&self, index: u32, bytes: &[u8]) -> std::io::Result<()> {
        let offset = index as usize * SLOT_BYTES;
        if let Some(mapped) = self.lock().mapped.as_mut() {
            return mapped
                .write_at(offset, bytes)
                .map_err(std::io::Error::other);
        }
        platform::write_all_at(&self.file, bytes, offset as u64)
    }

    fn release(&self, index: u32) {
        self.lock().free.push(index);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
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
    payload.extend_from_slice(row.request_id.as_bytes());
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
    let request_id = RequestId::from_bytes(take(16)?.try_into().ok()?);
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
        // Checked as they are read back, as a row of the calls table is: a slot whose names
        // do not pass is damaged, as one that does not decode.
        vault: text()?.try_into().ok()?,
        app: text()?.try_into().ok()?,
        owner_label: text()?.try_into().ok()?,
        state: RowState::Unknown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{AppName, Label, VaultName};
    use ferry_ticket::NodeKey;

    fn row() -> CallRow {
        CallRow {
            request_id: RequestId::generate(),
            owner: NodeKey::from_secret_bytes([9; 32]).node_id(),
            owner_label: Label::from_static("studio"),
            vault: VaultName::from_static("notes"),
            app: AppName::try_from("x".repeat(64)).unwrap(),
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

    /// Takes two slots and clears one, then opens the file again: the other is found there.
    /// Returns the file opened again and the call left in it.
    fn leave_one_and_reopen(slots: SlotFile, path: &Path) -> (SlotFile, CallRow) {
        let (left, done) = (row(), row());
        slots.take(&left).unwrap().unwrap();
        let index = slots.take(&done).unwrap().unwrap();
        slots.clear(index).unwrap();
        drop(slots);
        let (slots, found) = SlotFile::open(path).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].request_id, left.request_id);
        (slots, left)
    }

    #[test]
    fn calls_left_in_slots_are_found_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.slots");
        let (slots, found) = SlotFile::open(&path).unwrap();
        assert!(found.is_empty());
        slots.clear_all().unwrap();
        assert_eq!(
            slots.is_mapped(),
            overwrites_in_place(&slots.file),
            "a cleared file is mapped where its filesystem overwrites in place"
        );
        let (slots, _) = leave_one_and_reopen(slots, &path);
        slots.clear_all().unwrap();
        drop(slots);
        assert!(SlotFile::open(&path).unwrap().1.is_empty());
    }

    #[test]
    fn slots_written_before_the_file_is_mapped_are_pwritten_and_found_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.slots");
        let (slots, _) = SlotFile::open(&path).unwrap();
        assert!(!slots.is_mapped());
        let (slots, _) = leave_one_and_reopen(slots, &path);
        // Clearing a file longer than the slots' (garbage appended) gives it their length.
        platform::write_all_at(&slots.file, &[7u8; 10], FILE_BYTES + 100).unwrap();
        slots.clear_all().unwrap();
        let mapped = slots.is_mapped();
        assert_eq!(mapped, overwrites_in_place(&slots.file));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), FILE_BYTES);
        // A second clear keeps the mapping (the file is not truncated under it).
        slots.clear_all().unwrap();
        assert_eq!(slots.is_mapped(), mapped);
        drop(slots);
        assert!(SlotFile::open(&path).unwrap().1.is_empty());
    }

    #[test]
    fn every_slot_can_be_taken_through_the_mapping_and_the_last_one_is_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.slots");
        let (slots, _) = SlotFile::open(&path).unwrap();
        slots.clear_all().unwrap();
        let rows: Vec<CallRow> = (0..SLOTS).map(|_| row()).collect();
        for row in &rows {
            slots.take(row).unwrap().unwrap();
        }
        assert_eq!(slots.take(&row()).unwrap(), None, "every slot is taken");
        drop(slots);
        let (_, found) = SlotFile::open(&path).unwrap();
        assert_eq!(found.len(), SLOTS as usize);
        let mut ids: Vec<_> = found.iter().map(|row| row.request_id).collect();
        let mut sent: Vec<_> = rows.iter().map(|row| row.request_id).collect();
        ids.sort();
        sent.sort();
        assert_eq!(ids, sent);
    }

    /// The child's half of the next test: takes a slot through the mapping, then dies at once
    /// (`exit`: no destructor runs, so nothing is unmapped or flushed by this process).
    fn take_a_slot_and_die(path: &Path) -> ! {
        let (slots, _) = SlotFile::open(path).unwrap();
        slots.clear_all().unwrap();
        // Where the file is not mapped (a filesystem that does not overwrite in place) the
        // slot is `pwrite`n, which must survive the same death.
        assert_eq!(slots.is_mapped(), overwrites_in_place(&slots.file));
        let mut row = row();
        row.request_id = RequestId::from_bytes([0x5a; 16]);
        slots.take(&row).unwrap().unwrap();
        std::process::exit(3);
    }

    #[test]
    fn a_slot_copied_into_the_mapping_outlives_a_process_that_dies_right_after() {
        const CHILD: &str = "FERRY_TEST_SLOT_CHILD";
        if let Some(path) = std::env::var_os(CHILD) {
            take_a_slot_and_die(Path::new(&path));
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.slots");
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "call_log::slots::tests::a_slot_copied_into_the_mapping_outlives_a_process_that_dies_right_after",
                "--nocapture",
            ])
            .env(CHILD, &path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(
            status.code(),
            Some(3),
            "the child took its slot and died: {status:?}"
        );
        let (_, found) = SlotFile::open(&path).unwrap();
        assert_eq!(
            found.iter().map(|row| row.request_id).collect::<Vec<_>>(),
            vec![RequestId::from_bytes([0x5a; 16])],
            "the slot the dead process took is there for the next start"
        );
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
