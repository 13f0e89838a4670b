//! Settling (SPEC 5): what became of a write, by its request id, whatever happened to this
//! gateway or to the app's HTTP client in between.
//!
//! Where the answer comes from, in order:
//! 1. the call is still being carried out by this process: wait for it (within `wait`);
//! 2. the call log (`store::calls`): a settled answer is answered from here; an unknown one
//!    (including one a crash cut short) is asked of its owner, never re-sent;
//! 3. this gateway's own journal (a local app's write to a vault owned here);
//! 4. no memory of it at all (an answered write leaves no row; or a power cut took the last
//!    rows of the log): every machine that could have received it is asked
//!    ([`settle::witnesses`]): with a vault named, every owner a write of that name ever went
//!    to from here (`store::claims`, written before the first one left), every peer claiming
//!    the name now and this gateway; else every peer trusted now, every owner any write went
//!    to, and this gateway. An owner that never saw the id tombstones it (it can then never
//!    run), so "not carried out" is only answered once every one of them has said so. If one
//!    cannot be asked (down, or untrusted since the write may have left), the answer is
//!    "unavailable, ask again": never a fence by the others, and never `unknown_call` for an
//!    id that may have reached an owner.

use std::sync::Arc;
use std::time::Duration;

use ferry_core::clock::Clock;
use ferry_core::settle::{self, Verdict};
use ferry_peer::outcome::{NotCarriedOutReason, WriteOutcome};
use ferry_peer::wire::{CallState, RequestId, WriteAnswer};
use ferry_ticket::NodeId;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tracing::{debug, Instrument};

use crate::call_log::CallLog;
use crate::in_flight::InFlight;
use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;
use crate::names::VaultName;
use crate::network::Network;
use crate::owner::Owner;
use crate::store::calls::{self, CallRow, RowState};
use crate::store::{claims, journal, meta, StoreError};
use crate::vaults::Vaults;

/// How often remembered `outcome_unknown` calls are asked about while their owner is away.
const SETTLE_INTERVAL: Duration = Duration::from_secs(1);
/// With none remembered, how often the background settler looks again anyway. A write that
/// leaves a call unknown wakes it at once; this only backs that up (a call recovered from the
/// call log at start, say), so an idle gateway does not read its database every second.
const SETTLE_IDLE_CHECK: Duration = Duration::from_secs(60);
/// How long one ask of one owner may take.
const SETTLE_ASK_BOUND: Duration = Duration::from_secs(2);
/// While an owner says `running`, it is asked again this often (within `?wait=`).
const SETTLE_POLL: Duration = Duration::from_millis(100);

/// Why a settle query has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettleError {
    /// Nothing could have left with that id: this gateway trusts no peer and owns no vault.
    #[error("{detail}")]
    UnknownCall { detail: String },
    /// Someone who may know could not be asked now; ask again later.
    #[error("{detail}")]
    Unavailable { detail: String },
    /// The id is older than the journals keep: nobody can say any more.
    #[error("{detail}")]
    Forgotten { detail: String },
}

/// The state a definite outcome settles to; `None` for outcomes that say nothing final
/// (unknown, not sent, or a refusal that lets the same id be sent again).
pub fn definite_state(outcome: &WriteOutcome) -> Option<CallState> {
    match outcome {
        WriteOutcome::Answered(WriteAnswer::Refused(refusal)) if refusal.code.may_resend() => None,
        WriteOutcome::Answered(answer) => Some(CallState::Answered(answer.clone())),
        WriteOutcome::NotCarriedOut { reason } => {
            Some(CallState::NotCarriedOut { reason: *reason })
        }
        WriteOutcome::NotSent { .. } | WriteOutcome::Unknown { .. } => None,
    }
}

/// Settling, as a component.
#[derive(Debug)]
pub struct Settlement {
    network: Arc<Network>,
    owner: Arc<Owner>,
    vaults: Arc<Vaults>,
    call_log: Arc<CallLog>,
    in_flight: Arc<InFlight>,
    wake: Arc<Notify>,
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
}

/// What [`Settlement::new`] needs.
#[derive(Debug)]
pub struct SettlementParts {
    pub network: Arc<Network>,
    pub owner: Arc<Owner>,
    pub vaults: Arc<Vaults>,
    pub call_log: Arc<CallLog>,
    pub in_flight: Arc<InFlight>,
    pub wake: Arc<Notify>,
    pub lifecycle: Arc<Lifecycle>,
    pub metrics: Arc<Metrics>,
    pub clock: Arc<dyn Clock>,
}

impl Settlement {
    pub fn new(parts: SettlementParts) -> Self {
        Self {
            network: parts.network,
            owner: parts.owner,
            vaults: parts.vaults,
            call_log: parts.call_log,
            in_flight: parts.in_flight,
            wake: parts.wake,
            lifecycle: parts.lifecycle,
            metrics: parts.metrics,
            clock: parts.clock,
        }
    }

    /// `GET /v1/calls/{id}`: what became of a write (see the module doc for where the answer
    /// comes from). With `wait`, waits while it is still running.
    pub async fn settle(
        self: &Arc<Self>,
        request_id: RequestId,
        vault: Option<VaultName>,
        wait: Duration,
    ) -> Result<(CallState, String), SettleError> {
        let span = tracing::debug_span!("settle", request_id = %request_id);
        self.settle_inner(request_id, vault, wait)
            .instrument(span)
            .await
    }

    async fn settle_inner(
        self: &Arc<Self>,
        request_id: RequestId,
        vault: Option<VaultName>,
        wait: Duration,
    ) -> Result<(CallState, String), SettleError> {
        let give_up = self.clock.now() + wait;
        if let Some(call) = self.in_flight.get(request_id) {
            let mut outcome = call.outcome.clone();
            // `None`: still on its way; `Some(None)`: ended without an outcome (never sent).
            let ended: Option<Option<WriteOutcome>> = match tokio::time::timeout_at(
                tokio::time::Instant::from_std(give_up),
                outcome.wait_for(Option::is_some),
            )
            .await
            {
                Err(_) => None,
                Ok(Ok(published)) => Some(published.clone()),
                Ok(Err(_)) => Some(None),
            };
            match ended {
                // Still on its way here: running, from the app's point of view.
                None => {
                    return Ok((
                        CallState::Running {
                            since_ms: call.since_ms,
                            heartbeat_age_ms: 0,
                        },
                        call.owner_label,
                    ))
                }
                Some(Some(outcome)) => {
                    if let Some(state) = definite_state(&outcome) {
                        return Ok((state, call.owner_label));
                    }
                }
                Some(None) => {}
            }
            // No definite answer: the log (flushed before the call leaves the registry) and
            // the owner say the rest.
            self.call_log.flush().await;
        }
        let remembered = self
            .vaults
            .reader()
            .run(move |conn| calls::get(conn, request_id))
            .await
            .map_err(unavailable)?;
        // The vault the write was for, as this gateway's call log holds it: the owner files a
        // tombstone under it. The app's `?vault=` only finds the owner: it is the app's word,
        // and a fence filed under the wrong vault would not move with the right one.
        let (owner, logged_vault) = match remembered {
            Some(CallRow {
                state: RowState::Settled(state),
                owner_label,
                ..
            }) => return Ok((state, owner_label.into_string())),
            Some(row) => (Some(row.owner), Some(row.vault)),
            None => (None, None),
        };
        let owner = match owner {
            Some(owner) => owner,
            None => match self.own_journal(request_id).await? {
                // This gateway's own fence of an id it never received (left by an earlier
                // settle) is one witness's word, not the answer: the others are asked too.
                Some(CallState::NotCarriedOut {
                    reason: NotCarriedOutReason::NeverArrived,
                })
                | None => return self.ask_witnesses(request_id, vault.as_ref()).await,
                Some(state) => return Ok((state, self.network.label().to_string())),
            },
        };
        let label = self.network.label_of(&owner);
        loop {
            let state = self
                .ask_owner(owner, request_id, logged_vault.as_ref(), SETTLE_ASK_BOUND)
                .await?;
            if let CallState::Forgotten { retention_ms } = state {
                return Err(forgotten(request_id, retention_ms));
            }
            if state.is_final() {
                self.keep_settled(request_id, state.clone()).await;
                return Ok((state, label));
            }
            if self.clock.now() + SETTLE_POLL > give_up {
                return Ok((state, label));
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }

    /// A local app's write to a vault owned here is in this gateway's own journal.
    async fn own_journal(&self, request_id: RequestId) -> Result<Option<CallState>, SettleError> {
        let me = self.network.me();
        let entry = self
            .vaults
            .reader()
            .run(move |conn| journal::lookup(conn, me, request_id))
            .await
            .map_err(unavailable)?;
        Ok(entry.map(|entry| entry.to_call_state()))
    }

    /// What this gateway remembers of where writes could have gone, for [`settle::witnesses`].
    async fn memory(&self) -> Result<settle::Memory<NodeId>, SettleError> {
        let (former, claims_since_ms) = self
            .vaults
            .reader()
            .run(|conn| Ok((claims::former_peers(conn)?, meta::claims_since(conn)?)))
            .await
            .map_err(unavailable)?;
        Ok(settle::Memory {
            me: self.network.me(),
            trusted: self
                .network
                .book()
                .all()
                .iter()
                .map(|p| p.node_id)
                .collect(),
            former: former
                .into_iter()
                .map(|peer| (peer.node_id, peer.sent_up_to_ms))
                .collect(),
            every_claimed: self.vaults.every_claimed_owner().into_iter().collect(),
            claims_since_ms,
        })
    }

    /// What this gateway knows of the vault called `vault`: the owners its writes went to,
    /// the peers claiming it now, and the copy held here.
    fn named_vault(&self, vault: &str) -> settle::NamedVault<NodeId> {
        settle::NamedVault {
            claimed: self.vaults.claimed_owners(vault),
            claimants_now: self.network.directory().claimants(vault),
            held_by: self.vaults.get(vault).map(|row| row.owner),
        }
    }

    /// Asks every machine that could have received `request_id` from this gateway
    /// ([`settle::witnesses`]), at once: found if one of them holds it, fenced only once all
    /// of them did, and "ask again" while one cannot be asked. A machine that could have run
    /// it and cannot be asked now (down, or no longer trusted) leaves it unknown: never a
    /// fence by the others.
    async fn ask_witnesses(
        self: &Arc<Self>,
        request_id: RequestId,
        vault: Option<&VaultName>,
    ) -> Result<(CallState, String), SettleError> {
        let memory = self.memory().await?;
        let named = vault.map(|vault| self.named_vault(vault));
        let witnesses = settle::witnesses(request_id.unix_ms(), &memory, named.as_ref());
        if memory.trusted.is_empty()
            && memory.former.is_empty()
            && !witnesses.before_record
            && !self.vaults.owns_any()
        {
            return Err(SettleError::UnknownCall {
                detail: format!(
                    "this gateway sent no write with request id {request_id}: it trusts no peer, never did, and owns no vault"
                ),
            });
        }
        let mut asks = JoinSet::new();
        for owner in witnesses.ask {
            let settlement = self.clone();
            asks.spawn(async move {
                let answer = settlement
                    .ask_owner(owner, request_id, None, SETTLE_ASK_BOUND)
                    .await;
                (owner, answer)
            });
        }
        let mut answers: Vec<(String, Option<CallState>)> = witnesses
            .cannot_ask
            .iter()
            .map(|(node, why)| {
                let why = match why {
                    settle::CannotAsk::NoLongerTrusted => {
                        "no longer trusted, and it was when the write may have left"
                    }
                    settle::CannotAsk::NotTrusted => "not trusted",
                };
                (format!("{} ({why})", self.network.label_of(node)), None)
            })
            .collect();
        while let Some(joined) = asks.join_next().await {
            answers.push(match joined {
                Ok((owner, Ok(state))) => (self.network.label_of(&owner), Some(state)),
                Ok((owner, Err(err))) => {
                    (format!("{} ({err})", self.network.label_of(&owner)), None)
                }
                // An ask that panicked asked nobody: its gateway counts as not asked.
                Err(err) => (format!("one of them (the ask failed: {err})"), None),
            });
        }
        match settle::combine(answers) {
            Verdict::Found(state, label) => Ok((state, label)),
            Verdict::Forgotten { retention_ms } => Err(forgotten(request_id, retention_ms)),
            Verdict::Unreachable(unreachable) => Err(SettleError::Unavailable {
                detail: format!(
                    "this gateway has no record of {request_id}, so every machine that could have received it must be asked, and {} could not be; ask again later",
                    unreachable.join(", ")
                ),
            }),
            // Every machine that could have received it has now fenced it.
            Verdict::NeverArrived => Ok((
                CallState::NotCarriedOut {
                    reason: NotCarriedOutReason::NeverArrived,
                },
                String::new(),
            )),
        }
    }

    /// Asks `owner` what became of `request_id`, once, naming the vault its write was for
    /// when that is known (a tombstone is filed under it).
    async fn ask_owner(
        &self,
        owner: NodeId,
        request_id: RequestId,
        vault: Option<&VaultName>,
        bound: Duration,
    ) -> Result<CallState, SettleError> {
        if owner == self.network.me() {
            return self
                .owner
                .executor()
                .status(owner, request_id, vault.cloned())
                .await
                .map_err(|err| SettleError::Unavailable {
                    detail: err.to_string(),
                });
        }
        let target = self
            .network
            .target(&owner)
            .ok_or_else(|| SettleError::Unavailable {
                detail: "the owner of that call is no longer trusted".into(),
            })?;
        let state = self
            .network
            .caller()
            .call_status(&target, request_id, vault, self.clock.now() + bound, None)
            .await
            .map_err(|err| SettleError::Unavailable {
                detail: err.to_string(),
            })?;
        match state {
            // A newer owner's state settles nothing here: counted as an owner not heard (so
            // never a fence when everyone is asked), and never kept as settled.
            CallState::Unrecognized { number } => Err(SettleError::Unavailable {
                detail: format!(
                    "the owner answered with a state this gateway's release does not know ({number}; the owner runs a newer release), so the outcome is still unknown; upgrade this gateway and ask again"
                ),
            }),
            state => Ok(state),
        }
    }

    /// Keeps a definite answer in the call log (a no-op for an id the log does not hold).
    async fn keep_settled(&self, request_id: RequestId, state: CallState) {
        self.call_log.settled(request_id, state).await;
        self.metrics.call_settled();
    }

    /// The calls `GET /v1/calls` lists (only the unknown ones, or every one that was unknown
    /// or is in flight).
    pub async fn remembered_calls(&self, only_unknown: bool) -> Result<Vec<CallRow>, StoreError> {
        self.vaults
            .reader()
            .run(move |conn| calls::listed(conn, only_unknown))
            .await
    }

    /// SPEC 6 rule 10: settles remembered `outcome_unknown` calls in the background, asking
    /// (never re-sending) until each owner answers. Runs until the gateway stops.
    pub async fn settle_in_background(self: Arc<Self>) {
        let mut stopping = self.lifecycle.stopping();
        loop {
            // A write that ends unknown hands its row to the call log's writer and rings the
            // wake before the row is committed: read the log only once what it was handed is
            // in, or an idle settler could find nothing and sleep its minute with a call
            // unknown (seen in CI: a frozen owner's call not settled within 20 s).
            if self.lifecycle.is_stopping() {
                return;
            }
            self.call_log.flush().await;
            let unknown = self
                .vaults
                .reader()
                .run(calls::unknown)
                .await
                .unwrap_or_default();
            let next_look = if unknown.is_empty() {
                SETTLE_IDLE_CHECK
            } else {
                SETTLE_INTERVAL
            };
            for call in unknown {
                if self.lifecycle.is_stopping() {
                    return;
                }
                match self
                    .ask_owner(
                        call.owner,
                        call.request_id,
                        Some(&call.vault),
                        SETTLE_ASK_BOUND,
                    )
                    .await
                {
                    Ok(state) if state.is_final() => {
                        debug!(request_id = %call.request_id, ?state, "settled in the background");
                        self.keep_settled(call.request_id, state).await;
                    }
                    Ok(_) | Err(_) => {}
                }
            }
            tokio::select! {
                biased;
                _ = stopping.wait_for(|stopping| *stopping) => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(next_look) => {}
            }
        }
    }
}

/// What an untrust records as the ids that may have gone to the peer: the home's sent mark
/// `sent_mark_ms` (no id stamped above it ever left), and no less than the clock `now_ms` plus
/// the ids' future bound and a minute, since a write accepted just before the untrust may still
/// leave with an id stamped up to five minutes ahead.
pub fn untrust_cover(sent_mark_ms: u64, now_ms: u64) -> u64 {
    sent_mark_ms.max(
        now_ms
            .saturating_add(settle::FUTURE_BOUND_MS)
            .saturating_add(settle::CLOCK_STEP_MARGIN_MS),
    )
}

fn unavailable(err: StoreError) -> SettleError {
    SettleError::Unavailable {
        detail: err.to_string(),
    }
}

fn forgotten(request_id: RequestId, retention_ms: u64) -> SettleError {
    SettleError::Forgotten {
        detail: format!(
            "request id {request_id} is older than the owner's journal keeps ({} days): if it ran, it ran that long ago, and the owner can no longer say; it can never run again",
            retention_ms / 86_400_000
        ),
    }
}
