//! The read path of one record (SPEC 9): the order of sources, the cache, hedging, and
//! monotonic reads per app.
//!
//! Order: the local copy (owned here, or a replica fresh enough) → a fresh cache entry → the
//! owner over its best route, sending the cached revision (an unchanged record costs no body)
//! → if the owner is slow past an attempt timeout derived from the route's RTT, the peers that
//! replicate the vault are asked too, while the owner may still answer → a local replica that is
//! not fresh → a stale cache entry → `503 unavailable`. Any answer older than one this gateway
//! already gave the same app is passed over (monotonic reads).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_cache::{Admission, CachedRecord};
use ferry_peer::call::Target;
use ferry_peer::wire::{ReadAnswer, ReadRequest, ReadVerb, WireRecord};
use ferry_ticket::NodeId;

use crate::gateway::{Gateway, LocalRefusal, Place, ReadFailure};
use crate::store::{self, vaults::Role};

/// The least time the owner gets before the replicas are asked too.
const HEDGE_FLOOR: Duration = Duration::from_millis(50);
/// The hedge waits this many smoothed RTTs of the owner's best route.
const HEDGE_RTTS: u32 = 8;

/// Where a read's answer came from (`X-Ferry-Source`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Local,
    Cache,
    Owner,
    Replica(String),
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
    NotFound { source: Source },
}

/// One source's answer before monotonic admission.
enum Answer {
    Record { revision: u64, value: Arc<[u8]> },
    NotModified { revision: u64 },
    NotFound { vault_revision: u64 },
}

impl Gateway {
    /// Reads one record for `app`, trying sources in SPEC 9's order.
    pub async fn read_record(
        self: &Arc<Self>,
        app: &str,
        vault: &str,
        key: &str,
        deadline: Instant,
    ) -> Result<RecordRead, ReadFailure> {
        match self.place_of(vault, deadline).await? {
            Place::Local(row) if row.role == Role::Owner => {
                let read = self.read_here(vault, key).await?;
                Ok(self
                    .admit(app, vault, key, read, Source::Local, false, true)
                    .unwrap_or(RecordRead::NotFound {
                        source: Source::Local,
                    }))
            }
            Place::Local(row) => {
                if self.replica_is_fresh(vault) {
                    let read = self.read_here(vault, key).await?;
                    if let Some(answer) =
                        self.admit(app, vault, key, read, Source::Local, false, false)
                    {
                        return Ok(answer);
                    }
                }
                let remote = match self.target(&row.owner) {
                    Some(target) => self.read_remote(app, vault, key, &target, deadline).await,
                    None => Err(ReadFailure::Unavailable {
                        detail: "this gateway does not trust the vault's owner".into(),
                    }),
                };
                match remote {
                    Ok(answer) => Ok(answer),
                    // The owner is out of reach: the local replica, marked stale.
                    Err(failure) => {
                        let read = self.read_here(vault, key).await?;
                        self.admit(app, vault, key, read, Source::Local, true, false)
                            .ok_or(failure)
                    }
                }
            }
            Place::Remote(target) => self.read_remote(app, vault, key, &target, deadline).await,
        }
    }

    async fn read_here(&self, vault: &str, key: &str) -> Result<Answer, ReadFailure> {
        let verb = ReadVerb::Get {
            key: key.to_string(),
            known_revision: None,
        };
        let answer = self
            .reader
            .read_verb(vault.to_string(), verb)
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
    /// saw (the caller moves on to the next source).
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        app: &str,
        vault: &str,
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
            return None;
        }
        Some(match value {
            Some(value) => RecordRead::Found(Found {
                value,
                revision,
                source,
                stale,
            }),
            None => RecordRead::NotFound { source },
        })
    }

    /// Cache, then the owner (conditional), hedged against the replicas, then the stale cache.
    async fn read_remote(
        self: &Arc<Self>,
        app: &str,
        vault: &str,
        key: &str,
        owner: &Target,
        deadline: Instant,
    ) -> Result<RecordRead, ReadFailure> {
        let now_ms = store::unix_ms();
        let cached = self.cache().get_any(vault, key);
        if let Some(entry) = &cached {
            let fresh_for = self.config.cache_fresh_ms;
            if !entry.stale && now_ms.saturating_sub(entry.fetched_at_ms) < fresh_for {
                if let Some(answer) = self.admit(
                    app,
                    vault,
                    key,
                    cached_answer(entry),
                    Source::Cache,
                    false,
                    false,
                ) {
                    self.metrics.cache_hit();
                    return Ok(answer);
                }
            }
        }
        let known = cached
            .as_ref()
            .filter(|e| e.value.is_some())
            .map(|e| e.revision);
        let owner_read = self.ask_owner_for(owner, app, vault, key, known, deadline);
        tokio::pin!(owner_read);
        // The owner first; if it is slow (or fails), the replicas too, while it may still answer.
        // With no replica to turn to, no hedge timer either.
        let mut replica_tried = false;
        let owner_result = if self
            .directory
            .has_replica_besides(vault, &[owner.node, self.node_id()])
        {
            let hedge = hedge_delay(self, owner.node);
            tokio::select! {
                result = &mut owner_read => Some(result),
                () = tokio::time::sleep(hedge) => None,
            }
        } else {
            Some((&mut owner_read).await)
        };
        let owner_result = match owner_result {
            Some(result) => result,
            None => {
                replica_tried = true;
                let replicas = self.read_from_replicas(app, vault, key, owner.node, deadline);
                tokio::pin!(replicas);
                tokio::select! {
                    result = &mut owner_read => match result {
                        Ok(answer) => Ok(answer),
                        Err(failure) => match replicas.await {
                            Some(answer) => return Ok(answer),
                            None => Err(failure),
                        },
                    },
                    answer = &mut replicas => match answer {
                        Some(answer) => return Ok(answer),
                        None => owner_read.await,
                    },
                }
            }
        };
        let failure = match owner_result {
            Ok(answer) => return Ok(answer),
            Err(failure) => failure,
        };
        if let ReadFailure::Refused(_) = failure {
            return Err(failure);
        }
        if !replica_tried {
            if let Some(answer) = self
                .read_from_replicas(app, vault, key, owner.node, deadline)
                .await
            {
                return Ok(answer);
            }
        }
        // Last resort: what the cache holds, marked stale.
        if let Some(entry) = cached.filter(|e| e.value.is_some()) {
            if let Some(answer) = self.admit(
                app,
                vault,
                key,
                cached_answer(&entry),
                Source::Cache,
                true,
                false,
            ) {
                return Ok(answer);
            }
        }
        Err(failure)
    }

    /// One conditional read from the owner, through the pool and its route fallbacks.
    async fn ask_owner_for(
        self: &Arc<Self>,
        owner: &Target,
        app: &str,
        vault: &str,
        key: &str,
        known: Option<u64>,
        deadline: Instant,
    ) -> Result<RecordRead, ReadFailure> {
        let request = ReadRequest {
            app: app.to_string(),
            vault: vault.to_string(),
            verb: ReadVerb::Get {
                key: key.to_string(),
                known_revision: known,
            },
            deadline_ms: remaining_ms(deadline),
        };
        let answer = self
            .caller
            .read(owner, request, deadline)
            .await
            .map_err(|err| ReadFailure::Unavailable {
                detail: err.to_string(),
            })?;
        let now_ms = store::unix_ms();
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
        self.admit(app, vault, key, answer, Source::Owner, false, true)
            .ok_or_else(|| ReadFailure::Unavailable {
                detail: "the owner's answer is older than one already given".into(),
            })
    }

    /// Asks the peers that replicate `vault` (not the owner), one after another; the first
    /// answer that is not older than what the app saw wins. Marked stale: a replica may lag.
    async fn read_from_replicas(
        self: &Arc<Self>,
        app: &str,
        vault: &str,
        key: &str,
        owner: NodeId,
        deadline: Instant,
    ) -> Option<RecordRead> {
        for peer in self
            .directory
            .replicas_besides(vault, &[owner, self.node_id()])
        {
            let Some(target) = self.target(&peer) else {
                continue;
            };
            let request = ReadRequest {
                app: app.to_string(),
                vault: vault.to_string(),
                verb: ReadVerb::Get {
                    key: key.to_string(),
                    known_revision: None,
                },
                deadline_ms: remaining_ms(deadline),
            };
            let answer = match self.caller.read(&target, request, deadline).await {
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

/// How long the owner gets before replicas are asked too: a few RTTs of its best route, with
/// a floor.
fn hedge_delay(gateway: &Gateway, owner: NodeId) -> Duration {
    gateway
        .routes
        .best_rtt(owner)
        .map(|rtt| (rtt * HEDGE_RTTS).max(HEDGE_FLOOR))
        .unwrap_or(HEDGE_FLOOR)
}

fn remaining_ms(deadline: Instant) -> u32 {
    deadline
        .saturating_duration_since(Instant::now())
        .as_millis()
        .min(u128::from(u32::MAX)) as u32
}
