//! What this gateway does with requests from peers: the `Service` of `ferry_peer::door`.
//!
//! Writes pass the door first (the ticket must be this owner's, held by the key on the TLS
//! connection, cover the app, vault and verb, be unexpired and of the current epoch). A refusal
//! there is `401 ticket_refused` with `at_door: true` and is not journaled: no verb ran, so the
//! caller may renew its ticket and send the same request id once more.

use std::sync::Arc;
use std::time::Duration;

use ferry_core::clock::Clock;
use ferry_peer::call::WriteCall;
use ferry_peer::door::{ReadReply, Service};
use ferry_peer::outcome::{Refusal, RefusalCode};
use ferry_peer::tls::TrustedKeys;
use ferry_peer::wire::{
    CallState, CallStatusRequest, Hello, ReadAnswer, ReadRequest, ReadVerb, TicketAnswer,
    TicketRequest, WriteAnswer, WriteRequest,
};
use ferry_ticket::NodeId;
use tracing::Instrument;

use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;
use crate::names::VaultName;
use crate::network::Network;
use crate::owner::executor::SubmitError;
use crate::owner::Owner;
use crate::pacer::PushPacer;
use crate::revisions::{is_empty_page, LongPoll};
use crate::vaults::Vaults;

/// The peer-facing face of a gateway.
#[derive(Debug, Clone)]
pub struct PeerService {
    owner: Arc<Owner>,
    network: Arc<Network>,
    vaults: Arc<Vaults>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    /// Background reads (replicas' change pages) served at once: a replica catching up reads
    /// as fast as this lets it, and no faster, so apps' calls keep the owner's time.
    background_reads: Arc<tokio::sync::Semaphore>,
    /// A stopping gateway answers its long polls at once (its drain waits for served streams).
    lifecycle: Arc<Lifecycle>,
    /// Paces each follower's long-poll answers while changes stream.
    pacer: Arc<PushPacer>,
}

fn untrusted() -> Refusal {
    Refusal::new(
        RefusalCode::Forbidden,
        "this gateway no longer trusts your node; ask its admin to `ferry trust` it again",
    )
}

fn stopping() -> Refusal {
    Refusal::busy(
        "the owner is stopping; not carried out, send it again later with the same request id",
        Duration::from_secs(1),
    )
}

impl PeerService {
    pub fn new(
        owner: Arc<Owner>,
        network: Arc<Network>,
        vaults: Arc<Vaults>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
        background_reads: usize,
        lifecycle: Arc<Lifecycle>,
    ) -> Self {
        Self {
            owner,
            network,
            vaults,
            metrics,
            pacer: Arc::new(PushPacer::new(clock.now())),
            clock,
            background_reads: Arc::new(tokio::sync::Semaphore::new(background_reads)),
            lifecycle,
        }
    }

    fn trusted(&self, from: &NodeId) -> bool {
        self.network.book().is_trusted(from)
    }

    /// A write from `from`: the door's checks (SPEC 7 rule 1), then the executor; a write on a
    /// stream that came `after_stop` began is not run, and hears what the executor's stopping
    /// path says of its id (`Executor::turn_away`).
    /// The owner's answer; `None` when it cannot say whether the write ran (its answer was
    /// lost, or a copy is still running in the drain), so the stream goes unanswered and the
    /// caller settles by id.
    async fn write_checked(
        &self,
        from: NodeId,
        request: WriteRequest,
        after_stop: bool,
    ) -> Option<WriteAnswer> {
        // The TLS handshake checked trust when the connection opened; an untrust since then
        // must still stop this peer's writes on that connection.
        if !self.trusted(&from) {
            return Some(WriteAnswer::Refused(untrusted()));
        }
        if let Err(refusal) = self.owner.check_door(from, &request) {
            self.metrics.door_refusal();
            return Some(WriteAnswer::Refused(refusal));
        }
        if after_stop {
            return answer_of(self.owner.executor().turn_away(from, request.request_id));
        }
        self.metrics.peer_write_served();
        let deadline = self.clock.now() + Duration::from_millis(u64::from(request.deadline_ms));
        let call = WriteCall {
            request_id: request.request_id,
            app: request.app,
            vault: request.vault,
            verb: request.verb,
            priority: request.priority,
        };
        answer_of(self.owner.executor().submit(from, call, deadline).await)
    }

    /// [`Self::write_checked`], in a span that follows the write by its request id.
    async fn write_traced(
        &self,
        from: NodeId,
        request: WriteRequest,
        after_stop: bool,
    ) -> Option<WriteAnswer> {
        let span = tracing::debug_span!(
            "owner_write",
            request_id = %request.request_id,
            app = %request.app,
            peer = %self.network.label_of(&from)
        );
        span.in_scope(
            || tracing::debug!(vault = %request.vault, after_stop, "received at the door"),
        );
        let answer = self
            .write_checked(from, request, after_stop)
            .instrument(span.clone())
            .await;
        span.in_scope(|| tracing::debug!(?answer, "answered"));
        answer
    }
}

/// The executor's word on a write as the door sends it: `None` (no answer, the caller settles)
/// when it cannot say whether the write ran; "stopping, not carried out" only when the
/// executor says nothing of it ran.
fn answer_of(executed: Result<WriteAnswer, SubmitError>) -> Option<WriteAnswer> {
    match executed {
        Ok(answer) => Some(answer),
        Err(SubmitError::Lost) => None,
        Err(SubmitError::Stopping | SubmitError::Full) => Some(WriteAnswer::Refused(stopping())),
    }
}

impl PeerService {
    /// One read of the local copy; a change page first waits for its turn among background
    /// work.
    /// `deadline`: the caller's, counted from the request's arrival.
    async fn read_once(&self, request: ReadRequest, deadline: tokio::time::Instant) -> ReadAnswer {
        let ReadRequest { vault, verb, .. } = request;
        // A change page is background work (a replica syncing): it waits for its turn, and a
        // page that cannot get one in time is `busy` (the puller asks again), said early enough
        // to reach the puller before its deadline (as a queued write is withdrawn).
        let _turn = match verb {
            ReadVerb::Changes { .. } => {
                let now = self.clock.now();
                let until = ferry_core::capacity::withdraw_at(deadline.into_std(), now);
                match tokio::time::timeout_at(until.into(), self.background_reads.acquire()).await {
                    Ok(Ok(permit)) => Some(permit),
                    _ => {
                        return ReadAnswer::Refused(Refusal::busy(
                            "the owner is serving other replicas' change pages; ask again",
                            Duration::from_millis(200),
                        ))
                    }
                }
            }
            _ => None,
        };
        match self.vaults.read_verb(vault.clone(), verb).await {
            Ok(Some(answer)) => answer,
            Ok(None) => ReadAnswer::Refused(Refusal::new(
                RefusalCode::UnknownVault,
                format!("this gateway holds no vault named {vault:?}"),
            )),
            Err(err) => ReadAnswer::Refused(Refusal::busy(
                format!("the store failed: {err}"),
                Duration::from_secs(1),
            )),
        }
    }
}

impl Service for PeerService {
    fn clock_ms(&self) -> Option<u64> {
        Some(self.network.clock().unix_ms())
    }

    async fn hello(&self, from: NodeId, hello: Hello, version: u16) -> Hello {
        if self.trusted(&from) {
            self.network
                .heard_hello(from, &hello.owned_vaults, &hello.replicated_vaults);
            self.network.heard_version(from, version, hello.release);
        }
        self.vaults.hello(self.network.label())
    }

    async fn write(&self, from: NodeId, request: WriteRequest) -> Option<WriteAnswer> {
        self.write_traced(from, request, false).await
    }

    async fn write_while_stopping(
        &self,
        from: NodeId,
        request: WriteRequest,
    ) -> Option<WriteAnswer> {
        self.write_traced(from, request, true).await
    }

    async fn read(&self, from: NodeId, request: ReadRequest, wait: Option<Duration>) -> ReadReply {
        if !self.trusted(&from) {
            return ReadAnswer::Refused(untrusted()).into();
        }
        self.metrics.peer_read_served();
        // One deadline for everything this request does, from its arrival.
        let arrived = tokio::time::Instant::from_std(self.clock.now());
        let deadline = arrived + Duration::from_millis(u64::from(request.deadline_ms));
        // A long poll of a change page of a vault held here. Nothing past the cursor: the
        // answer waits for the first commit or the end of the wait, leaving the caller a
        // quarter of its deadline to receive the page.
        let long_poll = match (&request.verb, wait) {
            (ReadVerb::Changes { .. }, Some(wait))
                if !wait.is_zero() && self.vaults.get(&request.vault).is_some() =>
            {
                let until = (arrived + wait).min(deadline - (deadline - arrived) / 4);
                let stopping = self.lifecycle.stopping();
                let revisions = self.vaults.revisions();
                let start = self.pacer.start(from, &request.vault);
                let long_poll = LongPoll::new(revisions, &request.vault, stopping, until)
                    .not_before(start.not_before);
                Some((long_poll, start))
            }
            _ => None,
        };
        let Some((long_poll, start)) = long_poll else {
            return self.read_once(request, deadline).await.into();
        };
        let (answer, woken_at) = long_poll
            .run(|| self.read_once(request.clone(), deadline), is_empty_page)
            .await;
        let mut news_age = None;
        if let ReadAnswer::Changes { changes, .. } = &answer {
            let news = !changes.is_empty();
            let now = self.clock.now();
            if news {
                if let Some(age) = start.news_age(woken_at, now) {
                    self.metrics.feed_push(age);
                    news_age = Some(age);
                }
            }
            self.pacer.answered(from, &request.vault, now, news);
        }
        drop(start.following);
        ReadReply { answer, news_age }
    }

    async fn issue_ticket(&self, from: NodeId, request: TicketRequest) -> TicketAnswer {
        let Some(label) = self.network.book().label_of(&from) else {
            return TicketAnswer::Refused(untrusted());
        };
        let answer = self.owner.issue_ticket(from, &label, request);
        if let TicketAnswer::Issued(_) = answer {
            self.metrics.ticket_issued();
        }
        answer
    }

    async fn call_status(
        &self,
        from: NodeId,
        request: CallStatusRequest,
        vault: Option<VaultName>,
    ) -> Option<CallState> {
        // A peer untrusted since its connection opened gets no tombstones written for it.
        if !self.trusted(&from) {
            return None;
        }
        if let Some(number) = crate::owner::fault::settle_state() {
            return Some(CallState::Unrecognized { number });
        }
        let span = tracing::debug_span!(
            "owner_settle",
            request_id = %request.request_id,
            peer = %self.network.label_of(&from)
        );
        let state = self
            .owner
            .executor()
            .status(from, request.request_id, vault)
            .instrument(span.clone())
            .await
            .ok();
        span.in_scope(|| tracing::debug!(?state, "settle query answered"));
        state
    }
}
