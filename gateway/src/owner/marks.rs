//! The owner's running marks: the request ids a batch may run, written to a small file before
//! the batch's transaction begins, so that a crash before its commit leaves each of them
//! `not_carried_out: interrupted` (SPEC 7 rule 4) rather than unknown to the journal.
//!
//! Why a file and not `running` rows: the rows took a transaction of their own per batch, whose
//! commit wrote the journal's pages to the WAL only for the execute transaction to write them
//! again, and an `INSERT` then an `UPDATE` per write; a fifth of the owner thread's CPU. The
//! marks are one `pwrite` per batch. Their durability is the rows' was (those commits were not
//! fsynced): they survive the process being killed, since they are in the kernel's page cache
//! when `pwrite` returns, but not a power cut of this machine. A batch's marks are never needed
//! after its commit (or its fence) puts every one of its ids in the journal, so each batch
//! simply overwrites the last one's; marks of ids the journal holds are ignored at recovery.
//!
//! Layout: `FRM1` (4 bytes), payload length (u32 LE), FNV-1a 64 of the payload (u64 LE), then
//! the payload: per mark, caller node id (32), request id (16), vault as u16 LE length + UTF-8
//! (at most 128 bytes).
//! A file whose checksum does not match (a write torn by a power cut) holds no marks.

use std::fs::File;
use std::path::Path;

use ferry_peer::wire::RequestId;
use ferry_ticket::NodeId;
use tracing::warn;

use crate::checksum::fnv1a;
use crate::platform;

const MAGIC: &[u8; 4] = b"FRM1";
const HEADER: usize = 16;
/// The largest payload read back: far more than a batch's marks and the ids a failing store
/// can leave unsettled (the executor stops before its list outgrows this).
pub const MAX_PAYLOAD: usize = 16 * 1024 * 1024;
/// Vault names are at most 128 bytes (`names::VaultName`); a mark of a write naming a longer
/// one (which cannot be a vault here, so its fence is filed under none) keeps `""`, so a mark
/// stays bounded and every mark the file holds decodes.
const MAX_VAULT: usize = 128;

/// One id a batch may have run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub caller: NodeId,
    pub request_id: RequestId,
    /// The vault the write named: its fence is filed under it.
    pub vault: String,
}

impl Mark {
    /// The mark as [`MarkFile::write`] and [`encode_into`] take it.
    pub fn parts(&self) -> (NodeId, RequestId, &str) {
        (self.caller, self.request_id, &self.vault)
    }
}

/// The marks file, with a buffer reused by every batch.
#[derive(Debug)]
pub struct MarkFile {
    file: File,
    buffer: Vec<u8>,
}

impl MarkFile {
    /// Opens (or makes, mode 0600) the file at `path`; returns it and the marks an earlier
    /// process left (empty if it had none, or they were torn).
    pub fn open(path: &Path) -> std::io::Result<(Self, Vec<Mark>)> {
        let file = platform::open_private_in_place(path)?;
        let len = file.metadata()?.len();
        let readable = usize::try_from(len)
            .unwrap_or(usize::MAX)
            .min(HEADER + MAX_PAYLOAD);
        let mut bytes = vec![0u8; readable];
        platform::read_exact_at(&file, &mut bytes, 0)?;
        let left = decode(&bytes).unwrap_or_else(|| {
            // Torn by a power cut (its batch did not commit durably either: it was not
            // fsynced) or damaged by hand. Those ids, if any, are unknown to the journal, so
            // a settle query about one fences it `never_arrived`: still "not carried out".
            if len > 0 {
                warn!(
                    path = %path.display(),
                    bytes = len,
                    "the owner's running marks are torn or damaged; ignored"
                );
            }
            Vec::new()
        });
        Ok((
            Self {
                file,
                buffer: Vec::new(),
            },
            left,
        ))
    }

    /// Writes `marks` over whatever the file held (one `pwrite`; no fsync, see the module).
    pub fn write<'a>(
        &mut self,
        marks: impl IntoIterator<Item = (NodeId, RequestId, &'a str)>,
    ) -> std::io::Result<()> {
        encode_into(&mut self.buffer, marks);
        platform::write_all_at(&self.file, &self.buffer, 0)
    }

    /// Puts the marks on the disk (for ids whose fate only a restart can settle).
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    /// Forgets every mark (after recovery settled them).
    pub fn clear(&mut self) -> std::io::Result<()> {
        self.file.set_len(0)
    }
}

/// The file's bytes for `marks`, in `out` (cleared first).
pub fn encode_into<'a>(
    out: &mut Vec<u8>,
    marks: impl IntoIterator<Item = (NodeId, RequestId, &'a str)>,
) {
    out.clear();
    out.extend_from_slice(&[0u8; HEADER]);
    for (caller, request_id, vault) in marks {
        out.extend_from_slice(caller.as_bytes());
        out.extend_from_slice(request_id.as_bytes());
        let vault = if vault.len() <= MAX_VAULT { vault } else { "" }.as_bytes();
        out.extend_from_slice(&(vault.len() as u16).to_le_bytes());
        out.extend_from_slice(vault);
    }
    let payload_len = (out.len() - HEADER) as u32;
    let checksum = fnv1a(&out[HEADER..]);
    out[..4].copy_from_slice(MAGIC);
    out[4..8].copy_from_slice(&payload_len.to_le_bytes());
    out[8..HEADER].copy_from_slice(&checksum.to_le_bytes());
}

/// The marks in a file's bytes; `None` if they are not a whole, intact record. Bytes after the
/// record (a longer batch's, written before) are ignored.
pub fn decode(bytes: &[u8]) -> Option<Vec<Mark>> {
    if bytes.get(..4)? != MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
    if len > MAX_PAYLOAD {
        return None;
    }
    let checksum = u64::from_le_bytes(bytes.get(8..HEADER)?.try_into().ok()?);
    let mut rest = bytes.get(HEADER..HEADER.checked_add(len)?)?;
    if fnv1a(rest) != checksum {
        return None;
    }
    let mut marks = Vec::new();
    while !rest.is_empty() {
        let (caller, tail) = rest.split_at_checked(32)?;
        let (request_id, tail) = tail.split_at_checked(16)?;
        let (vault_len, tail) = tail.split_at_checked(2)?;
        let vault_len = u16::from_le_bytes(vault_len.try_into().ok()?) as usize;
        if vault_len > MAX_VAULT {
            return None;
        }
        let (vault, tail) = tail.split_at_checked(vault_len)?;
        marks.push(Mark {
            caller: NodeId::from_bytes(caller.try_into().ok()?),
            request_id: RequestId::from_bytes(request_id.try_into().ok()?),
            vault: String::from_utf8(vault.to_vec()).ok()?,
        });
        rest = tail;
    }
    Some(marks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_ticket::NodeKey;

    fn marks() -> Vec<Mark> {
        (0..3u8)
            .map(|n| Mark {
                caller: NodeKey::from_secret_bytes([n + 1; 32]).node_id(),
                request_id: RequestId::generate(),
                vault: ["notes", "", "é-vault"][usize::from(n)].into(),
            })
            .collect()
    }

    fn encoded(marks: &[Mark]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_into(&mut out, marks.iter().map(Mark::parts));
        out
    }

    #[test]
    fn marks_come_back_as_written_and_a_shorter_batch_hides_a_longer_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("owner.marks");
        let all = marks();
        {
            let (mut file, left) = MarkFile::open(&path).unwrap();
            assert!(left.is_empty(), "a new file holds no marks");
            file.write(all.iter().map(Mark::parts)).unwrap();
            file.write(all[..1].iter().map(Mark::parts)).unwrap();
        }
        let (mut file, left) = MarkFile::open(&path).unwrap();
        assert_eq!(
            left,
            all[..1],
            "the last batch's marks, not the longer one's"
        );
        file.clear().unwrap();
        assert!(MarkFile::open(&path).unwrap().1.is_empty());
    }

    #[test]
    fn a_torn_or_damaged_record_holds_no_marks() {
        let all = marks();
        let bytes = encoded(&all);
        assert_eq!(decode(&bytes), Some(all.clone()));
        for cut in [0, 3, HEADER - 1, HEADER + 10, bytes.len() - 1] {
            assert_eq!(decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[HEADER + 40] ^= 1;
        assert_eq!(decode(&flipped), None);
        // A length past the limit is refused before anything is read.
        let mut huge = bytes;
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&huge), None);
        // A vault name no vault here can have is marked as none, so the record still decodes;
        // a record claiming a longer one is refused.
        let long = Mark {
            vault: "é".repeat(100),
            ..all[0].clone()
        };
        let bytes = encoded(std::slice::from_ref(&long));
        assert_eq!(
            decode(&bytes),
            Some(vec![Mark {
                vault: String::new(),
                ..long
            }])
        );
        let mut claims_long = encoded(&all[..1]);
        let at = HEADER + 48;
        claims_long[at..at + 2].copy_from_slice(&200u16.to_le_bytes());
        claims_long.extend_from_slice(&[b'v'; 200 - 5]);
        let len = (claims_long.len() - HEADER) as u32;
        claims_long[4..8].copy_from_slice(&len.to_le_bytes());
        let sum = fnv1a(&claims_long[HEADER..]);
        claims_long[8..HEADER].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(decode(&claims_long), None);
        // An empty batch is a valid record with no marks.
        assert_eq!(decode(&encoded(&[])), Some(Vec::new()));
    }
}
