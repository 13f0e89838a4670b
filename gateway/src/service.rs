//! What this gateway does with requests from peers (the serving side of [`ferry_peer::door`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_peer::door::Service;
use ferry_peer::outcome::{Refusal, RefusalCode};
use ferry_peer::tls::TrustedKeys;
use ferry_peer::wire::{Hello, ReadAnswer, ReadRequest, WriteAnswer, WriteRequest};
use ferry_ticket::NodeId;

use crate::gateway::Gateway;
use crate::reader;

/// The peer-facing face of a gateway.
#[derive(Debug, Clone)]
pub struct PeerService(pub Arc<Gateway>);

fn untrusted() -> Refusal {
    Refusal::new(
        RefusalCode::Forbidden,
        "this gateway no longer trusts your node; ask its admin to `ferry trust` it again",
    )
}

impl Service for PeerService {
    async fn hello(&self, from: NodeId, hello: Hello) -> Hello {
        if self.0.peers.is_trusted(&from) {
            self.0.directory.learn(from, &hello.owned_vaults);
        }
        match self.0.own_hello().await {
            Ok(own) => own,
            Err(_) => Hello {
                label_hint: self.0.label.clone(),
                owned_vaults: Vec::new(),
                replicated_vaults: Vec::new(),
            },
        }
    }

    async fn write(&self, from: NodeId, request: WriteRequest) -> WriteAnswer {
        // The TLS handshake checked trust when the connection opened; an untrust since then
        // must still stop this peer's writes on that connection.
        if !self.0.peers.is_trusted(&from) {
            return WriteAnswer::Refused(untrusted());
        }
        self.0.metrics.peer_write_served();
        let deadline = Instant::now() + Duration::from_millis(u64::from(request.deadline_ms));
        match self.0.executor.submit(from, request, deadline).await {
            Ok(answer) => answer,
            Err(err) => WriteAnswer::Refused(Refusal {
                retry_after_ms: Some(1000),
                ..Refusal::new(
                    RefusalCode::Busy,
                    format!("{err}; not carried out, send it again later with the same request id"),
                )
            }),
        }
    }

    async fn read(&self, from: NodeId, request: ReadRequest) -> ReadAnswer {
        if !self.0.peers.is_trusted(&from) {
            return ReadAnswer::Refused(untrusted());
        }
        self.0.metrics.peer_read_served();
        let ReadRequest { vault, verb, .. } = request;
        let name = vault.clone();
        match self
            .0
            .reader
            .run(move |conn| reader::read_local(conn, &name, &verb))
            .await
        {
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
}
