//! One route's health as a state machine over time (SPEC 8). No clock of its own: every
//! method takes `now`.
//!
//! - A heartbeat carries the interval it was sent at; the interval is short while calls use the
//!   route and backs off while it is idle.
//! - A route silent for more than six of its own published intervals is `Down`; so is one that
//!   fails before a send, or whose peer said it is going away, or whose port answered
//!   "connection refused" (the gateway there is not running).
//! - A `Down` route is probed again with exponential backoff; one answer brings it back `Up`.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::routes::RouteState;

/// Heartbeat interval while calls use the route.
pub const ACTIVE_INTERVAL: Duration = Duration::from_millis(250);
/// Heartbeat interval after a short quiet.
pub const IDLE_INTERVAL: Duration = Duration::from_secs(1);
/// Heartbeat interval after minutes of quiet.
pub const QUIET_INTERVAL: Duration = Duration::from_secs(3);
/// A route used within this long counts as active.
const ACTIVE_FOR: Duration = Duration::from_secs(30);
/// A route unused for this long counts as quiet.
const QUIET_AFTER: Duration = Duration::from_secs(300);
/// Silence of this many published intervals makes a route `Down`.
pub const SILENT_INTERVALS: u32 = 6;
/// Re-probing a down route starts here and doubles up to the cap.
const DOWN_BACKOFF_FIRST: Duration = Duration::from_millis(250);
const DOWN_BACKOFF_CAP: Duration = Duration::from_secs(4);

/// Why a route is down, for `ferry routes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Failure {
    /// Nothing heard for more than six published intervals.
    Silent,
    /// The peer's port refused a probe: the host is up, the gateway is not running.
    PortClosed,
    /// The peer said it is stopping (QUIC "going away" close or mDNS goodbye).
    GoingAway,
    /// A connect or send failed before anything was sent.
    Failed(String),
    /// The handshake found no protocol version both sides speak (SPEC 11); the detail names
    /// both ranges. Nothing can be sent until one side is upgraded.
    NoCommonVersion(String),
}

impl Failure {
    /// What a dial that sent nothing says of the route: `reason` is the caller's, `detail` its
    /// words.
    pub fn of_dial(reason: crate::outcome::NotSentReason, detail: String) -> Self {
        use crate::outcome::NotSentReason;
        match reason {
            NotSentReason::PortClosed => Self::PortClosed,
            NotSentReason::VersionMismatch => Self::NoCommonVersion(detail),
            _ => Self::Failed(detail),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Silent => write!(
                f,
                "silent for more than {SILENT_INTERVALS} heartbeat intervals"
            ),
            Self::PortClosed => f.write_str("port closed: the gateway there is not running"),
            Self::GoingAway => f.write_str("the peer said it is going away"),
            Self::Failed(detail) | Self::NoCommonVersion(detail) => f.write_str(detail),
        }
    }
}

/// What is known about one route.
#[derive(Debug, Clone)]
pub struct RouteHealth {
    state: RouteState,
    rtt: Option<Duration>,
    last_heard: Option<Instant>,
    last_used: Option<Instant>,
    last_error: Option<Failure>,
    /// The interval of the last heartbeat sent: silence is measured against it.
    published: Duration,
    next_probe: Instant,
    down_backoff: Duration,
    /// A heartbeat is out: no second one until it ends (a dead peer must not cause a storm).
    in_flight: bool,
}

impl RouteHealth {
    /// A route nothing is known about yet: `Probing`, to be probed at once.
    pub fn new(now: Instant) -> Self {
        Self {
            state: RouteState::Probing,
            rtt: None,
            last_heard: None,
            last_used: None,
            last_error: None,
            published: IDLE_INTERVAL,
            next_probe: now,
            down_backoff: DOWN_BACKOFF_FIRST,
            in_flight: false,
        }
    }

    pub fn state(&self) -> RouteState {
        self.state
    }

    pub fn rtt(&self) -> Option<Duration> {
        self.rtt
    }

    pub fn last_heard(&self) -> Option<Instant> {
        self.last_heard
    }

    pub fn last_error(&self) -> Option<&Failure> {
        self.last_error.as_ref()
    }

    /// The heartbeat interval for the route's current use.
    pub fn interval(&self, now: Instant) -> Duration {
        match self
            .last_used
            .map(|used| now.saturating_duration_since(used))
        {
            Some(quiet) if quiet < ACTIVE_FOR => ACTIVE_INTERVAL,
            Some(quiet) if quiet < QUIET_AFTER => IDLE_INTERVAL,
            Some(_) => QUIET_INTERVAL,
            // Never used by a call: fast until first heard, then idle.
            None if self.last_heard.is_none() => ACTIVE_INTERVAL,
            None => IDLE_INTERVAL,
        }
    }

    /// Whether a heartbeat is due; if so the caller sends one, with the interval returned.
    pub fn probe_due(&mut self, now: Instant) -> Option<Duration> {
        if self.in_flight || now < self.next_probe {
            return None;
        }
        self.in_flight = true;
        let interval = match self.state {
            RouteState::Down => self.down_backoff,
            _ => self.interval(now),
        };
        self.published = interval.max(ACTIVE_INTERVAL);
        self.next_probe = now + interval;
        Some(self.published)
    }

    /// The heartbeat that [`Self::probe_due`] started has ended, whatever its result.
    pub fn probe_finished(&mut self) {
        self.in_flight = false;
    }

    /// Makes the next heartbeat due now, if the route is not already down (a down route keeps
    /// its backoff).
    pub fn probe_now(&mut self, now: Instant) {
        if self.state != RouteState::Down {
            self.next_probe = now;
        }
    }

    /// The peer showed signs of life elsewhere (it greeted us, or announced itself again):
    /// probe this route now, down or not, and restart its backoff.
    pub fn revive(&mut self, now: Instant) {
        self.next_probe = now;
        self.down_backoff = DOWN_BACKOFF_FIRST;
    }

    /// A heartbeat (or any call) got an answer after `rtt`.
    pub fn heard(&mut self, now: Instant, rtt: Option<Duration>) {
        self.state = RouteState::Up;
        self.last_heard = Some(now);
        if let Some(rtt) = rtt {
            // A smoothed RTT, as TCP keeps one: one slow answer does not reorder routes.
            self.rtt = Some(match self.rtt {
                Some(old) => (old * 7 + rtt) / 8,
                None => rtt,
            });
        }
        self.down_backoff = DOWN_BACKOFF_FIRST;
    }

    /// A call used this route (makes its heartbeats fast again).
    pub fn used(&mut self, now: Instant) {
        self.last_used = Some(now);
        if self.next_probe > now + ACTIVE_INTERVAL {
            self.next_probe = now + ACTIVE_INTERVAL;
        }
    }

    /// The route failed: down now, re-probed with backoff.
    pub fn failed(&mut self, now: Instant, why: Failure) {
        if self.state == RouteState::Down {
            self.down_backoff = (self.down_backoff * 2).min(DOWN_BACKOFF_CAP);
        }
        self.state = RouteState::Down;
        self.last_error = Some(why);
        self.next_probe = now + self.down_backoff;
    }

    /// Applies the silence rule; returns true if this call turned the route `Down`.
    pub fn check_silence(&mut self, now: Instant) -> bool {
        let limit = self.published * SILENT_INTERVALS;
        let silent = match self.last_heard {
            Some(heard) => now.saturating_duration_since(heard) > limit,
            None => false,
        };
        if silent && self.state == RouteState::Up {
            self.failed(now, Failure::Silent);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_route_goes_down_after_six_of_its_published_intervals() {
        let t0 = Instant::now();
        let mut health = RouteHealth::new(t0);
        health.used(t0);
        assert_eq!(health.probe_due(t0), Some(ACTIVE_INTERVAL));
        health.heard(t0, Some(Duration::from_millis(1)));
        assert_eq!(health.state(), RouteState::Up);
        let limit = ACTIVE_INTERVAL * SILENT_INTERVALS;
        assert!(!health.check_silence(t0 + limit));
        assert!(health.check_silence(t0 + limit + Duration::from_millis(1)));
        assert_eq!(health.state(), RouteState::Down);
        assert_eq!(health.last_error(), Some(&Failure::Silent));
    }

    #[test]
    fn intervals_back_off_while_idle_and_speed_up_when_used() {
        let t0 = Instant::now();
        let mut health = RouteHealth::new(t0);
        health.heard(t0, None);
        health.used(t0);
        assert_eq!(
            health.interval(t0 + Duration::from_secs(1)),
            ACTIVE_INTERVAL
        );
        assert_eq!(health.interval(t0 + Duration::from_secs(60)), IDLE_INTERVAL);
        assert_eq!(
            health.interval(t0 + Duration::from_secs(600)),
            QUIET_INTERVAL
        );
        health.used(t0 + Duration::from_secs(600));
        assert_eq!(
            health.interval(t0 + Duration::from_secs(601)),
            ACTIVE_INTERVAL
        );
    }

    #[test]
    fn a_down_route_is_reprobed_with_doubling_backoff_and_recovers_on_one_answer() {
        let t0 = Instant::now();
        let mut health = RouteHealth::new(t0);
        health.failed(t0, Failure::PortClosed);
        let mut now = t0;
        let mut gaps = Vec::new();
        for _ in 0..6 {
            let due = health.next_probe;
            gaps.push(due.saturating_duration_since(now).as_millis());
            now = due;
            assert!(health.probe_due(now).is_some());
            assert!(
                health.probe_due(now).is_none(),
                "one heartbeat in flight at a time"
            );
            health.failed(now, Failure::PortClosed);
            health.probe_finished();
        }
        assert_eq!(gaps, vec![250, 500, 1000, 2000, 4000, 4000]);
        health.heard(now, Some(Duration::from_millis(2)));
        assert_eq!(health.state(), RouteState::Up);
        assert_eq!(health.down_backoff, DOWN_BACKOFF_FIRST);
    }

    #[test]
    fn the_smoothed_rtt_is_not_thrown_by_one_slow_answer() {
        let t0 = Instant::now();
        let mut health = RouteHealth::new(t0);
        health.heard(t0, Some(Duration::from_millis(1)));
        health.heard(t0, Some(Duration::from_millis(81)));
        assert_eq!(health.rtt(), Some(Duration::from_millis(11)));
    }
}
