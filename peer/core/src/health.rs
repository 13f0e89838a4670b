//! One route's health as a state machine over time (SPEC 8). No clock of its own: every
//! method takes `now`.
//!
//! - A heartbeat carries the interval it was sent at; the interval is short (50 ms) while calls
//!   use any route to the peer, so every route to a peer in use stays warm and audible, and
//!   backs off while the peer is idle.
//! - A route quiet for two of its published intervals is *doubtful*: new calls prefer a route
//!   heard more recently, before the route is declared down. A route heard again after a
//!   silence is proven only once it has been heard steadily for [`STEADY_FOR`], so the choice
//!   does not swing with every late packet.
//! - A route silent for more than six of its own published intervals is `Down`; so is one that
//!   fails before a send, or whose peer said it is going away, or whose port answered
//!   "connection refused" (the gateway there is not running).
//! - A `Down` route is probed again with exponential backoff (capped low while the peer is in
//!   use, so a healed cable carries calls again within a second); one answer brings it back
//!   `Up`.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::routes::{RouteState, Standing};

/// Heartbeat interval while calls use the peer: six of them (300 ms) is the silence that takes
/// a route in use down.
pub const ACTIVE_INTERVAL: Duration = Duration::from_millis(50);
/// Heartbeat interval after a short quiet: a peer called seconds ago is likely called again.
pub const IDLE_INTERVAL: Duration = Duration::from_secs(1);
/// Heartbeat interval of a peer not called for minutes (or never): what a gateway with many
/// trusted peers pays for each idle one (`ferry-bench liveness`). Six of them (90 s) take a
/// silent idle route down; a call to it does not wait for that: a write needs proof from the
/// last second and dials for it, and a read hedges.
pub const QUIET_INTERVAL: Duration = Duration::from_secs(15);
/// Quiet heartbeats go out on a grid of this step shared by every route of the table, so a
/// gateway with many idle peers wakes once for a batch of them rather than once for each. A
/// quiet heartbeat is so at most this much late: well inside its doubt window (two intervals).
pub const QUIET_GRID: Duration = Duration::from_secs(5);
/// A peer called within this long counts as in use. A call protects itself (its start makes
/// the next heartbeat due within [`ACTIVE_INTERVAL`]), so this only keeps the fast heartbeats
/// between an app's calls a few seconds apart; every second of it costs both gateways twenty
/// heartbeats, which a laptop at rest pays in battery (issue 47: it was 10 s).
pub const ACTIVE_FOR: Duration = Duration::from_secs(3);
/// A route unused for this long counts as quiet. Each second before it costs both gateways a
/// heartbeat and its answer; after it, a write dials (its proof window is a second) and a
/// silent cut is learned within 90 s. Half a minute keeps the pooled connection proven between
/// the edits of a working session; two minutes cost a laptop pair at rest half again what
/// Syncthing's does (issue 47: 0.17% of a core against 0.15%).
pub const QUIET_AFTER: Duration = Duration::from_secs(30);
/// Silence of this many published intervals makes a route `Down`.
pub const SILENT_INTERVALS: u32 = 6;
/// A route that missed this many of its published intervals is doubtful.
pub const DOUBT_INTERVALS: u32 = 2;
/// Allowance on top of the missed intervals for the answer's trip and the prober's wake-up.
pub const DOUBT_SLACK: Duration = Duration::from_millis(25);
/// A route heard again after a silence (or for the first time) is proven only after being
/// heard steadily this long: three heartbeats of a route in use.
pub const STEADY_FOR: Duration = Duration::from_millis(150);
/// A prober or watcher that woke this much later than it asked to was stalled (a loaded or
/// suspended machine): the silence it sees is its own, not the peer's, so it counts afresh from
/// then (for at most [`STALL_EXCUSED_AT_MOST`] of a route's silence).
pub const STALL: Duration = Duration::from_millis(100);
/// The most of a route's silence the stall rule excuses, counted from its last word: a prober
/// late at every look (a saturated machine) still judges a peer gone this long plus six
/// intervals after it was last heard.
pub const STALL_EXCUSED_AT_MOST: Duration = Duration::from_secs(10);
/// How far past a deadline the prober is woken for it: a verdict that turns strictly after an
/// instant can be drawn one grain later.
pub const VERDICT_GRAIN: Duration = Duration::from_millis(1);
/// Re-probing a down route starts here and doubles up to the cap.
const DOWN_BACKOFF_FIRST: Duration = Duration::from_millis(250);
const DOWN_BACKOFF_CAP: Duration = Duration::from_secs(4);
/// The cap while the peer is in use: a healed link is found within about this long.
const DOWN_BACKOFF_CAP_IN_USE: Duration = Duration::from_millis(500);

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
    /// The gateway at the route's address is not the node trusted under that label: its key
    /// differs (a reinstall made a new identity, or another machine has the address).
    WrongKey(String),
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
            NotSentReason::KeyMismatch => Self::WrongKey(detail),
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
            Self::Failed(detail) | Self::NoCommonVersion(detail) | Self::WrongKey(detail) => {
                f.write_str(detail)
            }
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
    /// Since when the route has been heard without a doubtful gap (`None`: never heard, or
    /// down since).
    steady_since: Option<Instant>,
    /// The interval of the last heartbeat sent: silence is measured against it.
    published: Duration,
    next_probe: Instant,
    down_backoff: Duration,
    /// A heartbeat is out: no second one until it ends (a dead peer must not cause a storm).
    in_flight: bool,
    /// Where the silence rule starts counting if this is later than `last_heard`: the end of
    /// a stall of this machine, whose silence was ours ([`RouteHealth::restart_silence`]).
    silence_from: Option<Instant>,
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
            steady_since: None,
            published: IDLE_INTERVAL,
            next_probe: now,
            down_backoff: DOWN_BACKOFF_FIRST,
            in_flight: false,
            silence_from: None,
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

    /// The interval of the last heartbeat sent on the route: what its peer was told to expect,
    /// and what silence is measured against.
    pub fn published(&self) -> Duration {
        self.published
    }

    /// How long the route may go unheard before it is doubtful: two published intervals and
    /// a little slack (125 ms while the peer is in use).
    pub fn doubt_window(&self) -> Duration {
        self.published * DOUBT_INTERVALS + DOUBT_SLACK
    }

    /// How far the route is trusted to carry the next call.
    pub fn standing(&self, now: Instant) -> Standing {
        if self.state == RouteState::Down {
            return Standing::Down;
        }
        let fresh = self
            .last_heard
            .is_some_and(|heard| now.saturating_duration_since(heard) <= self.doubt_window());
        let steady = self
            .steady_since
            .is_some_and(|since| now.saturating_duration_since(since) >= STEADY_FOR);
        if self.state == RouteState::Up && fresh && steady {
            Standing::Proven
        } else {
            Standing::Doubtful
        }
    }

    fn in_use(&self, now: Instant) -> bool {
        self.last_used
            .is_some_and(|used| now.saturating_duration_since(used) < ACTIVE_FOR)
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
            // Never used by a call: fast until first heard, then quiet.
            None if self.last_heard.is_none() => ACTIVE_INTERVAL,
            None => QUIET_INTERVAL,
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

    /// Moves the next heartbeat later, onto the next step of a grid of `grid` counted from
    /// `epoch` (the table's), if the heartbeat just sent was a quiet one ([`QUIET_GRID`]).
    pub fn align_quiet_probe(&mut self, epoch: Instant, grid: Duration) {
        if self.state == RouteState::Down || self.published < QUIET_INTERVAL || grid.is_zero() {
            return;
        }
        let since = self.next_probe.saturating_duration_since(epoch);
        let steps = since.as_nanos().div_ceil(grid.as_nanos());
        if let Some(aligned) = u32::try_from(steps)
            .ok()
            .and_then(|steps| grid.checked_mul(steps))
            .and_then(|offset| epoch.checked_add(offset))
        {
            self.next_probe = self.next_probe.max(aligned);
        }
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

    /// A heartbeat (or any call) got an answer after `rtt`, or a packet from the peer arrived
    /// on the route (`rtt` unknown).
    pub fn heard(&mut self, now: Instant, rtt: Option<Duration>) {
        let gap_was_doubtful = match self.last_heard {
            Some(heard) => now.saturating_duration_since(heard) > self.doubt_window(),
            None => true,
        };
        if self.state != RouteState::Up || gap_was_doubtful || self.steady_since.is_none() {
            self.steady_since = Some(now);
        }
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

    /// A call used this route or another route to the same peer (makes its heartbeats fast
    /// again: every route to a peer in use is kept warm).
    /// Returns whether the next heartbeat became due sooner.
    pub fn used(&mut self, now: Instant) -> bool {
        self.last_used = Some(now);
        let sooner = self.next_probe > now + ACTIVE_INTERVAL;
        if sooner {
            self.next_probe = now + ACTIVE_INTERVAL;
        }
        sooner
    }

    /// The route failed: down now, re-probed with backoff.
    pub fn failed(&mut self, now: Instant, why: Failure) {
        let cap = if self.in_use(now) {
            DOWN_BACKOFF_CAP_IN_USE
        } else {
            DOWN_BACKOFF_CAP
        };
        if self.state == RouteState::Down {
            self.down_backoff = (self.down_backoff * 2).min(cap);
        }
        self.down_backoff = self.down_backoff.min(cap);
        self.state = RouteState::Down;
        self.steady_since = None;
        self.last_error = Some(why);
        self.next_probe = now + self.down_backoff;
    }

    /// The latest instant the prober must look at this route again: its next heartbeat (unless
    /// one is out) or the end of its silence allowance.
    pub fn next_wake(&self) -> Option<Instant> {
        let probe = (!self.in_flight).then_some(self.next_probe);
        let silence = match (self.state, self.silent_since()) {
            // The silence rule turns on strictly *more* than six intervals: waking exactly at
            // the limit would find nothing to do and ask to wake at the same instant again (a
            // spin, and a hang in simulated time), so the wake is one grain past it.
            (RouteState::Up, Some(heard)) => {
                Some(heard + self.published * SILENT_INTERVALS + VERDICT_GRAIN)
            }
            _ => None,
        };
        match (probe, silence) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// This machine stalled until `now` (its prober woke far later than it asked): whatever
    /// silence the route shows so far is ours, not the peer's. The silence rule counts afresh
    /// from `now`, so heartbeats sent at `now` have their six intervals to come back, as they
    /// would after any look. What was last heard stays as it was: a write still asks for a
    /// connection heard lately, and the stall was not that.
    pub fn restart_silence(&mut self, now: Instant) {
        self.silence_from = Some(self.silence_from.map_or(now, |from| from.max(now)));
    }

    /// Since when the silence rule counts: the last word heard, or the end of a later stall
    /// (at most [`STALL_EXCUSED_AT_MOST`] after that word).
    fn silent_since(&self) -> Option<Instant> {
        let heard = self.last_heard?;
        let excused = heard.checked_add(STALL_EXCUSED_AT_MOST).unwrap_or(heard);
        Some(
            self.silence_from
                .map_or(heard, |from| from.clamp(heard, excused)),
        )
    }

    /// Applies the silence rule; returns true if this call turned the route `Down`.
    pub fn check_silence(&mut self, now: Instant) -> bool {
        let limit = self.published * SILENT_INTERVALS;
        let silent = match self.silent_since() {
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
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn waking_when_told_always_finds_the_verdict_due() {
        let t0 = Instant::now();
        let mut health = in_use_and_heard(t0);
        health.probe_finished();
        // A probe in flight: the only wake left is the silence verdict's.
        assert_eq!(
            health.probe_due(t0 + ACTIVE_INTERVAL),
            Some(ACTIVE_INTERVAL)
        );
        let wake = health.next_wake().expect("an up route is watched");
        assert!(wake > t0 + ACTIVE_INTERVAL * SILENT_INTERVALS);
        assert!(
            health.check_silence(wake),
            "woken at {wake:?}, nothing was due"
        );
    }

    /// A route in use (50 ms heartbeats), its heartbeat sent and answered at `t0`.
    fn in_use_and_heard(t0: Instant) -> RouteHealth {
        let mut health = RouteHealth::new(t0);
        health.used(t0);
        assert_eq!(health.probe_due(t0), Some(ACTIVE_INTERVAL));
        health.heard(t0, Some(Duration::from_millis(1)));
        health
    }

    #[test]
    fn a_silent_route_goes_down_after_six_of_its_published_intervals() {
        let t0 = Instant::now();
        let mut health = in_use_and_heard(t0);
        assert_eq!(health.state(), RouteState::Up);
        let limit = ACTIVE_INTERVAL * SILENT_INTERVALS;
        assert!(!health.check_silence(t0 + limit));
        assert!(health.check_silence(t0 + limit + Duration::from_millis(1)));
        assert_eq!(health.state(), RouteState::Down);
        assert_eq!(health.last_error(), Some(&Failure::Silent));
    }

    #[test]
    fn after_a_stall_of_this_machine_the_silence_rule_counts_afresh() {
        let t0 = Instant::now();
        let mut health = in_use_and_heard(t0);
        let limit = ACTIVE_INTERVAL * SILENT_INTERVALS;
        // The prober woke 2 s late: the route was heard 2 s ago, but that silence is ours.
        let woke = t0 + Duration::from_secs(2);
        health.restart_silence(woke);
        let grain = Duration::from_millis(1);
        // The look one grain later (the prober's next) draws no verdict, nor any before a
        // heartbeat sent at the stall's end has had its six intervals.
        assert!(!health.check_silence(woke + grain));
        assert_eq!(health.state(), RouteState::Up);
        // The prober sleeps until then (the heartbeat is out: no probe wake before it).
        assert_eq!(health.next_wake(), Some(woke + limit + grain));
        assert!(!health.check_silence(woke + limit));
        // Still nothing heard by then: the peer is silent after all.
        assert!(health.check_silence(woke + limit + grain));
        assert_eq!(health.last_error(), Some(&Failure::Silent));
    }

    #[test]
    fn a_stall_does_not_make_a_route_heard() {
        let t0 = Instant::now();
        let mut health = in_use_and_heard(t0);
        let woke = t0 + Duration::from_secs(2);
        health.restart_silence(woke);
        assert_eq!(health.last_heard(), Some(t0), "a stall is not a word heard");
        // An earlier stall reported late changes nothing; a word heard after the stall counts
        // from itself.
        health.restart_silence(t0);
        let limit = ACTIVE_INTERVAL * SILENT_INTERVALS;
        assert!(!health.check_silence(woke + limit));
        let later = woke + Duration::from_millis(40);
        health.heard(later, Some(Duration::from_millis(1)));
        assert!(!health.check_silence(later + limit));
        assert!(health.check_silence(later + limit + Duration::from_millis(1)));
    }

    #[test]
    fn a_prober_late_at_every_look_still_judges_a_silent_route() {
        let t0 = Instant::now();
        let mut health = in_use_and_heard(t0);
        let limit = ACTIVE_INTERVAL * SILENT_INTERVALS;
        let grain = Duration::from_millis(1);
        // Every look 200 ms late, and nothing heard after t0.
        let every = Duration::from_millis(200);
        let mut look = t0;
        let turned = loop {
            look += every;
            health.restart_silence(look);
            if health.check_silence(look + grain) {
                break look;
            }
            assert!(look < t0 + Duration::from_secs(60), "never judged");
        };
        assert!(
            turned >= t0 + STALL_EXCUSED_AT_MOST
                && turned <= t0 + STALL_EXCUSED_AT_MOST + limit + every,
            "judged at {:?} after the last word",
            turned - t0
        );
    }

    #[test]
    fn quiet_heartbeats_fall_on_a_shared_grid_and_busy_ones_do_not() {
        let epoch = Instant::now();
        let grid = QUIET_GRID;
        let at = |ms| epoch + Duration::from_millis(ms);
        // Two never-called routes heard at different instants send their quiet heartbeats
        // on the same grid step.
        let mut wakes = Vec::new();
        for offset in [1_300, 3_900] {
            let mut health = RouteHealth::new(at(offset));
            health.heard(at(offset), None);
            assert_eq!(health.probe_due(at(offset)), Some(QUIET_INTERVAL));
            health.align_quiet_probe(epoch, grid);
            health.probe_finished();
            wakes.push(health.next_wake());
        }
        assert_eq!(wakes, vec![Some(at(20_000)), Some(at(20_000))]);
        // A route in use keeps its exact 50 ms pace.
        let mut busy = RouteHealth::new(at(1_300));
        busy.heard(at(1_300), None);
        busy.used(at(1_300));
        assert_eq!(busy.probe_due(at(1_300)), Some(ACTIVE_INTERVAL));
        busy.align_quiet_probe(epoch, grid);
        busy.probe_finished();
        assert_eq!(busy.next_wake(), Some(at(1_350)));
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
        assert_eq!(health.interval(t0 + Duration::from_secs(20)), IDLE_INTERVAL);
        assert_eq!(
            health.interval(t0 + QUIET_AFTER + Duration::from_millis(1)),
            QUIET_INTERVAL
        );
        assert_eq!(
            health.interval(t0 + Duration::from_secs(600)),
            QUIET_INTERVAL
        );
        health.used(t0 + Duration::from_secs(600));
        assert_eq!(
            health.interval(t0 + Duration::from_secs(601)),
            ACTIVE_INTERVAL
        );
        // A trusted peer never called is quiet once heard: what each idle peer costs.
        let mut never_called = RouteHealth::new(t0);
        assert_eq!(never_called.interval(t0), ACTIVE_INTERVAL);
        never_called.heard(t0, None);
        assert_eq!(never_called.interval(t0), QUIET_INTERVAL);
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

    /// A route in use, heard on every 50 ms heartbeat until `t0`.
    fn steady_route_in_use(t0: Instant) -> RouteHealth {
        let start = t0 - Duration::from_secs(1);
        let mut health = RouteHealth::new(start);
        health.used(start);
        let mut now = start;
        while now <= t0 {
            if health.probe_due(now).is_some() {
                health.heard(now, Some(Duration::from_micros(300)));
                health.probe_finished();
            }
            now += Duration::from_millis(5);
        }
        health
    }

    #[test]
    fn a_quiet_route_in_use_is_doubtful_after_two_intervals_and_down_after_six() {
        let t0 = Instant::now() + Duration::from_secs(5);
        let mut health = steady_route_in_use(t0);
        assert_eq!(health.published(), ACTIVE_INTERVAL);
        assert_eq!(health.standing(t0), Standing::Proven);
        let heard = health.last_heard().unwrap();
        let ms = Duration::from_millis;
        // Passed over for new calls 125 ms after the last answer...
        assert_eq!(health.standing(heard + ms(125)), Standing::Proven);
        assert_eq!(health.standing(heard + ms(126)), Standing::Doubtful);
        assert!(!health.check_silence(heard + ms(300)));
        // ...and down after 300 ms.
        assert!(health.check_silence(heard + ms(301)));
        assert_eq!(health.standing(heard + ms(301)), Standing::Down);
    }

    #[test]
    fn a_route_back_from_silence_is_proven_only_after_steady_answers() {
        let t0 = Instant::now() + Duration::from_secs(5);
        let mut health = steady_route_in_use(t0);
        let ms = Duration::from_millis;
        let back = health.last_heard().unwrap() + ms(200);
        // A late answer after a doubtful gap: usable, not yet preferred.
        health.heard(back, None);
        assert_eq!(health.standing(back), Standing::Doubtful);
        health.heard(back + ms(50), None);
        health.heard(back + ms(100), None);
        assert_eq!(health.standing(back + ms(149)), Standing::Doubtful);
        health.heard(back + ms(150), None);
        assert_eq!(health.standing(back + ms(150)), Standing::Proven);
        // Answers within the window keep it steady.
        health.heard(back + ms(260), None);
        assert_eq!(health.standing(back + ms(260)), Standing::Proven);
    }

    #[test]
    fn a_down_route_of_a_peer_in_use_is_reprobed_at_least_every_half_second() {
        let t0 = Instant::now();
        let mut health = RouteHealth::new(t0);
        health.used(t0);
        let mut now = t0;
        let mut gaps = Vec::new();
        for _ in 0..5 {
            health.failed(now, Failure::Silent);
            let due = health.next_probe;
            gaps.push(due.saturating_duration_since(now).as_millis());
            now = due;
        }
        assert_eq!(gaps, vec![250, 500, 500, 500, 500]);
    }

    #[test]
    fn the_prober_wakes_for_the_next_heartbeat_or_the_end_of_the_silence_allowance() {
        let t0 = Instant::now();
        let mut health = RouteHealth::new(t0);
        health.used(t0);
        assert_eq!(health.next_wake(), Some(t0));
        assert!(health.probe_due(t0).is_some());
        // A heartbeat is out and nothing was heard: nothing to wake for.
        assert_eq!(health.next_wake(), None);
        health.heard(t0, None);
        health.probe_finished();
        assert_eq!(health.next_wake(), Some(t0 + ACTIVE_INTERVAL));
        assert!(health.probe_due(t0 + ACTIVE_INTERVAL).is_some());
        assert_eq!(
            health.next_wake(),
            Some(t0 + ACTIVE_INTERVAL * SILENT_INTERVALS + VERDICT_GRAIN)
        );
    }
}
