//! The caller's side of a call to another gateway: choose a route, get a connection, send one
//! request frame on a new stream, and read one answer, all inside one deadline.
//!
//! Writes and reads share the plumbing but not the rules:
//! - a write is sent at most once. [`Exchange`] reports whether the request's first byte was
//!   handed to QUIC; before that point a failure is "nothing was sent" and one fresh LAN route
//!   may be tried; after it, nothing is ever sent again.
//! - a read may be repeated: a dead pooled connection costs one retry on a fresh one, and a
//!   failed route moves on to the next.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_ticket::NodeId;
use quinn::Connection;
use tracing::debug;

use crate::outcome::{NotSentReason, Refusal, RefusalCode, UnknownReason, WriteOutcome};
use crate::pool::Pool;
use crate::routes::Route;
use crate::transport::{self, DialError, PeerEndpoint, ReadFrameError};
use crate::wire::{
    Extensions, Hello, ProtocolFailure, ReadAnswer, ReadRequest, Request, RequestFrame, Response,
    ResponseFrame, WriteAnswer, WriteRequest,
};

/// Timers of the caller's paths (SPEC 6 and 9).
#[derive(Debug, Clone, Copy)]
pub struct CallTuning {
    /// The most a connection attempt may take (never more than what is left of the deadline).
    pub connect_timeout: Duration,
    /// A pooled connection carries a write only if the peer was heard this recently.
    pub write_liveness: Duration,
}

impl Default for CallTuning {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            write_liveness: Duration::from_secs(1),
        }
    }
}

/// A peer as the caller sees it: who it must be, what to call it, and how to reach it
/// (best route first).
#[derive(Debug, Clone)]
pub struct Target {
    pub node: NodeId,
    pub label: String,
    pub routes: Vec<Route>,
}

/// Why a read found no answer. Reads are safe to repeat, so every case may be tried again.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("no route to {label} is known; add one with `ferry trust ... --addr HOST:PORT`")]
    NoRoute { label: String },
    #[error("{label} did not answer: {detail}")]
    Unavailable { label: String, detail: String },
    #[error("{label} is stopping")]
    GoingAway { label: String },
}

/// How one request/response exchange on a stream ended.
#[derive(Debug)]
enum Exchange {
    /// The request never reached QUIC: nothing was sent.
    NotSent { detail: String },
    /// The request left and this came back.
    Answered(Response),
    /// The request left and no whole answer came back.
    Lost {
        reason: UnknownReason,
        detail: String,
    },
}

/// The caller: the endpoint it dials from, its pool, its timers.
#[derive(Debug, Clone)]
pub struct Caller {
    endpoint: PeerEndpoint,
    pool: Arc<Pool>,
    tuning: CallTuning,
}

impl Caller {
    pub fn new(endpoint: PeerEndpoint, pool: Arc<Pool>, tuning: CallTuning) -> Self {
        Self {
            endpoint,
            pool,
            tuning,
        }
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Sends a write to its owner, at most once (SPEC 6 rules 3-7).
    pub async fn write(
        &self,
        target: &Target,
        request: WriteRequest,
        deadline: Instant,
    ) -> WriteOutcome {
        let frame = match transport::encode(&RequestFrame {
            body: Request::Write(request),
            ext: Extensions::default(),
        }) {
            Ok(frame) => frame,
            Err(err) => {
                return WriteOutcome::not_sent(NotSentReason::ConnectFailed, err.to_string())
            }
        };
        let mut routes = target.routes.iter();
        let Some(mut route) = routes.next() else {
            return WriteOutcome::not_sent(
                NotSentReason::NoRoute,
                format!("no route to {} is known", target.label),
            );
        };
        // SPEC 6 rule 4: one fresh choice is allowed when a thunderbolt or LAN route fails
        // before the send; after that the failure is the answer.
        let mut failover_left = 1;
        loop {
            let failure = match self.write_connection(target.node, route, deadline).await {
                Ok(conn) => match exchange(&conn, &frame, deadline).await {
                    Exchange::Answered(Response::Write(answer)) => {
                        return WriteOutcome::Answered(answer)
                    }
                    Exchange::Answered(Response::Failed(ProtocolFailure::GoingAway)) => {
                        return WriteOutcome::Answered(WriteAnswer::Refused(Refusal {
                            retry_after_ms: Some(1000),
                            ..Refusal::new(
                                RefusalCode::Busy,
                                format!("{} is stopping and did not run this write; send it again later with the same request id", target.label),
                            )
                        }))
                    }
                    Exchange::Answered(other) => {
                        return WriteOutcome::Unknown {
                            reason: UnknownReason::ConnectionLost,
                            detail: format!("{} answered a write with {other:?}", target.label),
                        }
                    }
                    Exchange::Lost { reason, detail } => {
                        return WriteOutcome::Unknown { reason, detail }
                    }
                    Exchange::NotSent { detail } => (NotSentReason::ConnectFailed, detail),
                },
                Err(failure) => failure,
            };
            debug!(peer = %target.label, route = %route, detail = %failure.1, "write not sent on this route");
            match routes.next() {
                Some(next)
                    if route.kind.fails_over()
                        && failover_left > 0
                        && failure.0 != NotSentReason::DeadlineSpent =>
                {
                    failover_left -= 1;
                    route = next;
                }
                _ => return WriteOutcome::not_sent(failure.0, failure.1),
            }
        }
    }

    /// A connection fit to carry a write: pooled and proven alive, or opened now.
    async fn write_connection(
        &self,
        peer: NodeId,
        route: &Route,
        deadline: Instant,
    ) -> Result<Connection, (NotSentReason, String)> {
        if let Some(pooled) = self.pool.get(peer, route.addr) {
            if pooled.heard_ago <= self.tuning.write_liveness {
                return Ok(pooled.conn);
            }
            debug!(route = %route, heard_ago_ms = pooled.heard_ago.as_millis() as u64, "pooled connection not proven alive; dialing fresh for a write");
        }
        self.dial(peer, route.addr, deadline).await
    }

    async fn dial(
        &self,
        peer: NodeId,
        addr: SocketAddr,
        deadline: Instant,
    ) -> Result<Connection, (NotSentReason, String)> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err((
                NotSentReason::DeadlineSpent,
                "the deadline passed before a connection was made".into(),
            ));
        }
        let timeout = left.min(self.tuning.connect_timeout);
        match self.endpoint.dial(addr, peer, timeout).await {
            Ok(conn) => {
                self.pool.insert(peer, addr, conn.clone());
                Ok(conn)
            }
            Err(err) => {
                let reason = match err {
                    DialError::TimedOut { .. } => NotSentReason::ConnectTimedOut,
                    DialError::KeyMismatch { .. } => NotSentReason::KeyMismatch,
                    DialError::Refused { .. } | DialError::Failed { .. } => {
                        NotSentReason::ConnectFailed
                    }
                };
                Err((reason, err.to_string()))
            }
        }
    }

    /// Sends a read, trying routes in order; a dead pooled connection costs one fresh retry.
    pub async fn read(
        &self,
        target: &Target,
        request: ReadRequest,
        deadline: Instant,
    ) -> Result<ReadAnswer, ReadError> {
        match self
            .idempotent(target, Request::Read(request), deadline)
            .await?
        {
            Response::Read(answer) => Ok(answer),
            other => Err(ReadError::Unavailable {
                label: target.label.clone(),
                detail: format!("answered a read with {other:?}"),
            }),
        }
    }

    /// Tells a peer who this gateway is and which vaults it has; learns the same of the peer.
    pub async fn hello(
        &self,
        target: &Target,
        hello: Hello,
        deadline: Instant,
    ) -> Result<Hello, ReadError> {
        match self
            .idempotent(target, Request::Hello(hello), deadline)
            .await?
        {
            Response::Hello(theirs) => Ok(theirs),
            other => Err(ReadError::Unavailable {
                label: target.label.clone(),
                detail: format!("answered a hello with {other:?}"),
            }),
        }
    }

    /// Sends a request that is safe to repeat, trying routes in order.
    async fn idempotent(
        &self,
        target: &Target,
        body: Request,
        deadline: Instant,
    ) -> Result<Response, ReadError> {
        let frame = transport::encode(&RequestFrame {
            body,
            ext: Extensions::default(),
        })
        .map_err(|err| ReadError::Unavailable {
            label: target.label.clone(),
            detail: err.to_string(),
        })?;
        let mut last_error = None;
        for route in &target.routes {
            // A pooled connection first; if it turns out dead, one fresh connection.
            let pooled = self.pool.get(target.node, route.addr).map(|p| p.conn);
            let mut attempts = pooled.into_iter().map(Ok).collect::<Vec<_>>();
            attempts.push(Err(()));
            for attempt in attempts {
                let conn = match attempt {
                    Ok(conn) => conn,
                    Err(()) => match self.dial(target.node, route.addr, deadline).await {
                        Ok(conn) => conn,
                        Err((_, detail)) => {
                            last_error = Some(detail);
                            break;
                        }
                    },
                };
                match exchange(&conn, &frame, deadline).await {
                    Exchange::Answered(Response::Failed(ProtocolFailure::GoingAway)) => {
                        return Err(ReadError::GoingAway {
                            label: target.label.clone(),
                        })
                    }
                    Exchange::Answered(response) => return Ok(response),
                    Exchange::NotSent { detail } | Exchange::Lost { detail, .. } => {
                        last_error = Some(detail);
                    }
                }
                if Instant::now() >= deadline {
                    break;
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
}

/// One request and one answer on a new bidirectional stream, within `deadline`.
async fn exchange(conn: &Connection, frame: &[u8], deadline: Instant) -> Exchange {
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
    let sent_and_answered = async {
        transport::write_frame(&mut send, &frame[first..])
            .await
            .map_err(|err| err.to_string())?;
        transport::read_frame::<ResponseFrame>(&mut recv)
            .await
            .map_err(|err| match err {
                ReadFrameError::Broken(detail) => detail,
                other => format!("the answer was not a valid frame: {other}"),
            })
    };
    match tokio::time::timeout_at(deadline, sent_and_answered).await {
        Err(_) => Exchange::Lost {
            reason: UnknownReason::TimedOut,
            detail: "no answer came back before the deadline".into(),
        },
        Ok(Err(detail)) => Exchange::Lost {
            reason: UnknownReason::ConnectionLost,
            detail,
        },
        Ok(Ok((_, response))) => Exchange::Answered(response.body),
    }
}
