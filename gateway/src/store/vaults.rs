//! The vaults table: which vaults this gateway owns or replicates, and each one's revision.

use ferry_ticket::NodeId;
use rusqlite::{params, Connection, OptionalExtension};

use super::{stored_name, StoreError};
use crate::names::VaultName;

/// This gateway's relation to a vault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Owner,
    Replica,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Owner => "owner",
            Self::Replica => "replica",
        }
    }
}

/// A vault as stored here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultRow {
    pub name: VaultName,
    pub owner: NodeId,
    pub role: Role,
    pub revision: u64,
}

fn row_to_vault(row: &rusqlite::Row<'_>) -> rusqlite::Result<(String, String, String, i64)> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
}

fn parse(raw: (String, String, String, i64)) -> Result<VaultRow, StoreError> {
    let (name, owner, role, revision) = raw;
    let owner = owner.parse().map_err(|_| StoreError::Corrupt {
        detail: format!("vault {name:?} has a bad owner id"),
    })?;
    let role = match role.as_str() {
        "owner" => Role::Owner,
        "replica" => Role::Replica,
        other => {
            return Err(StoreError::Corrupt {
                detail: format!("vault {name:?} has role {other:?}"),
            })
        }
    };
    Ok(VaultRow {
        name: stored_name(name, "a vault's name")?,
        owner,
        role,
        revision: revision as u64,
    })
}

/// Creates a vault owned by this gateway.
pub fn create_owned(
    conn: &Connection,
    name: &VaultName,
    owner: NodeId,
    now_ms: u64,
) -> Result<VaultRow, StoreError> {
    create(conn, name, owner, Role::Owner, now_ms)
}

/// Creates a replica of `name`, owned by `owner`, at revision 0 (its sync cursor).
pub fn create_replica(
    conn: &Connection,
    name: &VaultName,
    owner: NodeId,
    now_ms: u64,
) -> Result<VaultRow, StoreError> {
    create(conn, name, owner, Role::Replica, now_ms)
}

fn create(
    conn: &Connection,
    name: &VaultName,
    owner: NodeId,
    role: Role,
    now_ms: u64,
) -> Result<VaultRow, StoreError> {
    let inserted = conn.execute(
        "INSERT INTO vaults (name, owner, role, revision, created_ms) VALUES (?1, ?2, ?3, 0, ?4)
         ON CONFLICT (name) DO NOTHING",
        params![
            name.as_str(),
            owner.to_string(),
            role.as_str(),
            now_ms as i64
        ],
    )?;
    if inserted == 0 {
        return Err(StoreError::VaultExists { name: name.clone() });
    }
    Ok(VaultRow {
        name: name.clone(),
        owner,
        role,
        revision: 0,
    })
}

/// What [`remove_replica`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The replica, as it was, is gone with all its records.
    Removed(VaultRow),
    /// This gateway owns the vault: nothing was removed (an owner's vault is never dropped
    /// this way).
    Owned,
    /// No vault of that name is held here.
    NotHeld,
}

/// Forgets the replica `name`: its records and its row, in one transaction. What it was, or
/// why nothing was removed.
pub fn remove_replica(conn: &Connection, name: &str) -> Result<Removal, StoreError> {
    super::in_transaction(conn, |tx| {
        let row = match get(tx, name)? {
            None => return Ok(Removal::NotHeld),
            Some(row) if row.role == Role::Owner => return Ok(Removal::Owned),
            Some(row) => row,
        };
        tx.execute("DELETE FROM records WHERE vault = ?1", [name])?;
        tx.execute(
            "DELETE FROM vaults WHERE name = ?1 AND role = 'replica'",
            [name],
        )?;
        Ok(Removal::Removed(row))
    })
}

/// The injected bug `ReplicaSkipsChange` skips every change whose revision is a multiple of this.
const SKIPPED_EVERY: u64 = 40;

/// Applies one page of the owner's change log to a replica and moves its cursor, in one
/// transaction: after a crash the replica resumes exactly where the last page ended.
///
/// The page was asked of `owner` for the changes after `since`: it is applied only onto a
/// replica of that owner whose revision is still `since`, and `false` (nothing applied) says it
/// no longer is. A sync job whose replica was dropped (`ferry vault unfollow`), or dropped and
/// followed anew, may have a page in flight; applied to the new replica it would move that
/// replica's cursor past changes it never received.
pub fn apply_changes(
    conn: &Connection,
    name: &str,
    owner: NodeId,
    since: u64,
    changes: &[ferry_peer::wire::WireChange],
    cursor: u64,
) -> Result<bool, StoreError> {
    super::in_transaction(conn, |tx| {
        let current = tx
            .prepare_cached(
                "SELECT owner, revision FROM vaults WHERE name = ?1 AND role = 'replica'",
            )?
            .query_row([name], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })
            .optional()?;
        let same = current.is_some_and(|(stored_owner, revision)| {
            stored_owner == owner.to_string() && revision as u64 == since
        });
        if !same {
            return Ok(false);
        }
        for change in changes {
            if ferry_core::bugs::on(ferry_core::bugs::Bug::ReplicaSkipsChange)
                && change.revision % SKIPPED_EVERY == 0
            {
                continue;
            }
            super::records::set(
                tx,
                name,
                &change.key,
                change.revision,
                change.value.as_deref(),
            )?;
        }
        tx.execute(
            "UPDATE vaults SET revision = ?2 WHERE name = ?1 AND role = 'replica' AND revision < ?2",
            params![name, cursor as i64],
        )?;
        Ok(true)
    })
}

/// The vault's revision, if this gateway holds it (pages of a listing or of changes carry it;
/// a point read gets it in the same statement as the record, `records::get_with_vault_revision`).
pub fn revision(conn: &Connection, name: &str) -> Result<Option<u64>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT revision FROM vaults WHERE name = ?1")?
        .query_row([name], |row| row.get::<_, i64>(0))
        .optional()?
        .map(|revision| revision as u64))
}

pub fn get(conn: &Connection, name: &str) -> Result<Option<VaultRow>, StoreError> {
    let raw = conn
        .prepare_cached("SELECT name, owner, role, revision FROM vaults WHERE name = ?1")?
        .query_row([name], row_to_vault)
        .optional()?;
    raw.map(parse).transpose()
}

pub fn list(conn: &Connection) -> Result<Vec<VaultRow>, StoreError> {
    let mut stmt =
        conn.prepare_cached("SELECT name, owner, role, revision FROM vaults ORDER BY name")?;
    let rows = stmt.query_map([], row_to_vault)?;
    rows.map(|raw| parse(raw?)).collect()
}

/// Sets the vault's revision (the owner's executor, once per batch, to where its writes moved it).
pub fn set_revision(conn: &Connection, name: &str, revision: u64) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE vaults SET revision = ?2 WHERE name = ?1")?
        .execute(params![name, revision as i64])?;
    Ok(())
}

/// Moves the vault's revision on by one and returns the new revision.
pub fn next_revision(conn: &Connection, name: &str) -> Result<u64, StoreError> {
    let revision: i64 = conn
        .prepare_cached(
            "UPDATE vaults SET revision = revision + 1 WHERE name = ?1 RETURNING revision",
        )?
        .query_row([name], |row| row.get(0))?;
    Ok(revision as u64)
}

#[cfg(test)]
mod tests {
    use ferry_peer::wire::WireChange;
    use ferry_ticket::NodeId;

    use super::*;
    use crate::store::{open_temp, records};

    fn change(key: &str, revision: u64) -> WireChange {
        WireChange {
            key: key.into(),
            revision,
            value: Some(key.as_bytes().to_vec()),
        }
    }

    #[test]
    fn a_page_applies_only_onto_the_replica_it_was_asked_for() {
        let (_dir, conn) = open_temp();
        let owner = NodeId::from_bytes([1; 32]);
        let other = NodeId::from_bytes([2; 32]);
        let name = VaultName::from_static("notes");
        create_replica(&conn, &name, owner, 0).unwrap();
        let page = [change("a", 1), change("b", 2)];
        assert!(
            !apply_changes(&conn, "notes", other, 0, &page, 2).unwrap(),
            "another owner's page"
        );
        assert!(
            !apply_changes(&conn, "notes", owner, 1, &page, 2).unwrap(),
            "asked after 1, the replica is at 0"
        );
        assert!(
            !apply_changes(&conn, "elsewhere", owner, 0, &page, 2).unwrap(),
            "no such replica"
        );
        assert_eq!(revision(&conn, "notes").unwrap(), Some(0));
        assert!(
            records::get(&conn, "notes", "a").unwrap().is_none(),
            "nothing applied"
        );

        assert!(apply_changes(&conn, "notes", owner, 0, &page, 2).unwrap());
        assert_eq!(revision(&conn, "notes").unwrap(), Some(2));
        assert!(
            !apply_changes(&conn, "notes", owner, 0, &[change("c", 3)], 3).unwrap(),
            "the same question again, answered late: the replica has moved on"
        );
        assert!(apply_changes(&conn, "notes", owner, 2, &[change("c", 3)], 3).unwrap());
        assert_eq!(revision(&conn, "notes").unwrap(), Some(3));
    }

    #[test]
    fn removing_a_replica_takes_its_records_and_never_an_owned_vault() {
        let (_dir, conn) = open_temp();
        let owner = NodeId::from_bytes([1; 32]);
        let me = NodeId::from_bytes([9; 32]);
        let notes = VaultName::from_static("notes");
        let mine = VaultName::from_static("mine");
        create_replica(&conn, &notes, owner, 0).unwrap();
        create_owned(&conn, &mine, me, 0).unwrap();
        records::set(&conn, "mine", "k", 1, Some(b"v")).unwrap();
        assert!(apply_changes(
            &conn,
            "notes",
            owner,
            0,
            &[change("a", 1), change("b", 2)],
            2
        )
        .unwrap());

        assert_eq!(remove_replica(&conn, "mine").unwrap(), Removal::Owned);
        assert_eq!(remove_replica(&conn, "nowhere").unwrap(), Removal::NotHeld);
        assert!(
            records::get(&conn, "mine", "k").unwrap().is_some(),
            "an owned vault kept its records"
        );
        let removed = remove_replica(&conn, "notes").unwrap();
        assert_eq!(
            removed,
            Removal::Removed(VaultRow {
                name: notes.clone(),
                owner,
                role: Role::Replica,
                revision: 2,
            })
        );
        assert!(get(&conn, "notes").unwrap().is_none());
        let left: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM records WHERE vault = 'notes'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(left, 0, "the replica's records went with it");
        assert_eq!(remove_replica(&conn, "notes").unwrap(), Removal::NotHeld);

        // Followed again, it starts from nothing: a page the old sync job asked for is refused.
        create_replica(&conn, &notes, owner, 0).unwrap();
        assert!(!apply_changes(&conn, "notes", owner, 2, &[change("c", 3)], 3).unwrap());
        assert_eq!(revision(&conn, "notes").unwrap(), Some(0));
    }
}
