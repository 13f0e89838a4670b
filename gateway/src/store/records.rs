//! Records: get, put, delete (a tombstone), list by prefix, and the change log.

use ferry_peer::wire::{KeyRevision, WireChange};
use rusqlite::{params, Connection, OptionalExtension};

use super::StoreError;

/// A record's row, tombstones included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRow {
    pub revision: u64,
    /// `None`: deleted at `revision`.
    pub value: Option<Vec<u8>>,
}

pub fn get(conn: &Connection, vault: &str, key: &str) -> Result<Option<RecordRow>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT revision, value FROM records WHERE vault = ?1 AND key = ?2")?
        .query_row(params![vault, key], |row| {
            Ok(RecordRow {
                revision: row.get::<_, i64>(0)? as u64,
                value: row.get(1)?,
            })
        })
        .optional()?)
}

/// A vault's revision and one of its records (`None`: the key was never written); `None` as a
/// whole when the vault does not exist here.
pub type PointRead = Option<(u64, Option<RecordRow>)>;

/// One record and its vault's revision, read in one statement (so one snapshot and one
/// read transaction): `None` if the vault does not exist here; the record is `None` if the key
/// was never written.
pub fn get_with_vault_revision(
    conn: &Connection,
    vault: &str,
    key: &str,
) -> Result<PointRead, StoreError> {
    // No value is longer than `i64::MAX` bytes (SQLite's own cap is 2 GiB): nothing is left
    // unread, and the `ValueOver` arm cannot be taken.
    get_with_vault_revision_up_to(conn, vault, key, usize::MAX).map(|read| read.unwrap_or(None))
}

/// As [`get_with_vault_revision`], but a value over `max_value` bytes is left unread (SQLite
/// knows a value's length without reading its overflow pages): `Err(ValueOver)`.
pub fn get_with_vault_revision_up_to(
    conn: &Connection,
    vault: &str,
    key: &str,
    max_value: usize,
) -> Result<Result<PointRead, ValueOver>, StoreError> {
    let max_value = i64::try_from(max_value).unwrap_or(i64::MAX);
    let row = conn
        .prepare_cached(
            "SELECT v.revision, r.revision, length(r.value), \
             CASE WHEN length(r.value) <= ?3 THEN r.value END FROM vaults v \
             LEFT JOIN records r ON r.vault = v.name AND r.key = ?2 WHERE v.name = ?1",
        )?
        .query_row(params![vault, key, max_value], |row| {
            let vault_revision = row.get::<_, i64>(0)? as u64;
            let length = row.get::<_, Option<i64>>(2)?;
            if length.is_some_and(|length| length > max_value) {
                return Ok(Err(ValueOver));
            }
            let record = row
                .get::<_, Option<i64>>(1)?
                .map(|revision| -> rusqlite::Result<RecordRow> {
                    Ok(RecordRow {
                        revision: revision as u64,
                        value: row.get(3)?,
                    })
                })
                .transpose()?;
            Ok(Ok((vault_revision, record)))
        })
        .optional()?;
    Ok(match row {
        None => Ok(None),
        Some(Err(over)) => Err(over),
        Some(Ok(read)) => Ok(Some(read)),
    })
}

/// A bounded read left a value unread: it is longer than the read allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueOver;

/// The revision a compare-and-swap compares against: 0 when the record does not exist
/// (never written, or deleted).
pub fn live_revision(conn: &Connection, vault: &str, key: &str) -> Result<u64, StoreError> {
    // The revision alone: the value is not copied out just to learn it is there.
    let revision: Option<i64> = conn
        .prepare_cached(
            "SELECT revision FROM records WHERE vault = ?1 AND key = ?2 AND value IS NOT NULL",
        )?
        .query_row(params![vault, key], |row| row.get(0))
        .optional()?;
    Ok(revision.map_or(0, |revision| revision as u64))
}

/// Writes `value` (or a tombstone when `None`) at `revision`.
pub fn set(
    conn: &Connection,
    vault: &str,
    key: &str,
    revision: u64,
    value: Option<&[u8]>,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO records (vault, key, revision, value) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (vault, key) DO UPDATE SET revision = excluded.revision, value = excluded.value",
    )?
    .execute(params![vault, key, revision as i64, value])?;
    Ok(())
}

/// Live keys starting with `prefix`, after `after`, in key order; `more` says a next page exists.
pub fn list(
    conn: &Connection,
    vault: &str,
    prefix: &str,
    after: Option<&str>,
    limit: u32,
) -> Result<(Vec<KeyRevision>, bool), StoreError> {
    // Keys sort bytewise; everything with the prefix is >= the prefix and contiguous, so scan
    // from the later of (prefix, after) and stop at the first key without the prefix.
    let (start, sql) = match after {
        Some(after) if after >= prefix => (
            after,
            "SELECT key, revision FROM records WHERE vault = ?1 AND key > ?2 AND value IS NOT NULL ORDER BY key LIMIT ?3",
        ),
        _ => (
            prefix,
            "SELECT key, revision FROM records WHERE vault = ?1 AND key >= ?2 AND value IS NOT NULL ORDER BY key LIMIT ?3",
        ),
    };
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params![vault, start, i64::from(limit) + 1], |row| {
        Ok(KeyRevision {
            key: row.get(0)?,
            revision: row.get::<_, i64>(1)? as u64,
        })
    })?;
    let mut keys = Vec::new();
    for row in rows {
        let row = row?;
        if !row.key.starts_with(prefix) {
            return Ok((keys, false));
        }
        if keys.len() == limit as usize {
            return Ok((keys, true));
        }
        keys.push(row);
    }
    Ok((keys, false))
}

/// A page of changes aims at this many bytes of keys and values (a big page is slow to apply
/// and holds the replica's write lock long)...
pub const PAGE_SOFT_BYTES: usize = 8 * 1024 * 1024;
/// ...and never goes past this, whatever `max_value_bytes` is: a page must fit one frame. The
/// config refuses a value limit above it, so one change alone always fits.
pub const PAGE_HARD_BYTES: usize = ferry_peer::codec::MAX_FRAME_LEN - 64 * 1024;
/// What one change costs a frame beyond its key and value (bincode's lengths, the revision,
/// the option tag), rounded up.
const CHANGE_OVERHEAD: usize = 32;

const CHANGES_SQL: &str =
    "SELECT key, revision, length(value), value FROM records WHERE vault = ?1 AND revision > ?2
     ORDER BY revision LIMIT ?3";

/// Every key changed after `since_revision`, oldest change first, with its latest state.
pub fn changes(
    conn: &Connection,
    vault: &str,
    since_revision: u64,
    limit: u32,
) -> Result<(Vec<WireChange>, bool), StoreError> {
    // No page comes to more than `usize::MAX` bytes (its frame's cap stops it long before):
    // nothing is left unread, and the `ValueOver` arm cannot be taken.
    changes_up_to(conn, vault, since_revision, limit, usize::MAX)
        .map(|page| page.unwrap_or_default())
}

/// As [`changes`], but a page whose changes come to more than `max_bytes` (keys, values and
/// their framing) is left unread: `Err(ValueOver)`. SQLite knows a value's length without
/// reading its overflow pages, so a long value is not read to learn that.
pub fn changes_up_to(
    conn: &Connection,
    vault: &str,
    since_revision: u64,
    limit: u32,
    max_bytes: usize,
) -> Result<Result<(Vec<WireChange>, bool), ValueOver>, StoreError> {
    let mut stmt = conn.prepare_cached(CHANGES_SQL)?;
    let mut rows = stmt.query(params![vault, since_revision as i64, i64::from(limit) + 1])?;
    let mut changes = Vec::new();
    let mut bytes = 0usize;
    let mut more = false;
    while let Some(row) = rows.next()? {
        let key: String = row.get(0)?;
        let value_len = row
            .get::<_, Option<i64>>(2)?
            .map_or(0, |len| usize::try_from(len).unwrap_or(usize::MAX));
        let size = CHANGE_OVERHEAD
            .saturating_add(key.len())
            .saturating_add(value_len);
        let after = bytes.saturating_add(size);
        // Stop at the count limit, or before a change that would take the page past its
        // budget; but always take one change, so a page moves the cursor.
        if changes.len() == limit as usize
            || (!changes.is_empty() && (after > PAGE_SOFT_BYTES || after > PAGE_HARD_BYTES))
        {
            more = true;
            break;
        }
        if after > max_bytes {
            return Ok(Err(ValueOver));
        }
        bytes = after;
        changes.push(WireChange {
            key,
            revision: row.get::<_, i64>(1)? as u64,
            value: row.get(3)?,
        });
    }
    Ok(Ok((changes, more)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::VaultName;
    use crate::store::{open_temp, vaults};
    use ferry_ticket::NodeKey;

    #[test]
    fn pages_are_not_planned_again_each_time_they_are_asked() {
        let (_dir, conn) = open_temp();
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(&conn, &VaultName::from_static("v"), me, 0).unwrap();
        for (since, limit) in [(0, 10), (3, 1000), (5, 10)] {
            changes(&conn, "v", since, limit).unwrap();
        }
        let stmt = conn.prepare_cached(CHANGES_SQL).unwrap();
        // With the planner's stability guarantee off, each new binding of `LIMIT ?3` would
        // have recompiled the statement.
        assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0);
    }

    #[test]
    fn a_page_of_changes_always_fits_a_frame_whatever_the_values() {
        let (_dir, conn) = open_temp();
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(&conn, &VaultName::from_static("v"), me, 0).unwrap();
        // Under the soft budget, then a value as large as the config allows.
        let sizes = [7 * 1024 * 1024, PAGE_HARD_BYTES - 2048, 10, 10];
        for (i, size) in sizes.iter().enumerate() {
            let revision = vaults::next_revision(&conn, "v").unwrap();
            set(
                &conn,
                "v",
                &format!("k{i}"),
                revision,
                Some(&vec![7u8; *size]),
            )
            .unwrap();
        }
        let mut since = 0;
        let mut seen = 0;
        loop {
            let (page, more) = changes(&conn, "v", since, 1000).unwrap();
            let answer = ferry_peer::wire::ResponseFrame {
                body: ferry_peer::wire::Response::Read(ferry_peer::wire::ReadAnswer::Changes {
                    changes: page.clone(),
                    more,
                    vault_revision: 4,
                }),
                ext: ferry_peer::wire::Extensions::default(),
            };
            for version in [1, ferry_peer::wire::PROTOCOL_VERSION] {
                let frame = ferry_peer::frames::encode_response(version, &answer)
                    .expect("every page encodes within the frame cap");
                assert!(frame.len() <= ferry_peer::codec::MAX_FRAME_LEN + 6);
            }
            seen += page.len();
            since = page.last().unwrap().revision;
            if !more {
                break;
            }
        }
        assert_eq!(seen, sizes.len());
    }

    #[test]
    fn list_pages_through_a_prefix_and_skips_deleted_keys() {
        let (_dir, conn) = open_temp();
        let owner = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(&conn, &VaultName::from_static("v"), owner, 0).unwrap();
        for (i, key) in ["a/1", "a/2", "a/3", "b/1", "a/0"].iter().enumerate() {
            set(&conn, "v", key, i as u64 + 1, Some(b"x")).unwrap();
        }
        set(&conn, "v", "a/2", 9, None).unwrap();
        let (page, more) = list(&conn, "v", "a/", None, 2).unwrap();
        let keys: Vec<_> = page.iter().map(|k| k.key.as_str()).collect();
        assert_eq!((keys, more), (vec!["a/0", "a/1"], true));
        let (page, more) = list(&conn, "v", "a/", Some("a/1"), 2).unwrap();
        let keys: Vec<_> = page.iter().map(|k| k.key.as_str()).collect();
        assert_eq!((keys, more), (vec!["a/3"], false));
        assert_eq!(live_revision(&conn, "v", "a/2").unwrap(), 0);
        assert_eq!(live_revision(&conn, "v", "a/3").unwrap(), 3);
        assert_eq!(live_revision(&conn, "v", "never").unwrap(), 0);
        let (changes, more) = changes(&conn, "v", 3, 10).unwrap();
        assert!(!more);
        assert_eq!(
            changes.last().map(|c| (c.key.as_str(), c.value.is_none())),
            Some(("a/2", true))
        );
    }

    #[test]
    fn a_bounded_change_page_leaves_only_a_longer_page_unread() {
        let (_dir, conn) = open_temp();
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(&conn, &VaultName::from_static("v"), me, 0).unwrap();
        set(&conn, "v", "ab", 1, Some(b"1234")).unwrap();
        set(&conn, "v", "cd", 2, None).unwrap();
        // What each change costs the page: its framing, key and value.
        let first = CHANGE_OVERHEAD + 2 + 4;
        let both = first + CHANGE_OVERHEAD + 2;
        let page = |max| changes_up_to(&conn, "v", 0, 10, max).unwrap();
        let whole = changes(&conn, "v", 0, 10).unwrap();
        assert_eq!(whole.0.len(), 2);
        assert_eq!(page(both), Ok(whole.clone()), "at the bound: read");
        assert_eq!(page(both - 1), Err(ValueOver), "one byte over: left unread");
        assert_eq!(page(first - 1), Err(ValueOver));
        // The count limit comes first: a page that stops before the long part is read.
        assert_eq!(
            changes_up_to(&conn, "v", 0, 1, first).unwrap(),
            Ok((whole.0[..1].to_vec(), true))
        );
    }

    #[test]
    fn a_bounded_point_read_leaves_only_a_longer_value_unread() {
        let (_dir, conn) = open_temp();
        let owner = NodeKey::from_secret_bytes([1; 32]).node_id();
        assert_eq!(
            get_with_vault_revision_up_to(&conn, "v", "k", 4).unwrap(),
            Ok(None),
            "no vault"
        );
        vaults::create_owned(&conn, &VaultName::from_static("v"), owner, 0).unwrap();
        set(&conn, "v", "four", 1, Some(b"1234")).unwrap();
        set(&conn, "v", "five", 2, Some(b"12345")).unwrap();
        set(&conn, "v", "gone", 3, None).unwrap();
        let row = |revision, value: Option<&[u8]>| {
            Ok(Some((
                0,
                Some(RecordRow {
                    revision,
                    value: value.map(<[u8]>::to_vec),
                }),
            )))
        };
        let read = |key| get_with_vault_revision_up_to(&conn, "v", key, 4).unwrap();
        assert_eq!(read("four"), row(1, Some(b"1234")), "at the bound: read");
        assert_eq!(read("five"), Err(ValueOver), "one byte over: left unread");
        assert_eq!(
            read("gone"),
            row(3, None),
            "a deletion is no value, not a long one"
        );
        assert_eq!(read("never"), Ok(Some((0, None))));
        assert_eq!(
            get_with_vault_revision_up_to(&conn, "v", "five", usize::MAX).unwrap(),
            row(2, Some(b"12345"))
        );
    }

    #[test]
    fn one_statement_reads_a_record_with_its_vaults_revision() {
        let (_dir, conn) = open_temp();
        let owner = NodeKey::from_secret_bytes([1; 32]).node_id();
        assert_eq!(get_with_vault_revision(&conn, "v", "k").unwrap(), None);
        vaults::create_owned(&conn, &VaultName::from_static("v"), owner, 0).unwrap();
        assert_eq!(
            get_with_vault_revision(&conn, "v", "k").unwrap(),
            Some((0, None))
        );
        let first = vaults::next_revision(&conn, "v").unwrap();
        set(&conn, "v", "k", first, Some(b"one")).unwrap();
        let second = vaults::next_revision(&conn, "v").unwrap();
        set(&conn, "v", "other", second, Some(b"two")).unwrap();
        let row = |revision, value: Option<&[u8]>| RecordRow {
            revision,
            value: value.map(<[u8]>::to_vec),
        };
        assert_eq!(
            get_with_vault_revision(&conn, "v", "k").unwrap(),
            Some((2, Some(row(1, Some(b"one")))))
        );
        assert_eq!(
            get_with_vault_revision(&conn, "v", "missing").unwrap(),
            Some((2, None))
        );
        let third = vaults::next_revision(&conn, "v").unwrap();
        set(&conn, "v", "k", third, None).unwrap();
        assert_eq!(
            get_with_vault_revision(&conn, "v", "k").unwrap(),
            Some((3, Some(row(3, None))))
        );
    }
}
