//! The caller's write as a state machine: events in, the next step out, time as an argument.
//!
//! It owns every decision of SPEC 6 that could send a request twice, so those decisions are
//! tested exhaustively without a network (see the tests below and `tests/at_most_once.rs`):
//! - before the request's first byte is handed to QUIC, a failure is "nothing was sent"; one
//!   fresh route may be tried if the failed one was a local link (rule 4);
//! - once a request may have reached the owner, it is never sent again, with one exception:
//!   a `401 ticket_refused` *at the door* certifies no verb ran, so the ticket is renewed and the
//!   request sent once more under the same id (rule 8);
//! - a stream or connection that breaks after the send is settled at once by asking the owner,
//!   never by resending (rule 7); only what cannot be settled before the deadline is
//!   `outcome_unknown`.
//!
//! The driver (`ferry_peer::call::Caller::write`) performs each [`Step`] and reports what
//! happened as an [`Event`]. The machine also decides which routes a send may use: on a local
//! link (thunderbolt, LAN) the next route's connect is *raced* a moment later, so rule 4's one
//! failover costs no second connect timeout; nothing is sent until one connection wins, so a
//! race cannot send twice. And it paces settle asks.

use std::time::{Duration, Instant};

use crate::outcome::{NotSentReason, Refusal, RefusalCode, UnknownReason, WriteOutcome};
use crate::routes::RouteKind;
use crate::wire::{CallState, WriteAnswer};

/// How many times a settle may be asked after a break, inside the deadline. Settling is a read,
/// so asking again is safe; the bound keeps a flapping owner from spinning the caller.
pub const MAX_SETTLE_ASKS: u8 = 5;
/// How long a write's connect on a local link runs alone before the next route's is raced.
pub const RACE_DELAY: Duration = Duration::from_millis(100);
/// The pause between settle asks after the first (the first is at once, SPEC 6 rule 7).
pub const SETTLE_BACKOFF: Duration = Duration::from_millis(100);

/// A second route whose connect is started `after` the first one's, spending the failover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Race {
    pub route: usize,
    pub after: Duration,
}

/// What the driver should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Get a ticket for the owner: from the cache, or (with `renew`) freshly from the owner.
    GetTicket { renew: bool },
    /// Send the request once, on a new stream, over the route at this index (0 = best), or over
    /// `race`'s route if that one connects first. Nothing is sent until a connection wins.
    Send { route: usize, race: Option<Race> },
    /// Ask the owner what became of the request id, on a new connection, `after` a pause.
    Settle { after: Duration },
    /// The call is over.
    Finish(WriteOutcome),
}

/// What happened when the driver performed the last step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    TicketReady,
    TicketUnavailable {
        detail: String,
    },
    /// The send failed before the first byte reached QUIC (on every route it was allowed).
    NotSent {
        reason: NotSentReason,
        detail: String,
    },
    /// The owner answered on the stream.
    Answered(WriteAnswer),
    /// The request left and no whole answer came back.
    Lost {
        reason: UnknownReason,
        detail: String,
    },
    Settled(CallState),
    SettleFailed {
        detail: String,
    },
}

/// One write's progress.
#[derive(Debug, Clone)]
pub struct WriteMachine {
    deadline: Instant,
    /// Rule 4's one failover: the race the first send on a local link starts (spent with it).
    race: Option<Race>,
    renewals_left: u8,
    settles_left: u8,
    /// The door's 401, kept while its renewal runs: passed back if the renewal fails.
    door_refusal: Option<Refusal>,
    /// Why the request is lost, once it is.
    lost: Option<(UnknownReason, String)>,
    finished: Option<WriteOutcome>,
}

impl WriteMachine {
    /// Starts a write whose deadline is `deadline`, over usable routes of `routes` kinds (best
    /// first); returns the machine and its first step.
    pub fn start(deadline: Instant, now: Instant, routes: &[RouteKind]) -> (Self, Step) {
        // Sends go to the best route; on a local link with another route behind it, that one's
        // connect is raced a moment later.
        let race = match routes {
            [best, _, ..] if best.fails_over() => Some(Race {
                route: 1,
                after: RACE_DELAY,
            }),
            _ => None,
        };
        let mut machine = Self {
            deadline,
            race,
            renewals_left: 1,
            settles_left: MAX_SETTLE_ASKS,
            door_refusal: None,
            lost: None,
            finished: None,
        };
        let step = if now >= deadline {
            machine.finish(WriteOutcome::not_sent(
                NotSentReason::DeadlineSpent,
                "the deadline passed before the call could start",
            ))
        } else {
            Step::GetTicket { renew: false }
        };
        (machine, step)
    }

    fn finish(&mut self, outcome: WriteOutcome) -> Step {
        self.finished = Some(outcome.clone());
        Step::Finish(outcome)
    }

    fn answered(&mut self, answer: WriteAnswer) -> Step {
        match answer {
            WriteAnswer::NotCarriedOut { reason } => {
                self.finish(WriteOutcome::NotCarriedOut { reason })
            }
            other => self.finish(WriteOutcome::Answered(other)),
        }
    }

    /// A send on the best route, raced against the next one while the failover is not spent.
    fn send(&mut self) -> Step {
        Step::Send {
            route: 0,
            race: self.race.take(),
        }
    }

    fn unknown(&mut self) -> Step {
        let (reason, detail) = self.lost.clone().unwrap_or((
            UnknownReason::ConnectionLost,
            "the request left and no answer came back".into(),
        ));
        self.finish(WriteOutcome::Unknown { reason, detail })
    }

    /// Feeds what happened; returns what to do next. After `Finish`, every event returns the
    /// same `Finish`: a finished call never acts again.
    pub fn on(&mut self, event: Event, now: Instant) -> Step {
        if let Some(outcome) = &self.finished {
            return Step::Finish(outcome.clone());
        }
        let time_left = now < self.deadline;
        match event {
            Event::TicketReady if time_left => self.send(),
            Event::TicketReady => match self.door_refusal.take() {
                Some(refusal) => self.finish(WriteOutcome::Answered(WriteAnswer::Refused(refusal))),
                None => self.finish(WriteOutcome::not_sent(
                    NotSentReason::DeadlineSpent,
                    "the deadline passed before the request could be sent",
                )),
            },
            Event::TicketUnavailable { detail } => match self.door_refusal.take() {
                // Rule 8: a refusal to issue the renewed ticket passes back the door's 401.
                Some(refusal) => self.finish(WriteOutcome::Answered(WriteAnswer::Refused(refusal))),
                None => self.finish(WriteOutcome::not_sent(
                    NotSentReason::TicketUnavailable,
                    detail,
                )),
            },
            // Rule 4's one failover is the race: a send that failed on every route it was
            // allowed is final.
            Event::NotSent { reason, detail } => {
                self.finish(WriteOutcome::not_sent(reason, detail))
            }
            Event::Answered(WriteAnswer::Refused(refusal))
                if refusal.code == RefusalCode::TicketRefused && refusal.at_door =>
            {
                if self.renewals_left > 0 && time_left {
                    self.renewals_left -= 1;
                    self.door_refusal = Some(refusal);
                    Step::GetTicket { renew: true }
                } else {
                    self.finish(WriteOutcome::Answered(WriteAnswer::Refused(refusal)))
                }
            }
            Event::Answered(answer) => self.answered(answer),
            Event::Lost { reason, detail } => {
                if crate::bugs::on(crate::bugs::Bug::NothingSentAfterSend) {
                    return self
                        .finish(WriteOutcome::not_sent(NotSentReason::ConnectFailed, detail));
                }
                self.lost = Some((reason, detail));
                self.settle_or_give_up(time_left && reason == UnknownReason::ConnectionLost, now)
            }
            Event::Settled(CallState::Answered(answer)) => self.answered(answer),
            Event::Settled(CallState::NotCarriedOut { reason }) => {
                self.finish(WriteOutcome::NotCarriedOut { reason })
            }
            // The owner no longer remembers ids that old: asking again cannot learn more.
            Event::Settled(CallState::Forgotten { .. }) => self.unknown(),
            // A newer owner's state this build cannot read: it may have run or not, and asking
            // again would get the same answer.
            Event::Settled(CallState::Unrecognized { .. }) => self.unknown(),
            Event::Settled(CallState::Running { .. }) | Event::SettleFailed { .. } => {
                self.settle_or_give_up(time_left, now)
            }
        }
    }

    /// Another settle ask, if one may be made: the first at once (rule 7), the later ones
    /// after [`SETTLE_BACKOFF`], never past the deadline.
    fn settle_or_give_up(&mut self, may_ask: bool, now: Instant) -> Step {
        if !may_ask || self.settles_left == 0 {
            return self.unknown();
        }
        let first = self.settles_left == MAX_SETTLE_ASKS;
        self.settles_left -= 1;
        let after = if first {
            Duration::ZERO
        } else {
            SETTLE_BACKOFF.min(self.deadline.saturating_duration_since(now))
        };
        Step::Settle { after }
    }
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::outcome::NotCarriedOutReason;

    fn door_refusal() -> WriteAnswer {
        WriteAnswer::Refused(Refusal {
            at_door: true,
            reason: Some("old_epoch".into()),
            ..Refusal::new(RefusalCode::TicketRefused, "ticket from an old epoch")
        })
    }

    /// The events the driver can report after performing `step`, each in a representative form.
    fn events_after(step: &Step) -> Vec<Event> {
        match step {
            Step::GetTicket { .. } => vec![
                Event::TicketReady,
                Event::TicketUnavailable {
                    detail: "owner refused".into(),
                },
            ],
            Step::Send { .. } => vec![
                Event::NotSent {
                    reason: NotSentReason::ConnectFailed,
                    detail: "refused".into(),
                },
                Event::NotSent {
                    reason: NotSentReason::ConnectTimedOut,
                    detail: "timeout".into(),
                },
                Event::Answered(WriteAnswer::Done { revision: 7 }),
                Event::Answered(WriteAnswer::Refused(Refusal::conflict(3))),
                Event::Answered(door_refusal()),
                Event::Answered(WriteAnswer::NotCarriedOut {
                    reason: NotCarriedOutReason::Interrupted,
                }),
                Event::Lost {
                    reason: UnknownReason::ConnectionLost,
                    detail: "reset".into(),
                },
                Event::Lost {
                    reason: UnknownReason::TimedOut,
                    detail: "deadline".into(),
                },
            ],
            Step::Settle { .. } => vec![
                Event::Settled(CallState::Answered(WriteAnswer::Done { revision: 7 })),
                Event::Settled(CallState::Forgotten { retention_ms: 1 }),
                Event::Settled(CallState::Unrecognized { number: 9 }),
                Event::Settled(CallState::Running {
                    since_ms: 1,
                    heartbeat_age_ms: 0,
                }),
                Event::Settled(CallState::NotCarriedOut {
                    reason: NotCarriedOutReason::NeverArrived,
                }),
                Event::SettleFailed {
                    detail: "unreachable".into(),
                },
            ],
            Step::Finish(_) => vec![],
        }
    }

    /// What a trace of steps and the events that answered them must never do.
    fn check_trace(trace: &[(Step, Option<Event>)]) {
        // Once a send was answered by anything but a door refusal, or lost, the request may
        // have run: it must never be sent again, and "nothing was sent" is no longer true.
        let mut may_have_run = false;
        let mut lost = false;
        let mut delivered = 0;
        let mut door_refusals = 0;
        let mut sends = 0;
        for (step, event) in trace {
            match step {
                Step::Send { route, race } => {
                    assert!(
                        !may_have_run,
                        "sent again after the request may have run: {trace:?}"
                    );
                    // Rule 4's one failover: only the first send races, to another route.
                    assert_eq!(*route, 0, "a send not on the best route: {trace:?}");
                    if let Some(race) = race {
                        assert!(
                            sends == 0 && race.route != *route,
                            "a second race: {trace:?}"
                        );
                    }
                    sends += 1;
                    if !matches!(event, Some(Event::NotSent { .. }) | None) {
                        delivered += 1;
                    }
                }
                Step::Finish(WriteOutcome::NotSent { .. }) => {
                    assert!(
                        !may_have_run,
                        "`nothing was sent` after the request may have run: {trace:?}"
                    )
                }
                Step::Finish(WriteOutcome::Unknown { .. }) => {
                    assert!(lost, "unknown without a loss: {trace:?}")
                }
                Step::Settle { .. } => assert!(lost, "settling without a loss: {trace:?}"),
                _ => {}
            }
            match event {
                Some(Event::Lost { .. }) => {
                    lost = true;
                    may_have_run = true;
                }
                Some(Event::Answered(answer)) if *answer == door_refusal() => door_refusals += 1,
                Some(Event::Answered(_)) => may_have_run = true,
                _ => {}
            }
        }
        // At most one delivery, plus the one renewal a door refusal allows.
        assert!(
            delivered <= 1 + door_refusals.min(1),
            "delivered {delivered} times: {trace:?}"
        );
    }

    /// Drives every realistic sequence of events up to `depth` steps, with the deadline passing
    /// before each possible step, over several sets of routes, and checks each trace.
    #[test]
    fn no_sequence_of_events_sends_a_request_twice_or_mislabels_an_outcome() {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(10);
        let depth = 14;
        let mut traces = 0u64;
        let route_sets: [&[RouteKind]; 4] = [
            &[RouteKind::Lan, RouteKind::Tailnet],
            &[RouteKind::Tailnet, RouteKind::Tailnet],
            &[RouteKind::Lan],
            &[],
        ];
        for routes in route_sets {
            for expire_at in 0..=depth + 1 {
                let (machine, first) = WriteMachine::start(deadline, start, routes);
                let mut stack = vec![(machine, vec![(first, None::<Event>)])];
                while let Some((machine, trace)) = stack.pop() {
                    let last = trace
                        .last()
                        .map(|(step, _)| step.clone())
                        .unwrap_or(Step::Settle {
                            after: Duration::ZERO,
                        });
                    if matches!(last, Step::Finish(_)) || trace.len() > depth {
                        assert!(
                            matches!(last, Step::Finish(_)),
                            "no finish within {depth} steps: {trace:?}"
                        );
                        check_trace(&trace);
                        traces += 1;
                        continue;
                    }
                    let now = if trace.len() > expire_at {
                        deadline
                    } else {
                        start
                    };
                    for event in events_after(&last) {
                        let mut next = machine.clone();
                        let step = next.on(event.clone(), now);
                        let mut longer = trace.clone();
                        if let Some(answered) = longer.last_mut() {
                            answered.1 = Some(event);
                        }
                        longer.push((step, None));
                        stack.push((next, longer));
                    }
                }
            }
        }
        // The whole space: every realistic trace runs to a Finish (10,728 of them today, over
        // the four sets of routes).
        assert!(traces > 8_000, "explored only {traces} traces");
    }

    #[test]
    fn a_local_link_races_the_next_route_and_a_tailnet_is_not_raced() {
        let now = Instant::now();
        let deadline = now + Duration::from_secs(5);
        let (mut m, _) = WriteMachine::start(deadline, now, &[RouteKind::Lan, RouteKind::Tailnet]);
        assert_eq!(
            m.on(Event::TicketReady, now),
            Step::Send {
                route: 0,
                race: Some(Race {
                    route: 1,
                    after: RACE_DELAY
                })
            }
        );
        let failed = || Event::NotSent {
            reason: NotSentReason::ConnectFailed,
            detail: "x".into(),
        };
        assert!(matches!(
            m.on(failed(), now),
            Step::Finish(WriteOutcome::NotSent { .. })
        ));
        // A tailnet route is not raced, and does not fail over (it is not a local link).
        let (mut m, _) =
            WriteMachine::start(deadline, now, &[RouteKind::Tailnet, RouteKind::Tailnet]);
        assert_eq!(
            m.on(Event::TicketReady, now),
            Step::Send {
                route: 0,
                race: None
            }
        );
        assert!(matches!(
            m.on(failed(), now),
            Step::Finish(WriteOutcome::NotSent { .. })
        ));
    }

    #[test]
    fn settle_asks_are_paced_after_the_first_and_never_past_the_deadline() {
        let now = Instant::now();
        let deadline = now + Duration::from_millis(150);
        let (mut m, _) = WriteMachine::start(deadline, now, &[RouteKind::Tailnet]);
        m.on(Event::TicketReady, now);
        let lost = Event::Lost {
            reason: UnknownReason::ConnectionLost,
            detail: "reset".into(),
        };
        assert_eq!(
            m.on(lost, now),
            Step::Settle {
                after: Duration::ZERO
            }
        );
        let failed = || Event::SettleFailed { detail: "x".into() };
        assert_eq!(
            m.on(failed(), now),
            Step::Settle {
                after: SETTLE_BACKOFF
            }
        );
        let later = now + Duration::from_millis(120);
        assert_eq!(
            m.on(failed(), later),
            Step::Settle {
                after: Duration::from_millis(30)
            }
        );
    }

    #[test]
    fn a_door_refusal_renews_once_and_then_passes_the_401_back() {
        let now = Instant::now();
        let (mut m, step) =
            WriteMachine::start(now + Duration::from_secs(5), now, &[RouteKind::Tailnet]);
        assert_eq!(step, Step::GetTicket { renew: false });
        let send = Step::Send {
            route: 0,
            race: None,
        };
        assert_eq!(m.on(Event::TicketReady, now), send);
        assert_eq!(
            m.on(Event::Answered(door_refusal()), now),
            Step::GetTicket { renew: true }
        );
        assert_eq!(m.on(Event::TicketReady, now), send);
        let Step::Finish(WriteOutcome::Answered(WriteAnswer::Refused(r))) =
            m.on(Event::Answered(door_refusal()), now)
        else {
            panic!("the second 401 is passed back");
        };
        assert_eq!(r.code, RefusalCode::TicketRefused);
    }

    #[test]
    fn a_failed_renewal_passes_back_the_doors_401_not_unavailable() {
        let now = Instant::now();
        let (mut m, _) =
            WriteMachine::start(now + Duration::from_secs(5), now, &[RouteKind::Tailnet]);
        m.on(Event::TicketReady, now);
        m.on(Event::Answered(door_refusal()), now);
        let step = m.on(
            Event::TicketUnavailable {
                detail: "refused".into(),
            },
            now,
        );
        assert_eq!(step, Step::Finish(WriteOutcome::Answered(door_refusal())));
    }

    #[test]
    fn a_race_spends_the_one_failover_so_a_failure_of_both_is_final() {
        let now = Instant::now();
        let routes = [RouteKind::Lan, RouteKind::Lan, RouteKind::Tailnet];
        let (mut m, _) = WriteMachine::start(now + Duration::from_secs(5), now, &routes);
        // Raced against route 1: the failover is spent, so a failure of both is final.
        assert!(matches!(
            m.on(Event::TicketReady, now),
            Step::Send { race: Some(_), .. }
        ));
        let failed = || Event::NotSent {
            reason: NotSentReason::ConnectFailed,
            detail: "x".into(),
        };
        assert!(matches!(
            m.on(failed(), now),
            Step::Finish(WriteOutcome::NotSent { .. })
        ));
    }

    #[test]
    fn a_break_after_the_send_is_settled_and_the_owners_truth_is_the_answer() {
        let now = Instant::now();
        let (mut m, _) =
            WriteMachine::start(now + Duration::from_secs(5), now, &[RouteKind::Tailnet]);
        m.on(Event::TicketReady, now);
        assert!(matches!(
            m.on(
                Event::Lost {
                    reason: UnknownReason::ConnectionLost,
                    detail: "reset".into()
                },
                now
            ),
            Step::Settle { .. }
        ));
        assert!(matches!(
            m.on(Event::SettleFailed { detail: "x".into() }, now),
            Step::Settle { .. }
        ));
        let step = m.on(
            Event::Settled(CallState::NotCarriedOut {
                reason: NotCarriedOutReason::NeverArrived,
            }),
            now,
        );
        assert_eq!(
            step,
            Step::Finish(WriteOutcome::NotCarriedOut {
                reason: NotCarriedOutReason::NeverArrived
            })
        );
    }

    #[test]
    fn a_timeout_after_the_send_is_outcome_unknown_without_settling() {
        let now = Instant::now();
        let deadline = now + Duration::from_secs(1);
        let (mut m, _) = WriteMachine::start(deadline, now, &[RouteKind::Tailnet]);
        m.on(Event::TicketReady, now);
        let step = m.on(
            Event::Lost {
                reason: UnknownReason::TimedOut,
                detail: "deadline".into(),
            },
            deadline,
        );
        assert!(matches!(
            step,
            Step::Finish(WriteOutcome::Unknown {
                reason: UnknownReason::TimedOut,
                ..
            })
        ));
    }
}
