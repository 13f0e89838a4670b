//! The local API's connections, from `accept` to close: each is admitted within the bound
//! ([`super::connections`]) and served by hyper under the header timeout, its socket telling
//! the bookkeeping when it waits for its client; one chosen to make room is dropped at once;
//! the excess, when apps hold every place, gets a fast `503`. At the stop the listener closes,
//! each connection finishes the request it is in, and `run` returns once they are all gone.
//!
//! The header timeout is hyper's: it runs while a connection waits for a whole request head,
//! from its opening or from the end of its last answer, so it bounds a half-sent request and an
//! idle keep-alive connection alike, and never a request in progress (a long poll). Hyper arms
//! it only when given a timer, which `axum::serve` does not give it.

use std::convert::Infallible;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::IntoResponse;
use ferry_kit::contract::ErrorCode;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::{info, warn};

use super::connections::{Admission, Connections, Slot, Throttle, Ticket, LOG_EVERY};
use super::error::ApiError;
use super::{drain, Edge};

/// Refusals answered at once; past this a refused connection is closed without an answer, so
/// refusing cannot take more files than this.
const REFUSING_AT_MOST: usize = 32;

/// How many turns of the runtime a new connection waits, at the bound, for connections not yet
/// read to show whether they wait (and so may make room) before it is refused.
const READ_TURNS_BEFORE_REFUSING: usize = 8;

/// The most a refusal waits for the request it answers.
const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// How long `accept` rests after failing for want of files (the connection waits in the
/// kernel's queue meanwhile), so a full table is not spun on.
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);

/// Connections the kernel completes and queues for `accept`. A full queue drops the next
/// connect, which its client sends again only a second later: a stranger reopening connections
/// as fast as it can keeps the queue full, and an app's connect then waits a second, or three.
/// A queue as long as Linux allows by default (`net.core.somaxconn`, which caps it) holds such
/// a stranger's connections that wait, and an app's connect behind them.
const ACCEPT_QUEUE: u32 = 4096;

/// Connection trouble worth a line, each logged at most once per [`LOG_EVERY`].
#[derive(Debug)]
struct Logs {
    made_room: Throttle,
    refused: Throttle,
    accept_failed: Throttle,
}

/// Listens on `addr` with a queue of [`ACCEPT_QUEUE`] (tokio's `bind` asks for 128).
pub(super) fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As tokio's `bind` does: a restarted gateway may take its port back at once.
    #[cfg(not(windows))]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_QUEUE)
}

/// Serves `listener` until `stopping` turns true, then waits for the connections to finish.
pub(super) async fn run(
    listener: TcpListener,
    edge: Edge,
    connections: Arc<Connections>,
    header_timeout: Duration,
    mut stopping: watch::Receiver<bool>,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let refusals = Arc::new(Semaphore::new(REFUSING_AT_MOST));
    let mut logs = Logs {
        made_room: Throttle::new(LOG_EVERY),
        refused: Throttle::new(LOG_EVERY),
        accept_failed: Throttle::new(LOG_EVERY),
    };
    let mut tasks = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            biased;
            () = stopped(&mut stopping) => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let now = ferry_peer::clock::now();
        let stream = match accepted {
            Ok((stream, _)) => stream,
            // The peer gave up between its connect and the accept: nothing to serve.
            Err(err) if is_connection_error(&err) => continue,
            Err(err) => {
                // Out of files, most likely (a limit lowered after start, or files taken by
                // something else): close a stranger's connection to free one, and rest.
                let made_room = connections.make_room();
                if let Some(count) = logs.accept_failed.note(now) {
                    warn!(%err, count, made_room, "the local API cannot accept connections; closing the oldest waiting one that has not shown the token, if any (made_room), to free a file (count: failures since the last such line)");
                }
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        // Connections accepted just before this one may not have been read yet, and only a
        // connection a read found waiting may make room: before refusing, let their tasks run
        // (a few turns of the runtime), so a stranger's burst of fresh connections is not
        // taken for apps holding every place.
        for _ in 0..READ_TURNS_BEFORE_REFUSING {
            if !connections.unread_may_make_room() {
                break;
            }
            tokio::task::yield_now().await;
        }
        match connections.admit() {
            Admission::Admitted { ticket, made_room } => {
                if made_room {
                    if let Some(count) = logs.made_room.note(now) {
                        warn!(
                            bound = connections.bound(),
                            count,
                            "the local API holds as many connections as it takes; closed the oldest that had not shown the token to make room (count: since the last such line); a local process may be holding connections open"
                        );
                    }
                }
                tasks.spawn(serve(
                    stream,
                    http.clone(),
                    edge.clone(),
                    ticket,
                    stopping.clone(),
                ));
            }
            Admission::Refused => {
                if let Some(count) = logs.refused.note(now) {
                    warn!(
                        bound = connections.bound(),
                        count,
                        "apps hold every connection the local API takes (or the others are all still being read); refused a new one with 503 (count: since the last such line); raise local_api.max_connections if apps need more"
                    );
                }
                if let Ok(permit) = refusals.clone().try_acquire_owned() {
                    tasks.spawn(refuse(stream, permit));
                }
            }
        }
    }
    // New connections are refused by the kernel from here; the ones held finish their request.
    drop(listener);
    while tasks.join_next().await.is_some() {}
}

/// Serves one connection until it closes, times out, is chosen to make room, or the gateway
/// stops (then it finishes the request it is in).
async fn serve(
    stream: TcpStream,
    http: http1::Builder,
    edge: Edge,
    ticket: Ticket,
    mut stopping: watch::Receiver<bool>,
) {
    let slot = ticket.slot().clone();
    let connections = ticket.connections().clone();
    let stream = Watched {
        stream,
        slot: slot.clone(),
    };
    let connection = http.serve_connection(TokioIo::new(stream), edge.on_connection(ticket));
    tokio::pin!(connection);
    let served = tokio::select! {
        served = connection.as_mut() => served,
        // Dropping the connection closes its socket.
        () = slot.made_room() => return,
        () = stopped(&mut stopping) => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(err) = served {
        if err.is_timeout() {
            if let Some(count) = connections.header_timed_out(ferry_peer::clock::now()) {
                info!(
                    count,
                    "closed local API connections that sent no whole request head within local_api.header_timeout_ms (count: since the last such line)"
                );
            }
        }
    }
}

/// A connection's socket, which tells its [`Slot`] when a read finds nothing more to read: only
/// then may the connection make room for another (an app's request, sent with its connect, is
/// whole at the first read).
struct Watched {
    stream: TcpStream,
    slot: Arc<Slot>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if read.is_pending() {
            self.slot.waits();
        }
        read
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Answers the first request on `stream` with `503 unavailable`, nothing sent, and closes.
async fn refuse(stream: TcpStream, _permit: OwnedSemaphorePermit) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(REFUSAL_TIME)
        .keep_alive(false);
    let answer = hyper::service::service_fn(|request: hyper::Request<Incoming>| async move {
        // The body is read (within the refusal's time) before the answer goes, so the close
        // does not reset the connection under an answer the app has not read yet.
        let refused = drain::unread_bodies(request.map(Body::new), |_request| async {
            let mut refused = ApiError::new(
                503,
                ErrorCode::Unavailable,
                "this gateway's apps hold every connection its local API takes; try again shortly; nothing was sent",
            );
            refused.retry_after_s = Some(1);
            refused.into_response()
        })
        .await;
        Ok::<_, Infallible>(refused)
    });
    let _ = tokio::time::timeout(
        REFUSAL_TIME,
        http.serve_connection(TokioIo::new(stream), answer),
    )
    .await;
}

/// Returns once the gateway is stopping (or its lifecycle is gone, which is no different).
async fn stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stopping| *stopping).await;
}

/// A failed `accept` that concerns one connection only (it was reset before it was taken).
fn is_connection_error(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
