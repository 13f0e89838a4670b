//! Settling a request id this gateway has no record of (SPEC 5): every gateway that could have
//! received it is asked, and their answers are combined here. An owner that never saw the id
//! fences it (a tombstone), so "not carried out" is the verdict only once **every** one of them
//! has said so; one that could not be asked leaves the outcome unknown.

use std::collections::BTreeSet;

use crate::outcome::NotCarriedOutReason;
use crate::wire::CallState;

/// How far in the future (by the caller's clock when it sent) a request id may be dated: the
/// caller refuses ids dated later (SPEC 5). So an id dated `T` left at `T - FUTURE_BOUND_MS` at
/// the earliest.
pub const FUTURE_BOUND_MS: u64 = 5 * 60 * 1000;

/// Margin for this gateway's clock stepping between the acceptance of a write and an untrust.
pub const CLOCK_STEP_MARGIN_MS: u64 = 60 * 1000;

/// What a caller with no record of an id remembers of where writes could have gone.
#[derive(Debug, Clone)]
pub struct Memory<N> {
    /// This gateway (its own executor, for vaults it owns).
    pub me: N,
    /// The peers trusted now.
    pub trusted: Vec<N>,
    /// Peers untrusted since, each with the highest id stamp (Unix ms) that may have gone to
    /// it: the home's sent mark at the untrust, no less than the clock then plus
    /// [`FUTURE_BOUND_MS`] and [`CLOCK_STEP_MARGIN_MS`].
    pub former: Vec<(N, u64)>,
    /// Every owner any write was sent to, as written down.
    pub every_claimed: Vec<N>,
    /// Ids stamped above this were sent, if at all, by a release that writes down where
    /// writes went and whom it untrusted (0 for a database it made; the upgrade's time plus six
    /// minutes for an older one).
    pub claims_since_ms: u64,
}

/// What the caller knows of the vault the app named.
#[derive(Debug, Clone)]
pub struct NamedVault<N> {
    /// The owners writes of that name were ever sent to from here.
    pub claimed: Vec<N>,
    /// The trusted peers that say now that they own a vault of that name.
    pub claimants_now: Vec<N>,
    /// The owner of the copy held here, if any (this gateway, or a followed vault's owner).
    pub held_by: Option<N>,
}

/// Why a machine that could have received an id cannot be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CannotAsk {
    /// It was trusted when the id may have been sent, and is not now.
    NoLongerTrusted,
    /// It is not trusted, and this gateway has no record of when it stopped being.
    NotTrusted,
}

/// The machines that could have received an id: those to ask, and those that cannot be asked
/// (while any of these remain, the id can be found but never fenced).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Witnesses<N> {
    pub ask: Vec<N>,
    pub cannot_ask: Vec<(N, CannotAsk)>,
    /// The id may have been sent by an earlier release, which wrote down neither where writes
    /// went nor whom it untrusted: every peer was asked, whatever vault the app named. (A peer
    /// that release untrusted is unknown here, and not asked: the one case, bounded by the
    /// journal's retention after an upgrade, where a fence can rest on the others' word.)
    pub before_record: bool,
}

/// Who could have received the id dated `id_ms`, sent from this gateway: only they may fence
/// it, and only all of them together.
///
/// With a vault named, and the id stamped after the record began, that is the owners writes of
/// that name went to, the owners claiming it now, the owner of the copy held here, and this
/// gateway. Otherwise (no vault named, a name this gateway knows nothing of, or an id that may
/// predate the record) it is every peer trusted now, every owner a write ever went to, every
/// former peer, and this gateway. A former peer is a witness, one that cannot be asked, for the
/// ids stamped up to what may have gone to it; for later ones it cannot have received them.
/// The stamps compared are the ids' own and the home's sent mark, never this clock's reading
/// at settle time, so a clock set back does not shrink the set.
pub fn witnesses<N: Ord + Copy>(
    id_ms: u64,
    memory: &Memory<N>,
    named: Option<&NamedVault<N>>,
) -> Witnesses<N> {
    let recorded = id_ms > memory.claims_since_ms;
    let mut who: BTreeSet<N> = BTreeSet::new();
    match named {
        Some(named)
            if recorded
                && (!named.claimed.is_empty()
                    || !named.claimants_now.is_empty()
                    || named.held_by.is_some()) =>
        {
            who.extend(named.claimed.iter().copied());
            who.extend(named.claimants_now.iter().copied());
            who.extend(named.held_by);
        }
        _ => {
            who.extend(memory.trusted.iter().copied());
            who.extend(memory.every_claimed.iter().copied());
            who.extend(memory.former.iter().map(|(node, _)| *node));
        }
    }
    who.insert(memory.me);
    let mut witnesses = Witnesses {
        ask: Vec::new(),
        cannot_ask: Vec::new(),
        before_record: !recorded,
    };
    for node in who {
        if node == memory.me || memory.trusted.contains(&node) {
            witnesses.ask.push(node);
            continue;
        }
        match memory.former.iter().find(|(former, _)| *former == node) {
            // Nothing stamped this late was sent while it was trusted.
            Some((_, sent_up_to_ms)) if id_ms > *sent_up_to_ms => {}
            Some(_) => witnesses
                .cannot_ask
                .push((node, CannotAsk::NoLongerTrusted)),
            None => witnesses.cannot_ask.push((node, CannotAsk::NotTrusted)),
        }
    }
    witnesses
}

/// What the gateways said, combined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<L> {
    /// One of them received it: its answer, and who gave it.
    Found(CallState, L),
    /// Nobody holds it, and one of them no longer remembers ids that old.
    Forgotten { retention_ms: u64 },
    /// Nobody who answered holds it, but these could not be asked: ask again later.
    Unreachable(Vec<L>),
    /// Every gateway that could have received it has fenced it: it never ran and never will.
    NeverArrived,
}

/// Combines each gateway's answer (`None`: it could not be asked).
pub fn combine<L>(answers: impl IntoIterator<Item = (L, Option<CallState>)>) -> Verdict<L> {
    let mut unreachable = Vec::new();
    let mut forgotten_ms = None;
    for (who, answer) in answers {
        match answer {
            Some(CallState::NotCarriedOut {
                reason: NotCarriedOutReason::NeverArrived,
            }) => {}
            Some(CallState::Forgotten { retention_ms }) => forgotten_ms = Some(retention_ms),
            // Anything else, a state from a newer owner this build cannot read included, is
            // that gateway's word on the id; never a fence.
            Some(state) => return Verdict::Found(state, who),
            None => unreachable.push(who),
        }
    }
    match forgotten_ms {
        Some(retention_ms) => Verdict::Forgotten { retention_ms },
        None if !unreachable.is_empty() => Verdict::Unreachable(unreachable),
        None => Verdict::NeverArrived,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WriteAnswer;

    const NEVER: Option<CallState> = Some(CallState::NotCarriedOut {
        reason: NotCarriedOutReason::NeverArrived,
    });

    #[test]
    fn not_carried_out_only_once_everyone_fenced_it() {
        assert_eq!(combine([("a", NEVER), ("b", NEVER)]), Verdict::NeverArrived);
        assert_eq!(
            combine([("a", NEVER), ("b", None)]),
            Verdict::Unreachable(vec!["b"])
        );
        let done = CallState::Answered(WriteAnswer::Done { revision: 3 });
        assert_eq!(
            combine([("a", None), ("b", Some(done.clone())), ("c", NEVER)]),
            Verdict::Found(done, "b")
        );
        assert_eq!(
            combine([
                ("a", Some(CallState::Forgotten { retention_ms: 9 })),
                ("b", None)
            ]),
            Verdict::Forgotten { retention_ms: 9 }
        );
        assert_eq!(combine(Vec::<(&str, _)>::new()), Verdict::NeverArrived);
    }

    const MIN: u64 = 60_000;

    /// Peer 1 was untrusted when the sent mark stood at minute 106 (ids up to then may have
    /// gone to it); the record began at minute 10 (an upgraded database).
    fn memory() -> Memory<u8> {
        Memory {
            me: 0,
            trusted: vec![2, 3],
            former: vec![(1, 106 * MIN)],
            every_claimed: vec![1, 2],
            claims_since_ms: 10 * MIN,
        }
    }

    fn named(claimed: &[u8], now: &[u8], held_by: Option<u8>) -> NamedVault<u8> {
        NamedVault {
            claimed: claimed.to_vec(),
            claimants_now: now.to_vec(),
            held_by,
        }
    }

    #[test]
    fn a_peer_untrusted_after_the_id_may_have_left_can_never_be_left_out() {
        let w = witnesses(99 * MIN, &memory(), None);
        assert_eq!(w.ask, vec![0, 2, 3]);
        assert_eq!(w.cannot_ask, vec![(1, CannotAsk::NoLongerTrusted)]);
        assert!(!w.before_record);
        // Up to the mark recorded at the untrust, whatever the clock says now.
        let w = witnesses(106 * MIN, &memory(), None);
        assert_eq!(w.cannot_ask, vec![(1, CannotAsk::NoLongerTrusted)]);
        // One stamped past it cannot have gone to 1: left out.
        let w = witnesses(106 * MIN + 1, &memory(), None);
        assert_eq!((w.ask, w.cannot_ask), (vec![0, 2, 3], vec![]));
        // The same holds when the vault is named and its writes went to 1.
        let w = witnesses(99 * MIN, &memory(), Some(&named(&[1], &[2], None)));
        assert_eq!(w.ask, vec![0, 2]);
        assert_eq!(w.cannot_ask, vec![(1, CannotAsk::NoLongerTrusted)]);
    }

    #[test]
    fn a_named_vault_narrows_to_every_owner_its_name_ever_went_to() {
        // Writes of the name went to 2; 3 claims it now too (a collision): both are asked.
        let w = witnesses(50 * MIN, &memory(), Some(&named(&[2], &[2, 3], None)));
        assert_eq!((w.ask, w.cannot_ask), (vec![0, 2, 3], vec![]));
        // A name claimed only by a peer no longer trusted and never recorded: not askable.
        let mut m = memory();
        m.former.clear();
        m.every_claimed = vec![7];
        let w = witnesses(50 * MIN, &m, Some(&named(&[7], &[], None)));
        assert_eq!(w.cannot_ask, vec![(7, CannotAsk::NotTrusted)]);
        // A name this gateway knows nothing of: everyone.
        let w = witnesses(120 * MIN, &memory(), Some(&named(&[], &[], None)));
        assert_eq!(w.ask, vec![0, 2, 3]);
    }

    #[test]
    fn an_id_an_earlier_release_may_have_sent_is_asked_of_everyone() {
        // Stamped before the record began: everyone is asked whatever the name says.
        let w = witnesses(9 * MIN, &memory(), Some(&named(&[2], &[2], None)));
        assert_eq!(w.ask, vec![0, 2, 3]);
        assert!(w.before_record);
        // A database this release made has no such ids.
        let mut m = memory();
        m.claims_since_ms = 0;
        assert!(!witnesses(1, &m, None).before_record);
    }

    #[test]
    fn a_state_from_a_newer_owner_is_never_taken_for_a_fence() {
        let newer = CallState::Unrecognized { number: 4 };
        assert_eq!(
            combine([("a", NEVER), ("b", Some(newer.clone()))]),
            Verdict::Found(newer, "b")
        );
    }
}
