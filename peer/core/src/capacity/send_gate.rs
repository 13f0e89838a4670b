//! The calling gateway's side of the per-caller cap: it does not send a write the owner has
//! just shown it would refuse.
//!
//! The owner caps the writes of one caller node and app that are queued or running there
//! ([`super::CapacityRules::per_caller`]) and refuses the rest `busy` with the reason
//! `caller_cap`. Each such refusal costs the calling gateway, the owner and the machine a full
//! trip (HTTP, the call log, QUIC, the door) for nothing. So the caller learns the cap from
//! the refusals themselves: a write refused `caller_cap` that left while `n` others of its app
//! were out to that owner says the cap is at most `n`. While that lesson is fresh
//! ([`LESSON_LASTS`]), a write that would be the `n+1`th out is answered `busy` here, before
//! anything is recorded or sent ("nothing was sent"), which is what the owner would have said.
//!
//! The lesson is the owner's own, so nothing is configured on the caller and an owner that
//! raises its cap is believed as soon as the lesson expires; an owner that never refuses (its
//! rules off, an older release) is never capped here. A lesson is only ever a lower bound of
//! what the owner refused: the caller's count of writes out includes answers still on their
//! way back, so near the cap it may refuse one the owner would just have taken, never the
//! reverse for long. Such a refusal is a write that was not sent, and the same id may be sent
//! again.
//!
//! The same gate, keyed by owner (and class) instead, keeps the owner's wait bound
//! ([`super::CapacityRules::interactive_wait`]): an interactive write refused `saturated` that
//! left while `n` other interactive writes of this gateway (every app together) were out to
//! that owner says the owner, as loaded now, takes at most `n` of them, for a moment
//! ([`SATURATED_LESSON_LASTS`]: its room is shared with its other callers). Holding to that here
//! answers the excess on the calling machine's cores, not on the owner's, which are the ones
//! short: an owner that refused the excess itself spent its time receiving and answering
//! writes it then did not run (`docs/decisions.md`, "The wait bound").
//!
//! Keyed by owner and class, it keeps the owner's background bound beside interactive
//! writes ([`super::CapacityRules::background_beside_interactive`]) the same way: a background
//! write refused `background_full` while `n` others of this gateway were out says the owner
//! takes at most `n` of them now.
//!
//! An owner's room moves with its load, so these two lessons also grow back while it carries
//! what they let out: each time as many writes as the lesson allows are carried out with the
//! gate full, it allows one more (as a congestion window grows by one a round trip), until the
//! owner refuses again or the lesson expires. Without that, a lesson only ever fell within its
//! second (each refusal sets it to the least that was out), and held the callers under what
//! the owner could take (`docs/decisions.md`, "The wait bound").
//!
//! Only for an id that cannot have left before ([`RecentIds`]): `busy` says "not carried out",
//! and a repeat of an id whose first copy left (an app whose HTTP client gave up and sends the
//! id again, or that resends after `outcome_unknown`) may have been carried out, so it always
//! goes to the owner, whose journal knows. The caller knows every id it sent since
//! [`RecentIds`]' horizon, and an id stamped (UUIDv7) after the horizon cannot have been sent
//! before it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

use super::{Refusal, Refused, BUSY_RETRY};
use crate::wire::RequestId;

/// The maps' hasher: seeded at random per process, and several times faster on these short
/// keys than the standard library's SipHash, which came to 1% of the calling gateway's CPU per
/// write across this gate and the registry of calls in flight
/// (`docs/history/performance-log.md`, "The call log's slots in mapped memory"). foldhash is only minimally resistant to hash flooding,
/// which is enough here: the keys are request ids and app names that local apps holding the
/// gateway's token choose.
type FastKeyed = foldhash::fast::RandomState;

/// How long a refusal's lesson holds before the caller sends past it again to learn afresh.
pub const LESSON_LASTS: Duration = Duration::from_secs(10);
/// How long a lesson of the owner-wide bounds (`saturated`, `background_full`) holds
/// ([`SendGate::for_owner_bounds`]): the owner's room is shared by all its callers and moves
/// with their load, so this gateway keeps to what it was last told for a second, not for the
/// ten a per-app cap (a fixed number) is kept.
pub const SATURATED_LESSON_LASTS: Duration = Duration::from_secs(1);

/// How many (owner, app) pairs the gate keeps; past it, the ones with nothing out and nothing
/// learned are forgotten first, then it stops learning (it never refuses for want of room).
const MAX_TRACKED: usize = 4096;

#[derive(Debug, Clone, Copy, Default)]
struct Pair {
    /// Writes of this app sent to this owner and not yet answered (or given up on).
    out: u32,
    /// The cap learned from the owner's last `caller_cap` refusal, and until when it holds.
    learned: Option<(u32, Instant)>,
    /// Writes carried out with the gate full since the learned cap last grew.
    carried_at_cap: u32,
}

/// A write that may leave: the gate's count of it, to hand back with its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// How many other writes of the same pair were out when this one left.
    pub others_out: u32,
    /// Whether the gate counted it (a full gate lets writes by uncounted).
    counted: bool,
}

/// What became of a write that left, as far as the gate cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The owner refused it `busy` for the bound this gate keeps (`caller_cap` for the per-app
    /// cap, `saturated` or `background_full` for the owner-wide bounds).
    RefusedForCap,
    /// The owner carried it out: it passed the cap.
    Done,
    /// Anything else (another refusal, never sent, no answer): says nothing about the cap.
    Other,
}

/// Per (owner, app) pair: writes out and the learned cap. `K` is the pair's key.
#[derive(Debug)]
pub struct SendGate<K> {
    pairs: HashMap<K, Pair, FastKeyed>,
    /// The owner's refusal this gate learns from and answers with.
    refuses_as: Refused,
    /// How long a lesson holds.
    lesson: Duration,
    /// Whether a lesson grows back while the owner carries what it lets out (the owner-wide
    /// bounds, which move with load; not the per-app cap, a fixed number).
    grows: bool,
}

/// The per-app cap's gate: `caller_cap`, lessons of [`LESSON_LASTS`].
impl<K> Default for SendGate<K> {
    fn default() -> Self {
        Self {
            pairs: HashMap::default(),
            refuses_as: Refused::CallerCap,
            lesson: LESSON_LASTS,
            grows: false,
        }
    }
}

impl<K> SendGate<K> {
    /// The owner-wide bounds' gate, keyed by owner and class: `saturated` for interactive
    /// writes, `background_full` for background ones (the caller names which when it refuses),
    /// lessons of [`SATURATED_LESSON_LASTS`] that grow back while the owner carries them.
    pub fn for_owner_bounds() -> Self {
        Self {
            pairs: HashMap::default(),
            refuses_as: Refused::Saturated,
            lesson: SATURATED_LESSON_LASTS,
            grows: true,
        }
    }
}

impl<K: Hash + Eq + Clone> SendGate<K> {
    /// A write of `key` is about to be recorded and sent: counted out, or refused `busy`
    /// because the owner's cap, as last learned, is already reached. A write that `may_repeat`
    /// (its id may have left before, [`RecentIds::may_have_left`]) is counted and never refused.
    pub fn leave(&mut self, key: &K, may_repeat: bool, now: Instant) -> Result<Sent, Refusal> {
        if !self.pairs.contains_key(key) && self.pairs.len() >= MAX_TRACKED {
            self.pairs
                .retain(|_, pair| pair.out > 0 || pair.learned.is_some_and(|(_, t)| t > now));
        }
        if !self.pairs.contains_key(key) && self.pairs.len() >= MAX_TRACKED {
            // Full of pairs with writes out: count nothing and refuse nothing.
            return Ok(Sent {
                others_out: 0,
                counted: false,
            });
        }
        let pair = self.pairs.entry(key.clone()).or_default();
        if let Some((cap, until)) = pair.learned {
            if until <= now {
                pair.learned = None;
            } else if pair.out >= cap && !may_repeat {
                return Err(Refusal {
                    why: self.refuses_as,
                    retry_after: BUSY_RETRY,
                });
            }
        }
        let sent = Sent {
            others_out: pair.out,
            counted: true,
        };
        pair.out += 1;
        Ok(sent)
    }

    /// A write that left ([`SendGate::leave`]) has its outcome.
    pub fn ended(&mut self, key: &K, sent: Sent, ended: Ended, now: Instant) {
        let Some(pair) = self.pairs.get_mut(key).filter(|_| sent.counted) else {
            return;
        };
        pair.out = pair.out.saturating_sub(1);
        match ended {
            // Refused with no other write of ours out: the owner still counts writes we gave
            // up on. Nothing to learn about the cap from that. Refused with fewer out than the
            // lesson: the owner holds more of ours than we count (writes given up on, or from
            // before a restart), so its room for us is smaller for now; the lower lesson
            // expires with the rest.
            Ended::RefusedForCap if sent.others_out > 0 => {
                let cap = match pair.learned {
                    Some((cap, until)) if until > now => cap.min(sent.others_out),
                    _ => sent.others_out,
                };
                pair.learned = Some((cap, now + self.lesson));
                pair.carried_at_cap = 0;
            }
            Ended::RefusedForCap | Ended::Other => {}
            // Carried out with `others_out` out: the cap is above that (a lesson from a moment
            // when the owner still counted writes we had given up on).
            Ended::Done => {
                if let Some((cap, until)) = pair.learned {
                    if sent.others_out >= cap {
                        pair.learned = Some((sent.others_out + 1, until));
                    } else if self.grows && sent.others_out + 1 >= cap {
                        // Carried out with the gate full: a lesson's worth of them, one more.
                        pair.carried_at_cap += 1;
                        if pair.carried_at_cap >= cap {
                            pair.carried_at_cap = 0;
                            pair.learned = Some((cap + 1, until));
                        }
                    }
                }
            }
        }
        if pair.out == 0 && pair.learned.is_none() {
            self.pairs.remove(key);
        }
    }

    /// Writes out for `key` now (for tests and status).
    pub fn out(&self, key: &K) -> u32 {
        self.pairs.get(key).map_or(0, |pair| pair.out)
    }
}

/// How long [`RecentIds`] remembers a sent id: ids stamped earlier than that ago are taken as
/// possibly sent.
pub const REMEMBER_SENT: Duration = Duration::from_secs(10);

/// At most this many ids are remembered; past it the horizon moves up early.
const MAX_REMEMBERED: usize = 65_536;

/// The request ids this gateway sent lately, so the send gate refuses only ids that cannot
/// have left before. Everything is in Unix milliseconds of the gateway's clock, which also
/// stamped (or, for an app on the same machine, checked) the ids.
#[derive(Debug)]
pub struct RecentIds {
    /// Every id sent at or after this is in `ids`; an id stamped before it may have been sent.
    horizon_ms: u64,
    ids: HashSet<RequestId, FastKeyed>,
    /// The same ids in the order they were sent, with when.
    order: VecDeque<(u64, RequestId)>,
}

impl RecentIds {
    /// Takes every id stamped before `horizon_ms` as possibly sent: at least this process's
    /// start, and past anything an earlier process of the same home may have sent (the
    /// gateway's sent mark, or its start plus the skew the API accepts when the mark is lost).
    pub fn new(horizon_ms: u64) -> Self {
        Self {
            horizon_ms,
            ids: HashSet::default(),
            order: VecDeque::new(),
        }
    }

    /// Whether `id` may have been sent by this gateway before, at `now_ms`: it was, or it is
    /// stamped before the horizon, or ahead of this clock. An id is sent after it was made, so
    /// one stamped from the horizon to now and not remembered was never sent by this process,
    /// nor by an earlier one (the horizon starts past anything an earlier process took). An id
    /// dated ahead of the clock (an app's clock ahead of this one) is never judged here.
    pub fn may_have_left(&self, id: &RequestId, now_ms: u64) -> bool {
        let stamp = id.unix_ms();
        stamp < self.horizon_ms || stamp > now_ms || self.ids.contains(id)
    }

    /// `id` is about to leave, at `now_ms`.
    pub fn sent(&mut self, id: RequestId, now_ms: u64) {
        if self.ids.insert(id) {
            self.order.push_back((now_ms, id));
        }
        let forget_before = now_ms.saturating_sub(REMEMBER_SENT.as_millis() as u64);
        while let Some(&(at, old)) = self.order.front() {
            if at >= forget_before && self.order.len() <= MAX_REMEMBERED {
                break;
            }
            self.order.pop_front();
            self.ids.remove(&old);
            // Ids stamped up to the later of its sending and its own stamp (an app's clock may
            // run a little ahead of this one) may have been sent, and are taken as such.
            self.horizon_ms = self.horizon_ms.max(at.max(old.unix_ms()) + 1);
        }
    }
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    fn leave_n(gate: &mut SendGate<&'static str>, n: u32, now: Instant) -> Vec<Sent> {
        (0..n)
            .map(|_| gate.leave(&"a", false, now).expect("nothing learned yet"))
            .collect()
    }

    #[test]
    fn nothing_is_refused_before_the_owner_refused_once() {
        let mut gate = SendGate::default();
        let now = Instant::now();
        let sent = leave_n(&mut gate, 100, now);
        assert_eq!(gate.out(&"a"), 100);
        assert_eq!(sent[99].others_out, 99);
    }

    #[test]
    fn a_cap_refusal_with_four_out_refuses_the_fifth_here_until_one_returns() {
        let mut gate = SendGate::default();
        let now = Instant::now();
        let four = leave_n(&mut gate, 4, now);
        let fifth = gate.leave(&"a", false, now).expect("not learned yet");
        gate.ended(&"a", fifth, Ended::RefusedForCap, now);
        let refused = gate
            .leave(&"a", false, now)
            .expect_err("the cap is four, four are out");
        assert_eq!(refused.why, Refused::CallerCap);
        gate.ended(&"a", four[0], Ended::Done, now);
        assert!(
            gate.leave(&"a", false, now).is_ok(),
            "three out, one may leave"
        );
        assert!(gate.leave(&"a", false, now).is_err(), "four out again");
    }

    #[test]
    fn the_lesson_expires_and_the_caller_probes_again() {
        let mut gate = SendGate::default();
        let now = Instant::now();
        let _two = leave_n(&mut gate, 2, now);
        let third = gate.leave(&"a", false, now).expect("not learned yet");
        gate.ended(&"a", third, Ended::RefusedForCap, now);
        assert!(gate.leave(&"a", false, now + LESSON_LASTS / 2).is_err());
        assert!(
            gate.leave(&"a", false, now + LESSON_LASTS).is_ok(),
            "an expired lesson refuses nothing"
        );
    }

    #[test]
    fn the_wait_bounds_gate_answers_saturated_and_forgets_within_a_second() {
        let mut gate = SendGate::for_owner_bounds();
        let now = Instant::now();
        let first = gate
            .leave(&"owner", false, now)
            .expect("nothing learned yet");
        let second = gate
            .leave(&"owner", false, now)
            .expect("nothing learned yet");
        // Refused with one other out: the owner takes one of ours now.
        gate.ended(&"owner", second, Ended::RefusedForCap, now);
        let refused = gate.leave(&"owner", false, now).expect_err("one is out");
        assert_eq!(refused.why, Refused::Saturated);
        // A repeat of an id that may have left is never refused here.
        let repeat = gate.leave(&"owner", true, now).expect("a repeat goes");
        gate.ended(&"owner", repeat, Ended::Other, now);
        assert!(gate
            .leave(&"owner", false, now + SATURATED_LESSON_LASTS)
            .is_ok());
        gate.ended(&"owner", first, Ended::Done, now);
    }

    #[test]
    fn an_owner_bounds_lesson_grows_back_while_the_owner_carries_what_it_lets_out() {
        let now = Instant::now();
        // Taught a cap of 2 (the second of the two carried out with the gate full counts), then
        // every write carried out: after a lesson's worth carried with the gate full (2), the
        // gate lets 3 out; after 3 more, 4.
        let taught = |gate: &mut SendGate<&'static str>| {
            let sent = leave_n(gate, 3, now);
            gate.ended(&"a", sent[2], Ended::RefusedForCap, now);
            gate.ended(&"a", sent[0], Ended::Done, now);
            gate.ended(&"a", sent[1], Ended::Done, now);
        };
        let allowed = |gate: &mut SendGate<&'static str>| {
            let mut out = Vec::new();
            while let Ok(sent) = gate.leave(&"a", false, now) {
                out.push(sent);
            }
            out
        };
        let mut gate = SendGate::for_owner_bounds();
        taught(&mut gate);
        for (round, expect) in [(0, 2), (1, 3), (2, 3), (3, 3), (4, 4)] {
            let out = allowed(&mut gate);
            assert_eq!(out.len(), expect, "round {round}");
            // Only the one that left last left with the gate full (others_out + 1 = cap).
            for sent in out {
                gate.ended(&"a", sent, Ended::Done, now);
            }
        }
        // A refusal sets it back to what was out, and the count starts over.
        let out = allowed(&mut gate);
        let last = *out.last().expect("some out");
        gate.ended(&"a", last, Ended::RefusedForCap, now);
        assert_eq!(
            allowed(&mut gate).len(),
            0,
            "{} out, cap {}",
            out.len() - 1,
            out.len() - 1
        );
        // The per-app cap is a fixed number: its lesson does not grow.
        let mut fixed = SendGate::default();
        taught(&mut fixed);
        for _ in 0..6 {
            let out = allowed(&mut fixed);
            assert_eq!(out.len(), 2);
            for sent in out {
                fixed.ended(&"a", sent, Ended::Done, now);
            }
        }
    }

    #[test]
    fn a_refusal_with_nothing_else_out_teaches_nothing() {
        let mut gate = SendGate::default();
        let now = Instant::now();
        let only = gate.leave(&"a", false, now).expect("first");
        gate.ended(&"a", only, Ended::RefusedForCap, now);
        assert!(gate.leave(&"a", false, now).is_ok());
        assert!(gate.leave(&"a", false, now).is_ok());
    }

    #[test]
    fn a_write_taken_past_the_lesson_raises_it() {
        let mut gate = SendGate::default();
        let now = Instant::now();
        let sent = leave_n(&mut gate, 3, now);
        // The second (one other out) refused: the cap is one...
        gate.ended(&"a", sent[1], Ended::RefusedForCap, now);
        // ...yet the third, which left with two others out, was taken: it is three at least.
        gate.ended(&"a", sent[2], Ended::Done, now);
        let fresh = gate.leave(&"a", false, now).expect("one out, cap three");
        assert_eq!(fresh.others_out, 1);
        assert!(gate.leave(&"a", false, now).is_ok(), "two out, cap three");
        assert!(
            gate.leave(&"a", false, now).is_err(),
            "three out, cap three"
        );
    }

    #[test]
    fn pairs_are_apart_and_forgotten_when_idle() {
        let mut gate = SendGate::default();
        let now = Instant::now();
        let a = gate.leave(&"a", false, now).expect("a");
        let a2 = gate.leave(&"a", false, now).expect("a2");
        gate.ended(&"a", a2, Ended::RefusedForCap, now);
        assert!(gate.leave(&"a", false, now).is_err());
        assert!(
            gate.leave(&"b", false, now).is_ok(),
            "another pair is not held back"
        );
        gate.ended(&"a", a, Ended::Done, now + LESSON_LASTS);
        assert!(
            gate.pairs.contains_key(&"a"),
            "learned, not yet expired at ended"
        );
        let again = gate
            .leave(&"a", false, now + LESSON_LASTS)
            .expect("expired");
        gate.ended(&"a", again, Ended::Done, now + LESSON_LASTS);
        assert!(
            !gate.pairs.contains_key(&"a"),
            "idle and unlearned: forgotten"
        );
    }

    #[test]
    fn a_full_gate_forgets_idle_pairs_and_never_refuses_for_want_of_room() {
        let mut gate: SendGate<u32> = SendGate::default();
        let now = Instant::now();
        let first = gate.leave(&0, false, now).expect("room");
        for key in 1..MAX_TRACKED as u32 {
            gate.leave(&key, false, now).expect("room");
        }
        let uncounted = gate.leave(&u32::MAX, false, now).expect("full, still sent");
        assert_eq!(gate.out(&u32::MAX), 0, "not counted");
        gate.ended(&u32::MAX, uncounted, Ended::RefusedForCap, now);
        gate.ended(&0, first, Ended::Done, now);
        assert!(gate.leave(&(u32::MAX - 1), false, now).is_ok());
        assert_eq!(
            gate.out(&(u32::MAX - 1)),
            1,
            "room made by forgetting pair 0"
        );
    }

    #[test]
    fn a_repeat_of_an_id_that_may_have_left_is_never_refused_here() {
        let mut gate = SendGate::default();
        let now = Instant::now();
        let _two = leave_n(&mut gate, 2, now);
        let third = gate.leave(&"a", false, now).expect("not learned yet");
        gate.ended(&"a", third, Ended::RefusedForCap, now);
        assert!(
            gate.leave(&"a", false, now).is_err(),
            "a new id: refused here"
        );
        let repeat = gate
            .leave(&"a", true, now)
            .expect("a repeat goes to the owner");
        assert_eq!(repeat.others_out, 2);
        assert_eq!(gate.out(&"a"), 3, "and counts while out");
    }

    #[test]
    fn a_write_refused_for_another_reason_or_unanswered_teaches_nothing() {
        let mut gate = SendGate::default();
        let now = Instant::now();
        let sent = leave_n(&mut gate, 3, now);
        gate.ended(&"a", sent[1], Ended::RefusedForCap, now); // cap <= 1
        gate.ended(&"a", sent[2], Ended::Other, now); // left with two out: no word on the cap
        assert!(gate.leave(&"a", false, now).is_err(), "one out, cap one");
    }

    fn id_at(ms: u64) -> RequestId {
        RequestId::at(ms)
    }

    #[test]
    fn ids_stamped_before_the_process_started_may_have_left() {
        let start = 1_764_000_000_000;
        let recent = RecentIds::new(start);
        assert!(recent.may_have_left(&id_at(start - 1), start));
        assert!(!recent.may_have_left(&id_at(start), start));
    }

    #[test]
    fn a_sent_id_may_have_left_until_it_is_forgotten_and_then_by_its_stamp() {
        let start = 1_764_000_000_000;
        let mut recent = RecentIds::new(start);
        let id = id_at(start + 5);
        recent.sent(id, start + 5);
        assert!(recent.may_have_left(&id, u64::MAX));
        // Made in the same millisecond, never sent.
        let fresh = id_at(start + 5);
        assert!(
            !recent.may_have_left(&fresh, u64::MAX),
            "made after the horizon, never sent"
        );
        // Long after: forgotten, and the horizon moved past its stamp.
        let later = start + 5 + REMEMBER_SENT.as_millis() as u64 + 1;
        recent.sent(id_at(later), later);
        assert!(
            recent.may_have_left(&id, u64::MAX),
            "forgotten, stamped before the horizon"
        );
        assert!(
            recent.may_have_left(&fresh, u64::MAX),
            "stamped before the horizon: it may have been sent meanwhile, for all we know"
        );
        assert!(!recent.may_have_left(&id_at(later + 1), u64::MAX));
    }

    #[test]
    fn an_id_stamped_ahead_of_this_clock_is_still_known_after_it_is_forgotten() {
        let start = 1_764_000_000_000;
        let mut recent = RecentIds::new(start);
        let ahead = id_at(start + 2_000);
        recent.sent(ahead, start);
        let later = start + REMEMBER_SENT.as_millis() as u64 + 1;
        recent.sent(id_at(later), later);
        assert!(later < ahead.unix_ms() + REMEMBER_SENT.as_millis() as u64);
        assert!(recent.may_have_left(&ahead, u64::MAX));
    }

    #[test]
    fn an_id_dated_ahead_of_this_clock_is_never_judged_here() {
        let start = 1_764_000_000_000;
        let recent = RecentIds::new(start);
        let ahead = id_at(start + 3_000);
        assert!(recent.may_have_left(&ahead, start + 1_000));
        assert!(!recent.may_have_left(&ahead, start + 3_000));
    }

    #[test]
    fn too_many_ids_move_the_horizon_up_early_and_stay_bounded() {
        let start = 1_764_000_000_000;
        let mut recent = RecentIds::new(start);
        let first = id_at(start);
        recent.sent(first, start);
        for n in 0..MAX_REMEMBERED as u64 {
            recent.sent(id_at(start + 1 + n / 1000), start + 1 + n / 1000);
        }
        assert!(recent.order.len() <= MAX_REMEMBERED);
        assert_eq!(recent.ids.len(), recent.order.len());
        assert!(
            recent.may_have_left(&first, u64::MAX),
            "forgotten early, but before the horizon"
        );
    }
}
