//! What this gateway does with requests from peers (the serving side of [`ferry_peer::door`]).
//!
//! Writes pass the door first: the ticket must be this owner's, held by the key on the TLS
//! connection, cover the app, vault and verb, be unexpired and of the current epoch. A refusal
//! there is `401 ticket_refused` with `at_door: true` and is not journaled: no verb ran, so the
//! caller may renew its ticket and send the same request id once more.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_peer::call::WriteCall;
use ferry_peer::door::Service;
use ferry_peer::outcome::{Refusal, RefusalCode};
use ferry_peer::tls::TrustedKeys;
use ferry_peer::wire::{
    CallState, CallStatusRequest, Hello, ReadAnswer, ReadRequest, TicketAnswer, TicketRequest,
    WriteAnswer, WriteRequest, WriteVerb,
};
use ferry_ticket::{DoorContext, NodeId, Ticket, Verb, DEFAULT_TICKET_LIFETIME_MS};
use tracing::Instrument;

use crate::gateway::Gateway;
use crate::store;

/// The peer-facing face of a gateway.
#[derive(Debug, Clone)]
pub struct PeerService(pub Arc<Gateway>);

fn untrusted() -> Refusal {
    Refusal::new(
        RefusalCode::Forbidden,
        "this gateway no longer trusts your node; ask its admin to `ferry trust` it again",
    )
}

fn stopping() -> Refusal {
    Refusal {
        retry_after_ms: Some(1000),
        ..Refusal::new(
            RefusalCode::Busy,
            "the owner is stopping; not carried out, send it again later with the same request id",
        )
    }
}

impl Service for PeerService {
    async fn hello(&self, from: NodeId, hello: Hello) -> Hello {
        if self.0.peers.is_trusted(&from) {
            self.0.directory.learn(from, &hello.owned_vaults);
            self.0
                .directory
                .learn_replicas(from, &hello.replicated_vaults);
            // A peer that greets us is alive: its routes may have come back (a restart).
            self.0.routes.revive_peer(from, Instant::now());
        }
        self.0.own_hello()
    }

    async fn write(&self, from: NodeId, request: WriteRequest) -> WriteAnswer {
        let peer = self.0.peers.label_of(&from).unwrap_or_else(|| from.short());
        let span = tracing::debug_span!(
            "owner_write",
            request_id = %request.request_id,
            app = %request.app,
            peer = %peer
        );
        span.in_scope(|| tracing::debug!(vault = %request.vault, "received at the door"));
        let answer = self
            .write_checked(from, request)
            .instrument(span.clone())
            .await;
        span.in_scope(|| tracing::debug!(?answer, "answered"));
        answer
    }

    async fn read(&self, from: NodeId, request: ReadRequest) -> ReadAnswer {
        if !self.0.peers.is_trusted(&from) {
            return ReadAnswer::Refused(untrusted());
        }
        self.0.metrics.peer_read_served();
        let ReadRequest { vault, verb, .. } = request;
        match self.0.reader.read_verb(vault.clone(), verb).await {
            Ok(Some(answer)) => answer,
            Ok(None) => ReadAnswer::Refused(Refusal::new(
                RefusalCode::UnknownVault,
                format!("this gateway holds no vault named {vault:?}"),
            )),
            Err(err) => ReadAnswer::Refused(Refusal {
                retry_after_ms: Some(1000),
                ..Refusal::new(RefusalCode::Busy, format!("the store failed: {err}"))
            }),
        }
    }

    async fn issue_ticket(&self, from: NodeId, request: TicketRequest) -> TicketAnswer {
        let Some(label) = self.0.peers.label_of(&from) else {
            return TicketAnswer::Refused(untrusted());
        };
        if let Err(detail) = self.0.may_write(&label, &request.vault) {
            return TicketAnswer::Refused(Refusal::new(RefusalCode::Forbidden, detail));
        }
        self.0.metrics.ticket_issued();
        TicketAnswer::Issued(Ticket::issue(
            &self.0.key,
            from,
            request.app,
            request.vault,
            request.verbs,
            store::unix_ms(),
            DEFAULT_TICKET_LIFETIME_MS,
            self.0.ticket_epoch(),
        ))
    }

    async fn call_status(&self, from: NodeId, request: CallStatusRequest) -> Option<CallState> {
        // A peer untrusted since its connection opened gets no tombstones written for it.
        if !self.0.peers.is_trusted(&from) {
            return None;
        }
        self.0.executor.status(from, request.request_id).await.ok()
    }
}

impl PeerService {
    /// A write from `from`: the door's checks (SPEC 7 rule 1), then the executor.
    async fn write_checked(&self, from: NodeId, request: WriteRequest) -> WriteAnswer {
        // The TLS handshake checked trust when the connection opened; an untrust since then
        // must still stop this peer's writes on that connection.
        if !self.0.peers.is_trusted(&from) {
            return WriteAnswer::Refused(untrusted());
        }
        let verb = match request.verb {
            WriteVerb::Put { .. } => Verb::Put,
            WriteVerb::Delete { .. } => Verb::Delete,
        };
        let me = self.0.node_id();
        let door = DoorContext {
            owner: &me,
            connection_peer: &from,
            app: &request.app,
            vault: &request.vault,
            verb,
            now_ms: store::unix_ms(),
            current_epoch: self.0.ticket_epoch(),
        };
        let checked = request
            .ticket
            .check_at_door_remembering(&door, &mut self.0.verified_tickets());
        if let Err(refusal) = checked {
            self.0.metrics.door_refusal();
            return WriteAnswer::Refused(Refusal {
                reason: Some(refusal.code().to_string()),
                at_door: true,
                ..Refusal::new(
                    RefusalCode::TicketRefused,
                    format!("the ticket was refused at the door: {refusal}"),
                )
            });
        }
        self.0.metrics.peer_write_served();
        let deadline = Instant::now() + Duration::from_millis(u64::from(request.deadline_ms));
        let call = WriteCall {
            request_id: request.request_id,
            app: request.app,
            vault: request.vault,
            verb: request.verb,
            priority: request.priority,
        };
        match self.0.executor.submit(from, call, deadline).await {
            Ok(answer) => answer,
            Err(_) => WriteAnswer::Refused(stopping()),
        }
    }
}
