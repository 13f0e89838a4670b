use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::rng::Rng;

type Box_ = Outbox<&'static str, &'static str>;

/// Ids that sort in the order they are made, as UUIDv7s stamped one after another do.
fn ids() -> impl FnMut() -> RequestId {
    let mut n = 0u128;
    move || {
        n += 1;
        RequestId::from_bytes(n.to_be_bytes())
    }
}

fn up(_: &&str) -> bool {
    true
}

fn down(_: &&str) -> bool {
    false
}

#[test]
fn a_lane_sends_its_head_only_and_the_next_once_the_head_is_final() {
    let mut outbox = Box_::new(OutboxRules::default());
    let mut id = ids();
    let (first, second, other) = (id(), id(), id());
    outbox.queue("notes", "v", first, 10, None, 0).unwrap();
    outbox.queue("notes", "v", second, 10, None, 1).unwrap();
    outbox.queue("mail", "v", other, 10, None, 2).unwrap();
    let mut wires = ids();
    let starts = outbox.start(3, up, &mut wires);
    let started: BTreeSet<RequestId> = starts.iter().map(|s| s.id).collect();
    assert_eq!(started, BTreeSet::from([first, other]), "one head per lane");
    assert!(
        outbox.start(4, up, &mut wires).is_empty(),
        "heads still sending"
    );
    outbox.ended(&first, Ended::Final(Fate::Done { revision: 7 }), 5);
    let next = outbox.start(6, up, &mut wires);
    assert_eq!(next.iter().map(|s| s.id).collect::<Vec<_>>(), vec![second]);
    assert_eq!(
        outbox.entry(&first).map(|e| e.state.clone()),
        Some(State::Final(Fate::Done { revision: 7 }))
    );
}

#[test]
fn nothing_starts_without_a_route_or_before_the_owner_said_to_come_back() {
    let mut outbox = Box_::new(OutboxRules::default());
    let mut id = ids();
    let write = id();
    outbox.queue("notes", "v", write, 10, None, 0).unwrap();
    let mut wires = ids();
    assert!(outbox.start(1, down, &mut wires).is_empty());
    let start = outbox.start(2, up, &mut wires);
    let wire = start[0].wire;
    // Busy: nothing ran. Back in its place with its wire id; the lane waits.
    outbox.ended(
        &write,
        Ended::NotRun {
            retry_after_ms: 100,
        },
        3,
    );
    assert_eq!(
        outbox.entry(&write).map(|e| e.state.clone()),
        Some(State::Queued)
    );
    assert!(outbox.start(50, up, &mut wires).is_empty(), "told to wait");
    let again = outbox.start(103, up, &mut wires);
    assert_eq!(again[0].wire, wire, "the same wire id, never a second");
}

#[test]
fn a_write_leaves_queued_once_whichever_of_sender_cancel_and_expiry_comes_first() {
    let mut id = ids();
    let mut wires = ids();
    // Cancelled first: never started.
    let mut outbox = Box_::new(OutboxRules::default());
    let write = id();
    outbox.queue("notes", "v", write, 10, None, 0).unwrap();
    assert_eq!(outbox.cancel(&write), Cancel::Cancelled);
    assert!(outbox.start(1, up, &mut wires).is_empty());
    assert_eq!(outbox.waiting(), (0, 0), "its room given back");
    // Started first: too late to cancel, and it does not expire while sending.
    let write = id();
    outbox.queue("notes", "v", write, 10, Some(100), 0).unwrap();
    assert_eq!(outbox.start(1, up, &mut wires).len(), 1);
    assert_eq!(outbox.cancel(&write), Cancel::TooLate(State::Sending));
    assert!(outbox.expire(1_000).is_empty());
    // Refused busy (nothing ran): queued again, so it may be cancelled or expire after all.
    outbox.ended(&write, Ended::NotRun { retry_after_ms: 10 }, 2);
    assert_eq!(outbox.expire(1_000), vec![write]);
    assert_eq!(
        outbox.cancel(&write),
        Cancel::TooLate(State::Final(Fate::Expired))
    );
    assert!(outbox.start(2_000, up, &mut wires).is_empty());
}

#[test]
fn the_same_id_queued_again_is_the_same_write_and_another_apps_is_refused() {
    let mut outbox = Box_::new(OutboxRules::default());
    let write = ids()();
    assert_eq!(
        outbox.queue("notes", "v", write, 10, None, 0),
        Ok(Queued::New)
    );
    assert_eq!(
        outbox.queue("notes", "v", write, 10, None, 1),
        Ok(Queued::Already(State::Queued))
    );
    assert_eq!(
        outbox.queue("mail", "v", write, 10, None, 1),
        Err(QueueRefused::IdInUse)
    );
    assert_eq!(outbox.waiting(), (1, 10));
}

#[test]
fn past_a_bound_nothing_is_queued() {
    let rules = OutboxRules {
        per_app_writes: 2,
        per_app_bytes: 100,
        total_writes: 3,
        total_bytes: 1_000,
        ..OutboxRules::default()
    };
    let mut outbox = Box_::new(rules);
    let mut id = ids();
    outbox.queue("notes", "v", id(), 10, None, 0).unwrap();
    outbox.queue("notes", "w", id(), 10, None, 0).unwrap();
    assert_eq!(
        outbox.queue("notes", "v", id(), 10, None, 0),
        Err(QueueRefused::Full(Bound::PerAppWrites))
    );
    assert_eq!(
        outbox.queue("mail", "v", id(), 101, None, 0),
        Err(QueueRefused::Full(Bound::PerAppBytes))
    );
    outbox.queue("mail", "v", id(), 10, None, 0).unwrap();
    assert_eq!(
        outbox.queue("tasks", "v", id(), 10, None, 0),
        Err(QueueRefused::Full(Bound::TotalWrites))
    );
    assert_eq!(
        outbox.queue("tasks", "v", id(), 10, Some(0), 0),
        Err(QueueRefused::BadMaxAge)
    );
    assert_eq!(outbox.waiting(), (3, 30));
}

#[test]
fn after_a_restart_a_write_that_may_have_left_is_settled_never_started_again() {
    let mut id = ids();
    let (sending, queued) = (id(), id());
    let wire = id();
    let entry = |id, wire, state| Entry {
        app: "notes",
        vault: "v",
        id,
        wire,
        state,
        queued_at_ms: 0,
        expires_at_ms: DEFAULT_MAX_AGE_MS,
        bytes: 10,
    };
    let mut outbox = Box_::restore(
        OutboxRules::default(),
        [
            entry(sending, Some(wire), State::Sending),
            entry(queued, None, State::Queued),
        ],
        0,
    );
    assert_eq!(outbox.to_settle(), vec![(sending, wire)]);
    let mut wires = ids();
    assert!(
        outbox.start(1, up, &mut wires).is_empty(),
        "its head may have left"
    );
    outbox.ended(&sending, Ended::Final(Fate::NotCarriedOut), 2);
    let next = outbox.start(3, up, &mut wires);
    assert_eq!(next.iter().map(|s| s.id).collect::<Vec<_>>(), vec![queued]);
    assert_eq!(outbox.waiting(), (1, 10));
}

/// A UUIDv7-shaped id stamped at `unix_ms`.
fn stamped(unix_ms: u64, n: u8) -> RequestId {
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&unix_ms.to_be_bytes()[2..]);
    bytes[15] = n;
    RequestId::from_bytes(bytes)
}

#[test]
fn an_id_is_queued_once_ever_even_after_its_fate_is_forgotten() {
    let mut outbox = Box_::new(OutboxRules::default());
    let (old, same_ms, later) = (stamped(1_000, 1), stamped(1_000, 2), stamped(1_001, 3));
    outbox.queue("notes", "v", old, 10, None, 0).unwrap();
    assert_eq!(outbox.cancel(&old), Cancel::Cancelled);
    assert!(outbox.forget(&old));
    assert_eq!(
        outbox.queue("notes", "v", old, 10, None, 5),
        Err(QueueRefused::Forgotten),
        "a second row would get a second wire id"
    );
    assert_eq!(
        outbox.queue("notes", "v", same_ms, 10, None, 5),
        Err(QueueRefused::Forgotten)
    );
    assert_eq!(
        outbox.queue("notes", "v", later, 10, None, 5),
        Ok(Queued::New)
    );
    // The horizon survives a restart through the store.
    let kept = outbox.forgotten_up_to_ms();
    let mut restored = Box_::restore(OutboxRules::default(), Vec::new(), kept);
    assert_eq!(
        restored.queue("notes", "v", old, 10, None, 6),
        Err(QueueRefused::Forgotten)
    );
}

#[test]
fn a_write_whose_wire_id_would_be_stale_at_the_owner_expires_instead_of_being_sent() {
    let rules = OutboxRules {
        wire_id_lasts_ms: 1_000,
        ..OutboxRules::default()
    };
    let mut outbox = Box_::new(rules);
    let write = stamped(10, 1);
    outbox.queue("notes", "v", write, 10, None, 10).unwrap();
    let wire = stamped(20, 2);
    let start = outbox.start(20, up, || wire);
    assert_eq!(start[0].wire, wire);
    outbox.ended(
        &write,
        Ended::NotRun {
            retry_after_ms: 5_000,
        },
        30,
    );
    // Its wire id was minted at 20 and lasts 1 s: by 1,020 it may no longer be sent. The sender
    // leaves it for the expiry, whose fate the driver records.
    assert!(outbox.start(6_000, up, || stamped(6_000, 3)).is_empty());
    assert_eq!(
        outbox.entry(&write).map(|e| e.state.clone()),
        Some(State::Queued)
    );
    assert!(outbox.expire(1_019).is_empty());
    assert_eq!(outbox.expire(1_020), vec![write]);
    assert!(outbox.start(10_000, up, || stamped(10_000, 3)).is_empty());
}

/// Random traces of queues, starts, ends, cancels, expiries and restarts: every lane's
/// writes start in queue order, one at a time; no write is started under two wire ids or after
/// a final state; `cancelled` and `expired` writes never ran; the room held is what waits.
#[test]
fn random_traces_keep_the_outboxs_rules() {
    for seed in 0..300u64 {
        let mut rng = Rng::new(seed);
        let apps = ["notes", "mail"];
        let vaults = ["v", "w"];
        let mut id = ids();
        let mut wires = ids();
        let mut outbox = Box_::new(OutboxRules::default());
        let mut queued_order: BTreeMap<(&str, &str), Vec<RequestId>> = BTreeMap::new();
        let mut started_order: BTreeMap<(&str, &str), Vec<RequestId>> = BTreeMap::new();
        let mut wire_of: BTreeMap<RequestId, RequestId> = BTreeMap::new();
        let mut ran: BTreeSet<RequestId> = BTreeSet::new();
        let mut sending: Vec<RequestId> = Vec::new();
        for step in 0..200u64 {
            let now = step * 10;
            match rng.below(7) {
                0 | 1 => {
                    let (app, vault) = (apps[rng.index(2)], vaults[rng.index(2)]);
                    let write = id();
                    let age = 50 + rng.below(2_000);
                    let bytes = 1 + rng.below(1_000);
                    outbox
                        .queue(app, vault, write, bytes, Some(age), now)
                        .unwrap();
                    queued_order.entry((app, vault)).or_default().push(write);
                }
                2 => {
                    let before: BTreeMap<RequestId, State> = queued_order
                        .values()
                        .flatten()
                        .filter_map(|w| Some((*w, outbox.entry(w)?.state.clone())))
                        .collect();
                    for start in outbox.start(now, |_| rng.below(4) > 0, &mut wires) {
                        assert_eq!(
                            before[&start.id],
                            State::Queued,
                            "seed {seed}: started from {:?}",
                            before[&start.id]
                        );
                        let lane = &queued_order[&(start.app, start.vault)];
                        assert!(
                            lane.iter()
                                .all(|w| *w == start.id || before[w] != State::Sending),
                            "seed {seed}: a second write of one lane sending"
                        );
                        assert_eq!(*wire_of.entry(start.id).or_insert(start.wire), start.wire);
                        let order = started_order.entry((start.app, start.vault)).or_default();
                        if order.last() != Some(&start.id) {
                            order.push(start.id);
                        }
                        sending.push(start.id);
                    }
                }
                3 if !sending.is_empty() => {
                    let write = sending.swap_remove(rng.index(sending.len()));
                    let ended = match rng.below(4) {
                        0 => Ended::Final(Fate::Done { revision: step }),
                        1 => Ended::Final(Fate::NotCarriedOut),
                        _ => Ended::NotRun {
                            retry_after_ms: rng.below(50),
                        },
                    };
                    if let Ended::Final(Fate::Done { .. }) = ended {
                        assert!(ran.insert(write), "ran twice");
                    }
                    outbox.ended(&write, ended, now);
                }
                4 => {
                    let all: Vec<RequestId> = queued_order.values().flatten().copied().collect();
                    if !all.is_empty() {
                        let write = all[rng.index(all.len())];
                        if outbox.cancel(&write) == Cancel::Cancelled {
                            assert!(!sending.contains(&write), "cancelled while sending");
                        }
                    }
                }
                5 => {
                    for write in outbox.expire(now) {
                        assert!(!sending.contains(&write), "expired while sending");
                    }
                }
                _ => {
                    // A restart: the store's rows, in queue order; what was sending stays so.
                    let rows: Vec<Entry<&str, &str>> = queued_order
                        .values()
                        .flatten()
                        .filter_map(|write| outbox.entry(write).cloned())
                        .collect();
                    let forgotten = outbox.forgotten_up_to_ms();
                    outbox = Box_::restore(OutboxRules::default(), rows, forgotten);
                    let mut settle: Vec<RequestId> =
                        outbox.to_settle().into_iter().map(|(id, _)| id).collect();
                    settle.sort();
                    sending.sort();
                    assert_eq!(settle, sending, "seed {seed}: what may have left");
                }
            }
            // Every lane started its writes in the order they were queued.
            for (lane, started) in &started_order {
                let queued = &queued_order[lane];
                let positions: Vec<usize> = started
                    .iter()
                    .map(|s| queued.iter().position(|q| q == s).unwrap())
                    .collect();
                assert!(
                    positions.windows(2).all(|w| w[0] < w[1]),
                    "seed {seed}: {positions:?}"
                );
            }
            let waiting: Vec<&Entry<&str, &str>> = outbox
                .lanes()
                .flat_map(|(_, ids)| ids.iter())
                .filter_map(|w| outbox.entry(w))
                .collect();
            assert!(waiting.iter().all(|e| !matches!(e.state, State::Final(_))));
            let bytes = waiting.iter().map(|e| e.bytes).sum::<u64>();
            assert_eq!(
                outbox.waiting(),
                (waiting.len() as u32, bytes),
                "seed {seed}"
            );
        }
        for write in queued_order.values().flatten() {
            if let Some(State::Final(Fate::Cancelled | Fate::Expired)) =
                outbox.entry(write).map(|e| e.state.clone())
            {
                assert!(
                    !ran.contains(write),
                    "seed {seed}: a cancelled or expired write ran"
                );
            }
        }
    }
}
