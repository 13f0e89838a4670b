//! The serving side of a connection: every stream a peer opens carries one request frame,
//! which is length-capped, decoded under a limit and only then handed to the [`Service`].
//!
//! A stream whose frame is malformed is reset with [`RESET_MALFORMED`] and nothing runs. A
//! frame of a protocol version this gateway does not speak is answered with the range it does.
//! While the gateway stops, new streams are answered "going away" at once, but for two: a
//! write, which goes to [`Service::write_while_stopping`] (the stop is no answer about its
//! request id: a copy of a write that ran must hear its first answer), and a settle query,
//! which the service answers as ever (it says `None` when it cannot).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferry_names::{NameError, VaultName};
use ferry_ticket::NodeId;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use quinn::{Connection, RecvStream, SendStream};
use tokio::sync::{watch, Notify};
use tracing::{debug, error, warn};

use crate::frames;
use crate::outcome::{Refusal, RefusalCode};
use crate::transport::{self, ReadFrameError, RESET_MALFORMED, RESET_UNANSWERED};
use crate::wire::{
    CallState, CallStatusRequest, Extensions, Hello, NamedRequest, ProtocolFailure, ReadAnswer,
    ReadRequest, Request, Response, ResponseFrame, TicketAnswer, TicketRequest, WriteAnswer,
    WriteRequest, OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION,
};

/// A peer that opens a stream must send its whole request within this time, or the stream is
/// dropped: a slow or stuck sender must not hold a handler forever.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a write's (or a going-away) stream waits for the caller to acknowledge the answer.
const ANSWER_ACK_WAIT: Duration = Duration::from_secs(2);

/// The longest long poll a caller may ask of a read ([`crate::wire::EXT_WAIT_MS`]); a longer
/// one is cut to this.
pub const MAX_READ_WAIT: Duration = Duration::from_secs(300);

/// What a gateway does with the requests peers send it.
pub trait Service: Send + Sync + 'static {
    /// A peer introduced itself, on a connection of protocol `version`; answer with this
    /// gateway's own account.
    fn hello(&self, from: NodeId, hello: Hello, version: u16)
        -> impl Future<Output = Hello> + Send;
    /// A write for a vault this gateway owns. The caller's key is the TLS-proven `from`.
    /// `None`: the gateway cannot say whether it ran; the stream is reset unanswered
    /// ([`RESET_UNANSWERED`]) and the caller settles by id.
    fn write(
        &self,
        from: NodeId,
        request: WriteRequest,
    ) -> impl Future<Output = Option<WriteAnswer>> + Send;
    /// A write on a stream that arrived after the stop began: it must not run, but "going
    /// away" would tell the caller nothing ran, which is false of a copy of a write that ran or
    /// is still running in the drain. So the service says what it knows of the id (SPEC 7 rule
    /// 2): a copy of one that ran hears its first answer, an id it holds nothing of may be
    /// refused as not carried out. `None`: it cannot say (a copy of one still running); the
    /// stream is reset unanswered ([`RESET_UNANSWERED`]) and the caller settles by id. The
    /// default, for a service without a journal, always says nothing.
    fn write_while_stopping(
        &self,
        from: NodeId,
        request: WriteRequest,
    ) -> impl Future<Output = Option<WriteAnswer>> + Send {
        let _ = (from, request);
        std::future::ready(None)
    }
    /// A read of a vault this gateway owns or replicates; `wait`: the caller asked for a long
    /// poll ([`crate::wire::EXT_WAIT_MS`], at most [`MAX_READ_WAIT`]), which only a change
    /// page with nothing past its cursor honours.
    fn read(
        &self,
        from: NodeId,
        request: ReadRequest,
        wait: Option<Duration>,
    ) -> impl Future<Output = ReadReply> + Send;
    /// A ticket request: sign one for `from` if its app may use those verbs on that vault.
    fn issue_ticket(
        &self,
        from: NodeId,
        request: TicketRequest,
    ) -> impl Future<Output = TicketAnswer> + Send;
    /// What became of one of `from`'s request ids (tombstoning an id never seen, under
    /// `vault` when the caller named it, [`crate::wire::EXT_VAULT`]). Asked while the gateway
    /// stops too. `None`: this gateway cannot say now (it is stopping, and cannot write the
    /// tombstone an unseen id needs); answered "going away", the caller asks again later.
    fn call_status(
        &self,
        from: NodeId,
        request: CallStatusRequest,
        vault: Option<VaultName>,
    ) -> impl Future<Output = Option<CallState>> + Send;
    /// This gateway's wall clock (Unix milliseconds), sent with heartbeat answers
    /// ([`crate::wire::EXT_CLOCK_MS`]); `None` sends none (a service without a wall clock).
    fn clock_ms(&self) -> Option<u64> {
        None
    }
}

/// A read's answer, and, for a long poll answered with news, how long ago the commit that made
/// the news happened (sent as [`crate::wire::EXT_NEWS_AGE_US`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadReply {
    pub answer: ReadAnswer,
    pub news_age: Option<Duration>,
}

impl From<ReadAnswer> for ReadReply {
    fn from(answer: ReadAnswer) -> Self {
        Self {
            answer,
            news_age: None,
        }
    }
}

/// Counts the streams being served across every connection, so a stopping gateway can wait
/// for their answers to leave before it closes the connections.
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

impl InFlight {
    fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    /// Waits until no stream is being served (returns at once if none is).
    pub async fn wait_idle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

struct InFlightGuard(Arc<InFlight>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Serves one connection until it closes. `stopping` turns new streams away ("going away"),
/// but for writes and settle queries (see the module's note); streams already being served
/// finish before this returns.
///
/// Every stream of the connection is served inside this one task rather than a task of its
/// own. A spawned task per stream (and a join set reaped on every stream's end) kept waking the
/// runtime's other worker for a few microseconds of work: several context switches per read on
/// an otherwise idle owner. Here a request that arrives whole is read, answered and its answer
/// queued in the poll that accepted it. Streams still make progress side by side (a write that
/// waits for the executor does not hold up a read), but one connection's door work uses one
/// core at a time; each peer has its own connection.
pub async fn serve_connection<S: Service>(
    service: Arc<S>,
    conn: Connection,
    peer: NodeId,
    mut stopping: watch::Receiver<bool>,
    in_flight: Arc<InFlight>,
) {
    // The handshake agreed on it; a connection without one (`ferry/versions`) was closed at
    // accept and never gets here, but a connection of no known version is served nothing.
    let Some(version) = transport::protocol_of(&conn) else {
        debug!(peer = %peer.short(), "connection without a protocol version; closed");
        conn.close(
            quinn::VarInt::from_u32(crate::wire::CLOSE_NO_COMMON_VERSION),
            b"",
        );
        return;
    };
    let mut streams = FuturesUnordered::new();
    loop {
        tokio::select! {
            // Streams first: one accepted in the last round is served before the next accept.
            biased;
            Some(()) = streams.next(), if !streams.is_empty() => {}
            accepted = conn.accept_bi() => {
                let (send, recv) = match accepted {
                    Ok(stream) => stream,
                    Err(err) => {
                        debug!(peer = %peer.short(), %err, "connection ended");
                        break;
                    }
                };
                let going_away = *stopping.borrow();
                let guard = in_flight.enter();
                let service = service.clone();
                streams.push(async move {
                    // A panic stays with its stream, as it would in a task of its own: the
                    // connection's other streams (writes among them) go on.
                    let served = AssertUnwindSafe(serve_stream(service, peer, version, send, recv, going_away))
                        .catch_unwind()
                        .await;
                    if served.is_err() {
                        error!(peer = %peer.short(), "serving a stream panicked; that stream is dropped");
                    }
                    drop(guard);
                });
            }
            changed = stopping.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
    while streams.next().await.is_some() {}
}

/// The answer to a request that names an invalid vault or app: refused at the door (not
/// journaled: no verb ran, and every copy of the frame names the same invalid name).
fn bad_name(kind: NamedRequest, error: &NameError) -> Response {
    let refusal = Refusal {
        at_door: true,
        ..Refusal::new(RefusalCode::BadRequest, error.to_string())
    };
    match kind {
        NamedRequest::Write => Response::Write(WriteAnswer::Refused(refusal)),
        NamedRequest::Read => Response::Read(ReadAnswer::Refused(refusal)),
        NamedRequest::IssueTicket => Response::Ticket(TicketAnswer::Refused(refusal)),
    }
}

async fn serve_stream<S: Service>(
    service: Arc<S>,
    peer: NodeId,
    version: u16,
    mut send: SendStream,
    mut recv: RecvStream,
    going_away: bool,
) {
    let read = tokio::time::timeout(
        REQUEST_READ_TIMEOUT,
        transport::read_request(&mut recv, version),
    )
    .await;
    let mut news_age = None;
    let response = match read {
        Err(_) => {
            debug!(peer = %peer.short(), "request not received in time; stream dropped");
            let _ = recv.stop(quinn::VarInt::from_u32(RESET_MALFORMED));
            let _ = send.reset(quinn::VarInt::from_u32(RESET_MALFORMED));
            return;
        }
        Ok(Err(ReadFrameError::UnsupportedVersion { version: sent, .. })) => {
            debug!(peer = %peer.short(), sent, version, "request in another protocol version than the connection's");
            Response::Failed(ProtocolFailure::UnsupportedVersion {
                oldest: OLDEST_PROTOCOL_VERSION,
                newest: PROTOCOL_VERSION,
            })
        }
        Ok(Err(err)) => {
            warn!(peer = %peer.short(), %err, "malformed request; stream reset, nothing ran");
            let _ = recv.stop(quinn::VarInt::from_u32(RESET_MALFORMED));
            let _ = send.reset(quinn::VarInt::from_u32(RESET_MALFORMED));
            return;
        }
        Ok(Ok(frame)) => match frame.body {
            Request::Write(request) => {
                let answer = if going_away {
                    service.write_while_stopping(peer, *request).await
                } else {
                    service.write(peer, *request).await
                };
                match answer {
                    Some(answer) => Response::Write(answer),
                    None => {
                        warn!(peer = %peer.short(), going_away, "no answer can be given for a write (its answer was lost, or a copy of it still runs); stream reset, the caller settles");
                        let _ = send.reset(quinn::VarInt::from_u32(RESET_UNANSWERED));
                        return;
                    }
                }
            }
            // Served while stopping too: a caller whose write broke in the drain settles by
            // asking, and the service answers what it knows (`None` when it cannot).
            Request::CallStatus(request) => {
                let vault = frame.ext.vault_of();
                match service.call_status(peer, request, vault).await {
                    Some(state) => Response::CallStatus(state),
                    None => Response::Failed(ProtocolFailure::GoingAway),
                }
            }
            // Refused as it arrives, stopping or not: it can never run, and the refusal says so
            // (a reset would leave a write's caller not knowing).
            Request::BadName { kind, error } => {
                debug!(peer = %peer.short(), ?kind, %error, "request naming an invalid name; refused, nothing ran");
                bad_name(kind, &error)
            }
            _ if going_away => Response::Failed(ProtocolFailure::GoingAway),
            Request::Hello(hello) => Response::Hello(service.hello(peer, hello, version).await),
            Request::Read(request) => {
                let wait = frame
                    .ext
                    .wait_ms()
                    .map(|ms| Duration::from_millis(u64::from(ms)).min(MAX_READ_WAIT));
                let reply = service.read(peer, request, wait).await;
                news_age = reply.news_age;
                Response::Read(reply.answer)
            }
            Request::IssueTicket(request) => {
                Response::Ticket(service.issue_ticket(peer, request).await)
            }
            Request::Heartbeat(beat) => Response::Heartbeat(beat),
            // A newer peer's request: read whole, not understood, not run.
            Request::Unknown { kind } => {
                debug!(peer = %peer.short(), kind, "request of an unknown kind; answered, nothing ran");
                Response::Failed(ProtocolFailure::UnknownRequest { kind })
            }
        },
    };
    let hold_until_acknowledged = transport::held_until_acknowledged(&response);
    // Only a heartbeat's answer carries the clock, so only it reads one.
    let ext = match (&response, news_age) {
        (Response::Heartbeat(_), _) => service
            .clock_ms()
            .map(Extensions::clock)
            .unwrap_or_default(),
        (Response::Read(_), Some(age)) => Extensions::news_age(age),
        _ => Extensions::default(),
    };
    let frame = ResponseFrame {
        body: response,
        ext,
    };
    match frames::encode_response(version, &frame) {
        Ok(bytes) => {
            if let Err(err) = transport::write_frame(&mut send, &bytes).await {
                debug!(peer = %peer.short(), %err, "answer could not be sent; the caller will settle");
            } else if hold_until_acknowledged {
                // Queued is not sent: a stopping gateway closes its connections once no stream
                // is being served, and a close drops stream data not yet sent. So these streams
                // count as served until the caller has acknowledged the answer (bounded: a
                // caller that vanished settles by asking).
                let _ = tokio::time::timeout(ANSWER_ACK_WAIT, send.stopped()).await;
            }
        }
        Err(err) => warn!(peer = %peer.short(), %err, "answer could not be encoded"),
    }
}
