//! Small settings the gateway keeps in its database: the ticket epoch.

use rusqlite::{Connection, OptionalExtension};

use super::StoreError;

/// The current ticket epoch (0 until the first `ferry tickets rotate`).
pub fn ticket_epoch(conn: &Connection) -> Result<u64, StoreError> {
    let value: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'ticket_epoch'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    match value {
        None => Ok(0),
        Some(text) => text
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("ticket epoch {text:?}"))),
    }
}

/// Moves the epoch on by one; every ticket issued before is refused at the door from now on.
pub fn rotate_ticket_epoch(conn: &Connection) -> Result<u64, StoreError> {
    let next = ticket_epoch(conn)? + 1;
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('ticket_epoch', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [next.to_string()],
    )?;
    Ok(next)
}
