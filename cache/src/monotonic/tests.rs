use std::collections::HashMap;

use proptest::prelude::*;
use proptest::sample::Index;

use super::*;

#[test]
fn first_answer_is_fresh_and_remembered() {
    let mut reads = MonotonicReads::default();
    assert_eq!(reads.admit("app", "notes", "todo", 5), Admission::Fresh);
    assert_eq!(reads.lowest_admissible("app", "notes", "todo"), 5);
    assert_eq!(reads.len(), 1);
}

#[test]
fn older_answer_is_refused_newer_and_equal_are_fresh() {
    let mut reads = MonotonicReads::default();
    reads.admit("app", "notes", "todo", 5);
    assert_eq!(
        reads.admit("app", "notes", "todo", 4),
        Admission::Older { seen: 5 }
    );
    assert_eq!(reads.admit("app", "notes", "todo", 5), Admission::Fresh);
    assert_eq!(reads.admit("app", "notes", "todo", 7), Admission::Fresh);
    assert_eq!(
        reads.admit("app", "notes", "todo", 6),
        Admission::Older { seen: 7 }
    );
}

#[test]
fn a_refused_answer_is_not_remembered() {
    let mut reads = MonotonicReads::default();
    reads.admit("app", "notes", "todo", 5);
    reads.admit("app", "notes", "todo", 4);
    assert_eq!(reads.lowest_admissible("app", "notes", "todo"), 5);
}

#[test]
fn apps_vaults_and_keys_are_separate() {
    let mut reads = MonotonicReads::default();
    reads.admit("app", "notes", "todo", 5);
    assert_eq!(
        reads.admit("other-app", "notes", "todo", 1),
        Admission::Fresh
    );
    assert_eq!(reads.admit("app", "photos", "todo", 1), Admission::Fresh);
    assert_eq!(reads.admit("app", "notes", "done", 1), Admission::Fresh);
}

#[test]
fn an_evicted_record_is_held_to_the_app_floor() {
    let mut reads = MonotonicReads::new(1, 10);
    reads.admit("app", "notes", "a", 8);
    // Evicts the mark of "a" into the floor of (app, notes).
    reads.admit("app", "notes", "b", 3);
    assert_eq!(reads.len(), 1);

    assert_eq!(
        reads.admit("app", "notes", "a", 7),
        Admission::Older { seen: 8 }
    );
    assert_eq!(reads.lowest_admissible("app", "notes", "a"), 8);
    // The floor is per app and vault.
    assert_eq!(reads.admit("other-app", "notes", "a", 7), Admission::Fresh);
    assert_eq!(reads.admit("app", "photos", "a", 7), Admission::Fresh);
}

#[test]
fn the_floor_is_conservative_for_unchanged_records_until_the_owner_answers() {
    let mut reads = MonotonicReads::new(1, 10);
    reads.admit("app", "notes", "busy", 100);
    reads.admit("app", "notes", "quiet", 3);
    // "busy" is evicted when "quiet" is pushed; "quiet" itself is evicted here.
    reads.admit("app", "notes", "busy", 100);

    // The app never saw "quiet" above 3, but the floor cannot tell.
    assert_eq!(
        reads.admit("app", "notes", "quiet", 3),
        Admission::Older { seen: 100 }
    );
    // The owner's answer is the newest there is: admitted, and remembered exactly.
    assert_eq!(
        reads.admit_from_owner("app", "notes", "quiet", 3),
        Admission::Fresh
    );
    assert_eq!(reads.admit("app", "notes", "quiet", 3), Admission::Fresh);
}

#[test]
fn the_owner_is_still_held_to_an_exact_mark() {
    let mut reads = MonotonicReads::default();
    reads.admit("app", "notes", "todo", 6);
    // An owner answer that raced with a newer one must not take the app back.
    assert_eq!(
        reads.admit_from_owner("app", "notes", "todo", 5),
        Admission::Older { seen: 6 }
    );
}

#[test]
fn evicted_floors_fold_into_the_vault_floor() {
    let mut reads = MonotonicReads::new(0, 1);
    // With no room for marks every admitted revision goes straight into a floor.
    assert_eq!(reads.admit("app-1", "notes", "a", 9), Admission::Fresh);
    assert!(reads.is_empty());
    // The second app's floor pushes the first app's out, into the vault floor.
    assert_eq!(reads.admit("app-2", "notes", "a", 4), Admission::Fresh);

    // The first app is still held to what it may have seen...
    assert_eq!(
        reads.admit("app-1", "notes", "a", 8),
        Admission::Older { seen: 9 }
    );
    // ...and the vault floor now binds every app: stricter, still sound.
    assert_eq!(
        reads.admit("app-2", "notes", "b", 5),
        Admission::Older { seen: 9 }
    );
    assert_eq!(reads.lowest_admissible("app-3", "notes", "c"), 9);
    assert_eq!(reads.lowest_admissible("app-3", "photos", "c"), 0);
}

const APPS: [&str; 3] = ["app-1", "app-2", "app-3"];
const VAULTS: [&str; 2] = ["notes", "photos"];
const KEYS: [&str; 4] = ["a", "b", "c", "d"];

proptest! {
    /// Any revisions at all, from sources that may lag: whatever is admitted for a record never
    /// goes down, and an answer at least as new as anything admitted in its vault is never
    /// refused (so the floors cannot lock a record out for good).
    #[test]
    fn admitted_revisions_never_decrease(
        max_marks in 0..4usize,
        max_app_floors in 0..3usize,
        reads in proptest::collection::vec(
            (0..APPS.len(), 0..VAULTS.len(), 0..KEYS.len(), 0..40u64),
            1..300,
        ),
    ) {
        let mut monotonic = MonotonicReads::new(max_marks, max_app_floors);
        let mut last_given = HashMap::new();
        let mut newest_in_vault: HashMap<usize, u64> = HashMap::new();
        for (app, vault, key, revision) in reads {
            let admission = monotonic.admit(APPS[app], VAULTS[vault], KEYS[key], revision);
            let newest = newest_in_vault.get(&vault).copied().unwrap_or(0);
            if revision >= newest {
                prop_assert_eq!(admission, Admission::Fresh);
            }
            match admission {
                Admission::Fresh => {
                    if let Some(&previous) = last_given.get(&(app, vault, key)) {
                        prop_assert!(revision >= previous, "gave {} after {}", revision, previous);
                    }
                    last_given.insert((app, vault, key), revision);
                    newest_in_vault.insert(vault, newest.max(revision));
                }
                Admission::Older { seen } => prop_assert!(seen > revision),
            }
        }
    }

    /// A modelled vault: the owner's answers are current, other sources answer with any past
    /// revision of the record. Admitted revisions never go down, and the owner is never refused
    /// however much has been forgotten.
    #[test]
    fn owner_answers_always_pass_and_nothing_goes_back(
        max_marks in 0..4usize,
        max_app_floors in 0..3usize,
        steps in proptest::collection::vec(
            (0..3u8, 0..APPS.len(), 0..VAULTS.len(), 0..KEYS.len(), any::<Index>()),
            1..300,
        ),
    ) {
        let mut monotonic = MonotonicReads::new(max_marks, max_app_floors);
        let mut vault_revision = [0u64; VAULTS.len()];
        // Every revision each record has had, oldest first; 0 is "never written".
        let mut history: HashMap<(usize, usize), Vec<u64>> = HashMap::new();
        let mut last_given = HashMap::new();
        for (kind, app, vault, key, pick) in steps {
            let record_history = history.entry((vault, key)).or_insert_with(|| vec![0]);
            let revision = match kind {
                0 => {
                    vault_revision[vault] += 1;
                    record_history.push(vault_revision[vault]);
                    continue;
                }
                1 => {
                    let current = record_history.last().copied().unwrap_or(0);
                    let admission = monotonic.admit_from_owner(APPS[app], VAULTS[vault], KEYS[key], current);
                    prop_assert_eq!(admission, Admission::Fresh);
                    current
                }
                _ => {
                    let past = record_history[pick.index(record_history.len())];
                    match monotonic.admit(APPS[app], VAULTS[vault], KEYS[key], past) {
                        Admission::Fresh => past,
                        Admission::Older { .. } => continue,
                    }
                }
            };
            if let Some(&previous) = last_given.get(&(app, vault, key)) {
                prop_assert!(revision >= previous, "gave {} after {}", revision, previous);
            }
            last_given.insert((app, vault, key), revision);
        }
    }
}
