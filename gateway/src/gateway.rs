//! One running gateway's state and the operations the local API, the CLI and peers call.
//!
//! A call starts by finding where its vault lives ([`Gateway::place_of`]): here (this gateway
//! owns or replicates it), at a trusted peer that said it owns it, or nowhere known, in which
//! case the peers are asked once more before the answer is `unknown_vault`.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ferry_peer::call::{Caller, ReadError, Target};
use ferry_peer::outcome::{NotSentReason, RefusalCode, WriteOutcome};
use ferry_peer::routes::Route;
use ferry_peer::transport::CLOSE_UNTRUSTED;
use ferry_peer::wire::{
    Hello, Priority, ReadAnswer, ReadRequest, ReadVerb, RequestId, WriteRequest, WriteVerb,
};
use ferry_ticket::{NodeId, NodeKey};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::debug;

use crate::config::Config;
use crate::home::Home;
use crate::metrics::Metrics;
use crate::owner::executor::Executor;
use crate::peers::{Directory, PeerBook};
use crate::reader::{self, Reader};
use crate::store::trust::{self, TrustedPeer};
use crate::store::vaults::{self, Role, VaultRow};
use crate::store::{self, StoreError};

/// How long asking the peers "who owns this vault?" may take at most.
const DIRECTORY_REFRESH_BOUND: Duration = Duration::from_secs(2);

/// Where a vault lives, from this gateway's point of view.
#[derive(Debug, Clone)]
pub enum Place {
    /// This gateway owns or replicates it.
    Local(VaultRow),
    /// A trusted peer owns it.
    Remote(Target),
}

/// A call refused here, before anything was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRefusal {
    pub code: RefusalCode,
    pub detail: String,
}

impl LocalRefusal {
    fn unknown_vault(vault: &str) -> Self {
        Self {
            code: RefusalCode::UnknownVault,
            detail: format!("no trusted gateway owns a vault named {vault:?}; create it with `ferry vault create {vault}` on its owner, or trust the owner"),
        }
    }
}

/// Where a read's answer came from (`X-Ferry-Source`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadSource {
    Local,
    Owner,
}

impl ReadSource {
    pub fn header(&self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Owner => "owner",
        }
    }
}

/// Why a read has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadFailure {
    Refused(LocalRefusal),
    Unavailable { detail: String },
}

/// The running gateway.
#[derive(Debug)]
pub struct Gateway {
    pub home: Home,
    pub config: Config,
    pub key: NodeKey,
    pub label: String,
    pub token: String,
    pub executor: Executor,
    pub reader: Reader,
    pub peers: Arc<PeerBook>,
    pub directory: Directory,
    pub caller: Caller,
    pub metrics: Metrics,
    pub started: Instant,
    pub quic_addr: SocketAddr,
    pub api_addr: OnceLock<SocketAddr>,
    stopping: watch::Sender<bool>,
}

/// Everything [`Gateway::new`] needs that the daemon built first.
#[derive(Debug)]
pub struct Parts {
    pub home: Home,
    pub config: Config,
    pub key: NodeKey,
    pub label: String,
    pub token: String,
    pub executor: Executor,
    pub reader: Reader,
    pub peers: Arc<PeerBook>,
    pub caller: Caller,
    pub quic_addr: SocketAddr,
}

impl Gateway {
    pub fn new(parts: Parts) -> Self {
        Self {
            home: parts.home,
            config: parts.config,
            key: parts.key,
            label: parts.label,
            token: parts.token,
            executor: parts.executor,
            reader: parts.reader,
            peers: parts.peers,
            directory: Directory::default(),
            caller: parts.caller,
            metrics: Metrics::default(),
            started: Instant::now(),
            quic_addr: parts.quic_addr,
            api_addr: OnceLock::new(),
            stopping: watch::Sender::new(false),
        }
    }

    pub fn node_id(&self) -> NodeId {
        self.key.node_id()
    }

    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Announces the stop to everything watching: the API, the peer server, the accept loop.
    pub fn begin_stop(&self) {
        self.stopping.send_replace(true);
    }

    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// This gateway's account of itself for peers.
    pub async fn own_hello(&self) -> Result<Hello, StoreError> {
        let vaults = self.reader.run(vaults::list).await?;
        let names = |role| {
            vaults
                .iter()
                .filter(|v| v.role == role)
                .map(|v| v.name.clone())
                .collect()
        };
        Ok(Hello {
            label_hint: self.label.clone(),
            owned_vaults: names(Role::Owner),
            replicated_vaults: names(Role::Replica),
        })
    }

    /// Exchanges hellos with every trusted peer at once, within `bound`; learns who owns what.
    /// Peers that do not answer are skipped: this is a refresh, not a requirement.
    pub async fn hello_all(self: &Arc<Self>, bound: Duration) {
        let Ok(hello) = self.own_hello().await else {
            return;
        };
        let deadline = Instant::now() + bound;
        let mut asks = JoinSet::new();
        for peer in self.peers.all() {
            let Some(target) = self.peers.target(&peer.node_id) else {
                continue;
            };
            let gateway = self.clone();
            let hello = hello.clone();
            asks.spawn(async move {
                match gateway.caller.hello(&target, hello, deadline).await {
                    Ok(theirs) => gateway.directory.learn(target.node, &theirs.owned_vaults),
                    Err(err) => debug!(peer = %target.label, %err, "hello not answered"),
                }
            });
        }
        while asks.join_next().await.is_some() {}
    }

    /// Where `vault` lives. Asks the peers once if nobody is known to own it.
    pub async fn place_of(
        self: &Arc<Self>,
        vault: &str,
        deadline: Instant,
    ) -> Result<Place, ReadFailure> {
        let name = vault.to_string();
        let local = self
            .reader
            .run(move |conn| vaults::get(conn, &name))
            .await
            .map_err(|err| ReadFailure::Unavailable {
                detail: err.to_string(),
            })?;
        if let Some(row) = local {
            return Ok(Place::Local(row));
        }
        if let Some(target) = self.remote_owner(vault) {
            return Ok(Place::Remote(target));
        }
        let bound = deadline
            .saturating_duration_since(Instant::now())
            .min(DIRECTORY_REFRESH_BOUND);
        self.hello_all(bound).await;
        self.remote_owner(vault)
            .map(Place::Remote)
            .ok_or_else(|| ReadFailure::Refused(LocalRefusal::unknown_vault(vault)))
    }

    fn remote_owner(&self, vault: &str) -> Option<Target> {
        let owner = self.directory.owner_of(vault)?;
        self.peers.target(&owner)
    }

    /// A write from a local app: carried out here if this gateway owns the vault, else sent to
    /// the owner at most once.
    pub async fn write(
        self: &Arc<Self>,
        app: String,
        vault: String,
        verb: WriteVerb,
        request_id: RequestId,
        deadline: Instant,
    ) -> Result<(WriteOutcome, Option<String>), LocalRefusal> {
        if self.is_stopping() {
            return Ok((
                WriteOutcome::not_sent(NotSentReason::Stopping, "this gateway is stopping"),
                None,
            ));
        }
        let place = match self.place_of(&vault, deadline).await {
            Ok(place) => place,
            Err(ReadFailure::Refused(refusal)) => return Err(refusal),
            Err(ReadFailure::Unavailable { detail }) => {
                return Ok((WriteOutcome::not_sent(NotSentReason::NoRoute, detail), None))
            }
        };
        let request = WriteRequest {
            request_id,
            app,
            vault,
            verb,
            deadline_ms: remaining_ms(deadline),
            priority: Priority::Interactive,
        };
        let target = match place {
            Place::Local(row) if row.role == Role::Owner => {
                let outcome = match self
                    .executor
                    .submit(self.node_id(), request, deadline)
                    .await
                {
                    Ok(answer) => WriteOutcome::Answered(answer),
                    Err(err) => WriteOutcome::not_sent(NotSentReason::Stopping, err.to_string()),
                };
                return Ok((outcome, Some(self.label.clone())));
            }
            Place::Local(row) => match self.peers.target(&row.owner) {
                Some(target) => target,
                None => {
                    return Ok((
                        WriteOutcome::not_sent(
                            NotSentReason::NoRoute,
                            format!(
                                "this gateway replicates {:?} but does not trust its owner",
                                row.name
                            ),
                        ),
                        None,
                    ))
                }
            },
            Place::Remote(target) => target,
        };
        let outcome = self.caller.write(&target, request, deadline).await;
        Ok((outcome, Some(target.label)))
    }

    /// A read from a local app: from this gateway's copy if it has one, else from the owner.
    pub async fn read(
        self: &Arc<Self>,
        app: String,
        vault: String,
        verb: ReadVerb,
        deadline: Instant,
    ) -> Result<(ReadAnswer, ReadSource), ReadFailure> {
        match self.place_of(&vault, deadline).await? {
            Place::Local(_) => {
                let answer = self
                    .reader
                    .run(move |conn| reader::read_local(conn, &vault, &verb))
                    .await
                    .map_err(|err| ReadFailure::Unavailable {
                        detail: err.to_string(),
                    })?
                    .ok_or_else(|| ReadFailure::Unavailable {
                        detail: "the vault vanished while being read".into(),
                    })?;
                Ok((answer, ReadSource::Local))
            }
            Place::Remote(target) => {
                let request = ReadRequest {
                    app,
                    vault,
                    verb,
                    deadline_ms: remaining_ms(deadline),
                };
                match self.caller.read(&target, request, deadline).await {
                    Ok(answer) => Ok((answer, ReadSource::Owner)),
                    Err(
                        err @ (ReadError::NoRoute { .. }
                        | ReadError::Unavailable { .. }
                        | ReadError::GoingAway { .. }),
                    ) => Err(ReadFailure::Unavailable {
                        detail: err.to_string(),
                    }),
                }
            }
        }
    }

    /// `ferry trust`: adds the peer to the trust store and to the live book.
    pub async fn trust(
        self: &Arc<Self>,
        label: String,
        node_id: NodeId,
        routes: Vec<Route>,
    ) -> Result<TrustedPeer, StoreError> {
        let peer = self
            .reader
            .run(move |conn| trust::add(conn, &label, node_id, &routes, store::unix_ms()))
            .await?;
        self.peers.upsert(peer.clone());
        Ok(peer)
    }

    /// `ferry untrust`: forgets the peer, closes its connections, forgets what it owns.
    pub async fn untrust(self: &Arc<Self>, label: String) -> Result<Option<NodeId>, StoreError> {
        let removed_label = label.clone();
        let removed = self
            .reader
            .run(move |conn| trust::remove(conn, &label))
            .await?;
        self.peers.remove(&removed_label);
        if let Some(node) = removed {
            self.caller
                .pool()
                .drop_peer(node, CLOSE_UNTRUSTED, b"untrusted");
            self.directory.forget(node);
        }
        Ok(removed)
    }

    /// `ferry vault create`: a new vault owned here; peers are told at once.
    pub async fn create_vault(self: &Arc<Self>, name: String) -> Result<VaultRow, StoreError> {
        let owner = self.node_id();
        let row = self
            .reader
            .run(move |conn| vaults::create_owned(conn, &name, owner, store::unix_ms()))
            .await?;
        self.hello_all(DIRECTORY_REFRESH_BOUND).await;
        Ok(row)
    }
}

fn remaining_ms(deadline: Instant) -> u32 {
    deadline
        .saturating_duration_since(Instant::now())
        .as_millis()
        .min(u128::from(u32::MAX)) as u32
}
