//! Settling a request id this gateway has no record of (SPEC 5): every gateway that could have
//! received it is asked, and their answers are combined here. An owner that never saw the id
//! fences it (a tombstone), so "not carried out" is the verdict only once **every** one of them
//! has said so; one that could not be asked leaves the outcome unknown.

use crate::outcome::NotCarriedOutReason;
use crate::wire::CallState;

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

    #[test]
    fn a_state_from_a_newer_owner_is_never_taken_for_a_fence() {
        let newer = CallState::Unrecognized { number: 4 };
        assert_eq!(
            combine([("a", NEVER), ("b", Some(newer.clone()))]),
            Verdict::Found(newer, "b")
        );
    }
}
