//! Small settings the gateway keeps in its database: the schema version, the ticket epoch, and
//! how far the owner's journal has been collected.

use rusqlite::{Connection, OptionalExtension};

use super::StoreError;

/// The current ticket epoch (0 until the first `ferry tickets rotate`).
pub fn ticket_epoch(conn: &Connection) -> Result<u64, StoreError> {
    number(conn, "ticket_epoch", "ticket epoch", 0)
}

/// Moves the epoch on by one; every ticket issued before is refused at the door from now on.
pub fn rotate_ticket_epoch(conn: &Connection) -> Result<u64, StoreError> {
    let next = ticket_epoch(conn)? + 1;
    set(conn, "ticket_epoch", &next.to_string())?;
    Ok(next)
}

fn get(conn: &Connection, key: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .query_row("SELECT value FROM meta WHERE key = ?1", [key], |row| {
            row.get(0)
        })
        .optional()?)
}

/// The number kept under `key` (`absent` if there is none); a value that is not one is damage.
fn number<N: std::str::FromStr>(
    conn: &Connection,
    key: &str,
    what: &str,
    absent: N,
) -> Result<N, StoreError> {
    match get(conn, key)? {
        None => Ok(absent),
        Some(text) => text.parse().map_err(|_| StoreError::Corrupt {
            detail: format!("{what} {text:?}"),
        }),
    }
}

fn set(conn: &Connection, key: &str, value: &str) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )?;
    Ok(())
}

/// The schema version the database says it has (1 if it predates versions).
pub fn schema_version(conn: &Connection) -> Result<u32, StoreError> {
    number(conn, "schema_version", "schema version", 1)
}

pub fn set_schema_version(conn: &Connection, version: u32) -> Result<(), StoreError> {
    set(conn, "schema_version", &version.to_string())
}

/// Request ids dated before this (Unix ms) may have had their journal rows collected: the owner
/// refuses them as stale whatever its clock says now (see `journal::collect`).
pub fn journal_collected_before(conn: &Connection) -> Result<u64, StoreError> {
    number(conn, "journal_collected_before_ms", "journal watermark", 0)
}

pub fn set_journal_collected_before(conn: &Connection, ms: u64) -> Result<(), StoreError> {
    set(conn, "journal_collected_before_ms", &ms.to_string())
}

/// Ids stamped above this (Unix ms) were sent, if at all, by a release that writes down where
/// writes went and whom it untrusted (`claims.rs`): 0 for a database made by such a release,
/// the upgrade's time plus six minutes for an older one. `u64::MAX` if it is missing (nothing is
/// then taken as recorded).
pub fn claims_since(conn: &Connection) -> Result<u64, StoreError> {
    number(conn, "claims_since_ms", "claims watermark", u64::MAX)
}
