//! Reads from the local database on connections of their own, beside the executor's writing
//! one (WAL lets readers and the writer run together).
//!
//! A small pool of connections: a point read (one record) and a short page of changes (what a
//! caught-up replica's long poll and an app's change feed ask for, a few changes past the
//! cursor) run inline on the calling thread when a connection is free, the read is small and no
//! lock is in the way, which costs a few microseconds instead of a hop to the blocking pool and
//! back; anything else runs on tokio's blocking pool.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_peer::wire::{ReadAnswer, ReadVerb};
use rusqlite::Connection;

use crate::env::Blocking;
use crate::names::VaultName;
use crate::store::{self, records, vaults, StoreError};

/// Pages are capped so one answer stays well inside a frame.
pub const MAX_PAGE: u32 = 1000;
/// Read connections per gateway: enough for the runtime's thread(s) and the blocking pool to
/// read side by side.
const CONNECTIONS: usize = 4;
/// The largest value a point read reads on the runtime thread (64 KiB: a few dozen pages);
/// a bigger one is read on the blocking pool.
pub const INLINE_VALUE_BYTES: usize = 64 * 1024;
/// The most changes past the cursor a change page reads on the runtime thread, and the most
/// bytes it may come to: a caught-up replica's or feed's next page. A catch-up's pages, up to
/// [`MAX_PAGE`] changes, are read on the blocking pool.
pub const INLINE_CHANGES: u32 = 64;
pub const INLINE_PAGE_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct Reader {
    conns: Arc<Vec<Mutex<Connection>>>,
    next: Arc<AtomicUsize>,
    blocking: Blocking,
}

impl Reader {
    pub fn open(db_path: &Path, blocking: Blocking) -> Result<Self, StoreError> {
        let conns = (0..CONNECTIONS)
            .map(|_| store::open(db_path).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            conns: Arc::new(conns),
            next: Arc::new(AtomicUsize::new(0)),
            blocking,
        })
    }

    /// Runs `f` with a reading connection, off the async threads (inline with
    /// [`Blocking::Inline`]).
    pub async fn run<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        if self.blocking == Blocking::Inline {
            let start = self.next.fetch_add(1, Ordering::Relaxed);
            let conn = self.conns[start % self.conns.len()]
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            return f(&conn);
        }
        let conns = self.conns.clone();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        tokio::task::spawn_blocking(move || {
            // Any free connection, else wait for this call's turn on one.
            for i in 0..conns.len() {
                if let Ok(conn) = conns[(start + i) % conns.len()].try_lock() {
                    return f(&conn);
                }
            }
            let conn = conns[start % conns.len()]
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&conn)
        })
        .await
        .map_err(|source| StoreError::ReadTask { source })?
    }

    /// Answers a read verb from this gateway's own copy of `vault` (`None`: no copy here). A
    /// point read and a short change page run inline when they can be quick (see
    /// [`Reader::point_read_inline`] and [`Reader::changes_inline`]); pages of a list, longer
    /// change pages, and reads that cannot be quick go to the blocking pool.
    pub async fn read_verb(
        &self,
        vault: VaultName,
        verb: ReadVerb,
    ) -> Result<Option<ReadAnswer>, StoreError> {
        let inline = match &verb {
            ReadVerb::Get {
                key,
                known_revision,
            } => self.point_read_inline(&vault, key, *known_revision),
            ReadVerb::Changes {
                since_revision,
                limit,
            } => self.changes_inline(&vault, *since_revision, *limit),
            ReadVerb::List { .. } => None,
        };
        if let Some(answered) = inline {
            return answered;
        }
        self.run(move |conn| read_local(conn, &vault, &verb)).await
    }

    /// A point read on the calling (runtime) thread; `None` when it cannot be quick (see
    /// [`Reader::inline`]), or the value is over [`INLINE_VALUE_BYTES`].
    fn point_read_inline(
        &self,
        vault: &str,
        key: &str,
        known_revision: Option<u64>,
    ) -> Option<Result<Option<ReadAnswer>, StoreError>> {
        self.inline(|conn| {
            Ok(
                match records::get_with_vault_revision_up_to(conn, vault, key, INLINE_VALUE_BYTES)?
                {
                    Ok(read) => Some(answer_point_read(read, key, known_revision)),
                    Err(records::ValueOver) => None,
                },
            )
        })
    }

    /// A change page on the calling (runtime) thread, the same page the blocking pool would
    /// read; `None` when it cannot be quick (see [`Reader::inline`]): more than
    /// [`INLINE_CHANGES`] changes past the cursor, or more than [`INLINE_PAGE_BYTES`] in them.
    fn changes_inline(
        &self,
        vault: &str,
        since_revision: u64,
        limit: u32,
    ) -> Option<Result<Option<ReadAnswer>, StoreError>> {
        let limit = limit.clamp(1, MAX_PAGE);
        self.inline(|conn| {
            let Some(vault_revision) = vaults::revision(conn, vault)? else {
                return Ok(Some(None));
            };
            // Each change moves the vault's revision by one: at most this many are past the
            // cursor (a commit since the line above may add some; the page's bound catches it).
            if vault_revision.saturating_sub(since_revision) > u64::from(INLINE_CHANGES) {
                return Ok(None);
            }
            let bounded = limit.min(INLINE_CHANGES);
            let page =
                records::changes_up_to(conn, vault, since_revision, bounded, INLINE_PAGE_BYTES)?;
            Ok(match page {
                // Cut short by the inline bound, not by the caller's limit: the blocking pool
                // reads the page the caller asked for.
                Ok((_, true)) if bounded < limit => None,
                Ok((changes, more)) => Some(Some(ReadAnswer::Changes {
                    changes,
                    more,
                    vault_revision,
                })),
                Err(records::ValueOver) => None,
            })
        })
    }

    /// Runs `read` on the calling (runtime) thread, which costs a few microseconds instead of
    /// a hop to the blocking pool and back. `None` when it cannot be quick: every connection
    /// busy, `read` itself says so (`Ok(None)`: too much to read here), or a lock another
    /// connection holds (the runtime thread never waits for one: with one runtime thread, a
    /// wait here would stall every connection of the gateway, heartbeats included).
    fn inline<R>(
        &self,
        read: impl FnOnce(&Connection) -> Result<Option<R>, StoreError>,
    ) -> Option<Result<R, StoreError>> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = (0..self.conns.len())
            .find_map(|i| self.conns[(start + i) % self.conns.len()].try_lock().ok())?;
        if let Err(err) = conn.busy_timeout(Duration::ZERO) {
            return Some(Err(err.into()));
        }
        let read = read(&conn);
        if let Err(err) = conn.busy_timeout(store::BUSY_TIMEOUT) {
            return Some(Err(err.into()));
        }
        match read {
            Ok(answered) => answered.map(Ok),
            Err(StoreError::Sqlite(err))
                if matches!(
                    err.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) =>
            {
                None
            }
            Err(err) => Some(Err(err)),
        }
    }
}

/// Answers a read verb from this gateway's own copy of `vault`. `None` if it holds no copy.
fn read_local(
    conn: &Connection,
    vault: &str,
    verb: &ReadVerb,
) -> Result<Option<ReadAnswer>, StoreError> {
    match verb {
        ReadVerb::Get {
            key,
            known_revision,
        } => read_one(conn, vault, key, *known_revision),
        ReadVerb::List {
            prefix,
            after,
            limit,
        } => read_page(conn, vault, prefix, after.as_deref(), *limit),
        ReadVerb::Changes {
            since_revision,
            limit,
        } => read_changes(conn, vault, *since_revision, *limit),
    }
}

/// The hot path, one record: one statement, where the vault's revision and the record would be
/// two (and two read transactions).
fn read_one(
    conn: &Connection,
    vault: &str,
    key: &str,
    known_revision: Option<u64>,
) -> Result<Option<ReadAnswer>, StoreError> {
    Ok(answer_point_read(
        records::get_with_vault_revision(conn, vault, key)?,
        key,
        known_revision,
    ))
}

/// The answer to a point read from what the store held (`None`: no copy of the vault here).
fn answer_point_read(
    read: records::PointRead,
    key: &str,
    known_revision: Option<u64>,
) -> Option<ReadAnswer> {
    let (vault_revision, record) = read?;
    Some(match record {
        Some(records::RecordRow {
            revision,
            value: Some(value),
        }) => {
            if known_revision == Some(revision) {
                ReadAnswer::NotModified {
                    revision,
                    vault_revision,
                }
            } else {
                ReadAnswer::Record {
                    record: ferry_peer::wire::WireRecord {
                        key: key.to_string(),
                        revision,
                        value,
                    },
                    vault_revision,
                }
            }
        }
        _ => ReadAnswer::NotFound { vault_revision },
    })
}

fn read_page(
    conn: &Connection,
    vault: &str,
    prefix: &str,
    after: Option<&str>,
    limit: u32,
) -> Result<Option<ReadAnswer>, StoreError> {
    let Some(vault_revision) = vaults::revision(conn, vault)? else {
        return Ok(None);
    };
    let (keys, more) = records::list(conn, vault, prefix, after, limit.clamp(1, MAX_PAGE))?;
    Ok(Some(ReadAnswer::Page {
        keys,
        more,
        vault_revision,
    }))
}

fn read_changes(
    conn: &Connection,
    vault: &str,
    since_revision: u64,
    limit: u32,
) -> Result<Option<ReadAnswer>, StoreError> {
    let Some(vault_revision) = vaults::revision(conn, vault)? else {
        return Ok(None);
    };
    let (changes, more) = records::changes(conn, vault, since_revision, limit.clamp(1, MAX_PAGE))?;
    Ok(Some(ReadAnswer::Changes {
        changes,
        more,
        vault_revision,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_ticket::NodeKey;

    fn vault_with(path: &Path, records: &[(&str, &[u8])]) {
        let conn = store::open(path).unwrap();
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(&conn, &VaultName::from_static("v"), me, 0).unwrap();
        for (revision, (key, value)) in (1..).zip(records) {
            records::set(&conn, "v", key, revision, Some(value)).unwrap();
        }
    }

    fn value_of(answer: Option<ReadAnswer>) -> Vec<u8> {
        match answer {
            Some(ReadAnswer::Record { record, .. }) => record.value,
            other => panic!("not a record: {other:?}"),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_big_value_is_read_whole_off_the_runtime_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ferry.db");
        let big = vec![7u8; INLINE_VALUE_BYTES + 1];
        vault_with(&path, &[("small", b"x"), ("big", &big)]);
        let reader = Reader::open(&path, Blocking::Threads).unwrap();
        assert!(reader.point_read_inline("v", "small", None).is_some());
        assert!(
            reader.point_read_inline("v", "big", None).is_none(),
            "over the inline bound: left to the blocking pool"
        );
        let get = |key: &str| ReadVerb::Get {
            key: key.into(),
            known_revision: None,
        };
        let read = reader
            .read_verb(VaultName::from_static("v"), get("big"))
            .await
            .unwrap();
        assert_eq!(value_of(read), big);
        let read = reader
            .read_verb(VaultName::from_static("v"), get("small"))
            .await
            .unwrap();
        assert_eq!(value_of(read), b"x");
    }

    /// `count` changes of `value`, keys `k000`..., revisions from 1, the vault's revision
    /// moved with them.
    fn vault_of_changes(conn: &Connection, count: usize, value: &[u8]) {
        for i in 0..count {
            let revision = vaults::next_revision(conn, "v").unwrap();
            records::set(conn, "v", &format!("k{i:03}"), revision, Some(value)).unwrap();
        }
    }

    fn changes(since_revision: u64, limit: u32) -> ReadVerb {
        ReadVerb::Changes {
            since_revision,
            limit,
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_short_change_page_is_read_inline_and_a_long_one_off_the_runtime_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ferry.db");
        let conn = store::open(&path).unwrap();
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(&conn, &VaultName::from_static("v"), me, 0).unwrap();
        let past = INLINE_CHANGES as usize + 6;
        vault_of_changes(&conn, past, b"0123456789");
        let reader = Reader::open(&path, Blocking::Threads).unwrap();
        // The same page whichever way it is read.
        let on_the_pool = |since, limit| read_local(&conn, "v", &changes(since, limit)).unwrap();
        let inline = |since, limit| {
            reader
                .changes_inline("v", since, limit)
                .map(|read| read.unwrap())
        };
        assert_eq!(
            inline(0, MAX_PAGE),
            None,
            "more changes past the cursor than inline reads"
        );
        let caught_up = (past as u64) - u64::from(INLINE_CHANGES);
        assert_eq!(
            inline(caught_up, MAX_PAGE),
            Some(on_the_pool(caught_up, MAX_PAGE))
        );
        assert_eq!(inline(caught_up, 5), Some(on_the_pool(caught_up, 5)));
        assert!(
            matches!(
                inline(caught_up, 5),
                Some(Some(ReadAnswer::Changes { more: true, .. }))
            ),
            "the caller's own limit still gives a page with more after it"
        );
        assert_eq!(
            inline(past as u64, MAX_PAGE),
            Some(on_the_pool(past as u64, MAX_PAGE))
        );
        assert_eq!(
            reader
                .changes_inline("nope", 0, MAX_PAGE)
                .map(|read| read.unwrap()),
            Some(None),
            "no copy of that vault here"
        );
        // One change too long to read here: the blocking pool reads it whole.
        vault_of_changes(&conn, 1, &vec![7u8; INLINE_PAGE_BYTES]);
        assert_eq!(inline(past as u64, MAX_PAGE), None);
        let read = reader
            .read_verb(VaultName::from_static("v"), changes(past as u64, MAX_PAGE))
            .await
            .unwrap();
        assert_eq!(read, on_the_pool(past as u64, MAX_PAGE));
        match read {
            Some(ReadAnswer::Changes { changes, .. }) => {
                assert_eq!(changes.len(), 1);
                assert_eq!(
                    changes[0].value.as_ref().map(Vec::len),
                    Some(INLINE_PAGE_BYTES)
                );
            }
            other => panic!("not a change page: {other:?}"),
        }
    }

    #[test]
    fn a_lock_in_the_way_sends_an_inline_read_to_the_pool_and_no_wait_stays_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ferry.db");
        drop(store::open(&path).unwrap());
        let reader = Reader::open(&path, Blocking::Threads).unwrap();
        let busy_timeout_ms = |conn: &Connection| -> i64 {
            conn.query_row("PRAGMA busy_timeout", [], |row| row.get(0))
                .unwrap()
        };
        let locked = |code| {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(code),
                None,
            ))
        };
        for code in [rusqlite::ffi::SQLITE_BUSY, rusqlite::ffi::SQLITE_LOCKED] {
            let answered = reader.inline(|conn| -> Result<Option<()>, StoreError> {
                assert_eq!(
                    busy_timeout_ms(conn),
                    0,
                    "the runtime thread never waits for a lock"
                );
                Err(locked(code))
            });
            assert!(
                answered.is_none(),
                "a lock in the way: read on the pool instead"
            );
        }
        let failed = reader.inline(|_| -> Result<Option<()>, StoreError> {
            Err(locked(rusqlite::ffi::SQLITE_IOERR))
        });
        assert!(
            matches!(failed, Some(Err(_))),
            "any other failure is the answer"
        );
        // Every connection waits for a lock again as the store does, for the pool's reads.
        for conn in reader.conns.iter() {
            let conn = conn.lock().unwrap();
            assert_eq!(
                busy_timeout_ms(&conn) as u128,
                store::BUSY_TIMEOUT.as_millis()
            );
        }
    }
}
