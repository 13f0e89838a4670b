//! When a connection counts as alive, and when as dead (SPEC 6 rule 5, SPEC 8).
//!
//! QUIC sends no keep-alives: they would cost every idle peer several packets a second. What
//! proves a connection alive is the answer to a heartbeat on it, every 50 ms while the peer is in
//! use and every few seconds while it is idle (`crate::health`); the route's dialer sends them,
//! so they keep both ends of its pooled connection open.

use std::time::{Duration, Instant};

use crate::health::{DOUBT_INTERVALS, DOUBT_SLACK, QUIET_INTERVAL};

/// How long a silent connection lives before QUIC closes it: three of the longest heartbeat
/// intervals, so a lost heartbeat or two never closes a live route's connection.
pub const IDLE_TIMEOUT: Duration = Duration::from_millis(QUIET_INTERVAL.as_millis() as u64 * 3);
/// A call waiting on a connection the route's heartbeats do not run on (one replaced in the
/// pool, or a route not yet heard) has nothing sure to cross it but the answer: it gives the
/// connection up only when QUIC does, or at its deadline.
pub const SILENT_AFTER: Duration = IDLE_TIMEOUT;
/// A pooled connection is worth trying for a read if it was heard within the doubt window of
/// the slowest heartbeats (a read that finds it dead is retried once, fresh).
pub const READ_LIVENESS: Duration = Duration::from_millis(
    QUIET_INTERVAL.as_millis() as u64 * DOUBT_INTERVALS as u64 + DOUBT_SLACK.as_millis() as u64,
);
/// How often a call waiting on a connection looks at its receive counter ([`Pace::Close`]).
pub const SILENCE_CHECK: Duration = Duration::from_millis(25);

/// How closely a call watches its connection for silence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Every [`SILENCE_CHECK`] ([`SilenceWatch`]): a call someone waits on (a write, a read),
    /// whose cut must be known within a few of the route's heartbeats.
    Close,
    /// Not at all: a long poll (a caught-up replica's question, held at the owner until news),
    /// which nobody waits on. Looking forty times a second for the seconds it is held kept a
    /// follower at rest awake for nothing, and looks of its own would cost every followed
    /// vault wake-ups. Its cut ends it anyway: at the question's deadline, or sooner when
    /// QUIC's idle timeout ([`IDLE_TIMEOUT`]) or the route's heartbeats close the connection;
    /// the replica then asks again and catches up.
    AtRest,
}

impl Pace {
    /// How a read asking the owner to hold it up to `wait` for news is watched: a long poll
    /// at rest, any other read closely.
    pub fn of_read(wait: Duration) -> Self {
        if wait.is_zero() {
            Self::Close
        } else {
            Self::AtRest
        }
    }
}

/// A call waiting on the connection its route's heartbeats use gives it up after this many of
/// the route's published intervals of silence (150 ms while the peer is in use): the
/// heartbeats' answers stopped, so the path is gone, and the write settles on another route.
pub const EXCHANGE_SILENT_INTERVALS: u32 = 3;

/// Timers of the caller's paths that an admin may set.
#[derive(Debug, Clone, Copy)]
pub struct CallTuning {
    /// The most a connection attempt may take (never more than what is left of a deadline).
    pub connect_timeout: Duration,
    /// The cap on a write's proof window: a pooled connection carries a write only if the
    /// peer was heard on it within two of the route's heartbeat intervals plus 25 ms (125 ms
    /// while the peer is in use), never more than this ([`write_window`]). It is the whole
    /// window of a route not in use (1 s and 15 s heartbeats), so the first write after a quiet
    /// spell usually dials.
    pub write_liveness: Duration,
    /// A pooled connection is tried for a read only if the peer was heard on it this recently
    /// ([`READ_LIVENESS`] by default: two of the slowest heartbeat intervals plus 25 ms).
    pub read_liveness: Duration,
}

impl Default for CallTuning {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            write_liveness: Duration::from_secs(1),
            read_liveness: READ_LIVENESS,
        }
    }
}

/// A pooled connection as the decisions see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PooledView {
    /// How long ago the peer was last heard on it: its handshake, the answer to a heartbeat or
    /// a call, or, while the peer is in use, any packet the pool's watcher saw.
    pub heard_ago: Duration,
    /// Its smoothed RTT.
    pub rtt: Duration,
    /// It has closed (or is closing).
    pub closed: bool,
}

/// How recently a pooled connection must have been heard to carry a write, for a route whose
/// published heartbeat interval is `published`: the route's doubt window (two intervals and a
/// little slack: 125 ms while the peer is in use), never more than `write_liveness`. So the
/// time in which a write can enter a path that just died is about one interval.
pub fn write_window(published: Duration, tuning: &CallTuning) -> Duration {
    (published * crate::health::DOUBT_INTERVALS + crate::health::DOUBT_SLACK)
        .min(tuning.write_liveness)
}

/// Whether a pooled connection may carry a write (SPEC 6 rule 5): open, and proven alive by a
/// packet within `window` ([`write_window`]). Exactly: a write must not go on a connection
/// that merely has not failed yet.
pub fn fit_for_write(pooled: &PooledView, window: Duration) -> bool {
    !pooled.closed && pooled.heard_ago <= window
}

/// Whether a pooled connection is worth trying for a read.
pub fn fit_for_read(pooled: &PooledView, tuning: &CallTuning) -> bool {
    !pooled.closed && pooled.heard_ago <= tuning.read_liveness
}

/// How much silence ends a call waiting on a connection: three of its route's published
/// intervals when the route's heartbeats run on this very connection (`heartbeats_here`), and
/// only QUIC's idle timeout otherwise (nothing else is sure to cross it then).
pub fn exchange_silence(published: Option<Duration>, heartbeats_here: bool) -> Duration {
    match published {
        Some(published) if heartbeats_here => {
            (published * EXCHANGE_SILENT_INTERVALS).min(SILENT_AFTER)
        }
        _ => SILENT_AFTER,
    }
}

/// A waiting call's look at its connection that comes more than this after it was due shows
/// this machine behind its own work: the peer's packets may be waiting unread in the socket,
/// so the silence seen so far is ours and is counted afresh.
pub const LATE_LOOK: Duration = SILENCE_CHECK;

/// Whether the connection a call waits on has gone silent, counted only in time this machine
/// was keeping up (SPEC 6 rule 5). The receive counter it watches moves when the connection
/// *processes* a datagram, not when one arrives: a gateway whose one runtime thread runs tens
/// of milliseconds behind (an open-loop flood of its own apps' calls) could read its own
/// backlog as the peer's silence and close a live connection with hundreds of writes on it.
/// Its late looks give it away: any look more than [`LATE_LOOK`] late restarts the count, as
/// the route prober's stall rule does, and as there for at most
/// [`STALL_EXCUSED_AT_MOST`](crate::health::STALL_EXCUSED_AT_MOST) after the connection was
/// last heard, so a machine late at every look still gives up a dead connection.
#[derive(Debug, Clone)]
pub struct SilenceWatch {
    /// Datagrams the connection had processed at the last look.
    received: u64,
    /// When the counter last moved (or the watch began).
    heard: Instant,
    /// Since when the silence counts: `heard`, or a later look that came late or found the
    /// allowance shrunk.
    counting_from: Instant,
    /// When the last look was made.
    looked: Instant,
    /// The allowance the last look was judged by.
    allowed: Option<Duration>,
}

impl SilenceWatch {
    /// Starts watching a connection that had processed `received` datagrams at `now`.
    pub fn new(received: u64, now: Instant) -> Self {
        Self {
            received,
            heard: now,
            counting_from: now,
            looked: now,
            allowed: None,
        }
    }

    /// One look, due [`SILENCE_CHECK`] after the last: true once the connection has been
    /// silent for `silence` ([`exchange_silence`]) of counted time. An allowance that shrank
    /// since the last look (the route's heartbeats just turned fast) counts from now: the
    /// first fast heartbeat has only just gone out, and the silence before it was allowed.
    /// `behind`: this gateway has datagrams waiting that it has not read (its peer socket's
    /// catcher says so): the peer may well have spoken, so the count restarts, as after a
    /// late look.
    pub fn look(&mut self, received: u64, now: Instant, silence: Duration, behind: bool) -> bool {
        let late = now.saturating_duration_since(self.looked) > SILENCE_CHECK + LATE_LOOK;
        let shrank = self.allowed.is_some_and(|allowed| silence < allowed);
        self.looked = now;
        self.allowed = Some(silence);
        if received != self.received {
            self.received = received;
            self.heard = now;
            self.counting_from = now;
            return false;
        }
        if shrank {
            self.counting_from = self.counting_from.max(now);
        }
        if late || behind {
            let excused = self
                .heard
                .checked_add(crate::health::STALL_EXCUSED_AT_MOST)
                .unwrap_or(self.heard);
            self.counting_from = now.min(excused).max(self.counting_from);
        }
        now.saturating_duration_since(self.counting_from) >= silence
    }
}

/// How long a connect runs before a side probe of the port is sent: quinn ignores ICMP, so a
/// connect to a stopped gateway would wait out the whole timeout; the probe tells "port closed"
/// in a millisecond.
pub const SIDE_PROBE_AFTER: Duration = Duration::from_millis(30);
/// How long the side probe waits for an ICMP answer when asked after a silent heartbeat.
pub const SIDE_PROBE_WAIT: Duration = Duration::from_millis(200);

/// The timeout of one connect: the configured one, never past what is left of the deadline.
/// `None` when nothing is left.
pub fn connect_timeout(deadline: Instant, now: Instant, tuning: &CallTuning) -> Option<Duration> {
    let left = deadline.saturating_duration_since(now);
    (!left.is_zero()).then(|| left.min(tuning.connect_timeout))
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn a_long_poll_is_watched_at_rest_and_any_other_read_closely() {
        assert_eq!(Pace::of_read(Duration::ZERO), Pace::Close);
        assert_eq!(Pace::of_read(Duration::from_millis(800)), Pace::AtRest);
    }

    #[test]
    fn a_write_needs_fresh_proof_and_a_read_takes_older() {
        let tuning = CallTuning::default();
        let view = |ms| PooledView {
            heard_ago: Duration::from_millis(ms),
            rtt: Duration::from_millis(1),
            closed: false,
        };
        let idle = write_window(Duration::from_secs(1), &tuning);
        assert!(fit_for_write(&view(999), idle));
        assert!(!fit_for_write(&view(1001), idle));
        // While the peer is in use (50 ms heartbeats) the proof must be far fresher.
        let in_use = write_window(Duration::from_millis(50), &tuning);
        assert_eq!(in_use, Duration::from_millis(125));
        assert!(fit_for_write(&view(120), in_use));
        assert!(!fit_for_write(&view(130), in_use));
        // A read takes a connection heard within two of the slowest heartbeat intervals.
        let read = READ_LIVENESS.as_millis() as u64;
        assert_eq!(read, 30_025);
        assert!(fit_for_read(&view(read), &tuning));
        assert!(!fit_for_read(&view(read + 1), &tuning));
        let closed = PooledView {
            closed: true,
            ..view(0)
        };
        assert!(!fit_for_write(&closed, idle) && !fit_for_read(&closed, &tuning));
    }

    #[test]
    fn a_call_gives_up_a_connection_after_three_heartbeats_of_silence_only_where_they_run() {
        let ms = Duration::from_millis;
        assert_eq!(exchange_silence(Some(ms(50)), true), ms(150));
        assert_eq!(exchange_silence(Some(ms(50)), false), SILENT_AFTER);
        assert_eq!(exchange_silence(Some(ms(3_000)), true), ms(9_000));
        assert_eq!(exchange_silence(Some(ms(60_000)), true), SILENT_AFTER);
        assert_eq!(exchange_silence(None, true), SILENT_AFTER);
    }

    /// Looks at `every` from `t0` with nothing received: the first instant the watch gives up.
    fn gives_up_at(t0: Instant, every: Duration, limit: Duration) -> Option<Duration> {
        let mut watch = SilenceWatch::new(7, t0);
        let mut now = t0;
        while now <= t0 + limit {
            now += every;
            if watch.look(7, now, Duration::from_millis(150), false) {
                return Some(now - t0);
            }
        }
        None
    }

    #[test]
    fn a_call_on_time_gives_up_after_its_silence_and_a_packet_restarts_the_count() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        assert_eq!(gives_up_at(t0, SILENCE_CHECK, ms(1_000)), Some(ms(150)));
        // A look a little late is still on time: the count goes on.
        assert_eq!(gives_up_at(t0, ms(50), ms(1_000)), Some(ms(150)));
        // Looks every 25 ms; a datagram processed by the look at 100 ms.
        let mut watch = SilenceWatch::new(7, t0);
        let received = |at: u64| if at < 100 { 7 } else { 8 };
        let gave_up = (1..=20)
            .map(|look| look * 25)
            .find(|&at| watch.look(received(at), t0 + ms(at), ms(150), false));
        assert_eq!(gave_up, Some(250));
    }

    #[test]
    fn a_call_behind_its_own_work_does_not_read_its_backlog_as_the_peers_silence() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        // A runtime thread 80 ms behind at every look, as the overload benchmark's calling
        // gateways ran: the old rule (a look more than 125 ms after the last) never fired, and
        // the call gave up two looks in.
        let behind = SILENCE_CHECK + ms(80);
        assert_eq!(gives_up_at(t0, behind, ms(9_000)), None);
        // One late look restarts the count: the silence is counted from it.
        // Looks every 25 ms, but none between 100 and 200 ms (75 ms late).
        let mut watch = SilenceWatch::new(7, t0);
        let gave_up = (1..=20)
            .map(|look| look * 25)
            .filter(|&at| at <= 100 || at >= 200)
            .find(|&at| watch.look(7, t0 + ms(at), ms(150), false));
        assert_eq!(gave_up, Some(350));
    }

    #[test]
    fn silence_while_this_gateway_has_datagrams_unread_is_its_own_for_at_most_the_excuse() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        // Looks on time, the counter frozen, and this gateway behind its socket from 100 ms to
        // 400 ms: the count restarts at every look then, and runs out 150 ms after the last.
        let mut watch = SilenceWatch::new(7, t0);
        let gave_up = (1..=40)
            .map(|look| look * 25)
            .find(|&at| watch.look(7, t0 + ms(at), ms(150), (100..=400).contains(&at)));
        assert_eq!(gave_up, Some(550));
        // Behind at every look: still given up, once the excuse has run out.
        let excused = crate::health::STALL_EXCUSED_AT_MOST;
        let mut watch = SilenceWatch::new(7, t0);
        let gave_up = (1..=1_000)
            .map(|look| look * 25)
            .find(|&at| watch.look(7, t0 + ms(at), ms(150), true))
            .map(ms);
        assert!(
            gave_up.is_some_and(|at| at >= excused + ms(150) && at <= excused + ms(175)),
            "gave up at {gave_up:?}"
        );
    }

    #[test]
    fn a_call_whose_route_turns_fast_counts_the_short_silence_from_then() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut watch = SilenceWatch::new(7, t0);
        // Two seconds of quiet on an idle route (45 s allowed), then its heartbeats turn fast.
        let allowed = |at: u64| if at < 2_000 { SILENT_AFTER } else { ms(150) };
        let gave_up = (1..=200)
            .map(|look| look * 25)
            .find(|&at| watch.look(7, t0 + ms(at), allowed(at), false));
        assert_eq!(gave_up, Some(2_150));
    }

    #[test]
    fn a_call_late_at_every_look_still_gives_up_a_dead_connection() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let excused = crate::health::STALL_EXCUSED_AT_MOST;
        for every in [ms(51), ms(105), ms(700), ms(3_000)] {
            let gave_up = gives_up_at(t0, every, excused + ms(10_000))
                .unwrap_or_else(|| panic!("looks every {every:?} never gave up"));
            assert!(
                gave_up >= excused + ms(150) && gave_up <= excused + ms(150) + every,
                "looks every {every:?} gave up after {gave_up:?}"
            );
        }
    }

    #[test]
    fn a_connect_never_outlives_its_deadline() {
        let now = Instant::now();
        let tuning = CallTuning::default();
        assert_eq!(
            connect_timeout(now + Duration::from_millis(500), now, &tuning),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            connect_timeout(now + Duration::from_secs(9), now, &tuning),
            Some(tuning.connect_timeout)
        );
        assert_eq!(connect_timeout(now, now, &tuning), None);
    }
}
