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

/// The injected bug `ReplicaSkipsChange` skips every change whose revision is a multiple of this.
const SKIPPED_EVERY: u64 = 40;

/// Applies one page of the owner's change log to a replica and moves its cursor, in one
/// transaction: after a crash the replica resumes exactly where the last page ended.
pub fn apply_changes(
    conn: &Connection,
    name: &str,
    changes: &[ferry_peer::wire::WireChange],
    cursor: u64,
) -> Result<(), StoreError> {
    super::in_transaction(conn, |tx| {
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
        Ok(())
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
