//! Reads from the local database on a connection of their own, beside the executor's writing
//! one (WAL lets readers and the writer run together), on tokio's blocking pool.

use std::path::Path;
use std::sync::{Arc, Mutex};

use ferry_peer::wire::{ReadAnswer, ReadVerb};
use rusqlite::Connection;

use crate::store::{self, records, vaults, StoreError};

/// Pages are capped so one answer stays well inside a frame.
pub const MAX_PAGE: u32 = 1000;

#[derive(Debug, Clone)]
pub struct Reader {
    conn: Arc<Mutex<Connection>>,
}

impl Reader {
    pub fn open(db_path: &Path) -> Result<Self, StoreError> {
        Ok(Self {
            conn: Arc::new(Mutex::new(store::open(db_path)?)),
        })
    }

    /// Runs `f` with the reading connection, off the async threads.
    pub async fn run<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&conn)
        })
        .await
        .map_err(|err| StoreError::Corrupt(format!("read task failed: {err}")))?
    }
}

/// Answers a read verb from this gateway's own copy of `vault`. `None` if it holds no copy.
pub fn read_local(
    conn: &Connection,
    vault: &str,
    verb: &ReadVerb,
) -> Result<Option<ReadAnswer>, StoreError> {
    let Some(row) = vaults::get(conn, vault)? else {
        return Ok(None);
    };
    let vault_revision = row.revision;
    Ok(Some(match verb {
        ReadVerb::Get {
            key,
            known_revision,
        } => match records::get(conn, vault, key)? {
            Some(records::RecordRow {
                revision,
                value: Some(value),
            }) => {
                if *known_revision == Some(revision) {
                    ReadAnswer::NotModified {
                        revision,
                        vault_revision,
                    }
                } else {
                    ReadAnswer::Record {
                        record: ferry_peer::wire::WireRecord {
                            key: key.clone(),
                            revision,
                            value,
                        },
                        vault_revision,
                    }
                }
            }
            _ => ReadAnswer::NotFound { vault_revision },
        },
        ReadVerb::List {
            prefix,
            after,
            limit,
        } => {
            let (keys, more) = records::list(
                conn,
                vault,
                prefix,
                after.as_deref(),
                (*limit).clamp(1, MAX_PAGE),
            )?;
            ReadAnswer::Page {
                keys,
                more,
                vault_revision,
            }
        }
        ReadVerb::Changes {
            since_revision,
            limit,
        } => {
            let (changes, more) =
                records::changes(conn, vault, *since_revision, (*limit).clamp(1, MAX_PAGE))?;
            ReadAnswer::Changes {
                changes,
                more,
                vault_revision,
            }
        }
    }))
}
