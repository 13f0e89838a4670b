//! What settling must remember beyond the calls table: which owner each vault name's writes
//! were sent to, and which peers this gateway used to trust.
//!
//! An answered write leaves no row in the calls table, so a later `GET /v1/calls/{id}` for it
//! cannot read the owner from there. Settling may only fence an id (`never_arrived`) once every
//! machine that could have run it has said so; these two tables are how this gateway knows who
//! that is after a restart, a second claim of the same vault name, or an untrust:
//! - `vault_claims`: every (vault name, owner node) this gateway sent a write to, written
//!   before the first such write leaves (`Network::note_claim`), never forgotten;
//! - `former_peers`: each untrusted peer and when, so an id that may have gone to it while it
//!   was trusted is answered "unavailable", never fenced by asking the others.

use std::collections::BTreeSet;

use ferry_ticket::NodeId;
use rusqlite::{params, Connection};

use super::{stored_name, StoreError};
use crate::names::{Label, VaultName};

/// A peer this gateway trusted once and no longer does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormerPeer {
    pub node_id: NodeId,
    pub label: Label,
    /// Ids stamped at or below this (Unix ms) may have been sent to it while it was trusted:
    /// the home's sent mark at the untrust, and no less than the clock then plus the ids'
    /// future bound (a write accepted just before may still leave).
    pub sent_up_to_ms: u64,
}

/// Records that writes of `vault` go to `owner` (a no-op if already recorded).
pub fn record_claim(
    conn: &Connection,
    vault: &str,
    owner: NodeId,
    now_ms: u64,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT OR IGNORE INTO vault_claims (vault, owner, first_ms) VALUES (?1, ?2, ?3)",
        params![vault, owner.to_string(), now_ms as i64],
    )?;
    Ok(())
}

/// Every (vault name, owner) a write was ever sent to from here.
pub fn claims(conn: &Connection) -> Result<BTreeSet<(VaultName, NodeId)>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT vault, owner FROM vault_claims")?;
    let rows = stmt.query_map([], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
    })?;
    let mut claims = BTreeSet::new();
    for row in rows {
        let (vault, owner) = row?;
        let owner = owner.parse().map_err(|_| StoreError::Corrupt {
            detail: format!("vault claim of {vault:?} names a bad node id"),
        })?;
        claims.insert((stored_name(vault, "a vault claim")?, owner));
    }
    Ok(claims)
}

/// Remembers that `node` (called `label`) is no longer trusted, and that ids stamped up to
/// `sent_up_to_ms` may have gone to it (kept at the highest of every untrust of it).
pub fn record_untrusted(
    conn: &Connection,
    node: NodeId,
    label: &str,
    sent_up_to_ms: u64,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO former_peers (node_id, label, sent_up_to_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (node_id) DO UPDATE SET label = excluded.label,
             sent_up_to_ms = max(sent_up_to_ms, excluded.sent_up_to_ms)",
        params![
            node.to_string(),
            label,
            i64::try_from(sent_up_to_ms).unwrap_or(i64::MAX)
        ],
    )?;
    Ok(())
}

/// Every peer untrusted at some time (some may be trusted again since).
pub fn former_peers(conn: &Connection) -> Result<Vec<FormerPeer>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT node_id, label, sent_up_to_ms FROM former_peers ORDER BY label")?;
    let rows = stmt.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, i64>(2)?,
        ))
    })?;
    let mut peers = Vec::new();
    for row in rows {
        let (node_id, label, sent_up_to_ms) = row?;
        let node_id = node_id.parse().map_err(|_| StoreError::Corrupt {
            detail: format!("former peer {label:?} has a bad node id"),
        })?;
        peers.push(FormerPeer {
            node_id,
            label: stored_name(label, "a former peer's label")?,
            // A value that is not a time says nothing certain: every id may have gone to it.
            sent_up_to_ms: u64::try_from(sent_up_to_ms).unwrap_or(u64::MAX),
        });
    }
    Ok(peers)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn node(byte: u8) -> NodeId {
        NodeId::from_bytes([byte; 32])
    }

    #[test]
    fn claims_and_former_peers_are_kept_once_each() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::store::open(&dir.path().join("ferry.db")).unwrap();
        record_claim(&conn, "notes", node(1), 10).unwrap();
        record_claim(&conn, "notes", node(1), 20).unwrap();
        record_claim(&conn, "notes", node(2), 30).unwrap();
        let claims = claims(&conn).unwrap();
        assert_eq!(claims.len(), 2);
        assert!(claims.contains(&(VaultName::from_static("notes"), node(2))));
        record_untrusted(&conn, node(3), "old", 100).unwrap();
        record_untrusted(&conn, node(3), "older", 50).unwrap();
        assert_eq!(
            former_peers(&conn).unwrap(),
            vec![FormerPeer {
                node_id: node(3),
                label: Label::from_static("older"),
                sent_up_to_ms: 100
            }]
        );
    }
}
