//! One running gateway's state and the operations the local API, the CLI and peers call.
//!
//! A call starts by finding where its vault lives ([`Gateway::place_of`]): here (this gateway
//! owns or replicates it), at a trusted peer that said it owns it, or nowhere known, in which
//! case the peers are asked once more before the answer is `unknown_vault`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ferry_peer::call::{Caller, ReadError, Target, TicketSource, WriteCall};
use ferry_peer::outcome::{NotSentReason, RefusalCode, UnknownReason, WriteOutcome};
use ferry_peer::route_table::RouteTable;
use ferry_peer::routes::Route;
use ferry_peer::transport::CLOSE_UNTRUSTED;
use ferry_peer::wire::{
    Hello, Priority, ReadAnswer, ReadRequest, ReadVerb, RequestId, TicketAnswer, TicketRequest,
    WriteAnswer, WriteVerb,
};
use ferry_ticket::{NodeId, NodeKey, Ticket, TicketCache, VerbSet, VerifiedTickets};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tracing::{debug, info};

use crate::call_log::{CallLog, End};
use crate::config::Config;
use crate::home::Home;
use crate::metrics::Metrics;
use crate::owner::executor::Executor;
use crate::peers::{Directory, PeerBook};
use crate::reader::Reader;
use crate::settlement::InFlight;
use crate::store::calls::{CallRow, RowState};
use crate::store::trust::{self, TrustedPeer};
use crate::store::vaults::{self, Role, VaultRow};
use crate::store::{self, meta, StoreError};
use crate::tasks::TaskCounter;

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
    pub routes: Arc<RouteTable>,
    /// Gateways seen on the LAN, trusted or not.
    pub seen: crate::discovery::SeenPeers,
    pub metrics: Metrics,
    pub started: Instant,
    pub quic_addr: SocketAddr,
    pub api_addr: OnceLock<SocketAddr>,
    stopping: watch::Sender<bool>,
    tickets: Mutex<TicketCache>,
    ticket_epoch: AtomicU64,
    incoming: Mutex<Vec<(NodeId, quinn::Connection)>>,
    /// Wakes the background settler when a call ends `outcome_unknown`.
    pub(crate) settle_wake: Notify,
    /// The writes this gateway sent (or is sending) to owners, on disk.
    pub(crate) call_log: CallLog,
    /// The writes this process is carrying out now.
    pub(crate) in_flight: Arc<InFlight>,
    /// The tasks carrying out apps' writes: they outlive the app's HTTP request (an app that
    /// gives up does not cut a write short), and a stop waits for them.
    pub write_tasks: TaskCounter,
    verified_tickets: Mutex<VerifiedTickets>,
    cache: Mutex<ferry_cache::RecordCache>,
    monotonic: Mutex<ferry_cache::MonotonicReads>,
    /// Each replicated vault's sync progress.
    pub sync: crate::replication::SyncBoard,
    /// Long-running jobs started after start-up (replica syncs); aborted when the gateway
    /// stops.
    background: Mutex<JoinSet<()>>,
    /// The vaults this gateway owns or replicates, by name: every call asks, so it is answered
    /// from memory (the database is the truth; this mirrors it on every change).
    local_vaults: std::sync::RwLock<std::collections::HashMap<String, VaultRow>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is one map operation; a panic inside cannot leave a half state.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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
    pub call_log: CallLog,
    pub peers: Arc<PeerBook>,
    pub caller: Caller,
    pub quic_addr: SocketAddr,
    pub ticket_epoch: u64,
    /// The vaults in the database at start.
    pub local_vaults: Vec<VaultRow>,
}

impl Gateway {
    pub fn new(parts: Parts) -> Self {
        let cache = ferry_cache::RecordCache::new(
            parts.config.cache_max_bytes,
            parts.config.cache_max_entries,
        );
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
            routes: parts.caller.routes().clone(),
            seen: crate::discovery::SeenPeers::default(),
            caller: parts.caller,
            metrics: Metrics::default(),
            started: Instant::now(),
            quic_addr: parts.quic_addr,
            api_addr: OnceLock::new(),
            stopping: watch::Sender::new(false),
            tickets: Mutex::new(TicketCache::default()),
            ticket_epoch: AtomicU64::new(parts.ticket_epoch),
            incoming: Mutex::new(Vec::new()),
            settle_wake: Notify::new(),
            call_log: parts.call_log,
            in_flight: Arc::new(InFlight::default()),
            write_tasks: TaskCounter::default(),
            verified_tickets: Mutex::new(VerifiedTickets::default()),
            cache: Mutex::new(cache),
            monotonic: Mutex::new(ferry_cache::MonotonicReads::default()),
            sync: crate::replication::SyncBoard::default(),
            background: Mutex::new(JoinSet::new()),
            local_vaults: std::sync::RwLock::new(
                parts
                    .local_vaults
                    .into_iter()
                    .map(|v| (v.name.clone(), v))
                    .collect(),
            ),
        }
    }

    /// The owner's memory of ticket signatures it verified (see `VerifiedTickets`).
    pub fn verified_tickets(&self) -> std::sync::MutexGuard<'_, VerifiedTickets> {
        lock(&self.verified_tickets)
    }

    /// Runs `job` until it ends or the gateway stops.
    pub fn spawn_background(&self, job: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut jobs = lock(&self.background);
        while jobs.try_join_next().is_some() {}
        jobs.spawn(job);
    }

    /// Stops every background job.
    pub fn stop_background(&self) {
        lock(&self.background).abort_all();
    }

    /// The read cache.
    pub fn cache(&self) -> std::sync::MutexGuard<'_, ferry_cache::RecordCache> {
        lock(&self.cache)
    }

    /// What each app has already been given, for monotonic reads.
    pub fn monotonic(&self) -> std::sync::MutexGuard<'_, ferry_cache::MonotonicReads> {
        lock(&self.monotonic)
    }

    /// Whether this gateway's replica of `vault` caught up with its owner recently enough to
    /// answer reads first.
    pub fn replica_is_fresh(&self, vault: &str) -> bool {
        self.sync
            .caught_up_ago(vault)
            .is_some_and(|ago| ago.as_millis() < u128::from(self.config.replica_fresh_ms))
    }

    /// Remembers a vault this gateway now owns or replicates.
    pub fn remember_local_vault(&self, row: VaultRow) {
        self.local_vaults
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(row.name.clone(), row);
    }

    /// The local vaults (owned and replicated).
    pub fn local_vault_rows(&self) -> Vec<VaultRow> {
        let mut rows: Vec<VaultRow> = self
            .local_vaults
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        rows
    }

    /// Keeps the cache true to a write through this gateway: the written value (or the
    /// deletion) at its new revision once done; anything else may have changed the record,
    /// so the entry is marked stale.
    fn cache_write_through(
        &self,
        app: &str,
        vault: &str,
        verb: &WriteVerb,
        outcome: &WriteOutcome,
    ) {
        let key = verb.key();
        match outcome {
            WriteOutcome::Answered(WriteAnswer::Done { revision }) => {
                let value = match verb {
                    WriteVerb::Put { value, .. } => {
                        Some(std::sync::Arc::<[u8]>::from(value.as_slice()))
                    }
                    WriteVerb::Delete { .. } => None,
                };
                self.cache()
                    .insert(vault, key, *revision, value, store::unix_ms());
                // The app that wrote it has seen this revision.
                self.monotonic()
                    .admit_from_owner(app, vault, key, *revision);
            }
            WriteOutcome::NotSent { .. } | WriteOutcome::NotCarriedOut { .. } => {}
            _ => {
                self.cache().invalidate(vault, key);
            }
        }
    }

    fn local_vault(&self, name: &str) -> Option<VaultRow> {
        self.local_vaults
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// A call target for a trusted peer: its usable routes, best first. A peer whose every
    /// route is down gets no routes, so a call to it is refused at once, nothing sent.
    pub fn target(&self, node: &NodeId) -> Option<Target> {
        let peer = self.peers.by_node(node)?;
        let (routes, down_routes) = self.routes.ranked(peer.node_id);
        Some(Target {
            node: peer.node_id,
            label: peer.label,
            routes,
            down_routes,
        })
    }

    /// The epoch tickets must carry at this owner's door.
    pub fn ticket_epoch(&self) -> u64 {
        self.ticket_epoch.load(Ordering::SeqCst)
    }

    /// `ferry tickets rotate`: every ticket issued so far is refused from now on.
    pub async fn rotate_tickets(&self) -> Result<u64, StoreError> {
        let epoch = self.reader.run(meta::rotate_ticket_epoch).await?;
        self.ticket_epoch.store(epoch, Ordering::SeqCst);
        info!(
            epoch,
            "ticket epoch rotated; earlier tickets are refused at the door"
        );
        Ok(epoch)
    }

    /// The tickets this gateway holds, for `ferry tickets`.
    pub fn held_tickets(&self) -> Vec<Ticket> {
        lock(&self.tickets).list().into_iter().cloned().collect()
    }

    /// Whether the peer called `label` may write `vault` (the config's `writers` table; a
    /// vault not listed there is open to every trusted peer).
    pub fn may_write(&self, label: &str, vault: &str) -> Result<(), String> {
        match self.config.writers.get(vault) {
            Some(allowed) if !allowed.iter().any(|l| l == label) => Err(format!(
                "this owner's config lets only {allowed:?} write vault {vault:?}"
            )),
            _ => Ok(()),
        }
    }

    /// Remembers a connection a peer opened to us, so `untrust` can close it.
    pub fn register_incoming(&self, peer: NodeId, conn: quinn::Connection) {
        let mut incoming = lock(&self.incoming);
        incoming.retain(|(_, c)| c.close_reason().is_none());
        incoming.push((peer, conn));
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

    /// This gateway's account of itself for peers, from the vaults it keeps in memory (it
    /// creates and follows them itself, so no database read is needed).
    pub fn own_hello(&self) -> Hello {
        hello_of(self.label.clone(), &self.local_vault_rows())
    }

    /// Exchanges hellos with every trusted peer at once, within `bound`; learns who owns what.
    /// Peers that do not answer are skipped: this is a refresh, not a requirement.
    pub async fn hello_all(self: &Arc<Self>, bound: Duration) {
        let hello = self.own_hello();
        let deadline = Instant::now() + bound;
        let mut asks = JoinSet::new();
        for peer in self.peers.all() {
            let Some(target) = self.target(&peer.node_id) else {
                continue;
            };
            let gateway = self.clone();
            let hello = hello.clone();
            asks.spawn(async move {
                match gateway.caller.hello(&target, hello, deadline).await {
                    Ok(theirs) => {
                        gateway.directory.learn(target.node, &theirs.owned_vaults);
                        gateway
                            .directory
                            .learn_replicas(target.node, &theirs.replicated_vaults);
                    }
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
        if let Some(row) = self.local_vault(vault) {
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
        self.target(&owner)
    }

    /// [`Gateway::write`] on a task of its own, so the write reaches its outcome (and the call
    /// log records it) even if whoever asked stops waiting.
    pub fn spawn_write(
        self: &Arc<Self>,
        app: String,
        vault: String,
        verb: WriteVerb,
        request_id: RequestId,
        deadline: Instant,
    ) -> tokio::task::JoinHandle<Result<(WriteOutcome, Option<String>), LocalRefusal>> {
        let gateway = self.clone();
        self.write_tasks
            .spawn(async move { gateway.write(app, vault, verb, request_id, deadline).await })
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
        let call = WriteCall {
            request_id,
            app,
            vault,
            verb,
            priority: Priority::Interactive,
        };
        let target = match place {
            Place::Local(row) if row.role == Role::Owner => {
                let outcome = self.write_here(call.clone(), deadline).await;
                self.cache_write_through(&call.app, &call.vault, &call.verb, &outcome);
                return Ok((outcome, Some(self.label.clone())));
            }
            Place::Local(row) => match self.target(&row.owner) {
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
        self.write_remote(call, target, deadline).await
    }

    /// A write to a peer that owns the vault. The call log has its row on disk before the
    /// first byte leaves, so whatever happens to this process, the id can be settled later.
    async fn write_remote(
        self: &Arc<Self>,
        call: WriteCall,
        target: Target,
        deadline: Instant,
    ) -> Result<(WriteOutcome, Option<String>), LocalRefusal> {
        let since_ms = store::unix_ms();
        let row = CallRow {
            request_id: call.request_id,
            owner: target.node,
            owner_label: target.label.clone(),
            vault: call.vault.clone(),
            app: call.app.clone(),
            state: RowState::InFlight,
            since_ms,
        };
        let hold = self
            .in_flight
            .register(call.request_id, &target.label, since_ms);
        let recorded = match self.call_log.begin(&row).await {
            Ok(recorded) => recorded,
            Err(err) => {
                return Ok((
                    WriteOutcome::not_sent(
                        NotSentReason::Stopping,
                        format!(
                        "the call could not be recorded for settling ({err}), so it was not sent"
                    ),
                    ),
                    Some(target.label),
                ))
            }
        };
        // Boxed for the same reason as in `spawn_write`: this is most of the state.
        let outcome = Box::pin(self.caller.write(&target, call.clone(), &**self, deadline)).await;
        hold.publish(&outcome);
        self.cache_write_through(&call.app, &call.vault, &call.verb, &outcome);
        // The owner's answer is in its journal; a write never sent leaves nothing: only an
        // unknown outcome is kept here, to be settled.
        let end = match &outcome {
            WriteOutcome::Unknown { .. } => End::Unknown(row),
            _ => End::Over,
        };
        let unknown = matches!(end, End::Unknown(_));
        self.call_log
            .finish(call.request_id, recorded, end, Some(hold))
            .await;
        if unknown {
            self.settle_wake.notify_one();
        }
        Ok((outcome, Some(target.label)))
    }

    /// A write to a vault owned here: straight to the executor, bounded by the deadline.
    async fn write_here(self: &Arc<Self>, call: WriteCall, deadline: Instant) -> WriteOutcome {
        let submitted = self.executor.submit(self.node_id(), call.clone(), deadline);
        match tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), submitted).await {
            Ok(Ok(answer)) => match answer {
                WriteAnswer::NotCarriedOut { reason } => WriteOutcome::NotCarriedOut { reason },
                answer => WriteOutcome::Answered(answer),
            },
            Ok(Err(err)) => WriteOutcome::not_sent(NotSentReason::Stopping, err.to_string()),
            // Queued and not answered in time: it may still run. Remember and settle it.
            Err(_) => {
                let row = CallRow {
                    request_id: call.request_id,
                    owner: self.node_id(),
                    owner_label: self.label.clone(),
                    vault: call.vault.clone(),
                    app: call.app.clone(),
                    state: RowState::Unknown,
                    since_ms: store::unix_ms(),
                };
                self.call_log.unknown(row).await;
                self.settle_wake.notify_one();
                WriteOutcome::Unknown {
                    reason: UnknownReason::TimedOut,
                    detail: "the owner (this gateway) did not answer before the deadline".into(),
                }
            }
        }
    }

    /// A listing (or another read verb) for a local app: from this gateway's copy if it has
    /// one, else from the owner. Reads of one record take the fuller path of `read_record`.
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
                    .read_verb(vault, verb)
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
        self.routes
            .set_configured(peer.node_id, &peer.routes, Instant::now());
        // A peer seen on the LAN before it was trusted brings its announced routes along.
        self.apply_seen(peer.node_id);
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
            self.routes.forget_peer(node);
            lock(&self.tickets).invalidate_owner(&node);
            // Connections the peer opened to us end now, not at their next idle timeout.
            for (peer, conn) in lock(&self.incoming).iter() {
                if *peer == node {
                    conn.close(quinn::VarInt::from_u32(CLOSE_UNTRUSTED), b"untrusted");
                }
            }
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
        self.remember_local_vault(row.clone());
        self.hello_all(DIRECTORY_REFRESH_BOUND).await;
        Ok(row)
    }
}

impl TicketSource for Gateway {
    /// A cached ticket while it is comfortably unexpired; else (or with `renew`) a fresh one
    /// from the owner, checked to be the owner's and for this node before it is cached.
    async fn ticket(
        &self,
        target: &Target,
        app: &str,
        vault: &str,
        renew: bool,
        deadline: Instant,
    ) -> Result<Ticket, String> {
        if renew {
            lock(&self.tickets).invalidate(&target.node, app, vault);
            self.metrics.ticket_renewal();
        } else if let Some(ticket) =
            lock(&self.tickets).get(&target.node, app, vault, store::unix_ms())
        {
            return Ok(ticket.clone());
        }
        let request = TicketRequest {
            app: app.to_string(),
            vault: vault.to_string(),
            verbs: VerbSet::all_writes(),
        };
        match self.caller.issue_ticket(target, request, deadline).await {
            Ok(TicketAnswer::Issued(ticket)) => {
                if !ticket.is_signed_by(&target.node) || ticket.claims.holder != self.node_id() {
                    return Err(format!(
                        "{} sent a ticket that is not its own or not for this node",
                        target.label
                    ));
                }
                lock(&self.tickets).insert(ticket.clone());
                Ok(ticket)
            }
            Ok(TicketAnswer::Refused(refusal)) => Err(format!(
                "{} refused to issue a ticket: {}",
                target.label, refusal.detail
            )),
            Err(err) => Err(format!("no ticket could be had: {err}")),
        }
    }
}

fn remaining_ms(deadline: Instant) -> u32 {
    deadline
        .saturating_duration_since(Instant::now())
        .as_millis()
        .min(u128::from(u32::MAX)) as u32
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
    }
}
