//! The clock seam. Decisions take `now` as an argument; the code that gathers it asks a
//! [`Clock`], so a simulation can move time (a virtual clock) where production reads the
//! system's.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Where "now" comes from.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// A monotonic instant, for deadlines and intervals.
    fn now(&self) -> Instant;
    /// Milliseconds since the Unix epoch, for request ids and stored times.
    fn unix_ms(&self) -> u64;
}

/// The system's clocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn unix_ms(&self) -> u64 {
        system_unix_ms()
    }
}

/// The system's wall clock in Unix milliseconds (0 if it is set before 1970).
pub fn system_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
