//! Whether the owner starts a request (SPEC 7 rules 5 and 7). The executor asks before a
//! request takes a place in its queue, and again when it takes it out to run it.

use std::time::{Duration, Instant};

/// What the owner does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Queue it (or run it, when asked at the head of the queue).
    Admit,
    /// Refuse it `busy`: not carried out, not journaled; the same id may be sent again after
    /// `retry_after`.
    Busy {
        why: BusyReason,
        retry_after: Duration,
    },
}

/// Why a request was refused busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyReason {
    /// Its deadline passed before it could start.
    DeadlinePassed,
    /// The queue is full.
    QueueFull,
}

impl BusyReason {
    pub fn detail(self) -> &'static str {
        match self {
            Self::DeadlinePassed => "the request's deadline passed before the owner could start it",
            Self::QueueFull => "the owner's write queue is full",
        }
    }
}

/// How long a caller refused for a full queue should wait before sending again.
pub const QUEUE_FULL_RETRY: Duration = Duration::from_millis(100);

/// At arrival: a request whose deadline has passed, or that finds the queue full, is busy.
pub fn on_arrival(deadline: Instant, now: Instant, queued: usize, capacity: usize) -> Admission {
    if deadline <= now {
        return Admission::Busy {
            why: BusyReason::DeadlinePassed,
            retry_after: Duration::ZERO,
        };
    }
    if queued >= capacity {
        return Admission::Busy {
            why: BusyReason::QueueFull,
            retry_after: QUEUE_FULL_RETRY,
        };
    }
    Admission::Admit
}

/// At the head of the queue: a request that waited past its deadline is busy (SPEC 7 rule 5),
/// and never runs afterwards.
pub fn at_start(deadline: Instant, now: Instant) -> Admission {
    if deadline <= now {
        Admission::Busy {
            why: BusyReason::DeadlinePassed,
            retry_after: Duration::ZERO,
        }
    } else {
        Admission::Admit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_or_crowded_requests_are_busy() {
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        assert_eq!(on_arrival(later, now, 0, 4), Admission::Admit);
        assert!(matches!(
            on_arrival(now, now, 0, 4),
            Admission::Busy {
                why: BusyReason::DeadlinePassed,
                ..
            }
        ));
        assert!(matches!(
            on_arrival(later, now, 4, 4),
            Admission::Busy {
                why: BusyReason::QueueFull,
                ..
            }
        ));
        assert_eq!(at_start(later, now), Admission::Admit);
        assert!(matches!(at_start(later, later), Admission::Busy { .. }));
    }
}
