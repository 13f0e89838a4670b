//! The vaults this gateway holds, owned or replicated: the list in memory (every call asks
//! where its vault lives, so it is answered without a database read; the database is the
//! truth and this mirrors it on every change), the reading connections for the local copy, and
//! the changes to the vault list itself, made through the store's one writer (the executor).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use ferry_core::clock::Clock;
use ferry_peer::wire::{Hello, ReadAnswer, ReadVerb, WireChange};
use ferry_ticket::NodeId;

use crate::names::{Label, VaultName};
use crate::owner::executor::Executor;
use crate::reader::Reader;
use crate::store::claims;
use crate::store::vaults::{self, Removal, Role, VaultRow};
use crate::store::StoreError;

/// The local vaults and their copy.
#[derive(Debug)]
pub struct Vaults {
    rows: RwLock<HashMap<VaultName, VaultRow>>,
    /// Every (vault name, owner) a write was sent to from here, as `vault_claims` holds it
    /// (`store::claims`): asked before every remote write, so only the first write of a name
    /// to an owner writes it down.
    claims: RwLock<BTreeMap<VaultName, BTreeSet<NodeId>>>,
    reader: Reader,
    writer: Arc<Executor>,
    clock: Arc<dyn Clock>,
}

impl Vaults {
    /// The vaults `rows` (as the database holds them at start).
    pub fn new(
        rows: Vec<VaultRow>,
        claims: BTreeSet<(VaultName, NodeId)>,
        reader: Reader,
        writer: Arc<Executor>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            rows: RwLock::new(rows.into_iter().map(|v| (v.name.clone(), v)).collect()),
            claims: RwLock::new(claims.into_iter().fold(
                BTreeMap::<VaultName, BTreeSet<NodeId>>::new(),
                |mut by_name, (name, owner)| {
                    by_name.entry(name).or_default().insert(owner);
                    by_name
                },
            )),
            reader,
            writer,
            clock,
        }
    }

    /// The vault called `name`, if this gateway holds it.
    pub fn get(&self, name: &str) -> Option<VaultRow> {
        self.rows
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Every vault held here, by name.
    pub fn rows(&self) -> Vec<VaultRow> {
        let mut rows: Vec<VaultRow> = self
            .rows
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        rows
    }

    /// Whether this gateway owns any vault.
    pub fn owns_any(&self) -> bool {
        self.rows
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .any(|v| v.role == Role::Owner)
    }

    /// Writes down, durably, that writes of `vault` go to `owner`, before the first one
    /// leaves: settling then knows every machine an answered write of `vault` may have run on,
    /// even after a restart or a second claim of the name (`Settlement`).
    pub async fn note_claim(&self, vault: &VaultName, owner: NodeId) -> Result<(), StoreError> {
        // Asked on every remote write: a lookup by the borrowed name, nothing allocated.
        if self
            .claims
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(vault)
            .is_some_and(|owners| owners.contains(&owner))
        {
            return Ok(());
        }
        let now_ms = self.clock.unix_ms();
        let name = vault.clone();
        self.writer
            .apply(move |conn| claims::record_claim(conn, &name, owner, now_ms))
            .await?;
        self.claims
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(vault.clone())
            .or_default()
            .insert(owner);
        Ok(())
    }

    /// The owners writes of `vault` were ever sent to from here.
    pub fn claimed_owners(&self, vault: &str) -> Vec<NodeId> {
        self.claims
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(vault)
            .map(|owners| owners.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Every owner any write was ever sent to from here.
    pub fn every_claimed_owner(&self) -> BTreeSet<NodeId> {
        self.claims
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .flatten()
            .copied()
            .collect()
    }

    fn remember(&self, row: VaultRow) {
        self.rows
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(row.name.clone(), row);
    }

    /// This gateway's account of itself for peers, called `label` (from memory).
    pub fn hello(&self, label: &Label) -> Hello {
        hello_of(label.to_string(), &self.rows())
    }

    /// `ferry vault create`: a new vault owned by `owner` (this node).
    pub async fn create_owned(
        &self,
        name: VaultName,
        owner: NodeId,
    ) -> Result<VaultRow, StoreError> {
        let now_ms = self.clock.unix_ms();
        let row = self
            .writer
            .apply(move |conn| vaults::create_owned(conn, &name, owner, now_ms))
            .await?;
        self.remember(row.clone());
        Ok(row)
    }

    /// `ferry vault follow`: a replica of `name`, owned by `owner`.
    pub async fn create_replica(
        &self,
        name: VaultName,
        owner: NodeId,
    ) -> Result<VaultRow, StoreError> {
        let now_ms = self.clock.unix_ms();
        let row = self
            .writer
            .apply(move |conn| vaults::create_replica(conn, &name, owner, now_ms))
            .await?;
        self.remember(row.clone());
        Ok(row)
    }

    /// `ferry vault unfollow`: forgets the replica `name` and its records (an owned vault is
    /// never removed: [`Removal::Owned`]).
    pub async fn remove_replica(&self, name: VaultName) -> Result<Removal, StoreError> {
        let removing = name.clone();
        let removal = self
            .writer
            .apply(move |conn| vaults::remove_replica(conn, &removing))
            .await?;
        if let Removal::Removed(_) = removal {
            self.rows
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&name);
            // Its waiters are answered at their deadline; a replica followed anew starts from
            // revision 0 with a watch of its own.
            self.writer.revisions().forget(&name);
        }
        Ok(removal)
    }

    /// Applies a page of `owner`'s changes after `since` to a replica and moves its cursor to
    /// `next`, in one transaction, not fsynced of its own (`Executor::apply_rederivable`: the
    /// owner holds every change durably and gives it again with the same revision). `false`:
    /// nothing applied, the replica is no longer the one at `since` (`vaults::apply_changes`).
    pub async fn apply_changes(
        &self,
        name: VaultName,
        owner: NodeId,
        since: u64,
        changes: Vec<WireChange>,
        next: u64,
    ) -> Result<bool, StoreError> {
        let vault = name.clone();
        let applied = self
            .writer
            .apply_rederivable(move |conn| {
                vaults::apply_changes(conn, &name, owner, since, &changes, next)
            })
            .await?;
        if applied {
            self.writer.revisions().advanced(&vault, next);
        }
        Ok(applied)
    }

    /// Each local vault's newest committed revision (the owner's writes, a replica's pages).
    pub fn revisions(&self) -> &Arc<crate::revisions::Revisions> {
        self.writer.revisions()
    }

    /// Answers a read verb from the local copy of `vault` (`None`: no copy here).
    pub async fn read_verb(
        &self,
        vault: VaultName,
        verb: ReadVerb,
    ) -> Result<Option<ReadAnswer>, StoreError> {
        self.reader.read_verb(vault, verb).await
    }

    /// The reading connections, for the other tables (the call log, the journal).
    pub fn reader(&self) -> &Reader {
        &self.reader
    }
}

/// The hello of a node called `label` that keeps `vaults`.
pub fn hello_of(label: String, vaults: &[VaultRow]) -> Hello {
    let names = |role| {
        vaults
            .iter()
            .filter(|v| v.role == role)
            .map(|v| v.name.clone())
            .collect()
    };
    Hello {
        label_hint: label,
        owned_vaults: names(Role::Owner),
        replicated_vaults: names(Role::Replica),
        release: Some(ferry_peer::wire::RELEASE.to_string()),
    }
}
