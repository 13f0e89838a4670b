//! Reads from the local database on connections of their own, beside the executor's writing
//! one (WAL lets readers and the writer run together).
//!
//! A small pool of connections: a point read (one record) runs inline on the calling thread
//! when a connection is free, which costs a few microseconds instead of a hop to the blocking
//! pool and back; anything else, or a read that finds every connection busy, runs on tokio's
//! blocking pool.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ferry_peer::wire::{ReadAnswer, ReadVerb};
use rusqlite::Connection;

use crate::env::Blocking;
use crate::store::{self, records, vaults, StoreError};

/// Pages are capped so one answer stays well inside a frame.
pub const MAX_PAGE: u32 = 1000;
/// Read connections per gateway: enough for the runtime's thread(s) and the blocking pool to
/// read side by side.
const CONNECTIONS: usize = 4;

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
    /// point read runs inline when a connection is free; pages of a list or of changes go to
    /// the blocking pool.
    pub async fn read_verb(
        &self,
        vault: String,
        verb: ReadVerb,
    ) -> Result<Option<ReadAnswer>, StoreError> {
        let point = matches!(verb, ReadVerb::Get { .. });
        let read = move |conn: &Connection| read_local(conn, &vault, &verb);
        if point {
            self.run_quick(read).await
        } else {
            self.run(read).await
        }
    }

    /// Runs a short read (one record) inline if a connection is free at once, else as [`Reader::run`].
    pub async fn run_quick<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..self.conns.len() {
            if let Ok(conn) = self.conns[(start + i) % self.conns.len()].try_lock() {
                return f(&conn);
            }
        }
        self.run(f).await
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
    let Some((vault_revision, record)) = records::get_with_vault_revision(conn, vault, key)? else {
        return Ok(None);
    };
    Ok(Some(match record {
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
    }))
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
