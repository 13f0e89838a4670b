//! A history of what apps asked and were told, and a checker of Ferry's promises against it and
//! against what the owners' databases hold at the end. Used by the simulation (and by any test
//! that records a history of real processes).
//!
//! What is checked:
//! - a write ran at most once, and only if an app sent it: every `done` in an owner's journal
//!   is a request id of the history;
//! - a write told `done` (at once or after settling) is in its owner's journal as that `done`,
//!   with that revision;
//! - a write told "nothing was sent", `not_carried_out` or a refusal never ran;
//! - a `not_carried_out` answer (`never_arrived` above all), told or settled, is only ever
//!   given for an id that never ran anywhere: on no owner, whatever vault or name it ran
//!   under (two vaults of one name, an owner since untrusted);
//! - every `outcome_unknown`, and every write its app never heard about (the app's machine
//!   crashed), settled;
//! - each vault's revision is the number of writes that ran on it (so none ran twice);
//! - an app never read a revision older than one it had already seen (its own writes included),
//!   while its gateway's memory lasted (one incarnation);
//! - after healing, every replica holds what its owner holds;
//! - where the history knows each write's effect (the value put, or a deletion): per key, the
//!   writes that ran, in revision order, explain what the owner holds at the end, and every
//!   compare-and-swap that ran expected the revision that was live just before it (it never
//!   succeeded against a revision it did not see);
//! - where the history gives a freshness bound: a read not marked stale is not older than a
//!   write to its key that was acknowledged longer than that bound before the read was sent.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// How a write ended, as its app was told (or, after settling, as the owner said).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteFate {
    /// Carried out at this revision.
    Done(u64),
    /// Refused by the owner (`conflict`, `not_found`, `busy`...): did not run.
    Refused(String),
    /// "Nothing was sent": never left the caller.
    NothingSent(String),
    /// Left, and the owner confirmed it never ran.
    NotCarriedOut(String),
    /// Left, and nobody knows yet.
    Unknown,
}

impl WriteFate {
    /// Whether the app was told it did not (and will not) run.
    pub fn did_not_run(&self) -> bool {
        matches!(
            self,
            Self::Refused(_) | Self::NothingSent(_) | Self::NotCarriedOut(_)
        )
    }
}

/// One write an app sent.
#[derive(Debug, Clone)]
pub struct Write {
    pub request_id: String,
    /// The host (gateway) it went through, and the node id of that gateway (the caller the
    /// owner's journal knows it by).
    pub host: String,
    pub caller: String,
    /// App name and its incarnation on that host (a restart of the host is a new one).
    pub app: String,
    pub incarnation: u32,
    pub vault: String,
    pub key: String,
    pub what: String,
    /// What the app was told; `None`: it never heard (its host crashed first).
    pub told: Option<WriteFate>,
    /// What settling said afterwards, for an unknown or unheard outcome.
    pub settled: Option<WriteFate>,
    /// When it was sent (simulated milliseconds).
    pub at_ms: u64,
    /// When the app was told, if it went on with other calls before that (an app with calls in
    /// parallel); `None`: it waited, so it learned the answer before its next call.
    pub told_ms: Option<u64>,
    /// When the app had the answer (wall-clock or simulated ms), for the freshness rule;
    /// `None`: not recorded (then `told_ms`, if any).
    pub answered_ms: Option<u64>,
    /// What it does if it runs; `None`: not recorded (the per-key checks skip its key).
    pub effect: Option<Effect>,
    /// A compare-and-swap's expected live revision (0: the key must not be live).
    pub if_match: Option<u64>,
}

/// What a write does to its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    Put(Vec<u8>),
    Delete,
}

impl Write {
    /// How it ended, all told.
    pub fn fate(&self) -> Option<&WriteFate> {
        match (&self.told, &self.settled) {
            (_, Some(settled)) => Some(settled),
            (Some(WriteFate::Unknown), None) | (None, None) => None,
            (Some(told), None) => Some(told),
        }
    }
}

/// One read an app made.
#[derive(Debug, Clone)]
pub struct Read {
    pub host: String,
    pub app: String,
    pub incarnation: u32,
    pub vault: String,
    pub key: String,
    /// The revision answered, where from, and whether marked stale; `None`: unavailable, or
    /// the record was missing (`not_found_at`).
    pub answer: Option<(u64, String, bool)>,
    /// "Not found", as of this revision of the vault: it says the app saw nothing of the key
    /// older than that (a record it saw before at a higher revision must not vanish).
    pub not_found_at: Option<u64>,
    pub at_ms: u64,
}

/// Everything the apps did, in order.
#[derive(Debug, Default, Clone)]
pub struct History {
    pub writes: Vec<Write>,
    pub reads: Vec<Read>,
    /// How much older than the newest acknowledged write a read not marked stale may be, in
    /// milliseconds; `None`: not checked.
    pub read_freshness_ms: Option<u64>,
}

/// An owner's journal entry, as read from its database at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalState {
    Done(u64),
    Refused,
    NotCarriedOut,
    Running,
}

/// A vault's records: key to (revision, value; `None` for a deletion).
pub type Records = BTreeMap<String, (u64, Option<Vec<u8>>)>;

/// Who saw a record: host, app, incarnation, vault, key.
type Viewer = (String, String, u32, String, String);

/// What one vault's owner holds at the end.
#[derive(Debug, Clone, Default)]
pub struct OwnerState {
    /// (caller node id, request id) to the journal's state.
    pub journal: HashMap<(String, String), JournalState>,
    /// The vault's revision.
    pub revision: u64,
    pub records: Records,
}

/// What a replica holds at the end.
#[derive(Debug, Clone, Default)]
pub struct ReplicaState {
    pub host: String,
    pub cursor: u64,
    pub records: Records,
}

/// A broken promise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks `history` against what the owners (by vault) and replicas (by vault) hold.
pub fn check(
    history: &History,
    owners: &BTreeMap<String, OwnerState>,
    replicas: &BTreeMap<String, Vec<ReplicaState>>,
) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut flag = |text: String| violations.push(Violation(text));
    let mut sent: HashMap<(String, String), &Write> = HashMap::new();
    for write in &history.writes {
        sent.insert((write.caller.clone(), write.request_id.clone()), write);
    }
    for (vault, owner) in owners {
        let mut done = 0u64;
        for ((caller, id), state) in &owner.journal {
            let ran = matches!(state, JournalState::Done(_));
            done += u64::from(ran);
            // Every id an owner holds came from an app (a settle query's tombstone names an id
            // an app sent too): a row for any other id is a send nobody asked for, whether it
            // ran, was refused or was fenced.
            match sent.get(&(caller.clone(), id.clone())) {
                None => flag(format!(
                    "{vault}: the owner holds request {id} from {caller} ({state:?}), but no app sent it (a resend under a new id?)"
                )),
                Some(write) if ran && write.vault != *vault => flag(format!(
                    "{vault}: request {id} ran here but was sent to {}",
                    write.vault
                )),
                Some(_) => {}
            }
        }
        if owner.revision != done {
            flag(format!(
                "{vault}: the vault is at revision {} but {done} writes ran: one ran twice or without a journal entry",
                owner.revision
            ));
        }
    }
    // Where each id ran, on any owner: a fence is only true of an id that ran nowhere.
    let mut ran_anywhere: HashMap<(&str, &str), (&str, u64)> = HashMap::new();
    for (vault, owner) in owners {
        for ((caller, id), state) in &owner.journal {
            if let JournalState::Done(revision) = state {
                ran_anywhere.insert((caller.as_str(), id.as_str()), (vault.as_str(), *revision));
            }
        }
    }
    for write in &history.writes {
        let id = &write.request_id;
        if let Some((elsewhere, revision)) = ran_anywhere.get(&(write.caller.as_str(), id.as_str()))
        {
            let fates = [("told", &write.told), ("settled", &write.settled)];
            for (how, fate) in fates {
                if let Some(fate @ WriteFate::NotCarriedOut(_)) = fate {
                    if *elsewhere != write.vault {
                        flag(format!(
                            "{id} ({} via {}): {how} {fate:?}, but it ran on the owner of {elsewhere} at revision {revision}",
                            write.vault, write.host
                        ));
                    }
                }
            }
        }
        let journal = owners
            .get(&write.vault)
            .and_then(|owner| owner.journal.get(&(write.caller.clone(), id.clone())));
        let ran = match journal {
            Some(JournalState::Done(revision)) => Some(*revision),
            _ => None,
        };
        if write.fate().is_none() {
            flag(format!(
                "{id} ({} via {}): its outcome was never settled (told {:?})",
                write.vault, write.host, write.told
            ));
        }
        // What the app was told and what settling said are each held to the owner's journal
        // (an app may hear after its write was settled: both must be true).
        let told = write.told.as_ref().map(|fate| ("told", fate));
        let settled = write.settled.as_ref().map(|fate| ("settled", fate));
        for (how, fate) in told.into_iter().chain(settled) {
            match fate {
                WriteFate::Done(revision) if ran != Some(*revision) => flag(format!(
                    "{id} ({} via {}): {how} done at revision {revision}, but the owner's journal says {journal:?}",
                    write.vault, write.host
                )),
                fate if fate.did_not_run() => {
                    if let Some(revision) = ran {
                        flag(format!(
                            "{id} ({} via {}): {how} {fate:?} (told {:?}), but it ran at revision {revision}",
                            write.vault, write.host, write.told
                        ));
                    }
                }
                WriteFate::Unknown if how == "settled" => {
                    flag(format!("{id}: settled to unknown"))
                }
                _ => {}
            }
        }
    }
    // Monotonic reads: per app incarnation and key, what it saw (its own writes included)
    // never goes back.
    let mut seen: HashMap<Viewer, (u64, u64)> = HashMap::new();
    let mut events: Vec<(u64, usize, bool)> = Vec::new();
    for (i, write) in history.writes.iter().enumerate() {
        if let Some(WriteFate::Done(_)) = &write.told {
            // The app has seen its write's revision once it was told, not when it sent it.
            events.push((write.told_ms.unwrap_or(write.at_ms), i, true));
        }
    }
    for (i, read) in history.reads.iter().enumerate() {
        if read.answer.is_some() || read.not_found_at.is_some() {
            events.push((read.at_ms, i, false));
        }
    }
    events.sort();
    for (at_ms, i, is_write) in events {
        let (who, revision, what) = if is_write {
            let write = &history.writes[i];
            let Some(WriteFate::Done(revision)) = &write.told else {
                continue;
            };
            (
                (
                    write.host.clone(),
                    write.app.clone(),
                    write.incarnation,
                    write.vault.clone(),
                    write.key.clone(),
                ),
                *revision,
                format!("its write {}", write.request_id),
            )
        } else {
            let read = &history.reads[i];
            let (revision, what) = match (&read.answer, read.not_found_at) {
                (Some((revision, source, stale)), _) => (
                    *revision,
                    format!(
                        "a read from {source}{}",
                        if *stale { " (stale)" } else { "" }
                    ),
                ),
                (None, Some(vault_revision)) => (
                    vault_revision,
                    format!("a \"not found\" as of vault revision {vault_revision}"),
                ),
                (None, None) => continue,
            };
            (
                (
                    read.host.clone(),
                    read.app.clone(),
                    read.incarnation,
                    read.vault.clone(),
                    read.key.clone(),
                ),
                revision,
                what,
            )
        };
        // A write the app did not wait for is told its revision late: an older revision than
        // one seen since is no read going back, only a floor for the reads that follow.
        let told_late = is_write && history.writes[i].told_ms.is_some();
        if let Some((before, before_ms)) = seen.get(&who).filter(|_| !told_late) {
            if revision < *before {
                flag(format!(
                    "{} on {} ({}/{}): {what} at {at_ms} ms gave revision {revision} after it had seen {before} at {before_ms} ms",
                    who.1, who.0, who.3, who.4
                ));
            }
        }
        let entry = seen.entry(who).or_insert((revision, at_ms));
        if revision >= entry.0 {
            *entry = (revision, at_ms);
        }
    }
    check_keys(history, owners, &mut flag);
    if let Some(bound) = history.read_freshness_ms {
        check_freshness(history, owners, bound, &mut flag);
    }
    for (vault, list) in replicas {
        let Some(owner) = owners.get(vault) else {
            continue;
        };
        for replica in list {
            if replica.cursor != owner.revision || replica.records != owner.records {
                flag(format!(
                    "{vault}: the replica on {} (cursor {}) does not hold what its owner holds (revision {}): {} records against {}",
                    replica.host,
                    replica.cursor,
                    owner.revision,
                    replica.records.len(),
                    owner.records.len()
                ));
            }
        }
    }
    violations
}

/// Per (vault, key): the writes that ran on it with their revisions, or `None` (see
/// [`runs_by_key`]).
type RunsByKey<'h> = BTreeMap<(String, String), Option<Vec<(u64, &'h Write)>>>;

/// The writes that ran on each (vault, key), by revision, when every write to that key has a
/// recorded effect: `None` for a key some write of unknown effect touched.
fn runs_by_key<'h>(history: &'h History, owners: &BTreeMap<String, OwnerState>) -> RunsByKey<'h> {
    let mut keys: RunsByKey = BTreeMap::new();
    for write in history.writes.iter().filter(|w| !w.key.is_empty()) {
        let entry = keys
            .entry((write.vault.clone(), write.key.clone()))
            .or_insert_with(|| Some(Vec::new()));
        if write.effect.is_none() {
            *entry = None;
            continue;
        }
        let ran = owners.get(&write.vault).and_then(|owner| {
            owner
                .journal
                .get(&(write.caller.clone(), write.request_id.clone()))
        });
        if let (Some(list), Some(JournalState::Done(revision))) = (entry.as_mut(), ran) {
            list.push((*revision, write));
        }
    }
    for list in keys.values_mut().flatten() {
        list.sort_by_key(|(revision, _)| *revision);
    }
    keys
}

/// Per key: the writes that ran explain the owner's record, and each compare-and-swap that ran
/// expected the revision live just before it.
fn check_keys(
    history: &History,
    owners: &BTreeMap<String, OwnerState>,
    flag: &mut impl FnMut(String),
) {
    for ((vault, key), runs) in runs_by_key(history, owners) {
        let (Some(runs), Some(owner)) = (runs, owners.get(&vault)) else {
            continue;
        };
        let mut live = 0u64;
        for (revision, write) in &runs {
            if let Some(expected) = write.if_match {
                if expected != live {
                    flag(format!(
                        "{} ({vault}/{key} via {}): a compare-and-swap expecting revision {expected} ran at revision {revision}, but revision {live} was live",
                        write.request_id, write.host
                    ));
                }
            }
            live = match write.effect {
                Some(Effect::Put(_)) => *revision,
                _ => 0,
            };
        }
        let expected = runs.last().map(|(revision, write)| {
            let value = match &write.effect {
                Some(Effect::Put(value)) => Some(value.clone()),
                _ => None,
            };
            (*revision, value)
        });
        let held = owner.records.get(&key).cloned();
        // A key nothing ran on may be absent or (never) a row.
        if held != expected {
            let last = runs.last().map(|(_, w)| w.request_id.as_str());
            flag(format!(
                "{vault}/{key}: the owner holds {:?} but the writes that ran end with {:?} (request {last:?})",
                held.map(|(r, v)| (r, v.map(|v| String::from_utf8_lossy(&v).into_owned()))),
                expected.map(|(r, v)| (r, v.map(|v| String::from_utf8_lossy(&v).into_owned())))
            ));
        }
    }
}

/// A read not marked stale is not older than a write to its key acknowledged more than `bound`
/// milliseconds before the read was sent.
fn check_freshness(
    history: &History,
    owners: &BTreeMap<String, OwnerState>,
    bound: u64,
    flag: &mut impl FnMut(String),
) {
    let runs = runs_by_key(history, owners);
    for read in &history.reads {
        let Some((revision, source, false)) = &read.answer else {
            continue;
        };
        let Some(Some(list)) = runs.get(&(read.vault.clone(), read.key.clone())) else {
            continue;
        };
        // Only writes whose answer time is known: the send time would shorten the bound.
        let newest_known = list
            .iter()
            .filter(|(_, w)| matches!(w.told, Some(WriteFate::Done(_))))
            .filter(|(_, w)| {
                w.answered_ms
                    .or(w.told_ms)
                    .is_some_and(|answered| answered + bound <= read.at_ms)
            })
            .map(|(r, w)| (*r, w))
            .next_back();
        if let Some((newest, write)) = newest_known {
            if *revision < newest {
                flag(format!(
                    "{} on {} ({}/{}): a read from {source} not marked stale, sent at {} ms, gave revision {revision}, but {} was acknowledged at revision {newest} at {} ms (more than {bound} ms before)",
                    read.app, read.host, read.vault, read.key, read.at_ms, write.request_id,
                    write.answered_ms.or(write.told_ms).unwrap_or(write.at_ms)
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(id: &str, told: Option<WriteFate>, settled: Option<WriteFate>) -> Write {
        Write {
            request_id: id.into(),
            host: "g1".into(),
            caller: "c".into(),
            app: "a".into(),
            incarnation: 0,
            vault: "v".into(),
            key: "k".into(),
            what: "put".into(),
            told,
            settled,
            at_ms: 0,
            told_ms: None,
            answered_ms: None,
            effect: None,
            if_match: None,
        }
    }

    fn owner(journal: &[(&str, JournalState)], revision: u64) -> BTreeMap<String, OwnerState> {
        let mut state = OwnerState {
            revision,
            ..OwnerState::default()
        };
        for (id, entry) in journal {
            state
                .journal
                .insert(("c".into(), id.to_string()), entry.clone());
        }
        BTreeMap::from([("v".to_string(), state)])
    }

    fn check_one(history: History, owners: BTreeMap<String, OwnerState>) -> Vec<Violation> {
        check(&history, &owners, &BTreeMap::new())
    }

    #[test]
    fn a_consistent_history_passes() {
        let history = History {
            writes: vec![
                write("1", Some(WriteFate::Done(1)), None),
                write("2", Some(WriteFate::Unknown), Some(WriteFate::Done(2))),
                write("3", Some(WriteFate::NothingSent("x".into())), None),
                write(
                    "4",
                    None,
                    Some(WriteFate::NotCarriedOut("never_arrived".into())),
                ),
            ],
            reads: vec![],
            read_freshness_ms: None,
        };
        let owners = owner(
            &[
                ("1", JournalState::Done(1)),
                ("2", JournalState::Done(2)),
                ("4", JournalState::NotCarriedOut),
            ],
            2,
        );
        assert_eq!(check_one(history, owners), vec![]);
    }

    #[test]
    fn a_fence_of_an_id_that_ran_under_another_owner_of_the_name_is_caught() {
        // Two vaults called `v`: the history's `v` and another machine's, keyed apart. The
        // id ran on the other one; settling said never_arrived (asking only the first).
        let mut owners = owner(&[("1", JournalState::NotCarriedOut)], 0);
        owners.insert(
            "v on the other owner".into(),
            OwnerState {
                journal: HashMap::from([(("c".into(), "1".into()), JournalState::Done(1))]),
                revision: 1,
                records: Records::new(),
            },
        );
        let v = check_one(
            History {
                writes: vec![write(
                    "1",
                    Some(WriteFate::Unknown),
                    Some(WriteFate::NotCarriedOut("never_arrived".into())),
                )],
                reads: vec![],
                read_freshness_ms: None,
            },
            owners,
        );
        assert!(
            v.iter().any(|v| v
                .0
                .contains("but it ran on the owner of v on the other owner")),
            "{v:?}"
        );
    }

    #[test]
    fn each_broken_promise_is_caught() {
        // A resend under a new id: a done the history never sent, and one revision too many.
        let v = check_one(
            History {
                writes: vec![write(
                    "1",
                    Some(WriteFate::Unknown),
                    Some(WriteFate::Done(1)),
                )],
                reads: vec![],
                read_freshness_ms: None,
            },
            owner(
                &[("1", JournalState::Done(1)), ("9", JournalState::Done(2))],
                2,
            ),
        );
        assert!(v.iter().any(|v| v.0.contains("no app sent it")), "{v:?}");
        // "Nothing was sent" for a write that ran.
        let v = check_one(
            History {
                writes: vec![write("1", Some(WriteFate::NothingSent("x".into())), None)],
                reads: vec![],
                read_freshness_ms: None,
            },
            owner(&[("1", JournalState::Done(1))], 1),
        );
        assert!(v.iter().any(|v| v.0.contains("but it ran")), "{v:?}");
        // An unknown outcome never settled; a done the owner does not have.
        let v = check_one(
            History {
                writes: vec![
                    write("1", Some(WriteFate::Unknown), None),
                    write("2", Some(WriteFate::Done(1)), None),
                ],
                reads: vec![],
                read_freshness_ms: None,
            },
            owner(&[], 0),
        );
        assert_eq!(v.len(), 2, "{v:?}");
        // A read older than the app's own write.
        let mut history = History {
            writes: vec![write("1", Some(WriteFate::Done(5)), None)],
            reads: vec![Read {
                host: "g1".into(),
                app: "a".into(),
                incarnation: 0,
                vault: "v".into(),
                key: "k".into(),
                answer: Some((3, "replica:g2".into(), true)),
                not_found_at: None,
                at_ms: 10,
            }],
            read_freshness_ms: None,
        };
        history.writes[0].at_ms = 5;
        let v = check_one(history.clone(), owner(&[("1", JournalState::Done(5))], 5));
        assert!(
            v.iter().any(|v| v.0.contains("after it had seen 5")),
            "{v:?}"
        );
        // ... unless the app read before it was told of its write (it did not wait for it).
        let mut not_yet_told = history.clone();
        not_yet_told.writes[0].told_ms = Some(11);
        let v = check_one(not_yet_told, owner(&[("1", JournalState::Done(5))], 5));
        assert!(
            !v.iter().any(|v| v.0.contains("after it had seen")),
            "{v:?}"
        );
        // A record the app wrote at 5 that a replica, at revision 4, says is not there.
        history.reads[0].answer = None;
        history.reads[0].not_found_at = Some(4);
        let v = check_one(history.clone(), owner(&[("1", JournalState::Done(5))], 5));
        assert!(
            v.iter()
                .any(|v| v.0.contains("not found") && v.0.contains("after it had seen 5")),
            "{v:?}"
        );
        // ... while one at revision 6 (deleted since) is fine.
        history.reads[0].not_found_at = Some(6);
        let v = check_one(history, owner(&[("1", JournalState::Done(5))], 6));
        assert!(!v.iter().any(|v| v.0.contains("not found")), "{v:?}");
        // The app told "nothing was sent" after settling already said done: both are held to
        // the journal.
        let v = check_one(
            History {
                writes: vec![write(
                    "1",
                    Some(WriteFate::NothingSent("x".into())),
                    Some(WriteFate::Done(1)),
                )],
                reads: vec![],
                read_freshness_ms: None,
            },
            owner(&[("1", JournalState::Done(1))], 1),
        );
        assert!(v.iter().any(|v| v.0.contains("told NothingSent")), "{v:?}");
        // A request the owner holds that no app sent, even one that was refused.
        let v = check_one(
            History::default(),
            owner(&[("9", JournalState::Refused)], 0),
        );
        assert!(v.iter().any(|v| v.0.contains("no app sent it")), "{v:?}");
    }

    fn put(id: &str, key: &str, if_match: Option<u64>) -> Write {
        let mut w = write(id, Some(WriteFate::Done(0)), None);
        w.key = key.into();
        w.effect = Some(Effect::Put(id.as_bytes().to_vec()));
        w.if_match = if_match;
        w
    }

    fn held(records: &[(&str, u64, Option<&str>)]) -> Records {
        records
            .iter()
            .map(|(k, r, v)| (k.to_string(), (*r, v.map(|v| v.as_bytes().to_vec()))))
            .collect()
    }

    #[test]
    fn per_key_checks_catch_a_blind_swap_and_a_record_no_write_explains() {
        // Two puts of k, then a compare-and-swap expecting 2, then a delete: all as it should.
        let mut writes = vec![
            put("1", "k", None),
            put("2", "k", Some(1)),
            put("3", "k", Some(2)),
        ];
        let mut delete = put("4", "k", Some(3));
        delete.effect = Some(Effect::Delete);
        writes.push(delete);
        for (i, w) in writes.iter_mut().enumerate() {
            w.told = Some(WriteFate::Done(i as u64 + 1));
        }
        let journal: Vec<(String, JournalState)> = (1..=4)
            .map(|i| (i.to_string(), JournalState::Done(i)))
            .collect();
        let journal: Vec<(&str, JournalState)> = journal
            .iter()
            .map(|(id, s)| (id.as_str(), s.clone()))
            .collect();
        let mut owners = owner(&journal, 4);
        owners.get_mut("v").unwrap().records = held(&[("k", 4, None)]);
        let history = History {
            writes: writes.clone(),
            ..History::default()
        };
        assert_eq!(check_one(history, owners.clone()), vec![]);
        // The swap that ran at 3 had expected 1, which was no longer live.
        let mut blind = writes.clone();
        blind[2].if_match = Some(1);
        let v = check_one(
            History {
                writes: blind,
                ..History::default()
            },
            owners.clone(),
        );
        assert!(
            v.iter().any(|v| v
                .0
                .contains("expecting revision 1 ran at revision 3, but revision 2 was live")),
            "{v:?}"
        );
        // The owner holds the put of 3 where the delete at 4 ran last.
        let mut wrong = owners.clone();
        wrong.get_mut("v").unwrap().records = held(&[("k", 3, Some("3"))]);
        let v = check_one(
            History {
                writes: writes.clone(),
                ..History::default()
            },
            wrong,
        );
        assert!(
            v.iter().any(|v| v.0.contains("v/k: the owner holds")),
            "{v:?}"
        );
        // A write of unknown effect on the key: its key is not checked.
        let mut unknown = writes;
        unknown[0].effect = None;
        let mut wrong = owners;
        wrong.get_mut("v").unwrap().records = held(&[("k", 3, Some("3"))]);
        let v = check_one(
            History {
                writes: unknown,
                ..History::default()
            },
            wrong,
        );
        assert_eq!(v, vec![]);
    }

    #[test]
    fn a_fresh_read_older_than_an_acknowledged_write_is_caught() {
        let mut w1 = put("1", "k", None);
        w1.told = Some(WriteFate::Done(1));
        w1.told_ms = Some(100);
        let mut w2 = put("2", "k", None);
        w2.told = Some(WriteFate::Done(2));
        w2.told_ms = Some(1_000);
        w2.host = "g2".into();
        let mut owners = owner(
            &[("1", JournalState::Done(1)), ("2", JournalState::Done(2))],
            2,
        );
        owners.get_mut("v").unwrap().records = held(&[("k", 2, Some("2"))]);
        let read = |at_ms: u64, stale: bool| Read {
            host: "g1".into(),
            app: "b".into(),
            incarnation: 0,
            vault: "v".into(),
            key: "k".into(),
            answer: Some((1, "replica:g3".into(), stale)),
            not_found_at: None,
            at_ms,
        };
        let history = |reads: Vec<Read>| History {
            writes: vec![w1.clone(), w2.clone()],
            reads,
            read_freshness_ms: Some(2_000),
        };
        // Within the bound, or marked stale: fine.
        assert_eq!(
            check_one(history(vec![read(2_500, false)]), owners.clone()),
            vec![]
        );
        assert_eq!(
            check_one(history(vec![read(9_000, true)]), owners.clone()),
            vec![]
        );
        // Past it and not marked stale: caught.
        let v = check_one(history(vec![read(3_001, false)]), owners);
        assert!(
            v.iter()
                .any(|v| v.0.contains("not marked stale") && v.0.contains("revision 2")),
            "{v:?}"
        );
    }
}
