//! A file mapped into this process's memory, shared, written by copying bytes into it: the
//! only `unsafe` code in Ferry, kept to one block whose invariant is proved below.
//!
//! Why: the call log writes a slot before each write leaves and clears it when the write ends.
//! As two `pwrite`s that cost 2-4 us of the calling gateway's CPU per write in the
//! benchmark (and 7 us on this machine's ext4 in a tight loop: each `pwrite` dirties the inode's
//! times and joins the filesystem's journal); as copies into a shared mapping they cost tens of
//! nanoseconds (`docs/history/performance-log.md`, "The call log's slots in mapped memory").
//!
//! A copy into a shared mapping lands in the kernel's page cache, the same pages `pwrite`
//! writes: it survives this process being killed, and is written to the disk later, as a
//! `pwrite` would be. Neither survives a power cut before that; the call log never claimed so.
//!
//! **The danger**, and why it is named so: if another process shrinks the file while it is
//! mapped, the next copy into the cut part kills this process with `SIGBUS`; so does a page the
//! filesystem cannot give back or give room to. The file is this gateway's own (mode 0600, in
//! its home), and a gateway killed there is the crash the call log exists for: the next start
//! settles every write whose slot it finds, and a write whose slot was cut away is still
//! settled when its app asks by its id (the gateway then asks every owner).
//!
//! So a file is mapped only where a copy into it can need nothing from the disk
//! ([`overwrites_in_place`]): on Linux, on a filesystem that overwrites a written page where it
//! is (ext4, XFS, tmpfs), after every page was written once. A copy-on-write filesystem
//! (btrfs, ZFS, bcachefs) needs new room for every overwrite, so a full disk would kill the
//! gateway where a `pwrite` refuses one write (`503 cannot_record`, nothing sent); and Windows
//! documents no coherence between a mapped view and `ReadFile` of the same file, which the next
//! start reads the slots with. Everywhere else the slot file `pwrite`s.

use std::fs::File;

use memmap2::MmapRaw;

/// Whether `file` is on a filesystem where a copy into an already written page of its mapping
/// needs no new room on the disk and is read back by a plain read at the next start (see the
/// module docs): ext4 (and ext2/3), XFS and tmpfs, on Linux. Anything else, or a filesystem
/// that cannot be asked, is no.
pub fn overwrites_in_place(file: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        const EXT4: u64 = 0xEF53;
        const XFS: u64 = 0x5846_5342;
        const TMPFS: u64 = 0x0102_1994;
        match rustix::fs::fstatfs(file) {
            // `f_type` is a signed word on some targets; the magic numbers are all positive.
            Ok(fs) => matches!(fs.f_type as u64, EXT4 | XFS | TMPFS),
            Err(_) => false,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        false
    }
}

/// A whole file mapped shared and writable, of the length it had when mapped.
#[derive(Debug)]
pub struct MappedFile {
    map: MmapRaw,
}

/// Why bytes were not copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{len} bytes at offset {offset} do not fit the {mapped}-byte mapping")]
pub struct OutOfBounds {
    pub offset: usize,
    pub len: usize,
    pub mapped: usize,
}

impl MappedFile {
    /// Maps all of `file` (opened for reading and writing). Its length must not change while
    /// mapped (see the module docs).
    pub fn map(file: &File) -> std::io::Result<Self> {
        Ok(Self {
            map: MmapRaw::map_raw(file)?,
        })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Copies `bytes` into the file at `offset`.
    pub fn write_at(&mut self, offset: usize, bytes: &[u8]) -> Result<(), OutOfBounds> {
        let out_of_bounds = OutOfBounds {
            offset,
            len: bytes.len(),
            mapped: self.map.len(),
        };
        let end = offset.checked_add(bytes.len()).ok_or(out_of_bounds)?;
        if end > self.map.len() {
            return Err(out_of_bounds);
        }
        // SAFETY: the destination `offset..end` lies inside the mapping (checked just above),
        // which lives as long as `self.map`, borrowed here. This process never makes a
        // reference into the mapping (this type hands out none), so the source slice cannot
        // overlap it and no Rust reference aliases the bytes written; and `&mut self` means no
        // other thread copies through this mapping meanwhile. Another mapping of the same file
        // (another process, or a second `SlotFile` of one home in this process, which only a
        // test makes: one gateway runs per home) writes the file's bytes, never this
        // process's memory outside the mapping; at worst two writers tear one slot, which its
        // checksum reads as empty.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.map.as_mut_ptr().add(offset),
                bytes.len(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// tmpfs overwrites in place; where this machine has one at /dev/shm, it is recognised.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_on_tmpfs_is_one_to_map() {
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            eprintln!("SKIPPED: no /dev/shm to make a file on tmpfs in");
            return;
        };
        let file = std::fs::File::create(dir.path().join("f")).unwrap();
        assert!(overwrites_in_place(&file));
    }

    #[test]
    fn copies_land_in_the_file_and_out_of_bounds_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mapped");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.write_all(&[0u8; 4096]).unwrap();
        let mut mapped = MappedFile::map(&file).unwrap();
        assert_eq!(mapped.len(), 4096);
        mapped.write_at(100, b"ferry").unwrap();
        mapped.write_at(4091, b"edge!").unwrap();
        for (offset, len) in [(4092, 5), (4096, 1), (usize::MAX, 2)] {
            assert_eq!(
                mapped.write_at(offset, &vec![1; len]),
                Err(OutOfBounds {
                    offset,
                    len,
                    mapped: 4096
                })
            );
        }
        // Read back through the file, not the mapping: the page cache is the same.
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(&on_disk[100..105], b"ferry");
        assert_eq!(&on_disk[4091..], b"edge!");
        assert_eq!(on_disk.iter().filter(|&&b| b != 0).count(), 10);
    }
}
