//! Administration: the changes an admin makes through the CLI or the status page (trust,
//! untrust, vault create, follow and unfollow, ticket rotation), each a change to the store
//! through its one writer followed by the components it concerns.

use std::sync::Arc;

use ferry_peer::routes::Route;
use ferry_ticket::NodeId;

use crate::names::{Label, VaultName};
use crate::network::{Network, DIRECTORY_REFRESH_BOUND};
use crate::owner::Owner;
use crate::replication::{FollowError, Replication, UnfollowError};
use crate::store::trust::{self, TrustedPeer};
use crate::store::vaults::VaultRow;
use crate::store::StoreError;
use crate::vaults::Vaults;
use crate::writes::Writes;
use ferry_core::clock::Clock;

/// How long `ferry trust` waits for the new peer's hello.
const TRUST_HELLO_BOUND: std::time::Duration = std::time::Duration::from_secs(1);

/// The admin's operations.
#[derive(Debug)]
pub struct Admin {
    network: Arc<Network>,
    vaults: Arc<Vaults>,
    owner: Arc<Owner>,
    writes: Arc<Writes>,
    replication: Arc<Replication>,
    clock: Arc<dyn Clock>,
}

impl Admin {
    pub fn new(
        network: Arc<Network>,
        vaults: Arc<Vaults>,
        owner: Arc<Owner>,
        writes: Arc<Writes>,
        replication: Arc<Replication>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            network,
            vaults,
            owner,
            writes,
            replication,
            clock,
        }
    }

    /// `ferry trust`: adds the peer to the trust store and to the live book.
    pub async fn trust(
        &self,
        label: Label,
        node_id: NodeId,
        routes: Vec<Route>,
    ) -> Result<TrustedPeer, StoreError> {
        let now_ms = self.clock.unix_ms();
        let peer = self
            .owner
            .executor()
            .apply(move |conn| trust::add(conn, &label, node_id, &routes, now_ms))
            .await?;
        self.network.add_peer(&peer);
        // Greeted at once, so each learns what the other holds now (a vault list, a name two
        // peers own) rather than at the next hello. Bounded: a peer that does not trust this
        // gateway yet refuses at once, and one that is away costs the command at most this.
        self.network
            .hello_peer(peer.node_id, TRUST_HELLO_BOUND)
            .await;
        Ok(peer)
    }

    /// `ferry untrust`: forgets the peer, closes its connections, forgets what it owns and the
    /// tickets it issued.
    pub async fn untrust(&self, label: Label) -> Result<Option<NodeId>, StoreError> {
        let removing = label.clone();
        let sent_up_to_ms =
            crate::settlement::untrust_cover(self.writes.sent_up_to(), self.clock.unix_ms());
        let removed = self
            .owner
            .executor()
            .apply(move |conn| trust::remove(conn, &removing, sent_up_to_ms))
            .await?;
        self.network.remove_peer(&label, removed);
        if let Some(node) = removed {
            self.writes.forget_tickets_of(&node);
        }
        Ok(removed)
    }

    /// `ferry vault create`: a new vault owned here; peers are told at once.
    pub async fn create_vault(&self, name: VaultName) -> Result<VaultRow, StoreError> {
        let row = self.vaults.create_owned(name, self.network.me()).await?;
        self.network.hello_all(DIRECTORY_REFRESH_BOUND).await;
        Ok(row)
    }

    /// `ferry vault follow`: replicate a vault a trusted peer owns.
    pub async fn follow(
        &self,
        vault: VaultName,
        owner_label: Label,
    ) -> Result<VaultRow, FollowError> {
        self.replication.follow(vault, owner_label).await
    }

    /// `ferry vault unfollow`: stop replicating a vault and forget the local copy.
    pub async fn unfollow(&self, vault: VaultName) -> Result<VaultRow, UnfollowError> {
        self.replication.unfollow(vault).await
    }

    /// `ferry tickets rotate`.
    pub async fn rotate_tickets(&self) -> Result<u64, StoreError> {
        self.owner.rotate_tickets().await
    }
}
