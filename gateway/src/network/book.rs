//! Who this gateway trusts and which vaults they own, in memory.
//!
//! [`PeerBook`] mirrors the trust store table; the QUIC server asks it at every handshake, so
//! `ferry trust` and `ferry untrust` take effect for the next connection without a restart.
//! [`Directory`] remembers which trusted peer owns which vault, learned from hellos.

use std::collections::HashMap;
use std::sync::RwLock;

use ferry_peer::tls::TrustedKeys;
use ferry_ticket::NodeId;

use crate::names::{Label, VaultName};
use crate::store::trust::TrustedPeer;

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    // Every writer replaces whole values; a panic mid-write cannot leave a half state.
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The trusted peers, by label.
#[derive(Debug, Default)]
pub struct PeerBook {
    peers: RwLock<Vec<TrustedPeer>>,
}

impl PeerBook {
    pub fn replace_all(&self, peers: Vec<TrustedPeer>) {
        *write(&self.peers) = peers;
    }

    pub fn upsert(&self, peer: TrustedPeer) {
        let mut peers = write(&self.peers);
        peers.retain(|p| p.label != peer.label);
        peers.push(peer);
        peers.sort_by(|a, b| a.label.cmp(&b.label));
    }

    pub fn remove(&self, label: &str) {
        write(&self.peers).retain(|p| p.label != label);
    }

    pub fn all(&self) -> Vec<TrustedPeer> {
        read(&self.peers).clone()
    }

    pub fn by_node(&self, node: &NodeId) -> Option<TrustedPeer> {
        read(&self.peers)
            .iter()
            .find(|p| p.node_id == *node)
            .cloned()
    }

    pub fn label_of(&self, node: &NodeId) -> Option<Label> {
        self.by_node(node).map(|p| p.label)
    }
}

impl TrustedKeys for PeerBook {
    fn is_trusted(&self, id: &NodeId) -> bool {
        read(&self.peers).iter().any(|p| p.node_id == *id)
    }
}

/// Which peers own which vault name, and which peers replicate it, as the peers said in their
/// hellos.
///
/// A vault is its owner's: two trusted peers may each own a vault called `notes` (two people
/// each made one, then trusted each other), and those are two vaults. Every claim of a name is
/// kept, none picked: a name two peers claim is [`Owners::Many`], and calls by that name are
/// refused until the person says which they mean (`docs/protocol.md`, "Vault identity").
#[derive(Debug, Default)]
pub struct Directory {
    owners: RwLock<HashMap<VaultName, Vec<NodeId>>>,
    replicas: RwLock<HashMap<NodeId, Vec<VaultName>>>,
}

/// Who claims to own a vault name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owners {
    /// No trusted peer.
    None,
    /// Exactly one trusted peer.
    One(NodeId),
    /// Two or more trusted peers, each owning a vault of that name (sorted).
    Many(Vec<NodeId>),
}

impl Directory {
    /// Replaces what `peer` owns with `vaults` (a hello is the whole list, not a delta).
    pub fn learn(&self, peer: NodeId, vaults: &[VaultName]) {
        let mut owners = write(&self.owners);
        for claimants in owners.values_mut() {
            claimants.retain(|owner| *owner != peer);
        }
        for vault in vaults {
            let claimants = owners.entry(vault.clone()).or_default();
            if !claimants.contains(&peer) {
                claimants.push(peer);
                claimants.sort();
            }
        }
        owners.retain(|_, claimants| !claimants.is_empty());
    }

    /// Replaces what `peer` replicates with `vaults`.
    pub fn learn_replicas(&self, peer: NodeId, vaults: &[VaultName]) {
        write(&self.replicas).insert(peer, vaults.to_vec());
    }

    /// The peers that replicate `vault`.
    pub fn replicas_of(&self, vault: &str) -> Vec<NodeId> {
        self.replicas_besides(vault, &[])
    }

    /// The peers but `besides` that replicate `vault`, in a stable order.
    pub fn replicas_besides(&self, vault: &str, besides: &[NodeId]) -> Vec<NodeId> {
        let mut peers: Vec<NodeId> = read(&self.replicas)
            .iter()
            .filter(|(peer, vaults)| replicates(peer, vaults, vault, besides))
            .map(|(peer, _)| *peer)
            .collect();
        peers.sort();
        peers
    }

    /// Whether any peer but `besides` replicates `vault` (no list built: asked on every read).
    pub fn has_replica_besides(&self, vault: &str, besides: &[NodeId]) -> bool {
        read(&self.replicas)
            .iter()
            .any(|(peer, vaults)| replicates(peer, vaults, vault, besides))
    }

    pub fn forget(&self, peer: NodeId) {
        let mut owners = write(&self.owners);
        for claimants in owners.values_mut() {
            claimants.retain(|owner| *owner != peer);
        }
        owners.retain(|_, claimants| !claimants.is_empty());
        write(&self.replicas).remove(&peer);
    }

    /// Who claims `vault`.
    pub fn owners_of(&self, vault: &str) -> Owners {
        match read(&self.owners).get(vault).map(Vec::as_slice) {
            None | Some([]) => Owners::None,
            Some([one]) => Owners::One(*one),
            Some(many) => Owners::Many(many.to_vec()),
        }
    }

    /// Every trusted peer that claims `vault` (sorted; empty if none).
    pub fn claimants(&self, vault: &str) -> Vec<NodeId> {
        read(&self.owners).get(vault).cloned().unwrap_or_default()
    }

    /// Every claim, by name then owner: a name may appear once per claiming peer.
    pub fn remote_vaults(&self) -> Vec<(VaultName, NodeId)> {
        let mut list: Vec<_> = read(&self.owners)
            .iter()
            .flat_map(|(vault, owners)| owners.iter().map(move |owner| (vault.clone(), *owner)))
            .collect();
        list.sort();
        list
    }
}

/// `peer`, holding `vaults`, replicates `vault` and is not one of `besides`.
fn replicates(peer: &NodeId, vaults: &[VaultName], vault: &str, besides: &[NodeId]) -> bool {
    !besides.contains(peer) && vaults.iter().any(|v| v == vault)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(name: &'static str) -> VaultName {
        VaultName::from_static(name)
    }

    fn node(byte: u8) -> NodeId {
        NodeId::from_bytes([byte; 32])
    }

    #[test]
    fn every_claim_of_a_name_is_kept_and_none_is_picked() {
        let directory = Directory::default();
        directory.learn(node(2), &[v("notes"), v("photos")]);
        assert_eq!(directory.owners_of("notes"), Owners::One(node(2)));
        directory.learn(node(1), &[v("notes")]);
        assert_eq!(
            directory.owners_of("notes"),
            Owners::Many(vec![node(1), node(2)])
        );
        assert_eq!(directory.remote_vaults().len(), 3);
        // A claim withdrawn (a new hello without it) or a peer forgotten ends the collision.
        directory.learn(node(2), &[v("photos")]);
        assert_eq!(directory.owners_of("notes"), Owners::One(node(1)));
        directory.forget(node(1));
        assert_eq!(directory.owners_of("notes"), Owners::None);
        assert_eq!(directory.owners_of("photos"), Owners::One(node(2)));
    }
}
