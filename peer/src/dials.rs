//! Dials in flight: at most one per (peer, address), shared by every call that wants a fresh
//! connection there while it is being made.
//!
//! When a path breaks, or a pooled connection goes unheard for a moment, every call in flight
//! to that peer wants a fresh connection at once: each write that finds the pooled one not
//! proven alive, each settle after the break, each read's fresh retry. Dialed one by one,
//! that is as many QUIC handshakes as calls (a key exchange and two signature checks each),
//! aimed at an owner that may be the reason the path looked dead, and as many connections'
//! state on both sides. The overload benchmark saw a calling gateway make thousands.
//!
//! A call that joins a dial under way, started at most [`JOIN_WITHIN`] before it asked, gets a
//! connection whose handshake had not completed when it asked: proven alive now, and not the
//! one that went quiet, which is all a fresh connection promises a write or a settle. Nothing
//! is sent on it until the call has it, so sharing a dial cannot send anything twice. A call
//! that asks later than that starts a dial of its own.
//!
//! The dial runs as a task of its own for as long as a call waits for it: a call whose deadline
//! is near stops waiting without cutting the handshake short for the others. Once every call
//! has stopped waiting, the dial is dropped, as a call's own dial was when the call gave up (a
//! race's losing route, a call out of time): nobody's handshake goes on for no one.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_ticket::NodeId;
use quinn::Connection;
use tokio::sync::watch;

use crate::clock;
use crate::outcome::NotSentReason;

/// How a dial ended: the connection, or why none was made (what a call that needed it reports
/// as "nothing was sent").
pub type DialOutcome = Result<Connection, (NotSentReason, String)>;

/// How old a dial may be for a call to join it rather than start its own. A QUIC handshake
/// whose first packet was lost is sent again after about three initial RTTs (300 ms with
/// Ferry's 100 ms, `crate::transport`), then after twice that: a call joining an older dial
/// could wait out a retry that a dial of its own, started now, would not need (a path that
/// healed a moment ago), and a heartbeat would see the route down for nothing. Calls that
/// want a connection at the same moment (a break's settle queries, a burst of writes) ask
/// within a few milliseconds of each other, well inside this.
pub const JOIN_WITHIN: Duration = Duration::from_millis(300);

type Key = (NodeId, SocketAddr);
type Ending = watch::Receiver<Option<DialOutcome>>;
/// Tells a dial's end to the calls waiting for it; its receivers are exactly those calls.
type Teller = watch::Sender<Option<DialOutcome>>;

/// A dial on the board: how to wait for its end, and when it started.
#[derive(Debug)]
struct Listed {
    tell: Teller,
    started: Instant,
}

/// The dials under way, by (peer, address), and how many were started and joined.
#[derive(Debug, Default)]
pub struct Dials {
    in_flight: Mutex<HashMap<Key, Listed>>,
    started: AtomicU64,
    joined: AtomicU64,
}

/// How many dials this node started, and how many calls joined one already under way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DialCounts {
    pub started: u64,
    pub joined: u64,
}

impl Dials {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn counts(&self) -> DialCounts {
        DialCounts {
            started: self.started.load(Ordering::Relaxed),
            joined: self.joined.load(Ordering::Relaxed),
        }
    }

    /// A connection to `peer` at `addr` from a dial not finished when this call asked: the one
    /// under way there if it started within [`JOIN_WITHIN`], else `start()`'s, spawned now.
    /// Waits at most `wait`; a dial still under way then is reported as timed out, as a dial of
    /// that length would have been.
    pub async fn fresh<F>(
        self: &Arc<Self>,
        peer: NodeId,
        addr: SocketAddr,
        wait: Duration,
        start: impl FnOnce() -> F,
    ) -> DialOutcome
    where
        F: Future<Output = DialOutcome> + Send + 'static,
    {
        let mut ending = self.join_or_start(peer, addr, start);
        let ended = tokio::time::timeout(wait, ending.wait_for(Option::is_some)).await;
        match ended {
            // `wait_for` returns only a told outcome; a sender dropped untold is an error.
            Ok(Ok(outcome)) => outcome.clone().unwrap_or_else(|| Err(abandoned(addr))),
            Ok(Err(_)) => Err(abandoned(addr)),
            Err(_) => Err((
                NotSentReason::ConnectTimedOut,
                format!(
                    "no answer from {addr} within {} ms",
                    wait.as_millis().min(u128::from(u64::MAX))
                ),
            )),
        }
    }

    fn join_or_start<F>(
        self: &Arc<Self>,
        peer: NodeId,
        addr: SocketAddr,
        start: impl FnOnce() -> F,
    ) -> Ending
    where
        F: Future<Output = DialOutcome> + Send + 'static,
    {
        let key = (peer, addr);
        let now = clock::now();
        let mut in_flight = self.lock();
        if let Some(listed) = in_flight
            .get(&key)
            .filter(|listed| now.saturating_duration_since(listed.started) <= JOIN_WITHIN)
        {
            self.joined.fetch_add(1, Ordering::Relaxed);
            return listed.tell.subscribe();
        }
        // A dial listed longer ago runs on for those waiting on it; this call's starts now
        // and takes its place on the board.
        let (tell, ending) = watch::channel(None);
        in_flight.insert(
            key,
            Listed {
                tell: tell.clone(),
                started: now,
            },
        );
        drop(in_flight);
        self.started.fetch_add(1, Ordering::Relaxed);
        let dial = start();
        let listing = Listing {
            dials: Arc::clone(self),
            key,
            mine: tell.clone(),
        };
        tokio::spawn(async move {
            tokio::pin!(dial);
            let outcome = loop {
                tokio::select! {
                    // Biased: a dial that ended is told, even if its callers left meanwhile.
                    biased;
                    outcome = &mut dial => break outcome,
                    () = tell.closed() => {
                        // Every call stopped waiting. Checked again under the board's lock,
                        // where calls join: one that joined just now keeps the dial going.
                        let in_flight = listing.dials.lock();
                        if tell.receiver_count() == 0 {
                            listing.leave(in_flight);
                            return;
                        }
                    }
                }
            };
            // Off the board before the outcome is told: a call that comes after a failure
            // starts a dial of its own rather than inheriting an old verdict. (Dropped
            // unfinished, by a panic or a runtime shutting down, it comes off all the same.)
            drop(listing);
            let _ = tell.send(Some(outcome));
        });
        ending
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Listed>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Dials on the board now: under way, and not yet replaced by a newer one.
    #[cfg(test)]
    fn under_way(&self) -> usize {
        self.lock().len()
    }
}

/// A dial's place on the board, for as long as its task lives: removed when the task ends or
/// is dropped, unless a newer dial has taken the place.
struct Listing {
    dials: Arc<Dials>,
    key: Key,
    mine: Teller,
}

impl Listing {
    /// Off the board, under the lock already held.
    fn leave(&self, mut in_flight: std::sync::MutexGuard<'_, HashMap<Key, Listed>>) {
        if in_flight
            .get(&self.key)
            .is_some_and(|listed| listed.tell.same_channel(&self.mine))
        {
            in_flight.remove(&self.key);
        }
    }
}

impl Drop for Listing {
    fn drop(&mut self) {
        self.leave(self.dials.lock());
    }
}

/// The dial's task ended without an outcome: its runtime is shutting down.
fn abandoned(addr: SocketAddr) -> (NotSentReason, String) {
    (
        NotSentReason::Stopping,
        format!("the connection to {addr} was abandoned as this gateway stops"),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn peer(seed: u8) -> NodeId {
        ferry_ticket::NodeKey::from_secret_bytes([seed; 32]).node_id()
    }

    fn addr() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 4000))
    }

    fn refused() -> DialOutcome {
        Err((NotSentReason::ConnectFailed, "refused".into()))
    }

    /// A dial that takes `takes` and fails (a connection cannot be made without a network),
    /// counting how often it really ran.
    fn counted(
        runs: &Arc<AtomicUsize>,
        takes: Duration,
    ) -> impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = DialOutcome> + Send>> {
        let runs = Arc::clone(runs);
        move || {
            runs.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                tokio::time::sleep(takes).await;
                refused()
            })
        }
    }

    /// A call now to `peer` at `addr` starts a dial of its own (nothing listed to join).
    async fn next_call_dials_afresh(dials: &Arc<Dials>, peer: NodeId, addr: SocketAddr) {
        let runs = Arc::new(AtomicUsize::new(0));
        let _ = dials
            .fresh(
                peer,
                addr,
                Duration::from_secs(2),
                counted(&runs, Duration::from_millis(5)),
            )
            .await;
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the next call dials afresh");
    }

    #[tokio::test(start_paused = true)]
    async fn calls_wanting_a_connection_at_once_share_one_dial() {
        let dials = Dials::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let (peer, addr) = (peer(1), addr());
        let calls: Vec<_> = (0..32)
            .map(|_| {
                let (dials, runs) = (Arc::clone(&dials), Arc::clone(&runs));
                tokio::spawn(async move {
                    dials
                        .fresh(
                            peer,
                            addr,
                            Duration::from_secs(2),
                            counted(&runs, Duration::from_millis(30)),
                        )
                        .await
                })
            })
            .collect();
        for call in calls {
            let outcome = call.await.expect("the call task ran");
            assert_eq!(
                outcome.err(),
                refused().err(),
                "every call gets the one dial's outcome"
            );
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1, "32 calls at once, one dial");
        assert_eq!(
            dials.counts(),
            DialCounts {
                started: 1,
                joined: 31
            }
        );
        assert_eq!(dials.under_way(), 0, "a finished dial leaves the board");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_after_a_dial_ended_dials_again() {
        let dials = Dials::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let (peer, addr) = (peer(1), addr());
        for _ in 0..2 {
            let _ = dials
                .fresh(
                    peer,
                    addr,
                    Duration::from_secs(2),
                    counted(&runs, Duration::from_millis(5)),
                )
                .await;
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "an ended dial's verdict is never handed to a later call"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn other_peers_and_addresses_dial_on_their_own() {
        let dials = Dials::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let (one, other) = (peer(1), peer(2));
        let elsewhere = SocketAddr::from(([127, 0, 0, 1], 4001));
        let wait = Duration::from_secs(2);
        let slow = Duration::from_millis(30);
        let _ = tokio::join!(
            dials.fresh(one, addr(), wait, counted(&runs, slow)),
            dials.fresh(other, addr(), wait, counted(&runs, slow)),
            dials.fresh(one, elsewhere, wait, counted(&runs, slow)),
        );
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_after_a_dial_has_run_a_while_starts_its_own() {
        let dials = Dials::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let (peer, addr) = (peer(1), addr());
        let wait = Duration::from_secs(2);
        let takes = Duration::from_millis(1_000);
        let early = dials.fresh(peer, addr, wait, counted(&runs, takes));
        let late = async {
            tokio::time::sleep(JOIN_WITHIN + Duration::from_millis(1)).await;
            let starts_anew = dials.fresh(peer, addr, wait, counted(&runs, takes));
            let also_late = dials.fresh(peer, addr, wait, counted(&runs, takes));
            tokio::join!(starts_anew, also_late)
        };
        let (early, (late, also_late)) = tokio::join!(early, late);
        assert!(early.is_err() && late.is_err() && also_late.is_err());
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "the late calls started one dial of their own and shared it"
        );
        assert_eq!(
            dials.counts(),
            DialCounts {
                started: 2,
                joined: 1
            }
        );
        assert_eq!(dials.under_way(), 0, "both came off the board");
    }

    #[tokio::test(start_paused = true)]
    async fn a_dial_whose_task_dies_comes_off_the_board() {
        let dials = Dials::new();
        let (peer, addr) = (peer(1), addr());
        let dies = || -> std::pin::Pin<Box<dyn Future<Output = DialOutcome> + Send>> {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                panic!("a bug in a dial");
            })
        };
        let (reason, _) = dials
            .fresh(peer, addr, Duration::from_secs(2), dies)
            .await
            .expect_err("a dial that died made no connection");
        assert_eq!(reason, NotSentReason::Stopping);
        assert_eq!(dials.under_way(), 0, "nothing left listed to join");
        next_call_dials_afresh(&dials, peer, addr).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_out_of_time_stops_waiting_and_the_dial_goes_on_for_the_rest() {
        let dials = Dials::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let (peer, addr) = (peer(1), addr());
        let takes = Duration::from_millis(300);
        let (hurried, patient) = tokio::join!(
            dials.fresh(
                peer,
                addr,
                Duration::from_millis(100),
                counted(&runs, takes)
            ),
            dials.fresh(peer, addr, Duration::from_secs(2), counted(&runs, takes)),
        );
        let (reason, detail) = hurried.expect_err("the hurried call timed out");
        assert_eq!(reason, NotSentReason::ConnectTimedOut);
        assert!(detail.contains("within 100 ms"), "{detail}");
        assert_eq!(
            patient.err(),
            refused().err(),
            "the patient call got the dial's own end"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dial_everyone_left_is_dropped() {
        let dials = Dials::new();
        let (peer, addr) = (peer(1), addr());
        let ended = Arc::new(AtomicUsize::new(0));
        let marked = Arc::clone(&ended);
        let start = move || {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                marked.fetch_add(1, Ordering::SeqCst);
                refused()
            }) as std::pin::Pin<Box<dyn Future<Output = DialOutcome> + Send>>
        };
        let gave_up = dials
            .fresh(peer, addr, Duration::from_millis(10), start)
            .await;
        assert!(gave_up.is_err());
        // Virtual time: the dial would have ended well within this.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(ended.load(Ordering::SeqCst), 0, "the dial was dropped");
        assert_eq!(dials.under_way(), 0, "and came off the board");
        next_call_dials_afresh(&dials, peer, addr).await;
    }
}
