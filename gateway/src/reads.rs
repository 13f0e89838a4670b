//! The read path (SPEC 9): the cache, monotonic reads per app, and the driver of
//! `ferry_core::read::RecordRead`, which decides the order of sources, when to hedge to the
//! replicas, and the stale fallbacks. This module only does the IO each step asks for (the local
//! copy, the owner, the replicas) and says which source's answer an app may be given.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ferry_cache::{Admission, CachedRecord, MonotonicReads, RecordCache};
use ferry_core::clock::Clock;
use ferry_core::read::{
    hedge_delay, CacheView, LocalReplica, ReadEvent, ReadSource as Fate, ReadStart, ReadStep,
    RecordRead as Plan,
};
use ferry_peer::call::{ReadError, Target};
use ferry_peer::outcome::{RefusalCode, WriteOutcome};
use ferry_peer::wire::{ReadAnswer, ReadRequest, ReadVerb, WireRecord, WriteAnswer, WriteVerb};
use ferry_ticket::NodeId;

use crate::metrics::Metrics;
use crate::names::{AppName, Label, VaultName};
use crate::network::{Network, Place};
use crate::store::vaults::Role;
use crate::sync_board::SyncBoard;
use crate::vaults::Vaults;

/// Where a read's answer came from (`X-Ferry-Source`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Local,
    Cache,
    Owner,
    Replica(Label),
}

impl Source {
    pub fn header(&self) -> Cow<'static, str> {
        match self {
            Self::Local => Cow::Borrowed("local"),
            Self::Cache => Cow::Borrowed("cache"),
            Self::Owner => Cow::Borrowed("owner"),
            Self::Replica(label) => Cow::Owned(format!("replica:{label}")),
        }
    }
}

/// A record as a read found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub value: Arc<[u8]>,
    pub revision: u64,
    pub source: Source,
    /// The answer may be behind the owner.
    pub stale: bool,
}

/// What a read of one record found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordRead {
    Found(Found),
    /// No such record as of the vault's revision `vault_revision` (what monotonic reads
    /// judge a "not found" by: it says nothing older than that revision).
    NotFound {
        source: Source,
        vault_revision: u64,
    },
}

/// A call refused here, before anything was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRefusal {
    pub code: RefusalCode,
    pub detail: String,
}

impl LocalRefusal {
    /// No trusted gateway said it owns `vault`. `unasked` are the trusted peers that could not
    /// be asked because they speak no protocol version in common with this gateway (one line
    /// each): the owner may be among them, and the app is told so.
    pub fn unknown_vault(vault: &str, unasked: &[String]) -> Self {
        let mut detail = format!("no trusted gateway owns a vault named {vault:?}; create it with `ferry vault create {vault}` on its owner, or trust the owner");
        if !unasked.is_empty() {
            detail.push_str(&format!(
                ". Not asked, for lack of a common protocol version: {}",
                unasked.join("; ")
            ));
        }
        Self {
            code: RefusalCode::UnknownVault,
            detail,
        }
    }
}

impl LocalRefusal {
    /// Two or more trusted peers (`owners`, by label) each own a vault called `vault`, and
    /// this gateway holds none: `409 vault_ambiguous`, nothing sent.
    pub fn vault_ambiguous(vault: &str, owners: &[String]) -> Self {
        Self {
            code: RefusalCode::VaultAmbiguous,
            detail: crate::network::collisions::ambiguous_detail(vault, owners),
        }
    }

    /// [`LocalRefusal::vault_ambiguous`] with the owners as `network` names them.
    pub fn ambiguous_among(network: &Network, vault: &str, owners: &[NodeId]) -> Self {
        let labels: Vec<String> = owners.iter().map(|owner| network.label_of(owner)).collect();
        Self::vault_ambiguous(vault, &labels)
    }
}

/// Why a read has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadFailure {
    Refused(LocalRefusal),
    Unavailable { detail: String },
}

/// Where a listing's answer came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListSource {
    Local,
    Owner,
}

impl ListSource {
    pub fn header(&self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Owner => "owner",
        }
    }
}

/// One source's answer before monotonic admission.
enum Answer {
    Record { revision: u64, value: Arc<[u8]> },
    NotModified { revision: u64 },
    NotFound { vault_revision: u64 },
}

/// What the read path is set with.
#[derive(Debug, Clone, Copy)]
pub struct ReadSettings {
    pub cache_fresh_ms: u64,
    pub replica_fresh_ms: u64,
    pub cache_max_bytes: usize,
    pub cache_max_entries: usize,
}

/// The read path and its memory.
#[derive(Debug)]
pub struct Reads {
    network: Arc<Network>,
    vaults: Arc<Vaults>,
    board: Arc<SyncBoard>,
    cache: Mutex<RecordCache>,
    monotonic: Mutex<MonotonicReads>,
    settings: ReadSettings,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
}

type Pending<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl Reads {
    pub fn new(
        network: Arc<Network>,
        vaults: Arc<Vaults>,
        board: Arc<SyncBoard>,
        settings: ReadSettings,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            metrics,
            network,
            vaults,
            board,
            cache: Mutex::new(RecordCache::new(
                settings.cache_max_bytes,
                settings.cache_max_entries,
            )),
            monotonic: Mutex::new(MonotonicReads::default()),
            settings,
            clock,
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, RecordCache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn monotonic(&self) -> std::sync::MutexGuard<'_, MonotonicReads> {
        self.monotonic.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this gateway's replica of `vault` caught up with its owner recently enough to
    /// answer reads first.
    pub fn replica_is_fresh(&self, vault: &str) -> bool {
        self.board
            .caught_up_ago(vault, self.clock.now())
            .is_some_and(|ago| ago.as_millis() < u128::from(self.settings.replica_fresh_ms))
    }

    /// Keeps the cache true to a write through this gateway: the written value (or the
    /// deletion) at its new revision once done; anything else may have changed the record, so
    /// the entry is marked stale.
    pub fn write_through(&self, app: &str, vault: &str, verb: &WriteVerb, outcome: &WriteOutcome) {
        let key = verb.key();
        match outcome {
            WriteOutcome::Answered(WriteAnswer::Done { revision }) => {
                let value = match verb {
                    WriteVerb::Put { value, .. } => Some(Arc::<[u8]>::from(value.as_slice())),
                    WriteVerb::Delete { .. } => None,
                };
                self.cache()
                    .insert(vault, key, *revision, value, self.clock.unix_ms());
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

    /// Forgets what the cache holds of `key` (replication applied a change to it).
    pub fn invalidate(&self, vault: &str, key: &str) {
        self.cache().invalidate(vault, key);
    }

    /// Forgets what the cache holds of `vault` (it has a better source now: a local replica).
    pub fn invalidate_vault(&self, vault: &str) {
        self.cache().invalidate_vault(vault);
    }

    /// Reads one record for `app`, in the order `ferry_core::read` decides.
    pub async fn read_record(
        self: &Arc<Self>,
        app: &AppName,
        vault: &VaultName,
        key: &str,
        deadline: Instant,
    ) -> Result<RecordRead, ReadFailure> {
        let place = self
            .network
            .place_of(vault, deadline)
            .await
            .ok_or_else(|| {
                ReadFailure::Refused(LocalRefusal::unknown_vault(
                    vault,
                    &self.network.version_mismatches(),
                ))
            })?;
        match place {
            // Owned here: the local copy is the truth.
            Place::Local(row) if row.role == Role::Owner => {
                let read = self.read_here(vault, key).await?;
                // The owner's own copy is never older than the truth; were it ever passed
                // over, say so rather than answer "not found".
                self.admit(app, vault, key, read, Source::Local, false, true)
                    .ok_or_else(|| ReadFailure::Unavailable {
                        detail: "this gateway's own copy is older than an answer already given"
                            .into(),
                    })
            }
            Place::Local(row) => match self.network.target(&row.owner) {
                Some(owner) => {
                    self.board.read_at(vault, self.clock.now());
                    let local = LocalReplica {
                        fresh: self.replica_is_fresh(vault),
                    };
                    self.read_planned(app, vault, key, &owner, Some(local), deadline)
                        .await
                }
                // The owner is not trusted any more: the replica is all there is, stale.
                None => {
                    let read = self.read_here(vault, key).await?;
                    self.admit(app, vault, key, read, Source::Local, true, false)
                        .ok_or(ReadFailure::Unavailable {
                            detail: "this gateway does not trust the vault's owner".into(),
                        })
                }
            },
            Place::Ambiguous(owners) => Err(ReadFailure::Refused(LocalRefusal::ambiguous_among(
                &self.network,
                vault,
                &owners,
            ))),
            Place::Remote(owner) => {
                self.read_planned(app, vault, key, &owner, None, deadline)
                    .await
            }
        }
    }

    /// Drives one `ferry_core::read::RecordRead`: performs its steps, reports each source's fate.
    async fn read_planned(
        self: &Arc<Self>,
        app: &AppName,
        vault: &VaultName,
        key: &str,
        owner: &Target,
        local: Option<LocalReplica>,
        deadline: Instant,
    ) -> Result<RecordRead, ReadFailure> {
        let cached = self.cache().get_any(vault, key);
        let hedge = self
            .network
            .directory()
            .has_replica_besides(vault, &[owner.node, self.network.me()])
            .then(|| hedge_delay(self.network.routes().best_rtt(owner.node)));
        let start = ReadStart {
            local_replica: local,
            cache: cached.as_ref().map(|c| CacheView {
                revision: c.revision,
                has_value: c.value.is_some(),
                stale: c.stale,
                fetched_at_ms: c.fetched_at_ms,
            }),
            cache_fresh_ms: self.settings.cache_fresh_ms,
            hedge,
        };
        let (mut plan, mut steps) = Plan::start(start, self.clock.now(), self.clock.unix_ms());
        let mut owner_read: Option<Pending<Result<Option<RecordRead>, ReadFailure>>> = None;
        let mut replicas_read: Option<Pending<Option<RecordRead>>> = None;
        let mut wake: Option<Instant> = None;
        let mut answer: Option<RecordRead> = None;
        let mut failure = ReadFailure::Unavailable {
            detail: "no source answered".into(),
        };
        loop {
            let mut events = Vec::new();
            for step in steps.drain(..) {
                match step {
                    ReadStep::OfferLocal { stale } => {
                        let read = match self.read_here(vault, key).await {
                            Ok(read) => {
                                self.admit(app, vault, key, read, Source::Local, stale, false)
                            }
                            Err(_) => None,
                        };
                        events.push(self.offered(Fate::Local, read, &mut answer));
                    }
                    ReadStep::OfferCache { stale } => {
                        let read = cached
                            .as_ref()
                            .filter(|c| !stale || c.value.is_some())
                            .and_then(|entry| {
                                self.admit(
                                    app,
                                    vault,
                                    key,
                                    cached_answer(entry),
                                    Source::Cache,
                                    stale,
                                    false,
                                )
                            });
                        if read.is_some() && !stale {
                            // A fresh cache entry answered without asking anyone.
                            self.metrics.cache_hit();
                        }
                        events.push(self.offered(Fate::Cache, read, &mut answer));
                    }
                    ReadStep::AskOwner { known_revision } => {
                        let reads = self.clone();
                        let (owner, app, vault, key) =
                            (owner.clone(), app.clone(), vault.clone(), key.to_string());
                        owner_read = Some(Box::pin(async move {
                            reads
                                .ask_owner_for(&owner, &app, &vault, &key, known_revision, deadline)
                                .await
                        }));
                    }
                    ReadStep::AskReplicas => {
                        let reads = self.clone();
                        let (app, vault, key, owner) =
                            (app.clone(), vault.clone(), key.to_string(), owner.node);
                        replicas_read = Some(Box::pin(async move {
                            reads
                                .read_from_replicas(&app, &vault, &key, owner, deadline)
                                .await
                        }));
                    }
                    ReadStep::WakeAt(at) => wake = Some(at),
                    ReadStep::Answer => {
                        return answer.ok_or(ReadFailure::Unavailable {
                            detail: "the read ended without an answer".into(),
                        })
                    }
                    ReadStep::Fail => return Err(failure),
                }
            }
            let now = self.clock.now();
            if !events.is_empty() {
                for event in events {
                    steps.extend(plan.on(event, now));
                }
                continue;
            }
            // Nothing pending and nothing to wait for: the plan is stuck, which it must never
            // be; fail rather than hang.
            if owner_read.is_none() && replicas_read.is_none() && wake.is_none() {
                return Err(failure);
            }
            let event = tokio::select! {
                // Biased: the owner's answer first when both are ready, and a replayable order.
                biased;
                result = next(&mut owner_read) => {
                    owner_read = None;
                    match result {
                        Ok(Some(read)) => {
                            answer = Some(read);
                            ReadEvent::Admitted(Fate::Owner)
                        }
                        Ok(None) => {
                            failure = ReadFailure::Unavailable {
                                detail: "the owner's answer is older than one already given".into(),
                            };
                            ReadEvent::Passed(Fate::Owner)
                        }
                        Err(err @ ReadFailure::Refused(_)) => {
                            failure = err;
                            ReadEvent::OwnerRefused
                        }
                        Err(err) => {
                            failure = err;
                            ReadEvent::OwnerFailed
                        }
                    }
                }
                result = next(&mut replicas_read) => {
                    replicas_read = None;
                    match result {
                        Some(read) => {
                            answer = Some(read);
                            ReadEvent::Admitted(Fate::Replicas)
                        }
                        None => ReadEvent::Passed(Fate::Replicas),
                    }
                }
                () = wake_at(wake) => {
                    wake = None;
                    ReadEvent::Woke
                }
            };
            steps.extend(plan.on(event, self.clock.now()));
        }
    }

    /// Reports an offered source's fate, keeping its answer if the app may have it.
    fn offered(
        &self,
        fate: Fate,
        read: Option<RecordRead>,
        answer: &mut Option<RecordRead>,
    ) -> ReadEvent {
        match read {
            Some(read) => {
                *answer = Some(read);
                ReadEvent::Admitted(fate)
            }
            None => ReadEvent::Passed(fate),
        }
    }

    async fn read_here(&self, vault: &VaultName, key: &str) -> Result<Answer, ReadFailure> {
        let verb = ReadVerb::Get {
            key: key.to_string(),
            known_revision: None,
        };
        let answer = self
            .vaults
            .read_verb(vault.clone(), verb)
            .await
            .map_err(|err| ReadFailure::Unavailable {
                detail: err.to_string(),
            })?;
        match answer {
            Some(ReadAnswer::Record { record, .. }) => Ok(Answer::Record {
                revision: record.revision,
                value: record.value.into(),
            }),
            Some(ReadAnswer::NotFound { vault_revision }) => {
                Ok(Answer::NotFound { vault_revision })
            }
            _ => Err(ReadFailure::Unavailable {
                detail: "the local copy could not be read".into(),
            }),
        }
    }

    /// Admits an answer under monotonic reads; `None` if it is older than one `app` already
    /// saw (the plan moves on to the next source).
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        app: &AppName,
        vault: &VaultName,
        key: &str,
        answer: Answer,
        source: Source,
        stale: bool,
        authoritative: bool,
    ) -> Option<RecordRead> {
        let (revision, value) = match answer {
            Answer::Record { revision, value } => (revision, Some(value)),
            // A not-modified answer is resolved against the cache before it gets here.
            Answer::NotModified { revision } => (revision, None),
            Answer::NotFound { vault_revision } => (vault_revision, None),
        };
        let mut monotonic = self.monotonic();
        let admission = if authoritative {
            monotonic.admit_from_owner(app, vault, key, revision)
        } else {
            monotonic.admit(app, vault, key, revision)
        };
        if let Admission::Older { .. } = admission {
            if !ferry_core::bugs::on(ferry_core::bugs::Bug::OlderRead) {
                return None;
            }
        }
        Some(match value {
            Some(value) => RecordRead::Found(Found {
                value,
                revision,
                source,
                stale,
            }),
            None => RecordRead::NotFound {
                source,
                vault_revision: revision,
            },
        })
    }

    /// One conditional read from the owner, through the pool and its route fallbacks. `Ok(None)`:
    /// it answered something older than what the app already saw.
    async fn ask_owner_for(
        self: &Arc<Self>,
        owner: &Target,
        app: &AppName,
        vault: &VaultName,
        key: &str,
        known: Option<u64>,
        deadline: Instant,
    ) -> Result<Option<RecordRead>, ReadFailure> {
        let request = ReadRequest {
            app: app.clone(),
            vault: vault.clone(),
            verb: ReadVerb::Get {
                key: key.to_string(),
                known_revision: known,
            },
            deadline_ms: self.remaining_ms(deadline),
        };
        let answer = self
            .network
            .caller()
            .read(owner, request, deadline)
            .await
            .map_err(|err| ReadFailure::Unavailable {
                detail: err.to_string(),
            })?;
        let now_ms = self.clock.unix_ms();
        let answer = match answer {
            ReadAnswer::Record { record, .. } => {
                let WireRecord {
                    revision, value, ..
                } = record;
                let value: Arc<[u8]> = value.into();
                self.cache()
                    .insert(vault, key, revision, Some(value.clone()), now_ms);
                Answer::Record { revision, value }
            }
            ReadAnswer::NotModified { revision, .. } => {
                // The cached body is still current: refresh it and answer with it. (Bound first:
                // a guard in the `match` head would live through the arms, which lock again.)
                let cached = self.cache().get_any(vault, key);
                match cached {
                    Some(CachedRecord {
                        value: Some(value),
                        revision: cached,
                        ..
                    }) if cached == revision => {
                        self.cache()
                            .insert(vault, key, revision, Some(value.clone()), now_ms);
                        Answer::Record { revision, value }
                    }
                    _ => Answer::NotModified { revision },
                }
            }
            ReadAnswer::NotFound { vault_revision } => {
                self.cache()
                    .insert(vault, key, vault_revision, None, now_ms);
                Answer::NotFound { vault_revision }
            }
            ReadAnswer::Refused(refusal) => {
                return Err(ReadFailure::Refused(LocalRefusal {
                    code: refusal.code,
                    detail: refusal.detail,
                }))
            }
            other => {
                return Err(ReadFailure::Unavailable {
                    detail: format!("the owner answered a get with {other:?}"),
                })
            }
        };
        if let Answer::NotModified { .. } = answer {
            // The cache lost the body between asking and answering: ask once more, plainly.
            return Box::pin(self.ask_owner_for(owner, app, vault, key, None, deadline)).await;
        }
        Ok(self.admit(app, vault, key, answer, Source::Owner, false, true))
    }

    /// Asks the peers that replicate `vault` (not the owner), one after another; the first
    /// answer that is not older than what the app saw wins. Marked stale: a replica may lag.
    async fn read_from_replicas(
        self: &Arc<Self>,
        app: &AppName,
        vault: &VaultName,
        key: &str,
        owner: NodeId,
        deadline: Instant,
    ) -> Option<RecordRead> {
        for peer in self
            .network
            .directory()
            .replicas_besides(vault, &[owner, self.network.me()])
        {
            let Some(target) = self.network.target(&peer) else {
                continue;
            };
            let request = ReadRequest {
                app: app.clone(),
                vault: vault.clone(),
                verb: ReadVerb::Get {
                    key: key.to_string(),
                    known_revision: None,
                },
                deadline_ms: self.remaining_ms(deadline),
            };
            let answer = match self.network.caller().read(&target, request, deadline).await {
                Ok(ReadAnswer::Record { record, .. }) => Answer::Record {
                    revision: record.revision,
                    value: record.value.into(),
                },
                Ok(ReadAnswer::NotFound { vault_revision }) => Answer::NotFound { vault_revision },
                _ => continue,
            };
            let source = Source::Replica(target.label.clone());
            if let Some(read) = self.admit(app, vault, key, answer, source, true, false) {
                return Some(read);
            }
        }
        None
    }

    /// A listing (or another read verb) for a local app: from this gateway's copy if it has
    /// one, else from the owner. Reads of one record take the fuller path of `read_record`.
    pub async fn read(
        self: &Arc<Self>,
        app: AppName,
        vault: VaultName,
        verb: ReadVerb,
        deadline: Instant,
    ) -> Result<(ReadAnswer, ListSource), ReadFailure> {
        match self.network.place_of(&vault, deadline).await {
            None => Err(ReadFailure::Refused(LocalRefusal::unknown_vault(
                &vault,
                &self.network.version_mismatches(),
            ))),
            Some(Place::Local(_)) => {
                let answer = self
                    .vaults
                    .read_verb(vault, verb)
                    .await
                    .map_err(|err| ReadFailure::Unavailable {
                        detail: err.to_string(),
                    })?
                    .ok_or_else(|| ReadFailure::Unavailable {
                        detail: "the vault vanished while being read".into(),
                    })?;
                Ok((answer, ListSource::Local))
            }
            Some(Place::Ambiguous(owners)) => Err(ReadFailure::Refused(
                LocalRefusal::ambiguous_among(&self.network, &vault, &owners),
            )),
            Some(Place::Remote(target)) => {
                let request = ReadRequest {
                    app,
                    vault,
                    verb,
                    deadline_ms: self.remaining_ms(deadline),
                };
                match self.network.caller().read(&target, request, deadline).await {
                    Ok(answer) => Ok((answer, ListSource::Owner)),
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

    fn remaining_ms(&self, deadline: Instant) -> u32 {
        deadline
            .saturating_duration_since(self.clock.now())
            .as_millis()
            .min(u128::from(u32::MAX)) as u32
    }
}

/// The pending source's answer; never, when there is none (a `select!` arm that cannot win).
async fn next<T>(slot: &mut Option<Pending<T>>) -> T {
    match slot {
        Some(pending) => pending.await,
        None => std::future::pending().await,
    }
}

/// `at`, or never.
async fn wake_at(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

fn cached_answer(entry: &CachedRecord) -> Answer {
    match &entry.value {
        Some(value) => Answer::Record {
            revision: entry.revision,
            value: value.clone(),
        },
        None => Answer::NotFound {
            vault_revision: entry.revision,
        },
    }
}
