use super::*;
use proptest::prelude::*;

fn bytes(len: usize) -> Option<Arc<[u8]>> {
    Some(Arc::from(vec![7u8; len]))
}

/// Room for exactly `count` entries of `value_len`-byte values under vault "v" and a one-byte key.
fn room_for(count: usize, value_len: usize) -> usize {
    count * entry_bytes("v", "k", value_len)
}

fn bytes_recomputed(cache: &RecordCache) -> usize {
    cache
        .entries
        .iter()
        .map(|(record_key, record)| entry_size(record_key, record))
        .sum()
}

#[test]
fn second_get_is_a_hit() {
    let mut cache = RecordCache::default();
    assert_eq!(cache.get_fresh("notes", "todo"), None);
    cache.insert("notes", "todo", 3, bytes(5), 1_000);

    let record = cache.get_fresh("notes", "todo");
    assert_eq!(
        record,
        Some(CachedRecord {
            revision: 3,
            value: bytes(5),
            fetched_at_ms: 1_000,
            stale: false,
        })
    );
    assert!(cache.get_fresh("notes", "todo").is_some());
    let stats = cache.stats();
    assert_eq!((stats.hits, stats.misses), (2, 1));
}

#[test]
fn records_are_keyed_by_vault_and_key() {
    let mut cache = RecordCache::default();
    cache.insert("notes", "todo", 3, bytes(1), 0);
    assert_eq!(cache.get_fresh("photos", "todo"), None);
    assert_eq!(cache.get_fresh("notes", "done"), None);
}

#[test]
fn a_record_that_does_not_exist_is_cached_too() {
    let mut cache = RecordCache::default();
    cache.insert("notes", "gone", 9, None, 0);
    let record = cache.get_fresh("notes", "gone");
    assert_eq!(
        record.map(|record| (record.revision, record.value)),
        Some((9, None))
    );
}

#[test]
fn insert_of_lower_revision_is_ignored() {
    let mut cache = RecordCache::default();
    cache.insert("notes", "todo", 5, bytes(5), 100);
    let outcome = cache.insert("notes", "todo", 4, bytes(4), 200);
    assert_eq!(outcome, InsertOutcome::KeptNewer { cached_revision: 5 });
    let record = cache.get_fresh("notes", "todo");
    assert_eq!(
        record.map(|record| (record.revision, record.value_len(), record.fetched_at_ms)),
        Some((5, 5, 100))
    );
}

#[test]
fn insert_of_same_or_higher_revision_replaces() {
    let mut cache = RecordCache::default();
    cache.insert("notes", "todo", 5, bytes(5), 100);
    assert_eq!(
        cache.insert("notes", "todo", 5, bytes(5), 200),
        InsertOutcome::Stored { evicted: 0 }
    );
    assert_eq!(
        cache.get_any("notes", "todo").map(|r| r.fetched_at_ms),
        Some(200)
    );

    cache.insert("notes", "todo", 6, None, 300);
    let record = cache.get_any("notes", "todo");
    assert_eq!(record.map(|r| (r.revision, r.value)), Some((6, None)));
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.stats().bytes, entry_bytes("notes", "todo", 0));
}

#[test]
fn invalidate_keeps_the_entry_for_get_any_but_not_get_fresh() {
    let mut cache = RecordCache::default();
    cache.insert("notes", "todo", 5, bytes(5), 100);
    assert!(cache.invalidate("notes", "todo"));

    assert_eq!(cache.get_fresh("notes", "todo"), None);
    let record = cache.get_any("notes", "todo");
    assert_eq!(record.map(|r| (r.revision, r.stale)), Some((5, true)));
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.stats().misses, 1);
}

#[test]
fn invalidate_of_an_absent_record_says_so() {
    let mut cache = RecordCache::default();
    assert!(!cache.invalidate("notes", "todo"));
}

#[test]
fn owner_confirming_a_stale_revision_makes_it_fresh_again() {
    let mut cache = RecordCache::default();
    cache.insert("notes", "todo", 5, bytes(5), 100);
    cache.invalidate("notes", "todo");
    cache.insert("notes", "todo", 5, bytes(5), 200);
    assert_eq!(
        cache.get_fresh("notes", "todo").map(|r| r.fetched_at_ms),
        Some(200)
    );
}

#[test]
fn a_lower_revision_does_not_replace_a_stale_entry() {
    let mut cache = RecordCache::default();
    cache.insert("notes", "todo", 5, bytes(5), 100);
    cache.invalidate("notes", "todo");
    assert_eq!(
        cache.insert("notes", "todo", 4, bytes(4), 200),
        InsertOutcome::KeptNewer { cached_revision: 5 }
    );
    assert_eq!(cache.get_fresh("notes", "todo"), None);
}

#[test]
fn invalidate_vault_marks_only_that_vault() {
    let mut cache = RecordCache::default();
    cache.insert("notes", "a", 1, bytes(1), 0);
    cache.insert("notes", "b", 2, bytes(1), 0);
    cache.insert("photos", "a", 3, bytes(1), 0);

    assert_eq!(cache.invalidate_vault("notes"), 2);
    assert_eq!(cache.get_fresh("notes", "a"), None);
    assert_eq!(cache.get_fresh("notes", "b"), None);
    assert!(cache.get_fresh("photos", "a").is_some());
    assert_eq!(cache.len(), 3);
}

#[test]
fn remove_drops_the_entry_and_its_bytes() {
    let mut cache = RecordCache::default();
    cache.insert("notes", "a", 1, bytes(10), 0);
    cache.insert("notes", "b", 1, bytes(20), 0);
    let removed = cache.remove("notes", "a");
    assert_eq!(removed.map(|r| r.value_len()), Some(10));
    assert_eq!(cache.get_any("notes", "a"), None);
    assert_eq!(cache.remove("notes", "a"), None);
    assert_eq!(cache.stats().bytes, entry_bytes("notes", "b", 20));
}

#[test]
fn oversized_value_is_not_cached() {
    let max_bytes = room_for(1, 100);
    let mut cache = RecordCache::new(max_bytes, 10);
    cache.insert("v", "small", 1, bytes(10), 0);

    let outcome = cache.insert("v", "k", 1, bytes(101), 0);
    assert_eq!(
        outcome,
        InsertOutcome::TooLarge {
            entry_bytes: max_bytes + 1,
            max_bytes,
        }
    );
    assert_eq!(cache.get_any("v", "k"), None);
    // Nothing was evicted for an entry that could never fit.
    assert!(cache.get_any("v", "small").is_some());
    assert_eq!(cache.stats().evictions, 0);
}

#[test]
fn oversized_newer_value_removes_the_older_entry() {
    let mut cache = RecordCache::new(room_for(1, 100), 10);
    cache.insert("v", "k", 1, bytes(100), 0);
    let outcome = cache.insert("v", "k", 2, bytes(101), 0);
    assert!(matches!(outcome, InsertOutcome::TooLarge { .. }));
    // Revision 1 is superseded: serving it as fresh would be wrong.
    assert_eq!(cache.get_any("v", "k"), None);
    assert_eq!(cache.stats().bytes, 0);
}

#[test]
fn a_value_that_exactly_fits_is_cached() {
    let mut cache = RecordCache::new(room_for(1, 100), 10);
    assert_eq!(
        cache.insert("v", "k", 1, bytes(100), 0),
        InsertOutcome::Stored { evicted: 0 }
    );
    assert_eq!(cache.stats().bytes, cache.max_bytes());
}

#[test]
fn eviction_order_is_lru_by_entries() {
    let mut cache = RecordCache::new(DEFAULT_MAX_BYTES, 3);
    cache.insert("v", "a", 1, bytes(1), 0);
    cache.insert("v", "b", 1, bytes(1), 0);
    cache.insert("v", "c", 1, bytes(1), 0);
    // Using "a" makes "b" the least recently used.
    assert!(cache.get_fresh("v", "a").is_some());

    assert_eq!(
        cache.insert("v", "d", 1, bytes(1), 0),
        InsertOutcome::Stored { evicted: 1 }
    );
    assert_eq!(cache.get_any("v", "b"), None);
    for key in ["a", "c", "d"] {
        assert!(cache.get_any("v", key).is_some(), "{key} should be kept");
    }
    assert_eq!(cache.stats().evictions, 1);
}

#[test]
fn get_any_also_counts_as_use() {
    let mut cache = RecordCache::new(DEFAULT_MAX_BYTES, 2);
    cache.insert("v", "a", 1, bytes(1), 0);
    cache.insert("v", "b", 1, bytes(1), 0);
    cache.invalidate("v", "a");
    assert!(cache.get_any("v", "a").is_some());
    cache.insert("v", "c", 1, bytes(1), 0);
    assert!(cache.get_any("v", "a").is_some());
    assert_eq!(cache.get_any("v", "b"), None);
}

#[test]
fn byte_bound_evicts_as_many_lru_entries_as_needed() {
    let mut cache = RecordCache::new(room_for(3, 100), 100);
    cache.insert("v", "a", 1, bytes(100), 0);
    cache.insert("v", "b", 1, bytes(100), 0);
    cache.insert("v", "c", 1, bytes(100), 0);

    // An entry charged exactly the room of two: evicting "a" alone is not enough, evicting "a"
    // and "b" is.
    let big = 2 * entry_bytes("v", "k", 100) - entry_bytes("v", "d", 0);
    assert_eq!(
        cache.insert("v", "d", 1, bytes(big), 0),
        InsertOutcome::Stored { evicted: 2 }
    );
    assert_eq!(cache.get_any("v", "a"), None);
    assert_eq!(cache.get_any("v", "b"), None);
    assert!(cache.get_any("v", "c").is_some());
    assert!(cache.stats().bytes <= cache.max_bytes());
    assert_eq!(cache.stats().bytes, bytes_recomputed(&cache));
}

#[test]
fn zero_entries_disables_the_cache() {
    let mut cache = RecordCache::new(DEFAULT_MAX_BYTES, 0);
    assert_eq!(
        cache.insert("v", "k", 1, bytes(1), 0),
        InsertOutcome::CacheDisabled
    );
    assert!(cache.is_empty());
}

#[test]
fn stats_report_sizes() {
    let mut cache = RecordCache::default();
    cache.insert("notes", "a", 1, bytes(10), 0);
    cache.insert("notes", "bb", 1, None, 0);
    let stats = cache.stats();
    assert_eq!(stats.entries, 2);
    assert_eq!(
        stats.bytes,
        (5 + 1 + 10 + ENTRY_OVERHEAD_BYTES) + (5 + 2 + ENTRY_OVERHEAD_BYTES)
    );
}

#[test]
fn overhead_constant_covers_the_in_memory_entry() {
    // The LRU node holds the key, the record and two list pointers; the rest of the constant is
    // allocator and hash-table slack. If the record grows, revisit ENTRY_OVERHEAD_BYTES.
    let node = std::mem::size_of::<OwnedKey<2>>()
        + std::mem::size_of::<CachedRecord>()
        + 2 * std::mem::size_of::<usize>();
    let slack = 64;
    assert!(node + slack <= ENTRY_OVERHEAD_BYTES, "node is {node} bytes");
}

#[derive(Debug, Clone)]
enum Op {
    Insert {
        vault: usize,
        key: usize,
        revision: u64,
        value_len: Option<usize>,
        now_ms: u64,
    },
    GetFresh {
        vault: usize,
        key: usize,
    },
    GetAny {
        vault: usize,
        key: usize,
    },
    Invalidate {
        vault: usize,
        key: usize,
    },
    InvalidateVault {
        vault: usize,
    },
    Remove {
        vault: usize,
        key: usize,
    },
}

// Names of different lengths, so the byte accounting sees more than the values.
const VAULTS: [&str; 3] = ["a", "notes", "photos-archive"];
const KEYS: [&str; 6] = ["k", "key", "todo/today", "x", "a-much-longer-key", "é"];

fn op() -> impl Strategy<Value = Op> {
    let vault = 0..VAULTS.len();
    let key = 0..KEYS.len();
    prop_oneof![
        4 => (vault.clone(), key.clone(), 0..12u64, proptest::option::weighted(0.9, 0..1_500usize), 0..10_000u64)
            .prop_map(|(vault, key, revision, value_len, now_ms)| Op::Insert { vault, key, revision, value_len, now_ms }),
        2 => (vault.clone(), key.clone()).prop_map(|(vault, key)| Op::GetFresh { vault, key }),
        1 => (vault.clone(), key.clone()).prop_map(|(vault, key)| Op::GetAny { vault, key }),
        1 => (vault.clone(), key.clone()).prop_map(|(vault, key)| Op::Invalidate { vault, key }),
        1 => vault.clone().prop_map(|vault| Op::InvalidateVault { vault }),
        1 => (vault, key).prop_map(|(vault, key)| Op::Remove { vault, key }),
    ]
}

proptest! {
    #[test]
    fn bounds_and_byte_accounting_hold_after_every_step(
        max_bytes in 0..6_000usize,
        max_entries in 0..8usize,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let mut cache = RecordCache::new(max_bytes, max_entries);
        let mut fresh_lookups = 0u64;
        for op in ops {
            match op {
                Op::Insert { vault, key, revision, value_len, now_ms } => {
                    let (vault, key) = (VAULTS[vault], KEYS[key]);
                    let before = cache.entries.peek(probe(&[vault, key])).map(|r| r.revision);
                    let outcome = cache.insert(vault, key, revision, value_len.and_then(bytes), now_ms);
                    let after = cache.entries.peek(probe(&[vault, key])).cloned();
                    match outcome {
                        InsertOutcome::Stored { .. } => {
                            let after = after.map(|r| (r.revision, r.value_len(), r.stale));
                            prop_assert_eq!(after, Some((revision, value_len.unwrap_or(0), false)));
                        }
                        InsertOutcome::KeptNewer { cached_revision } => {
                            prop_assert!(cached_revision > revision);
                            prop_assert_eq!(before, Some(cached_revision));
                            prop_assert_eq!(after.map(|r| r.revision), Some(cached_revision));
                        }
                        InsertOutcome::TooLarge { entry_bytes: size, .. } => {
                            prop_assert!(size > max_bytes);
                            prop_assert_eq!(after, None);
                        }
                        InsertOutcome::CacheDisabled => prop_assert_eq!(max_entries, 0),
                    }
                }
                Op::GetFresh { vault, key } => {
                    fresh_lookups += 1;
                    if let Some(record) = cache.get_fresh(VAULTS[vault], KEYS[key]) {
                        prop_assert!(!record.stale);
                    }
                }
                Op::GetAny { vault, key } => {
                    cache.get_any(VAULTS[vault], KEYS[key]);
                }
                Op::Invalidate { vault, key } => {
                    let present = cache.invalidate(VAULTS[vault], KEYS[key]);
                    let record = cache.get_any(VAULTS[vault], KEYS[key]);
                    prop_assert_eq!(record.map(|r| r.stale), present.then_some(true));
                }
                Op::InvalidateVault { vault } => {
                    cache.invalidate_vault(VAULTS[vault]);
                    for key in KEYS {
                        prop_assert_eq!(cache.get_fresh(VAULTS[vault], key), None);
                        fresh_lookups += 1;
                    }
                }
                Op::Remove { vault, key } => {
                    cache.remove(VAULTS[vault], KEYS[key]);
                    prop_assert_eq!(cache.get_any(VAULTS[vault], KEYS[key]), None);
                }
            }
            let stats = cache.stats();
            prop_assert!(stats.bytes <= max_bytes, "{} bytes > {}", stats.bytes, max_bytes);
            prop_assert!(stats.entries <= max_entries, "{} entries > {}", stats.entries, max_entries);
            prop_assert_eq!(stats.bytes, bytes_recomputed(&cache));
            prop_assert_eq!(stats.hits + stats.misses, fresh_lookups);
        }
    }
}
