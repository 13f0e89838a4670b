//! The clock seam. Decisions take `now` as an argument; the code that gathers it asks a
//! [`Clock`], so a simulation can move time (a virtual clock) where production reads the
//! system's.
//!
//! This module, `ferry_peer::clock` (tokio's clock) and `ferry_kit::clock` are the only places
//! in the shipped crates that read a clock: `clippy.toml` bans `Instant::now` and
//! `SystemTime::now` everywhere else, so the next direct read fails CI instead of quietly
//! escaping a simulation's time.

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
        system_now()
    }

    fn unix_ms(&self) -> u64 {
        system_unix_ms()
    }
}

/// The system's monotonic clock, for code that measures the real world whatever clock the
/// runtime keeps (a thread watching a socket) and for code with no [`Clock`] at hand.
// The real clock, behind the seam: the one place it is read.
#[allow(clippy::disallowed_methods)]
pub fn system_now() -> Instant {
    Instant::now()
}

/// The system's wall clock, for what the real world dates with it (a file's modified time).
// The real wall clock, behind the seam: the one place it is read.
#[allow(clippy::disallowed_methods)]
pub fn system_time() -> SystemTime {
    SystemTime::now()
}

/// The system's wall clock in Unix milliseconds (0 if it is set before 1970).
pub fn system_unix_ms() -> u64 {
    system_time()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// How far a peer's wall clock is from ours, in milliseconds (positive: it is ahead): its
/// reading (`theirs_ms`) less ours at the middle of a round trip of `rtt` whose answer came back
/// at `ours_at_answer_ms` on our clock.
pub fn offset_ms(theirs_ms: u64, ours_at_answer_ms: u64, rtt: std::time::Duration) -> i64 {
    let middle = ours_at_answer_ms as i64 - (rtt.as_millis() / 2) as i64;
    theirs_ms as i64 - middle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_taken_at_the_middle_of_the_round_trip() {
        let rtt = std::time::Duration::from_millis(40);
        // Asked at 1,000, answered at 1,040: the peer read its clock around 1,020.
        assert_eq!(offset_ms(1_020, 1_040, rtt), 0);
        assert_eq!(offset_ms(601_020, 1_040, rtt), 600_000);
        assert_eq!(offset_ms(20, 1_040, rtt), -1_000);
    }
}
