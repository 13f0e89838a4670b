//! The trust store: peers by label, each with its node id and the routes the admin gave.

use ferry_peer::routes::Route;
use ferry_ticket::NodeId;
use rusqlite::{params, Connection, OptionalExtension};

use super::{stored_name, StoreError};
use crate::names::Label;

/// A trusted peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedPeer {
    pub label: Label,
    pub node_id: NodeId,
    pub routes: Vec<Route>,
}

/// Trusts `node_id` under `label`, adding `routes`. Trusting the same node under the same label
/// again adds routes; a label or node already used otherwise is refused with what to do.
pub fn add(
    conn: &Connection,
    label: &Label,
    node_id: NodeId,
    routes: &[Route],
    now_ms: u64,
) -> Result<TrustedPeer, StoreError> {
    super::in_transaction(conn, |tx| add_in(tx, label, node_id, routes, now_ms))?;
    get(conn, label)?.ok_or_else(|| StoreError::Corrupt {
        detail: format!("peer {label:?} vanished"),
    })
}

fn add_in(
    tx: &Connection,
    label: &Label,
    node_id: NodeId,
    routes: &[Route],
    now_ms: u64,
) -> Result<(), StoreError> {
    let by_label: Option<String> = tx
        .query_row(
            "SELECT node_id FROM peers WHERE label = ?1",
            [label.as_str()],
            |r| r.get(0),
        )
        .optional()?;
    let by_node: Option<String> = tx
        .query_row(
            "SELECT label FROM peers WHERE node_id = ?1",
            [node_id.to_string()],
            |r| r.get(0),
        )
        .optional()?;
    match (by_label, by_node) {
        (Some(existing), _) if existing != node_id.to_string() => {
            return Err(StoreError::LabelTaken {
                label: label.clone(),
            })
        }
        (_, Some(other)) if other != label.as_str() => {
            return Err(StoreError::NodeTaken {
                node: node_id.to_string(),
                label: other,
            })
        }
        (Some(_), _) => {}
        (None, _) => {
            tx.execute(
                "INSERT INTO peers (label, node_id, added_ms) VALUES (?1, ?2, ?3)",
                params![label.as_str(), node_id.to_string(), now_ms as i64],
            )?;
        }
    }
    for route in routes {
        tx.execute(
            "INSERT OR IGNORE INTO peer_routes (label, route) VALUES (?1, ?2)",
            params![label.as_str(), route.to_string()],
        )?;
    }
    Ok(())
}

/// What a peer last said of its version: the protocol its connection agreed on and the release
/// its hello named (`None` from a protocol 1 peer, whose hello has no release).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerVersion {
    pub protocol: u16,
    pub release: Option<String>,
}

/// Records what `node` last said of its version (schema 3). A node not trusted: nothing.
pub fn record_version(
    conn: &Connection,
    node: NodeId,
    version: &PeerVersion,
) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE peers SET protocol = ?1, release = ?2 WHERE node_id = ?3",
        params![
            i64::from(version.protocol),
            version.release,
            node.to_string()
        ],
    )?;
    Ok(())
}

/// What each trusted peer last said of its version, for those that said anything.
pub fn versions(conn: &Connection) -> Result<Vec<(NodeId, PeerVersion)>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT node_id, protocol, release FROM peers WHERE protocol IS NOT NULL",
    )?;
    let rows = stmt.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, i64>(1)?,
            row.get::<_, Option<String>>(2)?,
        ))
    })?;
    let mut versions = Vec::new();
    for row in rows {
        let (node, protocol, release) = row?;
        let (Ok(node), Ok(protocol)) = (node.parse::<NodeId>(), u16::try_from(protocol)) else {
            return Err(StoreError::Corrupt {
                detail: format!("peer {node} has a bad node id or protocol {protocol}"),
            });
        };
        versions.push((node, PeerVersion { protocol, release }));
    }
    Ok(versions)
}

/// Forgets the peer called `label`, remembering in the same transaction that ids stamped up to
/// `sent_up_to_ms` may have gone to it (settling must not fence them without it); returns its
/// node id if it was trusted.
pub fn remove(
    conn: &Connection,
    label: &Label,
    sent_up_to_ms: u64,
) -> Result<Option<NodeId>, StoreError> {
    let Some(peer) = get(conn, label)? else {
        return Ok(None);
    };
    super::in_transaction(conn, |tx| {
        tx.execute("DELETE FROM peers WHERE label = ?1", [label.as_str()])?;
        super::claims::record_untrusted(tx, peer.node_id, label, sent_up_to_ms)
    })?;
    Ok(Some(peer.node_id))
}

pub fn get(conn: &Connection, label: &str) -> Result<Option<TrustedPeer>, StoreError> {
    Ok(list(conn)?.into_iter().find(|peer| peer.label == *label))
}

pub fn list(conn: &Connection) -> Result<Vec<TrustedPeer>, StoreError> {
    let mut peers = Vec::new();
    let mut stmt = conn.prepare_cached("SELECT label, node_id FROM peers ORDER BY label")?;
    let rows = stmt.query_map([], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
    })?;
    for row in rows {
        let (label, node_id) = row?;
        let node_id = node_id.parse().map_err(|_| StoreError::Corrupt {
            detail: format!("peer {label:?} has a bad node id"),
        })?;
        let mut route_stmt =
            conn.prepare_cached("SELECT route FROM peer_routes WHERE label = ?1 ORDER BY rowid")?;
        let routes = route_stmt
            .query_map([&label], |row| row.get::<_, String>(0))?
            .map(|text| {
                let text = text?;
                Route::parse(&text).map_err(|_| StoreError::Corrupt {
                    detail: format!("peer {label:?} has a bad route {text:?}"),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        peers.push(TrustedPeer {
            label: stored_name(label, "a trusted peer's label")?,
            node_id,
            routes,
        });
    }
    Ok(peers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::open_temp;
    use ferry_ticket::NodeKey;

    #[test]
    fn labels_and_nodes_are_each_trusted_once() {
        let (_dir, conn) = open_temp();
        let a = NodeKey::from_secret_bytes([1; 32]).node_id();
        let b = NodeKey::from_secret_bytes([2; 32]).node_id();
        let route = Route::parse("127.0.0.1:7000").unwrap();
        add(&conn, &Label::from_static("a"), a, &[route], 0).unwrap();
        let again = add(
            &conn,
            &Label::from_static("a"),
            a,
            &[Route::parse("100.77.0.1:7000").unwrap()],
            0,
        )
        .unwrap();
        assert_eq!(again.routes.len(), 2);
        assert!(matches!(
            add(&conn, &Label::from_static("a"), b, &[], 0),
            Err(StoreError::LabelTaken { .. })
        ));
        assert!(matches!(
            add(&conn, &Label::from_static("z"), a, &[], 0),
            Err(StoreError::NodeTaken { .. })
        ));
        assert_eq!(remove(&conn, &Label::from_static("a"), 1).unwrap(), Some(a));
        assert_eq!(list(&conn).unwrap(), vec![]);
    }
}
