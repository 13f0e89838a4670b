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
//! The driver (`crate::call::Caller::write`) performs each [`Step`] and reports what happened
//! as an [`Event`].

use std::time::Instant;

use crate::outcome::{NotSentReason, Refusal, RefusalCode, UnknownReason, WriteOutcome};
use crate::wire::{CallState, WriteAnswer};

/// How many times a settle may be asked after a break, inside the deadline. Settling is a read,
/// so asking again is safe; the bound keeps a flapping owner from spinning the caller.
pub const MAX_SETTLE_ASKS: u8 = 5;

/// What the driver should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Get a ticket for the owner: from the cache, or (with `renew`) freshly from the owner.
    GetTicket { renew: bool },
    /// Send the request once, on a new stream, over the route at this index (0 = best).
    Send { route: usize },
    /// Ask the owner what became of the request id, on a new connection.
    Settle,
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
    /// The send failed before the first byte reached QUIC. `may_fail_over`: the route was a
    /// local link and another route exists.
    NotSent {
        reason: NotSentReason,
        detail: String,
        may_fail_over: bool,
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
    route: usize,
    failovers_left: u8,
    renewals_left: u8,
    settles_left: u8,
    /// The door's 401, kept while its renewal runs: passed back if the renewal fails.
    door_refusal: Option<Refusal>,
    /// Why the request is lost, once it is.
    lost: Option<(UnknownReason, String)>,
    finished: Option<WriteOutcome>,
}

impl WriteMachine {
    /// Starts a write whose deadline is `deadline`; returns the machine and its first step.
    pub fn start(deadline: Instant, now: Instant) -> (Self, Step) {
        let mut machine = Self {
            deadline,
            route: 0,
            failovers_left: 1,
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

    /// The outcome, once finished.
    pub fn outcome(&self) -> Option<&WriteOutcome> {
        self.finished.as_ref()
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
            Event::TicketReady if time_left => Step::Send { route: self.route },
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
            Event::NotSent {
                reason,
                detail,
                may_fail_over,
            } => {
                if may_fail_over && self.failovers_left > 0 && time_left {
                    self.failovers_left -= 1;
                    self.route += 1;
                    Step::Send { route: self.route }
                } else {
                    self.finish(WriteOutcome::not_sent(reason, detail))
                }
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
                self.lost = Some((reason, detail));
                self.settle_or_give_up(time_left && reason == UnknownReason::ConnectionLost)
            }
            Event::Settled(CallState::Answered(answer)) => self.answered(answer),
            Event::Settled(CallState::NotCarriedOut { reason }) => {
                self.finish(WriteOutcome::NotCarriedOut { reason })
            }
            Event::Settled(CallState::Running { .. } | CallState::Forgotten { .. })
            | Event::SettleFailed { .. } => self.settle_or_give_up(time_left),
        }
    }

    fn settle_or_give_up(&mut self, may_ask: bool) -> Step {
        if may_ask && self.settles_left > 0 {
            self.settles_left -= 1;
            Step::Settle
        } else {
            self.unknown()
        }
    }
}

#[cfg(test)]
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
                    may_fail_over: true,
                },
                Event::NotSent {
                    reason: NotSentReason::ConnectTimedOut,
                    detail: "timeout".into(),
                    may_fail_over: false,
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
            Step::Settle => vec![
                Event::Settled(CallState::Answered(WriteAnswer::Done { revision: 7 })),
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
        for (step, event) in trace {
            match step {
                Step::Send { .. } => {
                    assert!(
                        !may_have_run,
                        "sent again after the request may have run: {trace:?}"
                    );
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
                Step::Settle => assert!(lost, "settling without a loss: {trace:?}"),
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
    /// before each possible step, and checks each trace.
    #[test]
    fn no_sequence_of_events_sends_a_request_twice_or_mislabels_an_outcome() {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(10);
        let depth = 14;
        let mut traces = 0u64;
        for expire_at in 0..=depth + 1 {
            let (machine, first) = WriteMachine::start(deadline, start);
            let mut stack = vec![(machine, vec![(first, None::<Event>)])];
            while let Some((machine, trace)) = stack.pop() {
                let last = trace
                    .last()
                    .map(|(step, _)| step.clone())
                    .unwrap_or(Step::Settle);
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
        // The whole space: every realistic trace runs to a Finish (4,724 of them today).
        assert!(traces > 4_000, "explored only {traces} traces");
    }

    #[test]
    fn a_door_refusal_renews_once_and_then_passes_the_401_back() {
        let now = Instant::now();
        let (mut m, step) = WriteMachine::start(now + Duration::from_secs(5), now);
        assert_eq!(step, Step::GetTicket { renew: false });
        assert_eq!(m.on(Event::TicketReady, now), Step::Send { route: 0 });
        assert_eq!(
            m.on(Event::Answered(door_refusal()), now),
            Step::GetTicket { renew: true }
        );
        assert_eq!(m.on(Event::TicketReady, now), Step::Send { route: 0 });
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
        let (mut m, _) = WriteMachine::start(now + Duration::from_secs(5), now);
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
    fn one_failover_on_a_local_link_then_nothing_was_sent() {
        let now = Instant::now();
        let (mut m, _) = WriteMachine::start(now + Duration::from_secs(5), now);
        m.on(Event::TicketReady, now);
        let failed = || Event::NotSent {
            reason: NotSentReason::ConnectFailed,
            detail: "x".into(),
            may_fail_over: true,
        };
        assert_eq!(m.on(failed(), now), Step::Send { route: 1 });
        assert!(matches!(
            m.on(failed(), now),
            Step::Finish(WriteOutcome::NotSent { .. })
        ));
    }

    #[test]
    fn a_break_after_the_send_is_settled_and_the_owners_truth_is_the_answer() {
        let now = Instant::now();
        let (mut m, _) = WriteMachine::start(now + Duration::from_secs(5), now);
        m.on(Event::TicketReady, now);
        assert_eq!(
            m.on(
                Event::Lost {
                    reason: UnknownReason::ConnectionLost,
                    detail: "reset".into()
                },
                now
            ),
            Step::Settle
        );
        assert_eq!(
            m.on(Event::SettleFailed { detail: "x".into() }, now),
            Step::Settle
        );
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
        let (mut m, _) = WriteMachine::start(deadline, now);
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
