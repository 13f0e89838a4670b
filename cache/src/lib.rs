//! The read cache of a Ferry gateway (SPEC section 9), as pure logic: no IO, no async, no clock.
//! Time, where it matters, comes in as `now_ms`.
//!
//! - [`record_cache`]: [`RecordCache`], the last answer per `(vault, key)`, bounded by bytes and
//!   entries, least recently used out first. Invalidation marks entries stale instead of dropping
//!   them, so they remain the `X-Ferry-Stale` fallback; an older revision never replaces a newer.
//! - [`monotonic`]: [`MonotonicReads`], what each app was already given, so no answer takes an
//!   app back to an older revision, and how that stays true when the memory is full.
//! - `composite_key` (private): the `(vault, key)` and `(app, vault, key)` keys, looked up from
//!   borrowed strings without allocating.
//!
//! How the read path uses them, in the order of SPEC section 9: [`RecordCache::get_fresh`] before
//! asking a source; [`RecordCache::get_any`] for the revision to send the owner, and for the
//! stale fallback; [`RecordCache::insert`] with every answer; [`MonotonicReads::admit`] (or
//! [`MonotonicReads::admit_from_owner`]) before any answer reaches the app. Writes passing
//! through and replication call [`RecordCache::insert`] or [`RecordCache::invalidate`].
//! Neither type locks: the gateway puts each behind its own mutex.

mod composite_key;
pub mod monotonic;
pub mod record_cache;

pub use monotonic::{Admission, MonotonicReads, DEFAULT_MAX_APP_FLOORS, DEFAULT_MAX_MARKS};
pub use record_cache::{
    entry_bytes, CacheStats, CachedRecord, InsertOutcome, RecordCache, DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ENTRIES, ENTRY_OVERHEAD_BYTES,
};
