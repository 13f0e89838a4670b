//! The owner: the one place a vault's writes are carried out.
//!
//! - [`Owner`]: the door's checks of tickets, issuing tickets, the ticket epoch, and the
//!   executor every write (and every other change to the store) goes through. (The door
//!   itself, which also answers hellos and reads, is `crate::door`; the owner knows nothing of
//!   the network.)
//! - [`executor`]: a single writer that runs verbs in group-committed SQLite transactions,
//!   each verb together with its journal record.
//! - [`fault`]: test-only crash and stall points (cargo feature `fault-injection`).
//! - [`marks`]: the running marks, the ids a batch may run, written before its transaction so
//!   a crash leaves them `interrupted`.
//! - [`verbs`]: what one write does to the store, as a plain function of the store and time.

pub mod executor;
pub mod fault;
pub mod marks;
pub mod verbs;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferry_core::clock::Clock;
use ferry_peer::outcome::{Refusal, RefusalCode};
use ferry_peer::wire::{TicketAnswer, TicketRequest, WriteRequest, WriteVerb};
use ferry_ticket::{
    DoorContext, NodeId, NodeKey, Ticket, Verb, VerifiedTickets, DEFAULT_TICKET_LIFETIME_MS,
};
use tracing::info;

use crate::names::{Label, VaultName};
use crate::store::{meta, StoreError};
use executor::Executor;

/// The owner's side of a gateway.
#[derive(Debug)]
pub struct Owner {
    executor: Arc<Executor>,
    key: NodeKey,
    epoch: AtomicU64,
    /// Ticket signatures already verified (a caller presents the same ticket on every write).
    verified: Mutex<VerifiedTickets>,
    /// The config's `writers`: vault name to the peer labels allowed to write it.
    writers: BTreeMap<VaultName, Vec<Label>>,
    clock: Arc<dyn Clock>,
}

impl Owner {
    pub fn new(
        executor: Arc<Executor>,
        key: NodeKey,
        epoch: u64,
        writers: BTreeMap<VaultName, Vec<Label>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            executor,
            key,
            epoch: AtomicU64::new(epoch),
            verified: Mutex::new(VerifiedTickets::default()),
            writers,
            clock,
        }
    }

    /// The executor: the store's one writer.
    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// The epoch tickets must carry at this owner's door.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// The door's checks of a write's ticket (SPEC 7 rule 1), before any verb runs. A refusal
    /// is `ticket_refused` at the door: no verb ran, so the caller may renew and send again.
    pub fn check_door(&self, from: NodeId, request: &WriteRequest) -> Result<(), Refusal> {
        let verb = match request.verb {
            WriteVerb::Put { .. } => Verb::Put,
            WriteVerb::Delete { .. } => Verb::Delete,
        };
        let me = self.key.node_id();
        let door = DoorContext {
            owner: &me,
            connection_peer: &from,
            app: &request.app,
            vault: &request.vault,
            verb,
            now_ms: self.clock.unix_ms(),
            current_epoch: self.epoch(),
        };
        let mut verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        request
            .ticket
            .check_at_door_remembering(&door, &mut verified)
            .map_err(|refusal| Refusal {
                reason: Some(refusal.code().to_string()),
                at_door: true,
                ..Refusal::new(
                    RefusalCode::TicketRefused,
                    format!("the ticket was refused at the door: {refusal}"),
                )
            })
    }

    /// A ticket for `from` (trusted as `label`), if its app may use those verbs on that vault
    /// (the config's `writers`; a vault not listed is open to every trusted peer).
    pub fn issue_ticket(&self, from: NodeId, label: &str, request: TicketRequest) -> TicketAnswer {
        if let Some(allowed) = self.writers.get(&request.vault) {
            if !allowed.iter().any(|l| l == label) {
                return TicketAnswer::Refused(Refusal::new(
                    RefusalCode::Forbidden,
                    format!(
                        "this owner's config lets only {allowed:?} write vault {:?}",
                        request.vault
                    ),
                ));
            }
        }
        let now_ms = self.clock.unix_ms();
        TicketAnswer::Issued(Ticket::issue(
            &self.key,
            from,
            request.app,
            request.vault,
            request.verbs,
            now_ms,
            DEFAULT_TICKET_LIFETIME_MS,
            self.epoch(),
        ))
    }

    /// `ferry tickets rotate`: every ticket issued so far is refused from now on.
    pub async fn rotate_tickets(&self) -> Result<u64, StoreError> {
        let epoch = self.executor.apply(meta::rotate_ticket_epoch).await?;
        self.epoch.store(epoch, Ordering::SeqCst);
        info!(
            epoch,
            "ticket epoch rotated; earlier tickets are refused at the door"
        );
        Ok(epoch)
    }
}
