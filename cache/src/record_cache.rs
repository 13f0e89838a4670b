//! The record cache: the last answer this gateway got for each `(vault, key)`, bounded by bytes
//! and by entries, least recently used first out.
//!
//! It owns which answers are kept and for how long, not where they came from: the read path
//! decides what to fetch, and tells the cache what it got ([`RecordCache::insert`]) and what
//! became outdated ([`RecordCache::invalidate`]). Stale entries are kept on purpose: they are the
//! `X-Ferry-Stale` fallback of SPEC section 9 when no source answers.

use std::sync::Arc;

use lru::LruCache;

use crate::composite_key::{KeyParts, OwnedKey};

/// Default byte bound of a [`RecordCache`]: 64 MiB (SPEC section 9).
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024 * 1024;

/// Default entry bound of a [`RecordCache`]. With small records the byte bound alone would let
/// hundreds of thousands of entries in; this keeps the LRU's own bookkeeping bounded too.
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;

/// Bytes charged per entry on top of its vault name, key and value.
///
/// An estimate of what an entry really costs beyond its text: the LRU node (the stored key's
/// text pointer and two part ends, the [`CachedRecord`], two list pointers: about 88 bytes on
/// 64-bit), the allocator's rounding of that node and of the key's text, the hash-table slot
/// and control byte, and the `Arc` counts in front of the value. Charging it keeps a flood of
/// tiny or empty records from holding far more memory than `max_bytes` says.
pub const ENTRY_OVERHEAD_BYTES: usize = 192;

/// One cached answer about a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedRecord {
    /// The record's revision, as the source gave it.
    pub revision: u64,
    /// The value; `None` means the source said the record does not exist at this revision.
    pub value: Option<Arc<[u8]>>,
    /// When this answer was fetched (caller's clock, milliseconds).
    pub fetched_at_ms: u64,
    /// Set by an invalidation: the record may have changed since. A stale entry is never a
    /// fresh hit, but it can still be served, marked `X-Ferry-Stale`, when nothing else answers.
    pub stale: bool,
}

impl CachedRecord {
    /// Length of the value in bytes; 0 for a record that does not exist.
    pub fn value_len(&self) -> usize {
        self.value.as_ref().map_or(0, |value| value.len())
    }
}

/// What [`RecordCache::insert`] did with an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertOutcome {
    /// The answer is cached; `evicted` least recently used entries were dropped to make room.
    Stored { evicted: usize },
    /// The cache already holds a higher revision of this record (fresh or stale), so this
    /// answer, from a source that lags behind, was dropped: the cache never rolls back.
    KeptNewer { cached_revision: u64 },
    /// The entry alone would exceed the byte bound, so it is not cached. Any older entry for
    /// the same record was removed, since this answer supersedes it.
    TooLarge {
        entry_bytes: usize,
        max_bytes: usize,
    },
    /// The cache was built with `max_entries == 0` and holds nothing.
    CacheDisabled,
}

/// Counters and sizes, for metrics and the admin view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Entries held, stale ones included.
    pub entries: usize,
    /// Bytes charged for those entries (see [`ENTRY_OVERHEAD_BYTES`]).
    pub bytes: usize,
    /// [`RecordCache::get_fresh`] calls that found a fresh entry.
    pub hits: u64,
    /// [`RecordCache::get_fresh`] calls that found nothing, or only a stale entry.
    pub misses: u64,
    /// Entries dropped to respect a bound (not removals, not replacements).
    pub evictions: u64,
}

/// A byte- and entry-bounded LRU cache of records, keyed by `(vault, key)`.
#[derive(Debug)]
pub struct RecordCache {
    // Unbounded on its own: both bounds are enforced here, because `lru`'s capacity only counts
    // entries.
    entries: LruCache<OwnedKey<2>, CachedRecord>,
    max_bytes: usize,
    max_entries: usize,
    bytes: usize,
    hits: u64,
    misses: u64,
    evictions: u64,
}

impl Default for RecordCache {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES)
    }
}

impl RecordCache {
    /// An empty cache holding at most `max_bytes` (as charged by [`entry_bytes`]) in at most
    /// `max_entries` entries. `max_entries == 0` makes a cache that holds nothing.
    pub fn new(max_bytes: usize, max_entries: usize) -> Self {
        Self {
            entries: LruCache::unbounded(),
            max_bytes,
            max_entries,
            bytes: 0,
            hits: 0,
            misses: 0,
            evictions: 0,
        }
    }

    /// The byte bound this cache was built with.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The entry bound this cache was built with.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// The entry for this record if it is fresh, counted as a hit; otherwise `None`, counted as a
    /// miss. Marks the entry recently used either way: a stale entry someone asks for is about
    /// to be refreshed, or served as the fallback.
    pub fn get_fresh(&mut self, vault: &str, key: &str) -> Option<CachedRecord> {
        match self.entries.get(probe(&[vault, key])) {
            Some(record) if !record.stale => {
                self.hits += 1;
                Some(record.clone())
            }
            _ => {
                self.misses += 1;
                None
            }
        }
    }

    /// The entry for this record, fresh or stale, and marks it recently used.
    ///
    /// For the stale fallback, and for the revision to send the owner so that an unchanged
    /// record costs no body. Not counted in hits or misses: those measure fresh lookups only.
    pub fn get_any(&mut self, vault: &str, key: &str) -> Option<CachedRecord> {
        self.entries.get(probe(&[vault, key])).cloned()
    }

    /// Caches an answer: `value` at `revision` (`None`: the record does not exist there).
    ///
    /// An entry with a lower or equal revision is replaced, and the new one is fresh, so the
    /// owner confirming a stale entry's revision makes it fresh again. An entry with a higher
    /// revision is kept: a late answer from a lagging replica must not roll the cache back.
    /// Least recently used entries are evicted until both bounds hold.
    ///
    /// A write that passes through this gateway should insert its own result when it knows it
    /// (the new revision and value, or `None` for a delete) rather than only invalidate: then a
    /// lagging replica's older answer is refused here instead of being taken as fresh.
    pub fn insert(
        &mut self,
        vault: &str,
        key: &str,
        revision: u64,
        value: Option<Arc<[u8]>>,
        now_ms: u64,
    ) -> InsertOutcome {
        if let Some(cached) = self.entries.peek(probe(&[vault, key])) {
            if cached.revision > revision {
                return InsertOutcome::KeptNewer {
                    cached_revision: cached.revision,
                };
            }
            // From here on the new answer supersedes what is cached for this record. (Only a
            // record found is looked up again: a write's fresh key costs one lookup, not two.)
            self.remove(vault, key);
        }

        if self.max_entries == 0 {
            return InsertOutcome::CacheDisabled;
        }
        let record = CachedRecord {
            revision,
            value,
            fetched_at_ms: now_ms,
            stale: false,
        };
        let owned_key = OwnedKey::new([vault, key]);
        let size = entry_size(&owned_key, &record);
        if size > self.max_bytes {
            return InsertOutcome::TooLarge {
                entry_bytes: size,
                max_bytes: self.max_bytes,
            };
        }

        let mut evicted = 0;
        while self.entries.len() >= self.max_entries
            || self.bytes.saturating_add(size) > self.max_bytes
        {
            let Some((old_key, old_record)) = self.entries.pop_lru() else {
                // Unreachable while the accounting is right: an empty cache has room for an
                // entry that passed the checks above. Stop rather than loop.
                break;
            };
            self.bytes -= entry_size(&old_key, &old_record);
            evicted += 1;
        }
        self.evictions += evicted as u64;
        self.bytes += size;
        self.entries.push(owned_key, record);
        InsertOutcome::Stored { evicted }
    }

    /// Marks this record's entry stale, keeping it for the stale fallback. Returns whether there
    /// was an entry. Does not change its place in the LRU order.
    pub fn invalidate(&mut self, vault: &str, key: &str) -> bool {
        match self.entries.peek_mut(probe(&[vault, key])) {
            Some(record) => {
                record.stale = true;
                true
            }
            None => false,
        }
    }

    /// Marks every entry of `vault` stale; returns how many entries that touched.
    ///
    /// Walks the whole cache: meant for rare events (a replica resync, a vault changing owner),
    /// not for every write.
    pub fn invalidate_vault(&mut self, vault: &str) -> usize {
        let mut touched = 0;
        for (record_key, record) in self.entries.iter_mut() {
            let [entry_vault, _] = record_key.parts();
            if entry_vault == vault {
                record.stale = true;
                touched += 1;
            }
        }
        touched
    }

    /// Drops this record's entry, returning it if there was one.
    pub fn remove(&mut self, vault: &str, key: &str) -> Option<CachedRecord> {
        let (old_key, old_record) = self.entries.pop_entry(probe(&[vault, key]))?;
        self.bytes -= entry_size(&old_key, &old_record);
        Some(old_record)
    }

    /// Sizes and counters.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            entries: self.entries.len(),
            bytes: self.bytes,
            hits: self.hits,
            misses: self.misses,
            evictions: self.evictions,
        }
    }

    /// Number of entries, stale ones included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Bytes the cache charges for an entry: vault name, key and value lengths plus
/// [`ENTRY_OVERHEAD_BYTES`]. Lets a caller see before fetching whether a value could be cached.
pub fn entry_bytes(vault: &str, key: &str, value_len: usize) -> usize {
    vault
        .len()
        .saturating_add(key.len())
        .saturating_add(value_len)
        .saturating_add(ENTRY_OVERHEAD_BYTES)
}

fn entry_size(record_key: &OwnedKey<2>, record: &CachedRecord) -> usize {
    let [vault, key] = record_key.parts();
    entry_bytes(vault, key, record.value_len())
}

/// Views a borrowed `[vault, key]` as the cache's key type, for lookups without allocation.
fn probe<'a>(parts: &'a [&'a str; 2]) -> &'a (dyn KeyParts<2> + 'a) {
    parts
}

#[cfg(test)]
mod tests;
