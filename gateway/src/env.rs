//! The world a gateway runs in, as seams: where time comes from, how blocking work runs, and
//! how a dead port is noticed. Production gets the system's; a simulation (`tests/sim`) gets a
//! virtual clock, blocking work inline on its one thread (so a run replays), and no ICMP.
//!
//! Every IO edge of the gateway either sits behind one of these or is built by the daemon
//! alone (the local API's socket, mDNS, signals), which a simulation does not use.

use std::sync::Arc;

use ferry_core::clock::Clock;
use ferry_peer::clock::TokioClock;
use ferry_peer::probe::{PortProbe, UdpProbe};

/// How work that blocks (SQLite) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocking {
    /// On threads of its own: the owner's executor and the call log each on a thread, reads on
    /// tokio's blocking pool. What production runs.
    Threads,
    /// On the calling task: every SQLite call runs where it is made. What a single-threaded
    /// simulation runs, so nothing escapes its ordering.
    Inline,
}

/// The seams of one gateway.
#[derive(Debug, Clone)]
pub struct Env {
    pub clock: Arc<dyn Clock>,
    pub blocking: Blocking,
    pub probe: Arc<dyn PortProbe>,
}

/// A wall clock set `offset_ms` off another (a test playing a machine with a wrong clock);
/// the monotonic clock is the other's.
#[derive(Debug)]
pub struct ShiftedClock {
    pub inner: Arc<dyn Clock>,
    pub offset_ms: i64,
}

impl Clock for ShiftedClock {
    fn now(&self) -> std::time::Instant {
        self.inner.now()
    }

    fn unix_ms(&self) -> u64 {
        self.inner.unix_ms().saturating_add_signed(self.offset_ms)
    }
}

impl Env {
    /// The system's clock, threads, and the UDP side probe.
    pub fn system() -> Self {
        Self {
            clock: Arc::new(TokioClock::system()),
            blocking: Blocking::Threads,
            probe: Arc::new(UdpProbe),
        }
    }
}
