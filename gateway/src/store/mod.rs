//! The gateway's SQLite database: vaults and their records, the trust store, and the owner's
//! journal of writes. WAL mode, `synchronous=FULL`: a write is answered only after it is on disk.
//!
//! The functions here take a `&Connection` (a `Transaction` derefs to one), so the owner's
//! executor can run a verb and its journal record in one transaction, and a reader can use its
//! own connection beside it.

pub mod calls;
pub mod journal;
pub mod meta;
pub mod records;
pub mod trust;
pub mod vaults;

use std::path::Path;

use rusqlite::Connection;

/// Something the database refused or could not do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}; if it persists, check the disk and the state directory")]
    Sqlite(#[from] rusqlite::Error),
    #[error("vault {name:?} already exists on this gateway")]
    VaultExists { name: String },
    #[error("the label {label:?} is already used by another node; `ferry untrust {label}` first or pick another label")]
    LabelTaken { label: String },
    #[error(
        "node {node} is already trusted as {label:?}; `ferry untrust {label}` first to rename it"
    )]
    NodeTaken { node: String, label: String },
    #[error("stored data is damaged: {0}")]
    Corrupt(String),
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
-- Vaults this gateway owns or replicates. `revision` is the vault's last revision.
CREATE TABLE IF NOT EXISTS vaults (
    name       TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    role       TEXT NOT NULL CHECK (role IN ('owner', 'replica')),
    revision   INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL
);
-- One row per key ever written. A NULL value is a deletion, kept so the change log can tell
-- replicas about it.
CREATE TABLE IF NOT EXISTS records (
    vault    TEXT NOT NULL,
    key      TEXT NOT NULL,
    revision INTEGER NOT NULL,
    value    BLOB,
    PRIMARY KEY (vault, key)
);
CREATE INDEX IF NOT EXISTS records_by_revision ON records (vault, revision);
-- The trust store.
CREATE TABLE IF NOT EXISTS peers (
    label    TEXT PRIMARY KEY,
    node_id  TEXT NOT NULL UNIQUE,
    added_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS peer_routes (
    label TEXT NOT NULL REFERENCES peers (label) ON DELETE CASCADE,
    route TEXT NOT NULL,
    PRIMARY KEY (label, route)
);
-- The owner's journal: every write by (caller node, request id): 'running' while it runs
-- (a marker that survives a crash), then 'answered' with its first answer, or
-- 'not_carried_out' with a reason (a tombstone: that id can never run afterwards).
CREATE TABLE IF NOT EXISTS journal (
    caller     TEXT NOT NULL,
    request_id BLOB NOT NULL,
    vault      TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('running', 'answered', 'not_carried_out')),
    answer     TEXT,
    reason     TEXT,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (caller, request_id)
);
-- The caller's memory of writes it answered `outcome_unknown`, until settled, and after
-- (so `GET /v1/calls/{id}` can answer from here). `answer` is the settled state as JSON.
CREATE TABLE IF NOT EXISTS calls (
    request_id TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    owner_label TEXT NOT NULL,
    vault      TEXT NOT NULL,
    app        TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('unknown', 'settled')),
    answer     TEXT,
    since_ms   INTEGER NOT NULL,
    settled_ms INTEGER
);
CREATE INDEX IF NOT EXISTS calls_by_state ON calls (state, since_ms);
";

/// Opens (and creates or migrates) the database at `path` with Ferry's settings.
pub fn open(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    configure(&conn)?;
    conn.execute_batch(SCHEMA)?;
    restrict_mode(path);
    Ok(conn)
}

fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // The CLI may write the trust store while a gateway reads it: wait rather than fail.
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(())
}

/// The database holds the trust store and every value: owner-only.
fn restrict_mode(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
}

/// Milliseconds since the Unix epoch, for timestamps stored in the database.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
pub(crate) fn open_temp() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = open(&dir.path().join("ferry.db")).unwrap();
    (dir, conn)
}
