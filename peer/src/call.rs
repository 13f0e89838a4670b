//! The caller's side of a call to another gateway: choose a route, get a connection, send one
//! request frame on a new stream, and read one answer, all inside one deadline.
//!
//! Writes and reads share the plumbing but not the rules:
//! - a write is sent at most once. `Exchange` reports whether the request's first byte was
//!   handed to QUIC; before that point a failure is "nothing was sent" and one fresh LAN route
//!   may be tried; after it, nothing is ever sent again.
//! - a read may be repeated: a dead pooled connection costs one retry on a fresh one, and a
//!   failed route moves on to the next.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_names::{AppName, Label, VaultName};
use ferry_ticket::{NodeId, Ticket};
use quinn::Connection;
use tracing::{debug, Instrument};

use ferry_core::liveness::{
    self, Pace, PooledView, SilenceWatch, SIDE_PROBE_AFTER, SIDE_PROBE_WAIT, SILENCE_CHECK,
};
use ferry_core::read::{attempts, route_hedge_delay, Attempt};
use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::clock;
use crate::dials::{DialCounts, DialOutcome, Dials};
use crate::frames;
use crate::health::Failure;
use crate::outcome::{NotSentReason, Refusal, UnknownReason, WriteOutcome};
use crate::pool::{Pool, PooledConnection};
use crate::probe::{PortProbe, UdpProbe};
use crate::route_table::RouteTable;
use crate::routes::Route;
use crate::transport::{self, DialError, PeerEndpoint, ReadFrameError};
use crate::wire::{
    CallState, CallStatusRequest, Extensions, Heartbeat, Hello, Priority, ProtocolFailure,
    ReadAnswer, ReadRequest, Request, RequestFrame, RequestId, Response, TicketAnswer,
    TicketRequest, WriteRequest, WriteVerb,
};
use crate::write_machine::{Event, Race, Step, WriteMachine};

/// Timers of the caller's paths (SPEC 6 and 9), from `ferry-core`.
pub use ferry_core::liveness::CallTuning;

/// A peer as the caller sees it: who it must be, what to call it, and how to reach it.
#[derive(Debug, Clone)]
pub struct Target {
    pub node: NodeId,
    pub label: Label,
    /// Usable routes, best first. A write uses only these.
    pub routes: Vec<Route>,
    /// Routes currently down, best first: reads and settle queries (safe to repeat) try them
    /// after the usable ones, since a peer that just came back is down until re-probed.
    pub down_routes: Vec<Route>,
}

/// A write as the app asked for it, before a ticket and the time left are attached.
#[derive(Debug, Clone)]
pub struct WriteCall {
    pub request_id: RequestId,
    pub app: AppName,
    pub vault: VaultName,
    pub verb: WriteVerb,
    pub priority: Priority,
}

impl WriteCall {
    fn request(&self, ticket: Ticket, deadline: Instant) -> WriteRequest {
        WriteRequest {
            request_id: self.request_id,
            app: self.app.clone(),
            vault: self.vault.clone(),
            verb: self.verb.clone(),
            deadline_ms: ferry_core::capacity::owner_budget(
                deadline.saturating_duration_since(clock::now()),
            )
            .as_millis()
            .min(u128::from(u32::MAX)) as u32,
            priority: self.priority,
            ticket,
        }
    }
}

/// Where the caller's tickets come from: a cache in front of the owner's ticket exchange.
/// `renew` asks the owner for a fresh one (after a door refusal).
pub trait TicketSource: Send + Sync {
    fn ticket(
        &self,
        target: &Target,
        app: &AppName,
        vault: &VaultName,
        renew: bool,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Result<Ticket, TicketError>> + Send;
}

/// Why no ticket for a write could be had. The write was not sent: it ends `not_sent`
/// (`ticket_unavailable`) and may be sent again with the same request id.
#[derive(Debug, thiserror::Error)]
pub enum TicketError {
    /// The owner (`owner` is its label) sent a ticket not signed by itself or not made out to
    /// this node: it was thrown away. A peer that keeps doing this is misconfigured or not
    /// the node it is trusted as; check `ferry peers`.
    #[error("{owner} sent a ticket that is not its own or not for this node")]
    NotTheOwners { owner: Label },
    /// The owner answered and would not issue one (the app or the vault is not allowed, say);
    /// its refusal says why.
    #[error("{owner} refused to issue a ticket: {}", refusal.detail)]
    Refused { owner: Label, refusal: Refusal },
    /// The owner could not be asked: no route, or no answer in time. Try again later.
    #[error("no ticket could be had: {source}")]
    Unreachable { source: ReadError },
}

/// Why a read found no answer. Reads are safe to repeat, so every case may be tried again.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("no route to {label} is known; add one with `ferry trust ... --addr HOST:PORT`")]
    NoRoute { label: Label },
    #[error("{label} did not answer: {detail}")]
    Unavailable { label: Label, detail: String },
    #[error("{label} is stopping")]
    GoingAway { label: Label },
}

/// How one request/response exchange on a stream ended.
// One per exchange, matched once where it is made: boxing the answer would add an allocation
// to every call for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Exchange {
    /// The request never reached QUIC: nothing was sent.
    NotSent { detail: String },
    /// The request left and this came back, with the answer's extensions.
    Answered(Response, Extensions),
    /// The request left and no whole answer came back.
    Lost {
        reason: UnknownReason,
        detail: String,
    },
}

/// The caller: the endpoint it dials from, its pool, its timers, and the route table it
/// reports every route's successes and failures to.
#[derive(Debug, Clone)]
pub struct Caller {
    endpoint: PeerEndpoint,
    pool: Arc<Pool>,
    tuning: CallTuning,
    routes: Arc<RouteTable>,
    probe: Arc<dyn PortProbe>,
    dials: Arc<Dials>,
}

impl Caller {
    pub fn new(
        endpoint: PeerEndpoint,
        pool: Arc<Pool>,
        tuning: CallTuning,
        routes: Arc<RouteTable>,
    ) -> Self {
        Self::with_probe(endpoint, pool, tuning, routes, Arc::new(UdpProbe))
    }

    /// A caller whose side probe is `probe` (a simulation has no ICMP).
    pub fn with_probe(
        endpoint: PeerEndpoint,
        pool: Arc<Pool>,
        tuning: CallTuning,
        routes: Arc<RouteTable>,
        probe: Arc<dyn PortProbe>,
    ) -> Self {
        Self {
            endpoint,
            pool,
            tuning,
            routes,
            probe,
            dials: Dials::new(),
        }
    }

    pub fn routes(&self) -> &Arc<RouteTable> {
        &self.routes
    }

    /// How many dials this caller started, and how many calls joined one under way.
    pub fn dial_counts(&self) -> DialCounts {
        self.dials.counts()
    }

    /// One heartbeat on `route` (SPEC 8): its round-trip time, or why the route is down. A
    /// heartbeat that gets no answer is not a verdict by itself (silence is, over six
    /// intervals), unless the side probe finds the port closed.
    pub async fn heartbeat(
        &self,
        peer: NodeId,
        route: &Route,
        interval: Duration,
        timeout: Duration,
    ) -> Result<Duration, Option<Failure>> {
        self.heartbeat_with_clock(peer, route, interval, timeout)
            .await
            .map(|beat| beat.rtt)
    }

    /// [`Self::heartbeat`], with the peer's wall clock reading when it said one
    /// ([`crate::wire::EXT_CLOCK_MS`]); the caller compares it with its own clock
    /// ([`ferry_core::clock::offset_ms`]).
    pub async fn heartbeat_with_clock(
        &self,
        peer: NodeId,
        route: &Route,
        interval: Duration,
        timeout: Duration,
    ) -> Result<Beat, Option<Failure>> {
        let deadline = clock::now() + timeout;
        let frame = RequestFrame {
            body: Request::Heartbeat(Heartbeat {
                interval_ms: interval.as_millis().min(u128::from(u32::MAX)) as u32,
            }),
            ext: Extensions::default(),
        };
        let conn = match self.pool.get(peer, route.addr) {
            Some(pooled) => pooled.conn,
            None => match self.dial(peer, route.addr, deadline).await {
                Ok(conn) => conn,
                Err((reason, detail)) => {
                    return Err(match reason {
                        // A slow handshake is no verdict on the route; silence decides.
                        NotSentReason::ConnectTimedOut | NotSentReason::DeadlineSpent => None,
                        _ => Some(Failure::of_dial(reason, detail)),
                    });
                }
            },
        };
        let started = clock::now();
        // quinn ignores ICMP, so a heartbeat to a killed gateway would only time out. A side
        // probe once the answer is late (the same grace as a connect's) tells "not running" in
        // a millisecond, so a killed peer is known within about one interval while calls flow.
        let port_closed = async {
            tokio::time::sleep(SIDE_PROBE_AFTER.min(timeout)).await;
            if self.probe.refuses(route.addr, SIDE_PROBE_WAIT).await {
                return;
            }
            std::future::pending::<()>().await;
        };
        let exchanged = tokio::select! {
            biased;
            exchanged = exchange(&conn, &frame, deadline, &|| liveness::SILENT_AFTER, &self.endpoint, Pace::Close) => exchanged,
            () = port_closed => return Err(Some(Failure::PortClosed)),
        };
        if let Exchange::Answered(_, _) = exchanged {
            // The exact proof of life a write's window is measured against (`Pool::answered`).
            self.pool.answered(peer, route.addr, &conn);
        }
        match exchanged {
            Exchange::Answered(Response::Heartbeat(_), ext) => Ok(Beat {
                rtt: clock::since(started),
                their_unix_ms: ext.clock_ms(),
            }),
            Exchange::Answered(Response::Failed(ProtocolFailure::GoingAway), _) => {
                Err(Some(Failure::GoingAway))
            }
            Exchange::Answered(other, _) => Err(Some(Failure::Failed(format!(
                "answered a heartbeat with {other:?}"
            )))),
            Exchange::NotSent { .. } | Exchange::Lost { .. } => {
                if self.probe.refuses(route.addr, SIDE_PROBE_WAIT).await {
                    Err(Some(Failure::PortClosed))
                } else {
                    Err(None)
                }
            }
        }
    }

    /// Whether the port at `route` refuses datagrams right now (the gateway there is not
    /// running), within `wait`.
    pub async fn port_refuses(&self, route: &Route, wait: Duration) -> bool {
        self.probe.refuses(route.addr, wait).await
    }

    /// How much silence ends a call waiting on `conn`, a connection on `addr` to `peer`
    /// (`ferry_core::liveness::exchange_silence`), asked afresh at each look: the route's
    /// heartbeat interval shortens as soon as calls use it.
    fn silence_of<'a>(
        &'a self,
        peer: NodeId,
        addr: SocketAddr,
        conn: &'a Connection,
    ) -> impl Fn() -> Duration + Sync + 'a {
        move || {
            liveness::exchange_silence(
                self.routes.published(peer, addr),
                self.pool.is_pooled(peer, addr, conn),
            )
        }
    }

    /// Whether this gateway is behind reading its peer socket ([`PeerEndpoint::behind`]).
    pub fn endpoint_behind(&self) -> bool {
        self.endpoint.behind()
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Waits, at most until `deadline`, for this gateway to keep up with its peer socket
    /// ([`PeerEndpoint::keeping_up`]) before a call sends anything; false if the deadline came
    /// first. An app flooding its gateway with calls otherwise has it send faster than it reads
    /// the answers, until the answers of calls already out come later than their deadlines.
    async fn keeping_up(&self, deadline: Instant) -> bool {
        tokio::time::timeout_at(
            tokio::time::Instant::from_std(deadline),
            self.endpoint.keeping_up(),
        )
        .await
        .is_ok()
    }

    /// Carries out a write to its owner, at most once (SPEC 6 rules 3-8): the decisions are
    /// [`WriteMachine`]'s; this performs its steps.
    pub async fn write<T: TicketSource>(
        &self,
        target: &Target,
        call: &WriteCall,
        tickets: &T,
        deadline: Instant,
    ) -> WriteOutcome {
        let span = tracing::debug_span!(
            "write",
            request_id = %call.request_id,
            app = %call.app,
            peer = %target.label
        );
        let outcome = self
            .write_steps(target, call, tickets, deadline)
            .instrument(span.clone())
            .await;
        span.in_scope(|| debug!(?outcome, "write ended"));
        outcome
    }

    async fn write_steps<T: TicketSource>(
        &self,
        target: &Target,
        call: &WriteCall,
        tickets: &T,
        deadline: Instant,
    ) -> WriteOutcome {
        if !self.keeping_up(deadline).await {
            return WriteOutcome::not_sent(
                NotSentReason::DeadlineSpent,
                format!(
                    "this gateway was behind reading its peers' answers until the deadline of \
                     the write to {}",
                    target.label
                ),
            );
        }
        self.routes.calling(target.node, clock::now());
        let kinds: Vec<_> = target.routes.iter().map(|r| r.kind).collect();
        let (mut machine, mut step) = WriteMachine::start(deadline, clock::now(), &kinds);
        let mut ticket = None;
        // When the request was lost on its way: settle queries use only connections made after.
        let mut lost_at = None;
        loop {
            let event = match step {
                Step::Finish(outcome) => return outcome,
                Step::GetTicket { renew } => {
                    match tickets
                        .ticket(target, &call.app, &call.vault, renew, deadline)
                        .await
                    {
                        Ok(fresh) => {
                            ticket = Some(fresh);
                            Event::TicketReady
                        }
                        Err(err) => Event::TicketUnavailable {
                            detail: err.to_string(),
                        },
                    }
                }
                Step::Send { route, race } => match (target.routes.get(route), ticket.clone()) {
                    (Some(chosen), Some(ticket)) => {
                        let race = race.and_then(|race| {
                            target.routes.get(race.route).map(|route| (route, race))
                        });
                        self.send_write(
                            target,
                            chosen,
                            race,
                            call.request(ticket, deadline),
                            deadline,
                        )
                        .await
                    }
                    (None, _) => match self.routes.version_mismatch(target.node, clock::now()) {
                        // Down for a protocol mismatch: say so, with both ranges.
                        Some(detail) => Event::NotSent {
                            reason: NotSentReason::VersionMismatch,
                            detail,
                        },
                        None => Event::NotSent {
                            reason: NotSentReason::NoRoute,
                            detail: if target.down_routes.is_empty() {
                                format!("no route to {} is known", target.label)
                            } else {
                                format!(
                                    "every route to {} is down (see `ferry routes`)",
                                    target.label
                                )
                            },
                        },
                    },
                    (_, None) => Event::TicketUnavailable {
                        detail: "no ticket in hand".into(),
                    },
                },
                Step::Settle { after } => {
                    // Rule 7: the machine says when (at once, then paced inside the deadline).
                    if !after.is_zero() {
                        tokio::time::sleep(after).await;
                    }
                    match self
                        .call_status(
                            target,
                            call.request_id,
                            Some(&call.vault),
                            deadline,
                            Some(lost_at.unwrap_or_else(clock::now)),
                        )
                        .await
                    {
                        Ok(state) => Event::Settled(state),
                        Err(err) => Event::SettleFailed {
                            detail: err.to_string(),
                        },
                    }
                }
            };
            if let Event::Lost { .. } = event {
                lost_at = Some(clock::now());
            }
            step = machine.on(event, clock::now());
        }
    }

    /// One send: a connection fit for a write (on `route`, or on the race's route if that
    /// connects first), a new stream, one frame.
    async fn send_write(
        &self,
        target: &Target,
        route: &Route,
        race: Option<(&Route, Race)>,
        request: WriteRequest,
        deadline: Instant,
    ) -> Event {
        let frame = RequestFrame {
            body: Request::Write(Box::new(request)),
            ext: Extensions::default(),
        };
        let (conn, route) = match self
            .connection_for_write(target, route, race, deadline)
            .await
        {
            Ok(chosen) => chosen,
            Err((reason, detail)) => {
                debug!(peer = %target.label, %detail, "write not sent");
                return Event::NotSent { reason, detail };
            }
        };
        let route = &route;
        let silence = self.silence_of(target.node, route.addr, &conn);
        let exchanged = exchange(
            &conn,
            &frame,
            deadline,
            &silence,
            &self.endpoint,
            Pace::Close,
        )
        .instrument(tracing::debug_span!("send", route = %route))
        .await;
        if let Exchange::Answered(_, _) = exchanged {
            self.pool.answered(target.node, route.addr, &conn);
            self.routes.calling(target.node, clock::now());
            self.routes.carried(target.node, route.addr, clock::now());
        }
        match exchanged {
            Exchange::NotSent { detail } => Event::NotSent {
                reason: NotSentReason::ConnectFailed,
                detail,
            },
            Exchange::Answered(Response::Write(answer), _) => Event::Answered(answer),
            // The owner turned this copy away unread while stopping: that says nothing of the
            // id, which an earlier copy may have run (an owner of this build answers a write
            // from its journal instead; a release before it said this to every write after its
            // stop). Settled by asking, as a break after the send is.
            Exchange::Answered(Response::Failed(ProtocolFailure::GoingAway), _) => Event::Lost {
                reason: UnknownReason::ConnectionLost,
                detail: format!(
                    "{} is stopping and turned the write away without saying whether its request id ran",
                    target.label
                ),
            },
            Exchange::Answered(other, _) => Event::Lost {
                reason: UnknownReason::ConnectionLost,
                detail: format!("{} answered a write with {other:?}", target.label),
            },
            Exchange::Lost { reason, detail } => Event::Lost { reason, detail },
        }
    }

    /// A connection for a write on `route`, raced against the race's route (started `after`
    /// the first and bounded to end with the first's connect timeout), as the write machine
    /// decided. Nothing is sent until one wins, so racing connects cannot send a write twice.
    /// Every route that fails is marked down.
    async fn connection_for_write(
        &self,
        target: &Target,
        route: &Route,
        race: Option<(&Route, Race)>,
        deadline: Instant,
    ) -> Result<(Connection, Route), (NotSentReason, String)> {
        let Some((alternate, race)) = race else {
            return match self.write_connection(target.node, route, deadline).await {
                Ok(conn) => Ok((conn, *route)),
                Err(failure) => Err(self.route_failed(target, route, failure)),
            };
        };
        let started = clock::now();
        let alternate_deadline = deadline.min(started + self.tuning.connect_timeout);
        let first = self.write_connection(target.node, route, deadline);
        let second = async {
            tokio::time::sleep(race.after).await;
            self.write_connection(target.node, alternate, alternate_deadline)
                .await
        };
        tokio::pin!(first, second);
        let (mut first_done, mut second_done) = (false, false);
        let mut last_failure = None;
        while !(first_done && second_done) {
            tokio::select! {
                // Biased: the first route wins a tie, and a simulation's seed replays.
                biased;
                result = &mut first, if !first_done => {
                    first_done = true;
                    match result {
                        Ok(conn) => return Ok((conn, *route)),
                        Err(failure) => last_failure = Some(self.route_failed(target, route, failure)),
                    }
                }
                result = &mut second, if !second_done => {
                    second_done = true;
                    match result {
                        Ok(conn) => return Ok((conn, *alternate)),
                        Err(failure) => last_failure = Some(self.route_failed(target, alternate, failure)),
                    }
                }
            }
        }
        Err(last_failure.unwrap_or((NotSentReason::NoRoute, "no route answered".into())))
    }

    /// SPEC 8: a route that fails before a send is down.
    fn route_failed(
        &self,
        target: &Target,
        route: &Route,
        (reason, detail): (NotSentReason, String),
    ) -> (NotSentReason, String) {
        debug!(peer = %target.label, route = %route, %detail, "route failed before a send");
        let why = match reason {
            NotSentReason::DeadlineSpent => None,
            _ => Some(Failure::of_dial(reason, detail.clone())),
        };
        if let Some(why) = why {
            self.routes
                .failed(target.node, route.addr, clock::now(), why);
        }
        (reason, detail)
    }

    /// A connection fit to carry a write: pooled and proven alive, or opened now.
    async fn write_connection(
        &self,
        peer: NodeId,
        route: &Route,
        deadline: Instant,
    ) -> Result<Connection, (NotSentReason, String)> {
        if let Some(pooled) = self.pool.get(peer, route.addr) {
            // Asked of the connection itself, exactly, here: a write must not go on a
            // connection that closed a moment ago.
            let view = PooledView {
                closed: pooled.conn.close_reason().is_some(),
                ..pooled.view()
            };
            // The proof must be as fresh as the route's heartbeats allow: about one interval
            // of a peer in use, so a write rarely enters a path that just died.
            let window = match self.routes.published(peer, route.addr) {
                Some(published) => liveness::write_window(published, &self.tuning),
                None => self.tuning.write_liveness,
            };
            if liveness::fit_for_write(&view, window) {
                return Ok(pooled.conn);
            }
            debug!(route = %route, heard_ago_ms = pooled.heard_ago.as_millis() as u64, "pooled connection not proven alive; dialing fresh for a write");
        }
        // Boxed: a dial's state is about a kilobyte, and every write's future would carry
        // room for it (and copy it at each `await` above) though most writes take a pooled
        // connection and never dial.
        Box::pin(self.dial(peer, route.addr, deadline)).await
    }

    /// A fresh connection to `peer` at `addr`, made for this call or for others wanting one
    /// there at the same moment ([`Dials`]), waited for at most until `deadline` allows.
    async fn dial(
        &self,
        peer: NodeId,
        addr: SocketAddr,
        deadline: Instant,
    ) -> Result<Connection, (NotSentReason, String)> {
        let Some(wait) = liveness::connect_timeout(deadline, clock::now(), &self.tuning) else {
            return Err((
                NotSentReason::DeadlineSpent,
                "the deadline passed before a connection was made".into(),
            ));
        };
        let (endpoint, probe, pool) = (
            self.endpoint.clone(),
            Arc::clone(&self.probe),
            Arc::clone(&self.pool),
        );
        // The dial itself gets the whole connect timeout: a call in a hurry stops waiting
        // without cutting the handshake short for the calls that joined it.
        let timeout = self.tuning.connect_timeout;
        self.dials
            .fresh(peer, addr, wait, move || {
                dial_now(endpoint, probe, pool, peer, addr, timeout)
                    // Its own span: the calls that join it are not the one that started it.
                    .instrument(tracing::debug_span!(parent: None, "dial", %addr, %peer))
            })
            .await
    }

    /// Sends a read, trying routes in order; a dead pooled connection costs one fresh retry.
    pub async fn read(
        &self,
        target: &Target,
        request: ReadRequest,
        deadline: Instant,
    ) -> Result<ReadAnswer, ReadError> {
        // Held back like a write, and past the deadline not sent at all: a gateway this far
        // behind would only add to what it has not read.
        if !self.keeping_up(deadline).await {
            return Err(ReadError::Unavailable {
                label: target.label.clone(),
                detail: "this gateway was behind reading its peers' answers until the deadline; \
                         the read was not sent"
                    .into(),
            });
        }
        match self
            .idempotent(target, Request::Read(request), deadline, None)
            .await?
        {
            Response::Read(answer) => Ok(answer),
            other => Err(unexpected(target, "a read", &other)),
        }
    }

    /// [`Caller::read`] as a long poll: the peer may hold its answer up to `wait` for news
    /// (only a change page honours it, [`crate::wire::EXT_WAIT_MS`]; a peer that does not know
    /// the extension answers at once). `deadline` must leave room for the wait.
    pub async fn read_waiting(
        &self,
        target: &Target,
        request: ReadRequest,
        wait: Duration,
        deadline: Instant,
    ) -> Result<Polled, ReadError> {
        let frame = RequestFrame {
            body: Request::Read(request),
            ext: Extensions::wait(wait),
        };
        let reply = self
            .idempotent_frame(target, frame, wait, deadline, None)
            .await?;
        match reply.response {
            Response::Read(answer) => Ok(Polled {
                answer,
                news_age: reply.ext.news_age_of().map(|age| age + reply.rtt / 2),
            }),
            other => Err(unexpected(target, "a read", &other)),
        }
    }

    /// Tells a peer who this gateway is and which vaults it has; learns the same of the peer,
    /// and the protocol version their connection agreed on.
    pub async fn hello(
        &self,
        target: &Target,
        hello: Hello,
        deadline: Instant,
    ) -> Result<(Hello, u16), ReadError> {
        match self
            .idempotent_on(target, Request::Hello(hello), deadline, None)
            .await?
        {
            (Response::Hello(theirs), version) => Ok((theirs, version)),
            (other, _) => Err(unexpected(target, "a hello", &other)),
        }
    }

    /// Sends a request that is safe to repeat, trying routes in order.
    async fn idempotent(
        &self,
        target: &Target,
        body: Request,
        deadline: Instant,
        made_after: Option<Instant>,
    ) -> Result<Response, ReadError> {
        self.idempotent_on(target, body, deadline, made_after)
            .await
            .map(|(response, _)| response)
    }

    /// Asks the owner for a ticket (safe to repeat).
    pub async fn issue_ticket(
        &self,
        target: &Target,
        request: TicketRequest,
        deadline: Instant,
    ) -> Result<TicketAnswer, ReadError> {
        match self
            .idempotent(target, Request::IssueTicket(request), deadline, None)
            .await?
        {
            Response::Ticket(answer) => Ok(answer),
            other => Err(unexpected(target, "a ticket request", &other)),
        }
    }

    /// Asks the owner what became of `request_id` (a read: safe to repeat), naming the vault
    /// its write was for when that is known, so a tombstone names it too
    /// ([`crate::wire::EXT_VAULT`]). With `made_after` (a break), only connections made after
    /// it are used: one older may be the dead one. A connection another call made since, or a
    /// dial under way, will do ([`Dials`]).
    pub async fn call_status(
        &self,
        target: &Target,
        request_id: RequestId,
        vault: Option<&VaultName>,
        deadline: Instant,
        made_after: Option<Instant>,
    ) -> Result<CallState, ReadError> {
        let frame = RequestFrame {
            body: Request::CallStatus(CallStatusRequest { request_id }),
            ext: vault.map(Extensions::vault).unwrap_or_default(),
        };
        let reply = self
            .idempotent_frame(target, frame, Duration::ZERO, deadline, made_after)
            .await?;
        match reply.response {
            Response::CallStatus(state) => Ok(state),
            other => Err(unexpected(target, "a status request", &other)),
        }
    }

    /// Sends a request that is safe to repeat, trying routes in order; the answer comes with
    /// the protocol version of the connection that carried it. A route whose connection goes
    /// quiet while the answer is awaited is *hedged*: the request is also sent on the next
    /// route (`ferry_core::read::route_hedge_delay`), and the first answer wins. So a path
    /// that dies under a read costs the read one hedge delay, not a timeout.
    async fn idempotent_on(
        &self,
        target: &Target,
        body: Request,
        deadline: Instant,
        made_after: Option<Instant>,
    ) -> Result<(Response, u16), ReadError> {
        let frame = RequestFrame {
            body,
            ext: Extensions::default(),
        };
        self.idempotent_frame(target, frame, Duration::ZERO, deadline, made_after)
            .await
            .map(|reply| (reply.response, reply.version))
    }

    /// [`Caller::idempotent_on`] with the frame's extensions given, and `wait`: how long the
    /// peer may hold its answer back on purpose (a long poll), added to a pooled attempt's own
    /// short bound so the wait is not taken for a dead connection.
    async fn idempotent_frame(
        &self,
        target: &Target,
        frame: RequestFrame,
        wait: Duration,
        deadline: Instant,
        made_after: Option<Instant>,
    ) -> Result<Reply, ReadError> {
        // A hello (sent when a peer is trusted or found) is no sign the peer will be called:
        // it leaves the heartbeats at their idle pace. Nor is a long poll (a caught-up
        // replica's question, held open at the owner for news): nobody waits on its route, and
        // counting it would keep every follower heartbeating its owner every 50 ms for as long
        // as it follows (twenty followers: 400 heartbeats a second, a tenth of the owner's
        // core at rest, measured).
        let is_use = !matches!(frame.body, Request::Hello(_)) && wait.is_zero();
        if is_use {
            self.routes.calling(target.node, clock::now());
        }
        // Ranked now, not when the call started: a retry after a break (a settle query above
        // all) must not go back to the route that just died.
        let routes: Vec<Route> = match self.routes.ranked(target.node, clock::now()) {
            (usable, down) if usable.is_empty() && down.is_empty() => target
                .routes
                .iter()
                .chain(&target.down_routes)
                .copied()
                .collect(),
            (usable, down) => usable.into_iter().chain(down).collect(),
        };
        let mut last_error = None;
        let mut next = 0;
        let mut running = FuturesUnordered::new();
        // The connection the newest attempt uses, if pooled: its silence starts the hedge.
        let mut watched: Option<(Option<Connection>, Duration)> = None;
        loop {
            if running.is_empty() {
                let Some(route) = routes.get(next) else { break };
                if next > 0 && clock::now() >= deadline {
                    break;
                }
                watched = Some(self.hedge_watch(target.node, route, made_after));
                running.push(self.on_route(target, *route, &frame, wait, deadline, made_after));
                next += 1;
            }
            let hedge = async {
                match &watched {
                    // A long poll is quiet on purpose: its silence says nothing about the path
                    // (a dead one ends the attempt through the connection's own silence, at
                    // the idle heartbeat's pace since a long poll is not a call, or at the
                    // end of its wait; the next route is tried then).
                    Some((conn, delay)) if next < routes.len() && wait.is_zero() => {
                        path_goes_quiet(conn.as_ref(), *delay).await
                    }
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                // Biased: an answer wins over a hedge decided in the same poll.
                biased;
                Some(ended) = running.next() => match ended {
                    OnRoute::Answered(reply) => return Ok(*reply),
                    OnRoute::GoingAway => {
                        return Err(ReadError::GoingAway {
                            label: target.label.clone(),
                        })
                    }
                    OnRoute::Failed(detail) => last_error = Some(detail),
                },
                () = hedge => {
                    let route = routes[next];
                    debug!(peer = %target.label, %route, "no word on the route in use: the request goes on the next route too");
                    watched = Some(self.hedge_watch(target.node, &route, made_after));
                    running.push(self.on_route(target, route, &frame, wait, deadline, made_after));
                    next += 1;
                }
            }
        }
        Err(match last_error {
            None => ReadError::NoRoute {
                label: target.label.clone(),
            },
            Some(detail) => ReadError::Unavailable {
                label: target.label.clone(),
                detail,
            },
        })
    }

    /// What the hedge watches on `route`: the pooled connection a request would use there
    /// (`None`: it will dial, and a dial says nothing until it is done), and how long a silence
    /// on it starts the next route.
    fn hedge_watch(
        &self,
        peer: NodeId,
        route: &Route,
        made_after: Option<Instant>,
    ) -> (Option<Connection>, Duration) {
        let pooled = self.pool.get(peer, route.addr).filter(|pooled| {
            !too_old(pooled, made_after) && liveness::fit_for_read(&pooled.view(), &self.tuning)
        });
        let rtt = pooled.as_ref().map(|pooled| pooled.rtt);
        (pooled.map(|pooled| pooled.conn), route_hedge_delay(rtt))
    }

    /// One route's part of a request that is safe to repeat: the plan is
    /// `ferry_core::read::attempts` (a pooled connection first, if its peer was heard lately,
    /// with a short attempt; if it turns out dead, one fresh one).
    async fn on_route(
        &self,
        target: &Target,
        route: Route,
        frame: &RequestFrame,
        wait: Duration,
        deadline: Instant,
        made_after: Option<Instant>,
    ) -> OnRoute {
        let pooled = self.pool.get(target.node, route.addr);
        let plan = attempts(
            pooled.as_ref().map(|p| p.view()).as_ref(),
            pooled
                .as_ref()
                .is_some_and(|pooled| too_old(pooled, made_after)),
            clock::now(),
            deadline,
            &self.tuning,
        );
        let mut last_error = String::from("no attempt could be made before the deadline");
        for attempt in plan {
            let (conn, attempt_deadline) = match (attempt, &pooled) {
                (Attempt::Pooled { until }, Some(pooled)) => {
                    (pooled.conn.clone(), (until + wait).min(deadline))
                }
                (Attempt::Pooled { .. }, None) => continue,
                (Attempt::Fresh, _) => match self.dial(target.node, route.addr, deadline).await {
                    Ok(conn) => (conn, deadline),
                    Err((reason, detail)) => {
                        let why = Failure::of_dial(reason, detail.clone());
                        self.routes
                            .failed(target.node, route.addr, clock::now(), why);
                        return OnRoute::Failed(detail);
                    }
                },
            };
            let silence = self.silence_of(target.node, route.addr, &conn);
            match exchange(
                &conn,
                frame,
                attempt_deadline,
                &silence,
                &self.endpoint,
                Pace::of_read(wait),
            )
            .await
            {
                Exchange::Answered(Response::Failed(ProtocolFailure::GoingAway), _) => {
                    self.routes
                        .failed(target.node, route.addr, clock::now(), Failure::GoingAway);
                    return OnRoute::GoingAway;
                }
                Exchange::Answered(response, ext) => {
                    self.pool.answered(target.node, route.addr, &conn);
                    self.routes.carried(target.node, route.addr, clock::now());
                    return OnRoute::Answered(Box::new(Reply {
                        response,
                        version: transport::protocol_of(&conn).unwrap_or_default(),
                        ext,
                        rtt: conn.rtt(),
                    }));
                }
                Exchange::NotSent { detail } | Exchange::Lost { detail, .. } => {
                    last_error = detail;
                }
            }
            if clock::now() >= deadline {
                break;
            }
        }
        OnRoute::Failed(last_error)
    }
}

/// An answer to a request that is safe to repeat, with what came with it.
#[derive(Debug)]
struct Reply {
    response: Response,
    /// The protocol version of the connection that carried it.
    version: u16,
    ext: Extensions,
    /// That connection's smoothed round trip (quinn's estimate).
    rtt: Duration,
}

/// A long poll's answer, and for news, how long ago the commit that made it happened as the
/// answer arrived here: the owner's age of the news when the answer left
/// ([`crate::wire::EXT_NEWS_AGE_US`]) plus half the connection's smoothed round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Polled {
    pub answer: ReadAnswer,
    pub news_age: Option<Duration>,
}

/// How one route's part of a request that is safe to repeat ended.
enum OnRoute {
    /// Boxed: an answer is far larger than the other ends (the futures racing hold one each).
    Answered(Box<Reply>),
    /// The peer said it is stopping: no other route will do better.
    GoingAway,
    Failed(String),
}

/// Resolves once `conn` has heard nothing for a whole `delay` (at once after `delay` when
/// there is no connection to watch). A live path always says something within it: the
/// acknowledgement of the request, a heartbeat's answer.
async fn path_goes_quiet(conn: Option<&Connection>, delay: Duration) {
    let Some(conn) = conn else {
        tokio::time::sleep(delay).await;
        return;
    };
    let mut last = conn.stats().udp_rx.datagrams;
    loop {
        tokio::time::sleep(delay).await;
        let count = conn.stats().udp_rx.datagrams;
        if count == last {
            return;
        }
        last = count;
    }
}

/// A peer answered a request with a response of another kind.
fn unexpected(target: &Target, request: &str, answer: &Response) -> ReadError {
    ReadError::Unavailable {
        label: target.label.clone(),
        detail: format!("answered {request} with {answer:?}"),
    }
}

/// A heartbeat's answer: the round trip, and the peer's wall clock reading (when it sent one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    pub rtt: Duration,
    pub their_unix_ms: Option<u64>,
}

/// One request and one answer on a new bidirectional stream, within `deadline`, in the
/// protocol version the connection agreed on; given up as lost once the connection has been
/// silent for `silence()`, looked at as `pace` says.
async fn exchange(
    conn: &Connection,
    frame: &RequestFrame,
    deadline: Instant,
    silence: &(dyn Fn() -> Duration + Sync),
    endpoint: &PeerEndpoint,
    pace: Pace,
) -> Exchange {
    let Some(version) = transport::protocol_of(conn) else {
        return Exchange::NotSent {
            detail: "the connection agreed on no protocol version".into(),
        };
    };
    let frame = match frames::encode_request(version, frame) {
        Ok(frame) => frame,
        Err(err) => {
            return Exchange::NotSent {
                detail: err.to_string(),
            }
        }
    };
    let frame = frame.as_slice();
    let deadline = tokio::time::Instant::from_std(deadline);
    let (mut send, mut recv) = match tokio::time::timeout_at(deadline, conn.open_bi()).await {
        Err(_) => {
            return Exchange::NotSent {
                detail: "no stream could be opened before the deadline".into(),
            }
        }
        Ok(Err(err)) => {
            return Exchange::NotSent {
                detail: format!("the connection is closed: {err}"),
            }
        }
        Ok(Ok(stream)) => stream,
    };
    // The first write is the line: once QUIC accepted a byte of the request, it may reach the
    // owner, so every failure from here on is an unknown outcome, never "nothing was sent".
    let first = match tokio::time::timeout_at(deadline, send.write(frame)).await {
        Err(_) => {
            return Exchange::NotSent {
                detail: "the stream did not accept the request before the deadline".into(),
            }
        }
        Ok(Err(err)) => {
            return Exchange::NotSent {
                detail: format!("the stream refused the request: {err}"),
            }
        }
        Ok(Ok(written)) => written,
    };
    debug!(
        bytes = first,
        "request handed to QUIC: it may reach the peer from now on"
    );
    let sent_and_answered = async {
        transport::write_frame(&mut send, &frame[first..])
            .await
            .map_err(|err| err.to_string())?;
        transport::read_response(&mut recv, version)
            .await
            .map_err(|err| match err {
                ReadFrameError::Broken { source } => source.to_string(),
                other => format!("the answer was not a valid frame: {other}"),
            })
    };
    let answered = tokio::select! {
        // Biased: an answer that arrived wins over silence noticed in the same poll.
        biased;
        answered = tokio::time::timeout_at(deadline, sent_and_answered) => answered,
        () = gone_silent(conn, silence, endpoint, pace) => {
            // Nothing heard for three heartbeats (or QUIC's idle timeout): the path is dead,
            // whatever the owner is doing. Close it so nobody reuses it, and let the caller
            // settle elsewhere.
            conn.close(quinn::VarInt::from_u32(0), b"silent");
            return Exchange::Lost {
                reason: UnknownReason::ConnectionLost,
                detail: "the connection went silent".into(),
            };
        }
    };
    match answered {
        Err(_) => Exchange::Lost {
            reason: UnknownReason::TimedOut,
            detail: "no answer came back before the deadline".into(),
        },
        Ok(Err(detail)) => match refused_handshake(conn) {
            Some(refusal) => Exchange::NotSent { detail: refusal },
            None => Exchange::Lost {
                reason: UnknownReason::ConnectionLost,
                detail,
            },
        },
        Ok(Ok(response)) => Exchange::Answered(response.body, response.ext),
    }
}

/// Whether `pooled` was made before `made_after` (a break), so it may be the connection that
/// died and must not carry the call.
fn too_old(pooled: &PooledConnection, made_after: Option<Instant>) -> bool {
    made_after.is_some_and(|broke| pooled.made_at < broke)
}

/// One dial to `peer` at `addr`, bounded by `timeout`; a connection made goes into the pool.
async fn dial_now(
    endpoint: PeerEndpoint,
    probe: Arc<dyn PortProbe>,
    pool: Arc<Pool>,
    peer: NodeId,
    addr: SocketAddr,
    timeout: Duration,
) -> DialOutcome {
    // quinn ignores ICMP, so a connect to a stopped gateway would wait out the whole
    // timeout. A side probe after a short grace tells "port closed" in a millisecond.
    let port_closed = async {
        tokio::time::sleep(SIDE_PROBE_AFTER.min(timeout)).await;
        if probe.refuses(addr, timeout).await {
            return;
        }
        std::future::pending::<()>().await;
    };
    let dialed = tokio::select! {
        biased;
        dialed = endpoint.dial(addr, peer, timeout) => dialed,
        () = port_closed => {
            return Err((
                NotSentReason::PortClosed,
                format!("nothing listens at {addr}: the gateway there is not running"),
            ));
        }
    };
    match dialed {
        Ok(conn) => {
            pool.insert(peer, addr, conn.clone());
            Ok(conn)
        }
        Err(err) => {
            let reason = match err {
                DialError::TimedOut { .. } => NotSentReason::ConnectTimedOut,
                DialError::KeyMismatch { .. } => NotSentReason::KeyMismatch,
                DialError::Refused { .. } | DialError::Failed { .. } => {
                    NotSentReason::ConnectFailed
                }
                DialError::NoCommonVersion { .. } => NotSentReason::VersionMismatch,
            };
            Err((reason, err.to_string()))
        }
    }
}

/// Resolves once the connection has been silent long enough to be dead to a call
/// (`ferry_core::liveness::SilenceWatch`). Heartbeats cross the route's pooled connection every
/// interval while the peer is in use, whatever the owner is doing, so silence there means the
/// path or the peer is gone, not that the owner is busy. A look that comes late, or finds this
/// gateway behind reading its own socket ([`PeerEndpoint::behind`]), restarts the count: that
/// silence is ours ([`SilenceWatch`]). Never, for a call at rest ([`Pace::AtRest`]).
async fn gone_silent(
    conn: &Connection,
    silence: &(dyn Fn() -> Duration + Sync),
    endpoint: &PeerEndpoint,
    pace: Pace,
) {
    if pace == Pace::AtRest {
        return std::future::pending().await;
    }
    // Nothing to check before the first interval: most exchanges end well within it, and a
    // stats snapshot takes the connection's lock.
    tokio::time::sleep(SILENCE_CHECK).await;
    let mut watch = SilenceWatch::new(conn.stats().udp_rx.datagrams, clock::now());
    let mut ticker = tokio::time::interval(SILENCE_CHECK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let received = conn.stats().udp_rx.datagrams;
        if watch.look(received, clock::now(), silence(), endpoint.behind()) {
            return;
        }
    }
}

/// In TLS 1.3 a client finishes its side of the handshake before the server has checked the
/// client's key, so a request can leave on a connection the server then refuses. The server
/// refuses with a TLS alert (a QUIC "crypto error" close) and, having never completed the
/// handshake, processed nothing on it: such a request was, in effect, never sent.
fn refused_handshake(conn: &Connection) -> Option<String> {
    match conn.close_reason()? {
        quinn::ConnectionError::ConnectionClosed(close)
            if (0x100..0x200).contains(&u64::from(close.error_code)) =>
        {
            Some(format!(
                "the peer refused this node in the TLS handshake ({close}); it may not trust this node"
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::RefusalCode;

    #[test]
    fn a_ticket_error_says_which_owner_and_why() {
        let owner = || Label::from_static("studio");
        assert_eq!(
            TicketError::NotTheOwners { owner: owner() }.to_string(),
            "studio sent a ticket that is not its own or not for this node"
        );
        let refused = TicketError::Refused {
            owner: owner(),
            refusal: Refusal::new(RefusalCode::Forbidden, "app x may not write to notes"),
        };
        assert_eq!(
            refused.to_string(),
            "studio refused to issue a ticket: app x may not write to notes"
        );
        let unreachable = TicketError::Unreachable {
            source: ReadError::GoingAway { label: owner() },
        };
        assert_eq!(
            unreachable.to_string(),
            "no ticket could be had: studio is stopping"
        );
        assert!(std::error::Error::source(&unreachable).is_some());
    }
}
