//! The gateway's SQLite database: vaults and their records, the trust store, and the owner's
//! journal of writes. WAL mode, `synchronous=FULL`: a write is answered only after it is on disk.
//!
//! The functions here take a `&Connection` (a `Transaction` derefs to one), so the owner's
//! executor can run a verb and its journal record in one transaction, and a reader can use its
//! own connection beside it.

pub mod calls;
pub mod claims;
pub mod immediate;
pub mod journal;
pub mod meta;
pub mod records;
pub mod trust;
pub mod vaults;

use std::path::Path;

use rusqlite::config::DbConfig;
use rusqlite::Connection;

use crate::names::{Label, VaultName};

/// Something the database refused or could not do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}; if it persists, check the disk and the state directory")]
    Sqlite(#[from] rusqlite::Error),
    #[error("vault {name:?} already exists on this gateway")]
    VaultExists { name: VaultName },
    #[error("the label {label:?} is already used by another node; `ferry untrust {label}` first or pick another label")]
    LabelTaken { label: Label },
    #[error(
        "node {node} is already trusted as {label:?}; `ferry untrust {label}` first to rename it"
    )]
    NodeTaken { node: String, label: String },
    #[error("stored data is damaged: {detail}")]
    Corrupt { detail: String },
    #[error("the database was written by a newer Ferry (schema version {found}; this build knows up to {supported}); run the newer build, or restore a backup made before the upgrade. Nothing was changed")]
    TooNew { found: u32, supported: u32 },
    /// A value could not be encoded for storage (a bug: every stored type encodes); nothing of
    /// it was written.
    #[error("{what} not encodable: {source}")]
    Encode {
        what: &'static str,
        source: serde_json::Error,
    },
    /// The store's one writer (the owner's executor) is stopping, or stopped before it
    /// answered: nothing was committed. Try again once the gateway is back.
    #[error("the owner is stopping and takes no new work")]
    WriterStopping,
    /// The store's one writer has too much work waiting: nothing was committed. Try again in a
    /// moment.
    #[error("the owner's queue is full")]
    WriterBusy,
    /// The store's one writer took the change and its answer was lost: it may have
    /// committed. Look before doing it again.
    #[error("the owner took the change and its answer was lost; check whether it took effect before doing it again")]
    WriterLost,
    /// The thread that owns a writing connection could not be started (the system is out of
    /// threads or memory); the gateway cannot run.
    #[error("cannot start the {thread} thread: {source}")]
    Spawn {
        thread: &'static str,
        source: std::io::Error,
    },
    /// A read on the blocking pool did not finish (it panicked, or the runtime is stopping).
    #[error("a read of the store did not finish: {source}")]
    ReadTask { source: tokio::task::JoinError },
    /// The call log's slot file could not be opened, read or cleared; check the state
    /// directory's disk and permissions.
    #[error("the call log's slot file: {source}")]
    SlotFile { source: std::io::Error },
    /// The owner's running marks (`owner.marks`) could not be opened, read or cleared; check
    /// the state directory's disk and permissions.
    #[error("the owner's running marks (owner.marks in the state directory): {source}; check that directory's disk and permissions")]
    MarkFile { source: std::io::Error },
    /// The home's sent mark (`calls.sent`) could not be opened or written; check the state
    /// directory's disk and permissions.
    #[error("the sent mark (calls.sent): {source}")]
    SentMark { source: std::io::Error },
    /// A batch of changes did not commit, so none of them happened (`source` is why); shared
    /// by every change in the batch.
    #[error("the batch did not commit: {source}")]
    NotCommitted { source: std::sync::Arc<StoreError> },
}

/// The schema version this build writes. A database records its version in `meta`
/// (`schema_version`; a database without it is version 1); an older one is migrated in place in
/// one transaction when opened, a newer one is refused with [`StoreError::TooNew`] and left as it
/// is.
pub const SCHEMA_VERSION: u32 = 6;

/// The tables of schema 1 but `calls`: a new database runs this, then [`CALLS_V2`],
/// [`MIGRATE_2_TO_3`], [`JOURNAL_V5`] and [`SETTLE_MEMORY_V6`], so every database reaches
/// [`SCHEMA_VERSION`] by the same statements.
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
";

/// The caller's memory of the writes it sent (version 2): 'in_flight' from before the first
/// byte leaves until the outcome is known (a crash leaves it there, and the next start makes it
/// 'unknown'), 'unknown' until the owner settles it, 'settled' with the owner's answer after, so
/// `GET /v1/calls/{id}` can answer from here.
const CALLS_V2: &str = "
CREATE TABLE calls (
    request_id  TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    owner_label TEXT NOT NULL,
    vault       TEXT NOT NULL,
    app         TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('in_flight', 'unknown', 'settled')),
    answer      TEXT,
    since_ms    INTEGER NOT NULL,
    settled_ms  INTEGER,
    -- 1 once the app was told `outcome_unknown` (or a crash cut the call short): `ferry calls`
    -- lists these; calls answered at once are only looked up by id.
    reported_unknown INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX calls_by_state ON calls (state, since_ms);
";

/// Version 1 to 2: the calls table gains the `in_flight` state (a CHECK constraint, so the table
/// is rebuilt with its rows).
const MIGRATE_1_TO_2: &str = "
CREATE TABLE IF NOT EXISTS calls (
    request_id TEXT PRIMARY KEY, owner TEXT NOT NULL, owner_label TEXT NOT NULL,
    vault TEXT NOT NULL, app TEXT NOT NULL, state TEXT NOT NULL, answer TEXT,
    since_ms INTEGER NOT NULL, settled_ms INTEGER
);
ALTER TABLE calls RENAME TO calls_v1;
DROP INDEX IF EXISTS calls_by_state;
";
const MIGRATE_1_TO_2_COPY: &str = "
INSERT INTO calls (request_id, owner, owner_label, vault, app, state, answer, since_ms, settled_ms,
                   reported_unknown)
    SELECT request_id, owner, owner_label, vault, app, state, answer, since_ms, settled_ms, 1
    FROM calls_v1;
DROP TABLE calls_v1;
";

/// Version 2 to 3: each trusted peer keeps what it last said of its version (the protocol its
/// connection agreed on and its release), so `ferry peers` shows which machines still run an
/// older release even while they are off.
const MIGRATE_2_TO_3: &str = "
ALTER TABLE peers ADD COLUMN protocol INTEGER;
ALTER TABLE peers ADD COLUMN release TEXT;
";

/// Any version before 5 to 5: the journal as it is now, rebuilt from whatever an older database
/// has (SQLite can change neither a constraint nor a table's key in place). Two changes, same
/// rows and same rules:
/// - (4) The check on `state` is three comparisons instead of an `IN` list. SQLite checks an
///   `IN` list of three or more values by building a temporary index, every time a statement
///   checks it: the owner's two journal statements per write paid about 2 us each for it
///   (`docs/history/performance-log.md`, "A temporary index per journal statement").
/// - (5) The rows live in their key's B-tree (`WITHOUT ROWID`), keyed by request id first. A
///   rowid table kept each row twice, in the table and in its key's index, so every write's
///   two journal statements wrote two B-trees; and with the caller first, every comparison
///   walked the 64 hex digits all of one caller's ids share before reaching the id. Now each
///   statement finds its row in one B-tree, a comparison ends in the id's first bytes, and a
///   batch's commits write about 15% fewer pages (`docs/history/performance-log.md`, "The
///   journal in one B-tree"). The id's first bytes are its time, so collecting old rows reads the key's start.
///
/// A database older than 4 is rebuilt once, here, not first to 4 and then again.
const JOURNAL_V5: &str = "
CREATE TABLE journal_v5 (
    caller     TEXT NOT NULL,
    request_id BLOB NOT NULL,
    vault      TEXT NOT NULL,
    state      TEXT NOT NULL
               CHECK (state = 'running' OR state = 'answered' OR state = 'not_carried_out'),
    answer     TEXT,
    reason     TEXT,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (request_id, caller)
) WITHOUT ROWID;
INSERT INTO journal_v5 (caller, request_id, vault, state, answer, reason, created_ms, updated_ms)
    SELECT caller, request_id, vault, state, answer, reason, created_ms, updated_ms FROM journal;
DROP TABLE journal;
ALTER TABLE journal_v5 RENAME TO journal;
";

/// Version 6: what settling must remember to fence an id only when it asked every machine
/// that could have run it (`claims.rs`): which owner each vault name's writes went to, and
/// which peers were untrusted, with the ids that may have gone to them.
const SETTLE_MEMORY_V6: &str = "
CREATE TABLE IF NOT EXISTS vault_claims (
    vault    TEXT NOT NULL,
    owner    TEXT NOT NULL,
    first_ms INTEGER NOT NULL,
    PRIMARY KEY (vault, owner)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS former_peers (
    node_id       TEXT PRIMARY KEY,
    label         TEXT NOT NULL,
    sent_up_to_ms INTEGER NOT NULL
);
";

/// A new database: every write it ever sends is written down, so `claims_since_ms` is 0.
const CLAIMS_SINCE_NEW: &str =
    "INSERT OR IGNORE INTO meta (key, value) VALUES ('claims_since_ms', '0');";

/// A database from before version 6: the writes an earlier release sent left no claim, and the
/// peers it untrusted no row. Their ids are stamped at most five minutes past the clock at this
/// migration (the API's future bound; a minute more for the clock's steps): settling treats ids
/// stamped up to then as sent before the record began.
const CLAIMS_SINCE_UPGRADE: &str =
    "INSERT OR IGNORE INTO meta (key, value) VALUES ('claims_since_ms',
    CAST(CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + 360000 AS TEXT));";

/// Opens (and creates or migrates) the database at `path` with Ferry's settings.
pub fn open(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    configure(&conn)?;
    migrate(&conn)?;
    // The database holds the trust store and every value: owner-only.
    crate::platform::restrict_to_owner(path);
    Ok(conn)
}

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction, or refuses a newer database
/// without changing it.
fn migrate(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        let exists: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vaults')",
            [],
            |row| row.get(0),
        )?;
        if !exists {
            conn.execute_batch(SCHEMA)?;
            conn.execute_batch(CALLS_V2)?;
            conn.execute_batch(MIGRATE_2_TO_3)?;
            conn.execute_batch(JOURNAL_V5)?;
            conn.execute_batch(SETTLE_MEMORY_V6)?;
            conn.execute_batch(CLAIMS_SINCE_NEW)?;
            return meta::set_schema_version(conn, SCHEMA_VERSION);
        }
        let found = meta::schema_version(conn)?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        if found < 2 {
            conn.execute_batch(MIGRATE_1_TO_2)?;
            conn.execute_batch(CALLS_V2)?;
            conn.execute_batch(MIGRATE_1_TO_2_COPY)?;
        }
        if found < 3 {
            conn.execute_batch(MIGRATE_2_TO_3)?;
        }
        if found < 5 {
            conn.execute_batch(JOURNAL_V5)?;
        }
        if found < 6 {
            conn.execute_batch(SETTLE_MEMORY_V6)?;
            conn.execute_batch(CLAIMS_SINCE_UPGRADE)?;
        }
        if found < SCHEMA_VERSION {
            meta::set_schema_version(conn, SCHEMA_VERSION)?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT")?,
        Err(err) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(err);
        }
    }
    Ok(())
}

/// Copies everything in the write-ahead log into the database file and empties the log
/// (`wal_checkpoint(TRUNCATE)`), so `ferry.db` alone holds every committed change. Run by a
/// stopping gateway once its writers are done: a stopped gateway's database file is then a
/// whole backup by itself, and an older build that refuses it (schema too new) has nothing to
/// move into it, so the file stays byte for byte as it was. Returns whether the log was
/// emptied (a connection still reading keeps part of it; that is no loss, only a log left).
pub fn checkpoint(path: &Path) -> Result<bool, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(1))?;
    let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))?;
    Ok(busy == 0)
}

/// How long a statement waits for a lock another connection holds before it fails.
pub const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // The planner's stability guarantee: a plan never depends on a bound value. Without it this
    // SQLite (built with STAT4) recompiles every statement with `LIMIT ?` each time it is bound
    // again (it reads the bound limit while planning), so every page of a listing or of
    // changes paid a parse and a plan: 7% of an owner's CPU with 20 followers, measured.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    // The CLI may write the trust store while a gateway reads it: wait rather than fail.
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Room for every statement one connection runs (rusqlite keeps 16 by default, and the
    // executor's alone runs about ten a batch, its `BEGIN` and `COMMIT` among them): a
    // statement pushed out is parsed and planned again when next used.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(())
}

/// Prepared statements each connection keeps (see [`configure`]).
const STATEMENT_CACHE: usize = 64;

/// Runs `change` in a transaction: the caller's, if one is open on `conn` (the executor runs
/// every change in one of its own), else a new `IMMEDIATE` one (the CLI with no gateway
/// running), which takes the write lock up front so a concurrent writer makes it wait (busy
/// timeout) instead of failing at its first write with a stale read snapshot.
/// A name read from a row (`what` says which), checked as every name entering the gateway is:
/// a row that fails is damaged data, an error, never a panic.
pub fn stored_name<T>(text: String, what: impl std::fmt::Display) -> Result<T, StoreError>
where
    T: TryFrom<String, Error = crate::names::NameError>,
{
    T::try_from(text).map_err(|err| StoreError::Corrupt {
        detail: format!("{what}: {err}"),
    })
}

pub fn in_transaction<R>(
    conn: &Connection,
    change: impl FnOnce(&Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    if !conn.is_autocommit() {
        return change(conn);
    }
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    let value = change(&tx)?;
    tx.commit()?;
    Ok(value)
}

/// Milliseconds since the Unix epoch, for timestamps stored in the database.
pub fn unix_ms() -> u64 {
    ferry_core::clock::system_unix_ms()
}

#[cfg(test)]
pub(crate) fn open_temp() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = open(&dir.path().join("ferry.db")).unwrap();
    (dir, conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schema as the first release wrote it (version 1, no `schema_version` row).
    const SCHEMA_V1_CALLS: &str = "
CREATE TABLE calls (
    request_id TEXT PRIMARY KEY, owner TEXT NOT NULL, owner_label TEXT NOT NULL,
    vault TEXT NOT NULL, app TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('unknown', 'settled')),
    answer TEXT, since_ms INTEGER NOT NULL, settled_ms INTEGER
);
CREATE INDEX calls_by_state ON calls (state, since_ms);
INSERT INTO calls (request_id, owner, owner_label, vault, app, state, since_ms)
VALUES ('0190a000-0000-7000-8000-000000000001', 'o', 'a', 'v', 'app', 'unknown', 5);
";

    #[test]
    fn a_version_1_database_is_migrated_in_place_keeping_its_calls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ferry.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute_batch(SCHEMA_V1_CALLS).unwrap();
        }
        let conn = open(&path).unwrap();
        assert_eq!(meta::schema_version(&conn).unwrap(), SCHEMA_VERSION);
        let (state, reported): (String, i64) = conn
            .query_row(
                "SELECT state, reported_unknown FROM calls WHERE vault = 'v'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!((state.as_str(), reported), ("unknown", 1));
        // The new state is allowed now.
        conn.execute(
            "INSERT INTO calls (request_id, owner, owner_label, vault, app, state, since_ms)
             VALUES ('x', 'o', 'a', 'v', 'app', 'in_flight', 6)",
            [],
        )
        .unwrap();
    }

    #[test]
    fn a_version_2_database_gains_the_peers_versions_keeping_its_peers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ferry.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute_batch(CALLS_V2).unwrap();
            meta::set_schema_version(&conn, 2).unwrap();
            conn.execute(
                "INSERT INTO peers (label, node_id, added_ms) VALUES ('laptop', ?1, 5)",
                [ferry_ticket::NodeKey::from_secret_bytes([3; 32])
                    .node_id()
                    .to_string()],
            )
            .unwrap();
        }
        let conn = open(&path).unwrap();
        assert_eq!(meta::schema_version(&conn).unwrap(), SCHEMA_VERSION);
        let node = ferry_ticket::NodeKey::from_secret_bytes([3; 32]).node_id();
        assert_eq!(super::trust::list(&conn).unwrap().len(), 1);
        assert!(super::trust::versions(&conn).unwrap().is_empty());
        let said = super::trust::PeerVersion {
            protocol: 1,
            release: None,
        };
        super::trust::record_version(&conn, node, &said).unwrap();
        assert_eq!(super::trust::versions(&conn).unwrap(), vec![(node, said)]);
    }

    /// A journal row as (caller, state, answer, reason).
    type JournalRow = (String, String, Option<String>, Option<String>);

    /// The journal's rows, ordered by (caller, request id).
    fn journal_rows(conn: &Connection) -> Vec<JournalRow> {
        conn.prepare(
            "SELECT caller, state, answer, reason FROM journal ORDER BY caller, request_id",
        )
        .unwrap()
        .query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }

    /// Opens the older database at `path` (migrating it) and checks it reached this build's
    /// schema with every journal row of `rows` as it was.
    fn open_migrated(path: &Path, rows: &[JournalRow]) -> Connection {
        let conn = open(path).unwrap();
        assert_eq!(meta::schema_version(&conn).unwrap(), SCHEMA_VERSION);
        assert_eq!(
            journal_rows(&conn),
            rows,
            "every journal row kept as it was"
        );
        conn
    }

    /// Whether SQLite's plan for `sql` opens a temporary index (`OpenEphemeral`).
    fn builds_a_temporary_index(conn: &Connection, sql: &str) -> bool {
        conn.prepare(&format!("EXPLAIN {sql}"))
            .unwrap()
            .query_map([], |row| row.get::<_, String>(1))
            .unwrap()
            .any(|opcode| opcode.unwrap() == "OpenEphemeral")
    }

    #[test]
    fn a_version_3_database_keeps_its_journal_and_checks_states_without_a_temporary_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ferry.db");
        let update = "UPDATE journal SET state = 'answered', answer = 'a', updated_ms = 2
                      WHERE caller = 'c1' AND request_id = x'01' AND state = 'running'";
        let rows = {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute_batch(CALLS_V2).unwrap();
            conn.execute_batch(MIGRATE_2_TO_3).unwrap();
            meta::set_schema_version(&conn, 3).unwrap();
            conn.execute_batch(
                "INSERT INTO journal VALUES ('c1', x'01', 'v', 'running', NULL, NULL, 1, 1);
                 INSERT INTO journal VALUES ('c2', x'02', 'v', 'answered', '{}', NULL, 1, 1);
                 INSERT INTO journal VALUES ('c3', x'03', '', 'not_carried_out', NULL, 'busy', 1, 1);",
            )
            .unwrap();
            // What the migration is for: schema 3 checks the state with a temporary index.
            assert!(builds_a_temporary_index(&conn, update));
            journal_rows(&conn)
        };
        let conn = open_migrated(&path, &rows);
        assert!(!builds_a_temporary_index(&conn, update));
        assert!(!builds_a_temporary_index(
            &conn,
            "INSERT INTO journal (caller, request_id, vault, state, created_ms, updated_ms)
             VALUES ('c4', x'04', 'v', 'running', 1, 1) ON CONFLICT (caller, request_id) DO NOTHING"
        ));
        // The rule itself is unchanged: a state outside the three is refused, and a second row
        // for one (caller, request id) too.
        let refused = |sql: &str| conn.execute_batch(sql).is_err();
        assert!(refused(
            "UPDATE journal SET state = 'done' WHERE caller = 'c1'"
        ));
        assert!(refused(
            "INSERT INTO journal VALUES ('c2', x'02', 'v', 'running', NULL, NULL, 1, 1)"
        ));
        conn.execute_batch(update).unwrap();
        assert_eq!(journal_rows(&conn)[0].1, "answered");

        let fresh = open(&dir.path().join("fresh.db")).unwrap();
        assert_eq!(
            schema_of(&conn),
            schema_of(&fresh),
            "a migrated database has the schema a new one has"
        );
    }

    #[test]
    fn settling_takes_a_new_databases_writes_as_recorded_and_an_upgraded_ones_as_not() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = open(&dir.path().join("new.db")).unwrap();
        assert_eq!(meta::claims_since(&fresh).unwrap(), 0);
        let path = dir.path().join("old.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute_batch(CALLS_V2).unwrap();
            conn.execute_batch(MIGRATE_2_TO_3).unwrap();
            conn.execute_batch(JOURNAL_V5).unwrap();
            meta::set_schema_version(&conn, 5).unwrap();
        }
        let before = unix_ms();
        let upgraded = open(&path).unwrap();
        // Ids an earlier release may have sent (stamped up to five minutes ahead of the
        // upgrade) are not taken as recorded.
        let since = meta::claims_since(&upgraded).unwrap();
        assert!(since >= before + 5 * 60_000, "{since} against {before}");
        assert!(claims::former_peers(&upgraded).unwrap().is_empty());
    }

    #[test]
    fn a_version_4_database_keeps_its_journal_in_one_b_tree_keyed_by_request_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ferry.db");
        let rows = {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute_batch(CALLS_V2).unwrap();
            conn.execute_batch(MIGRATE_2_TO_3).unwrap();
            // Schema 4's journal: a rowid table with its key in an index of its own.
            conn.execute_batch(
                "DROP TABLE journal;
                 CREATE TABLE journal (
                     caller TEXT NOT NULL, request_id BLOB NOT NULL, vault TEXT NOT NULL,
                     state TEXT NOT NULL
                         CHECK (state = 'running' OR state = 'answered' OR state = 'not_carried_out'),
                     answer TEXT, reason TEXT, created_ms INTEGER NOT NULL,
                     updated_ms INTEGER NOT NULL,
                     PRIMARY KEY (caller, request_id));
                 INSERT INTO journal VALUES ('c1', x'02', 'v', 'running', NULL, NULL, 1, 1);
                 INSERT INTO journal VALUES ('c1', x'01', 'v', 'answered', '{}', NULL, 1, 1);
                 INSERT INTO journal VALUES ('c2', x'01', '', 'not_carried_out', NULL, 'busy', 1, 1);",
            )
            .unwrap();
            meta::set_schema_version(&conn, 4).unwrap();
            assert!(conn.prepare("SELECT rowid FROM journal").is_ok());
            journal_rows(&conn)
        };
        let conn = open_migrated(&path, &rows);
        assert!(
            conn.prepare("SELECT rowid FROM journal").is_err(),
            "the journal has no rowid: its rows are in its key's B-tree"
        );
        let indexes: u32 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'journal'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(indexes, 0, "no second B-tree for the key");
        let plan: String = conn
            .query_row(
                "EXPLAIN QUERY PLAN SELECT state FROM journal WHERE caller = 'c1' AND request_id = x'01'",
                [],
                |row| row.get(3),
            )
            .unwrap();
        assert!(
            plan.contains("PRIMARY KEY (request_id=? AND caller=?)"),
            "{plan}"
        );
        // The same rules: one row per (caller, request id), three states.
        let refused = |sql: &str| conn.execute_batch(sql).is_err();
        assert!(refused(
            "INSERT INTO journal VALUES ('c1', x'01', 'v', 'running', NULL, NULL, 1, 1)"
        ));
        assert!(refused(
            "UPDATE journal SET state = 'done' WHERE caller = 'c1'"
        ));
        // Collecting reads ids by their time and deletes by the whole key.
        assert_eq!(journal::collect(&conn, u64::MAX, 10).unwrap(), 2);
        assert_eq!(journal_rows(&conn).len(), 1, "the running row is kept");
    }

    /// Every table's and index's definition, by name.
    fn schema_of(conn: &Connection) -> Vec<(String, String, Option<String>)> {
        conn.prepare("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn a_new_database_checks_journal_states_without_a_temporary_index() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("ferry.db")).unwrap();
        assert!(!builds_a_temporary_index(
            &conn,
            "UPDATE journal SET state = 'answered' WHERE caller = 'c' AND request_id = x'01'"
        ));
    }

    #[test]
    fn a_database_from_a_newer_build_is_refused_and_left_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ferry.db");
        {
            let conn = open(&path).unwrap();
            meta::set_schema_version(&conn, SCHEMA_VERSION + 1).unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let err = open(&path).unwrap_err();
        assert!(
            matches!(err, StoreError::TooNew { found, .. } if found == SCHEMA_VERSION + 1),
            "{err}"
        );
        assert!(err.to_string().contains("newer Ferry"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "nothing was changed");
    }
}
