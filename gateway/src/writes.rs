//! The write path of a local app (SPEC 6): where the write goes, the call log before the send,
//! the caller (whose decisions are `ferry_core::write`'s), the tickets it presents, and the
//! cache kept true to what it wrote.
//!
//! Every write runs on a task of its own ([`Writes::spawn_write`]): an app whose HTTP client
//! gives up does not cut the write short; it reaches its outcome, which the call log records for
//! settling.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use ferry_core::capacity::send_gate::{Ended, RecentIds, SendGate, Sent};
use ferry_core::capacity::Refused;
use ferry_core::clock::Clock;
use ferry_peer::call::{Target, TicketError, TicketSource, WriteCall};
use ferry_peer::outcome::{NotSentReason, RefusalCode, UnknownReason, WriteOutcome};
use ferry_peer::wire::{Priority, RequestId, TicketAnswer, TicketRequest, WriteAnswer, WriteVerb};
use ferry_ticket::{NodeId, Ticket, TicketCache, VerbSet};
use tokio::sync::Notify;
use tracing::{error, Instrument};

use crate::call_log::{CallLog, End};
use crate::in_flight::InFlight;
use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;
use crate::names::{AppName, Label, VaultName};
use crate::network::{Network, Place};
use crate::owner::executor::SubmitError;
use crate::owner::Owner;
use crate::reads::{LocalRefusal, Reads};
use crate::store::calls::{CallRow, RowState};
use crate::store::vaults::Role;
use crate::tasks::TaskCounter;

/// What a write ended as, and the owner's label when it got that far.
pub type Written = Result<(WriteOutcome, Option<Label>), LocalRefusal>;

/// The write path.
#[derive(Debug)]
pub struct Writes {
    network: Arc<Network>,
    owner: Arc<Owner>,
    reads: Arc<Reads>,
    call_log: Arc<CallLog>,
    in_flight: Arc<InFlight>,
    tasks: TaskCounter,
    tickets: Mutex<TicketCache>,
    /// The owners' caps on each app's writes out, as their refusals taught them, and the ids
    /// sent lately (the gate never answers for an id that may have left).
    sending: Arc<Mutex<Sending>>,
    /// Wakes the background settler when a call ends `outcome_unknown`.
    settle_wake: Arc<Notify>,
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
}

/// What [`Writes::new`] needs.
#[derive(Debug)]
pub struct WritesParts {
    pub network: Arc<Network>,
    pub owner: Arc<Owner>,
    pub reads: Arc<Reads>,
    pub call_log: Arc<CallLog>,
    pub in_flight: Arc<InFlight>,
    pub settle_wake: Arc<Notify>,
    pub lifecycle: Arc<Lifecycle>,
    pub metrics: Arc<Metrics>,
    pub clock: Arc<dyn Clock>,
}

impl Writes {
    pub fn new(parts: WritesParts) -> Self {
        // Ids an earlier process of this home may have sent (stamped up to the sent mark its
        // start left) are never judged by the send gate, nor any stamped before this start.
        let horizon_ms = parts
            .clock
            .unix_ms()
            .max(parts.call_log.earlier_sends_up_to().saturating_add(1));
        Self {
            network: parts.network,
            owner: parts.owner,
            reads: parts.reads,
            call_log: parts.call_log,
            in_flight: parts.in_flight,
            tasks: TaskCounter::default(),
            tickets: Mutex::new(TicketCache::default()),
            sending: Arc::new(Mutex::new(Sending {
                gate: SendGate::default(),
                owners: SendGate::for_owner_bounds(),
                recent: RecentIds::new(horizon_ms),
            })),
            settle_wake: parts.settle_wake,
            lifecycle: parts.lifecycle,
            metrics: parts.metrics,
            clock: parts.clock,
        }
    }

    /// No id stamped above this was ever sent from this home (`CallLog::sent_up_to`).
    pub fn sent_up_to(&self) -> u64 {
        self.call_log.sent_up_to()
    }

    /// The tasks carrying out writes (a stop waits for them).
    pub fn tasks(&self) -> &TaskCounter {
        &self.tasks
    }

    /// [`Writes::write`] on a task of its own, so the write reaches its outcome (and the call
    /// log records it) even if whoever asked stops waiting.
    pub fn spawn_write(
        self: &Arc<Self>,
        app: AppName,
        vault: VaultName,
        verb: WriteVerb,
        request_id: RequestId,
        class: Priority,
        deadline: Instant,
    ) -> tokio::task::JoinHandle<Written> {
        let writes = self.clone();
        // Boxed: a write's future is kilobytes of state, and spawning moves what it is given;
        // a box moves as a pointer.
        let write = Box::pin(async move {
            writes
                .write(app, vault, verb, request_id, class, deadline)
                .await
        });
        self.tasks.spawn(write)
    }

    /// A write from a local app: carried out here if this gateway owns the vault, else sent to
    /// the owner at most once.
    pub async fn write(
        self: &Arc<Self>,
        app: AppName,
        vault: VaultName,
        verb: WriteVerb,
        request_id: RequestId,
        class: Priority,
        deadline: Instant,
    ) -> Written {
        if self.lifecycle.is_stopping() {
            return Ok((
                WriteOutcome::not_sent(NotSentReason::Stopping, "this gateway is stopping"),
                None,
            ));
        }
        let Some(place) = self.network.place_of(&vault, deadline).await else {
            return Err(LocalRefusal::unknown_vault(
                &vault,
                &self.network.version_mismatches(),
            ));
        };
        let call = WriteCall {
            request_id,
            app,
            vault,
            verb,
            priority: class,
        };
        let target = match place {
            Place::Local(row) if row.role == Role::Owner => {
                let outcome = self.write_here(call.clone(), deadline).await;
                self.reads
                    .write_through(&call.app, &call.vault, &call.verb, &outcome);
                return Ok((outcome, Some(self.network.label().clone())));
            }
            Place::Local(row) => match self.network.target(&row.owner) {
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
            Place::Ambiguous(owners) => {
                return Err(LocalRefusal::ambiguous_among(
                    &self.network,
                    &call.vault,
                    &owners,
                ))
            }
        };
        self.write_remote(call, target, deadline).await
    }

    /// A write to a peer that owns the vault. The call log has it on disk before the first
    /// byte leaves, so whatever happens to this process, the id can be settled later.
    async fn write_remote(
        self: &Arc<Self>,
        call: WriteCall,
        target: Target,
        deadline: Instant,
    ) -> Written {
        // Settling fences an answered write's id only by asking every owner a write of this
        // vault name ever went to: the first write to each is written down before it leaves.
        if let Err(err) = self
            .network
            .vaults()
            .note_claim(&call.vault, target.node)
            .await
        {
            error!(%err, "which owner this vault's writes go to could not be recorded (ferry.db); the write was not sent");
            return Ok((
                WriteOutcome::not_sent(
                    NotSentReason::CannotRecord,
                    format!("which owner this vault's writes go to could not be recorded ({err}), so it was not sent"),
                ),
                Some(target.label),
            ));
        }
        // Before anything is recorded: a write the owner would refuse for its cap is answered
        // here, and nothing is sent.
        let mut out = match self.leave(&target, &call.app, call.priority, call.request_id) {
            Ok(out) => out,
            Err(outcome) => return Ok((outcome, Some(target.label))),
        };
        let since_ms = self.clock.unix_ms();
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
                error!(%err, "the call could not be recorded for settling (calls.slots, ferry.db); it was not sent");
                return Ok((
                    WriteOutcome::not_sent(
                        NotSentReason::CannotRecord,
                        format!(
                        "the call could not be recorded for settling ({err}), so it was not sent"
                    ),
                    ),
                    Some(target.label),
                ));
            }
        };
        // Boxed for the same reason as in `spawn_write`: this is most of the state.
        let outcome = Box::pin(
            self.network
                .caller()
                .write(&target, &call, &**self, deadline),
        )
        .await;
        let outcome = self.resend_if_injected(&target, &call, outcome).await;
        out.lesson = lesson_of(&outcome);
        drop(out);
        hold.publish(&outcome);
        self.reads
            .write_through(&call.app, &call.vault, &call.verb, &outcome);
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

    /// Counts a write of `app` out to `target`, or answers it `busy` (not sent) if the owner's
    /// last `caller_cap` refusal, or its last `saturated` (`background_full`) refusal of this
    /// gateway's interactive (background) writes, says it would refuse it too and its id cannot
    /// have left before (a repeat always goes to the owner, whose journal knows what became of
    /// it), or
    /// `unavailable` (not sent) if the home's sent mark cannot be raised over its id.
    fn leave(
        &self,
        target: &Target,
        app: &AppName,
        class: Priority,
        id: RequestId,
    ) -> Result<Out, WriteOutcome> {
        let key = (target.node, app.clone());
        let now = self.clock.now();
        let mut sending = self.sending.lock().unwrap_or_else(|p| p.into_inner());
        let may_repeat = sending.recent.may_have_left(&id, self.clock.unix_ms());
        // Counted per owner and class against what the owner last took of this gateway's
        // writes of that class: interactive ones against its wait bound (`saturated`),
        // background ones against its bound beside interactive writes (`background_full`).
        let owner_sent = match sending.owners.leave(&(target.node, class), may_repeat, now) {
            Ok(sent) => OwnerSent { class, sent },
            Err(_) => {
                drop(sending);
                let (reason, what) = match class {
                    Priority::Interactive => {
                        self.metrics.saturated_here();
                        (
                            NotSentReason::Saturated,
                            "writes as it last took while saturated",
                        )
                    }
                    Priority::Background => {
                        self.metrics.background_full_here();
                        (
                            NotSentReason::BackgroundFull,
                            "background writes as it last took beside interactive ones",
                        )
                    }
                };
                return Err(WriteOutcome::not_sent(
                    reason,
                    format!(
                        "{} already holds as many of this gateway's {what}; send it again with the same request id",
                        target.label
                    ),
                ));
            }
        };
        let Ok(sent) = sending.gate.leave(&key, may_repeat, now) else {
            sending.ended(&key, None, owner_sent, Lesson::Nothing, now);
            drop(sending);
            self.metrics.caller_cap_here();
            return Err(WriteOutcome::not_sent(
                NotSentReason::CallerCap,
                format!(
                    "app {app:?} already has as many writes out to {} as that owner last took from this gateway; send it again with the same request id",
                    target.label
                ),
            ));
        };
        // Before it leaves, the sent mark covers it: a later run must know it may have been
        // sent. An id the mark cannot cover is not sent at all.
        if let Err(err) = self.call_log.cover_sent(id.unix_ms()) {
            sending.ended(&key, Some(sent), owner_sent, Lesson::Nothing, now);
            error!(%err, "the home's sent mark could not be written; writes to peers are not sent");
            return Err(WriteOutcome::not_sent(
                NotSentReason::CannotRecord,
                format!("the home's sent mark could not be written ({err}), so it was not sent"),
            ));
        }
        sending.recent.sent(id, self.clock.unix_ms());
        drop(sending);
        Ok(Out {
            sending: self.sending.clone(),
            clock: self.clock.clone(),
            key,
            sent,
            owner_sent,
            lesson: Lesson::Nothing,
        })
    }

    /// The retry every RPC library is tempted by, and that Ferry exists to refuse: an unknown
    /// outcome "fixed" by sending the write again under a new id. Only ever on when a test
    /// injects [`ferry_core::bugs::Bug::ResendAfterSend`], to show the simulation catches it.
    async fn resend_if_injected(
        self: &Arc<Self>,
        target: &Target,
        call: &WriteCall,
        outcome: WriteOutcome,
    ) -> WriteOutcome {
        if !matches!(outcome, WriteOutcome::Unknown { .. })
            || !ferry_core::bugs::on(ferry_core::bugs::Bug::ResendAfterSend)
        {
            return outcome;
        }
        let again = WriteCall {
            request_id: RequestId::at(self.clock.unix_ms()),
            ..call.clone()
        };
        let deadline = self.clock.now() + std::time::Duration::from_secs(10);
        Box::pin(
            self.network
                .caller()
                .write(target, &again, &**self, deadline),
        )
        .await
    }

    /// A write to a vault owned here: straight to the executor, bounded by the deadline.
    async fn write_here(self: &Arc<Self>, call: WriteCall, deadline: Instant) -> WriteOutcome {
        let me = self.network.me();
        let span = tracing::debug_span!(
            "write_here",
            request_id = %call.request_id,
            app = %call.app
        );
        let submitted = self.owner.executor().submit(me, call.clone(), deadline);
        let answered = tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), submitted)
            .instrument(span)
            .await;
        let lost = match answered {
            Ok(Ok(answer)) => {
                return match answer {
                    WriteAnswer::NotCarriedOut { reason } => WriteOutcome::NotCarriedOut { reason },
                    answer => WriteOutcome::Answered(answer),
                }
            }
            Ok(Err(err @ (SubmitError::Stopping | SubmitError::Full))) => {
                return WriteOutcome::not_sent(NotSentReason::Stopping, err.to_string())
            }
            // Taken and its answer lost: it may have run.
            Ok(Err(SubmitError::Lost)) => (
                UnknownReason::ConnectionLost,
                "the owner (this gateway) took the write and lost its answer",
            ),
            // Queued and not answered in time: it may still run.
            Err(_) => (
                UnknownReason::TimedOut,
                "the owner (this gateway) did not answer before the deadline",
            ),
        };
        // Remember and settle it.
        let (reason, detail) = lost;
        let row = CallRow {
            request_id: call.request_id,
            owner: me,
            owner_label: self.network.label().clone(),
            vault: call.vault.clone(),
            app: call.app.clone(),
            state: RowState::Unknown,
            since_ms: self.clock.unix_ms(),
        };
        self.call_log.unknown(row).await;
        self.settle_wake.notify_one();
        WriteOutcome::Unknown {
            reason,
            detail: detail.into(),
        }
    }

    /// The tickets this gateway holds, for `ferry tickets`.
    pub fn held_tickets(&self) -> Vec<Ticket> {
        self.tickets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .list()
            .into_iter()
            .cloned()
            .collect()
    }

    /// Forgets every ticket from `owner` (it is no longer trusted).
    pub fn forget_tickets_of(&self, owner: &NodeId) {
        self.tickets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .invalidate_owner(owner);
    }
}

/// What the send gate needs, under one lock.
#[derive(Debug)]
struct Sending {
    /// Writes out per owner and app, against the owner's per-caller cap (`caller_cap`).
    gate: SendGate<(NodeId, AppName)>,
    /// Writes out per owner and class, every app together, against what the owner last took
    /// of them from this gateway: interactive ones while it was saturated (its wait bound,
    /// `saturated`), background ones beside interactive writes (`background_full`); lessons
    /// of a second that grow back while the owner carries them.
    owners: SendGate<(NodeId, Priority)>,
    recent: RecentIds,
}

/// A write's count in the owner's gate: its key there and what the gate handed out.
#[derive(Debug, Clone, Copy)]
struct OwnerSent {
    class: Priority,
    sent: Sent,
}

impl Sending {
    /// A write counted out for `key` (in the app's gate if `sent`, in the owner's) is counted
    /// back in, each gate learning what `lesson` says of its bound.
    fn ended(
        &mut self,
        key: &(NodeId, AppName),
        sent: Option<Sent>,
        owner_sent: OwnerSent,
        lesson: Lesson,
        now: Instant,
    ) {
        if let Some(sent) = sent {
            let for_app = match lesson {
                Lesson::Done => Ended::Done,
                Lesson::CallerCap => Ended::RefusedForCap,
                Lesson::OwnerBound | Lesson::Nothing => Ended::Other,
            };
            self.gate.ended(key, sent, for_app, now);
        }
        let for_owner = match lesson {
            Lesson::Done => Ended::Done,
            Lesson::OwnerBound => Ended::RefusedForCap,
            Lesson::CallerCap | Lesson::Nothing => Ended::Other,
        };
        self.owners
            .ended(&(key.0, owner_sent.class), owner_sent.sent, for_owner, now);
    }
}

/// A write counted out in the send gates; counted back in when dropped, on every path.
struct Out {
    sending: Arc<Mutex<Sending>>,
    clock: Arc<dyn Clock>,
    key: (NodeId, AppName),
    sent: Sent,
    /// Its count in [`Sending::owners`].
    owner_sent: OwnerSent,
    /// What the owner's answer (if any) says of the gates' bounds.
    lesson: Lesson,
}

impl Drop for Out {
    fn drop(&mut self) {
        let now = self.clock.now();
        self.sending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ended(
                &self.key,
                Some(self.sent),
                self.owner_sent,
                self.lesson,
                now,
            );
    }
}

/// What a write's outcome teaches the send gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lesson {
    /// Carried out: whatever was out beside it, the owner took it.
    Done,
    /// Refused `busy` for the app's cap at the owner (`caller_cap`).
    CallerCap,
    /// Refused `busy` for a bound of the owner's on this gateway's writes of the class, every
    /// app together: its wait bound (`saturated`, interactive writes) or its background bound
    /// (`background_full`).
    OwnerBound,
    /// Anything else says nothing about either bound.
    Nothing,
}

/// What the send gates learn from a write's outcome: the owner's `caller_cap` refusal lowers
/// the app's lesson, its `saturated` or `background_full` refusal the owner's for the class, a
/// write carried out may raise both, nothing else says anything about either bound.
fn lesson_of(outcome: &WriteOutcome) -> Lesson {
    match outcome {
        WriteOutcome::Answered(WriteAnswer::Done { .. }) => Lesson::Done,
        WriteOutcome::Answered(WriteAnswer::Refused(refusal))
            if refusal.code == RefusalCode::Busy =>
        {
            match refusal.reason.as_deref() {
                Some(reason) if reason == Refused::CallerCap.name() => Lesson::CallerCap,
                Some(reason)
                    if reason == Refused::Saturated.name()
                        || reason == Refused::BackgroundFull.name() =>
                {
                    Lesson::OwnerBound
                }
                _ => Lesson::Nothing,
            }
        }
        _ => Lesson::Nothing,
    }
}

impl TicketSource for Writes {
    /// A cached ticket while it is comfortably unexpired; else (or with `renew`) a fresh one
    /// from the owner, checked to be the owner's and for this node before it is cached.
    async fn ticket(
        &self,
        target: &Target,
        app: &AppName,
        vault: &VaultName,
        renew: bool,
        deadline: Instant,
    ) -> Result<Ticket, TicketError> {
        if renew {
            self.tickets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .invalidate(&target.node, app, vault);
            self.metrics.ticket_renewal();
        } else if let Some(ticket) = self.tickets.lock().unwrap_or_else(|p| p.into_inner()).get(
            &target.node,
            app,
            vault,
            self.clock.unix_ms(),
        ) {
            return Ok(ticket.clone());
        }
        let request = TicketRequest {
            app: app.clone(),
            vault: vault.clone(),
            verbs: VerbSet::all_writes(),
        };
        // Boxed: the request for a ticket is the rare path, and its state would otherwise make
        // every write's future a kilobyte larger (see `Caller::write_connection`).
        match Box::pin(
            self.network
                .caller()
                .issue_ticket(target, request, deadline),
        )
        .await
        {
            Ok(TicketAnswer::Issued(ticket)) => {
                if !ticket.is_signed_by(&target.node) || ticket.claims.holder != self.network.me() {
                    return Err(TicketError::NotTheOwners {
                        owner: target.label.clone(),
                    });
                }
                self.tickets
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(ticket.clone());
                Ok(ticket)
            }
            Ok(TicketAnswer::Refused(refusal)) => Err(TicketError::Refused {
                owner: target.label.clone(),
                refusal,
            }),
            Err(source) => Err(TicketError::Unreachable { source }),
        }
    }
}
