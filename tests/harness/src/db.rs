//! The tests' views of a gateway's database, opened read-only beside the running gateway (WAL
//! lets it be read meanwhile).

use crate::Gateway;

/// A record as [`Gateway::records`] reads it: key, revision, value (`None`: a tombstone).
pub type Record = (String, u64, Option<Vec<u8>>);

/// The tests' views of a gateway's database, opened read-only beside the running gateway (WAL
/// lets it be read meanwhile).
impl Gateway {
    /// This gateway's database, opened read-only.
    pub fn db(&self) -> rusqlite::Connection {
        let path = self.home.join("ferry.db");
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap_or_else(|err| {
                panic!(
                    "open {}'s database {} read-only: {err}",
                    self.label,
                    path.display()
                )
            })
    }

    /// A request id's bytes, as the journal keys its rows.
    fn journal_key(request_id: &str) -> [u8; 16] {
        uuid::Uuid::try_parse(request_id)
            .map(|id| *id.as_bytes())
            .unwrap_or_else(|err| panic!("{request_id:?} is not a request id: {err}"))
    }

    /// The owner's journal row for `request_id` from any caller: `(state, reason)`.
    pub fn journal_row(&self, request_id: &str) -> Option<(String, Option<String>)> {
        self.db()
            .query_row(
                "SELECT state, reason FROM journal WHERE request_id = ?1",
                [&Self::journal_key(request_id)[..]],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .ok()
    }

    /// The vault the owner's journal row for `request_id` is filed under (`""`: none).
    pub fn journal_vault(&self, request_id: &str) -> Option<String> {
        self.db()
            .query_row(
                "SELECT vault FROM journal WHERE request_id = ?1",
                [&Self::journal_key(request_id)[..]],
                |row| row.get(0),
            )
            .ok()
    }

    /// A record's (value, revision) straight from this gateway's database, whatever its state.
    pub fn stored(&self, vault: &str, key: &str) -> Option<(Option<Vec<u8>>, u64)> {
        self.db()
            .query_row(
                "SELECT value, revision FROM records WHERE vault = ?1 AND key = ?2",
                [vault, key],
                |row| Ok((row.get(0)?, row.get::<_, i64>(1)? as u64)),
            )
            .ok()
    }

    /// Every record of `vault` in this gateway's database, by key: (key, revision, value or
    /// tombstone).
    pub fn records(&self, vault: &str) -> Vec<Record> {
        let conn = self.db();
        let read = || -> rusqlite::Result<Vec<Record>> {
            let mut stmt = conn.prepare(
                "SELECT key, revision, value FROM records WHERE vault = ?1 ORDER BY key",
            )?;
            let rows = stmt.query_map([vault], |row| {
                Ok((row.get(0)?, row.get::<_, i64>(1)? as u64, row.get(2)?))
            })?;
            rows.collect()
        };
        read().unwrap_or_else(|err| panic!("the records of {vault} on {}: {err}", self.label))
    }

    /// The revision `vault` has in this gateway's database (0 if it has none).
    pub fn vault_revision(&self, vault: &str) -> u64 {
        crate::vault_revision(&self.db(), vault)
    }
}
