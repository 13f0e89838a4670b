//! The drivers' clock: tokio's, so a runtime with paused time (a simulation, a test that moves
//! time) moves every timer and every "now" of Ferry together with quinn's. In a normal runtime
//! it reads the system's monotonic clock.
//!
//! [`TokioClock`] is `ferry_core::clock::Clock` over it, with the wall clock either the
//! system's or a virtual one that starts at a given Unix time and moves with tokio's time.

use std::time::{Duration, Instant};

use ferry_core::clock::{system_unix_ms, Clock};

/// Now, on tokio's clock.
pub fn now() -> Instant {
    tokio_now().into_std()
}

/// Now, on tokio's clock, as tokio's `Instant` (for `sleep_until`, `timeout_at`).
// Tokio's clock, behind the seam: the one place in the drivers it is read (`clippy.toml`).
#[allow(clippy::disallowed_methods)]
pub fn tokio_now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// How long since `earlier`, on tokio's clock.
pub fn since(earlier: Instant) -> Duration {
    now().saturating_duration_since(earlier)
}

/// Tokio's monotonic clock, and a wall clock.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    /// `None`: the system's wall clock. `Some((unix_ms, at))`: a virtual wall clock that read
    /// `unix_ms` at `at` and moves with tokio's time.
    virtual_wall: Option<(u64, Instant)>,
}

impl TokioClock {
    /// Tokio's time, and the system's wall clock: what production runs on.
    pub fn system() -> Self {
        Self { virtual_wall: None }
    }

    /// Tokio's time, and a wall clock that reads `unix_ms` now: what a simulation runs on.
    pub fn virtual_from(unix_ms: u64) -> Self {
        Self {
            virtual_wall: Some((unix_ms, now())),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        now()
    }

    fn unix_ms(&self) -> u64 {
        match self.virtual_wall {
            None => system_unix_ms(),
            Some((unix_ms, at)) => unix_ms + since(at).as_millis() as u64,
        }
    }
}
